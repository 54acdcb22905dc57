"""The one row shape every source emits: what a Kafka record carries, plus ordering metadata.

One streaming query serves all captured tables, and sinks need no per-table code. ``value`` holds text
messages (JSON); ``value_binary`` holds binary ones (Avro), and exactly one of them is set unless the record
is a tombstone.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cache
from typing import TYPE_CHECKING, Any

from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import TableFormat

if TYPE_CHECKING:
    import pyarrow as pa

# A position's LSNs are DECIMAL(25, 0): SQL Server's are 80 bits (VLF sequence number, log block, slot), past a 64-bit
# integer once a database's log has passed VLF 0x7FFF, as a busy database's does within months; PostgreSQL's are 64.
POSITION_DIGITS = 25
EVENT_SCHEMA = (
    "topic STRING, key STRING, value STRING, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
    f"`table` STRING, op STRING, commit_lsn DECIMAL({POSITION_DIGITS},0), lsn DECIMAL({POSITION_DIGITS},0), "
    "serial INT, source_ts_ms BIGINT, value_binary BINARY"
)
EVENT_COLUMNS = ("topic", "key", "value", "headers", "table", "op", "commit_lsn", "lsn", "serial", "source_ts_ms",
                 "value_binary")

EventRow = tuple[object, ...]

# The op of a row a source yields instead of records it wrote itself: ``topic`` and the count in ``value``.
WRITTEN = "_written"
# A change source's option: the files sink's folder, when each task writes its records there itself, as the sink
# would name them (``<output>/<topic>/stream-<batch>-<partition>.jsonl``), and yields only its control rows and a
# ``WRITTEN`` row per topic: the records never cross to the JVM and back (decision 0022).
STREAM_FILES_OUTPUT = "cdckit.stream.files.output"

# Rows handed to Spark per Arrow batch, and the value bytes after which a batch is handed over early (so a few
# very large values do not hold many megabytes in one batch).
ARROW_BATCH_ROWS = 10_000
ARROW_BATCH_BYTES = 16 << 20


@cache
def event_arrow_schema() -> pa.Schema:
    """EVENT_SCHEMA as Arrow, typed as Spark expects a Python data source's batches (built here rather than with
    PySpark's own converter, whose signature differs between Spark releases)."""
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    types = {"topic": pa.string(), "key": pa.string(), "value": pa.string(),
             "headers": pa.list_(pa.field("element", header)), "table": pa.string(), "op": pa.string(),
             "commit_lsn": position_type(), "lsn": position_type(), "serial": pa.int32(),
             "source_ts_ms": pa.int64(),
             "value_binary": pa.binary()}
    return pa.schema([pa.field(name, types[name]) for name in EVENT_COLUMNS])


def position_type() -> pa.DataType:
    """The Arrow type of a position's LSNs (``POSITION_DIGITS``)."""
    import pyarrow as pa

    return pa.decimal128(POSITION_DIGITS, 0)


def arrow_batches(rows: Iterable[EventRow]) -> Iterator[pa.RecordBatch]:
    """A reader's rows as Arrow record batches, columns built in bulk.

    Spark turns rows a Python data source yields into Arrow value by value in Python; handing it whole batches
    skips that step, which cost about as much as formatting the events. Order is kept; a batch is handed over
    after ``ARROW_BATCH_ROWS`` rows or ``ARROW_BATCH_BYTES`` of values, whichever comes first.
    """
    import pyarrow as pa

    schema = event_arrow_schema()
    value_index, binary_index = EVENT_COLUMNS.index("value"), EVENT_COLUMNS.index("value_binary")
    iterator = iter(rows)
    while True:
        batch: list[EventRow] = []
        size = 0
        for row in iterator:
            batch.append(row)
            size += len(row[value_index] or "") + len(row[binary_index] or b"")  # type: ignore[arg-type]
            if len(batch) >= ARROW_BATCH_ROWS or size >= ARROW_BATCH_BYTES:
                break
        if not batch:
            return
        columns: list[Any] = list(zip(*batch, strict=True))
        for index in _TEXT_INDEXES:  # Arrow takes UTF-8 bytes several times faster than str
            columns[index] = [None if text is None else text.encode() for text in columns[index]]
        yield pa.RecordBatch.from_arrays([pa.array(column, type=field.type) for column, field in
                                          zip(columns, schema, strict=True)], schema=schema)


_TEXT_INDEXES = (EVENT_COLUMNS.index("key"), EVENT_COLUMNS.index("value"))


def read_record_batches(topic: str, table: str, keys: pa.Array | None, values: pa.Array, position: Position,
                        ts_ms: int) -> Iterator[pa.RecordBatch]:
    """Snapshot reads of one table, their keys and values already formatted, as the event rows ``record`` makes
    of them (``op`` "r", every row at ``position``)."""
    yield from sized_batches(len(values), {
        "topic": topic, "key": keys, "value": values, "table": table, "op": "r", "commit_lsn": position.commit_lsn,
        "lsn": position.lsn, "serial": position.serial, "source_ts_ms": ts_ms})


