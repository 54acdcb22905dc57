"""Connections to SQL Server over pyodbc, with clear errors and no secret in any message.

pyodbc cannot read ``datetimeoffset`` (ODBC SQL type -155, SQL_SS_TIMESTAMPOFFSET) by itself: fetching such a
column fails ("ODBC SQL type -155 is not yet supported") unless the connection has an output converter for it. It
reads ``datetime2`` and ``time`` (SQL_TYPE_TIMESTAMP 93, SQL_SS_TIME2 -154) as Python values, whose microseconds
drop the 100-ns digit. Every connection cdckit opens, pyodbc's own or one from
``cdckit.sqlserver.connection.factory``, gets ``datetimeoffset_text``, ``timestamp_text`` and ``time_text`` as
those types' converters (replacing any the factory set), so the values always reach the formats as SQL Server's
own text, with all seven fraction digits (docs/decisions/0032); ``server_datetime`` reads such a text back where
cdckit computes with a time (commit times, the metrics).

``cdckit.sqlserver.connection.factory`` is a test seam: it imports the module it names and calls it in place of
``pyodbc.connect``, so it may name only a function of the lab's distribution (``cdckit_lab.<module>:<function>``,
the model of SQL Server's CDC objects), which the ``cdckit`` wheel and the job image do not carry
(``factory_problem``; the configuration's validation and ``connect`` both refuse anything else).
"""

from __future__ import annotations

import datetime
import importlib
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

from cdckit.errors import SourceConnectionError

DEFAULT_DRIVER = "ODBC Driver 18 for SQL Server"
SQL_SS_TIMESTAMPOFFSET = -155
SQL_TYPE_TIMESTAMP = 93  # datetime, smalldatetime, datetime2
SQL_SS_TIME2 = -154  # time
FACTORY_SETTING = "cdckit.sqlserver.connection.factory"
MODEL_SETTING = "cdckit.sqlserver.model.path"
# what the factory may name: a function of a module of the lab's distribution (cdckit-lab, lab/pyproject.toml)
_LAB_FACTORY = re.compile(r"^cdckit_lab(?:\.[A-Za-z_][A-Za-z0-9_]*)+:[A-Za-z_][A-Za-z0-9_]*$")


