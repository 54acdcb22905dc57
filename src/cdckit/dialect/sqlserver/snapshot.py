"""SQL Server snapshots: primary-key chunks read in parallel, each reconciled with the change stream.

SQL Server has no exported snapshots, so cdckit uses the watermark method (DBLog, Flink CDC): for each chunk,
read the max LSN (low watermark), SELECT the chunk's rows, read the max LSN again (high watermark), then apply
the chunk's own changes with commit LSN in (low, high] to the rows read. The result is the chunk exactly as of
its high watermark, whatever committed while it was read, without holding locks longer than the SELECT.

Chunks are keyset ranges over the whole primary key (docs/decisions/0035): the server finds the boundary keys in its
own order, a chunk holds the keys after its lower boundary and up to its upper one, and whether a changed key lies
in a chunk is asked of the server too (``keys_inside``), never compared in Python: a character key sorts by its
column's collation, a uniqueidentifier by SQL Server's byte groups. Boundary keys are kept as text (``key_text``),
JSON in the snapshot's plan and in the stream's offsets, and bound back in their columns' types (``key_values``).

Streaming starts at the max LSN taken before the first chunk; a change of a key whose chunk's high watermark is
at or after the change's commit LSN is already in the snapshot and is skipped (``ChunkFilter``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from cdckit.dialect.sqlserver import queries
from cdckit.dialect.sqlserver.catalog import CaptureInstance
from cdckit.dialect.sqlserver.changes import check_readable, fold_changes, read_changes, require_max_lsn
from cdckit.errors import CdcKitError, SourcePreconditionError, first_line
from cdckit.events import ChangeEvent
from cdckit.state import StateStore

MAX_CHUNKS_PER_TABLE = 1024
CHUNKS_OPTION = "cdckit.sqlserver.snapshot.chunks"
# Key column types a keyset cannot cut on: not comparable (spatial, xml, large objects), or read as text that would
# not compare as the column does (sql_variant). A table with one reads as one chunk, as a table without a key does.
# hierarchyid compares (depth first) and its text casts back, but its keysets are not in the model of SQL Server
# that tests them: one chunk too, for now.
_UNCHUNKABLE = {"geometry", "geography", "xml", "text", "ntext", "image", "sql_variant", "hierarchyid"}
MAX_PARAMETERS = 2000  # SQL Server takes 2100 parameters in a statement

KeyText = tuple[str, ...]  # a key's values as text, in key order (``key_text``)


def _bounds(value: Any) -> KeyText | None:
    """A stored chunk boundary as a key: a list from JSON; an integer from a plan or offset written before chunks
    were keysets (an inclusive lower or exclusive upper bound on an integer key: as a keyset boundary, the integer
    before it)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return (str(value - 1),)
    return tuple(str(v) for v in value)


@dataclass(frozen=True)
class Chunk:
    database: str
    schema: str
    table: str
    index: int
    lower: KeyText | None  # the keys after this boundary key (None = from the first)
    upper: KeyText | None  # up to and including this one (None = to the last)
    last: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "lower", _bounds(self.lower))
        object.__setattr__(self, "upper", _bounds(self.upper))

    @property
    def id(self) -> str:
        return f"{self.database}.{self.schema}.{self.table}#{self.index}"


def chunk_key(instance: CaptureInstance) -> tuple[str, ...] | None:
    """The key columns chunks are cut on (the whole primary key), or None: the table is read as one chunk (it has
    no key, or a key column that is nullable or of a type a keyset cannot compare)."""
    columns = {c.name: c for c in instance.columns}
    key = instance.key_columns
    if not key or any(k not in columns or k in instance.dropped_columns for k in key):
        return None
    for name in key:
        column = columns[name]
        if column.optional or column.type_name.lower() in _UNCHUNKABLE or column.max_length == -1:
            return None
    return tuple(key)


def key_types(instance: CaptureInstance, key: Sequence[str]) -> list[str]:
    """The key columns' declarations, as the keyset's parameters are cast to."""
    columns = {c.name: c for c in instance.columns}
    return [queries.type_declaration(columns[k].type_name, columns[k].max_length, columns[k].precision,
                                     columns[k].scale) for k in key]


def _column_types(instance: CaptureInstance) -> dict[str, str]:
    return {c.name: c.type_name for c in instance.columns}


