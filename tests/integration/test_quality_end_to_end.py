"""`cdckit quality` on the real output of the PostgreSQL jobs: every suite passes and the events reconcile with the
source; a source change the events do not carry is named by key; bad input is one clear line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config

from cdckit.cli import main
from cdckit.pipelines.dispatch import run_snapshot, run_stream

# The quality suites read what other end-to-end tests write: nothing here depends on Spark's release.
pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.version_neutral]


def _write_config(config: Any, path: Path) -> Path:
    path.write_text(json.dumps({"name": "quality-test", "config": config.as_properties(include_secrets=True)}))
    return path


def test_stream_output_passes_every_suite_and_reconciles_with_the_source(
        postgres: Any, spark: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id integer PRIMARY KEY, amount numeric(10,2), placed date, "
                 "at timestamp(3), seen timestamptz, ref uuid, note text, qty smallint, ratio float8)",
            "INSERT INTO public.orders SELECT g, g * 1.25, DATE '2024-01-01' + g, TIMESTAMP '2024-01-01' + g * "
            "INTERVAL '1 minute', now(), gen_random_uuid(), 'n' || g, g, g / 3.0 FROM generate_series(1, 40) g")
    config = make_config(postgres, database, workdir, **{"provide.transaction.metadata": "true"})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.orders (id, amount, note) VALUES (100, 9.99, 'new')",
            "UPDATE public.orders SET amount = amount + 1, note = 'changed' WHERE id <= 5",
            "DELETE FROM public.orders WHERE id BETWEEN 30 AND 33",
            "UPDATE public.orders SET id = 500 WHERE id = 7")
    run_stream(spark, config)
    config_file = _write_config(config, workdir / "connector.json")
    report = workdir / "report"
    status = main(["quality", str(config_file), "--input", str(workdir / "out"), "--report", str(report)])
    output = capsys.readouterr().out
    summary = json.loads((report / "summary.json").read_text())
    assert status == 0, output
    assert summary["success"] is True and "quality passed" in output
    source_rows = fetch(dsn, "SELECT count(*) FROM public.orders")[0][0]
    rows = summary["rows"]
    assert rows["envelopes"] >= 40 + 1 + 5 + 4 + 2 and rows["transactions"] == 4
    assert rows["type_mappings"] == 9 and rows["reconciliation_rows"] == source_rows == 37
    assert (report / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html").exists()

    # a change the events do not carry: reconciliation names the key, the command fails
    execute(dsn, "UPDATE public.orders SET note = 'not streamed' WHERE id = 12")
    status = main(["quality", str(config_file), "--input", str(workdir / "out"), "--report", str(report)])
    output = capsys.readouterr().out
    summary = json.loads((report / "summary.json").read_text())
    assert status == 1
    assert [o["check"] for o in summary["outcomes"] if not o["success"]] == [
        "each key's replayed row equals the source row (missing: not in the events; extra: deleted at the source; "
        "differs: other values)"]
    assert any('[{"key":"id","value":"12"}]: differs' in note for note in summary["notes"]), summary["notes"]
    assert "quality FAILED" in output


def test_quality_input_that_is_not_there_is_one_clear_line(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["quality", "--input", str(workdir / "missing"), "--report", str(workdir / "r")])
    error = capsys.readouterr().out
    assert status == 2
    assert "is not a folder; as a Kafka topic pattern it needs kafka.bootstrap.servers" in error
    assert "Traceback" not in error
    (workdir / "empty").mkdir()
    assert main(["quality", "--input", str(workdir / "empty"), "--report", str(workdir / "r")]) == 2
    assert "holds no record files" in capsys.readouterr().out


KEY_CHECK = ("every event of a table with a key (its primary key, or message.key.columns) carries it (a key added or "
             "dropped meanwhile excepted)")


def test_a_table_with_a_key_whose_events_carry_none_fails_and_a_keyless_one_passes(
        postgres: Any, spark: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.items (id integer PRIMARY KEY, name text)",
            "INSERT INTO public.items SELECT g, 'n' || g FROM generate_series(1, 20) g",
            "CREATE TABLE public.notes (body text)",  # no key: its events' null keys are right
            "INSERT INTO public.notes SELECT 'b' || g FROM generate_series(1, 5) g")
    config = make_config(postgres, database, workdir)
    run_snapshot(spark, config)
    config_file = _write_config(config, workdir / "connector.json")
    report = workdir / "report"
    assert main(["quality", str(config_file), "--input", str(workdir / "out"), "--report", str(report)]) == 0, \
        capsys.readouterr().out
    capsys.readouterr()
    # what a broken producer would write: the keyed table's events without their key
    for path in (workdir / "out" / "it.public.items").glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**record, "key": None}) + "\n" for record in records))
    status = main(["quality", str(config_file), "--input", str(workdir / "out"), "--report", str(report)])
    output = capsys.readouterr().out
    summary = json.loads((report / "summary.json").read_text())
    assert status == 1, output
    [outcome] = [o for o in summary["outcomes"] if o["check"] == KEY_CHECK]
    assert not outcome["success"] and outcome["unexpected"] == 20, outcome
    assert all("it.public.items" in json.dumps(example) for example in outcome["examples"]), outcome["examples"]