def datetimeoffset_text(raw: bytes) -> str:
    """SQL_SS_TIMESTAMPOFFSET_STRUCT bytes (``<6hI2h``: year, month, day, hour, minute, second, fraction in
    nanoseconds, offset hours, offset minutes) as SQL Server writes the value: 'YYYY-MM-DD hh:mm:ss.fffffff +hh:mm'.

    >>> datetimeoffset_text(struct.pack("<6hI2h", 2018, 7, 13, 12, 23, 45, 456_000_000, -5, -30))
    '2018-07-13 12:23:45.4560000 -05:30'
    """
    year, month, day, hour, minute, second, nanos, offset_hours, offset_minutes = struct.unpack("<6hI2h", raw)
    sign = "-" if offset_hours < 0 or offset_minutes < 0 else "+"
    return (f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{nanos // 100:07d} "
            f"{sign}{abs(offset_hours):02d}:{abs(offset_minutes):02d}")


def timestamp_text(raw: bytes) -> str:
    """SQL_TIMESTAMP_STRUCT bytes (``<6hI``: year, month, day, hour, minute, second, fraction in nanoseconds) as SQL
    Server writes the value: 'YYYY-MM-DD hh:mm:ss.fffffff'.

    >>> timestamp_text(struct.pack("<6hI", 2024, 1, 2, 3, 4, 5, 123_456_700))
    '2024-01-02 03:04:05.1234567'
    """
    year, month, day, hour, minute, second, nanos = struct.unpack("<6hI", raw)
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{nanos // 100:07d}"


def time_text(raw: bytes) -> str:
    """SQL_SS_TIME2_STRUCT bytes (``<3H2xI``: hour, minute, second, two bytes of padding, fraction in nanoseconds) as
    SQL Server writes the value: 'hh:mm:ss.fffffff'.

    >>> time_text(struct.pack("<3H2xI", 23, 59, 59, 999_999_900))
    '23:59:59.9999999'
    """
    hour, minute, second, nanos = struct.unpack("<3H2xI", raw)
    return f"{hour:02d}:{minute:02d}:{second:02d}.{nanos // 100:07d}"


_DATETIME_TEXT = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def server_datetime(value: Any) -> Any:
    """A ``timestamp_text`` (or a datetime, or None) as a naive datetime, cut to microseconds."""
    if not isinstance(value, str):
        return value
    match = _DATETIME_TEXT.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"cannot read the SQL Server datetime {value!r}")
    year, month, day, hour, minute, second = (int(field) for field in match.groups()[:6])
    return datetime.datetime(year, month, day, hour, minute, second, int((match[7] or "").ljust(6, "0")[:6]))


def braced(value: str) -> str:
    """An ODBC connection string value as the ODBC rule quotes it: in braces, a ``}`` doubled, so that a ``;`` or
    ``}`` inside it cannot end it and add an attribute.

    >>> braced("db;Encrypt=no")
    '{db;Encrypt=no}'
    >>> braced("p}w")
    '{p}}w}'
    """
    return "{" + value.replace("}", "}}") + "}"


def server_address(options: Mapping[str, str]) -> str:
    r"""ODBC's SERVER value: ``host,port``; with ``database.instance`` (a named instance) ``host\instance``, which the
    SQL Server Browser resolves to the instance's port, or ``host\instance,port`` when ``database.port`` is given,
    which connects to that port (Debezium's rule: ``jdbc:sqlserver://host\instance[:port]``).

    >>> server_address({"database.hostname": "db1", "database.instance": "SALES"})
    'db1\\SALES'
    >>> server_address({"database.hostname": "db1", "database.instance": "SALES", "database.port": "14330"})
    'db1\\SALES,14330'
    >>> server_address({"database.hostname": "db1"})
    'db1,1433'
    """
    host, instance, port = options["database.hostname"], options.get("database.instance"), options.get("database.port")
    if instance:
        return f"{host}\\{instance}" + (f",{port}" if port else "")
    return f"{host},{port or '1433'}"


def connection_string(options: Mapping[str, str], database: str | None = None) -> str:
    """An ODBC connection string from ``database.*`` properties, every value braced (``braced``)."""
    parts = {
        "DRIVER": options.get("database.driver", DEFAULT_DRIVER),
        "SERVER": server_address(options),
        "DATABASE": database or options.get("database.names", "").split(",")[0].strip(),
        "UID": options.get("database.user", ""),
        "PWD": options.get("database.password", ""),
        "Encrypt": "yes" if options.get("database.encrypt", "true").lower() == "true" else "no",
        "TrustServerCertificate": "yes" if options.get("database.trustServerCertificate", "false").lower() == "true"
        else "no",
        "APP": "cdckit",
    }
    if options.get("database.applicationIntent"):
        parts["ApplicationIntent"] = options["database.applicationIntent"]
    if options.get(MODEL_SETTING):  # the lab's model of SQL Server reads its file's path here
        parts["MODEL"] = options[MODEL_SETTING]
    return ";".join(f"{key}={braced(value)}" for key, value in parts.items())


LOGIN_FAILED = 18456
CANNOT_OPEN_DATABASE = 4060
# pyodbc's message for a server error: "[SQLSTATE] [driver][SQL Server]<text> (<number>) (<ODBC function>)"; the first
# diagnostic record's number is the one the error is about (a 4060 may be followed by its 18456)
_SERVER_NUMBER = re.compile(r"\((\d+)\) \((?:SQLDriverConnect|SQLExecDirectW|SQLGetData|SQLFetch)\w*\)")


def server_error_number(message: str) -> int | None:
    """SQL Server's message number in a pyodbc error's text, None when it carries none (a driver's own error).

    >>> server_error_number('[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Cannot open database '
    ...                     '"x" requested by the login. The login failed. (4060) (SQLDriverConnect)')
    4060
    """
    match = _SERVER_NUMBER.search(message)
    return int(match.group(1)) if match else None


def factory_problem(target: str) -> str | None:
    """Why ``cdckit.sqlserver.connection.factory=<target>`` is refused, or None when it names a lab function."""
    if not target or _LAB_FACTORY.match(target):
        return None
    return (f"{FACTORY_SETTING}={target!r} is refused: it is a test seam that imports and runs the module it names, "
            f"so it may only name a function of the lab's distribution (cdckit_lab.<module>:<function>, e.g. "
            f"cdckit_lab.sqlserver_model:connect); remove it to connect through pyodbc")


def _factory(options: Mapping[str, str]) -> Callable[..., Any]:
    target = options.get(FACTORY_SETTING, "")
    if not target:
        try:
            import pyodbc
        except ImportError as exc:
            raise SourceConnectionError(
                f"pyodbc cannot be loaded ({exc}); install cdckit[sqlserver] and an ODBC driver "
                f"(Microsoft ODBC Driver 18 for SQL Server, or FreeTDS with unixODBC)") from None
        return pyodbc.connect  # type: ignore[no-any-return]
    problem = factory_problem(target)
    if problem:  # options that did not go through the configuration's validation
        raise SourceConnectionError(problem)
    module_name, _, function = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), function)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise SourceConnectionError(f"{FACTORY_SETTING}={target!r} cannot be loaded ({exc}); it names the lab's "
                                    f"code, which only the cdckit-lab distribution carries (pip install ./lab)") \
            from None


