"""The pyodbc-shaped DB-API surface: ``connect``, Connection, Cursor, Row."""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from . import _sqlite as store
from ._errors import (
    Error,
    InterfaceError,
    ProgrammingError,
    UnmodelledStatementError,
    cannot_open_database,
    driver_error,
    login_failed,
    pyodbc_error,
    server_error,
)
from ._statements import Result, Session, execute, release_app_locks
from ._types import (
    DATETIMEOFFSET_SQL_TYPE,
    SQL_TYPES,
    TIME2_SQL_TYPE,
    TIMESTAMP_SQL_TYPE,
    TYPES,
    datetimeoffset_struct,
    plain_time_value,
    time_struct,
    timestamp_struct,
)

# pyodbc's GetData by ODBC SQL type: the bytes an output converter for the type receives, and the value without one
# (None: "ODBC SQL type N is not yet supported", whatever the value, NULL too)
_STRUCTS: dict[int, Callable[[Any], bytes]] = {DATETIMEOFFSET_SQL_TYPE: datetimeoffset_struct,
                                                TIMESTAMP_SQL_TYPE: timestamp_struct, TIME2_SQL_TYPE: time_struct}
_READABLE = {TIMESTAMP_SQL_TYPE, TIME2_SQL_TYPE}

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"


class Row(tuple[Any, ...]):
    """Like ``pyodbc.Row``: a tuple whose values are also attributes named after the columns."""

    _names: dict[str, int]
    cursor_description: tuple[tuple[Any, ...], ...]

    def __new__(cls, values: Sequence[Any], description: tuple[tuple[Any, ...], ...]) -> Row:
        row = super().__new__(cls, values)
        row.cursor_description = description
        row._names = {d[0]: i for i, d in enumerate(description) if d[0]}
        return row

    def __getattr__(self, name: str) -> Any:
        try:
            return self[self.__dict__["_names"][name]]
        except KeyError:
            raise AttributeError(name) from None

    def __reduce__(self) -> tuple[Any, ...]:
        return (Row, (tuple(self), self.cursor_description))


def _description(result: Result, converters: dict[int, Callable[[Any], Any]]) -> tuple[tuple[Any, ...], ...] | None:
    if result.columns is None:
        return None
    described = []
    for out in result.columns:
        column = out.column
        python_type = TYPES[column.type_name][4]
        if column.type_name == "datetimeoffset":  # pyodbc: str with an output converter, else its default
            python_type = str if DATETIMEOFFSET_SQL_TYPE in converters else bytearray
        if python_type is str or python_type is bytearray:
            wide = column.type_name in ("nchar", "nvarchar", "sysname")
            chars = column.max_length // 2 if wide else column.max_length
            size = 0 if column.max_length == -1 else chars
        else:
            size = column.precision
        described.append((out.name, python_type, None, size, column.precision, column.scale, column.nullable))
    return tuple(described)


