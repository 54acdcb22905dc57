"""A job's lock whose session the server ended (an idle-session timeout, a restart, a killed backend) is taken
again at the next heartbeat, with a warning; when another session took it meanwhile, an error names that session.
PostgreSQL's advisory lock of the slot, on the embedded server (SQL Server's: tests/unit/test_one_job_sqlserver.py)."""

from __future__ import annotations

import logging
from typing import Any

import psycopg2
import pytest

from cdckit.dialect.postgres.job_lock import SlotLock, lock_key

pytestmark = [pytest.mark.postgres]


def _terminate(dsn: str, pid: int) -> None:
    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        conn.close()


def test_a_lost_advisory_lock_is_taken_again_or_its_new_holder_named(postgres: Any, database: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    options = postgres.connector_properties(database)
    dsn = postgres.dsn(database)
    lock = SlotLock(options, "orders_slot", "stream")
    assert lock.acquire() is None
    lock.keep()  # alive: nothing said
    assert not caplog.records
    _terminate(dsn, lock.conn.get_backend_pid())
    with caplog.at_level(logging.WARNING, "cdckit"):
        lock.keep()
    assert [r.getMessage() for r in caplog.records] == [
        "the connection holding the slot orders_slot's job lock was lost; the lock is held again"]
    caplog.clear()
    _terminate(dsn, lock.conn.get_backend_pid())
    other = psycopg2.connect(dsn, application_name="cdckit stream other-host:4242")
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", (lock_key("orders_slot"),))
            assert cur.fetchone() == (True,)
        other.commit()
        with caplog.at_level(logging.WARNING, "cdckit"):
            lock.keep()
        [record] = caplog.records
        assert record.levelno == logging.ERROR
        message = record.getMessage()
        assert message.startswith("the connection holding the slot orders_slot's job lock was lost, and another "
                                  "session has the lock now ('cdckit stream other-host:4242' from "), message
        assert message.endswith("two jobs may be reading the slot")
    finally:
        other.close()
        lock.close()
