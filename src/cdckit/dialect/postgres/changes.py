"""Reading committed changes from the replication slot by LSN range.

Changes are *peeked* (``pg_logical_slot_peek_binary_changes``), never consumed, so a batch can be read
again after a failure; the slot moves only when cdckit confirms a position (``advance_slot``) after Spark
has committed the batch that ends there.

A position is the end LSN of a transaction's commit record. A batch ``(start, end]`` holds every
transaction whose commit record starts at or after ``start`` and before ``end``; ``end`` is always the
end of a commit record cdckit has seen, so no transaction is ever split or skipped (PostgreSQL itself
skips, on decoding, transactions whose commit record starts before the slot's confirmed position).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import struct
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import psycopg2.errors
from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres import pgoutput
from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.dialect.postgres.connection import SPOOL_MEMORY, copy_out
from cdckit.dialect.postgres.lsn import format_lsn, parse_lsn
from cdckit.dialect.postgres.replication import can_copy_slots, copy_slot, drop_slot, slot_copy_refused
from cdckit.dialect.postgres.server_version import ServerVersion
from cdckit.errors import DecodingError, first_line
from cdckit.events import UNAVAILABLE, ChangeEvent, Position, Row

log = logging.getLogger("cdckit")
T = TypeVar("T")

HEARTBEAT_MESSAGE_PREFIX = "cdckit.heartbeat"
_CHANGE_KINDS = (ord("I"), ord("U"), ord("D"))
# Outside the range only transaction starts and the structures (relations, types) matter.
_NEEDED_OUT_OF_RANGE = (b"B", b"R", b"Y")


def peek_options(options: Mapping[str, str], version: ServerVersion | None = None) -> list[str]:
    """pgoutput's options for a peek of the slot on a server of ``version`` (None: one that delivers logical
    decoding messages, 14 or later)."""
    plugin_options = ["proto_version", "1", "publication_names", options.get("publication.name", "dbz_publication")]
    if version is None or version.delivers_logical_messages:
        plugin_options += ["messages", "true"]
    return plugin_options


@dataclass(frozen=True)
class PendingChanges:
    end_lsn: int | None  # end of the last whole transaction admitted, None when nothing is pending
    transactions: int  # transactions pending up to the bound (admitted or not)
    events: int  # row changes in the admitted transactions
    splits: tuple[int, ...] = ()  # commit ends inside the batch that cut it into parts of about equal changes
    messages: int = 0  # messages the counting peek decoded (transactions are whole: it may pass its bound)
    changes: int = 0  # row changes among them
    caught_up: bool = False  # the batch takes every transaction committed so far (the peek ran to the slot's end)
    followed: bool = False  # the peek holds changes after the batch: a peek from its start would end it the same
    # The batches after this one that the same peek planned (``ahead``), each as (end, splits): only those with more
    # changes after them in the peek, so that a peek from their start would cut them the same.
    following: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def messages_per_change(self) -> float | None:
        """How many messages the peek decoded per row change (1 and a little for large transactions, 3 for
        one-row ones), or None when it saw no change."""
        return self.messages / self.changes if self.changes else None


def peek_bound(max_events: int, messages_per_change: float | None) -> int:
    """The number of messages the counting peek decodes at most (``upto_nchanges``) to find a batch of
    ``max_events`` changes: 3 messages a change (one-row transactions: Begin, change, Commit) until a peek has
    shown the workload's own ratio, then that ratio with a fifth to spare. PostgreSQL stops only at a
    transaction's end, so a transaction larger than the bound still comes whole."""
    ratio = 3.0 if messages_per_change is None else min(3.0, max(1.0, messages_per_change) * 1.2)
    return int(max_events * ratio) + 1000