@dataclass(frozen=True)
class ChangeColumns:
    """Streamed changes in columns: what each change's record carries beside its key and value."""

    ops: pa.Array  # c, u, d
    topics: pa.Array
    tables: pa.Array  # schema.table
    commit_lsns: pa.Array
    lsns: pa.Array
    serials: pa.Array  # int32
    source_ts_ms: pa.Array

    def columns(self) -> list[pa.Array]:
        """The fields in their order (``ChangeColumns(*columns)`` makes them again)."""
        return [getattr(self, field.name) for field in fields(self)]


def change_record_batches(events: Sequence[ChangeEvent], topics: Sequence[str], keys: pa.Array, values: pa.Array,
                          tombstones: bool) -> Iterator[pa.RecordBatch]:
    """Streamed changes, their keys and values already formatted, as ``event_rows`` makes records of them: each
    change's record and, after a delete, its tombstone (with ``tombstones``)."""
    import pyarrow as pa

    columns = ChangeColumns(
        pa.array([event.op for event in events], type=pa.string()), pa.array(list(topics), type=pa.string()),
        pa.array([f"{event.schema}.{event.table}" for event in events], type=pa.string()),
        pa.array([event.position.commit_lsn for event in events], type=position_type()),
        pa.array([event.position.lsn for event in events], type=position_type()),
        pa.array([event.position.serial for event in events], type=pa.int32()),
        pa.array([event.source_ts_ms for event in events], type=pa.int64()))
    yield from change_column_batches(columns, keys, values, tombstones)


def change_column_batches(changes: ChangeColumns, keys: pa.Array, values: pa.Array,
                          tombstones: bool) -> Iterator[pa.RecordBatch]:
    """``change_record_batches`` for changes already in columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(changes.ops)
    if tombstones:
        deletes = np.asarray(pc.equal(changes.ops, "d").to_numpy(zero_copy_only=False), dtype=bool)
    else:
        deletes = np.zeros(count, dtype=bool)
    if not deletes.any():  # no tombstone to add: the columns as they are (no copy of the values)
        yield from sized_batches(count, {
            "topic": changes.topics, "key": keys, "value": values, "table": changes.tables, "op": changes.ops,
            "commit_lsn": changes.commit_lsns, "lsn": changes.lsns, "serial": changes.serials,
            "source_ts_ms": changes.source_ts_ms})
        return
    index = pa.array(np.repeat(np.arange(count), 1 + deletes.astype(np.int64)))
    tombstone = np.zeros(len(index), dtype=bool)
    tombstone[np.cumsum(1 + deletes.astype(np.int64)) - 1] = deletes
    is_tombstone = pa.array(tombstone)
    yield from sized_batches(len(index), {
        "topic": changes.topics.take(index),
        "key": keys.take(index),
        "value": pc.if_else(is_tombstone, pa.scalar(None, values.type), values.take(index)),
        "table": changes.tables.take(index),
        "op": pc.if_else(is_tombstone, pa.scalar("tombstone"), changes.ops.take(index)),
        "commit_lsn": changes.commit_lsns.take(index),
        "lsn": changes.lsns.take(index),
        "serial": pc.add(changes.serials.take(index), is_tombstone.cast(pa.int32())),
        "source_ts_ms": changes.source_ts_ms.take(index)})


def sized_batches(rows: int, columns: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
    """Event rows from whole columns (an array, or one value for every row; headers are empty and binary values
    null), handed over in batches of at most ``ARROW_BATCH_BYTES`` of values, at least one row each."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = event_arrow_schema()
    values = columns["value"]
    sizes = np.cumsum(np.asarray(pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False),
                                 dtype=np.int64))
    start = 0
    while start < rows:
        taken = int(np.searchsorted(sizes, (sizes[start - 1] if start else 0) + ARROW_BATCH_BYTES, side="right"))
        count = max(taken, start + 1) - start
        arrays = []
        for field in schema:
            given = columns.get(field.name)
            if field.name == "headers":
                offsets = pa.array(np.zeros(count + 1, dtype=np.int32))
                arrays.append(pa.ListArray.from_arrays(offsets, pa.array([], type=field.type.value_type))
                              .cast(field.type))
            elif isinstance(given, (pa.Array, pa.ChunkedArray)):
                arrays.append(given.slice(start, count).cast(field.type))
            else:
                arrays.append(pa.repeat(pa.scalar(given, field.type), count))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        start += count


def spark_rows(rows: Iterable[EventRow]) -> list[EventRow]:
    """Event rows as ``spark.createDataFrame(rows, EVENT_SCHEMA)`` takes them: the positions' LSNs as Decimals."""
    from decimal import Decimal

    at = EVENT_COLUMNS.index("commit_lsn")
    return [(*row[:at], Decimal(int(row[at])), Decimal(int(row[at + 1])), *row[at + 2:])  # type: ignore[call-overload]
            for row in rows]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def record(topic: str, key: str | None, value: str | bytes | None, *, op: str, position: Position, ts_ms: int,
           table: str | None = None, serial: int | None = None) -> EventRow:
    """One output record; ``value`` bytes go to ``value_binary``."""
    text, binary = (None, value) if isinstance(value, bytes) else (value, None)
    return (topic, key, text, [], table, op, position.commit_lsn, position.lsn,
            position.serial if serial is None else serial, ts_ms, binary)


