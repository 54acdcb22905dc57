"""One job per checkpoint: an application lock of the checkpoint, owned by a session of the job's driver.

``sp_getapplock`` with ``@LockOwner = 'Session'`` in the first captured database, on a resource naming the
checkpoint (``cdckit:`` and a SHA-256 of its location: a resource is at most 255 characters, and only its first 32
can be read back). SQL Server releases a session's application locks when the session ends (Microsoft's
sp_getapplock page), so a job killed with ``kill -9`` or whose machine is lost frees it as soon as the server sees
the connection gone.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from cdckit.dialect.job_lock import SessionLock
from cdckit.dialect.sqlserver import queries as q
from cdckit.dialect.sqlserver.connection import connect

log = logging.getLogger("cdckit.sqlserver")


def lock_resource(checkpoint: str) -> str:
    return "cdckit:" + hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:40]


class CheckpointLock(SessionLock):
    """The application lock of ``checkpoint`` in ``database``, on a connection of its own."""

    guards = "writing the checkpoint"
    log = log

    def __init__(self, options: Mapping[str, str], database: str, checkpoint: str) -> None:
        self.options = options
        self.database = database
        self.resource = lock_resource(checkpoint)
        self.identity = f"application lock {self.resource} in {database}"
        self.what = f"checkpoint's {self.identity}"
        self.conn: Any = None

    def acquire(self) -> bool:
        """Take the lock: False when another session holds it."""
        conn = connect(self.options, self.database)
        try:
            cursor = conn.cursor()
            cursor.execute(q.GET_JOB_LOCK.format(db=q.quote_name(self.database)), self.resource, "Exclusive",
                           "Session")
            mode = self.mode(cursor)
        except BaseException:
            conn.close()
            raise
        if mode != "Exclusive":
            conn.close()
            return False
        self.conn = conn
        return True

    def mode(self, cursor: Any) -> str:
        """APPLOCK_MODE of the resource for this session: Exclusive while it holds the lock, else NoLock."""
        return str(cursor.execute(q.JOB_LOCK_MODE, "public", self.resource, "Session").fetchval())

    def alive(self) -> bool:
        if self.conn is None:
            return False
        self.mode(self.conn.cursor())
        return True

    def take_again(self) -> str | None:
        return None if self.acquire() else ""

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            finally:
                self.conn = None
