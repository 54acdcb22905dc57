"""The jobs as the CLI, the spark-submit entry points and library users run them: each picks the source dialect's
pipeline (``cdckit.pipelines.postgres`` for PostgreSQL and YugabyteDB, ``cdckit.pipelines.sqlserver``) from the
configuration's ``connector.class`` and runs it with what every job shares (the paths check, the observer)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any, ParamSpec, TypeAlias, TypeVar, cast

from pyspark.sql import SparkSession

from cdckit.config import Config
from cdckit.observe.publish import Observer
from cdckit.pipelines import checks, status
from cdckit.pipelines.base import Pipeline, read_snapshot_state
from cdckit.pipelines.checks import Check, run_checks
from cdckit.pipelines.ownership import Claim, claim
from cdckit.pipelines.stopping import JobStopped, on_signals
from cdckit.pipelines.streaming import SnapshotReport, StreamReport
from cdckit.spark.cluster import check_paths
from cdckit.spark.session import apply_file_mode
from cdckit.spark.sinks import WriteSummary

P = ParamSpec("P")
R = TypeVar("R", SnapshotReport, StreamReport)
Job: TypeAlias = Callable[P, R]  # run_snapshot, run_stream: (spark, config, ...)

log = logging.getLogger("cdckit")


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


def check(config: Config, *, offline: bool = False) -> list[Check]:
    """Everything a job needs, checked before anything is created (``cdckit.pipelines.checks``)."""
    return run_checks(config, pipeline_for(config).check_source, offline=offline)


def require_ready(config: Config) -> list[Check]:
    """``check``, raising ``NotReadyError`` (one line per problem, each naming its fix) when anything is missing;
    the captured tables found go on to the job that follows (``checks.checked_tables``)."""
    return checks.require_ready(run_checks(config, pipeline_for(config).check_source, hand_on=True))


@contextlib.contextmanager
def undone_on_failure(config: Config) -> Iterator[None]:
    """A job that fails leaves behind nothing it created that no later run continues from (the dialect's
    ``undo_start``: PostgreSQL's new slot and publication), and says what it dropped."""
    try:
        yield
    except BaseException:
        for dropped in pipeline_for(config).undo_start(config):
            log.warning("the job ended before it had anything to continue from: dropped the %s it created", dropped)
        raise


def job_observer(config: Config, on_metrics: Callable[[dict[str, Any]], None] | None = None) -> Observer:
    """The job's metrics and their publishers (``cdckit.observe``), with the source's health; a JSON line per batch
    on stderr only where ``cdckit.metrics.log`` asks. ``on_metrics``: called with every published document (a
    terminal's live view, the command's line per batch)."""
    observer = pipeline_for(config).job_observer(config, json_lines=config.bool("cdckit.metrics.log"))
    if on_metrics is not None:
        observer.listeners.append(on_metrics)
    return observer


def _one_job(command: str) -> Callable[[Job[P, R]], Job[P, R]]:
    """The job holds its claim of the source and the checkpoint while it runs (``claim_job``; the CLI's, taken
    before Spark started, or its own), stops on SIGTERM and SIGINT (``cdckit.pipelines.stopping``), and records in
    the checkpoint's owner file how it ended."""
    def wrap(run: Job[P, R]) -> Job[P, R]:
        @wraps(run)
        def claimed(*args: P.args, **kwargs: P.kwargs) -> R:
            spark, config = cast(SparkSession, args[0]), cast(Config, args[1])
            job = claim_job(config, command)
            stopped_by, outcome = None, "failed"
            try:
                with on_signals(spark.sparkContext.cancelAllJobs) as stop:
                    try:
                        report = run(*args, **kwargs)
                    except (Exception, JobStopped) as failure:
                        if stop.signal_name is None:
                            raise
                        # before a stream's query (a snapshot: its state says it did not finish): JobStopped, or
                        # the failure of the Spark action whose jobs the stop cancelled
                        log.debug("the stop ended the work under way with: %s", failure)
                        report = cast(R, _abandoned(command, config, stop.signal_name))
                stopped_by = report.stopped_by
                outcome = "stopped" if stopped_by else "finished"
                return report
            finally:
                job.release(stopped_by, outcome)
        return claimed
    return wrap


def _abandoned(command: str, config: Config, signal_name: str) -> SnapshotReport | StreamReport:
    if command == "snapshot":
        return SnapshotReport("abandoned", "" if config.is_sqlserver else config.str("slot.name"), "", [],
                              stopped_by=signal_name)
    snapshot = (read_snapshot_state(config) or {}).get("status") == "started"
    return StreamReport(stopped_by=signal_name, abandoned="snapshot" if snapshot else "start")


@_one_job("snapshot")
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
        with undone_on_failure(config):
            return pipeline_for(config).snapshot(spark, config, data=data, observer=observer)
    finally:
        if own:
            observer.close()


@_one_job("stream")
def run_stream(spark: SparkSession, config: Config,
               on_batch: Callable[[int, WriteSummary], None] | None = None,
               on_metrics: Callable[[dict[str, Any]], None] | None = None,
               on_snapshot: Callable[[SnapshotReport], None] | None = None) -> StreamReport:
    """Run the change stream until the trigger says stop (available-now) or ``cdckit.stream.max.batches``.
    ``on_metrics``: called with the job's metrics after every batch and idle trigger (``job_observer``);
    ``on_snapshot``: with the report of the snapshot the stream took first, as soon as it completed."""
    properties = config.as_properties()
    check_paths(spark, properties)
    apply_file_mode(spark, properties)
    started = time.monotonic()
    report = StreamReport()
    observer = job_observer(config, on_metrics)
    if on_snapshot is not None:
        observer.snapshot_listeners.append(on_snapshot)
    try:
        with undone_on_failure(config):
            pipeline_for(config).stream(spark, config, report, observer, on_batch)
    finally:
        observer.close()
    report.seconds = round(time.monotonic() - started, 3)
    return report


def claim_job(config: Config, command: str, confirm: bool = True) -> Claim:
    """Claim the source (PostgreSQL: the slot's advisory lock; SQL Server: the checkpoint's application lock) and
    the checkpoint (its owner file) for this process's job, before Spark starts: ``JobAlreadyRunning`` naming the
    job that has either. The snapshot and stream jobs take the claim where the caller has not, confirm it (the
    owner file read back, ``ownership.Claim.confirm``) where the caller passed ``confirm=False`` to start Spark in
    the meantime, and release it when they end."""
    return claim(config, command, pipeline_for(config).lock_source, confirm=confirm)


def stopped_line(report: StreamReport | SnapshotReport) -> str:
    """The one line a job stopped by SIGTERM or SIGINT ends with."""
    by = f"cdckit: stopped by {report.stopped_by}"
    if isinstance(report, SnapshotReport) or report.abandoned == "snapshot":
        return f"{by} during the snapshot, which was abandoned: the next start takes it again"
    if report.abandoned == "start":
        return f"{by} before the stream started"
    if report.confirmed_flush_lsn:
        where = f"slot confirmed at {report.confirmed_flush_lsn}"
    elif report.last_offset:
        where = f"committed up to {report.last_offset}"
    else:
        where = "no batch committed"
    return f"{by} after {report.batches} batches, {report.events} records; {where}"


def job_status(config: Config) -> dict[str, Any]:
    """Everything ``cdckit status`` shows, as data: the checkpoint's, and the source's."""
    return status.job_status(config, pipeline_for(config))
