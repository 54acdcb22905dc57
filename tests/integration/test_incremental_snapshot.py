"""Incremental (ad hoc) snapshots on PostgreSQL: an ``execute-snapshot`` signal reads a table chunk by chunk while the
stream flows; the output, replayed into a table, equals the source table whatever happens meanwhile."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, fetch, make_config, payload, records, replay

from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
ITEMS = "it.public.items"
LEDGER = "it.public.ledger"
SIGNALS = "public.debezium_signal"


def _tables(dsn: str, rows: int) -> None:
    execute(dsn, "CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)",
            "CREATE TABLE public.items (id integer PRIMARY KEY, name text NOT NULL, qty integer NOT NULL)",
            f"INSERT INTO public.items SELECT i, 'item ' || i, i % 97 FROM generate_series(1, {rows}) AS i",
            f"CREATE TABLE {SIGNALS} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))")


def _signal(dsn: str, kind: str, data: dict[str, Any] | None = None) -> None:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {SIGNALS} (id, type, data) VALUES (%s, %s, %s)",
                        (f"{kind}-{time.monotonic_ns()}", kind, json.dumps(data or {})))
        conn.commit()
    finally:
        conn.close()


def _items(dsn: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(i,): {"id": i, "name": n, "qty": q} for i, n, q in fetch(dsn, "SELECT id, name, qty FROM public.items")}


def _reads(config: Any, topic: str = ITEMS) -> list[dict[str, Any]]:
    return [payload(r["value"]) for r in records(config, topic)
            if r["value"] is not None and payload(r["value"])["op"] == "r"]


def _configs(postgres: Any, database: str, workdir: Path, **settings: str) -> tuple[Any, Any]:
    """The job before the table was added (ledger only), and after (ledger and items, with the signalling table)."""
    before = make_config(postgres, database, workdir, **{"table.include.list": "public.ledger"})
    after = make_config(postgres, database, workdir, **{
        "table.include.list": "public.ledger,public.items", "signal.data.collection": SIGNALS, **settings})
    return before, after


class _Writer(threading.Thread):
    """Updates, deletes and inserts on both tables, one small transaction at a time, until stopped."""

    def __init__(self, dsn: str, rows: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rows = dsn, rows
        self.halt = threading.Event()
        self.transactions = 0

    def run(self) -> None:
        conn = psycopg2.connect(self.dsn)
        rng = random.Random(7)
        try:
            with conn.cursor() as cur:
                while not self.halt.is_set():
                    key = rng.randint(1, self.rows)
                    kind = rng.random()
                    if kind < 0.5:
                        cur.execute("UPDATE public.items SET qty = qty + 1, name = name || '+' WHERE id = %s", (key,))
                    elif kind < 0.7:
                        cur.execute("DELETE FROM public.items WHERE id = %s", (key,))
                    else:
                        cur.execute("INSERT INTO public.items VALUES (%s, 'new', 0) ON CONFLICT (id) DO UPDATE "
                                    "SET name = 'again', qty = items.qty + 5", (rng.randint(1, self.rows * 2),))
                    cur.execute("INSERT INTO public.ledger VALUES (%s, 1) ON CONFLICT (id) DO UPDATE "
                                "SET amount = ledger.amount + 1", (key,))
                    conn.commit()
                    self.transactions += 1
                    time.sleep(0.002)
        finally:
            conn.close()


def test_a_table_added_while_stopped_is_read_in_chunks_while_changes_flow(postgres: Any, spark: Any, database: str,
                                                                          workdir: Path) -> None:
    dsn = postgres.dsn(database)
    rows = 3000
    _tables(dsn, rows)
    before, after = _configs(postgres, database, workdir, **{"incremental.snapshot.chunk.size": "200",
                                                            "max.batch.size": "500"})
    run_snapshot(spark, before)
    execute(dsn, "INSERT INTO public.ledger VALUES (0, 0)")
    run_stream(spark, before)
    run_stream(spark, after)  # the job restarted with items (and the signalling table) in its publication
    ledger_before = len(records(before, LEDGER))
    assert not records(before, ITEMS), "items is captured from now on, and not read yet"

    _signal(dsn, "execute-snapshot", {"data-collections": ["public.items"], "type": "incremental"})
    writer = _Writer(dsn, rows)
    writer.start()
    try:
        run_stream(spark, after)  # available-now: the requested snapshot is part of what is available
    finally:
        writer.halt.set()
        writer.join()
    run_stream(spark, after)  # the changes written since

    reads = _reads(after)
    assert {r["source"]["snapshot"] for r in reads} == {"incremental"}
    assert writer.transactions > 100, "changes flowed during the snapshot"
    # every row is read once at most, and a row is left out only when a change of the same batch carries it
    keys = [r["after"]["id"] for r in reads]
    assert len(keys) == len(set(keys))
    assert 0.5 * rows < len(keys) <= rows + writer.transactions
    windows = {r["source"]["lsn"] for r in reads}
    assert len(windows) >= rows // 500, f"the snapshot was spread over micro-batches ({len(windows)} windows)"
    assert replay(after, ITEMS) == _items(dsn)
    ledger = {(i,): {"id": i, "amount": a} for i, a in fetch(dsn, "SELECT id, amount FROM public.ledger")}
    assert replay(after, LEDGER) == ledger
    assert not [r for r in records(after, LEDGER)[ledger_before:]
                if r["value"] is not None and payload(r["value"])["op"] == "r"], "the other table is not read again"
    # the offsets carry the progress: after the snapshot none is left
    offsets = sorted((Path(after.str("cdckit.checkpoint.location")) / "stream" / "offsets").glob("[0-9]*"),
                     key=lambda p: int(p.name))
    assert "incremental" not in json.loads(offsets[-1].read_text().splitlines()[2])


def test_pause_resume_and_stop(postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    rows = 2000
    _tables(dsn, rows)
    before, started_with = _configs(postgres, database, workdir)
    run_snapshot(spark, before)
    run_stream(spark, started_with)
    _, after = _configs(postgres, database, workdir, **{"incremental.snapshot.chunk.size": "100",
                                                       "max.batch.size": "100", "cdckit.stream.max.batches": "3"})
    _signal(dsn, "execute-snapshot", {"data-collections": ["public\\.ite.*"]})
    run_stream(spark, after)
    started = len(_reads(after))
    assert 0 < started < rows

    _signal(dsn, "pause-snapshot")
    run_stream(spark, after)
    paused = len(_reads(after))
    # at most the windows of the batch the bounded run had planned when it stopped, and of the signal's batch
    assert paused <= started + 200
    run_stream(spark, after)
    assert len(_reads(after)) == paused, "no chunk is read while paused"

    _signal(dsn, "resume-snapshot")
    _, unbounded = _configs(postgres, database, workdir, **{"incremental.snapshot.chunk.size": "100",
                                                           "max.batch.size": "100"})
    run_stream(spark, unbounded)
    assert sorted(r["after"]["id"] for r in _reads(after)) == list(range(1, rows + 1))
    assert replay(after, ITEMS) == _items(dsn)

    # a second snapshot of the table, stopped after a few chunks
    _signal(dsn, "execute-snapshot", {"data-collections": ["public.items"],
                                      "additional-conditions": [{"data-collection": "public.items",
                                                                 "filter": "qty < 50"}]})
    run_stream(spark, after)
    _signal(dsn, "stop-snapshot", {"data-collections": ["public.items"], "type": "incremental"})
    run_stream(spark, unbounded)
    second = _reads(after)[rows:]
    assert second and all(r["after"]["qty"] < 50 for r in second), "the additional condition applies"
    assert len(second) < sum(1 for i in range(1, rows + 1) if i % 97 < 50), "stopped before the end"
    run_stream(spark, unbounded)
    assert len(_reads(after)) == rows + len(second), "nothing is read after the stop"


def test_a_killed_job_resumes_the_snapshot_at_the_next_chunk(postgres: Any, spark: Any, database: str,
                                                            workdir: Path) -> None:
    dsn = postgres.dsn(database)
    rows = 4000
    _tables(dsn, rows)
    before, after = _configs(postgres, database, workdir, **{"incremental.snapshot.chunk.size": "200",
                                                            "max.batch.size": "400"})
    run_snapshot(spark, before)
    run_stream(spark, after)
    _signal(dsn, "execute-snapshot", {"data-collections": ["public.items"]})
    config_file = workdir / "connector.json"
    properties = after.as_properties(include_secrets=True)
    properties.update({"cdckit.trigger": "processing-time", "cdckit.trigger.interval": "100 milliseconds"})
    config_file.write_text(json.dumps({"name": "killed", "config": properties}))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    writer = _Writer(dsn, rows)
    writer.start()
    process = subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(_reads(after)) < 600 and time.monotonic() < deadline:
            time.sleep(0.1)
        read_before_kill = len(_reads(after))
        assert 600 <= read_before_kill < rows, "killed in the middle of the snapshot"
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # mid-flight: the JVM and its Python workers die at once
        process.wait()
        writer.halt.set()
        writer.join()
    run_stream(spark, after)
    reads = _reads(after)
    # resumed from the checkpoint's progress: at most the chunks of the batch the kill interrupted are read again
    assert len(reads) <= rows + writer.transactions + 400
    assert len(reads) - len({r["after"]["id"] for r in reads}) <= 400
    assert replay(after, ITEMS) == _items(dsn)


def test_into_kafka_the_reads_follow_their_batch_changes_per_key(postgres: Any, spark: Any, kafka: Any,
                                                                 database: str, workdir: Path) -> None:
    from kafka_helpers import consume

    dsn = postgres.dsn(database)
    rows = 2000
    _tables(dsn, rows)
    kafka_settings = {"cdckit.sink": "kafka", "kafka.bootstrap.servers": kafka.bootstrap_servers,
                      "topic.prefix": f"inc{database[-6:]}", "topic.creation.default.partitions": "3",
                      "kafka.delivery.timeout.ms": "20000", "kafka.request.timeout.ms": "5000"}
    _, after = _configs(postgres, database, workdir, **{"incremental.snapshot.chunk.size": "250",
                                                       "max.batch.size": "500", **kafka_settings})
    before = make_config(postgres, database, workdir, **{"table.include.list": "public.ledger", **kafka_settings})
    run_snapshot(spark, before)
    run_stream(spark, after)
    _signal(dsn, "execute-snapshot", {"data-collections": ["public.items"]})
    writer = _Writer(dsn, rows)
    writer.start()
    try:
        run_stream(spark, after)
    finally:
        writer.halt.set()
        writer.join()
    run_stream(spark, after)
    state: dict[Any, Any] = {}
    reads = 0
    for record in consume(kafka.bootstrap_servers, f"{kafka_settings['topic.prefix']}.public.items"):
        value = payload(record["value"])
        if value is None:
            continue
        key = payload(record["key"])["id"]
        reads += value["op"] == "r"
        if value["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = value["after"]
    assert reads > rows // 2 and writer.transactions > 100
    assert {(k,): v for k, v in state.items()} == _items(dsn)
