"""Decoding a peek's pgoutput messages into change events (``ChangeDecoder``), plain changes a run at a time
(``PlainChanges``) for the columnar formatting.

A position is the end LSN of a transaction's commit record. A batch ``(start, end]`` holds every
transaction whose commit record starts at or after ``start`` and before ``end``; ``end`` is always the
end of a commit record cdckit has seen, so no transaction is ever split or skipped (PostgreSQL itself
skips, on decoding, transactions whose commit record starts before the slot's confirmed position).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from cdckit.dialect.postgres import pgoutput
from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.dialect.postgres.heartbeat import HEARTBEAT_MESSAGE_PREFIX
from cdckit.dialect.postgres.lsn import format_lsn
from cdckit.dialect.postgres.peek import OP_OF_KIND, MessageBlock
from cdckit.errors import DecodingError
from cdckit.events import UNAVAILABLE, ChangeEvent, Position, Row

log = logging.getLogger("cdckit")


# Outside the range only transaction starts and the structures (relations, types) matter.
_NEEDED_OUT_OF_RANGE = (b"B", b"R", b"Y")
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
            if len(values) != len(names):
                raise DecodingError(f"a change of {relation.namespace}.{relation.name} carries {len(values)} columns "
                                    f"where its relation message announced {len(names)} (change at LSN "
                                    f"{format_lsn(lsn)}); the replication stream is corrupt")
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
