"""Heartbeats (``heartbeat.interval.ms``): a tiny transactional logical decoding message the slot can advance
past on a quiet database, and the server's current WAL position."""

from __future__ import annotations

import functools
import logging

from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.dialect.postgres.server_version import ServerVersion

log = logging.getLogger("cdckit")

HEARTBEAT_MESSAGE_PREFIX = "cdckit.heartbeat"
_WAL_POSITIONS = {"flush": "SELECT pg_current_wal_flush_lsn()::text",
                  "insert": "SELECT pg_current_wal_insert_lsn()::text"}


def current_wal_lsn(conn: Connection, which: str = "flush") -> int:
    """The WAL position written and flushed (``flush``), or inserted so far (``insert``)."""
    with conn.cursor() as cur:
        cur.execute(_WAL_POSITIONS[which])
        row = cur.fetchone()
    conn.commit()
    assert row is not None
    return parse_lsn(str(row[0]))


def emit_heartbeat(conn: Connection, slot_name: str) -> None:
    """Write a transactional logical decoding message: a tiny transaction the slot can advance past.

    This keeps an idle slot moving (so the server can recycle WAL) without a heartbeat table. The message itself,
    which becomes the heartbeat record, reaches pgoutput from PostgreSQL 14 on; before, the slot still moves past
    the (empty) transaction, but no heartbeat record is written.
    """
    version = ServerVersion.of(conn)
    if not version.delivers_logical_messages:
        _warn_no_heartbeat_records(version)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_logical_emit_message(true, %s, %s)", (HEARTBEAT_MESSAGE_PREFIX, slot_name))
    conn.commit()


@functools.cache
def _warn_no_heartbeat_records(version: ServerVersion) -> None:
    log.warning("heartbeat.interval.ms: PostgreSQL %s's pgoutput does not deliver logical decoding messages (14 and "
                "later do), so heartbeats keep the replication slot moving but write no heartbeat records", version)
