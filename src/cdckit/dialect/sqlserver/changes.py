"""Reading change tables by LSN range and folding their rows into change events, as Debezium does.

A batch covers whole transactions: every change whose commit LSN (``__$start_lsn``) lies in ``(start, end]``.
Rows come ordered by (commit LSN, ``__$seqval``, ``__$operation``). An update's two rows (operation 3 then 4)
become one ``u`` event with ``event_serial_no`` 2; a primary-key update, which SQL Server logs as a delete and
an insert under the same LSNs, becomes a delete (serial 1), its tombstone, and a create (serial 2); any other
row is one event with serial 1.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cdckit.dialect.sqlserver import queries
from cdckit.dialect.sqlserver.catalog import CaptureInstance, lsn_bytes, lsn_int
from cdckit.dialect.sqlserver.connection import server_datetime
from cdckit.errors import CdcKitError, SourcePreconditionError
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.source import format_sqlserver_lsn

log = logging.getLogger("cdckit.sqlserver")


class PurgedChangesError(CdcKitError):
    """The cleanup job removed changes cdckit had not read yet."""


class CaptureDisabledError(CdcKitError):
    """CDC was disabled for a captured table while cdckit was reading it."""


def max_lsn(cursor: Any, database: str) -> int | None:
    cursor.execute(queries.MAX_LSN.format(db=queries.quote_name(database)))
    row = cursor.fetchone()
    return lsn_int(row[0]) if row and row[0] is not None else None


def min_lsn(cursor: Any, database: str, capture_instance: str) -> int:
    cursor.execute(queries.MIN_LSN.format(db=queries.quote_name(database)), capture_instance)
    row = cursor.fetchone()
    return lsn_int(row[0]) if row else 0


def capture_health(cursor: Any, database: str, capture_instances: list[str], position: int | None
                   ) -> dict[str, float | None]:
    """For the metrics: the capture job's last scan latency (``CaptureJobLatencySeconds``; None when the login may
    not read sys.dm_cdc_log_scan_sessions, VIEW DATABASE STATE) and the seconds of changes between the cleanup job's
    low-water mark and ``position`` (``CleanupMarginSeconds``: at 0 or below, the next cleanup removes changes not
    yet read)."""
    name = queries.quote_name(database)
    latency: float | None = None
    try:
        cursor.execute(queries.CAPTURE_LATENCY.format(db=name))
        row = cursor.fetchone()
        latency = float(row[0]) if row and row[0] is not None else None
    except Exception as exc:  # a permission the login lacks: the value stays unknown
        log.debug("reading the capture job's latency in %s failed: %s", database, exc)
    margin: float | None = None
    if position is not None and capture_instances:
        low = max(min_lsn(cursor, database, instance) for instance in capture_instances)
        cursor.execute(queries.OLDEST_KEPT_TIME.format(db=name), lsn_bytes(low))
        oldest = cursor.fetchone()
        cursor.execute(queries.POSITION_TIME.format(db=name), lsn_bytes(position))
        at = cursor.fetchone()
        if oldest and at and oldest[0] is not None and at[0] is not None:
            margin = (server_datetime(at[0]) - server_datetime(oldest[0])).total_seconds()
        elif oldest and oldest[0] is not None and low > position:
            margin = 0.0  # the low-water mark passed the position: changes were removed
    return {"CaptureJobLatencySeconds": latency, "CleanupMarginSeconds": margin}


def agent_running(cursor: Any) -> bool | None:
    """True/False, or None when it cannot be known: the login may not read sys.dm_server_services (VIEW SERVER
    STATE), or the view lists no SQL Server Agent (Azure SQL Database, Amazon RDS, a login that does not see it)."""
    try:
        cursor.execute(queries.AGENT_RUNNING)
        row = cursor.fetchone()
    except Exception:  # permission denied: the check is advisory
        return None
    if row is None:
        return None
    return bool(row[0])


_NO_MAX_LSN_WARNED: set[str] = set()


def require_max_lsn(cursor: Any, database: str) -> int | None:
    """The database's max LSN, or None when ``sys.fn_cdc_get_max_lsn()`` returns NULL (no cdc.lsn_time_mapping row).

    As Debezium's streaming source does, a NULL max LSN is not an error in itself: a quiet database whose cleanup
    job purged every mapping row has none, and the changes committed next get one. It stops the job only where
    nothing can be captured: the Agent is reported stopped, so no capture job reads the log. Where the Agent runs
    or its state cannot be read (no row in sys.dm_server_services, no VIEW SERVER STATE), a warning says so once
    and the job goes on (docs/decisions/0034)."""
    value = max_lsn(cursor, database)
    if value is not None:
        _NO_MAX_LSN_WARNED.discard(database)
        return value
    running = agent_running(cursor)
    if running is False:
        raise SourcePreconditionError(
            f"no maximum LSN is recorded in database {database!r}: the SQL Server Agent is not running, so the "
            f"CDC capture job is not reading the transaction log; start the SQL Server Agent service")
    if database not in _NO_MAX_LSN_WARNED:
        _NO_MAX_LSN_WARNED.add(database)
        if running:
            log.warning("no maximum LSN is recorded in database %r although the SQL Server Agent runs: no change "
                        "was captured yet, or the cleanup job purged every entry of cdc.lsn_time_mapping in a quiet "
                        "database; going on, the next captured change sets it", database)
        else:
            log.warning("no maximum LSN is recorded in database %r and the SQL Server Agent's state cannot be read "
                        "(sys.dm_server_services lists no SQL Server Agent to this login: Azure SQL, Amazon RDS, or "
                        "no VIEW SERVER STATE): no change was captured yet, the cleanup job purged every entry of "
                        "cdc.lsn_time_mapping, or the Agent is stopped; going on; check the Agent if no change "
                        "ever arrives (sql/sqlserver/07_verify.sql)", database)
    return None


def check_readable(cursor: Any, instance: CaptureInstance, start: int, known_since: int | None = None) -> int:
    """The first LSN to read for ``instance`` after ``start``; raises when changes after ``start`` were purged.

    ``known_since`` is the start LSN the capture instance had when cdckit first met it (recorded with the
    snapshot or in the stream's offsets): the cleanup job raises an instance's start LSN, so only that record
    tells a purge from an instance created after ``start`` (a new capture instance after a schema change), whose
    changes before its own start never existed. Changes were lost when the instance now starts after both
    ``start`` and the start it had when cdckit met it. Without a record nothing can be told, and nothing is
    raised.
    """
    low = min_lsn(cursor, instance.database, instance.capture_instance)
    if low == 0:
        low = _zero_min_lsn(cursor, instance)
    first = start + 1
    if known_since is not None and low > max(first, known_since):
        raise PurgedChangesError(
            f"changes of {instance.database}.{instance.qualified_name} after LSN {format_sqlserver_lsn(start)} "
            f"were removed by the CDC cleanup job (capture instance {instance.capture_instance} now starts at "
            f"{format_sqlserver_lsn(low)}), so cdckit cannot read them; raise the cleanup job's retention "
            f"(sql/sqlserver/04_tune_capture_job.sql), then take a new snapshot: set "
            f"cdckit.sqlserver.purged.changes=resnapshot, or delete cdckit.checkpoint.location and run again")
    return max(first, low)


class CaptureAccessError(CdcKitError):
    """The login may not read a capture instance's change data."""


def _zero_min_lsn(cursor: Any, instance: CaptureInstance) -> int:
    """``sys.fn_cdc_get_min_lsn`` returned 0x00, which SQL Server answers for a capture instance that does not exist
    and for one the caller may not read (its Remarks); the instance's row in cdc.change_tables tells them apart. A
    row whose start_lsn is NULL ("the low endpoint has not been established") has no low bound yet: 0."""
    cursor.execute(queries.CAPTURE_INSTANCE_START.format(db=queries.quote_name(instance.database)),
                   instance.capture_instance)
    row = cursor.fetchone()
    table = f"{instance.database}.{instance.qualified_name}"
    if row is None:
        raise CaptureDisabledError(
            f"CDC was disabled for table {table} (capture instance {instance.capture_instance} no longer exists); "
            f"re-enable it with sys.sp_cdc_enable_table (sql/sqlserver/03_enable_cdc_table.sql) or remove the table "
            f"from table.include.list")
    if row[0] is None:
        return 0
    raise CaptureAccessError(
        f"the login may not read the changes of table {table}: capture instance {instance.capture_instance} exists "
        f"(cdc.change_tables), but sys.fn_cdc_get_min_lsn returns 0x00 to this login, as SQL Server does for a "
        f"caller without SELECT on every captured column of {instance.qualified_name} or outside the capture "
        f"instance's gating role; grant both (sql/sqlserver/05_cdckit_login_and_role.sql) or remove the table from "
        f"table.include.list")


@dataclass(frozen=True)
class ChangeRange:
    database: str
    capture_instance: str
    start: int  # exclusive commit LSN
    end: int  # inclusive commit LSN


def pending_end(cursor: Any, instances: Sequence[CaptureInstance], start: int, upto: int, max_events: int,
                max_transactions: int = 0) -> tuple[int | None, int]:
    """(end, changes): the largest commit LSN <= ``upto`` such that whole transactions after ``start`` hold <=
    ``max_events`` changes (one larger transaction is admitted alone), and how many changes that admits; end is
    None when nothing is pending."""
    if upto <= start:
        return None, 0
    if max_transactions > 0:
        database = instances[0].database if instances else ""
        cursor.execute(queries.NTH_TRANSACTION_LSN.format(db=queries.quote_name(database)), max_transactions,
                       lsn_bytes(start))
        row = cursor.fetchone()
        if row and row[0] is not None:
            upto = min(upto, lsn_int(row[0]))
    per_commit: dict[int, int] = {}
    cutoff: int | None = None  # an instance returned as many rows as asked: counts past its last row are unknown
    for instance in instances:
        db = queries.quote_name(instance.database)
        table = queries.change_table(instance.capture_instance)
        cursor.execute(queries.CHANGE_COUNTS.format(db=db, change_table=table), max_events + 1, lsn_bytes(start),
                       lsn_bytes(upto))
        rows = cursor.fetchall()
        for commit, count in rows:
            per_commit[lsn_int(commit)] = per_commit.get(lsn_int(commit), 0) + int(count)
        if len(rows) > max_events:
            last = lsn_int(rows[-1][0])
            cutoff = last if cutoff is None else min(cutoff, last)
    commits = sorted(c for c in per_commit if cutoff is None or c <= cutoff)
    if not commits:
        return (None if cutoff is not None else upto), 0
    if cutoff is None and sum(per_commit[c] for c in commits) <= max_events:
        # everything up to the max LSN fits, including LSNs where no captured table changed
        return upto, sum(per_commit[c] for c in commits)
    # The first transaction is admitted even when it alone exceeds the limit.
    end, admitted = commits[0], per_commit[commits[0]]
    for commit in commits[1:]:
        if admitted + per_commit[commit] > max_events:
            break
        end, admitted = commit, admitted + per_commit[commit]
    return end, admitted


def read_changes(cursor: Any, instance: CaptureInstance, first: int, end: int) -> Iterator[Sequence[Any]]:
    db = queries.quote_name(instance.database)
    columns = [c.name for c in instance.columns]
    types = {c.name: c.type_name for c in instance.columns}
    cursor.execute(queries.changes_query(db, instance.capture_instance, columns, types), lsn_bytes(first),
                   lsn_bytes(end))
    while True:
        rows = cursor.fetchmany(2000)
        if not rows:
            return
        yield from rows


def server_utc_offset_minutes(cursor: Any) -> int:
    cursor.execute(queries.SERVER_UTC_OFFSET)
    row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def fold_changes(instance: CaptureInstance, rows: Iterable[Sequence[Any]],
                 utc_offset_minutes: int = 0) -> Iterator[ChangeEvent]:
    """Change-table rows (ordered) -> change events with Debezium's event_serial_no.

    Commit times are the server's local time; ``utc_offset_minutes`` (``server_utc_offset_minutes``) turns them
    into UTC for ``source.ts_ms``.
    """
    names = [c.name for c in instance.columns]
    shift_ms = utc_offset_minutes * 60_000
    pending: Sequence[Any] | None = None  # an operation-3 row waiting for its 4, or a 1 that may pair with a 2
    for row in rows:
        if pending is not None:
            same_change = row[0] == pending[0] and row[1] == pending[1]
            if pending[2] == 3:
                if not (same_change and row[2] == 4):
                    raise SourcePreconditionError(
                        f"change table of {instance.capture_instance} has an update's old row (operation 3) at "
                        f"LSN {format_sqlserver_lsn(lsn_int(pending[0]))} without its new row (operation 4)")
                yield _event(instance, names, "u", pending, row, 2, shift_ms)
                pending = None
                continue
            if pending[2] == 1 and same_change and row[2] == 2:  # a primary-key update
                yield _event(instance, names, "d", pending, None, 1, shift_ms)
                yield _event(instance, names, "c", None, row, 2, shift_ms)
                pending = None
                continue
            yield from _single(instance, names, pending, shift_ms)
            pending = None
        if row[2] in (1, 3):
            pending = row
        else:
            yield from _single(instance, names, row, shift_ms)
    if pending is not None:
        yield from _single(instance, names, pending, shift_ms)


def _single(instance: CaptureInstance, names: list[str], row: Sequence[Any], shift_ms: int
            ) -> Iterator[ChangeEvent]:
    if row[2] == 1:
        yield _event(instance, names, "d", row, None, 1, shift_ms)
    elif row[2] == 2:
        yield _event(instance, names, "c", None, row, 1, shift_ms)
    else:
        raise SourcePreconditionError(
            f"change table of {instance.capture_instance} has an update's old row (operation 3) at LSN "
            f"{format_sqlserver_lsn(lsn_int(row[0]))} without its new row (operation 4)")


def _values(names: list[str], row: Sequence[Any]) -> dict[str, object]:
    return dict(zip(names, row[4:4 + len(names)], strict=True))


def _event(instance: CaptureInstance, names: list[str], op: str, before: Sequence[Any] | None,
           after: Sequence[Any] | None, serial: int, shift_ms: int = 0) -> ChangeEvent:
    row = after if after is not None else before
    assert row is not None
    commit_lsn, change_lsn = lsn_int(row[0]), lsn_int(row[1])
    commit_time = row[4 + len(names)]
    ts_ms = _epoch_ms(commit_time) - shift_ms
    # cdckit's ordering key: a primary-key update's create comes after the delete's tombstone (serial 1).
    ordering = 2 if op == "c" and serial == 2 else 0
    return ChangeEvent(
        instance.schema, instance.name, op,
        _values(names, before) if before is not None else None,
        _values(names, after) if after is not None else None,
        Position(commit_lsn, change_lsn, ordering), ts_ms, None,
        extra={"event_serial_no": serial}, database=instance.database)


def _epoch_ms(moment: Any) -> int:
    import datetime

    moment = server_datetime(moment)  # the connection's text of a datetime (connection.timestamp_text)
    if isinstance(moment, datetime.datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        return int(moment.timestamp() * 1000)
    return 0
