"""Spark streaming data source over a PostgreSQL logical replication slot (pgoutput).

Offsets are ``{"lsn": "X/Y"}``: the end of the last commit record a batch includes, stored in the Spark
checkpoint. ``latestOffset`` admits whole transactions up to ``max.batch.size`` changes; ``read`` decodes
the batch's transactions on an executor; ``commit(end)`` confirms ``end`` to the slot, so the server
releases WAL only after Spark has committed the batch. Spark asks for the next offsets only once every
batch up to ``start`` is committed, so ``latestOffset`` confirms ``start`` as well: after a restart the
last batch of the previous run is acknowledged before anything else is read.

With ``cdckit.stream.files.output`` (the files sink without transforms), each task writes its records itself,
as the files sink names them for the batch (its id is the offset log's last entry, ``compat.planned_batch``).

A large batch is cut at transaction ends into up to ``cdckit.stream.partitions`` LSN ranges of about equal
changes (each at least ``cdckit.stream.partition.min.events``), read by as many tasks at once; the cuts are
part of the end offset (``{"lsn": ..., "splits": [...]}``), so a batch replayed after a failure is cut the
same way. Every partition yields its events in position order and the partitions follow each other in LSN
order: a sink may write them partition by partition without a shuffle. The partitions after the first peek
temporary copies of the slot (``peek.slot_copy``), so the server decodes them at the same time.

While a backlog lasts, one counting peek plans the next batches too (``PLANNED_AHEAD``): each later
``latestOffset`` from a planned batch's start takes that batch as planned, without a peek of its own. When the
last planned batch is taken, the peek that plans the ones after it runs while that batch does
(``plan_ahead.PlanAhead``), on a copy of the slot.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg2
import pyarrow as pa
from psycopg2.extensions import connection as Connection
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from cdckit.dialect.incremental import Progress
from cdckit.dialect.postgres import incremental
from cdckit.dialect.postgres.catalog import TableInfo, captured_names
from cdckit.dialect.postgres.heartbeat import current_wal_lsn, emit_heartbeat
from cdckit.dialect.postgres.lsn import format_lsn, parse_lsn
from cdckit.dialect.postgres.pending import PendingChanges, peek_bound, pending_changes
from cdckit.dialect.postgres.plan_ahead import PlanAhead
from cdckit.dialect.postgres.replication import advance_slot, slot_status
from cdckit.errors import ReplicationSlotError
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.fsutil import output_file_mode
from cdckit.spark.compat import (
    ReadLimit,
    SelfBoundedReader,
    SupportsTriggerAvailableNow,
    planned_batch,
)
from cdckit.spark.options import from_spark_options
from cdckit.spark.records import record_builder
from cdckit.spark.rows import (
    EVENT_SCHEMA,
    STREAM_FILES_OUTPUT,
    EventRow,
    arrow_batches,
    now_ms,
    with_stats,
)
from cdckit.spark.schema_history import SchemaHistory
from cdckit.spark.sinks.jsonl import TopicFiles, direct_writes, written_rows
from cdckit.spark.sources.postgres_stream_partition import DecodedRange, LsnRange, SnapshotWindow, connect_retrying

T = TypeVar("T")
log = logging.getLogger("cdckit")


# Batches a counting peek plans beyond the one asked for, while they hold at most PLANNED_CHANGES changes in all
# (the server keeps the peek's messages while it counts them: a larger batch size plans fewer ahead).
PLANNED_AHEAD = 2
PLANNED_CHANGES = 200_000


def _by_start(pending: PendingChanges) -> dict[int, tuple[int, tuple[int, ...]]]:
    """The batches a counting peek planned after the one asked for, by their start (the batch's end before)."""
    planned, low = {}, pending.end_lsn
    for end, splits in pending.following:
        assert low is not None
        planned[low] = (end, splits)
        low = end
    return planned


class PostgresChangeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cdckit_postgres_changes"

    def schema(self) -> str:
        return EVENT_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PostgresChangeStreamReader(from_spark_options(self.options))


class PostgresChangeStreamReader(SelfBoundedReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    # waiting for changes (compat.WAIT_OPTION), the WAL insert position is read this often, and the slot peeked when
    # it moved: Debezium's connector is sent each change as it is decoded, so a short step keeps the latency close
    wait_step_s = 0.025

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.slot_name = options.get("slot.name", "debezium")
        self.publication = options.get("publication.name", "dbz_publication")
        self.heartbeat_ms = int(options.get("heartbeat.interval.ms", "0"))
        self.parts = max(1, int(options.get("cdckit.stream.partitions", "0") or "0"))
        self.min_events_per_part = int(options.get("cdckit.stream.partition.min.events", "5000"))
        # messages per change the last counting peek saw: it bounds the next one (pending.peek_bound)
        self._messages_per_change: float | None = None
        # the batches the last counting peek planned ahead, by their start: (end, splits), for the read limit and
        # the available-now target they were planned with
        self._ahead: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._ahead_for: tuple[int, int | None] | None = None
        self._plan_ahead = PlanAhead(options)
        # the end of a batch that took every change up to the available-now target, and that target
        self._drained: tuple[int, int | None] | None = None
        self._conn: Connection | None = None
        self._available_now_target: int | None = None
        self._last_progress = time.monotonic()
        self.chunk_rows = int(options.get("incremental.snapshot.chunk.size", "1024"))
        self._signal_oid: int | None = None
        self._signal_checked = False
        # the exported snapshot of the planned batch's incremental snapshot window, and the batch's end
        self._window: tuple[int, incremental.Window] | None = None
        self._adapting = False  # the batch being planned is bound by the adapted size (batch_sizes)
        # waiting for changes: the WAL insert position at the last look (None: not read yet, or not readable)
        self._wal_seen: int | None = None
        self._wal_readable = True

    # -- driver side ---------------------------------------------------------------------------------
    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect_retrying(self.options)
        return self._conn

    def _reconnecting(self, action: Callable[[Connection], T]) -> T:
        """Run ``action`` on the driver's connection; when the server went away (restart, failover, network),
        reconnect (retrying for a while) and run it once more."""
        try:
            return action(self._connection())
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return action(self._connection())

    def initialOffset(self) -> dict[str, Any]:
        status = self._reconnecting(lambda conn: slot_status(conn, self.slot_name))
        if status is None:
            raise ReplicationSlotError(
                f"replication slot '{self.slot_name}' does not exist; run `cdckit snapshot` (or `cdckit stream` "
                f"with snapshot.mode=no_data) to create it")
        start = {"lsn": format_lsn(status.confirmed_flush_lsn)}
        self.started(start)
        return start

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_target = self._reconnecting(current_wal_lsn)

    def next_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return self._reconnecting(lambda conn: self._latest(conn, start, limit))

    def may_have_changes(self) -> bool:
        """Whether the server's WAL insert position moved since the last look: nothing can be committed without it.
        A server that does not tell it (YugabyteDB) is peeked at every step."""
        if not self._wal_readable:
            return True
        try:
            now = self._reconnecting(lambda conn: current_wal_lsn(conn, "insert"))
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            raise  # the server is gone even after a reconnect: not a server that cannot tell its position
        except psycopg2.Error:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
            self._wal_readable = False
            return True
        moved, self._wal_seen = now != self._wal_seen, now
        return moved

    def _latest(self, conn: Connection, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        start_lsn = parse_lsn(start["lsn"])
        advance_slot(conn, self.slot_name, start_lsn, self.publication)
        self._close_window()
        max_events = self.batch_bound(limit)
        # the next batch's bound follows this one's where it adapts (batch_sizes), else it is this one's
        self._adapting = max_events == self.sizes.size
        progress = Progress.from_offset(start)
        if self._drained == (start_lsn, self._available_now_target) and not progress.runnable:
            return start  # the batch before took every change up to the available-now target: none can come
        planned = self._planned(start_lsn, max_events, progress.runnable)
        end_lsn: int | None
        if planned is not None:  # no incremental snapshot window: none to open (see _planned)
            end_lsn, splits, window = *planned, None
            self._plan_after(end_lsn, self._next_bound(max_events))
        else:
            end_lsn, splits, window, progress = self._counted(conn, start_lsn, max_events, progress)
        if end_lsn is None:
            self.sizes.idle()
            if (self.heartbeat_ms > 0 and self._available_now_target is None
                    and (time.monotonic() - self._last_progress) * 1000 >= self.heartbeat_ms):
                emit_heartbeat(conn, self.slot_name)  # picked up, and confirmed, by the next batch
                self._last_progress = time.monotonic()
            return start
        self._last_progress = time.monotonic()
        end: dict[str, Any] = {"lsn": format_lsn(end_lsn)}
        if splits:
            end["splits"] = [format_lsn(cut) for cut in splits]
        signal_oid = self._signal_table(conn)
        if signal_oid is not None:
            signals = incremental.signals_in(conn, self.options, signal_oid, start_lsn, end_lsn)
            if signals:  # they take effect from the next batch
                progress = progress.after(signals, captured_names(conn, self.options))
                conn.commit()
        document = progress.to_json()
        if document is not None:
            end["incremental"] = document
        if window is not None:
            end["window"] = window
        return end

    def _planned(self, start_lsn: int, max_events: int, runnable: bool) -> tuple[int, tuple[int, ...]] | None:
        """The batch from ``start_lsn`` as a counting peek planned it (ahead, or in the background while the batch
        before ran), for this read limit and available-now target; None when none did.

        A batch planned ahead has more changes after it in its peek, so a peek from its start would end it the
        same way. One that ran to the end of its peek is taken only where that end is the available-now target,
        which no later commit can come before, and no incremental snapshot is ``runnable``, whose window a peek
        that finds everything opens; otherwise the slot is peeked again (more may be committed by now)."""
        target = self._available_now_target
        if self._ahead_for == (max_events, target) and start_lsn in self._ahead:
            self.sizes.planned(max_events, True)  # a batch planned ahead has changes after it
            return self._ahead[start_lsn]
        pending = self._plan_ahead.take(start_lsn, max_events, target)
        if pending is None or pending.end_lsn is None:
            return None
        final = target is not None and pending.caught_up and not runnable
        if not (pending.followed or final):
            return None
        if final:
            self._drained = (pending.end_lsn, target)
        self.sizes.planned(pending.events, not pending.caught_up)
        self._messages_per_change = pending.messages_per_change() or self._messages_per_change
        self._ahead = {start_lsn: (pending.end_lsn, pending.splits), **_by_start(pending)}
        self._ahead_for = (max_events, target)
        return self._ahead[start_lsn]

    def _plan_after(self, end_lsn: int, max_events: int) -> None:
        """More changes may follow the batch ending at ``end_lsn``: unless its next batch is planned already, or
        it took every change up to the available-now target, plan the ones after it while it runs."""
        if ((self._ahead_for == (max_events, self._available_now_target) and end_lsn in self._ahead)
                or self._drained == (end_lsn, self._available_now_target)):
            return
        ahead = self._planned_ahead(max_events)
        bound = peek_bound(max_events * (1 + ahead), self._messages_per_change)
        self._plan_ahead.start(end_lsn, max_events, self._available_now_target, self.parts, self.min_events_per_part,
                               bound, ahead)

    def _next_bound(self, max_events: int) -> int:
        """The bound of the batch after one planned under ``max_events``, which the batches planned ahead get."""
        return self.sizes.size if self._adapting else max_events

    @staticmethod
    def _planned_ahead(max_events: int) -> int:
        return max(0, min(PLANNED_AHEAD, PLANNED_CHANGES // max(1, max_events) - 1))

    def _counted(self, conn: Connection, start_lsn: int, max_events: int, progress: Progress
                 ) -> tuple[int | None, tuple[int, ...], dict[str, Any] | None, Progress]:
        """Plan the batch after ``start_lsn`` by a counting peek, which may plan the next ones too while they hold
        ``PLANNED_CHANGES`` in all; open an incremental snapshot window when it is caught up. Returns the batch's
        end, its cuts, the window and the progress after it. While batches can be planned in the background, the
        peek plans only this one: the ones after it are planned while it runs."""
        ahead = 0 if self._plan_ahead.enabled else self._planned_ahead(max_events)
        pending = pending_changes(conn, self.options, start_lsn, max_events, self._available_now_target,
                                  self.parts, self.min_events_per_part,
                                  peek_bound(max_events * (1 + ahead), self._messages_per_change), ahead)
        self._messages_per_change = pending.messages_per_change() or self._messages_per_change
        self._ahead, self._ahead_for = _by_start(pending), (max_events, self._available_now_target)
        if pending.end_lsn is not None:
            self.sizes.planned(pending.events, not pending.caught_up)
        if progress.runnable and pending.caught_up:
            return self._open_window(conn, start_lsn, progress, pending, max_events)
        if pending.end_lsn is not None and pending.followed:
            self._plan_after(pending.end_lsn, self._next_bound(max_events))
        if pending.end_lsn is not None and pending.caught_up and self._available_now_target is not None:
            self._drained = (pending.end_lsn, self._available_now_target)
        return pending.end_lsn, pending.splits, None, progress

    def _signal_table(self, conn: Connection) -> int | None:
        if not self._signal_checked:
            self._signal_oid = incremental.signal_table(conn, self.options)
            self._signal_checked = True
        return self._signal_oid

    def _open_window(self, conn: Connection, start_lsn: int, progress: Progress,
                     pending: PendingChanges, max_events: int
                     ) -> tuple[int | None, tuple[int, ...], dict[str, Any] | None, Progress]:
        """The stream is caught up: export a snapshot, plan the next chunks in it, write the window's message and
        end the batch at or after it. Returns the batch's end, its cuts, the window and the progress after it."""
        window = incremental.export_window(self.options)
        try:
            chunks, planned = incremental.plan_window(window, progress, self.options,
                                                      max(0, max_events - pending.events), self.chunk_rows)
            if not chunks and planned == progress:
                window.close()
                return pending.end_lsn, pending.splits, None, progress
            upto = incremental.mark_window(conn, [chunk.id for chunk in chunks])
            batch = pending_changes(conn, self.options, start_lsn, 1 << 40, upto, self.parts,
                                    self.min_events_per_part, bound=0)
        except BaseException:
            window.close()
            raise
        assert batch.end_lsn is not None  # the window's own message is in it
        if not chunks:  # the tables left were empty or gone: the progress moves on
            window.close()
            return batch.end_lsn, batch.splits, None, planned
        self._window = (batch.end_lsn, window)
        return (batch.end_lsn, batch.splits,
                {"snapshot": str(window.visibility), "chunks": [chunk.to_json() for chunk in chunks]}, planned)

    def _window_snapshot(self, end_lsn: int) -> incremental.Window:
        """The exported snapshot of the batch ending at ``end_lsn``: the one planned with it, or, for a batch run again
        after a restart, a new one (the planned one ended with the job that planned it)."""
        if self._window is not None and self._window[0] == end_lsn:
            return self._window[1]
        self._close_window()
        log.warning("the batch ending at %s is run again: its incremental snapshot chunks are read again under a "
                    "new snapshot (their rows are the table's rows now, which later events bring in line)",
                    format_lsn(end_lsn))
        window = incremental.export_window(self.options)
        self._window = (end_lsn, window)
        return window

    def _close_window(self) -> None:
        if self._window is not None:
            self._window[1].close()
            self._window = None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self.planned(end)
        low, high = parse_lsn(start["lsn"]), parse_lsn(end["lsn"])
        cuts = sorted({cut for cut in map(parse_lsn, end.get("splits", ())) if low < cut < high})
        bounds = [low, *cuts, high]
        history = SchemaHistory.load(self.options).to_json()
        batch = planned_batch(self.options, end) if self.options.get(STREAM_FILES_OUTPUT) else None
        partitions = [LsnRange(first, last, history, number, batch)
                      for number, (first, last) in enumerate(itertools.pairwise(bounds))]
        window = end.get("window")
        if window:
            snapshot = self._window_snapshot(high)
            partitions[-1].window = SnapshotWindow(low, high, list(window["chunks"]), snapshot.name,
                                                   str(snapshot.visibility))
        return list(partitions)

    def commit(self, end: dict[str, Any]) -> None:
        self._reconnecting(lambda conn: advance_slot(conn, self.slot_name, parse_lsn(end["lsn"]), self.publication))
        if self._window is not None and self._window[0] <= parse_lsn(end["lsn"]):
            self._close_window()  # its batch is committed: the exported snapshot is no longer needed

    def stop(self) -> None:
        self._plan_ahead.close()
        self._close_window()
        if self._conn is not None and not self._conn.closed:
            self._conn.close()

    # -- executor side -------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LsnRange)
        decoded = DecodedRange(self.options, partition, self.slot_name)
        batches = with_stats(decoded.batches() if decoded.columnar else arrow_batches(decoded.rows()),
                             self.options.get("database.dbname", ""), decoded.filtered)
        if partition.window is not None:  # reads: counted by no streaming metric, as Debezium counts them
            batches = itertools.chain(batches, arrow_batches(self.window_rows(partition.window)))
        folder = self.options.get(STREAM_FILES_OUTPUT)
        if folder and partition.batch is not None:
            return written_rows(batches, TopicFiles(folder, f"stream-{partition.batch:012d}-{partition.number:05d}",
                                                    mode=output_file_mode(self.options),
                                                    direct=direct_writes(self.options)))
        return batches

    def rows(self, partition: InputPartition) -> Iterator[EventRow]:
        """The partition's records, every event formatted by the reference (``RecordBuilder``)."""
        assert isinstance(partition, LsnRange)
        rows = DecodedRange(self.options, partition, self.slot_name).rows()
        return itertools.chain(rows, self.window_rows(partition.window)) if partition.window is not None else rows

    def window_rows(self, partition: SnapshotWindow) -> Iterator[EventRow]:
        """An incremental snapshot window's records: its chunks' rows the batch's unseen changes leave, as reads
        (``op: r``, ``source.snapshot: incremental``) at the batch's end."""
        options = self.options
        settings = format_settings(options)
        tables: dict[tuple[str, str], tuple[TableInfo, TableFormat]] = {}
        records = record_builder(options, lambda event: tables[(event.schema, event.table)],
                                 lambda event: str(event.tx_id))
        visibility = incremental.Visibility.parse(partition.visibility)
        chunks = [incremental.WindowChunk.from_json(chunk) for chunk in partition.chunks]
        position = Position(partition.end, partition.end, 0)
        ts_ms = now_ms()
        for table, row in incremental.window_rows(options, partition.start, partition.end, chunks,
                                                  partition.snapshot, visibility,
                                                  int(options.get("snapshot.fetch.size", "10240"))):
            if (table.schema, table.name) not in tables:
                tables[(table.schema, table.name)] = (table, TableFormat(table, settings))
            yield from records.rows(ChangeEvent(table.schema, table.name, "r", None, row, position, ts_ms,
                                                visibility.xmin, snapshot="incremental",
                                                sequence=(None, partition.end)))
