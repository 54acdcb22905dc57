"""One job per replication slot: a session-level advisory lock held on a connection of the job's driver.

``pg_try_advisory_lock(key)`` with ``key`` a stable 64-bit hash of ``'cdckit:' || slot.name`` (advisory locks live
in the slot's database, as the slot does). The lock is a session's: it is released when the connection closes, so a
job killed with ``kill -9`` or whose machine is lost frees it as soon as the server notices the connection gone. The
connection's ``application_name`` names the job (``cdckit <command> <host>:<pid>``), so a second job can say who
holds the lock (``pg_locks`` joined with ``pg_stat_activity``).
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

import psycopg2

from cdckit.dialect.job_lock import SessionLock
from cdckit.dialect.postgres.connection import connect

log = logging.getLogger("cdckit")
APPLICATION_NAME_LIMIT = 63  # NAMEDATALEN - 1: PostgreSQL cuts a longer application_name


def lock_key(slot_name: str) -> int:
    """The advisory lock's key: the first 8 bytes of SHA-256 of ``cdckit:<slot>``, a signed 64-bit integer."""
    return int.from_bytes(hashlib.sha256(f"cdckit:{slot_name}".encode()).digest()[:8], "big", signed=True)


def application_name(command: str) -> str:
    return f"cdckit {command} {socket.gethostname()}:{os.getpid()}"[:APPLICATION_NAME_LIMIT]


class SlotLock(SessionLock):
    """The advisory lock of ``slot_name`` on a connection of its own, or None when another session holds it
    (``holder`` then describes that session)."""

    guards = "reading the slot"
    log = log

    def __init__(self, options: Mapping[str, str], slot_name: str, command: str) -> None:
        self.options = options
        self.slot_name = slot_name
        self.command = command
        self.key = lock_key(slot_name)
        self.identity = f"slot {slot_name}"
        self.what = f"slot {slot_name}'s job lock"
        self.conn: Any = None
        self.supported = True

    def acquire(self) -> dict[str, Any] | None:
        """Take the lock; None when taken (or when the server has no advisory locks: a warning, and the checkpoint's
        owner file alone guards the job), else the holding session (``holder``)."""
        conn = connect(self.options, raw_text=False)  # a boolean as a bool, not its text 'f'
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('application_name', %s, false)", (application_name(self.command),))
                try:
                    cur.execute("SELECT pg_try_advisory_lock(%s)", (self.key,))
                except psycopg2.errors.FeatureNotSupported as exc:  # YugabyteDB before advisory locks
                    conn.rollback()
                    log.warning("this server has no advisory locks (%s); only the checkpoint's owner file keeps a "
                                "second job off slot %s", str(exc).splitlines()[0], self.slot_name)
                    self.supported = False
                    conn.close()
                    return None
                row = cur.fetchone()
                taken = bool(row and row[0])
            conn.commit()
            if not taken:
                found = self.holder(conn)
                conn.close()
                return found or {}
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        return None

    def holder(self, conn: Any) -> dict[str, Any] | None:
        """The session holding the lock: its application_name (cdckit's names the host and pid), client address,
        when it connected and its server process id; None when it cannot be seen (or was released meanwhile)."""
        unsigned = self.key & 0xFFFFFFFFFFFFFFFF
        with conn.cursor() as cur:
            cur.execute("SELECT a.application_name, host(a.client_addr), a.backend_start, a.pid FROM pg_locks l "
                        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                        "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid AND l.objsubid = 1 "
                        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                        (unsigned >> 32, unsigned & 0xFFFFFFFF))
            row = cur.fetchone()
        conn.commit()
        if row is None:
            return None
        return {"application_name": row[0], "client_addr": row[1], "backend_start": row[2], "backend_pid": row[3]}

    def alive(self) -> bool:
        if not self.supported:
            return True  # no advisory locks on this server: nothing to keep
        if self.conn is None or self.conn.closed:
            return False
        with self.conn.cursor() as cur:
            cur.execute("SELECT 1")
        self.conn.commit()
        return True

    def take_again(self) -> str | None:
        holder = self.acquire()
        return None if holder is None else describe_holder(holder)

    def close(self) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close()
        self.conn = None


def describe_holder(holder: Mapping[str, Any]) -> str:
    """``cdckit stream host:pid (server process 123, connected 2026-...)``, from ``SlotLock.holder``."""
    if not holder:
        return "a session that cannot be seen (pg_stat_activity shows other users' sessions only to pg_read_all_stats)"
    name = holder.get("application_name") or "a session without application_name"
    where = f" from {holder['client_addr']}" if holder.get("client_addr") else ""
    since = holder.get("backend_start")
    if isinstance(since, datetime.datetime):
        since = since.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"'{name}'{where} (server process {holder.get('backend_pid')}, connected {since})"