# Positions are numbers here (lsn - '0/0'): pg_lsn has max() and min() only from PostgreSQL 13 on. The messages are
# counted per transaction (each message carries its transaction's xid; the Commit message's position is the
# transaction's), so no sort of the messages is needed, only one of the transactions. ``plan`` chains the batches:
# each takes the most whole transactions after the one before that hold at most ``limit`` changes (a larger one
# alone); the first is the batch asked for, the next ``ahead`` are planned from the same peek.
_PENDING_SQL = """
WITH RECURSIVE tx AS (
    SELECT max(CASE WHEN get_byte(c.data, 0) = 67 THEN c.lsn - '0/0'::pg_lsn END) AS lsn,
           count(*) FILTER (WHERE get_byte(c.data, 0) = ANY(%(change_kinds)s)) AS changes, count(*) AS messages
    FROM pg_logical_slot_peek_binary_changes(%(slot)s, %(upto)s::pg_lsn, %(nchanges)s, VARIADIC %(opts)s)
         AS c(lsn, xid, data)
    GROUP BY c.xid
), commits AS (
    SELECT lsn, (sum(changes) OVER (ORDER BY lsn))::int8 AS seen FROM tx WHERE lsn IS NOT NULL
), pending AS (
    SELECT lsn, seen - coalesce((SELECT max(seen) FROM commits WHERE lsn <= %(start)s), 0) AS events
    FROM commits WHERE lsn > %(start)s
), plan(n, low, low_events, high, high_events) AS (
    SELECT 0, NULL::numeric, NULL::int8, %(start)s::numeric, 0::int8
    UNION ALL
    SELECT p.n + 1, p.high, p.high_events, step.lsn, step.events
    FROM plan p CROSS JOIN LATERAL (
        SELECT coalesce(max(q.lsn) FILTER (WHERE q.events - p.high_events <= %(limit)s), min(q.lsn)) AS lsn,
               coalesce(max(q.events) FILTER (WHERE q.events - p.high_events <= %(limit)s), min(q.events)) AS events
        FROM pending q WHERE q.lsn > p.high) AS step
    WHERE p.n <= %(ahead)s AND step.lsn IS NOT NULL
), batches AS (
    SELECT b.n, b.high, b.high_events - b.low_events AS events,
           array_to_string(ARRAY(SELECT cut::text FROM (
                     SELECT DISTINCT (SELECT max(q.lsn) FROM pending q
                                      WHERE q.lsn > b.low AND q.lsn < b.high
                                        AND (q.events - b.low_events) * parts.n <= k * (b.high_events - b.low_events))
                                     AS cut
                     FROM generate_series(1, parts.n - 1) AS k) AS cuts
                 WHERE cuts.cut IS NOT NULL ORDER BY cuts.cut), ',') AS splits,
           EXISTS (SELECT 1 FROM pending q WHERE q.lsn > b.high) AS followed
    FROM plan b CROSS JOIN LATERAL (
        SELECT greatest(1, least(%(parts)s, (b.high_events - b.low_events) / %(min_events)s))::int AS n) AS parts
    WHERE b.n > 0
)
SELECT b1.high::text, (SELECT count(*) FROM pending), b1.events,
       (SELECT count(*) FROM pending p WHERE p.lsn > b1.high), b1.splits,
       (SELECT sum(messages) FROM tx), (SELECT sum(changes) FROM tx),
       (SELECT string_agg(b.high::text || '/' || b.splits, ';' ORDER BY b.n) FROM batches b
        WHERE b.n > 1 AND b.followed)
FROM (SELECT 1) AS one LEFT JOIN batches b1 ON b1.n = 1
"""


def pending_changes(conn: Connection, options: Mapping[str, str], start: int, max_events: int,
                    upto: int | None, parts: int = 1, min_events_per_part: int = 1,
                    bound: int | None = None, ahead: int = 0) -> PendingChanges:
    """Find the largest batch of whole transactions after ``start`` holding at most ``max_events`` changes.

    A single transaction larger than ``max_events`` is admitted alone (transactions are never split).
    The batch is also cut, at transaction ends, into up to ``parts`` ranges of about equal changes, none of
    them (by design) under ``min_events_per_part``; the cuts come back as ``splits``. Only one row comes back
    to the caller whatever the backlog; decoding stops after ``bound`` messages (``peek_bound``; by default 3 a
    change), at the end of the transaction that reaches it. A peek starts at the slot's position: when the bound
    runs out before ``start``, the peek runs again with a bound four times larger, until it finds the changes
    after ``start`` or the slot's end. A ``bound`` of 0 decodes everything up to ``upto`` (or the slot's end).

    With ``ahead``, the same peek also plans up to that many batches after this one (``following``): committed WAL
    does not change, so the next batches need no peek of their own while the backlog lasts.
    """
    nchanges: int | None = bound if bound is not None else peek_bound(max_events, None)
    if nchanges is not None and nchanges <= 0:
        nchanges = None  # no bound: up to ``upto`` or the slot's end
    while True:
        with conn.cursor() as cur:
            cur.execute(_PENDING_SQL, {
                "slot": options.get("slot.name", "debezium"),
                "upto": format_lsn(upto) if upto is not None else None,
                "nchanges": nchanges,
                "opts": peek_options(options, ServerVersion.of(conn)),
                "change_kinds": list(_CHANGE_KINDS),
                "start": start,
                "limit": max_events,
                "parts": max(1, parts),
                "min_events": max(1, min_events_per_part),
                "ahead": max(0, ahead),
            })
            row = cur.fetchone()
        conn.commit()
        assert row is not None
        end_text, transactions, events, later, splits, messages, changes, following = row
        ran_out = nchanges is not None and int(messages or 0) >= nchanges
        if end_text or not ran_out:
            break
        # The bound ran out before ``start`` (the slot lags behind it): nothing found is not nothing pending.
        assert nchanges is not None
        nchanges *= 4
    return PendingChanges(int(end_text) if end_text else None, int(transactions), int(events or 0),
                          _cuts(splits), int(messages or 0), int(changes or 0),
                          caught_up=not ran_out and not int(later or 0), followed=bool(int(later or 0)),
                          following=tuple((int(end), _cuts(cuts)) for end, _, cuts in
                                          (batch.partition("/") for batch in str(following or "").split(";") if batch)))


