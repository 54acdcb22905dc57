"""One partition of a PostgreSQL stream batch (``LsnRange``): the transactions committed in its LSN range, peeked
from the slot on an executor, decoded, and formatted into records (``DecodedRange``), plain changes a run at a time
into columns; and the incremental snapshot window a batch's last range reads after its changes (``SnapshotWindow``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from psycopg2.extensions import connection as Connection
from pyspark.sql.datasource import InputPartition

from cdckit.dialect.postgres import pgoutput
from cdckit.dialect.postgres.catalog import TableInfo, select_tables, table_from_relation
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.decoder import PLAIN_TUPLE_AT, ChangeDecoder, PlainChanges
from cdckit.dialect.postgres.peek import OP_OF_KIND, peek_blocks
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium import columnar
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.spark.records import RecordBuilder, record_builder, xid_at_lsn
from cdckit.spark.rows import (
    ARROW_BATCH_ROWS,
    ChangeColumns,
    EventRow,
    arrow_batches,
    change_column_batches,
    change_record_batches,
    event_rows,
    now_ms,
    skipped_operations,
)
from cdckit.spark.schema_history import SchemaHistory

RECONNECT_SECONDS = 60.0


# The server is away for now (restarting, failing over): worth waiting for. A refused login is not.
_TRANSIENT = re.compile(r"starting up|shutting down|Connection refused|could not connect|closed the connection|"
                        r"terminating connection|timeout expired|recovery mode", re.IGNORECASE)


def connect_retrying(options: dict[str, str], seconds: float = RECONNECT_SECONDS) -> Connection:
    """Connect, retrying while the server is not reachable yet (a restart, a failover) for up to ``seconds``;
    then the last error stands."""
    from cdckit.errors import SourceConnectionError

    deadline = time.monotonic() + seconds
    delay = 0.25
    while True:
        try:
            return connect(options)
        except SourceConnectionError as exc:
            if not _TRANSIENT.search(str(exc)) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


class LsnRange(InputPartition):
    """One partition of a batch: the transactions committed in ``[start, end)``. ``number``: its place in the
    batch (Spark's partition id); ``batch``: the batch's id when the partition writes its own files."""

    def __init__(self, start: int, end: int, history: str = "{}", number: int = 0, batch: int | None = None) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end
        self.history = history  # the schema history so far (JSON), to tell a new structure from a known one
        self.number = number
        self.batch = batch
        self.window: SnapshotWindow | None = None  # the batch's last range: an incremental snapshot's chunks after it


class SnapshotWindow:
    """The chunks of an incremental snapshot a batch ``(start, end]`` reads after its changes (in the same task as
    its last range, so every sink keeps them after those changes), under the exported ``snapshot`` that sees the
    transactions ``visibility`` names (``dialect.postgres.incremental``)."""

    def __init__(self, start: int, end: int, chunks: list[dict[str, Any]], snapshot: str, visibility: str) -> None:
        self.start = start
        self.end = end
        self.chunks = chunks
        self.snapshot = snapshot
        self.visibility = visibility


class DecodedRange:
    """One partition's changes decoded from the slot, with the record builder and the table formats they need."""

    def __init__(self, options: dict[str, str], partition: LsnRange, heartbeat_tag: str) -> None:
        self.options = options
        self.partition = partition
        self.heartbeat_tag = heartbeat_tag
        self.settings = format_settings(options)
        self.tables: dict[tuple[str, str], tuple[TableInfo, TableFormat]] = {}
        yugabyte = self.settings.connector == "YugabyteDB"
        self.history = SchemaHistory.from_json(partition.history)
        self.records = record_builder(
            options, lambda event: self.tables[(event.schema, event.table)],
            # The YugabyteDB connector names a transaction by xid:commit LSN; Debezium 2.5.2's PostgreSQL connector
            # labels each of its records with the xid and the LSN of the message it stands for.
            lambda event: f"{event.tx_id}:{event.position.commit_lsn}" if yugabyte else str(event.tx_id),
            self.history.version, None if yugabyte else xid_at_lsn)
        self.formatted_ops = frozenset({"c", "u", "d"} - skipped_operations(options))
        # Debezium envelopes without transaction blocks are formatted a column at a time (columnar.py), in either
        # release's format; the rest, and what those tables' formats do not support, a record at a time.
        self.columnar = (isinstance(self.records, RecordBuilder) and not self.records.with_transactions
                         and columnar.supports_settings(self.settings))
        self._converters: dict[TableFormat, columnar.ColumnarChanges] = {}  # by the format (its identity)

    def items(self, plain_ops: frozenset[str] | None = None) -> Iterator[ChangeEvent | EventRow | PlainChanges]:
        """The partition's events in position order, with the schema change records of structures met on the way
        (records already). With ``plain_ops``, plain changes of those ops come as runs of their messages
        (``PlainChanges``, at most ``ARROW_BATCH_ROWS`` a run) instead of events, and transaction ends come not at
        all."""
        options, partition, history, settings = self.options, self.partition, self.history, self.settings
        conn = connect_retrying(options)
        changes: list[TableInfo] = []

        def table_for(relation: pgoutput.Relation) -> TableInfo | None:
            if not select_tables([(relation.namespace, relation.name)], options):
                return None
            table = table_from_relation(conn, relation.namespace, relation.name, relation.relation_id,
                                        [(c.name, c.type_oid, c.type_modifier) for c in relation.columns], options)
            self.tables[(table.schema, table.name)] = (table, TableFormat(table, settings))
            if decoder.in_range:
                changes.append(table)
            else:
                # Met in a transaction before this partition's range: the partition (or batch) that holds it
                # announces it; here it only counts towards the table's structure version.
                for _ in history.observe(table, Position(partition.start, partition.start), options, settings):
                    pass
            return table

        decoder = self.decoder = ChangeDecoder(partition.start, partition.end, table_for,
                                               heartbeat_tag=self.heartbeat_tag)
        try:
            # A later partition's peek leaves out the earlier partitions' changes (the server still decodes them)
            for block in peek_blocks(conn, options, partition.end,
                                     start=partition.start if partition.number > 0 else None):
                index, count = 0, len(block)
                while index < count:
                    # After a Relation message, the next event goes through feed: a new structure's record takes
                    # that event's position.
                    if plain_ops is not None and not changes:
                        taken = decoder.take_plain_run(block, index, plain_ops,
                                                       ARROW_BATCH_ROWS - decoder.plain_pending())
                        if taken == index and decoder.take_plain(block.lsn_list[index], block.message(index),
                                                                 plain_ops):
                            taken = index + 1
                        if taken > index:
                            index = taken
                            if decoder.plain_pending() >= ARROW_BATCH_ROWS:
                                yield decoder.plain_changes()  # type: ignore[misc]
                            continue
                        plain = decoder.plain_changes()
                        if plain is not None:
                            yield plain
                    for event in decoder.feed(block.lsn_list[index], block.message(index)):
                        while changes:  # a Relation message came: a new structure is recorded (and announced)
                            yield from history.observe(changes.pop(0), event.position, options, settings)
                        yield event
                    index += 1
            plain = decoder.plain_changes()
            if plain is not None:
                yield plain
        finally:
            conn.close()

    def filtered(self) -> int:
        """Changes left out: of tables not captured, or by skipped.operations (once the range is read)."""
        decoder = getattr(self, "decoder", None)
        return (decoder.filtered if decoder is not None else 0) + int(getattr(self.records, "filtered", 0))

    def rows(self) -> Iterator[EventRow]:
        for item in self.items():
            if isinstance(item, ChangeEvent):
                yield from self.records.rows(item)
            elif not isinstance(item, PlainChanges):  # none without plain ops
                yield item

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The partition's records as Arrow batches: runs of data changes formatted a column at a time, anything
        else (heartbeats, schema change records) a record at a time, in position order."""
        block: list[tuple[ChangeEvent, TableFormat]] = []
        for item in self.items(self.formatted_ops):
            if isinstance(item, PlainChanges):
                yield from self._formatted(block)
                block = []
                yield from self._formatted_plain(item)
                continue
            if isinstance(item, ChangeEvent) and item.op in self.formatted_ops:
                # the table's format as of this change: a later Relation message may bring another
                block.append((item, self.tables[(item.schema, item.table)][1]))
                if len(block) >= ARROW_BATCH_ROWS:
                    yield from self._formatted(block)
                    block = []
                continue
            rows = list(self.records.rows(item)) if isinstance(item, ChangeEvent) else [item]
            if rows:  # a transaction's end, a skipped change: no record, and no reason to cut the run
                yield from self._formatted(block)
                block = []
                yield from arrow_batches(rows)
        yield from self._formatted(block)

    def _converters_for(self, table_format: TableFormat) -> columnar.ColumnarChanges:
        converters = self._converters.get(table_format)
        if converters is None:
            converters = self._converters[table_format] = columnar.ColumnarChanges(table_format,
                                                                                   self.settings.topic_prefix)
        return converters

    def _formatted_plain(self, plain: PlainChanges) -> Iterator[pa.RecordBatch]:
        """A run of plain changes, their tuples decoded a column at a time, formatted table by table and put back
        in order. A run the column decoder leaves (another tuple shape, text that is not UTF-8, a key value the
        change did not carry) goes through the events, as ``feed`` makes them."""
        import numpy as np

        messages, message_starts, ends, lsn_values, relation_ids, kinds, transactions = plain.columns()
        starts = message_starts + PLAIN_TUPLE_AT
        buffer = np.frombuffer(messages + bytes(8), dtype=np.uint8)
        per_transaction = _TransactionColumns(plain)
        lsns = pa.array(lsn_values, type=pa.int64())
        ops = _op_names(kinds)
        ts_ms = now_ms()
        assert isinstance(self.records, RecordBuilder)
        parts: list[list[pa.Array]] = []
        order = []
        for relation_id in dict.fromkeys(relation_ids.tolist()):
            rows = np.nonzero(relation_ids == relation_id)[0]
            _relation, table, names, _emitted = self.decoder.relations[relation_id]
            assert table is not None
            table_format = self.tables[(table.schema, table.name)][1]
            converters = self._converters_for(table_format)
            taken, their_transactions = pa.array(rows), pa.array(transactions[rows])
            block = _plain_block(converters, buffer, starts[rows], ends[rows], names, ops.take(taken),
                                 lsns.take(taken), per_transaction, their_transactions)
            if block is None:
                yield from self._formatted([(event, self.tables[(event.schema, event.table)][1])
                                            for event in self.decoder.events_of(plain)])
                return
            key, value = converters.block_texts(block, ts_ms)
            order.append(rows)
            parts.append([key if key is not None else pa.nulls(len(rows), pa.large_string()), value, *ChangeColumns(
                block.ops, pa.repeat(pa.scalar(table_format.topic, pa.string()), len(rows)),
                pa.repeat(pa.scalar(f"{table.schema}.{table.name}", pa.string()), len(rows)),
                per_transaction.commit_lsns.take(their_transactions), block.lsns,
                pa.repeat(pa.scalar(0, pa.int32()), len(rows)), block.source_ts_ms).columns()])
        key, value, *columns = _in_order(order, parts)
        yield from change_column_batches(ChangeColumns(*columns), key, value, self.records.tombstones)

    def _formatted(self, block: list[tuple[ChangeEvent, TableFormat]]) -> Iterator[pa.RecordBatch]:
        """A run of data changes, formatted table by table, a column at a time, then put back in order."""
        import numpy as np

        if not block:
            return
        by_format: dict[TableFormat, list[int]] = {}
        for index, (_event, table_format) in enumerate(block):
            by_format.setdefault(table_format, []).append(index)
        events = [event for event, _format in block]
        assert isinstance(self.records, RecordBuilder)
        ts_ms = now_ms()
        parts: list[list[pa.Array]] = []
        order = []
        try:
            for table_format, indexes in by_format.items():
                converters = self._converters_for(table_format)
                key, value = converters.texts([events[i] for i in indexes], ts_ms)
                parts.append([key if key is not None else pa.nulls(len(indexes), pa.large_string()), value])
                order.append(np.array(indexes, dtype=np.int64))
        except columnar.CannotFormat:  # each change by the reference, in the format it was met with
            tombstones = self.records.tombstones
            yield from arrow_batches(row for event, table_format in block
                                     for row in event_rows(event, table_format, tombstones))
            return
        topics = [table_format.topic for _event, table_format in block]
        key, value = _in_order(order, parts)
        yield from change_record_batches(events, topics, key, value, self.records.tombstones)


def _in_order(order: list[Any], parts: list[list[pa.Array]]) -> list[pa.Array]:
    """Columns a run of changes was formatted into table by table (``parts``: each table's columns; ``order``:
    the positions of its changes in the run, a numpy array per table), put back in the run's order. One table's
    are already in order, and are returned as they are (no copy)."""
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    back = pa.array(np.argsort(np.concatenate(order), kind="stable"))
    return [pa.concat_arrays(list(column)).take(back) for column in zip(*parts, strict=True)]


def _op_names(kinds: Any) -> pa.Array:
    """The ops ('c', 'u', 'd') of plain changes from their message kinds (a NumPy array; ``OP_OF_KIND``)."""
    import numpy as np

    index = np.zeros(256, dtype=np.int8)
    for at, kind in enumerate(OP_OF_KIND):
        index[kind] = at
    return pa.array(list(OP_OF_KIND.values())).take(pa.array(index[kinds]))


class _TransactionColumns:
    """The per-transaction fields of a run of plain changes, one row per transaction."""

    def __init__(self, plain: PlainChanges) -> None:
        begins = plain.begins
        self.source_ts_us = pa.array([begin.commit_time_us for begin, _, _ in begins], type=pa.int64())
        self.source_ts_ms = pa.array([begin.commit_time_us // 1000 for begin, _, _ in begins], type=pa.int64())
        self.tx_ids = pa.array([begin.xid for begin, _, _ in begins], type=pa.int64())
        # ordering needs only a value that sorts transactions by commit: the commit record's start (as feed gives)
        self.commit_lsns = pa.array([begin.final_lsn for begin, _, _ in begins], type=pa.int64())
        self.last_commits = pa.array([last for _, _, last in begins], type=pa.int64())


def _plain_block(converters: columnar.ColumnarChanges, buffer: Any, starts: Any, ends: Any, names: list[str],
                 ops: pa.Array, lsns: pa.Array, per_transaction: _TransactionColumns,
                 transactions: pa.Array) -> columnar.ChangeBlock | None:
    """One table's plain changes as a ``ChangeBlock``, their tuples decoded a column at a time; None when the
    events must make it (``_formatted_plain``)."""
    import pyarrow.compute as pc

    decoded = pgoutput.tuple_columns(buffer, starts, ends, len(names))
    if decoded is None:
        return None
    by_name = dict(zip(names, decoded, strict=True))
    texts: dict[str, pa.Array] = {}
    unavailable: dict[str, pa.Array] = {}
    for converter in [*converters.keys, *converters.values]:
        name = converter.field.name
        if name in texts:
            continue
        column = by_name.get(name)
        if column is None:
            return None
        try:
            texts[name] = column.values.cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: the events name the column and the change
            return None
        missing = column.kinds == pgoutput.UNCHANGED
        if missing.any():
            unavailable[name] = pa.array(missing)
    keys = None
    if converters.keys:
        if any(converter.field.name in unavailable for converter in converters.keys):
            return None
        keys = {converter.field.name: texts[converter.field.name] for converter in converters.keys}
    deletes = pc.equal(ops, "d")
    kept = pc.invert(deletes)
    before = columnar.Image(deletes if pc.any(kept).as_py() else None, texts, unavailable)
    after = columnar.Image(kept if pc.any(deletes).as_py() else None, texts, unavailable)
    source_ts_ms = per_transaction.source_ts_ms.take(transactions)
    source_ts_us = per_transaction.source_ts_us.take(transactions)
    tx_ids = per_transaction.tx_ids.take(transactions)
    last_commits = per_transaction.last_commits.take(transactions)
    first_index = transactions[0].as_py()
    first = ChangeEvent(converters.format.table.schema, converters.format.table.name, ops[0].as_py(), None, None,
                        Position(per_transaction.commit_lsns[first_index].as_py(), lsns[0].as_py(), 0),
                        source_ts_ms[0].as_py(), tx_ids[0].as_py(), sequence=(last_commits[0].as_py(),
                                                                                lsns[0].as_py()))
    return columnar.ChangeBlock(ops, before, after, keys, source_ts_ms, source_ts_us, tx_ids, lsns, last_commits,
                                first)
