"""`cdckit quality` on cdckit's correct output of a schema with Debezium's own shapes: a serial key beside a
required uuid with a generated default and one without a default, numeric, timestamptz, jsonb, text[], bytea and
an enum; a composite text key; tables without a primary key (REPLICA IDENTITY FULL; one keyed by
message.key.columns; one only inserted into) with duplicate rows, updates and deletes. Deletes under REPLICA
IDENTITY DEFAULT carry Debezium's placeholders for the required columns they did not get, updates leave unchanged
TOASTed values out (``__debezium_unavailable_value``), deletes are followed by tombstones. Every suite passes,
reconciliation matches the source (a table without a key as a multiset of rows), each note is printed once, and a
tampered record or a row the events lack is still caught."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config

from cdckit.cli import main
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.version_neutral]

SCHEMA = (
    "CREATE TYPE public.mood AS ENUM ('calm', 'busy', 'away')",
    "CREATE TABLE public.customers (id serial PRIMARY KEY, uid uuid NOT NULL DEFAULT gen_random_uuid(), "
    "token uuid NOT NULL, "
    "name text NOT NULL, balance numeric(12,2) NOT NULL, joined timestamptz NOT NULL DEFAULT now(), doc jsonb, "
    "tags text[], photo bytea, mood public.mood NOT NULL DEFAULT 'calm', notes text)",
    "CREATE TABLE public.orders (region text, no int, amount numeric(10,2) NOT NULL, placed date NOT NULL, "
    "PRIMARY KEY (region, no))",
    "CREATE TABLE public.audit (at timestamptz NOT NULL, who text NOT NULL, what text)",
    "CREATE TABLE public.ledger (ref text NOT NULL, amount numeric(10,2), memo text)",
    "CREATE TABLE public.journal (line text)",
)


def create_schema(dsn: str, rows: int) -> None:
    """The schema and ``rows`` customers (a few with TOASTed notes), rows / 2 orders, rows / 3 audit rows (each
    twice: identical rows), rows / 10 ledger rows and a few journal lines."""
    big = "(SELECT string_agg(md5(random()::text || x::text), '') FROM generate_series(1, 400) x)"
    execute(dsn, *SCHEMA,
            f"INSERT INTO public.customers (token, name, balance, joined, doc, tags, photo, mood, notes) "
            f"SELECT gen_random_uuid(), 'c' || g, g * 1.25, TIMESTAMPTZ '2024-01-01 00:00+00' + g * INTERVAL '1 hour', "
            f"jsonb_build_object('n', g), ARRAY['a' || g, 'b'], decode(md5(g::text), 'hex'), "
            f"(ARRAY['calm', 'busy', 'away'])[1 + g % 3]::public.mood, "
            f"CASE WHEN g <= 20 THEN {big} ELSE 'short ' || g END FROM generate_series(1, {rows}) g",
            f"INSERT INTO public.orders SELECT (ARRAY['eu', 'us', 'apac'])[1 + g % 3], g, g * 2.5, "
            f"DATE '2024-01-01' + g FROM generate_series(1, {rows // 2}) g",
            f"INSERT INTO public.audit SELECT TIMESTAMPTZ '2024-02-01 00:00+00' + (g % {max(rows // 3, 1)}) * "
            f"INTERVAL '1 minute', 'u' || (g % {max(rows // 3, 1)}), 'seen' FROM generate_series(1, "
            f"{2 * max(rows // 3, 1)}) g",
            f"INSERT INTO public.ledger SELECT 'r' || g, g, 'm' FROM generate_series(1, {max(rows // 10, 2)}) g",
            "INSERT INTO public.journal VALUES ('one'), ('two'), ('two')",
            "ALTER TABLE public.audit REPLICA IDENTITY FULL",
            "ALTER TABLE public.ledger REPLICA IDENTITY FULL")


def change(dsn: str, rows: int) -> None:
    """Inserts, updates (some leaving TOASTed notes unchanged) and deletes on every table but the journal,
    which only gains rows (a table without key or replica identity can only be inserted into)."""
    third = max(rows // 3, 1)
    execute(dsn,
            "INSERT INTO public.customers (token, name, balance) SELECT gen_random_uuid(), 'new' || g, g "
            "FROM generate_series(1, 10) g",
            "UPDATE public.customers SET balance = balance + 1 WHERE id <= 30",  # notes TOASTed, unchanged
            f"UPDATE public.customers SET mood = 'away', tags = NULL WHERE id % 7 = 0 AND id <= {rows}",
            "DELETE FROM public.customers WHERE id % 11 = 0 OR id = 3",  # REPLICA IDENTITY DEFAULT: the key
            "UPDATE public.orders SET amount = amount * 2 WHERE no % 5 = 0",
            "UPDATE public.orders SET region = 'latam' WHERE no = 4",
            "DELETE FROM public.orders WHERE no % 9 = 0",
            "INSERT INTO public.audit VALUES (TIMESTAMPTZ '2024-03-01 00:00+00', 'late', NULL)",
            "UPDATE public.audit SET what = 'checked' WHERE who IN ('u1', 'u2')",  # both copies of each
            f"DELETE FROM public.audit WHERE who IN ('u4', 'u{third - 1}')",
            "DELETE FROM public.audit WHERE ctid IN (SELECT ctid FROM public.audit WHERE who = 'u5' LIMIT 1)",
            "UPDATE public.ledger SET amount = amount + 100 WHERE ref = 'r1'",
            "DELETE FROM public.ledger WHERE ref = 'r2'",
            "INSERT INTO public.journal VALUES ('three'), ('two')")


def _write_config(config: Any, path: Path) -> Path:
    path.write_text(json.dumps({"name": "shapes", "config": config.as_properties(include_secrets=True)}))
    return path


def capture(spark: Any, postgres: Any, database: str, workdir: Path, rows: int, **overrides: str) -> tuple[Any, Path]:
    """The schema captured: snapshot, changes, stream to the end. Returns the configuration and its file."""
    dsn = postgres.dsn(database)
    create_schema(dsn, rows)
    config = make_config(postgres, database, workdir, **{
        "message.key.columns": "public.ledger:ref", "provide.transaction.metadata": "true", **overrides})
    run_snapshot(spark, config)
    change(dsn, rows)
    run_stream(spark, config)
    return config, _write_config(config, workdir / "connector.json")


def _tamper(source: Path, target: Path) -> None:
    """A copy of the output whose first streamed customers create carries a uuid that is not one."""
    import shutil

    shutil.copytree(source, target)
    for path in sorted((target / "it.public.customers").glob("stream-*.jsonl")):
        lines = path.read_text().split("\n")
        for number, line in enumerate(lines):
            if '"op":"c"' in line:
                record = json.loads(line)
                record["value"]["payload"]["after"]["uid"] = "not-a-uuid"
                lines[number] = json.dumps(record, separators=(",", ":"))
                path.write_text("\n".join(lines))
                return
    raise AssertionError("no streamed create of customers to tamper with")


@pytest.mark.parametrize("modes", [
    {},
    {"decimal.handling.mode": "string", "binary.handling.mode": "hex", "time.precision.mode": "connect"},
], ids=["defaults", "string-hex-connect"])
def test_debeziums_own_shapes_pass_every_suite_and_reconcile(
        postgres: Any, spark: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str],
        modes: dict[str, str]) -> None:
    _config, config_file = capture(spark, postgres, database, workdir, 60, **modes)
    dsn = postgres.dsn(database)
    report = workdir / "report"
    status = main(["quality", str(config_file), "--input", str(workdir / "out"), "--report", str(report)])
    output = capsys.readouterr().out
    summary = json.loads((report / "summary.json").read_text())
    assert status == 0, output
    assert summary["success"] is True and "quality passed" in output
    notes = [line for line in output.splitlines() if line.strip().startswith("note:")]
    assert len(notes) == len(set(notes)), output
    rows = summary["rows"]
    source_rows = sum(fetch(dsn, f"SELECT count(*) FROM public.{t}")[0][0]
                      for t in ("customers", "orders", "audit", "ledger", "journal"))
    assert rows["reconciliation_rows"] >= fetch(dsn, "SELECT count(*) FROM public.customers")[0][0]
    counts = next(o for o in summary["outcomes"] if o["suite"] == "reconciliation_counts")
    assert counts["checked"] == 5 and counts["success"], (counts, source_rows)

    # a real defect is still caught
    _tamper(workdir / "out", workdir / "tampered")
    status = main(["quality", str(config_file), "--input", str(workdir / "tampered"), "--report",
                   str(workdir / "report-tampered")])
    output = capsys.readouterr().out
    summary = json.loads((workdir / "report-tampered" / "summary.json").read_text())
    assert status == 1, output
    failed = {o["check"] for o in summary["outcomes"] if not o["success"]}
    assert "UUIDs are canonical text" in failed, failed

    # a source row the events do not carry: the keyless table's reconciliation names it
    execute(dsn, "INSERT INTO public.audit VALUES (TIMESTAMPTZ '2024-04-01 00:00+00', 'unseen', NULL)")
    status = main(["quality", str(config_file), "--input", str(workdir / "out"), "--report", str(report)])
    output = capsys.readouterr().out
    summary = json.loads((report / "summary.json").read_text())
    assert status == 1, output
    assert any("it.public.audit" in note and "unseen" in note and "missing" in note for note in summary["notes"]), \
        summary["notes"]
