"""Debezium's metrics scraped from the driver's Prometheus endpoint while a stream runs against embedded PostgreSQL
with writes going on and then pausing; ``cdckit status`` on the running and the stopped stream."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, idle_reports_every, make_config
from prometheus_client.parser import text_string_to_metric_families

from cdckit.cli import main
from cdckit.observe.publish import STATUS_FILE
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """``name{database=...}`` (and ``name`` alone for the database-less values) -> value, streaming context."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("context", "streaming") == "streaming" and "table" not in sample.labels:
                found[sample.name] = sample.value
    return found


@contextmanager
def streaming(spark: Any, config: Any) -> Iterator[Callable[[], None]]:
    """Run the stream in a thread; yields what stops it (as a person would, by stopping the query)."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_stream(spark, config)
        except BaseException as exc:
            failures.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()

    def stop() -> None:
        for query in spark.streams.active:
            query.stop()
        runner.join(120)

    try:
        yield stop
    finally:
        stop()
    assert not failures, failures


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def test_lag_counts_and_slot_size_on_the_endpoint_while_writes_go_on_then_pause(
        postgres: Any, spark: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id integer PRIMARY KEY, note text)",
            "INSERT INTO public.orders SELECT g, 'seed' FROM generate_series(1, 100) g")
    port = free_port()
    config = make_config(postgres, database, workdir, **{"cdckit.trigger": "processing-time",
                                                         "cdckit.trigger.interval": "300 milliseconds",
                                                         "max.batch.size": "300", "cdckit.metrics.port": str(port)})
    run_snapshot(spark, config)
    samples: list[dict[str, float]] = []
    written = {"c": 0, "u": 0, "d": 0, "transactions": 0}
    with idle_reports_every(spark, 1000), streaming(spark, config) as stop:
        wait_for(lambda: _scraped(port, samples), 120, "the endpoint")
        before_writes = samples[-1]["debezium_metrics_MilliSecondsBehindSource"]
        next_id = 1000
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:  # about 8 s of writes, faster than 300 changes a batch takes them
            execute(dsn, f"INSERT INTO public.orders SELECT g, 'new' FROM generate_series({next_id}, "
                         f"{next_id + 39}) g",
                    f"UPDATE public.orders SET note = 'changed' WHERE id BETWEEN {next_id} AND {next_id + 9}",
                    f"DELETE FROM public.orders WHERE id BETWEEN {next_id + 10} AND {next_id + 14}")
            written["c"] += 40
            written["u"] += 10
            written["d"] += 5
            written["transactions"] += 3  # execute commits each statement
            next_id += 40
            _scraped(port, samples)
            time.sleep(0.05)
        during = list(samples)
        # PostgreSQL moves a slot's restart point to where it logged the running transactions (every 15 s, and at a
        # checkpoint) once the slot's confirmed position is past it: a checkpoint, then one more change to take
        _autocommit(dsn, "CHECKPOINT")
        execute(dsn, f"INSERT INTO public.orders VALUES ({next_id}, 'after the checkpoint')")
        written["c"] += 1
        written["transactions"] += 1

        def caught_up() -> bool:
            _scraped(port, samples)
            last = samples[-1]
            return last["debezium_metrics_TotalNumberOfEventsSeen"] == sum(written[op] for op in "cud") \
                and last["debezium_metrics_MilliSecondsBehindSource"] == 0

        wait_for(caught_up, 180, "the stream to take every change and report itself caught up")
        final = samples[-1]
        shown: list[str] = []  # the status file is rewritten at most every second: the next one says caught up
        wait_for(lambda: bool(shown.append(status_text(config, capsys)) or "lag 0 ms" in shown[-1]), 30,
                 "cdckit status to show the stream caught up")
        status_running = shown[-1]
        stop()
    stopped = json.loads((workdir / "checkpoint" / STATUS_FILE).read_text())

    print(f"scrapes: {len(samples)}; lag before writes {before_writes} ms, during writes up to "
          f"{max(s['debezium_metrics_MilliSecondsBehindSource'] for s in during)} ms, after "
          f"{final['debezium_metrics_MilliSecondsBehindSource']} ms; slot retained WAL up to "
          f"{max(s['cdckit_slot_retained_wal_bytes'] for s in samples if 'cdckit_slot_retained_wal_bytes' in s)} "
          f"bytes, at stop {stopped['streaming'][database]['SlotRetainedWalBytes']} bytes")
    assert_lag_rose_and_fell_and_counts_are_written(before_writes, during, final, written)
    # the slot's retained WAL shrinks once the batches are committed
    peak = max(s.get("cdckit_slot_retained_wal_bytes", 0) for s in during)
    assert stopped["streaming"][database]["SlotRetainedWalBytes"] < peak
    assert not stopped["running"]
    assert "job: running on " in status_running and "lag 0 ms" in status_running
    assert f"{sum(written[op] for op in 'cud')} events (c {written['c']}, u {written['u']}, d {written['d']})" \
        in status_running
    stopped_text = status_text(config, capsys)
    assert "job: not running (stopped " in stopped_text and "source: slot " in stopped_text


def assert_lag_rose_and_fell_and_counts_are_written(before: float, during: list[dict[str, float]],
                                                    final: dict[str, float], written: dict[str, int]) -> None:
    """The lag rises while writes go on and falls to 0 once the stream has caught up; the counts are what was
    written."""
    assert before <= 0
    # the lag rose: events waited for the trigger (every 300 ms) and their batch; how high depends on the machine
    # (a run that kept up peaked at 294 ms), so the bound is well under one trigger interval
    assert max(s["debezium_metrics_MilliSecondsBehindSource"] for s in during) >= 100
    assert final["debezium_metrics_MilliSecondsBehindSource"] == 0
    assert final["debezium_metrics_TotalNumberOfCreateEventsSeen"] == written["c"]
    assert final["debezium_metrics_TotalNumberOfUpdateEventsSeen"] == written["u"]
    assert final["debezium_metrics_TotalNumberOfDeleteEventsSeen"] == written["d"]
    assert final["debezium_metrics_NumberOfCommittedTransactions"] == written["transactions"]
    assert final["debezium_metrics_Connected"] == 1


def _autocommit(dsn: str, statement: str) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def _scraped(port: int, samples: list[dict[str, float]]) -> bool:
    try:
        samples.append(scrape(port))
    except OSError:
        return False
    return True


def status_text(config: Any, capsys: pytest.CaptureFixture[str]) -> str:
    """What `cdckit status` prints for the configuration."""
    arguments = ["status"]
    for key, value in config.as_properties(include_secrets=True).items():
        arguments += ["--set", f"{key}={value}"]
    capsys.readouterr()
    assert main(arguments) == 0
    return capsys.readouterr().out


def test_a_snapshot_publishes_each_tables_rows_against_its_estimate_as_its_tasks_finish(
        postgres: Any, spark: Any, database: str, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cdckit.pipelines.base
    import cdckit.pipelines.dispatch

    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.big (id integer PRIMARY KEY, note text)",
            "INSERT INTO public.big SELECT g, repeat('x', 50) FROM generate_series(1, 60000) g",
            "CREATE TABLE public.small (id integer PRIMARY KEY)", "INSERT INTO public.small VALUES (1), (2)")
    _autocommit(dsn, "ANALYZE")
    monkeypatch.setattr(cdckit.pipelines.base, "SNAPSHOT_PROGRESS_SECONDS", 0.05)
    config = make_config(postgres, database, workdir, **{"cdckit.snapshot.chunk.rows": "4000"})
    documents: list[dict[str, Any]] = []
    observer = cdckit.pipelines.dispatch.job_observer(config, documents.append)
    try:
        report = run_snapshot(spark, config, observer=observer)
    finally:
        observer.close()
    assert report.rows_per_topic == {"it.public.big": 60000, "it.public.small": 2}
    seen = [d["snapshot"][database]["RowsScanned"]["public.big"] for d in documents if d["event"] == "progress"]
    print(f"{len(seen)} progress reports; public.big rows: {sorted(set(seen))}")
    assert any(0 < rows < 60000 for rows in seen), "the rows must move while the snapshot's job runs"
    assert seen == sorted(seen)
    final = documents[-1]["snapshot"][database]
    assert final["RowsScanned"] == {"public.big": 60000, "public.small": 2}
    assert final["EstimatedRows"] == {"public.big": 60000, "public.small": 2}
    assert final["SnapshotCompleted"] and final["RemainingTableCount"] == 0 and final["TotalTableCount"] == 2
