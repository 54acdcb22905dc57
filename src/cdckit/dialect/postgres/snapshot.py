"""Parallel, consistent snapshot reads: chunks of a table, each read under the slot's exported snapshot.

Every chunk runs in its own transaction that adopts the exported snapshot (``SET TRANSACTION SNAPSHOT``),
so all chunks, on any executor, see the database exactly as of the slot's consistent point. No locks are
taken and no extra slot is created.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from typing import IO

import pyarrow as pa
import pyarrow.csv as pa_csv
from psycopg2 import sql
from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.dialect.postgres.connection import SPOOL_MEMORY, connect, copy_out
from cdckit.dialect.postgres.server_version import ServerVersion
from cdckit.errors import DecodingError

_INTEGER_TYPES = {"int2", "int4", "int8"}
# A chunk holds about ``chunk_rows`` rows whatever the table's size. Only a table the server has no row estimate for
# (a partitioned table's root never analyzed) splits its key range into at most this many chunks.
MAX_UNESTIMATED_CHUNKS = 1024
# Several consecutive chunks share a Spark partition (read one after another, on one connection under one snapshot
# import) while their estimated rows stay within ``chunk_rows``, up to CHUNKS_PER_PARTITION chunks (each is a query
# and, for the files sink, an open file); and a snapshot has at most MAX_PARTITIONS partitions (past that, each
# partition reads more chunks, of the same size).
CHUNKS_PER_PARTITION = 100
MAX_PARTITIONS = 4096
# Tables planned by one statement (their key ranges' bounds, a UNION ALL of index lookups).
_TABLES_PER_PLAN_QUERY = 200


@dataclass(frozen=True)
class SnapshotChunk:
    schema: str
    table: str
    index: int  # chunk number within the table
    predicate: str  # "pk" (key range), "ctid" (page range) or "all"
    lower: int | None  # inclusive; None = unbounded
    upper: int | None  # exclusive; None = unbounded
    last: bool = False  # the final chunk of the whole snapshot: its final row is marked snapshot=last
    first: bool = False  # the snapshot's first chunk: its first row is marked snapshot=first
    first_in_table: bool = False  # the table's first chunk: its first row is first_in_data_collection
    last_in_table: bool = False  # the table's final chunk: its final row is last_in_data_collection
    rows: int = field(default=0, compare=False)  # the planner's estimate of the chunk's rows (how chunks are grouped)


def snapshot_xmin(conn: Connection) -> int:
    """The xmin of the transaction's snapshot (the exported one, once adopted): the snapshot's ``txId``."""
    query = ("SELECT pg_snapshot_xmin(pg_current_snapshot())::text" if ServerVersion.of(conn).has_pg_snapshot_functions
             else "SELECT txid_snapshot_xmin(txid_current_snapshot())::text")
    with conn.cursor() as cur:
        cur.execute(query)
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def plan_chunks(conn: Connection, tables: list[TableInfo], chunk_rows: int, ctid_ranges: bool = True
                ) -> list[SnapshotChunk]:
    """Split each table into chunks of about ``chunk_rows`` rows; runs inside the exported snapshot. The tables'
    bounds come by a few statements for all of them, not by one or more a table."""
    bounds = _key_bounds(conn, [t for t in tables if _integer_key(t)])
    pages = _page_counts(conn, [t for t in tables if not _integer_key(t)]) if ctid_ranges else {}
    chunks: list[SnapshotChunk] = []
    for table in tables:
        planned = _plan_table(table, chunk_rows, ctid_ranges, bounds.get(table.oid), pages.get(table.oid))
        if planned:
            planned[0] = replace(planned[0], first_in_table=True)
            planned[-1] = replace(planned[-1], last_in_table=True)
        chunks.extend(planned)
    if chunks:
        chunks[0] = replace(chunks[0], first=True)
        chunks[-1] = replace(chunks[-1], last=True)
    return chunks


def _integer_key(table: TableInfo) -> bool:
    key_types = {c.name: c.type_name for c in table.columns}
    return len(table.key_columns) == 1 and key_types.get(table.key_columns[0]) in _INTEGER_TYPES


def _key_bounds(conn: Connection, tables: list[TableInfo]) -> dict[int, tuple[int, int] | None]:
    """Each table's smallest and largest key (None: the table is empty), by oid: a statement for up to
    ``_TABLES_PER_PLAN_QUERY`` tables, each bound an index lookup."""
    found: dict[int, tuple[int, int] | None] = {}
    with conn.cursor() as cur:
        for start in range(0, len(tables), _TABLES_PER_PLAN_QUERY):
            group = tables[start:start + _TABLES_PER_PLAN_QUERY]
            query = sql.SQL(" UNION ALL ").join(
                sql.SQL("(SELECT {i}::int, min({k})::text, max({k})::text FROM {t})").format(
                    i=sql.Literal(i), k=sql.Identifier(t.key_columns[0]), t=sql.Identifier(t.schema, t.name))
                for i, t in enumerate(group))
            cur.execute(query)
            for i, low, high in cur.fetchall():
                found[group[int(i)].oid] = None if low is None else (int(low), int(high))
    return found


def _page_counts(conn: Connection, tables: list[TableInfo]) -> dict[int, tuple[int, int, int]]:
    """Each table's pages now, and its pages and rows when last analyzed, by oid: one statement."""
    if not tables:
        return {}
    with conn.cursor() as cur:
        cur.execute("SELECT c.oid, pg_relation_size(c.oid) / current_setting('block_size')::bigint, "
                    "GREATEST(c.reltuples, 0), GREATEST(c.relpages, 0) FROM pg_class c WHERE c.oid = ANY(%s)",
                    ([t.oid for t in tables],))
        return {int(oid): (int(float(pages)), int(float(reltuples)), int(float(relpages)))
                for oid, pages, reltuples, relpages in cur.fetchall()}


