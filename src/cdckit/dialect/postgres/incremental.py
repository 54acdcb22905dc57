"""Incremental (ad hoc) snapshots on PostgreSQL and YugabyteDB, as Debezium's ``execute-snapshot`` signal asks.

A table is read in chunks of ``incremental.snapshot.chunk.size`` rows, in primary-key order, while the stream flows:
each micro-batch that finds the stream caught up opens a *window* and reads the next chunks in it (DBLog, as Debezium
and Flink CDC do it). The window's watermarks are the snapshot's own visibility rather than rows written to a table:

1. the driver opens a ``REPEATABLE READ`` transaction and exports its snapshot (``pg_export_snapshot``), noting which
   transactions it sees (``pg_current_snapshot``: ``xmin:xmax:xip``); the chunks' key bounds are planned in it;
2. it writes a logical decoding message (``cdckit.snapshot.window``; no table is written) and ends the batch at or
   after that message's commit: every transaction the snapshot sees is in this batch or before it;
3. a task reads the chunks under the exported snapshot and drops every row whose key a transaction of the batch the
   snapshot does *not* see has changed (its events, in the batch, carry the newer row); the rest are emitted, as
   ``op: r`` with ``source.snapshot: incremental``, after the batch's changes.

A row kept is thus the row as of the batch's end, and no read ever goes back in time against the stream. The
progress (the tables left, the current table's last key and largest key) is part of the batch's end offset, in
Spark's checkpoint: a job killed mid-snapshot resumes at the next chunk. A batch replayed after a restart reads its
chunks again under a new snapshot (the exported one ended with the job); their rows are then the table's rows as of
the replay, which later events of the stream bring back in line.

Signals are read from the stream: the inserts into ``signal.data.collection`` (``<schema>.<table>`` with the columns
``id``, ``type``, ``data``, in the publication) committed in a batch take effect from the next batch.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg2.errors
from psycopg2 import sql
from psycopg2.extensions import connection as Connection

from cdckit.dialect.incremental import Key, Progress, TableRequest
from cdckit.dialect.postgres import pgoutput
from cdckit.dialect.postgres.catalog import TableInfo, load_table
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.heartbeat import current_wal_lsn
from cdckit.dialect.postgres.lsn import format_lsn
from cdckit.dialect.postgres.peek import as_bytes, taking_turns
from cdckit.dialect.postgres.pending import peek_options
from cdckit.dialect.postgres.server_version import ServerVersion
from cdckit.dialect.postgres.snapshot import fetch_blocks
from cdckit.dialect.signals import Signal, check_columns, parse_signal
from cdckit.errors import CdcKitError, DecodingError, first_line
from cdckit.events import UNAVAILABLE

log = logging.getLogger("cdckit.signals")

WINDOW_MESSAGE_PREFIX = "cdckit.snapshot.window"
MAX_CHUNKS_PER_WINDOW = 64


@dataclass(frozen=True)
class WindowChunk:
    """Rows of one table with ``after < key <= upto`` (``after`` None: from the table's start)."""

    id: int
    schema: str
    table: str
    after: Key | None
    upto: Key
    condition: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "schema": self.schema, "table": self.table,
                "after": list(self.after) if self.after is not None else None, "upto": list(self.upto),
                "condition": self.condition}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> WindowChunk:
        after = document.get("after")
        return cls(int(document["id"]), str(document["schema"]), str(document["table"]),
                   tuple(after) if after is not None else None, tuple(document["upto"]), document.get("condition"))


@dataclass(frozen=True)
class Visibility:
    """Which transactions a snapshot sees (``pg_current_snapshot``'s ``xmin:xmax:xip_list``)."""

    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.xmin}:{self.xmax}:{','.join(map(str, self.xip))}"

    @classmethod
    def parse(cls, text: str) -> Visibility:
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), tuple(int(x) for x in xip.split(",") if x))

    def sees(self, xid: int) -> bool:
        """Whether a committed transaction ``xid`` (32 bits, as decoding gives it) is visible to the snapshot."""
        xid32 = xid & 0xFFFFFFFF
        if (xid32 - self.xmax) & 0xFFFFFFFF < 0x80000000:  # at or after xmax, modulo wraparound
            return False
        return xid32 not in {x & 0xFFFFFFFF for x in self.xip}