def key_text(values: Sequence[Any]) -> KeyText:
    """Key values as pyodbc returns them, as text that survives JSON and binds back to the same value."""
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, (dt.date, dt.time)):  # datetime too
            return value.isoformat()
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).hex()
        if isinstance(value, uuid.UUID):
            return str(value).upper()
        return str(value)  # int, Decimal (exactly), str (character, uniqueidentifier, hierarchyid and other text)
    return tuple(text(v) for v in values)


_MOMENT = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?")  # as read, or as timestamp_text
_INTEGER = {"tinyint", "smallint", "int", "bigint"}
_DECIMAL = {"decimal", "numeric", "money", "smallmoney"}


def key_values(instance: CaptureInstance, key: Sequence[str], texts: Sequence[str]) -> list[Any]:
    """``key_text`` back as parameters of the key columns' types (each is also cast to its type in the SQL): numbers,
    dates and binary values as Python's, the rest as text SQL Server converts (uniqueidentifier, time, datetimeoffset,
    a datetime2 with 100 ns digits)."""
    columns = {c.name: c for c in instance.columns}
    values: list[Any] = []
    for name, text in zip(key, texts, strict=True):
        kind = columns[name].type_name.lower()
        if kind in _INTEGER:
            values.append(int(text))
        elif kind == "bit":
            values.append(text in ("1", "True", "true"))
        elif kind in _DECIMAL:
            values.append(Decimal(text))
        elif kind in ("float", "real"):
            values.append(float(text))
        elif kind in ("binary", "varbinary", "timestamp", "rowversion"):
            values.append(bytes.fromhex(text))
        elif kind == "date" and re.fullmatch(r"\d{4}-\d\d-\d\d", text):
            values.append(dt.date.fromisoformat(text))
        elif kind in ("datetime", "datetime2", "smalldatetime") and (moment := _MOMENT.fullmatch(text)):
            fraction = moment[3] or ""
            if kind == "datetime2" and len(fraction.rstrip("0")) > 6:
                values.append(text)  # 100 ns: CAST from its text keeps the seventh digit
            else:  # CAST of text to datetime takes three digits at most; a datetime parameter any
                values.append(dt.datetime.fromisoformat(f"{moment[1]}T{moment[2]}.{fraction[:6].ljust(6, '0')}"))
        else:
            values.append(text)
    return values


def _bound_parameters(instance: CaptureInstance, key: Sequence[str], lower: KeyText | None,
                      upper: KeyText | None) -> list[Any]:
    parameters: list[Any] = []
    for bound in (lower, upper):
        if bound is not None:
            parameters.extend(queries.keyset_parameters(key_values(instance, key, bound)))
    return parameters


def plan_chunks(cursor: Any, instance: CaptureInstance, chunk_rows: int) -> list[Chunk]:
    """How a table splits into chunks of about ``chunk_rows`` rows (at most ``MAX_CHUNKS_PER_TABLE``): the server
    numbers its keys in key order and returns every n-th, the upper boundaries; the last chunk is open-ended. No
    chunk for an empty table, one for a table without a key to cut on. The driver holds one key per chunk."""
    one = Chunk(instance.database, instance.schema, instance.name, 0, None, None)
    key = chunk_key(instance)
    if key is None:
        return [one]
    db = queries.quote_name(instance.database)
    cursor.execute(queries.row_count(db, instance.schema, instance.name))
    count = int(cursor.fetchone()[0] or 0)
    if count == 0:
        return []  # an empty table: nothing to read (and the snapshot's last row is in another table)
    pieces = max(1, min(MAX_CHUNKS_PER_TABLE, math.ceil(count / max(1, chunk_rows))))
    if pieces == 1:
        return [one]
    cursor.execute(queries.key_boundaries(db, instance.schema, instance.name, key, _column_types(instance)),
                   pieces - 1, math.ceil(count / pieces))
    edges: list[KeyText | None] = [None, *(key_text(row) for row in cursor.fetchall()), None]
    return [Chunk(instance.database, instance.schema, instance.name, i, edges[i], edges[i + 1])
            for i in range(len(edges) - 1)]


def last_key(cursor: Any, instance: CaptureInstance) -> KeyText | None:
    """The table's largest key (None: the table is empty)."""
    key = chunk_key(instance)
    assert key is not None
    cursor.execute(queries.last_key(queries.quote_name(instance.database), instance.schema, instance.name, key,
                                    _column_types(instance)))
    row = cursor.fetchone()
    return None if row is None else key_text(row)