class Cursor:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.description: tuple[tuple[Any, ...], ...] | None = None
        self.rowcount = -1
        self.arraysize = 1
        self._rows: deque[tuple[Any, ...]] = deque()  # as stored; turned into pyodbc's values when fetched
        self._special: list[tuple[int, int]] = []  # (column index, ODBC SQL type) of the columns in SQL_TYPES
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise pyodbc_error(ProgrammingError, "Attempt to use a closed cursor.")
        self.connection._check()

    def execute(self, sql: str, *params: Any) -> Cursor:
        """pyodbc style: ``execute(sql, a, b)`` or ``execute(sql, (a, b))``."""
        self._check()
        if len(params) == 1 and isinstance(params[0], (tuple, list)):
            params = tuple(params[0])
        self.description, self._rows, self.rowcount = None, deque(), -1
        name, result = execute(self.connection._sqlite, sql, params, self.connection.session)
        self.connection._record(name, sql, params)
        self.description = _description(result, self.connection._output_converters)
        if result.columns is not None:
            self._rows = deque(result.rows)
            self._special = [(index, SQL_TYPES[out.column.type_name]) for index, out in enumerate(result.columns)
                             if out.column.type_name in SQL_TYPES]
        return self

    def _row(self, values: tuple[Any, ...]) -> Row:
        """pyodbc's GetData: a column of SQL type 93 (datetime, smalldatetime, datetime2), -154 (time) or -155
        (datetimeoffset) goes to the output converter registered for its type then, as the driver's struct (None
        for NULL, the converter is not called). Without one, 93 and -154 come back as Python values cut to
        microseconds (pyodbc divides the nanosecond fraction by 1000), and -155, -151 (geometry, geography,
        hierarchyid) and -150 (sql_variant) fail the fetch, whatever the value. The model does not produce the
        CLR or variant bytes a converter for -151 or -150 would receive."""
        assert self.description is not None
        converted = list(values)
        for index, sql_type in self._special:
            converter = self.connection._output_converters.get(sql_type)
            if converter is None or sql_type not in _STRUCTS:
                if sql_type in _READABLE:
                    converted[index] = plain_time_value(values[index])
                    continue
                if converter is not None:
                    raise UnmodelledStatementError("HY000", f"the SQL Server model does not produce the bytes an "
                                                   f"output converter for ODBC SQL type {sql_type} receives")
                raise pyodbc_error(ProgrammingError, f"ODBC SQL type {sql_type} is not yet supported.  "
                                   f"column-index={index}  type={sql_type}", "HY106")
            if values[index] is not None:
                converted[index] = converter(_STRUCTS[sql_type](values[index]))
        return Row(converted, self.description)

    def _take(self, count: int) -> list[Row]:
        self._check()
        if self.description is None:
            raise ProgrammingError("No results.  Previous SQL was not a query.")
        taken: list[Row] = []
        while self._rows and len(taken) < count:
            taken.append(self._row(self._rows.popleft()))
        return taken

    def fetchone(self) -> Row | None:
        taken = self._take(1)
        return taken[0] if taken else None

    def fetchval(self) -> Any:
        row = self.fetchone()
        return None if row is None else row[0]

    def fetchmany(self, size: int | None = None) -> list[Row]:
        return self._take(self.arraysize if size is None else size)

    def fetchall(self) -> list[Row]:
        return self._take(len(self._rows))

    def __iter__(self) -> Iterator[Row]:
        while True:
            row = self.fetchone()
            if row is None:
                return
            yield row

    def close(self) -> None:
        self._closed = True
        self._rows.clear()

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is None and not self.connection.autocommit and not self.connection.closed:
            self.connection.commit()
        self.close()


class Connection:
    """One client connection; it opens the model's SQLite file, so any process given the path sees one server."""

    def __init__(self, path: str | Path, *, autocommit: bool = False, database: str | None = None,
                 timeout: int = 0, user: str | None = None, password: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise driver_error(InterfaceError, "08001", f"[08001] the SQL Server model file {self.path} does not "
                               "exist (create it with SqlServerModel(path))")
        self._sqlite: sqlite3.Connection = store.open_sqlite(self.path)
        self.autocommit = autocommit
        self.timeout = timeout
        self.session = Session(model_path=str(self.path), login=(user or "").casefold())
        self.closed = False
        self._output_converters: dict[int, Callable[[Any], Any]] = {}
        self.database = database
        login = store.login(self._sqlite, user or "")
        if store.logins_checked(self._sqlite) and (login is None or login["password"] != (password or "")):
            self._sqlite.close()
            raise login_failed(user or "")
        if database is not None:
            exists = self._sqlite.execute("SELECT 1 FROM databases WHERE name = ?", (database,)).fetchone()
            if exists is None or (login is not None and login["databases"] is not None
                                  and database.casefold() not in login["databases"]):
                self._sqlite.close()
                raise cannot_open_database(database)
            if store.server_value(self._sqlite, f"offline:{database}"):
                self._sqlite.close()
                error = server_error(InterfaceError, "42000", 942, f"Database '{database}' cannot be opened because "
                                     "it is offline.")
                error.args = (error.args[0], error.args[1].replace("SQLExecDirectW", "SQLDriverConnect"))
                raise error

    def _check(self) -> None:
        if self.closed:
            raise pyodbc_error(ProgrammingError, "Attempt to use a closed connection.")

    def _record(self, name: str, sql: str, params: Sequence[Any]) -> None:
        if not store.server_value(self._sqlite, "record_statements"):
            return
        self._sqlite.execute("BEGIN IMMEDIATE")
        self._sqlite.execute("INSERT INTO statement_log (name, sql, params, isolation_level) VALUES (?, ?, ?, ?)",
                             (name, " ".join(sql.split()), repr(tuple(params)), self.session.isolation_level))
        self._sqlite.execute("COMMIT")

    @property
    def isolation_level(self) -> str:
        """The level last set with SET TRANSACTION ISOLATION LEVEL (READ COMMITTED, SQL Server's default)."""
        return self.session.isolation_level

    @property
    def lock_timeout(self) -> int:
        """The milliseconds last set with SET LOCK_TIMEOUT (-1, SQL Server's default: wait forever)."""
        return self.session.lock_timeout

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, sql: str, *params: Any) -> Cursor:
        return self.cursor().execute(sql, *params)

    def commit(self) -> None:
        """Ends the (read-only) transaction: table locks taken with TABLOCKX are released."""
        self._check()
        self.session.locked_tables.clear()

    def rollback(self) -> None:
        self._check()
        self.session.locked_tables.clear()

    def add_output_converter(self, sqltype: int, func: Callable[[Any], Any] | None) -> None:
        if func is None:
            self._output_converters.pop(sqltype, None)
        else:
            self._output_converters[sqltype] = func

    def clear_output_converters(self) -> None:
        self._output_converters.clear()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                release_app_locks(self._sqlite, self.session)  # the session ends: its application locks go
            finally:
                self._sqlite.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        # pyodbc: the with block commits on success and does not close the connection
        if not self.closed and not self.autocommit:
            self.commit() if kind is None else self.rollback()