def _cuts(text: str | None) -> tuple[int, ...]:
    return tuple(int(cut) for cut in str(text or "").split(",") if cut)


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


TableLookup = Callable[[pgoutput.Relation], TableInfo | None]

# A plain change's (message kind, the byte after its relation id): its op. Its tuple, the message's last part,
# starts at byte 6: an insert's or update's new tuple ('N'; an update with an old image, 'K' or 'O', is not plain:
# it may change the key or fill unchanged values in), a delete's key or old tuple ('K', 'O').
_PLAIN_SHAPES = {(73, 78): "c", (85, 78): "u", (68, 75): "d", (68, 79): "d"}
PLAIN_TUPLE_AT = 6
# A run of row changes shorter than this is taken a message at a time: NumPy's fixed cost would be more.
MIN_RUN = 16


def _plain_shape(kinds: Any, tuple_kinds: Any) -> Any:
    """Which messages (their kinds, and the byte after the relation id: NumPy arrays) are plain changes
    (``_PLAIN_SHAPES``)."""
    import numpy as np

    found = np.zeros(len(kinds), dtype=bool)
    for kind, tuple_kind in _PLAIN_SHAPES:
        found |= (kinds == kind) & (tuple_kinds == tuple_kind)
    return found


OP_OF_KIND = {ord("I"): "c", ord("U"): "u", ord("D"): "d"}  # a row change's message kind: its op


class PlainChanges:
    """A run of plain changes (``ChangeDecoder.take_plain`` and ``take_plain_run``) as their messages, for a reader
    that decodes their tuples a column at a time (``pgoutput.tuple_columns``, each at ``PLAIN_TUPLE_AT``). Per
    change: its message, LSN, relation, op (its message kind) and transaction (an index into ``begins``: the
    transaction's Begin, where it sits, and the last commit before it). Runs taken from a block of the peek keep
    their messages where the block has them; single messages are gathered into one such part when a run follows."""

    def __init__(self) -> None:
        self.begins: list[tuple[pgoutput.Begin, int, int | None]] = []
        # parts, in position order: (buffer, starts, ends, lsns, relation ids, message kinds, transactions)
        self._parts: list[tuple[bytes, Any, Any, Any, Any, Any, Any]] = []
        self._singles: tuple[list[bytes], list[int], list[int], list[int], list[int]] = ([], [], [], [], [])
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, data: bytes, lsn: int, relation_id: int, transaction: int) -> None:
        messages, lsns, relation_ids, kinds, transactions = self._singles
        messages.append(data)
        lsns.append(lsn)
        relation_ids.append(relation_id)
        kinds.append(data[0])
        transactions.append(transaction)
        self.count += 1

    def add_run(self, buffer: bytes, starts: Any, ends: Any, lsns: Any, relation_ids: Any, kinds: Any,
                transaction: int) -> None:
        """Messages at ``buffer[starts[i]:ends[i]]`` (NumPy arrays), all of one transaction."""
        import numpy as np

        self._close_singles()
        low = int(starts[0])
        self._parts.append((buffer[low:int(ends[-1])], starts - low, ends - low, lsns, relation_ids, kinds,
                            np.full(len(starts), transaction, dtype=np.int64)))
        self.count += len(starts)

    def _close_singles(self) -> None:
        import numpy as np

        messages, lsns, relation_ids, kinds, transactions = self._singles
        if not messages:
            return
        lengths = np.fromiter(map(len, messages), dtype=np.int64, count=len(messages))
        ends = np.cumsum(lengths)
        self._parts.append((b"".join(messages), ends - lengths, ends, np.array(lsns, dtype=np.int64),
                            np.array(relation_ids, dtype=np.int64), np.array(kinds, dtype=np.uint8),
                            np.array(transactions, dtype=np.int64)))
        self._singles = ([], [], [], [], [])

    def columns(self) -> tuple[bytes, Any, Any, Any, Any, Any, Any]:
        """All the changes as (buffer, starts, ends, lsns, relation ids, message kinds, transactions), the arrays
        NumPy's, each message at ``buffer[starts[i]:ends[i]]``."""
        import numpy as np

        self._close_singles()
        parts = self._parts
        if len(parts) == 1:
            return parts[0]
        offsets = np.cumsum([0] + [len(part[0]) for part in parts[:-1]])
        lsns, relation_ids, kinds, transactions = (np.concatenate([part[i] for part in parts]) for i in range(3, 7))
        self._parts = [(b"".join(part[0] for part in parts),
                        np.concatenate([part[1] + offset for part, offset in zip(parts, offsets, strict=True)]),
                        np.concatenate([part[2] + offset for part, offset in zip(parts, offsets, strict=True)]),
                        lsns, relation_ids, kinds, transactions)]
        return self._parts[0]

    def messages(self) -> Iterator[tuple[bytes, int, int]]:
        """Each change as (message, LSN, transaction), in position order."""
        buffer, starts, ends, lsns, _relation_ids, _kinds, transactions = self.columns()
        for start, end, lsn, transaction in zip(starts.tolist(), ends.tolist(), lsns.tolist(), transactions.tolist(),
                                                strict=True):
            yield buffer[start:end], lsn, transaction