def next_boundary(cursor: Any, instance: CaptureInstance, lower: KeyText | None, high: KeyText,
                  chunk_rows: int) -> KeyText | None:
    """The upper boundary of the chunk of ``chunk_rows`` keys after ``lower`` and up to ``high``; None when fewer keys
    are left (the chunk after ``lower`` is the table's last)."""
    key = chunk_key(instance)
    assert key is not None
    cursor.execute(queries.next_boundary(queries.quote_name(instance.database), instance.schema, instance.name, key,
                                         key_types(instance, key), lower is not None, _column_types(instance)),
                   chunk_rows, *_bound_parameters(instance, key, lower, high))
    row = cursor.fetchone()
    if row is None or int(row[-1]) < chunk_rows:
        return None
    return key_text(row[:-1])


def keys_inside(cursor: Any, instance: CaptureInstance, lower: KeyText | None, upper: KeyText | None,
                keys: Sequence[Sequence[Any]]) -> set[int]:
    """The positions in ``keys`` (key values as read) of those in the chunk ``(lower, upper]``, as the server compares
    them (``queries.keys_within``), in as many statements as SQL Server's parameter limit needs."""
    key = chunk_key(instance)
    if key is None or (lower is None and upper is None):
        return set(range(len(keys)))
    bounds = _bound_parameters(instance, key, lower, upper)
    per = max(1, (MAX_PARAMETERS - len(bounds)) // (len(key) + 1))
    db = queries.quote_name(instance.database)
    types = key_types(instance, key)
    inside: set[int] = set()
    known = [(n, values) for n, values in enumerate(keys) if all(v is not None for v in values)]  # NULL: in none
    for start in range(0, len(known), per):
        part = known[start:start + per]
        parameters = [value for n, values in part for value in (n, *key_values(instance, key, key_text(values)))]
        cursor.execute(queries.keys_within(db, instance.schema, instance.name, key, types, len(part),
                                           lower is not None, upper is not None), *parameters, *bounds)
        inside.update(int(row[0]) for row in cursor.fetchall())
    return inside


def _key_of(instance: CaptureInstance, row: Mapping[str, object] | None) -> tuple[object, ...]:
    return tuple((row or {}).get(k) for k in instance.key_columns)


# snapshot.isolation.mode values whose reads take and hold locks (Debezium sets LOCK_TIMEOUT for these two)
LOCKING_ISOLATION = ("repeatable_read", "exclusive")


def read_chunk(conn: Any, instance: CaptureInstance, chunk: Chunk, isolation: str,
               fetch_size: int = 10240, condition: str | None = None,
               lock_timeout_ms: int | None = None) -> tuple[list[dict[str, object]], int, int]:
    """(rows as of the high watermark, low watermark, high watermark). Rows of one chunk are held in memory:
    ``cdckit.snapshot.chunk.rows`` bounds them. ``lock_timeout_ms`` (``snapshot.lock.timeout.ms``) bounds the wait
    for locks of the isolation modes that take them, repeatable_read and exclusive, as Debezium's snapshot does."""
    cursor = conn.cursor()
    db = queries.quote_name(instance.database)
    # No maximum LSN yet (nothing captured since CDC was enabled): everything later is reconciled from the
    # capture instance's start.
    low = require_max_lsn(cursor, instance.database) or max(instance.start_lsn - 1, 0)
    cursor.execute(queries.SET_ISOLATION[isolation])
    if lock_timeout_ms is not None and isolation in LOCKING_ISOLATION:
        cursor.execute(queries.set_lock_timeout(lock_timeout_ms))
    if isolation == "exclusive":
        conn.autocommit = False
        cursor.execute(queries.lock_table(db, instance.schema, instance.name))
    key = chunk_key(instance)
    lower, upper = (chunk.lower, chunk.upper) if key is not None else (None, None)
    names = [c.name for c in instance.columns if c.name not in instance.dropped_columns]
    cursor.execute(queries.select_rows(db, instance.schema, instance.name, names, list(key or instance.key_columns),
                                       lower is not None, upper is not None, condition, _column_types(instance),
                                       key_types(instance, key) if key else ()),
                   *(_bound_parameters(instance, key, lower, upper) if key else ()))
    rows: dict[tuple[object, ...], dict[str, object]] = {}
    while batch := cursor.fetchmany(fetch_size):
        for values in batch:
            row = {**dict.fromkeys(instance.dropped_columns), **dict(zip(names, values, strict=True))}
            rows[_key_of(instance, row)] = row
    if isolation == "exclusive":
        conn.commit()
        conn.autocommit = True
    high = require_max_lsn(cursor, instance.database) or low
    if high > low:
        first = check_readable(cursor, instance, low)
        events = list(fold_changes(instance, read_changes(cursor, instance, first, high)))
        images = [(event, event.after if event.op in ("c", "u") else event.before) for event in events]
        changed = [(event, image) for event, image in images if image is not None]
        inside = keys_inside(cursor, instance, lower, upper,
                             [tuple(image.get(k) for k in key) for _, image in changed]) if key else None
        for n, (event, _image) in enumerate(changed):
            if inside is None or n in inside:
                _apply(instance, rows, event)
    return list(rows.values()), low, high


def _apply(instance: CaptureInstance, rows: dict[tuple[object, ...], dict[str, object]], event: ChangeEvent) -> None:
    if event.op == "d":
        rows.pop(_key_of(instance, event.before), None)
    else:
        rows[_key_of(instance, event.after)] = dict(event.after or {})


def select_overrides(options: Mapping[str, str]) -> dict[str, str]:
    """``snapshot.select.statement.overrides`` (``schema.table`` list) -> the SELECT given for each table in
    ``snapshot.select.statement.overrides.<schema>.<table>``, keyed by lower-case ``schema.table``."""
    tables = [t.strip() for t in options.get("snapshot.select.statement.overrides", "").split(",") if t.strip()]
    return {table.lower(): options[f"snapshot.select.statement.overrides.{table}"] for table in tables
            if f"snapshot.select.statement.overrides.{table}" in options}


def check_override(table: str, statement: str) -> str | None:
    """A problem with an override statement (it must be one SELECT), or None."""
    import sqlglot
    from sqlglot import exp

    try:
        parsed = sqlglot.parse(statement, read="tsql")
    except sqlglot.errors.SqlglotError as error:  # ParseError, TokenError (an unterminated string or comment)
        return f"snapshot.select.statement.overrides.{table} is not valid T-SQL ({first_line(error)})"
    except RecursionError:
        return f"snapshot.select.statement.overrides.{table} nests its expressions too deeply to be read"
    if len(parsed) != 1 or not isinstance(parsed[0], exp.Select):
        return f"snapshot.select.statement.overrides.{table} must be a single SELECT statement"
    return None


def read_override(conn: Any, instance: CaptureInstance, statement: str, isolation: str,
                  fetch_size: int = 10240, lock_timeout_ms: int | None = None) -> tuple[list[dict[str, object]], int]:
    """Rows of a table read with its override SELECT (columns matched by name), and the max LSN before the read."""
    cursor = conn.cursor()
    before = require_max_lsn(cursor, instance.database) or max(instance.start_lsn - 1, 0)
    cursor.execute(queries.SET_ISOLATION[isolation])
    if lock_timeout_ms is not None and isolation in LOCKING_ISOLATION:
        cursor.execute(queries.set_lock_timeout(lock_timeout_ms))
    cursor.execute(statement)
    names = [str(column[0]) for column in cursor.description]
    unknown = set(names) - {c.name for c in instance.columns}
    if unknown:
        raise SourcePreconditionError(
            f"snapshot.select.statement.overrides.{instance.qualified_name} returns columns "
            f"{', '.join(sorted(unknown))} that the capture instance {instance.capture_instance} does not capture")
    rows: list[dict[str, object]] = []
    while batch := cursor.fetchmany(fetch_size):
        rows.extend(dict(zip(names, values, strict=True)) for values in batch)
    return rows, before


@dataclass(frozen=True)
class ChunkWatermark:
    database: str
    schema: str
    table: str
    lower: KeyText | None
    upper: KeyText | None
    high: int
    chunk: str = ""
    reconciled: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "lower", _bounds(self.lower))
        object.__setattr__(self, "upper", _bounds(self.upper))


