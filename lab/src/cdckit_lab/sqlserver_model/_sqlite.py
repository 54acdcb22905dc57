"""The SQLite file holding the model's state, and catalog look-ups shared by the admin API and the statements."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import ProgrammingError, invalid_object, server_error
from ._types import ModelColumn, decode

BUSY_TIMEOUT_SECONDS = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS server (k TEXT PRIMARY KEY, v);
CREATE TABLE IF NOT EXISTS databases (name TEXT PRIMARY KEY COLLATE NOCASE, database_id INTEGER,
    is_cdc_enabled INTEGER, next_lsn INTEGER, next_tran INTEGER, next_object_id INTEGER, next_schema_id INTEGER);
CREATE TABLE IF NOT EXISTS schemas (db TEXT COLLATE NOCASE, schema_id INTEGER, name TEXT COLLATE NOCASE,
    PRIMARY KEY (db, name));
CREATE TABLE IF NOT EXISTS tables (db TEXT COLLATE NOCASE, object_id INTEGER, schema_id INTEGER,
    name TEXT COLLATE NOCASE, is_ms_shipped INTEGER, create_date TEXT, next_identity INTEGER,
    PRIMARY KEY (db, object_id));
CREATE TABLE IF NOT EXISTS columns (db TEXT COLLATE NOCASE, object_id INTEGER, column_id INTEGER,
    name TEXT COLLATE NOCASE, type_name TEXT, max_length INTEGER, precision INTEGER, scale INTEGER,
    is_nullable INTEGER, is_identity INTEGER, PRIMARY KEY (db, object_id, column_id));
CREATE TABLE IF NOT EXISTS indexes (db TEXT COLLATE NOCASE, object_id INTEGER, index_id INTEGER, name TEXT,
    is_primary_key INTEGER);
CREATE TABLE IF NOT EXISTS index_columns (db TEXT COLLATE NOCASE, object_id INTEGER, index_id INTEGER,
    key_ordinal INTEGER, column_id INTEGER);
CREATE TABLE IF NOT EXISTS source_rows (rid INTEGER PRIMARY KEY AUTOINCREMENT, db TEXT COLLATE NOCASE,
    object_id INTEGER, data TEXT);
CREATE INDEX IF NOT EXISTS source_rows_table ON source_rows (db, object_id);
CREATE TABLE IF NOT EXISTS change_tables (db TEXT COLLATE NOCASE, object_id INTEGER, source_object_id INTEGER,
    capture_instance TEXT COLLATE NOCASE, start_lsn BLOB, create_date TEXT, create_seq INTEGER, index_name TEXT);
CREATE TABLE IF NOT EXISTS captured_columns (db TEXT COLLATE NOCASE, object_id INTEGER, column_name TEXT,
    column_id INTEGER, column_type TEXT, column_ordinal INTEGER);
CREATE TABLE IF NOT EXISTS cdc_index_columns (db TEXT COLLATE NOCASE, object_id INTEGER, column_name TEXT,
    index_ordinal INTEGER, column_id INTEGER);
CREATE TABLE IF NOT EXISTS ddl_history (db TEXT COLLATE NOCASE, source_object_id INTEGER, object_id INTEGER,
    required_column_update INTEGER, ddl_command TEXT, ddl_lsn BLOB, ddl_time TEXT);
CREATE TABLE IF NOT EXISTS log_scan_sessions (session_id INTEGER PRIMARY KEY AUTOINCREMENT,
    db TEXT COLLATE NOCASE, start_time TEXT, end_time TEXT, latency INTEGER);
CREATE TABLE IF NOT EXISTS lsn_time_mapping (db TEXT COLLATE NOCASE, start_lsn BLOB, tran_begin_time TEXT,
    tran_end_time TEXT, tran_id BLOB);
CREATE TABLE IF NOT EXISTS change_rows (db TEXT COLLATE NOCASE, object_id INTEGER, start_lsn BLOB, seqval BLOB,
    operation INTEGER, update_mask BLOB, command_id INTEGER, data TEXT);
CREATE INDEX IF NOT EXISTS change_rows_lsn ON change_rows (db, object_id, start_lsn);
CREATE TABLE IF NOT EXISTS log (id INTEGER PRIMARY KEY AUTOINCREMENT, db TEXT COLLATE NOCASE, commit_lsn BLOB,
    seqval BLOB, kind TEXT, source_object_id INTEGER, before TEXT, after TEXT, changed TEXT, command_id INTEGER,
    begin_time TEXT, end_time TEXT, tran_id BLOB);
CREATE TABLE IF NOT EXISTS statement_log (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, sql TEXT, params TEXT,
    isolation_level TEXT);
INSERT OR IGNORE INTO server (k, v) VALUES ('agent_running', 1), ('next_database_id', 5);
"""


