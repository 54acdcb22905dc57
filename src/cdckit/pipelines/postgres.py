"""The snapshot and stream jobs for PostgreSQL / YugabyteDB (a ``cdckit.pipelines.base.Pipeline``).

Snapshot: check the server, discover tables, make sure the publication covers them, create the slot
with an exported snapshot, read every table in parallel Spark partitions under that snapshot, write the
``r`` events, record completion. Streaming then starts exactly at the slot's consistent point.

Stream: (snapshot first when ``snapshot.mode`` asks for one), then a Structured Streaming query over the
slot, checkpointed under ``cdckit.checkpoint.location``/stream.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg2
from psycopg2 import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from cdckit.config import Config
from cdckit.dialect.postgres.catalog import (
    ESTIMATED_ROWS_SQL,
    captured_names,
    check_access,
    check_server,
    discover_tables,
)
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.job_lock import SlotLock, describe_holder
from cdckit.dialect.postgres.lsn import format_lsn, parse_lsn
from cdckit.dialect.postgres.replication import (
    advance_slot,
    check_slot,
    create_slot,
    create_slot_exporting_snapshot,
    drop_slot,
    ensure_publication,
    plan_publication,
    slot_lost_error,
    slot_retained_wal,
    slot_status,
)
from cdckit.errors import CdcKitError, SnapshotStateError
from cdckit.formats.debezium.envelope import (
    TableFormat,
    check_distinct_topics,
    format_settings,
    heartbeat_topic,
    topic_name,
)
from cdckit.formats.debezium.transaction import transaction_topic
from cdckit.fsutil import private_folder
from cdckit.observe.metrics import ConnectorMetrics
from cdckit.observe.publish import Observer
from cdckit.pipelines.base import (
    clear_earlier_snapshot,
    read_snapshot_state,
    snapshot_observed,
    state_file,
    write_snapshot_state,
)
from cdckit.pipelines.checks import Check, checked_tables
from cdckit.pipelines.ownership import JobAlreadyRunning
from cdckit.pipelines.streaming import SnapshotReport, StreamReport, run_query
from cdckit.spark.compat import last_end_offset
from cdckit.spark.options import to_spark_options
from cdckit.spark.progress import counted_source
from cdckit.spark.rows import STREAM_FILES_OUTPUT, option_bool
from cdckit.spark.schema_history import record_schema_controls, signature
from cdckit.spark.sinks import Sink, WholeSnapshot, WriteSummary, kafka_in_one_pass, source_writes
from cdckit.spark.sources.postgres_snapshot import PostgresSnapshotDataSource
from cdckit.state import StateStore

log = logging.getLogger("cdckit")


def prepare_source(config: Config) -> tuple[dict[str, str], list[Any]]:
    """Connect, check the server and the tables (no two of one topic), and make sure the publication covers them."""
    options = config.as_properties(include_secrets=True)
    checked = checked_tables(config)  # found by the checks before this job, moments ago
    with closing(connect(options)) as conn:
        check_server(conn, f"{options['database.hostname']}:{options['database.port']}")
        tables = checked if checked is not None else _checked_tables(conn, options)
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                        (options.get("publication.name", "dbz_publication"),))
            existed = cur.fetchone() is not None
        conn.commit()
        ensure_publication(conn, options, tables)
        if not existed and options.get("publication.autocreate.mode", "all_tables") != "disabled":
            CREATED.publication = options.get("publication.name", "dbz_publication")
    return options, tables


def _checked_tables(conn: Any, options: dict[str, str]) -> list[Any]:
    """The captured tables, each of its own topic and of column types cdckit maps."""
    tables = discover_tables(conn, options)
    settings = format_settings(options)
    check_distinct_topics(((t.schema, t.name), topic_name(settings, t.schema, t.name)) for t in tables)
    for table in tables:
        TableFormat(table, settings)  # an unsupported column type is reported now, not in a Spark task
    return tables


def check_source(config: Config) -> tuple[list[Check], list[Any]]:
    """Everything ``prepare_source`` and the jobs need of the server, checked without creating anything (the
    publication and the slot are only planned): ``cdckit.pipelines.checks``."""
    options = config.as_properties(include_secrets=True)
    where = f"{options['database.hostname']}:{options['database.port']}"
    checks: list[Check] = []
    try:
        with closing(connect(options)) as conn:
            version = check_server(conn, where)
            checks.append(Check("source", f"PostgreSQL {version} at {where} (database {options['database.dbname']}, "
                                          f"user {options['database.user']}), wal_level=logical"))
            tables = _checked_tables(conn, options)
            problems = check_access(conn, options, tables)
            names = ", ".join(t.qualified_name for t in tables[:5]) + (f" and {len(tables) - 5} more"
                                                                        if len(tables) > 5 else "")
            checks.extend(Check("access", problem, ok=False) for problem in problems)
            if not problems:
                checks.append(Check("tables", f"{len(tables)} captured ({names}), each readable; replication "
                                              f"allowed"))
            try:
                checks.append(Check("publication", plan_publication(conn, options, tables)))
            except CdcKitError as exc:
                checks.append(Check("publication", str(exc), ok=False))
            slot_name = config.str("slot.name")
            status = slot_status(conn, slot_name)
            if status is None:
                checks.append(Check("slot", f"'{slot_name}' will be created"))
            else:
                try:
                    check_slot(status, options)
                    checks.append(Check("slot", f"'{slot_name}' exists, confirmed up to "
                                                f"{format_lsn(status.confirmed_flush_lsn)} ({status.wal_status})"))
                except CdcKitError as exc:
                    checks.append(Check("slot", str(exc), ok=False))
    except CdcKitError as exc:  # no connection, or a server or table list the rest cannot be checked against
        checks.append(Check("source", str(exc), ok=False))
        return checks, []
    return checks, tables


class _Created:
    """What this process created at the source while starting a job: dropped again by ``undo_start`` when the job
    fails before it has anything to continue from."""

    def __init__(self) -> None:
        self.publication: str | None = None
        self.slot: str | None = None


CREATED = _Created()


def undo_start(config: Config) -> list[str]:
    """After a job failed: drop the slot this process created when nothing continues from it (no completed
    snapshot, no stream offsets), and then the publication it created. Returns what was dropped, in words."""
    dropped: list[str] = []
    slot, publication = CREATED.slot, CREATED.publication
    CREATED.slot = CREATED.publication = None
    if slot is None and publication is None:
        return dropped
    state = read_snapshot_state(config) or {}
    if state.get("status") == "completed" or _has_stream_checkpoint(config):
        return dropped  # the slot holds the position the next run continues from
    options = config.as_properties(include_secrets=True)
    try:
        with closing(connect(options)) as conn:
            if slot is not None and slot_status(conn, slot) is not None:
                drop_slot(conn, slot)
                dropped.append(f"replication slot '{slot}'")
            if publication is not None and slot_status(conn, config.str("slot.name")) is None:
                with conn.cursor() as cur:
                    cur.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))
                conn.commit()
                dropped.append(f"publication '{publication}'")
    except Exception as exc:  # the job's own failure is what the user must see; this one is said beside it
        log.warning("could not drop what the failed start created (%s): drop it by hand: %s", exc,
                    "; ".join(filter(None, [
                        slot and f"SELECT pg_drop_replication_slot('{slot}')",
                        publication and f"DROP PUBLICATION {publication}"])))
    return dropped


def job_observer(config: Config, json_lines: bool = True) -> Observer:
    """The job's metrics and their publishers, with the slot's retained WAL."""
    return Observer(config.as_properties(include_secrets=False), [config.str("database.dbname")],
                    SlotHealth(config.as_properties(include_secrets=True), config.str("slot.name")),
                    json_lines=json_lines)


def snapshot(spark: SparkSession, config: Config, *, data: bool, observer: Observer) -> SnapshotReport:
    """Check the server, discover the tables, make sure the publication covers them, create the slot with an
    exported snapshot and read every table under it in parallel Spark partitions (only create the slot when
    ``data`` is False, as snapshot.mode=no_data); record completion."""
    started = time.monotonic()
    options, tables = prepare_source(config)
    slot_name = config.str("slot.name")
    state = read_snapshot_state(config)
    with closing(connect(options)) as conn:
        status = slot_status(conn, slot_name)
        if status is not None:
            check_slot(status, options)
        if state and state.get("status") == "completed":
            if status is None or status.wal_status == "lost":
                raise slot_lost_error(slot_name, status, config.str("cdckit.checkpoint.location"))
            return SnapshotReport("skipped", slot_name, str(state["consistent_point"]), list(state["tables"]))
        if status is not None:
            if state and state.get("status") == "started" and state.get("slot_name") == slot_name:
                log.warning("an earlier snapshot did not finish; dropping its slot %s and starting again", slot_name)
                drop_slot(conn, slot_name)
            else:
                raise SnapshotStateError(
                    f"replication slot '{slot_name}' already exists but {state_file(config)} records no snapshot "
                    f"taken with it; to snapshot, choose another slot.name or drop the slot "
                    f"(SELECT pg_drop_replication_slot('{slot_name}')) if nothing else uses it; to stream from it "
                    f"without a snapshot, set snapshot.mode=never")

    database = config.str("database.dbname")
    settings = format_settings(options)
    topics = {topic_name(settings, t.schema, t.name): (database, t.qualified_name) for t in tables}

    def take() -> SnapshotReport:
        table_names = [t.qualified_name for t in tables]
        # The consistent points of earlier attempts that did not finish: the Delta sink replaces their rows.
        attempts = [int(p) for p in state.get("attempts", [])] if state and state.get("status") == "started" \
            else []
        write_snapshot_state(config, {"status": "started", "slot_name": slot_name, "tables": table_names,
                                      "attempts": attempts})
        clear_earlier_snapshot(config)
        exported = create_slot_exporting_snapshot(options)
        CREATED.slot = slot_name
        attempts.append(exported.consistent_point)
        write_snapshot_state(config, {"status": "started", "slot_name": slot_name, "tables": table_names,
                                      "attempts": attempts})
        try:
            rows: WriteSummary = {}
            if data:
                sink = Sink(spark, options)
                folder = sink.source_writes()
                df = snapshot_frame(spark, config, exported.snapshot_name, exported.consistent_point, folder,
                                    observer)
                whole = WholeSnapshot({topic_name(settings, t.schema, t.name): attempts[0] for t in tables},
                                      resumed=len(attempts) > 1)
                rows = sink.written(df) if folder else sink.snapshot(df, topics=snapshot_topics(options, tables),
                                                                     whole=whole)
        finally:
            exported.release()
        report = SnapshotReport("completed" if data else "no_data", slot_name,
                                format_lsn(exported.consistent_point), table_names, rows,
                                round(time.monotonic() - started, 3))
        # The structures the snapshot read start the schema history, so a change before the first streamed event
        # of a table is still announced.
        record_schema_controls(options, [json.dumps({
            "kind": "schema", "table": t.qualified_name, "key": list(t.key_columns), "columns": signature(t),
            "position": [exported.consistent_point, exported.consistent_point, 0]}) for t in tables])
        write_snapshot_state(config, {"status": "completed", **asdict(report)})
        return report

    return snapshot_observed(observer, {database: [t.qualified_name for t in tables]}, topics, take,
                             {database: {t.qualified_name: t.estimated_rows for t in tables}})


def snapshot_topics(options: dict[str, str], tables: list[Any]) -> list[str]:
    """The topics a PostgreSQL snapshot's records go to, in Debezium's format: one per table, and ``topic.prefix``
    itself for the schema change records (``include.schema.changes``)."""
    return _table_topics(options, [(table.schema, table.name) for table in tables])


def stream_topics(options: dict[str, str]) -> list[str]:
    """The topics a PostgreSQL stream batch's records go to, in Debezium's format, as the catalog has the captured
    tables now: one per table, ``topic.prefix`` (``include.schema.changes``), the heartbeat topic
    (``heartbeat.interval.ms``) and the transaction topic (``provide.transaction.metadata``)."""
    with closing(connect(options)) as conn:
        topics = _table_topics(options, captured_names(conn, options))
    prefix = format_settings(options).topic_prefix
    if int(options.get("heartbeat.interval.ms", "0") or "0") > 0:
        topics.append(heartbeat_topic(prefix, options.get("topic.heartbeat.prefix", "__debezium-heartbeat")))
    if option_bool(options, "provide.transaction.metadata", False):
        topics.append(transaction_topic(prefix, options.get("topic.transaction", "transaction")))
    return topics


def _table_topics(options: dict[str, str], names: list[tuple[str, str]]) -> list[str]:
    settings = format_settings(options)
    topics = [topic_name(settings, schema, name) for schema, name in names]
    if option_bool(options, "include.schema.changes", False):
        topics.append(settings.topic_prefix)
    return topics


def snapshot_frame(spark: SparkSession, config: Config, snapshot_name: str, consistent_point: int,
                   files_output: str | None = None, observer: Observer | None = None) -> DataFrame:
    """The snapshot's records; with ``files_output``, the tasks write them there themselves and the frame holds
    only what they wrote per topic (``Sink.written``). With ``observer``, the tasks report their rows per topic
    (``observer.snapshot_rows``)."""
    options = config.as_properties(include_secrets=True)
    if files_output:
        options["cdckit.snapshot.files.output"] = files_output
    options["cdckit.snapshot.name"] = snapshot_name
    options["cdckit.snapshot.lsn"] = format_lsn(consistent_point)
    # Debezium stamps every snapshot record's source.ts_ms with the time the snapshot started, not the row's read.
    options["cdckit.snapshot.ts_ms"] = str(time.time_ns() // 1_000_000)
    source = "cdckit_postgres_snapshot"
    if observer is not None:
        source, observer.snapshot_rows = counted_source(spark, PostgresSnapshotDataSource)
    return spark.read.format(source).options(**to_spark_options(options)).load()


def ensure_stream_start(spark: SparkSession, config: Config, observer: Observer) -> SnapshotReport | None:
    """Do what ``snapshot.mode`` asks before streaming; returns the snapshot report when one ran."""
    mode = config.str("snapshot.mode")
    if mode == "when_needed":
        _start_over_if_the_slot_cannot_continue(config)
    if mode in ("initial", "initial_only", "when_needed"):
        return snapshot(spark, config, data=True, observer=observer)
    if mode in ("no_data", "schema_only") and not read_snapshot_state(config):
        return snapshot(spark, config, data=False, observer=observer)
    options, _ = prepare_source(config)
    with closing(connect(options)) as conn:
        status = slot_status(conn, config.str("slot.name"))
        started_before = bool(read_snapshot_state(config)) or _has_stream_checkpoint(config)
        if (status is None and started_before) or (status is not None and status.wal_status == "lost"):
            # never create a new slot under a checkpoint: the changes in between would be skipped silently
            raise slot_lost_error(config.str("slot.name"), status, config.str("cdckit.checkpoint.location"))
        if status is None:
            create_slot(conn, options)
            CREATED.slot = config.str("slot.name")
        else:
            check_slot(status, options)
    return None


def _start_over_if_the_slot_cannot_continue(config: Config) -> None:
    """``snapshot.mode=when_needed`` (Debezium's meaning): when the position cdckit recorded is no longer
    available on the server (its slot was dropped, or the server removed the WAL it needs), forget that position
    and take a new snapshot instead of stopping. Files already written by the files sink are kept, set aside in
    each topic's ``superseded-<time>`` folder, so the topic folders read in order again."""
    started_before = bool(read_snapshot_state(config)) or _has_stream_checkpoint(config)
    if not started_before:
        return  # no recorded position: the snapshot runs as with initial
    options = config.as_properties(include_secrets=True)
    slot_name = config.str("slot.name")
    with closing(connect(options)) as conn:
        status = slot_status(conn, slot_name)
        if status is not None and status.wal_status != "lost":
            return  # the slot continues from the recorded position
        reason = "no longer exists" if status is None else f"lost the WAL it needs (wal_status {status.wal_status})"
        log.warning("snapshot.mode=when_needed: replication slot %s %s, so the changes since cdckit's checkpoint "
                    "cannot be read; taking a new snapshot (consumers see every row again as a read)",
                    slot_name, reason)
        if status is not None:
            drop_slot(conn, slot_name)
    store = StateStore(config.str("cdckit.checkpoint.location"))
    store.remove("stream")
    store.remove("snapshot")
    set_aside_written_files(config)


def set_aside_written_files(config: Config) -> None:
    """Move the files sink's snapshot and stream files into ``<topic>/superseded-<UTC time>/`` (kept, not read as
    part of the topic any more): the next snapshot starts the topics over."""
    if config.str("cdckit.sink") != "files":
        return
    output = Path(config.str("cdckit.output.path"))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path in sorted(output.glob("*/snapshot-*.jsonl")) + sorted(output.glob("*/stream-*.jsonl")):
        folder = private_folder(path.parent / f"superseded-{stamp}", follow_link=False)
        path.rename(folder / path.name)


def _has_stream_checkpoint(config: Config) -> bool:
    return bool(StateStore(config.str("cdckit.checkpoint.location")).names("stream/offsets"))


def stream(spark: SparkSession, config: Config, report: StreamReport, observer: Observer,
           on_batch: Callable[[int, WriteSummary], None] | None) -> None:
    """Do what ``snapshot.mode`` asks, then run a Structured Streaming query over the slot (checkpointed under
    ``cdckit.checkpoint.location``/stream) until the trigger says stop; confirm the last committed batch."""
    report.snapshot = ensure_stream_start(spark, config, observer)
    if config.str("snapshot.mode") == "initial_only":
        return
    options = stream_options(spark, config)
    # The change source's partitions are consecutive LSN ranges, each read in position order; a batch of one range
    # goes to Kafka in one pass.
    one_range = options["cdckit.stream.partitions"] == "1" and kafka_in_one_pass(options)
    query = run_query(spark, config, "cdckit_postgres_changes", options, f"cdckit_{config.str('slot.name')}",
                      report, on_batch, lambda controls: record_schema_controls(options, controls),
                      ordered_partitions=True, batch_topics=(lambda: stream_topics(options)) if one_range else None,
                      observer=observer)
    report.last_offset = _last_committed_lsn(query)
    if report.last_offset is not None:
        # Spark confirms a batch when it plans the next one; a stopped query plans none, so confirm the last
        # batch Spark completed (its progress is reported only after the batch is committed).
        _acknowledge(config, report.last_offset)
    report.confirmed_flush_lsn = _confirmed_flush(config)
    if config.bool("slot.drop.on.stop"):
        options = config.as_properties(include_secrets=True)
        with closing(connect(options)) as conn:
            drop_slot(conn, config.str("slot.name"))
        log.warning("dropped replication slot %s (slot.drop.on.stop=true): changes from now on are not kept for "
                    "cdckit", config.str("slot.name"))


class SlotHealth:
    """The replication slot's retained WAL for the metrics (``SlotRetainedWalBytes``), over one connection kept
    by the driver (opened again after a failure, when ``Connected`` turns false)."""

    def __init__(self, options: dict[str, str], slot_name: str) -> None:
        self.options = options
        self.slot_name = slot_name
        self.database = options.get("database.dbname", "")
        self.conn: Any = None

    def __call__(self, metrics: ConnectorMetrics) -> dict[str, dict[str, float | None]]:
        try:
            if self.conn is None or self.conn.closed:
                self.conn = connect(self.options)
            retained = slot_retained_wal(self.conn, self.slot_name)
        except psycopg2.Error:
            if self.conn is not None:
                self.conn.close()
            metrics.connected(self.database, False)
            return {}
        metrics.connected(self.database, True)
        return {self.database: {"SlotRetainedWalBytes": retained}}

    def close(self) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close()


def stream_options(spark: SparkSession, config: Config) -> dict[str, str]:
    """The PostgreSQL change source's options: ``cdckit.stream.partitions`` 0 becomes Spark's parallelism (1 into
    Kafka where a batch can go there in one pass: one task formats while Spark's producer sends, which beats
    several tasks whose batch must be kept and read again to be sent in order; decision 0023), and with the files
    sink without transforms, the tasks write the records themselves (``STREAM_FILES_OUTPUT``)."""
    options = config.as_properties(include_secrets=True)
    if not config.int("cdckit.stream.partitions"):
        options["cdckit.stream.partitions"] = ("1" if kafka_in_one_pass(options)
                                               else str(spark.sparkContext.defaultParallelism))
    folder = source_writes(options)
    if folder:
        options[STREAM_FILES_OUTPUT] = folder
    return options


def _last_committed_lsn(query: StreamingQuery) -> str | None:
    document = last_end_offset(query)
    return str(document["lsn"]) if document else None


def _acknowledge(config: Config, lsn: str, wait_seconds: float = 30.0) -> None:
    """Confirm the last committed batch. A stopped query's interrupted read may hold the slot for a moment
    (its server process is still ending): wait for it rather than leave the batch unconfirmed."""
    options = config.as_properties(include_secrets=True)
    deadline = time.monotonic() + wait_seconds
    with closing(connect(options)) as conn:
        while True:
            try:
                advance_slot(conn, config.str("slot.name"), parse_lsn(lsn), config.str("publication.name"))
                return
            except psycopg2.errors.ObjectInUse:
                conn.rollback()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _confirmed_flush(config: Config) -> str | None:
    options = config.as_properties(include_secrets=True)
    with closing(connect(options)) as conn:
        status = slot_status(conn, config.str("slot.name"))
    return format_lsn(status.confirmed_flush_lsn) if status else None


def source_status(config: Config, snapshot: dict[str, Any] | None,
                  last_batch: dict[str, Any] | None) -> dict[str, Any]:
    """The slot, for ``cdckit status``: whether it exists and is active, its positions and retained WAL, and the
    planner's row estimate of each table the snapshot state names."""
    options = config.as_properties(include_secrets=True)
    slot_name = config.str("slot.name")
    with closing(connect(options)) as conn:
        status = slot_status(conn, slot_name)
        if status is None:
            return {"slot": slot_name, "exists": False}
        retained = slot_retained_wal(conn, slot_name)
        estimates = _table_estimates(conn, (snapshot or {}).get("tables", []))
    return {"slot": slot_name, "exists": True, "active": status.active, "wal_status": status.wal_status,
            "confirmed_flush_lsn": format_lsn(status.confirmed_flush_lsn),
            "restart_lsn": format_lsn(status.restart_lsn), "retained_wal_bytes": retained,
            "estimated_rows": estimates}


def _table_estimates(conn: Any, tables: list[str]) -> dict[str, int]:
    """The planner's row estimate of each table the snapshot state names (what a snapshot's progress is against)."""
    estimates = {}
    with conn.cursor() as cur:
        for name in tables:
            schema, _, table = str(name).partition(".")
            cur.execute(f"SELECT {ESTIMATED_ROWS_SQL} FROM pg_class c JOIN pg_namespace n ON "
                        "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s", (schema, table))
            row = cur.fetchone()
            if row is not None:
                estimates[str(name)] = int(row[0])
    conn.commit()
    return estimates


def lock_source(config: Config, command: str) -> SlotLock | None:
    """The slot's job lock (``cdckit.dialect.postgres.job_lock``), or ``JobAlreadyRunning`` naming the job that
    holds it. A job killed a moment ago holds it until its server process has noticed: tried again for a second."""
    slot_name = config.str("slot.name")
    lock = SlotLock(config.as_properties(include_secrets=True), slot_name, command)
    deadline = time.monotonic() + 1.0
    while True:
        holder = lock.acquire()
        if holder is None:
            return lock if lock.supported else None
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    raise JobAlreadyRunning(
        f"replication slot '{slot_name}' is in use by another cdckit job: {describe_holder(holder)}; two jobs on "
        f"one slot would break each other. Stop that job first (SIGTERM, or Ctrl-C where it runs), or give this one "
        f"its own slot.name and cdckit.checkpoint.location")
