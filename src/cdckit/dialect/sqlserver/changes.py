"""Reading change tables by LSN range and folding their rows into change events, as Debezium does.

A batch covers whole transactions: every change whose commit LSN (``__$start_lsn``) lies in ``(start, end]``.
Rows come from the change table ordered by (commit LSN, ``__$command_id``, ``__$seqval``, ``__$operation``), the
order Microsoft documents for a transaction's changes (``__$seqval`` alone misorders a deferred update's rows). An
update's two rows (operation 3 then 4) become one ``u`` event with ``event_serial_no`` 2; any other row is one event
with serial 1, except a delete and an insert at one seqval in a change table without ``__$command_id``: a
primary-key update, a delete (serial 1), its tombstone, and a create (serial 2), as Debezium numbers them.
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
from cdckit.events import UNAVAILABLE, ChangeEvent, Position
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
    """The change table's rows with commit LSN in [first, end], in SQL Server's order of the changes: commit LSN,
    ``__$command_id``, ``__$seqval``, operation (``queries.changes_query``)."""
    db = queries.quote_name(instance.database)
    columns = [c.name for c in instance.columns]
    types = {c.name: c.type_name for c in instance.columns}
    cursor.execute(queries.changes_query(db, instance.capture_instance, columns, _has_command_id(cursor, instance),
                                         types), lsn_bytes(first), lsn_bytes(end))
    while True:
        rows = cursor.fetchmany(2000)
        if not rows:
            return
        yield from rows


_COMMAND_ID_WARNED: set[tuple[str, str]] = set()


def _has_command_id(cursor: Any, instance: CaptureInstance) -> bool:
    """Whether the change table has ``__$command_id``; without it (SQL Server 2012-2016 before the cumulative update
    of KB 3030352) a warning says once that deferred updates can be misordered there."""
    cursor.execute(queries.COMMAND_ID_COLUMN.format(db=queries.quote_name(instance.database)), instance.object_id,
                   "__$command_id")
    row = cursor.fetchone()
    present = bool(row and row[0])
    if not present and (instance.database, instance.capture_instance) not in _COMMAND_ID_WARNED:
        _COMMAND_ID_WARNED.add((instance.database, instance.capture_instance))
        log.warning("the change table of capture instance %s in %s has no __$command_id column (SQL Server before "
                    "the cumulative update of KB 3030352): its rows are ordered by __$seqval, which can put a "
                    "deferred update's insert before its delete; install the update and re-enable CDC on the table",
                    instance.capture_instance, instance.database)
    return present


def server_utc_offset_minutes(cursor: Any) -> int:
    cursor.execute(queries.SERVER_UTC_OFFSET)
    row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


class _Slots:
    """Each event's place in its transaction: its ``__$seqval``, or just after the previous event's place when SQL
    Server logged the change with a lower seqval than the change before it (a deferred update, read in
    ``__$command_id`` order). Places only grow within a commit, so positions order events as they were read."""

    def __init__(self) -> None:
        self.commit = -1
        self.last = -1

    def place(self, commit: int, seqval: int) -> int:
        if commit != self.commit:
            self.commit, self.last = commit, -1
        self.last = max(seqval, self.last + 1)
        return self.last


def fold_changes(instance: CaptureInstance, rows: Iterable[Sequence[Any]],
                 utc_offset_minutes: int = 0) -> Iterator[ChangeEvent]:
    """Change-table rows (in ``read_changes``' order) -> change events with Debezium's event_serial_no.

    An update's rows 3 and 4 (one seqval, one command) become one ``u`` event with serial 2. A delete followed by an
    insert at the same seqval without command ids (a change table from before ``__$command_id``) is a primary-key
    update: delete (serial 1), its tombstone, create (serial 2), Debezium's function-mode numbering. With command ids
    the two are separate commands, so separate events with serial 1 each, as Debezium's direct mode numbers them.
    Commit times are the server's local time; ``utc_offset_minutes`` (``server_utc_offset_minutes``) turns them
    into UTC for ``source.ts_ms``.
    """
    names = [c.name for c in instance.columns]
    command_at = 5 + len(names)
    shift_ms = utc_offset_minutes * 60_000
    slots = _Slots()
    large = large_object_columns(instance)  # an update's large objects (_values)

    def command(row: Sequence[Any]) -> Any:
        return row[command_at] if len(row) > command_at else None

    def single(row: Sequence[Any]) -> Iterator[ChangeEvent]:
        yield from _single(instance, names, row, shift_ms, slots.place(lsn_int(row[0]), lsn_int(row[1])))

    pending: Sequence[Any] | None = None  # an operation-3 row waiting for its 4, or a 1 that may pair with a 2
    for row in rows:
        if pending is not None:
            same_change = row[0] == pending[0] and row[1] == pending[1] and command(row) == command(pending)
            if pending[2] == 3:
                if not (same_change and row[2] == 4):
                    raise SourcePreconditionError(
                        f"change table of {instance.capture_instance} has an update's old row (operation 3) at "
                        f"LSN {format_sqlserver_lsn(lsn_int(pending[0]))} without its new row (operation 4)")
                place = slots.place(lsn_int(row[0]), lsn_int(row[1]))
                yield _event(instance, names, "u", pending, row, 2, shift_ms, place, large)
                pending = None
                continue
            if pending[2] == 1 and same_change and row[2] == 2 and command(row) is None:  # a primary-key update
                place = slots.place(lsn_int(row[0]), lsn_int(row[1]))
                yield _event(instance, names, "d", pending, None, 1, shift_ms, place)
                yield _event(instance, names, "c", None, row, 2, shift_ms, place)
                pending = None
                continue
            yield from single(pending)
            pending = None
        if row[2] in (1, 3):
            pending = row
        else:
            yield from single(row)
    if pending is not None:
        yield from single(pending)


def _single(instance: CaptureInstance, names: list[str], row: Sequence[Any], shift_ms: int, place: int
            ) -> Iterator[ChangeEvent]:
    if row[2] == 1:
        yield _event(instance, names, "d", row, None, 1, shift_ms, place)
    elif row[2] == 2:
        yield _event(instance, names, "c", None, row, 1, shift_ms, place)
    else:
        raise SourcePreconditionError(
            f"change table of {instance.capture_instance} has an update's old row (operation 3) at LSN "
            f"{format_sqlserver_lsn(lsn_int(row[0]))} without its new row (operation 4)")


def _values(names: list[str], row: Sequence[Any], large: Sequence[int] = ()) -> dict[str, object]:
    """A row image by column name. ``large``: the indexes of the large-object columns, for an update's rows (3 and 4):
    SQL Server leaves such a column NULL there when the update did not change it (Microsoft's cdc.<capture_instance>_CT,
    "Large Object Data Types"), so a NULL whose ``__$update_mask`` bit is clear is not a value but an unknown one,
    written as Debezium's ``unavailable.value.placeholder`` (debezium/dbz#1164), as for PostgreSQL's TOAST."""
    values: dict[str, object] = dict(zip(names, row[4:4 + len(names)], strict=True))
    if large:
        mask = bytes(row[3] or b"")
        for index in large:
            if values[names[index]] is None and not _bit_set(mask, index + 1):
                values[names[index]] = UNAVAILABLE
    return values


def _bit_set(mask: bytes, ordinal: int) -> bool:
    """``sys.fn_cdc_is_bit_set``: column ordinal 1 is the lowest bit of the mask's LAST byte."""
    at = len(mask) - 1 - (ordinal - 1) // 8
    return at >= 0 and bool(mask[at] >> ((ordinal - 1) % 8) & 1)


def large_object_columns(instance: CaptureInstance) -> tuple[int, ...]:
    """The indexes of the capture instance's columns stored as large objects: text, ntext, image and every type
    sys.columns gives max_length -1 ((max) types, xml, the spatial types)."""
    return tuple(i for i, c in enumerate(instance.columns)
                 if c.type_name in ("text", "ntext", "image") or c.max_length == -1)


def _event(instance: CaptureInstance, names: list[str], op: str, before: Sequence[Any] | None,
           after: Sequence[Any] | None, serial: int, shift_ms: int = 0, place: int | None = None,
           large: Sequence[int] = ()) -> ChangeEvent:
    """``place``: the event's place in its transaction (``_Slots``), its change LSN unless SQL Server logged it out
    of seqval order; the change LSN itself goes to ``source.change_lsn``."""
    row = after if after is not None else before
    assert row is not None
    commit_lsn, change_lsn = lsn_int(row[0]), lsn_int(row[1])
    place = change_lsn if place is None else place
    commit_time = row[4 + len(names)]
    ts_ms = _epoch_ms(commit_time) - shift_ms
    # cdckit's ordering key: a primary-key update's create comes after the delete's tombstone (serial 1).
    ordering = 2 if op == "c" and serial == 2 else 0
    extra: dict[str, object] = {"event_serial_no": serial}
    if place != change_lsn:
        extra["change_lsn"] = change_lsn
    return ChangeEvent(
        instance.schema, instance.name, op,
        _values(names, before, large) if before is not None else None,
        _values(names, after, large) if after is not None else None,
        Position(commit_lsn, place, ordering), ts_ms, None,
        extra=extra, database=instance.database)


def _epoch_ms(moment: Any) -> int:
    import datetime

    moment = server_datetime(moment)  # the connection's text of a datetime (connection.timestamp_text)
    if isinstance(moment, datetime.datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        return int(moment.timestamp() * 1000)
    return 0