def _plan_table(table: TableInfo, chunk_rows: int, ctid_ranges: bool, bounds: tuple[int, int] | None,
                pages: tuple[int, int, int] | None) -> list[SnapshotChunk]:
    if _integer_key(table):
        if bounds is None:
            return []  # empty table
        low, high = bounds
        span = high - low + 1
        count = math.ceil(span / chunk_rows)
        if table.estimated_rows > 0:
            count = min(count, math.ceil(table.estimated_rows / chunk_rows) + 1)
        else:
            count = min(count, MAX_UNESTIMATED_CHUNKS)
        count = max(1, count)
        step = math.ceil(span / count)
        rows = min(step, math.ceil(table.estimated_rows / count)) if table.estimated_rows > 0 else step
        starts = [low + i * step for i in range(count)]
        return [SnapshotChunk(table.schema, table.name, i, "pk", None if i == 0 else starts[i],
                              None if i == count - 1 else starts[i + 1], rows=rows) for i in range(count)]
    if ctid_ranges:
        total_pages, reltuples, relpages = pages if pages is not None else (0, 0, 0)
        rows_per_page = (reltuples / relpages) if relpages > 0 and reltuples > 0 else 50
        count = max(1, math.ceil(total_pages * rows_per_page / chunk_rows))
        step = max(1, math.ceil(total_pages / count))
        starts = list(range(0, max(total_pages, 1), step))
        rows = math.ceil(step * rows_per_page)
        return [SnapshotChunk(table.schema, table.name, i, "ctid", None if i == 0 else start,
                              None if i == len(starts) - 1 else starts[i + 1], rows=rows)
                for i, start in enumerate(starts)]
    return [SnapshotChunk(table.schema, table.name, 0, "all", None, None, rows=max(0, table.estimated_rows))]


def group_chunks(chunks: Sequence[SnapshotChunk], chunk_rows: int, max_groups: int = MAX_PARTITIONS,
                 chunks_per_group: int = CHUNKS_PER_PARTITION) -> list[list[SnapshotChunk]]:
    """The chunks, in order, in groups of consecutive chunks, each group a Spark partition: a group takes the next
    chunk while its estimated rows stay within ``chunk_rows`` and it has fewer than ``chunks_per_group`` chunks (a
    chunk of ``chunk_rows`` rows or more is a group of its own). At most ``max_groups`` groups: past that, the
    bounds grow, and a group reads more chunks, each of the same size."""
    rows_bound, count_bound = chunk_rows, chunks_per_group
    while True:
        groups: list[list[SnapshotChunk]] = []
        rows = 0
        for chunk in chunks:
            if groups and len(groups[-1]) < count_bound and rows + chunk.rows <= rows_bound:
                groups[-1].append(chunk)
                rows += chunk.rows
            else:
                groups.append([chunk])
                rows = chunk.rows
        if len(groups) <= max(1, max_groups):
            return groups
        rows_bound, count_bound = rows_bound * 2, count_bound * 2


