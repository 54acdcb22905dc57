"""What every dialect's pipeline offers the jobs (``Pipeline``), and what the dialects share around a snapshot:
its state in the checkpoint and Debezium's snapshot metrics while it runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from pyspark.sql import SparkSession

from cdckit.config import Config
from cdckit.observe.publish import Observer
from cdckit.pipelines.checks import Check
from cdckit.pipelines.ownership import SourceLock
from cdckit.pipelines.streaming import SnapshotReport, StreamReport
from cdckit.spark.sinks import WriteSummary, clear_snapshot_files
from cdckit.state import StateStore, join

STATE = "snapshot/state.json"
SNAPSHOT_PROGRESS_SECONDS = 1.0  # how often a running snapshot's rows per table are published


class Pipeline(Protocol):
    """One source dialect's jobs (``cdckit.pipelines.postgres``, ``cdckit.pipelines.sqlserver``): each module
    provides these functions; ``cdckit.pipelines.dispatch`` picks the module from the configuration."""

    def prepare_source(self, config: Config) -> tuple[dict[str, str], list[Any]]:
        """Connect and check the source and the captured tables, before Spark starts; the options (with secrets)
        and the tables."""

    def check_source(self, config: Config) -> tuple[list[Check], list[Any]]:
        """Everything the jobs need of the source, checked without creating anything (``cdckit.pipelines.checks``):
        the checks, and the captured tables (none when the source could not be checked)."""

    def undo_start(self, config: Config) -> list[str]:
        """After a job failed: drop what it created at the source that nothing continues from; what was dropped."""

    def job_observer(self, config: Config, json_lines: bool = True) -> Observer:
        """The job's metrics and their publishers, with the source's health."""

    def snapshot(self, spark: SparkSession, config: Config, *, data: bool, observer: Observer) -> SnapshotReport:
        """Take the initial snapshot (only the structures when ``data`` is False)."""

    def stream(self, spark: SparkSession, config: Config, report: StreamReport, observer: Observer,
               on_batch: Callable[[int, WriteSummary], None] | None) -> None:
        """Snapshot first where ``snapshot.mode`` asks, then stream the changes, into ``report``."""

    def source_status(self, config: Config, snapshot: dict[str, Any] | None,
                      last_batch: dict[str, Any] | None) -> dict[str, Any]:
        """What ``cdckit status`` shows of the source: the slot, or the capture job per database."""

    def lock_source(self, config: Config, command: str) -> SourceLock | None:
        """The job's exclusive lock at the source, held until it is closed (``cdckit.pipelines.ownership``);
        ``JobAlreadyRunning`` naming the holder when another job has it; None when the source has no such lock."""


def state_file(config: Config) -> str:
    return join(config.str("cdckit.checkpoint.location"), STATE)


def read_snapshot_state(config: Config) -> dict[str, Any] | None:
    document = StateStore(config.str("cdckit.checkpoint.location")).read_json(STATE)
    return document if isinstance(document, dict) else None


def write_snapshot_state(config: Config, state: dict[str, Any]) -> None:
    StateStore(config.str("cdckit.checkpoint.location")).write_json(STATE, state)


def clear_earlier_snapshot(config: Config) -> None:
    """Remove an earlier snapshot's files before a new snapshot writes (the files sink's; other sinks keep none)."""
    if config.str("cdckit.sink") == "files":
        clear_snapshot_files(config.str("cdckit.output.path"))


def snapshot_observed(observer: Observer, tables: dict[str, list[str]], topics: dict[str, tuple[str, str]],
                      take: Callable[[], SnapshotReport],
                      estimates: dict[str, dict[str, int]] | None = None) -> SnapshotReport:
    """Run ``take`` with Debezium's snapshot metrics around it: ``tables`` per database, ``topics`` naming each
    topic's (database, table) for the rows it got. While it runs, the rows its finished tasks read (the snapshot
    source's accumulator, ``observer.snapshot_rows``) are published every second."""
    observer.metrics.snapshot_started(tables, estimates)
    observer.publish("snapshot")
    done = threading.Event()

    def watch() -> None:
        while not done.wait(SNAPSHOT_PROGRESS_SECONDS):
            counted = observer.snapshot_rows
            if counted is None:
                continue
            for topic, rows in counted().items():
                if topic in topics:
                    observer.metrics.snapshot_rows(*topics[topic], rows)
            observer.publish("progress")

    watcher = threading.Thread(target=watch, daemon=True, name="cdckit-snapshot-progress")
    watcher.start()
    try:
        report = take()
    except BaseException:
        observer.metrics.snapshot_ended(completed=False)
        observer.publish("snapshot")
        raise
    finally:
        done.set()
        watcher.join()
        observer.snapshot_rows = None
    for topic, rows in report.rows_per_topic.items():
        if topic in topics:
            observer.metrics.snapshot_rows(*topics[topic], rows, done=True)
    observer.metrics.snapshot_ended(completed=True)
    observer.publish("snapshot")
    for listener in observer.snapshot_listeners:
        listener(report)
    return report
