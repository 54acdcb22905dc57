"""The jobs as the CLI, the spark-submit entry points and library users run them: each picks the source dialect's
pipeline (``cdckit.pipelines.postgres`` for PostgreSQL and YugabyteDB, ``cdckit.pipelines.sqlserver``) from the
configuration's ``connector.class`` and runs it with what every job shares (the paths check, the observer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from cdckit.config import Config
from cdckit.observe.publish import Observer
from cdckit.pipelines import status
from cdckit.pipelines.base import Pipeline
from cdckit.pipelines.streaming import SnapshotReport, StreamReport
from cdckit.spark.cluster import check_paths
from cdckit.spark.session import apply_file_mode
from cdckit.spark.sinks import WriteSummary


def pipeline_for(config: Config) -> Pipeline:
    """The source dialect's pipeline module (SQL Server's is imported only for SQL Server: it needs pyodbc)."""
    if config.is_sqlserver:
        from cdckit.pipelines import sqlserver

        return sqlserver
    from cdckit.pipelines import postgres

    return postgres


def prepare_source(config: Config) -> tuple[dict[str, str], list[Any]]:
    """Connect, check the server and the captured tables (for PostgreSQL, make sure the publication covers them),
    before Spark starts."""
    return pipeline_for(config).prepare_source(config)


def job_observer(config: Config, on_metrics: Callable[[dict[str, Any]], None] | None = None) -> Observer:
    """The job's metrics and their publishers (``cdckit.observe``), with the source's health. ``on_metrics``: called
    with every published document (a terminal's live view, which then replaces the JSON lines)."""
    observer = pipeline_for(config).job_observer(config, json_lines=on_metrics is None)
    if on_metrics is not None:
        observer.listeners.append(on_metrics)
    return observer


def run_snapshot(spark: SparkSession, config: Config, *, data: bool = True,
                 observer: Observer | None = None) -> SnapshotReport:
    """Take the initial snapshot (or only create the slot when ``data`` is False, as snapshot.mode=no_data).
    ``observer``: the stream's metrics, when the snapshot runs before it (else the snapshot has its own)."""
    properties = config.as_properties()
    check_paths(spark, properties)
    apply_file_mode(spark, properties)
    own = observer is None
    observer = observer or job_observer(config)
    try:
        return pipeline_for(config).snapshot(spark, config, data=data, observer=observer)
    finally:
        if own:
            observer.close()


def run_stream(spark: SparkSession, config: Config,
               on_batch: Callable[[int, WriteSummary], None] | None = None,
               on_metrics: Callable[[dict[str, Any]], None] | None = None) -> StreamReport:
    """Run the change stream until the trigger says stop (available-now) or ``cdckit.stream.max.batches``.
    ``on_metrics``: called with the job's metrics after every batch and idle trigger (``job_observer``)."""
    properties = config.as_properties()
    check_paths(spark, properties)
    apply_file_mode(spark, properties)
    started = time.monotonic()
    report = StreamReport()
    observer = job_observer(config, on_metrics)
    try:
        pipeline_for(config).stream(spark, config, report, observer, on_batch)
    finally:
        observer.close()
    report.seconds = round(time.monotonic() - started, 3)
    return report


def job_status(config: Config) -> dict[str, Any]:
    """Everything ``cdckit status`` shows, as data: the checkpoint's, and the source's."""
    return status.job_status(config, pipeline_for(config))
