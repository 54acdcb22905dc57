"""Signals from someone who may write the signal table but nothing else: what a security review reproduced against
embedded PostgreSQL, replayed. Each hostile signal is reported and dropped; the stream goes on, a restart does not
fail on it again, and nothing it asked for reaches the output."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, fetch, make_config, payload, records

from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
ITEMS = "it.public.items"
SIGNALS = "public.debezium_signal"
SECRET = "sk_live_9f8e7d6c5b4a"


def _signal(dsn: str, data: dict[str, Any]) -> None:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {SIGNALS} (id, type, data) VALUES (%s, 'execute-snapshot', %s)",
                        (f"s-{time.monotonic_ns()}", json.dumps(data)))
        conn.commit()
    finally:
        conn.close()


def _reads(config: Any) -> list[dict[str, Any]]:
    return [payload(r["value"]) for r in records(config, ITEMS)
            if r["value"] is not None and payload(r["value"])["op"] == "r"]


def _everything_written(workdir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in workdir.rglob("*") if p.is_file())


def test_hostile_additional_conditions_are_dropped_and_the_stream_goes_on(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE SCHEMA app",
            "CREATE TABLE app.secrets_not_captured (apikey text)",
            f"INSERT INTO app.secrets_not_captured VALUES ('{SECRET}')",
            "CREATE TABLE public.items (id integer PRIMARY KEY, qty integer NOT NULL, note text)",
            "INSERT INTO public.items SELECT i, i % 10, 'hidden ' || i FROM generate_series(1, 300) AS i",
            f"CREATE TABLE {SIGNALS} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))")
    config = make_config(postgres, database, workdir, **{
        "table.include.list": "public.items", "signal.data.collection": SIGNALS,
        "column.exclude.list": "public.items.note", "incremental.snapshot.chunk.size": "100"})
    run_snapshot(spark, config)
    run_stream(spark, config)
    initial = len(_reads(config))
    assert initial == 300
    slot = f"slot_{database}"
    other = f"other_{database}"
    execute(dsn, f"SELECT pg_create_logical_replication_slot('{other}', 'pgoutput')")
    flushed = fetch(dsn, f"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'")

    hostile = [
        # a secret of a table the connector does not capture, into the log and Spark's event log
        "id = CAST((SELECT apikey FROM app.secrets_not_captured LIMIT 1) AS int)",
        # functions in the read-only snapshot transaction: cdckit's own slot, and another consumer's
        f"pg_replication_slot_advance('{slot}', pg_current_wal_lsn()) IS NOT NULL",
        f"pg_drop_replication_slot('{other}') IS NULL",
        # a column column.exclude.list hides
        "note LIKE 'hidden 1%'",
        # one expression that parses but fails on the table (a type error): caught by the planning's empty read
        "qty = 'many'",
    ]
    for condition in hostile:
        # one batch each: a table already requested is not requested twice
        _signal(dsn, {"data-collections": ["public.items"],
                      "additional-conditions": [{"data-collection": "public.items", "filter": condition}]})
        run_stream(spark, config)
    execute(dsn, "INSERT INTO public.items VALUES (301, 1, 'after the signals')")
    run_stream(spark, config)
    run_stream(spark, config)  # a restart does not fail on them again

    assert len(_reads(config)) == initial, "no hostile signal read a row"
    changes = [payload(r["value"]) for r in records(config, ITEMS) if r["value"] is not None]
    assert [c["after"]["id"] for c in changes if c["op"] == "c"] == [301], "the stream goes on"
    assert fetch(dsn, f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{other}'") == [(1,)]
    after = fetch(dsn, f"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'")
    assert after >= flushed  # moved by the stream's own acknowledgements only; nothing was skipped (301 came)
    # each is reported once (an ERROR line where the stream's source plans: Spark's Python worker, whose output
    # does not reach this process); the secret is nowhere in what the job wrote
    assert SECRET not in _everything_written(workdir)

    # a harmless filter still works after all that
    _signal(dsn, {"data-collections": ["public.items"],
                  "additional-conditions": [{"data-collection": "public.items", "filter": "qty = 3 AND id < 100"}]})
    run_stream(spark, config)
    run_stream(spark, config)
    assert sorted(r["after"]["id"] for r in _reads(config)[initial:]) == [i for i in range(1, 100) if i % 10 == 3]


def test_a_backtracking_data_collections_pattern_does_not_stall_the_driver(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    name = "t" + "a" * 59
    execute(dsn, f"CREATE TABLE public.{name} (id integer PRIMARY KEY)",
            f"INSERT INTO public.{name} SELECT generate_series(1, 10)",
            f"CREATE TABLE {SIGNALS} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))")
    config = make_config(postgres, database, workdir, **{"table.include.list": f"public.{name}",
                                                         "signal.data.collection": SIGNALS})
    run_snapshot(spark, config)
    run_stream(spark, config)
    # hours for a backtracking engine over a 66-character name; RE2 answers in linear time
    _signal(dsn, {"data-collections": ["(.?){60}Z"]})
    _signal(dsn, {"data-collections": [f"public\\.{name}"]})
    started = time.monotonic()
    run_stream(spark, config)
    run_stream(spark, config)
    assert time.monotonic() - started < 120
    reads = [payload(r["value"]) for r in records(config, f"it.public.{name}")
             if r["value"] is not None and payload(r["value"])["op"] == "r"]
    assert len(reads) == 10 + 10  # the initial snapshot's and the second signal's; the first matched nothing
