"""Recognising the statements of ``cdckit.dialect.sqlserver.queries`` and answering them from the SQLite state.

Every template is rendered with sentinel identifiers, escaped and turned into a regular expression, so the
model accepts exactly what queries.py renders (whitespace normalised) and nothing else.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
import sqlglot.errors
from sqlglot import exp

from cdckit.dialect.sqlserver import queries as q

from . import _conditions
from . import _sqlite as store
from ._cdc import datetime_text, disable_table, enable_table
from ._errors import (
    DataError,
    ProgrammingError,
    UnmodelledStatementError,
    invalid_column,
    invalid_object,
    pyodbc_error,
    server_error,
)
from ._types import (
    TYPES,
    ZERO_LSN,
    ModelColumn,
    coerce,
    decode,
    increment_lsn,
    normalise_column,
    typed_compare_key,
    typed_sort_key,
)

PRODUCT_VERSION = "16.0.1000.6"
MAX_KEY_COLUMNS = 8  # keyset statements are answered over keys of up to this many columns
_IDENT = r"(?:[^\]]|\]\])+"


def _item(prefix: str) -> str:
    """One select-list item: a quoted column behind ``prefix``, or one of ``queries.column_expression``'s conversions
    of it (spatial, hierarchyid, sql_variant), tried first."""
    name = rf"\[{_IDENT}\]"
    forms = dict.fromkeys(re.escape(q.column_expression("QQNAMEQQ", kind, prefix)) for kind in q.CONVERTED_TYPES)
    return "(?:" + "|".join([*(f.replace(r"\[QQNAMEQQ\]", name) for f in forms), re.escape(prefix) + name]) + ")"


_LIST = rf"{_item('')}(?:, {_item('')})*"
_ALIAS_LIST = rf"{_item('ct.')}(?:, {_item('ct.')})*"  # a change table's columns behind its alias
_ITEMS = re.compile(rf"{_item('ct.')}|{_item('')}")
# the conversion an item applies, by the text only it holds
_CONVERSIONS = {".STAsBinary()": "spatial", ".ToString()": "hierarchyid", " AS nvarchar(4000))": "sql_variant"}


@dataclass(frozen=True)
class OutColumn:
    name: str
    column: ModelColumn


def _out(name: str, type_name: str, max_length: int = 0, precision: int = 0, scale: int = 0,
         nullable: bool = True) -> OutColumn:
    return OutColumn(name, ModelColumn(name, type_name, max_length, precision, scale, nullable))


@dataclass
class Session:
    """Per-connection state: the isolation level set, the tables locked with TABLOCKX, the model's file."""

    isolation_level: str = "READ COMMITTED"
    locked_tables: list[str] = field(default_factory=list)
    model_path: str = ""
    login: str = ""  # the connection's UID, case-folded
    lock_timeout: int = -1  # SET LOCK_TIMEOUT, in milliseconds
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # the owner of its application locks
    asked_app_lock: bool = False  # whether it asked for one (its end then releases them)


@dataclass
class Result:
    columns: list[OutColumn] | None  # None: not a query (SET)
    rows: list[tuple[Any, ...]]


Handler = Callable[[sqlite3.Connection, dict[str, str], list[Any], Session], Result]


def normalise(sql: str) -> str:
    return " ".join(sql.split())


def unquote(quoted: str) -> str:
    return (quoted[1:-1] if quoted.startswith("[") else quoted).replace("]]", "]")


def list_items(text: str) -> list[tuple[str, str]]:
    """A matched list's items as (column name, conversion: "" for the column itself, "spatial", "hierarchyid",
    "sql_variant")."""
    items = []
    for match in _ITEMS.finditer(text):
        names = {unquote(part) for part in re.findall(rf"\[{_IDENT}\]", match[0])}
        if len(names) != 1:
            raise UnmodelledStatementError("HY000", f"the SQL Server model converts a column under its own name "
                                           f"only: {match[0]}")
        kind = next((k for marker, k in _CONVERSIONS.items() if marker in match[0]), "")
        items.append((names.pop(), kind))
    return items


def split_list(text: str) -> list[str]:
    return [name for name, _ in list_items(text)]


def converted(result: Result, text: str) -> Result:
    """A select's result with the conversions of its list (``text``) applied: ``CAST(c.STSrid AS binary(4)) +
    c.STAsBinary()`` as the stored SRID and well-known binary (varbinary(max)), ``c.ToString()`` as the stored
    hierarchyid text and ``CAST(c AS nvarchar(4000))`` as the stored sql_variant text (nvarchar(4000)). A method
    of a type without it is error 258, as SQL Server's "Cannot call methods on int."."""
    kinds = {name.casefold(): kind for name, kind in list_items(text) if kind}
    if not kinds or result.columns is None:
        return result
    columns = list(result.columns)
    for index, out in enumerate(columns):
        kind = kinds.get(out.name.casefold())
        if kind is None:
            continue
        type_name = out.column.type_name
        allowed = {"spatial": ("geometry", "geography"), "hierarchyid": ("hierarchyid",),
                   "sql_variant": ("sql_variant",)}[kind]
        if type_name not in allowed:
            if kind == "sql_variant":
                raise UnmodelledStatementError("HY000", f"the SQL Server model converts sql_variant columns to "
                                               f"nvarchar only, not {type_name}")
            raise server_error(ProgrammingError, "42000", 258, f"Cannot call methods on {type_name}.")
        columns[index] = _out(out.name, "varbinary", -1) if kind == "spatial" else _out(out.name, "nvarchar", 8000)
    return Result(columns, result.rows)


