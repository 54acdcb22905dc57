"""Connections to PostgreSQL / YugabyteDB with the session settings cdckit's decoding relies on.

Every value cdckit reads (snapshot rows and pgoutput tuples alike) is PostgreSQL's *text output*, produced
under the same session settings, so one conversion table serves both paths.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from cdckit.errors import SourceConnectionError

# Settings that fix the text form of values: UTC timestamps, ISO dates, hex bytea, exact floats.
SESSION_SETTINGS = (
    ("TimeZone", "UTC"),
    ("DateStyle", "ISO, YMD"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
    ("lc_monetary", "C"),
)

_RAW_TEXT = psycopg2.extensions.new_type(
    tuple(psycopg2.extensions.string_types.keys()), "CDCKIT_RAW_TEXT", lambda value, _cursor: value
)


def connection_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """libpq keyword arguments from ``database.*`` properties (as strings, the way Spark options arrive)."""
    kwargs: dict[str, Any] = {
        "host": options["database.hostname"],
        "port": int(options["database.port"]),
        "dbname": options["database.dbname"],
        "user": options["database.user"],
        "password": options.get("database.password", ""),
        "sslmode": options.get("database.sslmode", "prefer"),
        "connect_timeout": max(1, int(options.get("database.connect.timeout.ms", "30000")) // 1000),
        "application_name": "cdckit",
    }
    if options.get("database.sslrootcert"):
        kwargs["sslrootcert"] = options["database.sslrootcert"]
    return kwargs


def connect(options: Mapping[str, str], *, replication: bool = False,
            raw_text: bool = True) -> psycopg2.extensions.connection:
    """Open a connection; failures become ``SourceConnectionError`` naming the cause and the property to fix."""
    kwargs = connection_kwargs(options)
    factory = psycopg2.extras.LogicalReplicationConnection if replication else None
    try:
        conn = psycopg2.connect(connection_factory=factory, **kwargs)
    except psycopg2.OperationalError as exc:
        raise SourceConnectionError(describe_connection_failure(str(exc), kwargs)) from None
    if raw_text:
        psycopg2.extensions.register_type(_RAW_TEXT, conn)
    if not replication:
        with conn.cursor() as cur:
            for name, value in SESSION_SETTINGS:
                cur.execute("SELECT set_config(%s, %s, false)", (name, value))
        conn.commit()
    return conn


def describe_connection_failure(message: str, kwargs: Mapping[str, Any]) -> str:
    where = f"{kwargs['host']}:{kwargs['port']}"
    detail = " ".join(message.split())
    lowered = detail.lower()
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return (f"{where} refused user {kwargs['user']!r}: password authentication failed; "
                f"check database.user and database.password")
    if "does not exist" in lowered and "database" in lowered:
        return f"database {kwargs['dbname']!r} does not exist on {where}; check database.dbname"
    if "role" in lowered and "does not exist" in lowered:
        return f"user {kwargs['user']!r} does not exist on {where}; check database.user"
    if "no pg_hba.conf entry" in lowered:
        return (f"{where} has no pg_hba.conf entry allowing user {kwargs['user']!r} "
                f"(replication connections need their own 'host replication' line); ask the DBA to add one")
    if "connection refused" in lowered or "could not connect" in lowered or "timeout" in lowered \
            or "could not translate host name" in lowered:
        return (f"cannot reach a database server at {where} ({detail}); check database.hostname and "
                f"database.port, and that the server accepts TCP connections")
    return f"connecting to {where} as {kwargs['user']!r} failed: {detail}"


# A COPY's output is spooled: up to SPOOL_MEMORY bytes in memory, the rest in a temporary file, so a task's memory
# does not grow with what it reads. psycopg2 hands each row to the spool on its own, through a buffer of
# COPY_BUFFER bytes.
SPOOL_MEMORY = 32 * 1024 * 1024
COPY_BUFFER = 1024 * 1024


class _IntoSpool(io.RawIOBase):
    """The raw end of ``copy_out``'s buffer: what the buffer hands on goes to the spool."""

    def __init__(self, spool: IO[bytes]) -> None:
        super().__init__()
        self.spool = spool

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # a memoryview of the buffer, valid during the call
        self.spool.write(data)
        return len(data)


def copy_out(cur: psycopg2.extensions.cursor, statement: bytes, spool: IO[bytes]) -> None:
    """Run ``COPY ... TO STDOUT`` into ``spool`` through a buffer of ``COPY_BUFFER`` bytes. psycopg2 writes each row
    on its own, and a spooled file's ``write`` is Python code: the buffer's is not, and the spool gets a write a
    megabyte."""
    with io.BufferedWriter(_IntoSpool(spool), buffer_size=COPY_BUFFER) as buffered:
        cur.copy_expert(statement, buffered)
