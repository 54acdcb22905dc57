"""Connections to SQL Server over pyodbc, with clear errors and no secret in any message.

pyodbc cannot read ``datetimeoffset`` (ODBC SQL type -155, SQL_SS_TIMESTAMPOFFSET) by itself: fetching such a
column fails ("ODBC SQL type -155 is not yet supported") unless the connection has an output converter for it.
Every connection cdckit opens, pyodbc's own or one from ``cdckit.sqlserver.connection.factory``, gets
``datetimeoffset_text`` as that converter (replacing any the factory set), so the value always reaches the formats
as SQL Server's own text, with its offset and all seven fraction digits.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Mapping
from typing import Any

from cdckit.errors import SourceConnectionError

DEFAULT_DRIVER = "ODBC Driver 18 for SQL Server"
SQL_SS_TIMESTAMPOFFSET = -155


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


def connection_string(options: Mapping[str, str], database: str | None = None) -> str:
    """An ODBC connection string from ``database.*`` properties (values braced so ``;`` cannot inject)."""
    def braced(value: str) -> str:
        return "{" + value.replace("}", "}}") + "}"

    parts = {
        "DRIVER": braced(options.get("database.driver", DEFAULT_DRIVER)),
        "SERVER": f"{options['database.hostname']},{options.get('database.port', '1433')}",
        "DATABASE": braced(database or options.get("database.names", "").split(",")[0].strip()),
        "UID": braced(options.get("database.user", "")),
        "PWD": braced(options.get("database.password", "")),
        "Encrypt": "yes" if options.get("database.encrypt", "true").lower() == "true" else "no",
        "TrustServerCertificate": "yes" if options.get("database.trustServerCertificate", "false").lower() == "true"
        else "no",
        "APP": "cdckit",
    }
    if options.get("database.applicationIntent"):
        parts["ApplicationIntent"] = options["database.applicationIntent"]
    return ";".join(f"{key}={value}" for key, value in parts.items())


def _factory(options: Mapping[str, str]) -> Callable[..., Any]:
    target = options.get("cdckit.sqlserver.connection.factory", "")
    if not target:
        try:
            import pyodbc
        except ImportError as exc:
            raise SourceConnectionError(
                f"pyodbc cannot be loaded ({exc}); install cdckit[sqlserver] and an ODBC driver "
                f"(Microsoft ODBC Driver 18 for SQL Server, or FreeTDS with unixODBC)") from None
        return pyodbc.connect  # type: ignore[no-any-return]
    module_name, _, function = target.partition(":")
    return getattr(importlib.import_module(module_name), function)  # type: ignore[no-any-return]


def connect(options: Mapping[str, str], database: str | None = None, autocommit: bool = True) -> Any:
    """Open a connection; failures name the server, the user and the property to fix, never the password."""
    text = connection_string(options, database)
    model_path = options.get("cdckit.sqlserver.model.path")
    if model_path:
        text += f";MODEL={model_path}"
    where = f"{options['database.hostname']}:{options.get('database.port', '1433')}"
    try:
        if options.get("cdckit.sqlserver.connection.factory"):
            conn = _factory(options)(text)  # a custom factory takes the connection string alone
        else:  # pyodbc's login timeout, in seconds: database.connect.timeout.ms
            seconds = max(1, int(options.get("database.connect.timeout.ms", "30000")) // 1000)
            conn = _factory(options)(text, timeout=seconds)
    except SourceConnectionError:
        raise
    except Exception as exc:  # pyodbc.Error and driver errors
        detail = " ".join(str(exc).replace(options.get("database.password", "") or "\0", "********").split())
        lowered = detail.lower()
        if "login failed" in lowered:
            raise SourceConnectionError(f"{where} refused login {options.get('database.user')!r}: check "
                                        f"database.user and database.password") from None
        if "because it is offline" in lowered:
            raise SourceConnectionError(f"database {database!r} on {where} is OFFLINE; bring it back (ALTER DATABASE "
                                        f"[{database}] SET ONLINE) and run the job again: it resumes from its "
                                        f"checkpoint, and the change tables keep what the capture job stored "
                                        f"(up to the cleanup job's retention)") from None
        if "cannot open database" in lowered:
            raise SourceConnectionError(f"database {database!r} on {where} cannot be opened by "
                                        f"{options.get('database.user')!r}; check database.names and the "
                                        f"user's access") from None
        raise SourceConnectionError(f"connecting to SQL Server at {where} failed: {detail}; check "
                                    f"database.hostname, database.port and the ODBC driver") from None
    conn.autocommit = autocommit
    if hasattr(conn, "add_output_converter"):  # a factory may hand back a wrapper that cannot take one
        conn.add_output_converter(SQL_SS_TIMESTAMPOFFSET, datetimeoffset_text)
    return conn