def parse_connection_string(text: str) -> dict[str, str]:
    """``KEY=value;KEY={va;lue}`` -> {upper-case key: value}, as ODBC reads it: a braced value runs to its closing
    ``}`` (``}}`` is one ``}`` inside it), and of a key given twice the first value counts (SQLDriverConnect)."""
    items: dict[str, str] = {}
    position = 0
    while position < len(text):
        equals = text.find("=", position)
        if equals < 0:
            if text[position:].strip(" ;"):
                raise driver_error(InterfaceError, "IM002", f"bad connection string item: {text[position:]!r}")
            break
        key = text[position:equals].strip(" ;").upper()
        position = equals + 1
        if text[position:position + 1] == "{":
            end = position + 1
            while True:
                end = text.find("}", end)
                if end < 0:
                    raise driver_error(InterfaceError, "IM002", "unterminated {value} in connection string")
                if text[end + 1:end + 2] == "}":
                    end += 2
                    continue
                break
            value = text[position + 1:end].replace("}}", "}")
            position = text.find(";", end)
            position = len(text) if position < 0 else position + 1
        else:
            end = text.find(";", position)
            end = len(text) if end < 0 else end
            value = text[position:end].strip()
            position = end + 1
        items.setdefault(key, value)
    return items


def connect(connection_string: str = "", *, autocommit: bool = False, timeout: int = 0,
            **attributes: Any) -> Connection:
    """pyodbc.connect's shape; the model file comes from the ``MODEL=<path>`` item (or ``model=`` keyword)."""
    items = parse_connection_string(connection_string)
    items.update({key.upper(): str(value) for key, value in attributes.items()})
    if "MODEL" not in items:
        raise driver_error(InterfaceError, "IM002", "the connection string names no MODEL=<path of the SQL Server "
                           "model's SQLite file>")
    database = items.get("DATABASE") or None
    return Connection(items["MODEL"], autocommit=autocommit, database=database, timeout=timeout,
                      user=items.get("UID"), password=items.get("PWD"))


class ModelConnector:
    """A picklable stand-in for ``pyodbc.connect`` bound to one model file (Spark workers can unpickle it)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def __call__(self, connection_string: str = "", **kwargs: Any) -> Connection:
        return connect(connection_string, **{**kwargs, "model": self.path})


def connect_factory(path: str | Path) -> ModelConnector:
    return ModelConnector(path)


__all__ = ["Connection", "Cursor", "Error", "ModelConnector", "Row", "connect", "connect_factory"]