class ChangeDecoder:
    """Turns the pgoutput messages of a peek into change events for the transactions in ``[start, end)``.

    ``table_for`` maps a relation to the captured table (None for a table that is not captured);
    ``heartbeat_tag`` selects this slot's own heartbeat messages (other slots' are ignored).
    """

    def __init__(self, start: int, end: int, table_for: TableLookup, heartbeat_tag: str = "") -> None:
        self.heartbeat_tag = heartbeat_tag.encode("utf-8")
        self.start = start
        self.end = end
        self.table_for = table_for
        # per relation: its message, the captured table (None: not captured), column names, emitted names
        self.relations: dict[int, tuple[pgoutput.Relation, TableInfo | None, list[str], frozenset[str]]] = {}
        self.in_range = False
        self.begin: pgoutput.Begin | None = None
        self.begin_lsn = 0  # where the current transaction's BEGIN message sits
        self.last_commit_lsn: int | None = start
        self._plain: PlainChanges | None = None
        self.filtered = 0  # changes in the range of tables not captured, or of skipped operations

    def feed(self, lsn: int, data: bytes) -> Iterator[ChangeEvent]:
        if not self.in_range and data[:1] not in _NEEDED_OUT_OF_RANGE:
            return  # a change of a transaction outside the range: not even decoded
        message = pgoutput.decode_message(data)
        if isinstance(message, pgoutput.Relation):
            table = self.table_for(message)
            emitted = frozenset(c.name for c in table.emitted_columns()) if table is not None else frozenset()
            self.relations[message.relation_id] = (message, table, [c.name for c in message.columns], emitted)
        elif isinstance(message, pgoutput.Begin):
            self.begin, self.begin_lsn = message, lsn
            self.in_range = self.start <= message.final_lsn < self.end
        elif isinstance(message, pgoutput.Commit):
            if self.in_range and self.begin is not None:
                self.last_commit_lsn = message.end_lsn
                # A transaction boundary marker: formats that need it (transaction metadata) close the transaction.
                yield ChangeEvent("", "", "txend", None, None, Position(self.begin.final_lsn, lsn),
                                  self.begin.commit_time_us // 1000, self.begin.xid)
            self.in_range = False
        elif self.in_range and self.begin is not None:
            yield from self._changes(lsn, message, self.begin, self.last_commit_lsn, self.begin_lsn)

    # -- plain changes, kept as messages and decoded a column at a time -------------------------------------------
    def take_plain(self, lsn: int, data: bytes, ops: frozenset[str]) -> bool:
        """Take a message the caller need not see as events: a transaction's start or end, a change out of the range
        or of a table not captured, and a plain change in the range (an insert, an update without an old image, a
        delete) whose op is in ``ops``, which is kept for ``plain_changes``. False for any other message: it goes to
        ``feed``, after the caller has taken the plain changes so far.

        Used where transaction ends need no event (no transaction metadata): a Commit here yields none."""
        kind = data[0] if data else 0
        if kind == 66 or kind == 67:  # 'B', 'C'
            for _ in self.feed(lsn, data):
                pass
            return True
        if not self.in_range:
            return data[:1] not in _NEEDED_OUT_OF_RANGE
        if len(data) < 8 or self.begin is None:
            return False
        op = _PLAIN_SHAPES.get((kind, data[5]))
        if op is None:
            return False
        relation_id = int.from_bytes(data[1:5], "big")
        known = self.relations.get(relation_id)
        if known is None:
            return False
        if known[1] is None or op not in ops:
            self.filtered += 1
            return True  # a table that is not captured, or an operation skipped
        plain = self._plain_for_begin()
        plain.add(data, lsn, relation_id, len(plain.begins) - 1)
        return True

    def _plain_for_begin(self) -> PlainChanges:
        plain = self._plain
        if plain is None:
            plain = self._plain = PlainChanges()
        if not plain.begins or plain.begins[-1][0] is not self.begin:
            assert self.begin is not None
            plain.begins.append((self.begin, self.begin_lsn, self.last_commit_lsn))
        return plain

    def take_plain_run(self, block: MessageBlock, at: int, ops: frozenset[str], most: int) -> int:
        """Take, as ``take_plain`` would, the row changes from message ``at`` of ``block`` on, up to the next message
        of another kind (or one ``take_plain`` would not take), at most ``most``: NumPy looks at them together.
        Returns the index of the first message not taken: ``at`` when a run would be too short to gain (under
        ``MIN_RUN``), which ``take_plain`` then takes a message at a time."""
        import numpy as np

        end = block.run_end(at)
        if end - at < MIN_RUN:
            return at
        if not self.in_range:
            return end  # changes of a transaction outside the range: not even decoded
        if self.begin is None:
            return at
        end = min(end, at + most)
        starts, ends = block.starts[at:end], block.ends[at:end]
        view = block.view
        kinds = view[starts]
        plain = (ends - starts >= 8) & _plain_shape(kinds, view[starts + 5])
        relation_ids = ((view[starts + 1].astype(np.int64) << 24) | (view[starts + 2].astype(np.int64) << 16)
                        | (view[starts + 3].astype(np.int64) << 8) | view[starts + 4])
        handled = np.zeros(end - at, dtype=bool)  # plain changes of a known relation
        taken = np.zeros(end - at, dtype=bool)  # of them, those left out (take_plain counts them as filtered)
        for relation_id in np.unique(relation_ids[plain]).tolist():
            known = self.relations.get(relation_id)
            if known is None:
                continue  # not known yet: take_plain leaves it to feed
            of_relation = plain & (relation_ids == relation_id)
            handled |= of_relation
            if known[1] is None:
                taken |= of_relation  # a table that is not captured
                continue
            for kind, op in OP_OF_KIND.items():
                if op not in ops:
                    taken |= of_relation & (kinds == kind)  # an operation skipped
        recorded = handled & ~taken
        if handled.all():
            stop = end - at
        else:
            stop = int(np.argmin(handled))  # the first message the run cannot take: feed's
            if stop < MIN_RUN:
                return at
        self.filtered += int(taken[:stop].sum())
        keep = np.flatnonzero(recorded[:stop])
        if len(keep):
            plain_changes = self._plain_for_begin()
            plain_changes.add_run(block.buffer, starts[keep], ends[keep], block.lsns[at:end][keep],
                                  relation_ids[keep], kinds[keep], len(plain_changes.begins) - 1)
        return at + stop

    def plain_pending(self) -> int:
        """How many plain changes were taken since the last ``plain_changes``."""
        return self._plain.count if self._plain is not None else 0

    def plain_changes(self) -> PlainChanges | None:
        """The plain changes taken since the last call (None: none), in position order."""
        plain, self._plain = self._plain, None
        return plain

    def events_of(self, plain: PlainChanges) -> Iterator[ChangeEvent]:
        """Plain changes as the events ``feed`` would have made of them (the block's relations must still be the
        decoder's)."""
        for data, lsn, transaction in plain.messages():
            begin, begin_lsn, last_commit = plain.begins[transaction]
            yield from self._changes(lsn, pgoutput.decode_message(data), begin, last_commit, begin_lsn)

    def _changes(self, lsn: int, message: pgoutput.Message, begin: pgoutput.Begin, last_commit_lsn: int | None,
                 begin_lsn: int) -> Iterator[ChangeEvent]:
        commit_end = self._commit_end(begin)
        if isinstance(message, pgoutput.LogicalMessage):
            if message.prefix == HEARTBEAT_MESSAGE_PREFIX and message.content == self.heartbeat_tag:
                yield ChangeEvent("", "", "hb", None, None, Position(commit_end, lsn), begin.commit_time_us // 1000,
                                  begin.xid, sequence=(last_commit_lsn, lsn))
            return
        if not isinstance(message, (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)):
            return
        relation, table, names, emitted = self.relations.get(message.relation_id, (None, None, [], frozenset()))
        if relation is None or table is None:
            self.filtered += 1
            return

        def row(values: pgoutput.TupleValues | None) -> Row | None:
            if values is None:
                return None
            found = dict(zip(names, values, strict=True))
            if pgoutput.NotUtf8 in set(map(type, values)):  # rare: checked only when present
                for name, value in found.items():
                    if isinstance(value, pgoutput.NotUtf8):
                        if name in emitted:
                            raise DecodingError(f"{value.problem(f'{relation.namespace}.{relation.name}', name)} "
                                                f"(change at LSN {format_lsn(lsn)})")
                        found[name] = None  # left out of the event anyway
            return found

        ts_ms, sequence = begin.commit_time_us // 1000, (last_commit_lsn, lsn)

        def event(op: str, before: Row | None, after: Row | None, serial: int = 0) -> ChangeEvent:
            assert table is not None
            return ChangeEvent(table.schema, table.name, op, before, after, Position(commit_end, lsn, serial),
                               ts_ms, begin.xid, sequence=sequence,
                               extra={"begin_lsn": begin_lsn, "source_ts_us": begin.commit_time_us})

        if isinstance(message, pgoutput.Insert):
            yield event("c", None, row(message.new))
        elif isinstance(message, pgoutput.Update):
            after = row(message.new)
            assert after is not None
            before = row(message.old if message.old is not None else message.old_key)
            if message.old is not None and before is not None and UNAVAILABLE in after.values():
                # REPLICA IDENTITY FULL: the old tuple holds what an unchanged TOASTed value is, as Debezium uses it.
                after = {name: before.get(name, value) if value is UNAVAILABLE else value
                         for name, value in after.items()}
            if before is not None and any(before.get(k) != after.get(k) for k in table.key_columns):
                # A primary-key change: delete of the old key (then its tombstone), create of the new key.
                yield event("d", before, None, 0)
                yield event("c", None, after, 2)
            else:
                yield event("u", before if message.old is not None else None, after)
        else:
            yield event("d", row(message.old if message.old is not None else message.old_key), None)

    def _commit_end(self, begin: pgoutput.Begin) -> int:
        # The commit record's end is not known until the Commit message; ordering needs only a value that
        # sorts transactions by commit, and the commit record's start (final_lsn) does.
        return begin.final_lsn


_PEEK_SQL = ("SELECT (lsn - '0/0'::pg_lsn)::int8, data FROM pg_logical_slot_peek_binary_changes(%(slot)s, "
             "%(end)s::pg_lsn, NULL, VARIADIC %(opts)s)")
# The same, without the row changes (and logical messages and truncates) of transactions that commit before ``start``:
# a transaction's commit position is in its Begin message (final_lsn, bytes 2 to 9), and its other messages carry its
# xid. Their Begin, Commit, Relation and Type messages still come, as ChangeDecoder needs them. ``m`` is used twice, so
# the server computes it once (without MATERIALIZED, which PostgreSQL 10 and 11 do not know).
_PEEK_FROM_SQL = """
WITH m AS (
    SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(%(slot)s, %(end)s::pg_lsn, NULL, VARIADIC %(opts)s)
), before_start AS (
    SELECT xid::text::int8 AS xid FROM m
    WHERE get_byte(data, 0) = 66 AND ('x' || encode(substring(data FROM 2 FOR 8), 'hex'))::bit(64)::int8 < %(start)s
)
SELECT (lsn - '0/0'::pg_lsn)::int8, data FROM m
WHERE NOT (get_byte(data, 0) = ANY(%(skipped)s) AND xid::text::int8 IN (SELECT xid FROM before_start))
"""
_SKIPPED_BEFORE_START = [ord(kind) for kind in "IUDTM"]


# A peek's rows come as COPY's binary format: no hex text of each message to make on the server and read back, and
# no Python tuple per row from the driver. They are spooled (``connection.SPOOL_MEMORY`` bytes in memory, the rest in
# a temporary file), so a task's memory does not grow with its range.
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_COPY_TRAILER = b"\xff\xff"
_COPY_ROW = struct.Struct(">hiqi")  # fields (2), the LSN's length (8), the LSN, the message's length
_READ_SIZE = 1024 * 1024


def peek_blocks(conn: Connection, options: Mapping[str, str], end: int, wait_seconds: float = 60.0,
                start: int | None = None) -> Iterator[MessageBlock]:
    """The (lsn, message) rows of the slot up to ``end``, in the order the server decodes them, in blocks
    (``MessageBlock``) of about ``_READ_SIZE`` bytes.

    The server decodes the whole range into a result set and holds the slot only while it does; the partitions of
    one batch take turns for it (each waits, up to ``wait_seconds``, while another holds it). The rows come by
    ``COPY ... TO STDOUT (FORMAT binary)`` into a spool (``SPOOL_MEMORY``), and are read from it as they are
    taken.

    A peek starts at the slot's position. With ``start`` (a partition after a batch's first), the server leaves out
    the row changes of the transactions that commit before it, which ``ChangeDecoder`` would skip: the earlier
    partitions' changes are decoded by the server again, but neither sent nor looked at.

    Such a later partition peeks a temporary copy of the slot (``slot_copy``) where the server can make one, so
    the partitions of a batch decode at the same time instead of in turn."""
    slot = options.get("slot.name", "debezium")
    copy = slot_copy(conn, options, slot) if start is not None else None
    params = {"slot": copy or slot, "end": format_lsn(end),
              "opts": peek_options(options, ServerVersion.of(conn)), "start": start,
              "skipped": _SKIPPED_BEFORE_START}
    with conn.cursor() as cur:  # psycopg2 binds the values; COPY takes no parameters of its own
        query = cur.mogrify(_PEEK_SQL if start is None else _PEEK_FROM_SQL, params)
    statement = b"COPY (" + query + b") TO STDOUT (FORMAT binary)"
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY, prefix="cdckit-peek-") as spool:
        def fetch() -> None:
            spool.seek(0)
            spool.truncate()
            with conn.cursor() as cur:
                copy_out(cur, statement, spool)

        if copy is None:
            taking_turns(conn, fetch, wait_seconds)
        else:
            try:
                fetch()
            except BaseException:
                with contextlib.suppress(psycopg2.Error):  # the peek's own error is the one to tell
                    conn.rollback()
                    drop_slot(conn, copy)
                raise
            conn.rollback()
            drop_slot(conn, copy)
        spool.seek(0)
        yield from copy_blocks(spool)
    conn.commit()