@dataclass
class Window:
    """An exported snapshot the driver holds open until the batch that reads it is committed."""

    connection: Connection
    name: str
    visibility: Visibility
    tables: dict[tuple[str, str], TableInfo] = field(default_factory=dict)

    def close(self) -> None:
        if not self.connection.closed:
            self.connection.close()


def export_window(options: Mapping[str, str]) -> Window:
    """Open a read-only REPEATABLE READ transaction and export its snapshot."""
    conn = connect(options)
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        function = ("pg_current_snapshot" if ServerVersion.of(conn).has_pg_snapshot_functions
                    else "txid_current_snapshot")
        with conn.cursor() as cur:
            cur.execute(f"SELECT pg_export_snapshot(), {function}()::text")
            row = cur.fetchone()
        assert row is not None
        return Window(conn, str(row[0]), Visibility.parse(str(row[1])))
    except BaseException:
        conn.close()
        raise


def mark_window(conn: Connection, chunk_ids: Sequence[int]) -> int:
    """Write the window's logical decoding message (its commit is the batch's end or before it) and return the WAL
    insert position after its commit."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_logical_emit_message(true, %s, %s)",
                    (WINDOW_MESSAGE_PREFIX, json.dumps({"chunks": list(chunk_ids)})))
    conn.commit()
    return current_wal_lsn(conn, "insert")


# -- chunks -----------------------------------------------------------------------------------------------------
def _key_list(table: TableInfo, suffix: str = "") -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL("{}{}").format(sql.Identifier(k), sql.SQL(suffix)) for k in table.key_columns)


def _key_row(table: TableInfo) -> sql.Composable:
    """A key given as JSON text (``%s``), each value converted by its column's own type (``json_populate_record``)."""
    return sql.SQL("(SELECT {k} FROM json_populate_record(NULL::{t}, %s::json))").format(
        k=_key_list(table), t=sql.Identifier(table.schema, table.name))


def _key_json(table: TableInfo, key: Key) -> str:
    return json.dumps(dict(zip(table.key_columns, key, strict=True)))


def _range_conditions(table: TableInfo, after: Key | None, upto: Key | None) -> tuple[list[sql.Composable], list[str]]:
    conditions: list[sql.Composable] = []
    params: list[str] = []
    if after is not None:
        conditions.append(sql.SQL("({k}) > {row}").format(k=_key_list(table), row=_key_row(table)))
        params.append(_key_json(table, after))
    if upto is not None:
        conditions.append(sql.SQL("({k}) <= {row}").format(k=_key_list(table), row=_key_row(table)))
        params.append(_key_json(table, upto))
    return conditions, params


def _key_at(conn: Connection, table: TableInfo, after: Key | None, upto: Key | None, offset: int,
            descending: bool = False) -> Key | None:
    conditions, params = _range_conditions(table, after, upto)
    where = sql.SQL(" WHERE {}").format(sql.SQL(" AND ").join(conditions)) if conditions else sql.SQL("")
    # the texts are named apart from the columns: ORDER BY a column's name would sort by its text
    texts = sql.SQL(", ").join(sql.SQL("{}::text AS {}").format(sql.Identifier(k), sql.Identifier(f"cdckit_key_{i}"))
                               for i, k in enumerate(table.key_columns))
    query = sql.SQL("SELECT {texts} FROM {t}{where} ORDER BY {order} OFFSET %s LIMIT 1").format(
        texts=texts, t=sql.Identifier(table.schema, table.name), where=where,
        order=_key_list(table, " DESC" if descending else ""))
    with conn.cursor() as cur:
        cur.execute(query, [*params, offset])
        row = cur.fetchone()
    return tuple(str(v) for v in row) if row is not None else None


