"""Stopping the stream between batches, failing in the middle of one, killing the process: nothing is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, payload, records, replay

from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOPIC = "it.public.ledger"


def _ledger(dsn: str) -> None:
    execute(dsn, "CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)")


def _source(dsn: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(i,): {"id": i, "amount": a} for i, a in fetch(dsn, "SELECT id, amount FROM public.ledger")}


def _write_transactions(dsn: str, count: int, offset: int = 0) -> None:
    statements = []
    for i in range(offset, offset + count):
        statements.append(f"INSERT INTO public.ledger VALUES ({i}, {i})")
        if i % 3 == 0:
            statements.append(f"UPDATE public.ledger SET amount = amount * 2 WHERE id = {i}")
        if i % 5 == 0:
            statements.append(f"DELETE FROM public.ledger WHERE id = {i}")
    execute(dsn, *statements)


def _stream_positions(config: Any) -> list[tuple[int, int, str]]:
    return [(payload(r["value"])["source"]["lsn"], payload(r["value"])["source"]["txId"], payload(r["value"])["op"])
            for r in records(config, TOPIC) if r["value"] is not None and payload(r["value"])["op"] != "r"]


def test_stop_between_batches_and_restart_loses_and_repeats_nothing(postgres: Any, spark: Any, database: str,
                                                                    workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    config = make_config(postgres, database, workdir, **{"max.batch.size": "20"})
    run_snapshot(spark, config)
    _write_transactions(dsn, 60)
    partial = make_config(postgres, database, workdir, **{"max.batch.size": "20", "cdckit.trigger": "processing-time",
                                                          "cdckit.trigger.interval": "100 milliseconds",
                                                          "cdckit.stream.max.batches": "2"})
    first = run_stream(spark, partial)
    assert first.batches >= 2
    assert replay(config, TOPIC) != _source(dsn), "the first run must stop before catching up"
    run_stream(spark, config)
    assert replay(config, TOPIC) == _source(dsn)
    positions = _stream_positions(config)
    assert positions == sorted(positions)
    assert len(positions) == len(set(positions)), "no event may be written twice"


def test_failure_in_the_middle_of_a_batch_replays_that_batch_with_the_same_positions(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    config = make_config(postgres, database, workdir, **{"max.batch.size": "25"})
    run_snapshot(spark, config)
    _write_transactions(dsn, 50)
    written_by_failed_attempt: list[tuple[int, int, str]] = []

    def crash_in_second_batch(batch_id: int, summary: dict[str, int]) -> None:
        if batch_id == 1:
            written_by_failed_attempt.extend(_stream_positions(config))
            raise RuntimeError("simulated crash after the sink wrote batch 1 but before Spark committed it")

    with pytest.raises(Exception, match="simulated crash"):
        run_stream(spark, config, on_batch=crash_in_second_batch)
    assert written_by_failed_attempt, "batch 1 had been written when the crash happened"
    run_stream(spark, config)
    after_restart = _stream_positions(config)
    assert after_restart[:len(written_by_failed_attempt)] == written_by_failed_attempt
    assert replay(config, TOPIC) == _source(dsn)
    assert after_restart == sorted(set(after_restart))


def test_killed_stream_process_restarts_from_the_checkpoint(postgres: Any, spark: Any, database: str,
                                                            workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    config = make_config(postgres, database, workdir, **{"max.batch.size": "200"})
    run_snapshot(spark, config)
    _write_transactions(dsn, 3000)
    config_file = workdir / "connector.json"
    properties = config.as_properties(include_secrets=True)
    properties.update({"cdckit.trigger": "processing-time", "cdckit.trigger.interval": "200 milliseconds"})
    config_file.write_text(json.dumps({"name": "killed", "config": properties}))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    process = subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        out = Path(config.str("cdckit.output.path")) / TOPIC
        deadline = time.monotonic() + 180
        while len(list(out.glob("stream-*.jsonl"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(list(out.glob("stream-*.jsonl"))) >= 3, "the stream process wrote no batches"
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # no goodbye: the JVM and Python workers die mid-flight
        process.wait()
    run_stream(spark, config)
    assert replay(config, TOPIC) == _source(dsn)
    positions = _stream_positions(config)
    assert positions == sorted(set(positions))