def _compile(rendered: str) -> re.Pattern[str]:
    """Sentinels: QQDBQQ = a quoted database; [QQLxQQ] = a list of quoted names; ct.[QQPxQQ] = a list of quoted
    names each behind the alias ``ct.``; QQxQQ = a name inside brackets; QQCONDQQ = a signal's additional condition;
    QQTYPExQQ = a type as CAST takes it."""
    pattern = re.escape(normalise(rendered))
    seen: set[str] = set()

    def group(name: str, regex: str) -> str:
        if name in seen:
            return f"(?P={name})"
        seen.add(name)
        return f"(?P<{name}>{regex})"

    counter = iter(range(1, 100))
    pattern = re.sub(r"ct\\\.\\\[QQP(\w+?)QQ\\\]", lambda m: group(f"{m[1]}_{next(counter)}", _ALIAS_LIST), pattern)
    pattern = re.sub(r"\\\[QQL(\w+?)QQ\\\]", lambda m: group(f"{m[1]}_{next(counter)}", _LIST), pattern)
    pattern = re.sub("QQDBQQ", lambda m: group("db", rf"\[{_IDENT}\]"), pattern)
    pattern = re.sub(r"QQTYPE(\w+?)QQ", lambda m: group(m[1], _TYPE), pattern)
    pattern = re.sub("QQCONDQQ", lambda m: group("cond", ".+?"), pattern)
    pattern = re.sub(r"QQ(\w+?)QQ", lambda m: group(m[1], _IDENT), pattern)
    return re.compile(pattern + r"\Z")