def plan_window(window: Window, progress: Progress, options: Mapping[str, str], budget_rows: int,
                chunk_rows: int) -> tuple[list[WindowChunk], Progress]:
    """The chunks this window reads (at least one while a table is left, up to ``budget_rows`` rows of them), and the
    progress after them; key bounds are looked up in the window's snapshot."""
    conn = window.connection
    chunks: list[WindowChunk] = []
    while progress.active and len(chunks) < MAX_CHUNKS_PER_WINDOW and (
            not chunks or (len(chunks) + 1) * chunk_rows <= budget_rows):
        if progress.current is None:
            progress = replace(progress, current=progress.pending[0], pending=progress.pending[1:], last=None,
                               high=None)
        request = progress.current
        assert request is not None
        table = _table(window, request, options)
        if table is None or (progress.high is None and not _condition_runs(conn, table, request)):
            progress = replace(progress, current=None, last=None, high=None)
            continue
        high = progress.high
        if high is None:
            high = _key_at(conn, table, None, None, 0, descending=True)
            if high is None:  # empty: nothing to read
                log.info("incremental snapshot: %s is empty", request.qualified_name)
                progress = replace(progress, current=None, last=None, high=None)
                continue
            progress = replace(progress, high=high)
        upto = _key_at(conn, table, progress.last, high, chunk_rows - 1) or high
        chunks.append(WindowChunk(progress.chunks, table.schema, table.name, progress.last, upto, request.condition))
        if upto == high:
            log.info("incremental snapshot: the last chunk of %s is read in this batch", request.qualified_name)
            progress = replace(progress, current=None, last=None, high=None, chunks=progress.chunks + 1)
        else:
            progress = replace(progress, last=upto, chunks=progress.chunks + 1)
    return chunks, progress


def _condition_runs(conn: Connection, table: TableInfo, request: TableRequest) -> bool:
    """Whether the request's additional condition names only the table's captured columns and runs (an empty read,
    in a savepoint of the window's transaction); otherwise the table's snapshot is dropped, reported once, before a
    chunk of it is planned: a signal that cannot run never reaches the offsets' chunks, so it cannot fail a
    batch again at every restart."""
    if not request.condition:
        return True
    try:
        check_columns(request.condition, "postgres", [c.name for c in table.emitted_columns()])
    except ValueError as error:
        log.error("incremental snapshot of %s dropped: %s", request.qualified_name, error)
        return False
    query = sql.SQL("SELECT 1 FROM {t} WHERE ({c}) LIMIT 0").format(
        t=sql.Identifier(table.schema, table.name), c=sql.SQL(request.condition.replace("%", "%%")))
    with conn.cursor() as cur:
        cur.execute("SAVEPOINT cdckit_condition")
        try:
            cur.execute(query)
        except psycopg2.Error as error:
            cur.execute("ROLLBACK TO SAVEPOINT cdckit_condition")
            log.error("incremental snapshot of %s dropped: its additional condition %r fails on the table: %s",
                      request.qualified_name, request.condition, first_line(error))
            return False
        cur.execute("RELEASE SAVEPOINT cdckit_condition")
    return True


def _table(window: Window, request: TableRequest, options: Mapping[str, str]) -> TableInfo | None:
    """The requested table's structure, or None (logged) when it cannot be read by key."""
    key = (request.schema, request.table)
    if key not in window.tables:
        try:
            table = load_table(window.connection, request.schema, request.table, options)
        except CdcKitError as error:
            log.error("incremental snapshot of %s skipped: %s", request.qualified_name, error)
            return None
        if not table.key_columns:
            log.error("incremental snapshot of %s skipped: it has no primary key, and chunks are read in key order; "
                      "add a primary key", request.qualified_name)
            return None
        window.tables[key] = table
    return window.tables[key]


# -- the stream's messages of a few relations ------------------------------------------------------------------------
_RELATION_MESSAGES_SQL = """
WITH m AS (
    SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(%(slot)s, %(end)s::pg_lsn, NULL, VARIADIC %(opts)s)
), in_range AS (
    SELECT xid FROM m
    WHERE get_byte(data, 0) = 66 AND ('x' || encode(substring(data FROM 2 FOR 8), 'hex'))::bit(64)::int8 >= %(start)s
)
SELECT xid::text::int8, data FROM m
WHERE substring(data FROM 2 FOR 4) = ANY(%(relations)s)
  AND (get_byte(data, 0) = 82 OR (get_byte(data, 0) = ANY(%(kinds)s) AND xid IN (SELECT xid FROM in_range)))
"""


