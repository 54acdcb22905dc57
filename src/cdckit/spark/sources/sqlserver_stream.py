"""Spark streaming data source over SQL Server CDC change tables.

Offsets: ``{"databases": {"<db>": {"commit_lsn": "00000027:00000758:0005", "change_lsn": null,
"event_serial_no": null}}, "capture_instance_starts": {"<db>.<capture instance>": "00000025:00000d08:0001"}}``:
Debezium's offset keys per database of ``database.names``, and the start LSN each capture instance had when the
stream first met it (the purged-changes guard compares it with the instance's start LSN now; being in the
offsets, it survives restarts with the position it belongs to). A batch holds every change with commit LSN in
``(start, end]`` of each database with new changes: whole transactions, at most ``max.batch.size`` changes
shared out among those databases, at most ``max.iteration.transactions`` transactions per database. Each
capture instance is read in its own partition; with ``provide.transaction.metadata`` one partition per database
keeps transactions whole across tables. After a snapshot, changes a snapshot chunk already reflects (commit LSN
<= the chunk's high watermark) are skipped, so replaying per key never goes back in time.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from cdckit.dialect.incremental import Progress
from cdckit.dialect.signals import Signal, check_columns, parse_signal
from cdckit.dialect.sqlserver.catalog import CaptureInstance, capture_instances
from cdckit.dialect.sqlserver.changes import (
    PurgedChangesError,
    check_readable,
    fold_changes,
    pending_end,
    read_changes,
    require_max_lsn,
    server_utc_offset_minutes,
)
from cdckit.dialect.sqlserver.connection import connect
from cdckit.dialect.sqlserver.queries import quote_name, try_condition
from cdckit.dialect.sqlserver.snapshot import (
    Chunk,
    ChunkFilter,
    ChunkWatermark,
    chunk_key,
    last_key,
    next_boundary,
    plan_chunks,
    read_incremental_watermarks,
    signal_instance,
)
from cdckit.errors import first_line
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import TableFormat, format_settings, heartbeat_messages, heartbeat_topic
from cdckit.formats.debezium.source import format_sqlserver_lsn, parse_sqlserver_lsn
from cdckit.spark.compat import ReadLimit, SelfBoundedReader, SupportsTriggerAvailableNow
from cdckit.spark.options import from_spark_options
from cdckit.spark.records import record_builder, schema_change_record
from cdckit.spark.rows import EVENT_SCHEMA, EventRow, arrow_batches, now_ms, option_bool, record, with_stats
from cdckit.spark.sources.sqlserver_snapshot import read_snapshot_chunk

log = logging.getLogger("cdckit.sqlserver")
KNOWN_STARTS_OPTION = "cdckit.sqlserver.known.starts"  # {"db.capture_instance": start LSN at the snapshot}
KNOWN_INSTANCES_OPTION = "cdckit.sqlserver.known.instances"  # {"db.capture_instance": "db.schema.table"}
STARTS_KEY = "capture_instance_starts"
INCREMENTAL_KEY = "incremental"  # {"<db>": the database's incremental snapshot progress (dialect/incremental.py)}
WINDOW_KEY = "window"  # {"<db>": the incremental snapshot chunks the batch reads}
MAX_CHUNKS_PER_BATCH = 64


def offset(positions: dict[str, int], starts: dict[str, int]) -> dict[str, Any]:
    return {"databases": {db: {"commit_lsn": format_sqlserver_lsn(lsn), "change_lsn": None, "event_serial_no": None}
                          for db, lsn in sorted(positions.items())},
            STARTS_KEY: {name: format_sqlserver_lsn(lsn) for name, lsn in sorted(starts.items())}}


def positions(document: dict[str, Any]) -> dict[str, int]:
    return {db: parse_sqlserver_lsn(entry["commit_lsn"]) for db, entry in document["databases"].items()}


def instance_key(instance: CaptureInstance) -> str:
    return f"{instance.database}.{instance.capture_instance}"


def recorded_starts(document: dict[str, Any], options: dict[str, str]) -> dict[str, int]:
    """The capture instances' start LSNs recorded in an offset ``document``, over those the snapshot recorded
    (an offset written before cdckit recorded them has none)."""
    recorded = {**json.loads(options.get(KNOWN_STARTS_OPTION, "{}")), **document.get(STARTS_KEY, {})}
    return {name: parse_sqlserver_lsn(lsn) for name, lsn in recorded.items() if lsn}


def met_starts(document: dict[str, Any], options: dict[str, str], instances: list[CaptureInstance]
               ) -> dict[str, int]:
    """The start LSN of every capture instance in ``instances`` (and the older instance of a table being rotated)
    as the stream first met it: as recorded in the offset ``document`` or by the snapshot, else its start LSN now
    (the stream meets it now). Instances no longer there are forgotten."""
    recorded = recorded_starts(document, options)
    return {instance_key(instance): recorded.get(instance_key(instance), instance.start_lsn)
            for newest in instances for instance in (newest, newest.previous) if instance is not None}


class ChangeRangePartition(InputPartition):
    def __init__(self, database: str, instances: tuple[CaptureInstance, ...], start: int, end: int,
                 starts: dict[str, int], watermarks: str = "[]", resnapshot: frozenset[str] = frozenset()) -> None:
        super().__init__((database, tuple(i.capture_instance for i in instances), start, end))
        self.database = database
        self.instances = instances
        self.start = start
        self.end = end
        self.starts = {instance_key(i): starts[instance_key(i)] for i in instances if instance_key(i) in starts}
        self.watermarks = watermarks  # incremental snapshot chunks of earlier batches (JSON)
        self.resnapshot = resnapshot  # capture instances re-snapshotted in this batch: purged changes accepted


class HeartbeatPartition(InputPartition):
    """A heartbeat record for a batch that moves offsets (``heartbeat.interval.ms``)."""

    def __init__(self, position: int) -> None:
        super().__init__(("heartbeat", position))
        self.position = position


class IncrementalChunkPartition(InputPartition):
    """One chunk of an ad hoc incremental snapshot a signal asked for."""

    def __init__(self, instance: CaptureInstance, chunk: Chunk, condition: str | None) -> None:
        super().__init__(("incremental", chunk.id))
        self.instance = instance
        self.chunk = chunk
        self.condition = condition


class SqlServerChangeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cdckit_sqlserver_changes"

    def schema(self) -> str:
        return EVENT_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SqlServerChangeStreamReader(from_spark_options(self.options))


class SqlServerChangeStreamReader(SelfBoundedReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.databases = [d.strip() for d in options["database.names"].split(",") if d.strip()]
        self.max_transactions = int(options.get("max.iteration.transactions", "0"))
        self._target: dict[str, int] | None = None
        self._conns: dict[str, Any] = {}
        self.heartbeat_ms = int(options.get("heartbeat.interval.ms", "0"))
        self._last_heartbeat = time.monotonic()
        # the signal table's capture instance per database, as read to plan the batch that ends at the offset
        self._planned_signals: tuple[str, dict[str, CaptureInstance | None]] | None = None

    def _cursor(self, database: str) -> Any:
        if database not in self._conns:
            self._conns[database] = connect(self.options, database)
        return self._conns[database].cursor()

    def initialOffset(self) -> dict[str, Any]:
        start = json.loads(self.options.get("cdckit.stream.start", "{}"))
        found = {}
        instances: list[CaptureInstance] = []
        for database in self.databases:
            cursor = self._cursor(database)
            if database in start:
                found[database] = parse_sqlserver_lsn(start[database])
            else:
                found[database] = require_max_lsn(cursor, database) or 0
            instances.extend(capture_instances(cursor, database, self.options))
        document = offset(found, met_starts({}, self.options, instances))
        self.started(document)
        return document

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {db: require_max_lsn(self._cursor(db), db) or 0 for db in self.databases}

    def next_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = positions(start)
        if self.options.get("cdckit.sqlserver.schema.evolution", "job") == "stream":
            from cdckit.dialect.sqlserver import schema_evolution

            # Everything up to ``start`` is committed: the same rotation the schema-evolution job would do.
            rotations = schema_evolution.plan_for(self.options, begin)
            for rotation in rotations:
                log.warning("schema evolution: %s of capture instance %s (%s)", rotation.action,
                            rotation.capture_instance, rotation.reason)
            schema_evolution.apply_with(self.options, rotations)

        everywhere: list[CaptureInstance] = []
        listed: dict[str, list[CaptureInstance]] = {}
        moved = []  # the databases with something new: (database, cursor, capture instances, max LSN)
        for database in self.databases:
            cursor = self._cursor(database)
            instances = listed[database] = capture_instances(cursor, database, self.options)
            everywhere.extend(instances)
            upto = self._target[database] if self._target else require_max_lsn(cursor, database)
            if upto is not None and upto > begin.get(database, 0):
                moved.append((database, cursor, instances, upto))
        # Every database with something new advances in this batch: each takes an equal part of what is left of
        # the budget (so a busy database cannot hold the others back), in database.names order; a part one leaves
        # unused goes to those after it.
        budget = self.batch_bound(limit)
        latest = dict(begin)
        changes, left_behind = 0, False
        for index, (database, cursor, instances, upto) in enumerate(moved):
            share = max(1, budget // (len(moved) - index))
            end, admitted = pending_end(cursor, instances, begin.get(database, 0), upto, share, self.max_transactions)
            if end is not None:
                latest[database] = end
            changes += admitted
            left_behind = left_behind or end is None or end < upto
            budget = max(0, budget - admitted)
        self.sizes.planned(changes, left_behind)
        document = offset(latest, met_starts(start, self.options, everywhere))
        self._incremental(start, document, begin, latest, budget, listed)
        return document

    def _incremental(self, start: dict[str, Any], end: dict[str, Any], begin: dict[str, int], latest: dict[str, int],
                     budget: int, listed: dict[str, list[CaptureInstance]]) -> None:
        """Each database's incremental snapshot in the batch's ``end``: the next chunks it reads (up to the rows
        left of the batch's budget, at least one), then the progress once the signals committed in the batch's range
        are applied (they take effect from the next batch). ``listed`` holds each database's capture instances, as
        ``next_offset`` read them for this batch."""
        chunk_rows = int(self.options.get("incremental.snapshot.chunk.size", "1024"))
        progresses = start.get(INCREMENTAL_KEY) or {}
        signals: dict[str, CaptureInstance | None] = {}
        for database in self.databases:
            progress = Progress.from_offset({INCREMENTAL_KEY: progresses.get(database)})
            signal = signals[database] = signal_instance(self._cursor(database), database, self.options)
            if not progress.active and (signal is None or latest.get(database, 0) <= begin.get(database, 0)):
                continue
            cursor = self._cursor(database)
            instances = [i for i in listed[database]
                         if signal is None or i.capture_instance != signal.capture_instance]
            chunks: list[dict[str, Any]] = []
            if progress.runnable:
                wanted = max(1, min(MAX_CHUNKS_PER_BATCH, budget // max(1, chunk_rows)))
                chunks, progress = _next_chunks(cursor, progress, instances, chunk_rows, wanted)
                budget = max(0, budget - len(chunks) * chunk_rows)
            if signal is not None and latest.get(database, 0) > begin.get(database, 0):
                found = _signals(cursor, signal, begin.get(database, 0), latest[database])
                progress = progress.after(found, [(i.schema, i.name) for i in instances], "tsql", f"{database}.")
            document = progress.to_json()
            if document is not None:
                end.setdefault(INCREMENTAL_KEY, {})[database] = document
            if chunks:
                end.setdefault(WINDOW_KEY, {})[database] = chunks
        self._planned_signals = (json.dumps(end, sort_keys=True), signals)

    def _signals_for(self, end: dict[str, Any]) -> dict[str, CaptureInstance | None]:
        """The signal table's capture instance per database, as read to plan the batch that ends at ``end``; empty
        for a batch replayed after a restart (read again then)."""
        if self._planned_signals is not None and self._planned_signals[0] == json.dumps(end, sort_keys=True):
            return self._planned_signals[1]
        return {}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self.planned(end)
        begin, finish = positions(start), positions(end)
        starts = recorded_starts(end, self.options)
        together = option_bool(self.options, "provide.transaction.metadata", False)
        watermarks = json.dumps(read_incremental_watermarks(self.options))
        partitions: list[InputPartition] = []
        listed: dict[str, tuple[CaptureInstance, ...]] = {}  # each database's capture instances, once per batch
        planned_signals = self._signals_for(end)
        for database in self.databases:
            if finish.get(database, 0) <= begin.get(database, 0):
                continue
            cursor = self._cursor(database)
            known = json.loads(self.options.get(KNOWN_INSTANCES_OPTION, "{}"))
            previously = [table.split(".", 1)[1] for table in known.values() if table.startswith(f"{database}.")]
            signal = planned_signals[database] if database in planned_signals else signal_instance(
                cursor, database, self.options)
            instances = listed[database] = tuple(
                i for i in capture_instances(cursor, database, self.options, previously)
                if signal is None or i.capture_instance != signal.capture_instance)
            purged = self._purged(cursor, instances, begin.get(database, 0), starts)
            resnapshot = frozenset(i.capture_instance for i in purged)
            low, high = begin.get(database, 0), finish[database]
            rotating = [i for i in instances if i.previous is not None]
            steady = tuple(i for i in instances if i.previous is None)
            groups = [steady] if together else [(instance,) for instance in steady]
            partitions.extend(ChangeRangePartition(database, group, low, high, starts, watermarks, resnapshot)
                              for group in groups if group)
            for instance in rotating:  # the old instance before the switch, the new one from it
                assert instance.previous is not None
                switch = instance.start_lsn
                if low < switch - 1:
                    partitions.append(ChangeRangePartition(database, (instance.previous,), low,
                                                           min(high, switch - 1), starts, watermarks, resnapshot))
                if high >= switch:
                    partitions.append(ChangeRangePartition(database, (instance,), max(low, switch - 1), high,
                                                           starts, watermarks, resnapshot))
            chunk_rows = int(self.options.get("incremental.snapshot.chunk.size", "1024"))
            for instance in purged:
                log.warning("changes of %s.%s were purged before cdckit read them: taking a new snapshot of the "
                            "table (cdckit.sqlserver.purged.changes=resnapshot)", database, instance.qualified_name)
                partitions.extend(IncrementalChunkPartition(instance, chunk, None)
                                  for chunk in plan_chunks(cursor, instance, chunk_rows))
        for database, chunks in sorted((end.get(WINDOW_KEY) or {}).items()):
            known_now = listed.get(database)
            if known_now is None:  # a window in a batch without changes of its database
                known_now = tuple(capture_instances(self._cursor(database), database, self.options))
            by_table = {(i.schema, i.name): i for i in known_now}
            for chunk in chunks:
                found = by_table.get((chunk["schema"], chunk["table"]))
                if found is None:
                    log.error("incremental snapshot chunk of %s.%s.%s skipped: the table has no capture instance "
                              "now", database, chunk["schema"], chunk["table"])
                    continue
                partitions.append(IncrementalChunkPartition(found, Chunk(
                    database, chunk["schema"], chunk["table"], int(chunk["index"]), chunk["lower"], chunk["upper"]),
                    chunk.get("condition")))  # a chunk of an offset before keysets: integer bounds, made keys
        if partitions and self.heartbeat_ms > 0 and (time.monotonic() - self._last_heartbeat) * 1000 \
                >= self.heartbeat_ms:
            self._last_heartbeat = time.monotonic()
            partitions.append(HeartbeatPartition(max(finish.values())))
        return partitions

    def _purged(self, cursor: Any, instances: tuple[CaptureInstance, ...], start: int,
                starts: dict[str, int]) -> list[CaptureInstance]:
        """With ``cdckit.sqlserver.purged.changes=resnapshot``, the instances whose unread changes were purged."""
        if self.options.get("cdckit.sqlserver.purged.changes", "fail") != "resnapshot":
            return []
        purged = []
        for instance in instances:
            try:
                check_readable(cursor, instance, start, starts.get(instance_key(instance)))
            except PurgedChangesError:
                purged.append(instance)
        return purged

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: SQL Server keeps changes until the cleanup job's retention expires."""

    def stop(self) -> None:
        for conn in self._conns.values():
            conn.close()

    # -- executor side -------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        builders: list[Any] = []
        batches = arrow_batches(self.rows(partition, builders))
        if isinstance(partition, ChangeRangePartition):
            return with_stats(batches, partition.database, lambda: sum(b.filtered for b in builders))
        if isinstance(partition, IncrementalChunkPartition):
            return with_stats(batches, partition.instance.database)
        return batches

    def rows(self, partition: InputPartition, builders: list[Any] | None = None) -> Iterator[EventRow]:
        """The partition's records; ``builders`` gets the record builder of a change range (its ``filtered``)."""
        if isinstance(partition, HeartbeatPartition):
            settings = format_settings(self.options)
            key, value = heartbeat_messages(settings, now_ms())
            topic = heartbeat_topic(settings.topic_prefix, self.options.get("topic.heartbeat.prefix",
                                                                            "__debezium-heartbeat"))
            yield record(topic, key, value, op="hb", position=Position(partition.position, partition.position, 0),
                         ts_ms=now_ms())
            return
        if isinstance(partition, IncrementalChunkPartition):
            yield from read_snapshot_chunk(self.options, partition.instance, partition.chunk, "incremental",
                                           partition.condition)
            return
        assert isinstance(partition, ChangeRangePartition)
        options = self.options
        settings = format_settings(options)
        formats = {i.capture_instance: TableFormat(i, settings) for i in partition.instances}
        by_table = {(i.schema, i.name): i for i in partition.instances}
        records = record_builder(
            options,
            lambda event: (by_table[(event.schema, event.table)],
                           formats[by_table[(event.schema, event.table)].capture_instance]),
            lambda event: format_sqlserver_lsn(event.position.commit_lsn) or "")
        if builders is not None:
            builders.append(records)
        skip = ChunkFilter.from_options(options).extended(
            [ChunkWatermark(**mark) for mark in json.loads(partition.watermarks)])
        lookup = _LazyConnection(options, partition.database)  # the chunk filter's questions, beside the streams
        with closing(connect(options, partition.database)) as conn, closing(lookup):
            streams = []
            offset_minutes = server_utc_offset_minutes(conn.cursor())
            for instance in partition.instances:
                cursor = conn.cursor()
                known_since = None if instance.capture_instance in partition.resnapshot else partition.starts.get(
                    instance_key(instance))
                first = check_readable(cursor, instance, partition.start, known_since)
                if first > partition.end:  # the cleanup job moved its start past this batch (it is re-snapshotted)
                    continue
                streams.append(fold_changes(instance, read_changes(cursor, instance, first, partition.end),
                                            offset_minutes))
            merged = heapq.merge(*streams, key=lambda e: e.position.as_tuple()) if len(streams) > 1 else (
                streams[0] if streams else iter(()))
            events = _not_snapshotted(merged, skip, by_table, lambda: lookup.cursor())
            for instance in partition.instances:
                if instance.previous is not None and partition.start < instance.start_lsn <= partition.end \
                        and option_bool(options, "include.schema.changes", True):
                    yield alter_record(options, instance)
            previous_commit: int | None = None
            previous_ts = 0
            for event in events:
                if previous_commit is not None and event.position.commit_lsn != previous_commit:
                    yield from records.rows(_transaction_end(previous_commit, previous_ts))
                previous_commit, previous_ts = event.position.commit_lsn, event.source_ts_ms
                yield from records.rows(event)
            if previous_commit is not None:
                yield from records.rows(_transaction_end(previous_commit, previous_ts))


def _signals(cursor: Any, signal: CaptureInstance, start: int, end: int) -> list[Signal]:
    """The signals inserted into the signalling table by the transactions committed in ``(start, end]``."""
    found = []
    for event in fold_changes(signal, read_changes(cursor, signal, check_readable(cursor, signal, start), end)):
        parsed = parse_signal(event.after or {}) if event.op == "c" else None
        if parsed is not None:
            found.append(parsed)
    return found


def _next_chunks(cursor: Any, progress: Progress, instances: list[CaptureInstance], chunk_rows: int,
                 wanted: int) -> tuple[list[dict[str, Any]], Progress]:
    """Up to ``wanted`` next chunks of the incremental snapshot, and the progress after them. When a table's snapshot
    begins, its largest key is kept in ``progress.high`` (an empty key for a table read as one chunk); each chunk is
    the next ``chunk_rows`` keys after ``progress.last`` (its upper boundary, found by the server, is the next
    chunk's lower one), the last one open-ended. Keys are ``key_text``: JSON in the offsets, the same after a
    restart. A chunk's id is ``progress.chunks``."""
    from dataclasses import replace

    chunks: list[dict[str, Any]] = []
    while progress.runnable and len(chunks) < wanted:
        if progress.current is None:
            progress = replace(progress, current=progress.pending[0], pending=progress.pending[1:], last=None,
                               high=None)
        request = progress.current
        assert request is not None
        instance = next((i for i in instances if (i.schema, i.name) == (request.schema, request.table)), None)
        key = chunk_key(instance) if instance is not None else None
        high, lower = progress.high, progress.last
        if instance is not None and high is not None and key is not None and len(key) == 1 and len(high) == 3:
            high, lower = _from_integer_plan(high, lower)  # an offset written when chunks were integer ranges
        if instance is not None and high is None and not _condition_runs(cursor, instance, request):
            progress = replace(progress, current=None, last=None, high=None)
            continue
        if instance is not None and high is None:
            high = () if key is None else last_key(cursor, instance)
        if instance is None or high is None:
            if instance is None:
                log.error("incremental snapshot of %s skipped: it has no capture instance", request.qualified_name)
            progress = replace(progress, current=None, last=None, high=None)  # or an empty table: nothing to read
            continue
        upper = next_boundary(cursor, instance, lower, high, chunk_rows) if key is not None else None
        chunks.append({"schema": request.schema, "table": request.table, "index": progress.chunks,
                       "lower": list(lower) if lower is not None else None,
                       "upper": list(upper) if upper is not None else None, "condition": request.condition})
        if upper is None:
            progress = replace(progress, current=None, last=None, high=None, chunks=progress.chunks + 1)
        else:
            progress = replace(progress, last=upper, high=high, chunks=progress.chunks + 1)
    return chunks, progress


def _from_integer_plan(plan: tuple[str, ...], last: tuple[str, ...] | None) -> tuple[tuple[str, ...],
                                                                                      tuple[str, ...] | None]:
    """(largest key, lower boundary) of a table's snapshot planned as integer ranges ``(low, step, pieces)`` with
    ``last`` the next chunk's index: the chunk goes on from its range's first integer."""
    low, step, pieces = (int(v) for v in plan)
    index = int(last[0]) if last else 0
    return (str(low + pieces * step - 1),), (str(low + index * step - 1),) if index else None


def _condition_runs(cursor: Any, instance: CaptureInstance, request: Any) -> bool:
    """Whether the request's additional condition names only the capture instance's columns and runs (an empty
    read); otherwise the table's snapshot is dropped, reported once, before a chunk of it is planned: a signal that
    cannot run never reaches the offsets' chunks, so it cannot fail a batch again at every restart."""
    if not request.condition:
        return True
    try:
        check_columns(request.condition, "tsql",
                      [c.name for c in instance.emitted_columns() if c.name not in instance.dropped_columns])
        cursor.execute(try_condition(quote_name(instance.database), instance.schema, instance.name,
                                     request.condition))
        cursor.fetchall()
    except ValueError as error:
        log.error("incremental snapshot of %s dropped: %s", request.qualified_name, error)
        return False
    except Exception as error:  # the driver's own error (pyodbc.Error), or the model's
        log.error("incremental snapshot of %s dropped: its additional condition %r fails on the table: %s",
                  request.qualified_name, request.condition, first_line(error))
        return False
    return True


class _LazyConnection:
    """A connection opened at the first ``cursor()``: the chunk filter asks the server only about changes committed
    while a snapshot's chunks were read."""

    def __init__(self, options: dict[str, str], database: str) -> None:
        self.options, self.database = options, database
        self.conn: Any = None

    def cursor(self) -> Any:
        if self.conn is None:
            self.conn = connect(self.options, self.database)
        return self.conn.cursor()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _not_snapshotted(events: Iterator[ChangeEvent], skip: ChunkFilter,
                     by_table: dict[tuple[str, str], CaptureInstance], cursor: Any,
                     block: int = 512) -> Iterator[ChangeEvent]:
    """``events`` without those a snapshot chunk already holds (``ChunkFilter``), decided a block at a time."""
    pending: list[ChangeEvent] = []
    for event in _with_end(events):
        if event is not None:
            pending.append(event)
        if pending and (event is None or len(pending) >= block):
            flags = skip.already_snapshotted([(e, by_table[(e.schema, e.table)]) for e in pending], cursor)
            yield from (e for e, skipped in zip(pending, flags, strict=True) if not skipped)
            pending = []


def _with_end(events: Iterator[ChangeEvent]) -> Iterator[ChangeEvent | None]:
    yield from events
    yield None


def _transaction_end(commit_lsn: int, ts_ms: int) -> ChangeEvent:
    """The end of a transaction (all its rows share the commit LSN), after its last event."""
    return ChangeEvent("", "", "txend", None, None, Position(commit_lsn, commit_lsn, 9), ts_ms)


def alter_record(options: dict[str, str], instance: CaptureInstance) -> EventRow:
    """The ALTER schema change record of a table whose new capture instance takes over at its start LSN."""
    from cdckit.formats.debezium import schema_change

    change = schema_change.TableChange(
        "ALTER", instance.database, instance.schema, instance.name, instance.key_columns,
        tuple(schema_change.describe_sqlserver_columns(instance.columns, instance.identity_columns)))
    lsn = instance.start_lsn
    event = ChangeEvent(instance.schema, instance.name, "u", None, None, Position(lsn, lsn, -3), now_ms(),
                        database=instance.database)
    return schema_change_record(format_settings(options), change, event, instance.qualified_name)