class ChunkFilter:
    """Drops streamed changes a snapshot chunk already reflects: a change committed at or before the high watermark
    of a chunk holding its key. Which chunk holds a key the server says (``keys_inside``), for the changes committed
    while the chunks were read (before the last high watermark of their table), a block of changes at a time."""

    def __init__(self, watermarks: Sequence[ChunkWatermark]) -> None:
        self.by_table: dict[tuple[str, str, str], list[ChunkWatermark]] = {}
        for mark in watermarks:
            if mark.reconciled:
                self.by_table.setdefault((mark.database, mark.schema, mark.table), []).append(mark)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ChunkFilter:
        return cls([ChunkWatermark(**item) for item in json.loads(options.get(CHUNKS_OPTION, "[]"))])

    @staticmethod
    def to_option(watermarks: Sequence[ChunkWatermark]) -> str:
        return json.dumps([asdict(mark) for mark in watermarks])

    def extended(self, watermarks: Sequence[ChunkWatermark]) -> ChunkFilter:
        marks = [mark for group in self.by_table.values() for mark in group]
        return ChunkFilter([*marks, *watermarks])

    def already_snapshotted(self, block: Sequence[tuple[ChangeEvent, CaptureInstance]],
                            cursor: Callable[[], Any]) -> list[bool]:
        """For each change of ``block``, whether a chunk already holds it; ``cursor`` opens a cursor for the server's
        answers (called only when a key must be placed in a chunk)."""
        skipped = [False] * len(block)
        asks: dict[int, tuple[CaptureInstance, ChunkWatermark, list[tuple[int, tuple[object, ...]]]]] = {}
        for n, (event, instance) in enumerate(block):
            marks = self.by_table.get((instance.database, instance.schema, instance.name))
            candidates = [m for m in marks or () if event.position.commit_lsn <= m.high]
            if not candidates:
                continue
            key = chunk_key(instance)
            if key is None or any(m.lower is None and m.upper is None for m in candidates):
                skipped[n] = True
                continue
            image = (event.before if event.op == "d" else event.after) or {}
            for mark in candidates:
                asks.setdefault(id(mark), (instance, mark, []))[2].append((n, tuple(image.get(k) for k in key)))
        for instance, mark, wanted in asks.values():
            wanted = [(n, values) for n, values in wanted if not skipped[n]]
            if not wanted:
                continue
            for position in keys_inside(cursor(), instance, mark.lower, mark.upper, [v for _, v in wanted]):
                skipped[wanted[position][0]] = True
        return skipped