# ---- parameters ---------------------------------------------------------------------------------------------------
def _binary(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise server_error(ProgrammingError, "42000", 257, f"Implicit conversion from data type "
                       f"{'nvarchar' if isinstance(value, str) else type(value).__name__} to binary is not "
                       "allowed. Use the CONVERT function to run this query.")


def _top(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise server_error(ProgrammingError, "42000", 1060, "The number of rows provided for a TOP or FETCH "
                           "clauses row count parameter must be an integer.")
    return value


def _database(conn: sqlite3.Connection, groups: dict[str, str]) -> str:
    return store.database_name(conn, unquote(groups["db"]))


def _require_cdc(conn: sqlite3.Connection, db: str, obj: str) -> None:
    if not conn.execute("SELECT is_cdc_enabled FROM databases WHERE name = ?", (db,)).fetchone()[0]:
        raise invalid_object(f"{db}.cdc.{obj}")


def _lsn_out(name: str = "") -> OutColumn:
    return _out(name, "binary", 10)


def _scalar(out: OutColumn, value: Any) -> Result:
    return Result([out], [(value,)])


def _rows(columns: list[OutColumn], rows: Sequence[Sequence[Any]]) -> Result:
    def value(column: OutColumn, v: Any) -> Any:
        if column.column.type_name == "bit" and v is not None:
            return bool(v)
        return bytes(v) if isinstance(v, (bytearray, memoryview)) else v

    converted = [tuple(value(c, v) for c, v in zip(columns, r, strict=True)) for r in rows]
    return Result(columns, converted)


# ---- handlers -----------------------------------------------------------------------------------------------------
def _product_version(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    return _scalar(_out("", "nvarchar", 256), PRODUCT_VERSION)


def _database_cdc_enabled(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    rows = conn.execute("SELECT is_cdc_enabled FROM databases WHERE name = ?", (p[0],)).fetchall()
    return _rows([_out("is_cdc_enabled", "bit", nullable=False)], rows)


def _agent_running(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """sys.dm_server_services has no SQL Server Agent row where the service is not the instance's to list (Azure SQL,
    Amazon RDS) or not visible to the login (``SqlServerModel.agent_service_listed``): the query returns no row."""
    out = _out("is_running", "int", 4, 10, nullable=False)
    if store.server_value(conn, "agent_service_hidden"):
        return Result([out], [])
    return _scalar(out, 1 if store.server_value(conn, "agent_running") else 0)


def _max_lsn(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    return _scalar(_lsn_out(), store.max_lsn(conn, _database(conn, g)))


def _min_lsn(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """sys.fn_cdc_get_min_lsn: 0x00 "when the capture instance does not exist or when the caller is not authorized
    to access the change data associated with the capture instance" (its Remarks), and for a NULL start_lsn."""
    db = _database(conn, g)
    found = store.instances(conn, db, name=str(p[0])) if p[0] is not None else []
    if found and store.capture_access_denied(conn, db, found[0].capture_instance, s.login):
        found = []
    return _scalar(_lsn_out(), found[0].start_lsn if found else ZERO_LSN)


def _capture_instance_start(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """One row of cdc.change_tables by capture instance (readable with SELECT on the cdc schema, whatever the gating
    role): its start_lsn, NULL while the low endpoint is not established; no row when the instance is gone."""
    db = _database(conn, g)
    _require_cdc(conn, db, "change_tables")
    found = store.instances(conn, db, name=str(p[0])) if p[0] is not None else []
    return _rows([_lsn_out("start_lsn")], [(i.start_lsn if i.established else None,) for i in found])


def _capture_latency(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    rows = conn.execute("SELECT latency FROM log_scan_sessions WHERE db = ? ORDER BY session_id DESC LIMIT 1",
                        (db,)).fetchall()
    return _rows([_out("latency", "int", 4, 10)], rows)


def _mapping_time(aggregate: str, compare: str) -> Handler:
    def handler(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
        db = _database(conn, g)
        _require_cdc(conn, db, "lsn_time_mapping")
        column = _out("", "datetime", 8, 23, 3)
        row = conn.execute(f"SELECT {aggregate}(tran_end_time) FROM lsn_time_mapping WHERE db = ? "
                           f"AND start_lsn {compare} ?", (db, _binary(p[0]))).fetchone()
        return _scalar(column, decode(column.column, row[0]) if row[0] is not None else None)
    return handler


def _increment_lsn(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    _database(conn, g)
    lsn = _binary(p[0])
    return _scalar(_lsn_out(), None if lsn is None else increment_lsn(lsn.rjust(10, b"\0")))


def _capture_instances(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    _require_cdc(conn, db, "change_tables")
    rows = conn.execute(
        "SELECT s.name, t.name, ct.capture_instance, ct.start_lsn, ct.object_id, ct.source_object_id "
        "FROM change_tables ct JOIN tables t ON t.db = ct.db AND t.object_id = ct.source_object_id "
        "JOIN schemas s ON s.db = t.db AND s.schema_id = t.schema_id WHERE ct.db = ? "
        "ORDER BY s.name, t.name, ct.create_date, ct.create_seq", (db,)).fetchall()
    columns = [_out("schema_name", "sysname", 256, nullable=False), _out("table_name", "sysname", 256, nullable=False),
               _out("capture_instance", "sysname", 256, nullable=False), _lsn_out("start_lsn"),
               _out("object_id", "int", 4, 10, nullable=False), _out("source_object_id", "int", 4, 10)]
    return _rows(columns, rows)


def _captured_columns(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    _require_cdc(conn, db, "captured_columns")
    rows = conn.execute(
        "SELECT cc.column_name, cc.column_ordinal, cc.column_type, ctc.max_length, ctc.precision, ctc.scale, "
        "src.is_nullable, src.is_identity FROM captured_columns cc JOIN columns ctc ON ctc.db = cc.db "
        "AND ctc.object_id = cc.object_id AND ctc.name = cc.column_name LEFT JOIN columns src ON src.db = cc.db "
        "AND src.object_id = ? AND src.name = cc.column_name WHERE cc.db = ? AND cc.object_id = ? "
        "ORDER BY cc.column_ordinal", (p[0], db, p[1])).fetchall()
    columns = [_out("column_name", "sysname", 256, nullable=False), _out("column_ordinal", "int", 4, 10),
               _out("column_type", "sysname", 256), _out("max_length", "smallint", 2, 5, nullable=False),
               _out("precision", "tinyint", 1, 3), _out("scale", "tinyint", 1, 3), _out("is_nullable", "bit"),
               _out("is_identity", "bit")]
    return _rows(columns, rows)


def _primary_key_columns(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    rows = conn.execute(
        "SELECT c.name FROM indexes i JOIN index_columns ic ON ic.db = i.db AND ic.object_id = i.object_id "
        "AND ic.index_id = i.index_id JOIN columns c ON c.db = ic.db AND c.object_id = ic.object_id "
        "AND c.column_id = ic.column_id WHERE i.db = ? AND i.object_id = ? AND i.is_primary_key = 1 "
        "ORDER BY ic.key_ordinal", (db, p[0])).fetchall()
    return _rows([_out("name", "sysname", 256)], rows)


def _index_columns(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    _require_cdc(conn, db, "index_columns")
    rows = conn.execute("SELECT column_name FROM cdc_index_columns WHERE db = ? AND object_id = ? "
                        "ORDER BY index_ordinal", (db, p[0])).fetchall()
    return _rows([_out("column_name", "sysname", 256, nullable=False)], rows)


def _ddl_history(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    _require_cdc(conn, db, "ddl_history")
    rows = conn.execute("SELECT source_object_id, object_id, required_column_update, ddl_command, ddl_lsn, "
                        "ddl_time FROM ddl_history WHERE db = ? AND ddl_lsn > ? ORDER BY ddl_lsn",
                        (db, _binary(p[0]))).fetchall()
    columns = [_out("source_object_id", "int", 4, 10), _out("object_id", "int", 4, 10),
               _out("required_column_update", "bit"), _out("ddl_command", "nvarchar", -1), _lsn_out("ddl_lsn"),
               _out("ddl_time", "datetime", 8, 23, 3)]
    return _rows(columns, [(*row[:5], decode(columns[5].column, row[5])) for row in rows])


def _nth_transaction_lsn(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    _require_cdc(conn, db, "lsn_time_mapping")
    row = conn.execute("SELECT MAX(start_lsn) FROM (SELECT start_lsn FROM lsn_time_mapping WHERE db = ? "
                       "AND start_lsn > ? AND ltrim(hex(tran_id), '0') <> '' ORDER BY start_lsn LIMIT ?)",
                       (db, _binary(p[1]), _top(p[0]))).fetchone()
    return _rows([_lsn_out("")], [row])


def _change_table_id(conn: sqlite3.Connection, db: str, name: str) -> int:
    row = conn.execute("SELECT ct.object_id FROM change_tables ct JOIN tables t ON t.db = ct.db "
                       "AND t.object_id = ct.object_id WHERE ct.db = ? AND t.name = ?", (db, name)).fetchone()
    if row is None:
        raise invalid_object(f"{db}.cdc.{name}")
    return int(row[0])


def _change_counts(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    object_id = _change_table_id(conn, db, unquote(g["inst"]) + "_CT")
    rows = conn.execute("SELECT start_lsn, COUNT(*) FROM change_rows WHERE db = ? AND object_id = ? "
                        "AND start_lsn > ? AND start_lsn <= ? AND operation <> 3 GROUP BY start_lsn "
                        "ORDER BY start_lsn LIMIT ?",
                        (db, object_id, _binary(p[1]), _binary(p[2]), _top(p[0]))).fetchall()
    return _rows([_lsn_out("__$start_lsn"), _out("", "int", 4, 10)], rows)


def _changes(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """A change table read directly (``queries.changes_query``): its rows with start_lsn in [from, to] in the order
    the statement asks, each with its commit time from ``cdc.lsn_time_mapping`` (LEFT JOIN: NULL without a mapping
    row) and its ``__$command_id`` (error 207 when the change table has no such column and the statement names it).
    Unlike ``fn_cdc_get_all_changes_``, a range outside the instance's validity interval is not an error."""
    db = _database(conn, g)
    _require_cdc(conn, db, "lsn_time_mapping")
    table = unquote(g["inst"]) + "_CT"
    object_id = _change_table_id(conn, db, table)
    found = [i for i in store.instances(conn, db) if i.object_id == object_id]
    instance = found[0]
    captured = {column.name.casefold(): column for _, column in instance.captured}
    wanted = split_list(g["cols_1"])
    for column_name in wanted:
        if column_name.casefold() not in captured:
            raise invalid_column(column_name)
    has_command_id = conn.execute("SELECT 1 FROM columns WHERE db = ? AND object_id = ? AND name = '__$command_id'",
                                  (db, object_id)).fetchone() is not None
    by_command = "ct.[__$command_id]" in g["_sql"]
    if by_command and not has_command_id:
        raise invalid_column("__$command_id")
    low, high = _binary(p[0]), _binary(p[1])
    out = [_lsn_out("__$start_lsn"), _lsn_out("__$seqval"), _out("__$operation", "int", 4, 10),
           _out("__$update_mask", "varbinary", 128)]
    out += [OutColumn(captured[n.casefold()].name, captured[n.casefold()]) for n in wanted]
    out += [_out("__$commit_time", "datetime", 8, 23, 3), _out("__$command_id", "int", 4, 10)]
    if low is None or high is None:
        return Result(out, [])
    times = dict(conn.execute("SELECT start_lsn, tran_end_time FROM lsn_time_mapping WHERE db = ? "
                              "AND start_lsn >= ? AND start_lsn <= ?", (db, low, high)).fetchall())
    order = "start_lsn, command_id, seqval, operation" if by_command else "start_lsn, seqval, operation"
    rows = []
    for start, seqval, operation, mask, command_id, data in conn.execute(
            "SELECT start_lsn, seqval, operation, update_mask, command_id, data FROM change_rows WHERE db = ? "
            f"AND object_id = ? AND start_lsn >= ? AND start_lsn <= ? ORDER BY {order}",
            (db, object_id, low, high)):
        values = json.loads(data)
        image = tuple(decode(c.column, values.get(c.column.name)) for c in out[4:-2])
        rows.append((bytes(start), bytes(seqval), operation, bytes(mask), *image,
                     decode(out[-2].column, times.get(start)), command_id if by_command else None))
    return converted(Result(out, rows), g["cols_1"])


def _command_id_column(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    row = conn.execute("SELECT COUNT(*) FROM columns WHERE db = ? AND object_id = ? AND name = ?",
                       (db, p[0], p[1])).fetchone()
    return _scalar(_out("", "int", 4, 10, nullable=False), int(row[0]))


def _table(conn: sqlite3.Connection, g: dict[str, str]) -> store.TableInfo:
    return store.table_info(conn, _database(conn, g), unquote(g["schema"]), unquote(g["table"]))


def _columns_of(info: store.TableInfo, names: Sequence[str]) -> list[ModelColumn]:
    result = []
    for name in names:
        column = info.column(name)
        if column is None:
            raise invalid_column(name)
        result.append(column)
    return result


def _select_rows(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session, keys: int = 0,
                 lower: bool = False, upper: bool = False) -> Result:
    """A chunk's rows: the additional condition, then the keyset bounds (``_keyset``), in key order."""
    info = _table(conn, g)
    selected = _columns_of(info, split_list(g["cols_1"]))
    lists = sorted((k for k in g if k.startswith("keys_")), key=lambda k: int(k.split("_")[1]))
    key = _key_of(info, g, keys) if keys else _columns_of(info, split_list(g[lists[-1]])) if lists else []
    rows = [row for _, row in store.table_rows(conn, info)]
    if "cond" in g:  # a signal's additional condition, before the key range
        tree = _conditions.parse(g["cond"], info)
        rows = [row for row in rows if _conditions.holds(tree, info, row)]
    casts = _casts(g, keys)
    bounds = [op for op, wanted in ((">", lower), ("<=", upper)) if wanted]
    rows = [r for r in rows if _within(key, casts, [r[c.name] for c in key], bounds, p)]
    if key:
        rows.sort(key=lambda r: tuple(typed_sort_key(c.type_name, r[c.name]) for c in key))
    return converted(Result([OutColumn(c.name, c) for c in selected], [tuple(r[c.name] for c in selected)
                                                                         for r in rows]), g["cols_1"])


def _key_of(info: store.TableInfo, g: dict[str, str], keys: int) -> list[ModelColumn]:
    return _columns_of(info, [unquote(f"[{g[f'k{i}']}]") for i in range(1, keys + 1)])


_TYPE = r"[a-z0-9]+(?:\((?:max|\d+(?:, \d+)?)\))?"


def cast_type(declaration: str) -> ModelColumn:
    """The column a ``CAST(? AS <declaration>)`` converts to (``queries.type_declaration``'s forms)."""
    match = re.fullmatch(r"([a-z0-9]+)(?:\((max|\d+)(?:, (\d+))?\))?", declaration)
    if match is None or match[1] not in TYPES:
        raise UnmodelledStatementError("HY000", f"the SQL Server model does not cast to {declaration}")
    name, size, scale = match[1], match[2], int(match[3] or 0)
    if name in ("decimal", "numeric"):
        return normalise_column(ModelColumn("", name, precision=int(size or 18), scale=scale))
    if name in ("datetime2", "time", "datetimeoffset"):
        return normalise_column(ModelColumn("", name, precision=1, scale=int(size if size is not None else 7)))
    if name in ("char", "varchar", "binary", "varbinary", "nchar", "nvarchar"):
        length = -1 if size in (None, "max") else int(size) * (2 if name.startswith("n") else 1)
        return normalise_column(ModelColumn("", name, max_length=length))
    if name == "float":
        return normalise_column(ModelColumn("", name, precision=53))
    return normalise_column(ModelColumn("", name))


def _casts(g: dict[str, str], keys: int) -> list[ModelColumn]:
    return [cast_type(g[f"t{i}"]) for i in range(1, keys + 1)]


def _keyset(key: Sequence[ModelColumn], casts: Sequence[ModelColumn], values: Sequence[Any], operator: str,
            params: list[Any]) -> bool:
    """``queries.keyset``'s expression evaluated on one row's key ``values``, taking its parameters from the front
    of ``params``, each converted by its CAST and compared as the key column's type compares (``typed_compare_key``:
    strings case-insensitively, uniqueidentifier by its byte groups); a NULL makes a comparison unknown (false)."""
    def compare(i: int) -> int | None:
        bound = coerce(casts[i], params.pop(0))
        if values[i] is None or bound is None:
            return None
        mine, theirs = typed_compare_key(key[i].type_name, values[i]), typed_compare_key(key[i].type_name, bound)
        return int((mine > theirs) - (mine < theirs))

    def holds(result: int | None, op: str) -> bool:
        return result is not None and {">": result > 0, "<": result < 0, "<=": result <= 0, ">=": result >= 0,
                                        "=": result == 0}[op]

    if len(key) == 1:
        return holds(compare(0), operator)
    lead = holds(compare(0), ">=" if operator == ">" else "<=")
    terms = []
    for i in range(len(key)):
        equal = [holds(compare(j), "=") for j in range(i)]  # every parameter is taken, as the server binds them all
        last = holds(compare(i), operator if i == len(key) - 1 else (">" if operator == ">" else "<"))
        terms.append(all(equal) and last)
    return lead and any(terms)


def _within(key: Sequence[ModelColumn], casts: Sequence[ModelColumn], values: Sequence[Any], bounds: Sequence[str],
            params: Sequence[Any]) -> bool:
    """Whether a key lies within the keyset ``bounds`` (``>`` then ``<=``) whose parameters are ``params``."""
    rest = list(params)
    return all([_keyset(key, casts, values, op, rest) for op in bounds])


def _ordered(info: store.TableInfo, key: Sequence[ModelColumn], conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = [row for _, row in store.table_rows(conn, info)]
    rows.sort(key=lambda r: tuple(typed_sort_key(c.type_name, r[c.name]) for c in key))
    return rows


def _row_count(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    info = _table(conn, g)
    return _scalar(_out("", "bigint", 8, 19, nullable=False), sum(1 for _ in store.table_rows(conn, info)))


def _key_boundaries(keys: int) -> Handler:
    """The first m of every n-th key in key order (TOP (m), ROW_NUMBER() over the key, ``% n = 0``)."""
    def handler(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
        info = _table(conn, g)
        key = _key_of(info, g, keys)
        top, every = _top(p[0]), _top(p[1])
        if every == 0:
            raise server_error(DataError, "22012", 8134, "Divide by zero error encountered.")
        rows = _ordered(info, key, conn)
        return Result([OutColumn(c.name, c) for c in key],
                      [tuple(r[c.name] for c in key) for n, r in enumerate(rows, 1) if n % every == 0][:top])
    return handler


def _last_key(keys: int) -> Handler:
    def handler(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
        info = _table(conn, g)
        key = _key_of(info, g, keys)
        rows = _ordered(info, key, conn)
        return Result([OutColumn(c.name, c) for c in key], [tuple(r[c.name] for c in key) for r in rows[-1:]])
    return handler


def _next_boundary(keys: int, lower: bool) -> Handler:
    """The last of the first n keys within the bounds, and its number (ROW_NUMBER() within them)."""
    def handler(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
        info = _table(conn, g)
        key = _key_of(info, g, keys)
        casts = _casts(g, keys)
        top = _top(p[0])
        bounds = [">", "<="] if lower else ["<="]
        rows = [r for r in _ordered(info, key, conn) if _within(key, casts, [r[c.name] for c in key], bounds, p[1:])]
        chosen = rows[:top]
        out = [*(OutColumn(c.name, c) for c in key), _out("__$row", "bigint", 8, 19, nullable=False)]
        return Result(out, [(*(chosen[-1][c.name] for c in key), len(chosen))] if chosen else [])
    return handler


_KEYS_WITHIN = re.compile(r"SELECT \[v\]\.\[__\$i\] FROM \(SELECT -1 AS \[__\$i\], (?P<keys>.+?) FROM "
                          rf"(?P<db>\[{_IDENT}\])\.(?P<schema>\[{_IDENT}\])\.(?P<table>\[{_IDENT}\]) WHERE 1 = 0 "
                          rf"UNION ALL SELECT \?, (?P<casts>CAST\(\? AS {_TYPE}\)(?:, CAST\(\? AS {_TYPE}\))*)"
                          r"(?: UNION ALL .+)?\) AS \[v\](?: WHERE .+)?\Z")


def _keys_within(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """Which of the numbered keys lie within the bounds: the statement is recognised by rendering it again with
    ``queries.keys_within`` from its table, key columns, types and number of keys (anything else is unmodelled);
    each key value is converted by its CAST and compared as the key column's type compares."""
    sql = g["_sql"]
    match = _KEYS_WITHIN.match(sql)
    if match is None:
        raise UnmodelledStatementError("HY000", f"the SQL Server model does not answer this statement: {sql}")
    names = split_list(match["keys"])
    types = re.findall(rf"CAST\(\? AS ({_TYPE})\)", match["casts"])
    count = sql.count(" UNION ALL SELECT ?, ")
    shapes = [(lower, upper) for lower, upper in ((True, True), (True, False), (False, True))
              if q.keys_within(match["db"], unquote(match["schema"]), unquote(match["table"]), names, types, count,
                               lower, upper) == sql]
    if len(names) != len(types) or not shapes:
        raise UnmodelledStatementError("HY000", f"the SQL Server model does not answer this statement: {sql}")
    info = store.table_info(conn, store.database_name(conn, unquote(match["db"])), unquote(match["schema"]),
                            unquote(match["table"]))
    key = _columns_of(info, names)
    casts = [cast_type(t) for t in types]
    width = len(key) + 1
    bounds = [op for op, wanted in ((">", shapes[0][0]), ("<=", shapes[0][1])) if wanted]
    found = []
    for n in range(count):
        number, *values = p[n * width:(n + 1) * width]
        values = [coerce(cast, value) for cast, value in zip(casts, values, strict=True)]
        if _within(key, casts, values, bounds, p[count * width:]):
            found.append((number,))
    return Result([_out("__$i", "int", 4, 10)], found)


def _try_condition(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    info = _table(conn, g)
    _conditions.parse(g["cond"], info)  # compiled: an unknown column fails, with no row read
    for _, row in store.table_rows(conn, info):  # and SQL Server may evaluate it on rows TOP (0) never returns
        _conditions.holds(_conditions.parse(g["cond"], info), info, row)
        break
    return Result([_out("", "int", 4, 10, nullable=False)], [])


def _lock_table(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    info = _table(conn, g)
    s.locked_tables.append(info.qualified)
    return Result([OutColumn(c.name, c) for _, c in info.columns], [])


def _server_utc_offset(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """The model's clock is the machine's local time, as SQL Server's is the server's."""
    import datetime as dt

    offset = dt.datetime.now().astimezone().utcoffset() or dt.timedelta(0)
    return Result([_out("", "int", 4, 10, nullable=True)], [(int(offset.total_seconds() // 60),)])


def _table_columns(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    db = _database(conn, g)
    rows = conn.execute("SELECT name, type_name, max_length, precision, scale, is_nullable FROM columns "
                        "WHERE db = ? AND object_id = ? ORDER BY column_id", (db, p[0])).fetchall()
    columns = [_out("name", "sysname", 256, nullable=False), _out("type_name", "sysname", 256, nullable=False),
               _out("max_length", "smallint", 2, 5, nullable=False), _out("precision", "tinyint", 1, 3),
               _out("scale", "tinyint", 1, 3), _out("is_nullable", "bit")]
    return _rows(columns, rows)


def _enable_table(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """``sys.sp_cdc_enable_table`` through SQL: the same as the admin API (a third instance is refused)."""
    with store.write_transaction(s.model_path) as writer:
        enable_table(writer, _database(conn, g), p[0], p[1], p[3], None, datetime_text(dt.datetime.now()))
    return Result(None, [])


def _disable_table(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    with store.write_transaction(s.model_path) as writer:
        disable_table(writer, _database(conn, g), p[2])
    return Result(None, [])


def _set_lock_timeout(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """SET LOCK_TIMEOUT: recorded for the session (``Connection.lock_timeout``; -1, SQL Server's default, waits
    forever); the model has no lock contention to apply it to."""
    s.lock_timeout = int(g["_sql"].rsplit(" ", 1)[1])
    return Result(None, [])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


APP_LOCKS = ("CREATE TABLE IF NOT EXISTS app_locks (db TEXT COLLATE NOCASE, resource TEXT, session TEXT, "
             "pid INTEGER, PRIMARY KEY (db, resource))")


def _get_job_lock(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """sp_getapplock @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = 0: granted unless another session
    holds the resource in the database (then its return code would be -1, the request timed out: not waited for).
    SQL Server releases a session's application locks when the session ends: here when the connection is closed
    (``Connection.close``), or when its process is gone (a process killed, whose connections closed nothing)."""
    if (p[1], p[2]) != ("Exclusive", "Session"):
        raise UnmodelledStatementError("HY000", f"the SQL Server model has Exclusive application locks of a Session "
                                       f"only, not @LockMode = {p[1]!r}, @LockOwner = {p[2]!r}")
    db = _database(conn, g)
    s.asked_app_lock = True
    with store.write_transaction(s.model_path) as writer:
        writer.execute(APP_LOCKS)  # a model file older than application locks
        for session, pid in writer.execute("SELECT session, pid FROM app_locks").fetchall():
            if not _alive(pid):
                writer.execute("DELETE FROM app_locks WHERE session = ?", (session,))
        holder = writer.execute("SELECT session FROM app_locks WHERE db = ? AND resource = ?", (db, p[0])).fetchone()
        if holder is None:
            writer.execute("INSERT INTO app_locks (db, resource, session, pid) VALUES (?, ?, ?, ?)",
                           (db, p[0], s.session_id, os.getpid()))
    return Result(None, [])


def _job_lock_mode(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    """APPLOCK_MODE('public', resource, 'Session'): Exclusive when this session holds the resource, else NoLock (the
    model keeps Exclusive application locks only)."""
    if (p[0], p[2]) != ("public", "Session"):
        raise UnmodelledStatementError("HY000", f"the SQL Server model answers APPLOCK_MODE of public's Session locks "
                                       f"only, not {p[0]!r}, {p[2]!r}")
    held = conn.execute("SELECT 1 FROM app_locks WHERE resource = ? AND session = ?", (p[1], s.session_id)).fetchone()
    return _scalar(_out("", "nvarchar", 64), "Exclusive" if held else "NoLock")


def release_app_locks(conn: sqlite3.Connection, session: Session) -> None:
    """A session's end releases its application locks."""
    if not session.asked_app_lock:
        return
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("DELETE FROM app_locks WHERE session = ?", (session.session_id,))
    conn.execute("COMMIT")


def _set_isolation(conn: sqlite3.Connection, g: dict[str, str], p: list[Any], s: Session) -> Result:
    s.isolation_level = g["_sql"].split(" LEVEL ", 1)[1]
    return Result(None, [])


# ---- registry -----------------------------------------------------------------------------------------------------
def _statements() -> list[tuple[str, re.Pattern[str], Handler]]:
    db = "QQDBQQ"
    table = (db, "QQschemaQQ", "QQtableQQ")
    entries: list[tuple[str, str, Handler]] = [
        ("PRODUCT_VERSION", q.PRODUCT_VERSION, _product_version),
        ("DATABASE_CDC_ENABLED", q.DATABASE_CDC_ENABLED, _database_cdc_enabled),
        ("AGENT_RUNNING", q.AGENT_RUNNING, _agent_running),
        ("TABLE_COLUMNS", q.TABLE_COLUMNS.format(db=db), _table_columns),
        ("ENABLE_TABLE", q.ENABLE_TABLE.format(db=db), _enable_table),
        ("DISABLE_TABLE", q.DISABLE_TABLE.format(db=db), _disable_table),
        ("SERVER_UTC_OFFSET", q.SERVER_UTC_OFFSET, _server_utc_offset),
        ("GET_JOB_LOCK", q.GET_JOB_LOCK.format(db=db), _get_job_lock),
        ("JOB_LOCK_MODE", q.JOB_LOCK_MODE, _job_lock_mode),
        ("MAX_LSN", q.MAX_LSN.format(db=db), _max_lsn),
        ("MIN_LSN", q.MIN_LSN.format(db=db), _min_lsn),
        ("CAPTURE_INSTANCE_START", q.CAPTURE_INSTANCE_START.format(db=db), _capture_instance_start),
        ("INCREMENT_LSN", q.INCREMENT_LSN.format(db=db), _increment_lsn),
        ("CAPTURE_LATENCY", q.CAPTURE_LATENCY.format(db=db), _capture_latency),
        ("OLDEST_KEPT_TIME", q.OLDEST_KEPT_TIME.format(db=db), _mapping_time("MIN", ">=")),
        ("POSITION_TIME", q.POSITION_TIME.format(db=db), _mapping_time("MAX", "<=")),
        ("CAPTURE_INSTANCES", q.CAPTURE_INSTANCES.format(db=db), _capture_instances),
        ("CAPTURED_COLUMNS", q.CAPTURED_COLUMNS.format(db=db), _captured_columns),
        ("PRIMARY_KEY_COLUMNS", q.PRIMARY_KEY_COLUMNS.format(db=db), _primary_key_columns),
        ("INDEX_COLUMNS", q.INDEX_COLUMNS.format(db=db), _index_columns),
        ("DDL_HISTORY", q.DDL_HISTORY.format(db=db), _ddl_history),
        ("NTH_TRANSACTION_LSN", q.NTH_TRANSACTION_LSN.format(db=db), _nth_transaction_lsn),
        ("CHANGE_COUNTS", q.CHANGE_COUNTS.format(db=db, change_table=q.change_table("QQinstQQ")), _change_counts),
        ("changes_query", q.changes_query(db, "QQinstQQ", ["QQPcolsQQ"]), _changes),
        ("changes_query", q.changes_query(db, "QQinstQQ", ["QQPcolsQQ"], command_id=False), _changes),
        ("COMMAND_ID_COLUMN", q.COMMAND_ID_COLUMN.format(db=db), _command_id_column),
        ("select_rows/read_signals",
         q.read_signals(db, "QQschemaQQ.QQtableQQ").replace("[id], [type], [data]", "[QQLcolsQQ]"), _select_rows),
        ("row_count", q.row_count(*table), _row_count),
        ("lock_table", q.lock_table(*table), _lock_table),
    ]
    entries.append(("try_condition", q.try_condition(*table, "QQCONDQQ"), _try_condition))
    for keys in range(1, MAX_KEY_COLUMNS + 1):  # keyset statements: the key columns and their CASTs, by number
        names, types = [f"QQk{i}QQ" for i in range(1, keys + 1)], [f"QQTYPEt{i}QQ" for i in range(1, keys + 1)]
        for lower, upper in ((True, True), (True, False), (False, True)):
            handler = functools.partial(_select_rows, keys=keys, lower=lower, upper=upper)
            entries.append(("select_rows", q.select_rows(*table, ["QQLcolsQQ"], names, lower, upper,
                                                         key_types=types), handler))
            entries.append(("select_rows", q.select_rows(*table, ["QQLcolsQQ"], names, lower, upper, "QQCONDQQ",
                                                         key_types=types), handler))
        entries.append(("key_boundaries", q.key_boundaries(*table, names), _key_boundaries(keys)))
        entries.append(("last_key", q.last_key(*table, names), _last_key(keys)))
        for lower in (True, False):
            entries.append(("next_boundary", q.next_boundary(*table, names, types, lower), _next_boundary(keys, lower)))
    entries.append(("select_rows", q.select_rows(*table, ["QQLcolsQQ"], ["QQLkeysQQ"], False, False), _select_rows))
    entries.append(("select_rows", q.select_rows(*table, ["QQLcolsQQ"], ["QQLkeysQQ"], False, False, "QQCONDQQ"),
                    _select_rows))
    entries.append(("keys_within", "SELECT [v].[__$i] FROM (SELECT -1 AS [__$i], QQCONDQQ", _keys_within))
    entries.extend(("SET_ISOLATION", sql, _set_isolation) for sql in sorted(set(q.SET_ISOLATION.values())))
    compiled = [(name, _compile(sql), handler) for name, sql, handler in entries]
    compiled.append(("set_lock_timeout", re.compile(re.escape(q.set_lock_timeout(0)).replace("0", r"-?\d+") + r"\Z"),
                     _set_lock_timeout))
    return compiled


STATEMENTS = _statements()
# T-SQL that sqlglot 29's T-SQL dialect rejects although SQL Server accepts it (its transaction-characteristics
# table misspells UNCOMMITTED and lacks SNAPSHOT); only these exact statements bypass the sqlglot check.
_SQLGLOT_GAPS = {"SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", "SET TRANSACTION ISOLATION LEVEL SNAPSHOT"}


@functools.lru_cache(maxsize=512)
def parameter_markers(sql: str) -> int:
    """Parse with sqlglot's T-SQL dialect (invalid T-SQL fails loudly); returns the number of ``?`` markers."""
    if sql in _SQLGLOT_GAPS:
        return 0
    try:
        tree = sqlglot.parse_one(sql, read="tsql")
    except sqlglot.errors.SqlglotError as error:
        raise server_error(ProgrammingError, "42000", 102, f"Incorrect syntax (sqlglot T-SQL: {error}) in "
                           f"statement: {sql}") from error
    return sum(1 for _ in tree.find_all(exp.Placeholder))


def recognise(sql: str) -> tuple[str, Handler, dict[str, str]]:
    for name, pattern, handler in STATEMENTS:
        match = pattern.match(sql)
        if match:
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            groups["_sql"] = sql
            return name, handler, groups
    raise UnmodelledStatementError("HY000", f"the SQL Server model does not answer this statement (not one of "
                                   f"cdckit.dialect.sqlserver.queries): {sql}")


def execute(conn: sqlite3.Connection, sql: str, params: Sequence[Any], session: Session) -> tuple[str, Result]:
    sql = normalise(sql)
    markers = parameter_markers(sql)
    name, handler, groups = recognise(sql)
    if markers != len(params):
        raise pyodbc_error(ProgrammingError, f"The SQL contains {markers} parameter markers, but {len(params)} "
                           "parameters were supplied")
    with store.read_transaction(conn):
        return name, handler(conn, groups, list(params), session)