def snapshot_marker(chunk: SnapshotChunk, first_row: bool, last_row: bool) -> str:
    """``source.snapshot`` of a row of ``chunk``, as Debezium 2.5 marks snapshot records: the snapshot's last row
    "last", its first "first", a table's last and first rows "last_in_data_collection" and
    "first_in_data_collection", in that order of precedence; every other row "true"."""
    if last_row and chunk.last:
        return "last"
    if first_row and chunk.first:
        return "first"
    if last_row and chunk.last_in_table:
        return "last_in_data_collection"
    if first_row and chunk.first_in_table:
        return "first_in_data_collection"
    return "true"


def chunk_query(table: TableInfo, chunk: SnapshotChunk) -> tuple[sql.Composed, list[object]]:
    columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)
    query = sql.SQL("SELECT {c} FROM {t}").format(c=columns, t=sql.Identifier(table.schema, table.name))
    conditions: list[sql.Composable] = []
    params: list[object] = []
    if chunk.predicate == "pk":
        key = sql.Identifier(table.key_columns[0])
        if chunk.lower is not None:
            conditions.append(sql.SQL("{k} >= %s").format(k=key))
            params.append(chunk.lower)
        if chunk.upper is not None:
            conditions.append(sql.SQL("{k} < %s").format(k=key))
            params.append(chunk.upper)
    elif chunk.predicate == "ctid":
        if chunk.lower is not None:
            conditions.append(sql.SQL("ctid >= format('(%%s,0)', %s::bigint)::tid"))
            params.append(chunk.lower)
        if chunk.upper is not None:
            conditions.append(sql.SQL("ctid < format('(%%s,0)', %s::bigint)::tid"))
            params.append(chunk.upper)
    if conditions:
        query = sql.SQL("{q} WHERE {w}").format(q=query, w=sql.SQL(" AND ").join(conditions))
    return query, params


@contextmanager
def under_snapshot(options: Mapping[str, str], snapshot_name: str) -> Iterator[Connection]:
    """A connection whose read-only transaction sees the database as of the exported snapshot; rolled back and
    closed after the block."""
    with closing(connect(options)) as conn:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:  # the first statement of the transaction adopts the exported snapshot
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
        yield conn
        conn.rollback()


@contextmanager
def _given_or_under_snapshot(conn: Connection | None, options: Mapping[str, str],
                             snapshot_name: str) -> Iterator[Connection]:
    """``conn`` (a connection already under the exported snapshot, left open), or a new one for the block."""
    if conn is not None:
        yield conn
        return
    with under_snapshot(options, snapshot_name) as opened:
        yield opened


def _not_utf8(table: TableInfo, reason: str) -> DecodingError:
    return DecodingError(f"table {table.schema}.{table.name} holds text that is not UTF-8 ({reason}); cdckit writes "
                         f"UTF-8 JSON and does not guess an encoding: convert the data to UTF-8, or leave the column "
                         f"out (column.exclude.list)")


def read_chunk_blocks(options: Mapping[str, str], snapshot_name: str, table: TableInfo, chunk: SnapshotChunk,
                      fetch_size: int, conn: Connection | None = None) -> Iterator[list[tuple[str | None, ...]]]:
    """Rows of one chunk as PostgreSQL's text output, read under the exported snapshot (on ``conn`` when given, a
    connection under it), ``fetch_size`` rows a round trip: each block a list of tuples of ``table.columns``'
    values."""
    with _given_or_under_snapshot(conn, options, snapshot_name) as conn:
        query, params = chunk_query(table, chunk)
        yield from fetch_blocks(conn, f"cdckit_snapshot_{chunk.index}", query, params, fetch_size, table)


def fetch_blocks(conn: Connection, cursor_name: str, query: sql.Composable, params: Sequence[object],
                 fetch_size: int, table: TableInfo) -> Iterator[list[tuple[str | None, ...]]]:
    """A query's rows of ``table`` through a server-side cursor, ``fetch_size`` rows a round trip."""
    with conn.cursor(name=cursor_name) as cur:
        cur.itersize = fetch_size
        cur.execute(query, params)
        try:
            while block := cur.fetchmany(fetch_size):
                yield block
        except UnicodeDecodeError as exc:
            raise _not_utf8(table, exc.reason) from None