INCREMENTAL_WATERMARKS_FILE = "snapshot/incremental-watermarks.json"


def _store(options: Mapping[str, str]) -> StateStore:
    return StateStore(options.get("cdckit.checkpoint.location", "cdckit-checkpoint"))


def read_incremental_watermarks(options: Mapping[str, str]) -> list[dict[str, Any]]:
    return list(_store(options).read_json(INCREMENTAL_WATERMARKS_FILE) or [])


def record_incremental_watermarks(options: Mapping[str, str], controls: Sequence[str]) -> None:
    """Add the chunk watermarks an ad hoc snapshot reported (called on the driver after the batch commits)."""
    marks = read_incremental_watermarks(options) + [json.loads(c) for c in controls]
    _store(options).write_json(INCREMENTAL_WATERMARKS_FILE, marks)


def signal_instance(cursor: Any, database: str, options: Mapping[str, str]) -> CaptureInstance | None:
    """The capture instance of the signalling table (``signal.data.collection``) in ``database``, if any."""
    from cdckit.dialect.sqlserver.catalog import capture_instances

    target = options.get("signal.data.collection", "")
    parts = target.split(".")
    if len(parts) != 3 or parts[0].lower() != database.lower():
        return None
    only = {**options, "table.include.list": re.escape(f"{parts[1]}.{parts[2]}"), "table.exclude.list": "",
            "column.include.list": "", "column.exclude.list": ""}
    try:
        found = capture_instances(cursor, database, only)
    except CdcKitError:
        raise SourcePreconditionError(
            f"the signalling table {target} has no capture instance; create and CDC-enable it with "
            f"sql/sqlserver/06_signal_table.sql") from None
    return found[0] if found else None


def snapshot_events(instance: CaptureInstance, rows: Iterator[dict[str, object]] | list[dict[str, object]],
                    high: int, final_marker: str, ts_ms: int, marker: str = "true") -> Iterator[ChangeEvent]:
    """``r`` events of a chunk's rows; every row is marked ``marker``, the final one ``final_marker``."""
    from cdckit.events import Position

    buffered: dict[str, object] | None = None
    for row in rows:
        if buffered is not None:
            yield _read_event(instance, buffered, high, marker, ts_ms, Position)
        buffered = row
    if buffered is not None:
        yield _read_event(instance, buffered, high, final_marker, ts_ms, Position)


def _read_event(instance: CaptureInstance, row: dict[str, object], high: int, marker: str, ts_ms: int,
                position: Any) -> ChangeEvent:
    return ChangeEvent(instance.schema, instance.name, "r", None, row, position(high, high, 0), ts_ms, None,
                       snapshot=marker, database=instance.database)