@functools.cache
def _copies_refused(why: str) -> None:
    log.info("the partitions of a stream batch take turns to peek the slot, as it cannot be copied: %s", why)


def slot_copy(conn: Connection, options: Mapping[str, str], slot: str) -> str | None:
    """The name of a temporary copy of ``slot`` made for one peek (``drop_slot`` it after), or None when the
    server cannot make one: PostgreSQL before 12, YugabyteDB, no free replication slot (``max_replication_slots``),
    no right to. Why not is logged once, at INFO; the peek then takes its turn on the slot itself."""
    if not can_copy_slots(options):
        return None
    refused = slot_copy_refused(conn)
    if refused:
        _copies_refused(refused)
        return None
    try:
        return copy_slot(conn, slot, "cdckit_peek")
    except psycopg2.Error as exc:
        conn.rollback()
        _copies_refused(first_line(exc))
        return None


def peek_rows(conn: Connection, options: Mapping[str, str], end: int, wait_seconds: float = 60.0,
              start: int | None = None) -> Iterator[tuple[int, bytes]]:
    """``peek_blocks``' rows one at a time, as (lsn, message)."""
    for block in peek_blocks(conn, options, end, wait_seconds, start):
        yield from block.rows()


class MessageBlock:
    """Rows of a peek's COPY output read together (about ``_READ_SIZE`` bytes): the message of row ``i`` is
    ``buffer[starts[i]:ends[i]]``, its position ``lsns[i]`` (NumPy arrays, and lists of the same for a row at a
    time)."""

    def __init__(self, buffer: bytes, lsns: list[int], starts: list[int], ends: list[int]) -> None:
        import numpy as np

        self.buffer = buffer
        self.lsn_list, self.start_list, self.end_list = lsns, starts, ends
        self.lsns = np.array(lsns, dtype=np.int64)
        self.starts = np.array(starts, dtype=np.int64)
        self.ends = np.array(ends, dtype=np.int64)
        # the bytes, with 8 more after the last (a short message's fields can be looked at without a bound check)
        self.view = np.frombuffer(buffer + bytes(8), dtype=np.uint8)
        kinds = np.where(self.ends > self.starts, self.view[self.starts], 0)
        self._breaks = np.flatnonzero(~np.isin(kinds, list(OP_OF_KIND)))  # not a row change

    def __len__(self) -> int:
        return len(self.start_list)

    def message(self, index: int) -> bytes:
        return self.buffer[self.start_list[index]:self.end_list[index]]

    def rows(self) -> Iterator[tuple[int, bytes]]:
        """The block's rows one at a time, as (lsn, message)."""
        for index, lsn in enumerate(self.lsn_list):
            yield lsn, self.message(index)

    def run_end(self, at: int) -> int:
        """The index of the first message from ``at`` on that is not a row change (insert, update, delete)."""
        following = int(self._breaks.searchsorted(at))
        return int(self._breaks[following]) if following < len(self._breaks) else len(self)