def _relation_messages(conn: Connection, options: Mapping[str, str], start: int, end: int,
                       relation_ids: Iterable[int], kinds: str, wait_seconds: float = 60.0
                       ) -> list[tuple[int, pgoutput.Message]]:
    """The Relation messages and the ``kinds`` of changes of ``relation_ids`` committed in ``(start, end]``, decoded,
    with their transaction's xid, in the stream's order. The server decodes the range and sends only those."""
    params = {"slot": options.get("slot.name", "debezium"), "end": format_lsn(end),
              "opts": peek_options(options, ServerVersion.of(conn)), "start": start,
              "relations": [psycopg2.Binary(struct.pack(">I", oid)) for oid in relation_ids],
              "kinds": [ord(kind) for kind in kinds]}

    def peek() -> list[tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute(_RELATION_MESSAGES_SQL, params)
            return list(cur.fetchall())

    rows = taking_turns(conn, peek, wait_seconds)
    conn.commit()
    return [(int(xid), pgoutput.decode_message(as_bytes(data))) for xid, data in rows]


def signal_table(conn: Connection, options: Mapping[str, str]) -> int | None:
    """The OID of ``signal.data.collection`` (``<schema>.<table>``), None when it is not set; a clear error when it is
    missing or not in the publication, as its inserts would never reach cdckit."""
    name = options.get("signal.data.collection", "").strip()
    if not name:
        return None
    schema, _, table = name.rpartition(".")
    if not schema:
        raise CdcKitError(f"signal.data.collection {name!r} must be <schema>.<table> for PostgreSQL")
    publication = options.get("publication.name", "dbz_publication")
    with conn.cursor() as cur:
        cur.execute("SELECT c.oid, EXISTS (SELECT 1 FROM pg_publication_tables p WHERE p.pubname = %s "
                    "AND p.schemaname = n.nspname AND p.tablename = c.relname) "
                    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND c.relname = %s", (publication, schema, table))
        row = cur.fetchone()
    conn.commit()
    if row is None:
        raise CdcKitError(
            f"signal.data.collection {name} does not exist; create it: CREATE TABLE {name} (id varchar(42) "
            f"PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL)")
    if str(row[1]).lower() not in ("true", "t"):
        raise CdcKitError(
            f"signal.data.collection {name} is not in publication '{publication}', so its signals would never reach "
            f"cdckit; run ALTER PUBLICATION {publication} ADD TABLE {name} (publication.autocreate.mode=filtered "
            f"adds it itself)")
    return int(row[0])


def signals_in(conn: Connection, options: Mapping[str, str], signal_oid: int, start: int, end: int) -> list[Signal]:
    """The signals inserted into the signalling table by the transactions committed in ``(start, end]``."""
    names: list[str] = []
    found: list[Signal] = []
    for _xid, message in _relation_messages(conn, options, start, end, [signal_oid], "I"):
        if isinstance(message, pgoutput.Relation):
            names = [c.name for c in message.columns]
        elif isinstance(message, pgoutput.Insert):
            signal = parse_signal(dict(zip(names, message.new, strict=False)))
            if signal is not None:
                found.append(signal)
    return found


def _touched_keys(conn: Connection, options: Mapping[str, str], start: int, end: int,
                  tables: Sequence[TableInfo], visibility: Visibility) -> dict[int, set[Key]]:
    """Per table (OID), the keys that the batch's transactions the window's snapshot does not see changed."""
    touched: dict[int, set[Key]] = {t.oid: set() for t in tables}
    by_oid = {t.oid: t for t in tables}
    positions: dict[int, list[int]] = {}
    for xid, message in _relation_messages(conn, options, start, end, by_oid, "IUD"):
        if isinstance(message, pgoutput.Relation):
            names = [c.name for c in message.columns]
            table = by_oid[message.relation_id]
            positions[message.relation_id] = [names.index(k) if k in names else -1 for k in table.key_columns]
            continue
        if visibility.sees(xid) or not isinstance(message, pgoutput.Insert | pgoutput.Update | pgoutput.Delete):
            continue
        where = positions.get(message.relation_id)
        if where is None or -1 in where:
            raise DecodingError(f"a change of relation {message.relation_id} came without its key columns; "
                                f"the incremental snapshot cannot tell which rows it changed")
        images: list[pgoutput.TupleValues | None] = [message.new] if isinstance(message, pgoutput.Insert) else []
        if isinstance(message, pgoutput.Update):
            images = [message.new, message.old, message.old_key]
        if isinstance(message, pgoutput.Delete):
            images = [message.old, message.old_key]
        for image in images:
            if image is not None:
                key = tuple(image[i] for i in where)
                if all(isinstance(v, str) for v in key):
                    touched[message.relation_id].add(key)  # type: ignore[arg-type]
                elif any(v is UNAVAILABLE for v in key):
                    raise DecodingError("a key value came as an unchanged TOASTed value")
    return touched


def window_rows(options: Mapping[str, str], start: int, end: int, chunks: Sequence[WindowChunk], snapshot: str,
                visibility: Visibility, fetch_size: int) -> Iterator[tuple[TableInfo, dict[str, object]]]:
    """The window's rows, chunk by chunk in key order, read under the exported ``snapshot``, less those whose key a
    transaction of the batch ``(start, end]`` that the snapshot does not see changed."""
    timeout = int(options.get("cdckit.incremental.snapshot.query.timeout.ms", "300000"))
    with closing(connect(options)) as conn:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:  # the first statement of the transaction adopts the exported snapshot
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
            cur.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout),))
        tables = {(c.schema, c.table): load_table(conn, c.schema, c.table, options) for c in chunks}
        with closing(connect(options)) as peek_conn:
            touched = _touched_keys(peek_conn, options, start, end, list(tables.values()), visibility)
        dropped = 0
        for chunk in chunks:
            table = tables[(chunk.schema, chunk.table)]
            skip = touched[table.oid]
            names = [c.name for c in table.columns]
            where = [names.index(k) for k in table.key_columns]
            for block in _guarded_blocks(conn, table, chunk, fetch_size):
                for values in block:
                    if skip and tuple(values[i] for i in where) in skip:
                        dropped += 1
                        continue
                    yield table, dict(zip(names, values, strict=True))
        conn.rollback()
        if dropped:
            log.info("incremental snapshot: %d rows of chunks %s left to the stream's newer events", dropped,
                     [c.id for c in chunks])