def open_sqlite(path: str | Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit) that waits for a busy writer."""
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
    return conn


def initialise(path: str | Path) -> None:
    conn = open_sqlite(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")  # readers never block the writer, nor it them
        conn.execute("BEGIN IMMEDIATE")
        conn.executescript("".join(_SCHEMA))  # executescript commits the open transaction
    finally:
        conn.close()


@contextmanager
def write_transaction(path: str | Path) -> Iterator[sqlite3.Connection]:
    """One serialised writer: BEGIN IMMEDIATE takes SQLite's write lock; other writers wait for it."""
    conn = open_sqlite(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A consistent read of committed state (WAL snapshot for the duration of the block)."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def server_value(conn: sqlite3.Connection, key: str) -> Any:
    row = conn.execute("SELECT v FROM server WHERE k = ?", (key,)).fetchone()
    return None if row is None else row[0]


def login(conn: sqlite3.Connection, name: str) -> dict[str, Any] | None:
    """A login created with ``SqlServerModel.create_login``: {"password", "databases" (case-folded names the login
    has a user in, None for every database)}; None when there is no such login."""
    text = server_value(conn, f"login:{name.casefold()}")
    return None if text is None else dict(json.loads(text))


def logins_checked(conn: sqlite3.Connection) -> bool:
    """Once a login exists, connections are authenticated (before that, the model accepts any login)."""
    return conn.execute("SELECT 1 FROM server WHERE k LIKE 'login:%'").fetchone() is not None


def capture_access_denied(conn: sqlite3.Connection, db: str, capture_instance: str, login_name: str) -> bool:
    """The login lacks SELECT on a captured column of the instance's table or membership of its gating role."""
    key = f"capture_denied:{db.casefold()}:{capture_instance.casefold()}:{login_name.casefold()}"
    return bool(server_value(conn, key))


@dataclass(frozen=True)
class TableInfo:
    db: str
    object_id: int
    schema: str
    name: str
    columns: tuple[tuple[int, ModelColumn], ...]  # (column_id, column)
    primary_key: tuple[str, ...]
    unique: tuple[tuple[str, ...], ...] = ()  # the columns of each UNIQUE constraint or unique index

    @property
    def qualified(self) -> str:
        return f"{self.db}.{self.schema}.{self.name}"

    def column(self, name: str) -> ModelColumn | None:
        return next((c for _, c in self.columns if c.name.casefold() == name.casefold()), None)


def database_name(conn: sqlite3.Connection, name: str) -> str:
    row = conn.execute("SELECT name FROM databases WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise server_error(ProgrammingError, "08004", 911,
                           f"Database '{name}' does not exist. Make sure that the name is entered correctly.")
    return str(row[0])


def table_info(conn: sqlite3.Connection, db: str, schema: str, table: str) -> TableInfo:
    row = conn.execute("SELECT t.db, t.object_id, s.name, t.name FROM tables t JOIN schemas s ON s.db = t.db "
                       "AND s.schema_id = t.schema_id WHERE t.db = ? AND s.name = ? AND t.name = ?",
                       (db, schema, table)).fetchone()
    if row is None:
        raise invalid_object(f"{db}.{schema}.{table}")
    return table_by_id(conn, row[0], row[1])


def table_by_id(conn: sqlite3.Connection, db: str, object_id: int) -> TableInfo:
    row = conn.execute("SELECT t.db, s.name, t.name FROM tables t JOIN schemas s ON s.db = t.db "
                       "AND s.schema_id = t.schema_id WHERE t.db = ? AND t.object_id = ?",
                       (db, object_id)).fetchone()
    columns = tuple(
        (r[0], ModelColumn(r[1], r[2], r[3], r[4], r[5], bool(r[6]), bool(r[7])))
        for r in conn.execute("SELECT column_id, name, type_name, max_length, precision, scale, is_nullable, "
                              "is_identity FROM columns WHERE db = ? AND object_id = ? ORDER BY column_id",
                              (db, object_id)))
    by_id = {column_id: column.name for column_id, column in columns}
    key = tuple(by_id[r[0]] for r in conn.execute(
        "SELECT ic.column_id FROM indexes i JOIN index_columns ic ON ic.db = i.db AND ic.object_id = i.object_id "
        "AND ic.index_id = i.index_id WHERE i.db = ? AND i.object_id = ? AND i.is_primary_key = 1 "
        "ORDER BY ic.key_ordinal", (db, object_id)))
    unique: dict[int, list[str]] = {}
    for index_id, column_id in conn.execute(
            "SELECT i.index_id, ic.column_id FROM indexes i JOIN index_columns ic ON ic.db = i.db "
            "AND ic.object_id = i.object_id AND ic.index_id = i.index_id WHERE i.db = ? AND i.object_id = ? "
            "AND i.is_primary_key = 0 ORDER BY i.index_id, ic.key_ordinal", (db, object_id)):
        unique.setdefault(index_id, []).append(by_id[column_id])
    return TableInfo(row[0], object_id, row[1], row[2], columns, key, tuple(tuple(c) for c in unique.values()))


def table_rows(conn: sqlite3.Connection, info: TableInfo) -> list[tuple[int, dict[str, Any]]]:
    """(rid, {column name: Python value}) in insertion order; a column added later reads as NULL."""
    result = []
    for rid, data in conn.execute("SELECT rid, data FROM source_rows WHERE db = ? AND object_id = ? ORDER BY rid",
                                  (info.db, info.object_id)):
        stored = json.loads(data)
        result.append((rid, {column.name: decode(column, stored.get(column.name)) for _, column in info.columns}))
    return result


@dataclass(frozen=True)
class InstanceInfo:
    db: str
    capture_instance: str
    object_id: int  # the change table
    source_object_id: int
    start_lsn: bytes  # 0x00 when cdc.change_tables.start_lsn is NULL (see established)
    captured: tuple[tuple[int, ModelColumn], ...]  # (column_ordinal, column as captured)
    # False when cdc.change_tables.start_lsn is NULL: "the low endpoint has not been established" (Microsoft's
    # cdc.change_tables page); fn_cdc_get_min_lsn then returns 0x00, as it ISNULLs the column
    established: bool = True


def instances(conn: sqlite3.Connection, db: str, *, name: str | None = None,
              source_object_id: int | None = None) -> list[InstanceInfo]:
    sql = ("SELECT db, capture_instance, object_id, source_object_id, start_lsn FROM change_tables WHERE db = ?"
           + (" AND capture_instance = ?" if name is not None else "")
           + (" AND source_object_id = ?" if source_object_id is not None else "") + " ORDER BY create_seq")
    params: list[Any] = [db] + [p for p in (name, source_object_id) if p is not None]
    result = []
    for row in conn.execute(sql, params).fetchall():
        captured = tuple(
            (r[0], ModelColumn(r[1], r[2], r[3], r[4], r[5]))
            for r in conn.execute(
                "SELECT cc.column_ordinal, cc.column_name, cc.column_type, c.max_length, c.precision, c.scale "
                "FROM captured_columns cc JOIN columns c ON c.db = cc.db AND c.object_id = cc.object_id "
                "AND c.name = cc.column_name WHERE cc.db = ? AND cc.object_id = ? ORDER BY cc.column_ordinal",
                (row[0], row[2])))
        start = bytes(row[4]) if row[4] is not None else bytes(10)
        result.append(InstanceInfo(row[0], row[1], row[2], row[3], start, captured, row[4] is not None))
    return result


def max_lsn(conn: sqlite3.Connection, db: str) -> bytes | None:
    row = conn.execute("SELECT MAX(start_lsn) FROM lsn_time_mapping WHERE db = ?", (db,)).fetchone()
    return None if row is None or row[0] is None else bytes(row[0])