def connect(options: Mapping[str, str], database: str | None = None, autocommit: bool = True) -> Any:
    """Open a connection; failures name the server, the user and the property to fix, never the password."""
    text = connection_string(options, database)
    where = server_address(options).replace(",", ":")  # host:port, host\instance or host\instance:port
    try:
        if options.get(FACTORY_SETTING):
            conn = _factory(options)(text)  # a custom factory takes the connection string alone
        else:  # pyodbc's login timeout, in seconds: database.connect.timeout.ms
            seconds = max(1, int(options.get("database.connect.timeout.ms", "30000")) // 1000)
            conn = _factory(options)(text, timeout=seconds)
    except SourceConnectionError:
        raise
    except Exception as exc:  # pyodbc.Error and driver errors
        detail = " ".join(str(exc).replace(options.get("database.password", "") or "\0", "********").split())
        lowered = detail.lower()
        number = server_error_number(detail)
        user = options.get("database.user")
        if number == CANNOT_OPEN_DATABASE:  # its text ends "The login failed.", but the login is right
            raise SourceConnectionError(
                f"login {user!r} on {where} cannot open database {database!r} (SQL Server error 4060): the database "
                f"does not exist or the login has no user in it; check database.names, or create a user for the "
                f"login in {database!r} (sql/sqlserver/05_cdckit_login_and_role.sql)") from None
        if number == LOGIN_FAILED or (number is None and "login failed" in lowered):
            raise SourceConnectionError(f"{where} refused login {user!r} (SQL Server error 18456: unknown login or "
                                        f"wrong password): check database.user and database.password") from None
        if "because it is offline" in lowered:
            raise SourceConnectionError(f"database {database!r} on {where} is OFFLINE; bring it back (ALTER DATABASE "
                                        f"[{database}] SET ONLINE) and run the job again: it resumes from its "
                                        f"checkpoint, and the change tables keep what the capture job stored "
                                        f"(up to the cleanup job's retention)") from None
        raise SourceConnectionError(f"connecting to SQL Server at {where} failed: {detail}; check "
                                    f"database.hostname, database.port and the ODBC driver") from None
    conn.autocommit = autocommit
    if hasattr(conn, "add_output_converter"):  # a factory may hand back a wrapper that cannot take one
        conn.add_output_converter(SQL_SS_TIMESTAMPOFFSET, datetimeoffset_text)
        conn.add_output_converter(SQL_TYPE_TIMESTAMP, timestamp_text)
        conn.add_output_converter(SQL_SS_TIME2, time_text)
    return conn