def _guarded_blocks(conn: Connection, table: TableInfo, chunk: WindowChunk, fetch_size: int
                    ) -> Iterator[list[tuple[Any, ...]]]:
    """A chunk's blocks. The chunk of a signal's additional condition reads in a savepoint: should its query fail
    (over ``cdckit.incremental.snapshot.query.timeout.ms``, or an error the planning's empty read could not show),
    the chunk is reported and skipped, and the batch goes on; a replay would fail the same way at every restart."""
    if not chunk.condition:
        yield from _chunk_blocks(conn, table, chunk, fetch_size)
        return
    with conn.cursor() as cur:
        cur.execute("SAVEPOINT cdckit_chunk")
    try:
        yield from _chunk_blocks(conn, table, chunk, fetch_size)
    except psycopg2.Error as error:
        with conn.cursor() as cur:
            cur.execute("ROLLBACK TO SAVEPOINT cdckit_chunk")
        log.error("incremental snapshot of %s.%s: chunk %d, read with the additional condition %r, skipped, the "
                  "snapshot of the table is incomplete: %s", table.schema, table.name, chunk.id, chunk.condition,
                  first_line(error))
        return
    with conn.cursor() as cur:
        cur.execute("RELEASE SAVEPOINT cdckit_chunk")


def _chunk_blocks(conn: Connection, table: TableInfo, chunk: WindowChunk, fetch_size: int
                  ) -> Iterator[list[tuple[Any, ...]]]:
    conditions, params = _range_conditions(table, chunk.after, chunk.upto)
    if chunk.condition:
        # the signal's own SQL, checked to be one expression; its % signs are not parameters
        conditions.append(sql.SQL("({})").format(sql.SQL(chunk.condition.replace("%", "%%"))))
    query = sql.SQL("SELECT {c} FROM {t} WHERE {w} ORDER BY {k}").format(
        c=sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns),
        t=sql.Identifier(table.schema, table.name), w=sql.SQL(" AND ").join(conditions), k=_key_list(table))
    yield from fetch_blocks(conn, f"cdckit_incremental_{chunk.id}", query, params, fetch_size, table)