def copy_rows(source: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """The (int8, bytea) rows of a ``COPY ... TO STDOUT (FORMAT binary)`` output, read in steps of ``_READ_SIZE``."""
    for block in copy_blocks(source):
        yield from block.rows()


def copy_blocks(source: IO[bytes]) -> Iterator[MessageBlock]:
    """The (int8, bytea) rows of a ``COPY ... TO STDOUT (FORMAT binary)`` output, a block (``MessageBlock``) for each
    read of ``_READ_SIZE`` bytes (or of one row, when it is longer)."""
    header = source.read(len(_COPY_SIGNATURE) + 8)
    if header[:len(_COPY_SIGNATURE)] != _COPY_SIGNATURE:
        raise DecodingError("the server's COPY output does not start as PostgreSQL's binary format does")
    source.read(int.from_bytes(header[-4:], "big"))  # the header's extension area, if any
    unpack, size = _COPY_ROW.unpack_from, _COPY_ROW.size
    buffer, missing = b"", size  # what was read of rows not yet handed on, and at least how much more they need
    while True:
        more = source.read(max(_READ_SIZE, missing))
        if not more:
            if buffer == _COPY_TRAILER:
                return
            raise DecodingError("the server's COPY output ends without its trailer" if len(buffer) < 2 else
                                "the server's COPY output ends inside a row")
        buffer += more
        at, total = 0, len(buffer)
        lsns: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        while total - at >= size:
            fields, lsn_length, lsn, length = unpack(buffer, at)
            if fields != 2 or lsn_length != 8 or length < 0:
                raise DecodingError(f"unexpected row in the server's COPY output ({fields} fields)")
            if total < at + size + length:
                break  # the message goes on past what was read
            lsns.append(lsn)
            starts.append(at + size)
            at += size + length
            ends.append(at)
        if starts:
            yield MessageBlock(buffer, lsns, starts, ends)
        buffer = buffer[at:]
        missing = (size + int.from_bytes(buffer[14:18], "big") if len(buffer) >= size else size) - len(buffer)


_TURN_POLL = 0.02


def taking_turns(conn: Connection, peek: Callable[[], T], wait_seconds: float = 60.0) -> T:
    """Run a ``peek`` of the slot, waiting (up to ``wait_seconds``) while another partition of the batch holds the
    slot: a slot decodes for one session at a time, and the partitions of one batch take turns for it.

    The server cannot be asked to wait for a slot, so the peek is tried again, every ``_TURN_POLL`` seconds at most:
    the other partition's decoding takes a tenth of a second or so, and each second try of a longer step would idle
    the batch's last partition for a part of it. A try that finds the slot taken costs the server next to nothing."""
    deadline = time.monotonic() + wait_seconds
    delay = _TURN_POLL / 4
    while True:
        try:
            return peek()
        except psycopg2.errors.ObjectInUse:  # another partition of the batch is decoding: its turn first
            conn.rollback()
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, _TURN_POLL)


def as_bytes(data: object) -> bytes:
    if isinstance(data, (bytes, memoryview)):
        return bytes(data)
    text = str(data)
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    raise ValueError("unexpected bytea representation from the server")
