"""Plan the next stream batches while the one before them runs.

Through a backlog, ``latestOffset`` plans a batch by a counting peek, which the server decodes while the executors
wait: Spark asks for the next batch only once the one before is written and committed. ``PlanAhead`` runs that
peek earlier, in a thread of the driver, while the batch before runs. It peeks a temporary copy of the slot
(``pg_copy_logical_replication_slot``, PostgreSQL 12 and later), moved to where the planned batches end, so the
slot itself stays free for the batch's tasks and keeps its position. Committed WAL does not change: a batch planned
so, when more changes follow it in the peek, ends and is cut where a peek from its own start would end and cut it.

Planning ahead is only ever a shortcut. When it cannot run (an older server, YugabyteDB, no free replication slot,
a failure of any kind), or its plan is not for the batch asked for, ``latestOffset`` peeks the slot itself, as it
would without it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping

import psycopg2
from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.pending import PendingChanges, pending_changes
from cdckit.dialect.postgres.replication import (
    advance_slot,
    can_copy_slots,
    copy_slot,
    drop_slot,
    slot_copy_refused,
)
from cdckit.errors import first_line

log = logging.getLogger("cdckit")


class PlanAhead:
    """One planning thread at a time, on a connection of its own; ``take`` waits for the plan it asks for."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.slot_name = self.options.get("slot.name", "debezium")
        self.enabled = can_copy_slots(self.options)
        self.planned = 0  # plans made so far (tests and logs)
        self._conn: Connection | None = None
        self._thread: threading.Thread | None = None
        self._asked: tuple[int, int, int | None] | None = None
        self._plan: PendingChanges | None = None

    def start(self, start: int, max_events: int, upto: int | None, parts: int, min_events_per_part: int,
              bound: int, ahead: int) -> None:
        """Plan the batches from ``start`` in the background (as ``pending_changes`` with these arguments would),
        unless planning is off or a plan is under way."""
        if not self.enabled or (self._thread is not None and self._thread.is_alive()):
            return
        self._asked, self._plan = (start, max_events, upto), None
        self._thread = threading.Thread(
            target=self._run, name="cdckit-plan-ahead", daemon=True,
            args=(start, max_events, upto, parts, min_events_per_part, bound, ahead))
        self._thread.start()

    def take(self, start: int, max_events: int, upto: int | None) -> PendingChanges | None:
        """The plan from ``start`` for this read limit and ``upto``, waiting for it when it is under way; None when
        none was asked for or it failed."""
        if self._asked != (start, max_events, upto):
            return None
        if self._thread is not None:
            self._thread.join()
        plan, self._asked, self._plan = self._plan, None, None
        return plan

    def close(self) -> None:
        """Stop a plan under way (the server cancels its peek) and close the connection."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            conn = self._conn
            if conn is not None and not conn.closed:
                with contextlib.suppress(psycopg2.Error):
                    conn.cancel()
            thread.join(timeout=30)
        conn = self._conn  # read after the thread ended: it may have connected meanwhile
        if conn is not None and not conn.closed:
            conn.close()
        self._conn, self._thread = None, None

    def _run(self, start: int, max_events: int, upto: int | None, parts: int, min_events_per_part: int,
             bound: int, ahead: int) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.options)
            conn = self._conn
            refused = slot_copy_refused(conn)
            if refused:
                self._off(refused)
                return
            copy = copy_slot(conn, self.slot_name, "cdckit_plan")
            advance_slot(conn, copy, start)
            try:
                pending = pending_changes(conn, {**self.options, "slot.name": copy}, start, max_events, upto,
                                          parts, min_events_per_part, bound, ahead)
            finally:
                conn.rollback()  # a failed peek leaves its transaction aborted (the server then drops the copy)
                drop_slot(conn, copy)
            self._plan = pending
            self.planned += 1
        except psycopg2.OperationalError as exc:  # the server went away, or the peek was cancelled: next time
            log.info("planning the next stream batches ahead failed (%s); latestOffset peeks the slot itself",
                     first_line(exc))
            if self._conn is not None:
                self._conn.close()
            self._conn = None
        except Exception as exc:  # a shortcut only: any failure turns it off, and the slot's own peeks go on
            self._off(first_line(exc))
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def _off(self, why: str) -> None:
        self.enabled = False
        log.info("the next stream batches are planned as each is asked for, not while the one before runs: %s", why)

