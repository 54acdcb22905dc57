"""Connections to PostgreSQL / YugabyteDB with the session settings cdckit's decoding relies on.

Every value cdckit reads (snapshot rows and pgoutput tuples alike) is PostgreSQL's *text output*, produced
under the same session settings, so one conversion table serves both paths.

TLS is libpq's: ``database.sslmode`` and ``database.sslrootcert`` (a CA file, or ``system``: the machine's trust
store, ``trust_store``) go to it as ``sslmode`` and ``sslrootcert``.
"""

from __future__ import annotations

import io
import os
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


# The system's trust store as one file, where distributions keep it: Debian and Ubuntu (update-ca-certificates);
# Fedora, RHEL and Amazon Linux (update-ca-trust); openSUSE; RHEL's extracted bundle; Alpine
SYSTEM_CA_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem",
                   "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem")
SYSTEM = "system"
LIBPQ_SYSTEM = 160000  # the first libpq that reads sslrootcert=system


def trust_store(rootcert: str) -> str:
    """What libpq gets as ``sslrootcert`` for ``database.sslrootcert``: a CA file as given; for ``system``, the
    machine's trust store.

    libpq 16 and later read ``system`` as OpenSSL's default store, but psycopg2-binary's libpq brings an OpenSSL of
    its own whose default store is a folder of the wheel's build machine (``/host/tmp/libpq.build``), which no
    machine has: handed ``system``, it would trust no server. So cdckit names the store: ``SSL_CERT_FILE`` when set
    (OpenSSL's own way to name it), else the first of ``SYSTEM_CA_FILES`` there is. With ``SSL_CERT_DIR`` alone,
    ``system`` goes to libpq (16 or later), whose OpenSSL reads that folder.
    """
    if rootcert != SYSTEM:
        return rootcert
    if os.environ.get("SSL_CERT_FILE"):
        return os.environ["SSL_CERT_FILE"]
    if os.environ.get("SSL_CERT_DIR"):
        if psycopg2.__libpq_version__ < LIBPQ_SYSTEM:
            raise SourceConnectionError(f"database.sslrootcert=system with SSL_CERT_DIR needs libpq 16 or later, and "
                                        f"psycopg2 has {psycopg2.__libpq_version__}; set SSL_CERT_FILE to a CA bundle "
                                        f"instead, or upgrade psycopg2-binary")
        return SYSTEM
    found = next((path for path in SYSTEM_CA_FILES if os.path.isfile(path)), None)
    if found is None:
        raise SourceConnectionError(f"database.sslrootcert=system: this machine has no system trust store (none of "
                                    f"{', '.join(SYSTEM_CA_FILES)}); install the ca-certificates package, set "
                                    f"SSL_CERT_FILE to a CA bundle, or set database.sslrootcert to the CA file")
    return found


def connection_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """libpq keyword arguments from ``database.*`` properties (as strings, the way Spark options arrive)."""
    rootcert = options.get("database.sslrootcert") or ""
    # as libpq: sslrootcert=system makes verify-full the default, and refuses any weaker mode
    sslmode = options.get("database.sslmode") or ("verify-full" if rootcert == SYSTEM else "prefer")
    if rootcert == SYSTEM and sslmode != "verify-full":
        raise SourceConnectionError(f"database.sslrootcert=system needs database.sslmode=verify-full, not {sslmode}")
    kwargs: dict[str, Any] = {
        "host": options["database.hostname"],
        "port": int(options["database.port"]),
        "dbname": options["database.dbname"],
        "user": options["database.user"],
        "password": options.get("database.password", ""),
        "sslmode": sslmode,
        "connect_timeout": max(1, int(options.get("database.connect.timeout.ms", "30000")) // 1000),
        "application_name": "cdckit",
    }
    if rootcert:
        kwargs["sslrootcert"] = trust_store(rootcert)
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
    tls = f"database.sslmode={kwargs.get('sslmode')}, database.sslrootcert={kwargs.get('sslrootcert', '(unset)')}"
    if "certificate verify failed" in lowered:
        return (f"{where}'s certificate is not signed by an authority that database.sslrootcert trusts ({tls}; "
                f"{detail}); set database.sslrootcert to the file of the CA that signed it (system: the machine's "
                f"trust store)")
    if "does not match host name" in lowered:
        return (f"{where}'s certificate does not name the host connected to ({detail}); database.sslmode=verify-full "
                f"checks database.hostname against it: set database.hostname to a name the certificate holds")
    if "root certificate file" in lowered:
        return (f"{where}: the certificate authority to check the server against cannot be read ({tls}; {detail}); "
                f"set database.sslrootcert to a CA file on every node (or system)")
    if "server does not support ssl" in lowered:
        return (f"{where} does not accept TLS, which database.sslmode={kwargs.get('sslmode')} requires ({detail}); "
                f"turn ssl on at the server")
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
