"""The metrics test of ``test_metrics_end_to_end.py`` against the SQL Server model (cdckit_lab.sqlserver_model;
what it models is in its docstring): the endpoint while writes go on and pause, with the capture job's latency and
the cleanup margin."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import idle_reports_every
from test_metrics_end_to_end import (
    assert_lag_rose_and_fell_and_counts_are_written,
    free_port,
    scrape,
    status_text,
    streaming,
    wait_for,
)
from test_sqlserver_end_to_end import model, sqlserver_config

from cdckit.pipelines.dispatch import run_snapshot
from cdckit_lab.sqlserver_model import SqlServerModel

pytestmark = [pytest.mark.spark]
__all__ = ["model"]  # the fixture


class CountingWriter(threading.Thread):
    """Transactions of an insert, an update and a delete, counting what each changed."""

    def __init__(self, model: SqlServerModel) -> None:
        super().__init__(daemon=True)
        self.model, self.stop_event = model, threading.Event()
        self.written = {"c": 0, "u": 0, "d": 0, "transactions": 0}

    def run(self) -> None:
        next_id = 100_000
        while not self.stop_event.is_set():
            with self.model.transaction("testDB") as tx:
                tx.insert("dbo", "customers", {"id": next_id, "email": f"new{next_id}"})
                updated = tx.update("dbo", "customers", {"id": next_id - 1}, {"email": f"upd{next_id}"})
                deleted = tx.delete("dbo", "customers", {"id": 1 + next_id % 500})
            self.written["c"] += 1
            self.written["u"] += updated
            self.written["d"] += deleted
            self.written["transactions"] += 1
            next_id += 1
            self.stop_event.wait(0.005)


def test_lag_counts_and_capture_job_health_on_the_endpoint(model: SqlServerModel, spark: Any, workdir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    with model.transaction("testDB") as tx:
        for i in range(1, 501):
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
    port = free_port()
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers", "max.batch.size": "200",
                                                 "cdckit.trigger": "processing-time",
                                                 "cdckit.trigger.interval": "300 milliseconds",
                                                 "cdckit.metrics.port": str(port)})
    run_snapshot(spark, config)
    samples: list[dict[str, float]] = []

    def scraped() -> bool:
        try:
            samples.append(scrape(port))
        except OSError:
            return False
        return True

    with idle_reports_every(spark, 1000), streaming(spark, config):
        wait_for(scraped, 120, "the endpoint")
        before = samples[-1]["debezium_metrics_MilliSecondsBehindSource"]
        writer = CountingWriter(model)
        writer.start()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            scraped()
            time.sleep(0.3)
        writer.stop_event.set()
        writer.join()
        during = list(samples)
        written = writer.written

        def caught_up() -> bool:
            scraped()
            last = samples[-1]
            return last["debezium_metrics_TotalNumberOfEventsSeen"] == written["c"] + written["u"] + written["d"] \
                and last["debezium_metrics_MilliSecondsBehindSource"] == 0

        wait_for(caught_up, 180, "the stream to take every change and report itself caught up")
        final = samples[-1]
    print(f"{written}; lag before {before} ms, during writes up to "
          f"{max(s['debezium_metrics_MilliSecondsBehindSource'] for s in during)} ms, after "
          f"{final['debezium_metrics_MilliSecondsBehindSource']} ms; capture latency "
          f"{final.get('cdckit_capture_job_latency_seconds')} s; cleanup margin "
          f"{final.get('cdckit_cleanup_margin_seconds')} s")
    assert_lag_rose_and_fell_and_counts_are_written(before, during, final, written)
    # the model's capture job scans at each commit: no latency; no cleanup ran, so every change since the
    # capture instance started is kept before the stream's position
    assert final["cdckit_capture_job_latency_seconds"] == 0
    assert final["cdckit_cleanup_margin_seconds"] >= 8
    status = status_text(config, capsys)
    assert "job: not running (stopped " in status
    assert "source testDB: agent running, max LSN 0000" in status and "capture job latency 0 s" in status
