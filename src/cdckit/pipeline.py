"""The snapshot and stream jobs for PostgreSQL / YugabyteDB, as the CLI and spark-submit entry points run them.

Snapshot: check the server, discover tables, make sure the publication covers them, create the slot
with an exported snapshot, read every table in parallel Spark partitions under that snapshot, write the
``r`` events, record completion. Streaming then starts exactly at the slot's consistent point.

Stream: (snapshot first when ``snapshot.mode`` asks for one), then a Structured Streaming query over the
slot, checkpointed under ``cdckit.checkpoint.location``/stream.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from cdckit.config import Config
from cdckit.dialect.postgres.catalog import TableInfo, check_server, discover_tables
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.lsn import format_lsn, parse_lsn
from cdckit.dialect.postgres.replication import (
    advance_slot,
    check_slot,
    create_slot,
    create_slot_exporting_snapshot,
    drop_slot,
    ensure_publication,
    slot_status,
)
from cdckit.errors import SnapshotStateError
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.spark.options import to_spark_options
from cdckit.spark.sinks import WriteSummary, write_snapshot, write_stream_batch

log = logging.getLogger("cdckit")


@dataclass
class SnapshotReport:
    status: str  # "completed", "skipped" (already complete) or "no_data"
    slot_name: str
    consistent_point: str
    tables: list[str]
    rows_per_topic: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(self.rows_per_topic.values())


@dataclass
class StreamReport:
    batches: int = 0
    events_per_topic: dict[str, int] = field(default_factory=dict)
    last_offset: str | None = None
    confirmed_flush_lsn: str | None = None
    seconds: float = 0.0
    snapshot: SnapshotReport | None = None

    @property
    def events(self) -> int:
        return sum(self.events_per_topic.values())


def _state_file(config: Config) -> Path:
    return Path(config.str("cdckit.checkpoint.location")) / "snapshot" / "state.json"


def read_snapshot_state(config: Config) -> dict[str, Any] | None:
    path = _state_file(config)
    return json.loads(path.read_text()) if path.exists() else None


def _write_snapshot_state(config: Config, state: dict[str, Any]) -> None:
    path = _state_file(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=2))
    temporary.replace(path)


def prepare_source(config: Config) -> tuple[dict[str, str], list[TableInfo]]:
    """Connect, check the server and the tables, and make sure the publication covers them."""
    options = config.as_properties(include_secrets=True)
    conn = connect(options)
    try:
        check_server(conn, f"{options['database.hostname']}:{options['database.port']}")
        tables = discover_tables(conn, options)
        settings = format_settings(options)
        for table in tables:
            TableFormat(table, settings)  # an unsupported column type is reported now, not in a Spark task
        ensure_publication(conn, options, tables)
    finally:
        conn.close()
    return options, tables


def run_snapshot(spark: SparkSession, config: Config, *, data: bool = True) -> SnapshotReport:
    """Take the initial snapshot (or only create the slot when ``data`` is False, as snapshot.mode=no_data)."""
    started = time.monotonic()
    options, tables = prepare_source(config)
    slot_name = config.str("slot.name")
    state = read_snapshot_state(config)
    conn = connect(options)
    try:
        status = slot_status(conn, slot_name)
        if status is not None:
            check_slot(status, options)
        if state and state.get("status") == "completed":
            if status is None:
                raise SnapshotStateError(
                    f"the snapshot recorded in {_state_file(config)} was taken with replication slot '{slot_name}', "
                    f"which no longer exists, so changes since then are lost to cdckit; delete "
                    f"{config.str('cdckit.checkpoint.location')} to take a new snapshot")
            return SnapshotReport("skipped", slot_name, str(state["consistent_point"]), list(state["tables"]))
        if status is not None:
            if state and state.get("status") == "started" and state.get("slot_name") == slot_name:
                log.warning("an earlier snapshot did not finish; dropping its slot %s and starting again", slot_name)
                drop_slot(conn, slot_name)
            else:
                raise SnapshotStateError(
                    f"replication slot '{slot_name}' already exists but {_state_file(config)} records no snapshot "
                    f"taken with it; to snapshot, choose another slot.name or drop the slot "
                    f"(SELECT pg_drop_replication_slot('{slot_name}')) if nothing else uses it; to stream from it "
                    f"without a snapshot, set snapshot.mode=no_data")
    finally:
        conn.close()

    table_names = [t.qualified_name for t in tables]
    _write_snapshot_state(config, {"status": "started", "slot_name": slot_name, "tables": table_names})
    _clear_snapshot_files(config)
    exported = create_slot_exporting_snapshot(options)
    try:
        rows: WriteSummary = {}
        if data:
            df = snapshot_frame(spark, config, exported.snapshot_name, exported.consistent_point)
            rows = write_snapshot(df, config.str("cdckit.sink"), config.str("cdckit.output.path"))
    finally:
        exported.release()
    report = SnapshotReport("completed" if data else "no_data", slot_name, format_lsn(exported.consistent_point),
                            table_names, rows, round(time.monotonic() - started, 3))
    _write_snapshot_state(config, {"status": "completed", **asdict(report)})
    return report


def snapshot_frame(spark: SparkSession, config: Config, snapshot_name: str, consistent_point: int) -> DataFrame:
    options = config.as_properties(include_secrets=True)
    options["cdckit.snapshot.name"] = snapshot_name
    options["cdckit.snapshot.lsn"] = format_lsn(consistent_point)
    return spark.read.format("cdckit_postgres_snapshot").options(**to_spark_options(options)).load()


def _clear_snapshot_files(config: Config) -> None:
    if config.str("cdckit.sink") != "files":
        return
    output = Path(config.str("cdckit.output.path"))
    for stale in output.glob("*/snapshot-*.jsonl"):
        stale.unlink()


def ensure_stream_start(spark: SparkSession, config: Config) -> SnapshotReport | None:
    """Do what ``snapshot.mode`` asks before streaming; returns the snapshot report when one ran."""
    mode = config.str("snapshot.mode")
    if mode in ("initial", "initial_only"):
        return run_snapshot(spark, config)
    if mode == "no_data" and not read_snapshot_state(config):
        return run_snapshot(spark, config, data=False)
    options, _ = prepare_source(config)
    conn = connect(options)
    try:
        status = slot_status(conn, config.str("slot.name"))
        if status is None:
            create_slot(conn, options)
        else:
            check_slot(status, options)
    finally:
        conn.close()
    return None


def run_stream(spark: SparkSession, config: Config,
               on_batch: Callable[[int, WriteSummary], None] | None = None) -> StreamReport:
    """Run the change stream until the trigger says stop (available-now) or ``cdckit.stream.max.batches``."""
    started = time.monotonic()
    report = StreamReport()
    report.snapshot = ensure_stream_start(spark, config)
    if config.str("snapshot.mode") == "initial_only":
        return report
    options = config.as_properties(include_secrets=True)
    sink, output = config.str("cdckit.sink"), config.str("cdckit.output.path")
    totals: Counter[str] = Counter()
    enough = threading.Event()
    last_batch_id = [-1]
    max_batches = config.int("cdckit.stream.max.batches")

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        summary = write_stream_batch(batch, batch_id, sink, output)
        totals.update(summary)
        report.batches += 1
        last_batch_id[0] = batch_id
        if on_batch is not None:
            on_batch(batch_id, summary)
        if max_batches and report.batches >= max_batches:
            enough.set()

    stream = spark.readStream.format("cdckit_postgres_changes").options(**to_spark_options(options)).load()
    writer = stream.writeStream.foreachBatch(each_batch).option(
        "checkpointLocation", str(Path(config.str("cdckit.checkpoint.location")) / "stream"))
    if config.str("cdckit.trigger") == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        interval = config.str("cdckit.trigger.interval") or f"{config.int('poll.interval.ms')} milliseconds"
        writer = writer.trigger(processingTime=interval)
    query = writer.queryName(f"cdckit_{config.str('slot.name')}").start()
    try:
        while query.isActive:
            if enough.wait(0.05) and _progress_batch(query) >= last_batch_id[0]:
                # Stop once the last counted batch is committed; a batch that started meanwhile is interrupted
                # and replayed by the next run.
                query.stop()
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    report.last_offset = _last_committed_lsn(query)
    if report.last_offset is not None:
        # Spark confirms a batch when it plans the next one; a stopped query plans none, so confirm the last
        # batch Spark completed (its progress is reported only after the batch is committed).
        _acknowledge(config, report.last_offset)
    report.events_per_topic = dict(sorted(totals.items()))
    report.confirmed_flush_lsn = _confirmed_flush(config)
    if config.bool("slot.drop.on.stop"):
        options = config.as_properties(include_secrets=True)
        conn = connect(options)
        try:
            drop_slot(conn, config.str("slot.name"))
        finally:
            conn.close()
        log.warning("dropped replication slot %s (slot.drop.on.stop=true): changes from now on are not kept for "
                    "cdckit", config.str("slot.name"))
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _progress_batch(query: StreamingQuery) -> int:
    """The id of the last batch the query reported complete (committed), or -1."""
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1


def _last_committed_lsn(query: StreamingQuery) -> str | None:
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return None
    end = progress["sources"][0].get("endOffset")
    document = json.loads(end) if isinstance(end, str) else end
    return str(document["lsn"]) if document else None


def _acknowledge(config: Config, lsn: str) -> None:
    options = config.as_properties(include_secrets=True)
    conn = connect(options)
    try:
        advance_slot(conn, config.str("slot.name"), parse_lsn(lsn))
    finally:
        conn.close()


def _confirmed_flush(config: Config) -> str | None:
    options = config.as_properties(include_secrets=True)
    conn = connect(options)
    try:
        status = slot_status(conn, config.str("slot.name"))
    finally:
        conn.close()
    return format_lsn(status.confirmed_flush_lsn) if status else None
