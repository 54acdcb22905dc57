"""SQL Server snapshots: primary-key chunks read in parallel, each reconciled with the change stream.

SQL Server has no exported snapshots, so cdckit uses the watermark method (DBLog, Flink CDC): for each chunk,
read the max LSN (low watermark), SELECT the chunk's rows, read the max LSN again (high watermark), then apply
the chunk's own changes with commit LSN in (low, high] to the rows read. The result is the chunk exactly as of
its high watermark, whatever committed while it was read, without holding locks longer than the SELECT.

Streaming starts at the max LSN taken before the first chunk; a change of a key whose chunk's high watermark is
at or after the change's commit LSN is already in the snapshot and is skipped (``ChunkFilter``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cdckit.dialect.sqlserver import queries
from cdckit.dialect.sqlserver.catalog import CaptureInstance
from cdckit.dialect.sqlserver.changes import check_readable, fold_changes, read_changes, require_max_lsn
from cdckit.errors import CdcKitError, SourcePreconditionError, first_line
from cdckit.events import ChangeEvent
from cdckit.state import StateStore

_INTEGER_TYPES = {"tinyint", "smallint", "int", "bigint"}
MAX_CHUNKS_PER_TABLE = 1024
CHUNKS_OPTION = "cdckit.sqlserver.snapshot.chunks"


@dataclass(frozen=True)
class Chunk:
    database: str
    schema: str
    table: str
    index: int
    lower: int | None  # inclusive key bound (None = unbounded)
    upper: int | None  # exclusive key bound
    last: bool = False

    @property
    def id(self) -> str:
        return f"{self.database}.{self.schema}.{self.table}#{self.index}"

    def contains(self, key: Any) -> bool:
        if self.lower is None and self.upper is None:
            return True
        if not isinstance(key, int):
            return False
        return (self.lower is None or key >= self.lower) and (self.upper is None or key < self.upper)


def chunk_key(instance: CaptureInstance) -> str | None:
    """The single integer key column chunks are cut on, or None (the table is read as one chunk)."""
    types = {c.name: c.type_name for c in instance.columns}
    if len(instance.key_columns) == 1 and types.get(instance.key_columns[0]) in _INTEGER_TYPES:
        return instance.key_columns[0]
    return None


def chunk_plan(cursor: Any, instance: CaptureInstance, chunk_rows: int) -> tuple[int, int, int] | None:
    """How a table splits into chunks of about ``chunk_rows`` rows: ``(low, step, pieces)`` over its integer key
    (one piece for a table without one), or None for an empty table."""
    key = chunk_key(instance)
    if key is None:
        return 0, 0, 1
    cursor.execute(queries.key_bounds(queries.quote_name(instance.database), instance.schema, instance.name, key))
    low, high, count = cursor.fetchone()
    if low is None:
        return None  # an empty table: nothing to read (and the snapshot's last row is in another table)
    span = int(high) - int(low) + 1
    pieces = max(1, min(MAX_CHUNKS_PER_TABLE, math.ceil(span / chunk_rows), math.ceil(int(count) / chunk_rows) + 1))
    return int(low), math.ceil(span / pieces), pieces


def chunk_at(instance: CaptureInstance, plan: tuple[int, int, int], index: int) -> Chunk:
    """Chunk ``index`` of a ``chunk_plan``: the first and the last are open-ended."""
    low, step, pieces = plan
    return Chunk(instance.database, instance.schema, instance.name, index,
                 None if index == 0 else low + index * step, None if index == pieces - 1 else low + (index + 1) * step)


def plan_chunks(cursor: Any, instance: CaptureInstance, chunk_rows: int) -> list[Chunk]:
    plan = chunk_plan(cursor, instance, chunk_rows)
    return [] if plan is None else [chunk_at(instance, plan, i) for i in range(plan[2])]


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
    names = [c.name for c in instance.columns if c.name not in instance.dropped_columns]
    cursor.execute(queries.select_rows(db, instance.schema, instance.name, names, [key] if key else
                                       list(instance.key_columns), chunk.lower is not None and key is not None,
                                       chunk.upper is not None and key is not None, condition,
                                       {c.name: c.type_name for c in instance.columns}),
                   *[bound for bound in (chunk.lower, chunk.upper) if bound is not None and key is not None])
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
        for event in fold_changes(instance, read_changes(cursor, instance, first, high)):
            _apply(instance, chunk, key, rows, event)
    return list(rows.values()), low, high


def _apply(instance: CaptureInstance, chunk: Chunk, key: str | None, rows: dict[tuple[object, ...],
           dict[str, object]], event: ChangeEvent) -> None:
    image = event.after if event.op in ("c", "u") else event.before
    if image is None or (key is not None and not chunk.contains(image.get(key))):
        return
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
    lower: int | None
    upper: int | None
    high: int
    chunk: str = ""
    reconciled: bool = True


class ChunkFilter:
    """Drops streamed changes a snapshot chunk already reflects."""

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

    def already_snapshotted(self, event: ChangeEvent, instance: CaptureInstance) -> bool:
        marks = self.by_table.get((instance.database, instance.schema, instance.name))
        if not marks:
            return False
        key = chunk_key(instance)
        image = event.before if event.op == "d" else event.after
        value = (image or {}).get(key) if key else None
        for mark in marks:
            chunk = Chunk(mark.database, mark.schema, mark.table, 0, mark.lower, mark.upper)
            if (key is None or chunk.contains(value)) and event.position.commit_lsn <= mark.high:
                return True
        return False


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
