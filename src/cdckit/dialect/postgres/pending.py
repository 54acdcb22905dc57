"""Planning batches: the counting peek that finds the largest run of whole transactions after a position
holding at most ``max.batch.size`` changes (``pending_changes``), and the batches planned ahead from the same peek."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres.lsn import format_lsn
from cdckit.dialect.postgres.server_version import ServerVersion

_CHANGE_KINDS = (ord("I"), ord("U"), ord("D"))


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