def event_rows(event: ChangeEvent, table_format: TableFormat, tombstones: bool) -> list[EventRow]:
    """The records of one change event: the event itself and, after a delete, its tombstone."""
    key_row = event.after if event.op in ("c", "r", "u") else event.before
    key = table_format.key_json(key_row or {}, read=event.op == "r")
    table = f"{event.schema}.{event.table}"
    rows = [record(table_format.topic, key, table_format.value_json(event, now_ms()), op=event.op,
                   position=event.position, ts_ms=event.source_ts_ms, table=table)]
    if event.op == "d" and tombstones:
        rows.append(record(table_format.topic, key, None, op="tombstone", position=event.position,
                           ts_ms=event.source_ts_ms, table=table, serial=event.position.serial + 1))
    return rows


def skipped_operations(options: Mapping[str, str]) -> set[str]:
    """The operations ``skipped.operations`` leaves out (Debezium's default: truncates)."""
    return {op.strip() for op in options.get("skipped.operations", "t").split(",")}


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    return default if value is None else value.strip().lower() in ("true", "1", "yes", "on")


STATS = "_stats"  # the op of a partition's last row: what it read, for the driver's metrics (cdckit.observe)


def with_stats(batches: Iterable[pa.RecordBatch], database: str,
               filtered: Callable[[], int] | None = None) -> Iterator[pa.RecordBatch]:
    """The partition's batches, then one control row (op ``_stats``) with what they held: data events by op,
    transactions (runs of one commit position; a partition never splits a transaction), the events ``filtered``
    out, and the last event (its table, op, position, source time and its ``source`` block's transaction id and
    position). Counted on the Arrow columns as they pass, without reading the data again."""
    import orjson
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdckit.observe.metrics import DATA_OPS, stats_document

    ops: Counter[str] = Counter()
    transactions = 0
    previous: int | None = None
    last: dict[str, Any] | None = None
    last_value: str | None = None
    data_ops = pa.array(DATA_OPS)
    for batch in batches:
        yield batch
        is_data = pc.is_in(batch.column("op"), value_set=data_ops)
        if not pc.any(is_data).as_py():
            continue
        # the small columns only: the values (most of the bytes) are not copied
        rows = pa.RecordBatch.from_arrays([batch.column("op"), batch.column("commit_lsn")], ["op", "commit_lsn"])
        if not pc.all(is_data).as_py():
            rows = rows.filter(is_data)
        for entry in pc.value_counts(rows.column("op")).to_pylist():
            ops[entry["values"]] += entry["counts"]
        commits = rows.column("commit_lsn")
        size = len(commits)
        if size > 1:
            transactions += int(pc.sum(pc.not_equal(commits.slice(1), commits.slice(0, size - 1))).as_py() or 0)
        first = int(commits[0].as_py())
        transactions += 1 if first != previous else 0
        previous = int(commits[size - 1].as_py())
        index = int(pc.indices_nonzero(is_data)[-1].as_py())  # the batch's last data event
        end = {name: batch.column(name)[index].as_py() for name in
               ("table", "topic", "op", "commit_lsn", "lsn", "serial", "source_ts_ms", "value")}
        end["commit_lsn"], end["lsn"] = int(end["commit_lsn"]), int(end["lsn"])  # Decimal as Arrow gives them
        last = {"table": end["table"], "topic": end["topic"], "op": end["op"],
                # a JSON number up to 63 bits; a SQL Server LSN past that as its digits (readers take int() of both)
                "position": [p if abs(p) < 1 << 63 else str(p) for p in (end["commit_lsn"], end["lsn"])]
                + [end["serial"]], "source_ts_ms": end["source_ts_ms"]}
        last_value = end["value"]
    if last is not None and last_value:
        source = _source_block(orjson, last_value)
        last["transaction"] = str(source.get("txId") or source.get("commit_lsn") or "") or None
        last["source"] = {k: source[k] for k in ("lsn", "txId", "ts_usec", "commit_lsn", "change_lsn",
                                                 "event_serial_no") if source.get(k) is not None}
    document = stats_document(database, ops, transactions, filtered() if filtered else 0, last)
    yield from arrow_batches([("", None, orjson.dumps(document).decode(), [], None, STATS, 0, 0, 0, now_ms(), None)])


def _source_block(orjson: Any, value: str) -> dict[str, Any]:
    """A Debezium value's ``source`` block (with or without the schema envelope), or {} for another format."""
    try:
        message = orjson.loads(value)
    except ValueError:
        return {}
    if not isinstance(message, dict):
        return {}
    payload = message.get("payload", message)
    source = payload.get("source") if isinstance(payload, dict) else None
    return source if isinstance(source, dict) else {}
