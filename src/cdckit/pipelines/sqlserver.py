"""The snapshot and stream jobs for SQL Server (a ``cdckit.pipelines.base.Pipeline``).

Snapshot: per database, check CDC is on and read the max LSN (where streaming will start), then read every
captured table in primary-key chunks in parallel Spark partitions, each reconciled with the change tables
between its low and high watermark; record the chunks' high watermarks so streaming skips what they hold.
Stream: a Structured Streaming query over the change tables from the recorded start.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import asdict
from typing import Any

from pyspark.sql import SparkSession

from cdckit.config import Config
from cdckit.dialect.sqlserver.catalog import (
    CaptureInstance,
    capture_instances,
    check_database,
    check_include_list,
    check_snapshot_list,
    databases,
    snapshot_selected,
)
from cdckit.dialect.sqlserver.changes import agent_running, capture_health, check_readable, max_lsn, require_max_lsn
from cdckit.dialect.sqlserver.connection import connect, server_address
from cdckit.dialect.sqlserver.job_lock import CheckpointLock
from cdckit.dialect.sqlserver.schema_evolution import Rotation, apply_with, plan_for
from cdckit.dialect.sqlserver.snapshot import (
    CHUNKS_OPTION,
    Chunk,
    ChunkFilter,
    ChunkWatermark,
    record_incremental_watermarks,
)
from cdckit.errors import CdcKitError
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium import schema_change
from cdckit.formats.debezium.envelope import TableFormat, check_distinct_topics, format_settings, topic_name
from cdckit.formats.debezium.source import format_sqlserver_lsn, parse_sqlserver_lsn
from cdckit.observe.metrics import ConnectorMetrics
from cdckit.observe.publish import Observer
from cdckit.pipelines.base import clear_earlier_snapshot, read_snapshot_state, snapshot_observed, write_snapshot_state
from cdckit.pipelines.checks import Check, checked_tables
from cdckit.pipelines.ownership import JobAlreadyRunning, describe_owner, read_owner
from cdckit.pipelines.streaming import SnapshotReport, StreamReport, run_query
from cdckit.spark.compat import last_end_offset
from cdckit.spark.options import to_spark_options
from cdckit.spark.progress import counted_source
from cdckit.spark.records import schema_change_record
from cdckit.spark.rows import EVENT_SCHEMA, spark_rows
from cdckit.spark.sinks import Sink, WholeSnapshot, WriteSummary
from cdckit.spark.sources.sqlserver_snapshot import DONE_OPTION, PLAN_OPTION, SqlServerSnapshotDataSource, plan_snapshot
from cdckit.spark.sources.sqlserver_stream import KNOWN_INSTANCES_OPTION, KNOWN_STARTS_OPTION
from cdckit.state import StateStore, join

log = logging.getLogger("cdckit.sqlserver")


CHUNKS = "snapshot/chunks"


def _store(config: Config) -> StateStore:
    return StateStore(config.str("cdckit.checkpoint.location"))


def _previously_captured(config: Config, database: str) -> list[str]:
    state = read_snapshot_state(config) or {}
    return [name.split(".", 1)[1] for name in state.get("tables", []) if name.split(".", 1)[0] == database]


def prepare_source(config: Config) -> tuple[dict[str, str], list[Any]]:
    """Check every database (CDC on, Agent running) and every captured table (types it can map, no two of one
    topic)."""
    options = config.as_properties(include_secrets=True)
    checked = checked_tables(config)  # checked before this job, moments ago
    if checked is not None:
        return options, checked
    settings = format_settings(options)
    instances: list[CaptureInstance] = []
    for database in databases(options):
        with closing(connect(options, database)) as conn:
            cursor = conn.cursor()
            check_database(cursor, database)
            require_max_lsn(cursor, database)
            found = capture_instances(cursor, database, options, _previously_captured(config, database))
        for instance in found:
            TableFormat(instance, settings)  # an unsupported column type is reported now, not in a Spark task
        instances.extend(found)
    check_include_list(options, instances)
    check_snapshot_list(options, instances)
    check_distinct_topics(((i.database, i.schema, i.name), topic_name(settings, i.schema, i.name, i.database))
                          for i in instances)
    return options, instances


def check_source(config: Config) -> tuple[list[Check], list[Any]]:
    """``prepare_source``'s checks (CDC on every database, the Agent, the capture instances and their column types),
    and that the login may read every captured table's changes (``sys.fn_cdc_get_min_lsn`` answers 0x00 to a
    login without SELECT on the captured columns or outside the gating role): ``cdckit.pipelines.checks``."""
    options = config.as_properties(include_secrets=True)
    checks: list[Check] = []
    try:
        _, instances = prepare_source(config)
    except CdcKitError as exc:
        checks.append(Check("source", str(exc), ok=False))
        return checks, []
    names = ", ".join(options.get("database.names", "").split(","))
    checks.append(Check("source", f"SQL Server at {server_address(options)} (databases {names}, login "
                                  f"{options.get('database.user')}): CDC enabled, capture job running or not "
                                  f"reported stopped"))
    problems = []
    for database in databases(options):
        mine = [i for i in instances if i.database == database]
        if not mine:
            continue
        with closing(connect(options, database)) as conn:
            cursor = conn.cursor()
            for instance in mine:
                try:
                    check_readable(cursor, instance, 0)
                except CdcKitError as exc:
                    problems.append(str(exc))
    checks.extend(Check("access", problem, ok=False) for problem in problems)
    if not problems:
        shown = ", ".join(f"{i.database}.{i.qualified_name}" for i in instances[:5]) + (
            f" and {len(instances) - 5} more" if len(instances) > 5 else "")
        checks.append(Check("tables", f"{len(instances)} captured ({shown}), each one's changes readable"))
    return checks, instances


def undo_start(config: Config) -> list[str]:
    """cdckit creates nothing in SQL Server (CDC is enabled by the DBA's scripts): nothing to drop."""
    return []


class CaptureHealth:
    """The capture job's latency and the cleanup margin for the metrics, per database (``changes.capture_health``),
    over connections the driver keeps."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.conns: dict[str, Any] = {}
        self.instances: dict[str, list[str]] = {}  # capture instances per database, read once

    def __call__(self, metrics: ConnectorMetrics) -> dict[str, dict[str, float | None]]:
        found: dict[str, dict[str, float | None]] = {}
        for database in databases(self.options):
            try:
                conn = self.conns.get(database) or connect(self.options, database)
                self.conns[database] = conn
                cursor = conn.cursor()
                if database not in self.instances:
                    self.instances[database] = [i.capture_instance for i in capture_instances(
                        cursor, database, self.options, [])]
                found[database] = capture_health(cursor, database, self.instances[database],
                                                 metrics.last_commit(database))
                metrics.connected(database, True)
            except Exception as exc:  # the metrics say so; the stream goes on
                log.debug("reading the capture job's health in %s failed: %s", database, exc)
                with suppress(Exception):
                    self.conns.pop(database).close()
                metrics.connected(database, False)
        return found

    def close(self) -> None:
        for conn in self.conns.values():
            with suppress(Exception):
                conn.close()


def job_observer(config: Config, json_lines: bool = True) -> Observer:
    """The job's metrics and their publishers, with the capture job's health per database."""
    options = config.as_properties(include_secrets=True)
    return Observer(config.as_properties(include_secrets=False), databases(options), CaptureHealth(options),
                    json_lines=json_lines)


def snapshot(spark: SparkSession, config: Config, *, data: bool, observer: Observer) -> SnapshotReport:
    """Snapshot every captured table; a snapshot that failed part-way resumes, reading only unfinished chunks."""
    state = read_snapshot_state(config)
    if state and state.get("status") == "completed":
        return SnapshotReport("skipped", "", json.dumps(state["consistent_point"]), list(state["tables"]))
    options, instances = prepare_source(config)
    settings = format_settings(options)
    tables: dict[str, list[str]] = {}
    topics = {}
    for instance in instances:
        tables.setdefault(instance.database, []).append(instance.qualified_name)
        topics[TableFormat(instance, settings).topic] = (instance.database, instance.qualified_name)
    source, observer.snapshot_rows = counted_source(spark, SqlServerSnapshotDataSource)
    return snapshot_observed(observer, tables, topics,
                             lambda: _snapshot(spark, config, data, state, options, instances, source))


def _snapshot(spark: SparkSession, config: Config, data: bool, state: dict[str, Any] | None,
              options: dict[str, str], instances: list[CaptureInstance], source: str) -> SnapshotReport:
    started = time.monotonic()
    chunks_dir = join(config.str("cdckit.checkpoint.location"), CHUNKS)
    resuming = bool(state and state.get("status") == "started" and state.get("plan") is not None)
    if resuming:
        assert state is not None
        start, plan = dict(state["consistent_point"]), list(state["plan"])
        log.info("resuming the snapshot: %d of %d chunks are done", len(_finished(config)), len(plan))
    else:
        _store(config).remove(CHUNKS)
        clear_earlier_snapshot(config)
        start = _current_positions(options, instances)
        with_data = data and config.str("snapshot.mode") not in ("schema_only", "no_data")
        selected = [i for i in instances if snapshot_selected(options, i)]  # the others stream from `start`
        plan = [asdict(chunk) for chunk in plan_snapshot(options, selected)] if with_data else []
    tables = [f"{i.database}.{i.qualified_name}" for i in instances]
    write_snapshot_state(config, {"status": "started", "tables": tables, "consistent_point": start, "plan": plan})
    rows: WriteSummary = {}
    if config.bool("include.schema.changes") and not resuming:
        rows.update(_write_schema_changes(spark, config, instances, start))
    if plan:
        done = [mark.get("chunk") for mark in _finished(config)]
        read_options = {**options, PLAN_OPTION: json.dumps(plan), DONE_OPTION: json.dumps(done)}
        frame = spark.read.format(source).options(**to_spark_options(read_options)).load()
        whole = WholeSnapshot(_read_whole(options, instances, plan, done, start), resumed=resuming)
        for topic, count in Sink(spark, options).snapshot(frame, controls_dir=chunks_dir, whole=whole).items():
            rows[topic] = rows.get(topic, 0) + count
    watermarks = _finished(config)
    report = SnapshotReport("completed" if plan or not data else "no_data", "", json.dumps(start), tables,
                            dict(sorted(rows.items())), round(time.monotonic() - started, 3))
    starts = {f"{i.database}.{i.capture_instance}": format_sqlserver_lsn(i.start_lsn) for i in instances}
    known = {f"{i.database}.{i.capture_instance}": f"{i.database}.{i.qualified_name}" for i in instances}
    write_snapshot_state(config, {**asdict(report), "status": "completed", "consistent_point": start, "plan": plan,
                          "watermarks": watermarks, "capture_instance_starts": starts, "capture_instances": known})
    return report


def _current_positions(options: dict[str, str], instances: list[CaptureInstance]) -> dict[str, str]:
    """Each database's maximum LSN now: where a stream that reads what is committed from now on starts."""
    start = {}
    for database in databases(options):
        with closing(connect(options, database)) as conn:
            # No maximum LSN yet: stream everything since the capture instances started.
            first = min((i.start_lsn for i in instances if i.database == database), default=1)
            start[database] = format_sqlserver_lsn(require_max_lsn(conn.cursor(), database) or max(first - 1, 0)) \
                or ""
    return start


def _finished(config: Config) -> list[dict[str, Any]]:
    """Watermarks of the chunks whose records are written (one document per chunk, by the executors; with the
    Delta sink, one document listing them all, by the driver once the tables are committed)."""
    marks: list[dict[str, Any]] = []
    for document in _store(config).list_json(CHUNKS):
        marks.extend(mark for mark in (document if isinstance(document, list) else [document])
                     if isinstance(mark, dict))
    return marks


def _read_whole(options: dict[str, str], instances: list[CaptureInstance], plan: list[dict[str, Any]],
                done: list[Any], start: dict[str, str]) -> dict[str, int]:
    """The topics of the tables this run reads whole (none of their chunks done), each with its database's start
    position, which every chunk's rows are at or after."""
    settings = format_settings(options)
    chunks = [Chunk(**c) for c in plan]
    read = {(c.database, c.schema, c.table) for c in chunks} - {(c.database, c.schema, c.table) for c in chunks
                                                                 if c.id in done}
    return {TableFormat(i, settings).topic: parse_sqlserver_lsn(start[i.database]) for i in instances
            if (i.database, i.schema, i.name) in read and start.get(i.database)}


def _write_schema_changes(spark: SparkSession, config: Config, instances: list[CaptureInstance],
                          start: dict[str, str]) -> WriteSummary:
    """One CREATE schema change record per captured table (a handful of rows, built on the driver)."""
    options = config.as_properties(include_secrets=True)
    settings = format_settings(options)
    rows = []
    for instance in instances:
        change = schema_change.TableChange(
            "CREATE", instance.database, instance.schema, instance.name, instance.key_columns,
            tuple(schema_change.describe_sqlserver_columns(instance.columns, instance.identity_columns)))
        lsn = int(start[instance.database].replace(":", ""), 16) if start.get(instance.database) else 0
        event = ChangeEvent(instance.schema, instance.name, "r", None, None, Position(lsn, lsn, -3), 0,
                            snapshot="true", database=instance.database)
        rows.append(schema_change_record(settings, change, event, instance.qualified_name))
    if not rows:
        return {}
    frame = spark.createDataFrame(spark_rows(rows), EVENT_SCHEMA)  # type: ignore[arg-type]
    return Sink(spark, options).snapshot(frame.coalesce(1))


def stream(spark: SparkSession, config: Config, report: StreamReport, observer: Observer,
           on_batch: Callable[[int, WriteSummary], None] | None) -> None:
    """Do what ``snapshot.mode`` asks, then run a Structured Streaming query over the change tables from the
    recorded start, into ``report``."""
    mode = config.str("snapshot.mode")
    if mode in ("initial", "initial_only"):  # when_needed is refused for SQL Server (config.loader)
        report.snapshot = snapshot(spark, config, data=True, observer=observer)
    elif mode in ("schema_only", "no_data") and not read_snapshot_state(config):
        report.snapshot = snapshot(spark, config, data=False, observer=observer)
    if mode == "initial_only":
        return
    options, instances = prepare_source(config)
    if mode == "never" and not read_snapshot_state(config) and not _store(config).names("stream/offsets"):
        # Where the first run starts, kept before it runs: a run that commits no batch leaves no offset in the
        # checkpoint, and the next must not start at a later maximum LSN (what came in between would be lost).
        write_snapshot_state(config, {"status": "never", "tables": [f"{i.database}.{i.qualified_name}"
                                                                    for i in instances],
                                      "consistent_point": _current_positions(options, instances)})
    state = read_snapshot_state(config) or {}
    if state.get("consistent_point"):
        options["cdckit.stream.start"] = json.dumps(state["consistent_point"])
    options[KNOWN_STARTS_OPTION] = json.dumps(state.get("capture_instance_starts", {}))
    options[KNOWN_INSTANCES_OPTION] = json.dumps(state.get("capture_instances", {}))
    options[CHUNKS_OPTION] = ChunkFilter.to_option([ChunkWatermark(**w) for w in state.get("watermarks", [])])
    query = run_query(spark, config, "cdckit_sqlserver_changes", options, f"cdckit_{config.str('topic.prefix')}",
                      report, on_batch, lambda controls: record_incremental_watermarks(options, controls),
                      observer=observer)
    document = last_end_offset(query)
    if document:
        report.last_offset = json.dumps({db: entry["commit_lsn"] for db, entry in
                                         document.get("databases", {}).items()})


def source_status(config: Config, snapshot: dict[str, Any] | None,
                  last_batch: dict[str, Any] | None) -> dict[str, Any]:
    """The capture job per database, for ``cdckit status``: whether the Agent runs, the maximum LSN, the capture
    instances and their health against the last committed batch's positions."""
    options = config.as_properties(include_secrets=True)
    positions = {}
    if last_batch and isinstance(last_batch["offsets"], dict):
        for database, entry in (last_batch["offsets"].get("databases") or {}).items():
            with suppress(Exception):
                positions[database] = parse_sqlserver_lsn(str(entry["commit_lsn"]))
    found: dict[str, Any] = {}
    for database in databases(options):
        with closing(connect(options, database)) as conn:
            cursor = conn.cursor()
            instances = [i.capture_instance for i in capture_instances(cursor, database, options, [])]
            health = capture_health(cursor, database, instances, positions.get(database))
            found[database] = {"agent_running": agent_running(cursor),
                               "max_lsn": format_sqlserver_lsn(max_lsn(cursor, database)),
                               "capture_instances": instances, **health}
    return found


def stream_positions(config: Config) -> dict[str, int]:
    """The stream's committed position per database, from its Spark checkpoint ({} before the first batch)."""
    store = StateStore(join(config.str("cdckit.checkpoint.location"), "stream"))
    commits = sorted((int(name) for name in store.names("commits") if name.isdigit()), reverse=True)
    if not commits:
        return {}
    text = store.read_text(f"offsets/{commits[0]}") or ""
    document = json.loads(text.splitlines()[-1])
    return {db: parse_sqlserver_lsn(entry["commit_lsn"]) for db, entry in document.get("databases", {}).items()}


def plan_schema_evolution(config: Config) -> list[Rotation]:
    """The schema-evolution job's plan: the capture instance rotations due at the stream's committed position."""
    return plan_for(config.as_properties(include_secrets=True), stream_positions(config))


def apply_schema_evolution(config: Config, rotations: list[Rotation]) -> None:
    apply_with(config.as_properties(include_secrets=True), rotations)


def lock_source(config: Config, command: str) -> CheckpointLock:
    """The checkpoint's application lock in the first captured database (``cdckit.dialect.sqlserver.job_lock``), or
    ``JobAlreadyRunning`` naming the job the checkpoint's owner file names. SQL Server has no slot: jobs with
    checkpoints of their own may read the same change tables."""
    checkpoint = config.str("cdckit.checkpoint.location")
    database = databases(config.as_properties())[0]
    lock = CheckpointLock(config.as_properties(include_secrets=True), database, checkpoint)
    deadline = time.monotonic() + 1.0
    while not lock.acquire():
        if time.monotonic() >= deadline:
            owner = read_owner(checkpoint)
            who = describe_owner(owner) if owner else "a session of another job"
            raise JobAlreadyRunning(
                f"checkpoint {checkpoint} is in use by {who}, which holds its {lock.identity}; two jobs on one "
                f"checkpoint would break each other. Stop that job first (SIGTERM, or Ctrl-C where it runs), or give "
                f"this one another cdckit.checkpoint.location")
        time.sleep(0.25)
    return lock