# A chunk's COPY output is spooled (SPOOL_MEMORY bytes in memory, the rest in a temporary file); Arrow's CSV
# reader parses it CSV_BLOCK_BYTES at a time. A row longer than a block doubles the block, from that row on, until
# the row fits: a block is at most twice the longest row (or CSV_BLOCK_BYTES), whatever the chunk's size.
CSV_BLOCK_BYTES = 4 * 1024 * 1024


def read_chunk_columns(options: Mapping[str, str], snapshot_name: str, table: TableInfo, chunk: SnapshotChunk,
                       block_rows: int, conn: Connection | None = None) -> Iterator[dict[str, pa.Array]]:
    """Rows of one chunk as PostgreSQL's text output, a column at a time: blocks of at most ``block_rows`` rows, each
    ``{column: string array}`` (null where the value is NULL), read under the exported snapshot (on ``conn`` when
    given, a connection under it, which stays open; otherwise a connection of the chunk's own, closed once the chunk
    is spooled, before it is parsed).

    The chunk comes by ``COPY (SELECT ...) TO STDOUT (FORMAT csv)``, whose fields are the same text output a query
    returns (quoted where needed, NULL unquoted and empty, an empty string quoted), and Arrow's CSV reader parses
    it: no Python object per row or value. The table has at least one column."""
    names = [c.name for c in table.columns]
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY, prefix="cdckit-chunk-") as spool:
        with _given_or_under_snapshot(conn, options, snapshot_name) as conn, conn.cursor() as cur:
            query, params = chunk_query(table, chunk)
            bound = cur.mogrify(query, params)  # psycopg2 binds the values; COPY takes no parameters of its own
            copy_out(cur, b"COPY (" + bound + b") TO STDOUT (FORMAT csv)", spool)
        size = spool.tell()
        if size:
            yield from _csv_blocks(spool, size, names, table, block_rows)


def _csv_reader(source: IO[bytes], names: list[str], block_bytes: int) -> pa_csv.CSVStreamingReader:
    return pa_csv.open_csv(
        source,
        read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=block_bytes),
        # a one-column row whose value is NULL is an empty line
        parse_options=pa_csv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False),
        convert_options=pa_csv.ConvertOptions(column_types={name: pa.string() for name in names}, null_values=[""],
                                              strings_can_be_null=True, quoted_strings_can_be_null=False))


def _csv_blocks(spool: IO[bytes], size: int, names: list[str], table: TableInfo,
                block_rows: int) -> Iterator[dict[str, pa.Array]]:
    """The spooled CSV's rows in blocks of at most ``block_rows`` rows, each parsed from at most ``CSV_BLOCK_BYTES``
    of the CSV, or twice the longest row so far."""
    done = 0  # rows handed on
    block_bytes = CSV_BLOCK_BYTES
    while True:
        spool.seek(0)
        seen = 0
        try:
            for batch in _csv_reader(spool, names, min(block_bytes, size)):
                skip = max(0, done - seen)
                seen += batch.num_rows
                for start in range(skip, batch.num_rows, block_rows):
                    piece = batch.slice(start, block_rows)
                    yield {name: piece.column(i) for i, name in enumerate(names)}
                    done += piece.num_rows
            return
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc) and block_bytes < size:  # a row longer than the block: a block twice as long
                block_bytes *= 2
                continue
            if "UTF8" in str(exc):
                raise _not_utf8(table, "invalid UTF-8 data") from None
            # Arrow's message goes on with the row's text after a colon: the table's data stays out of the error
            raise DecodingError(f"table {table.schema}.{table.name}: the server's COPY output could not be read "
                                f"({str(exc).split(':')[0]})") from None


def read_chunk(options: Mapping[str, str], snapshot_name: str, table: TableInfo, chunk: SnapshotChunk,
               fetch_size: int, conn: Connection | None = None) -> Iterator[dict[str, object]]:
    """Rows of one chunk as PostgreSQL's text output, read under the exported snapshot (on ``conn`` when given)."""
    names = [c.name for c in table.columns]
    for block in read_chunk_blocks(options, snapshot_name, table, chunk, fetch_size, conn):
        for values in block:
            yield dict(zip(names, values, strict=True))
