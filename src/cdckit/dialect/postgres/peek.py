"""Reading committed changes from the replication slot by LSN range: the slot is *peeked*
(``pg_logical_slot_peek_binary_changes``), never consumed, so a batch can be read again after a failure; the slot
moves only when cdckit confirms a position (``replication.advance_slot``) after Spark has committed the batch that
ends there. The peek's rows come through ``COPY ... TO STDOUT (FORMAT binary)``, a block at a time; a batch's later
partitions peek a temporary copy of the slot, or take turns where none can be made."""

from __future__ import annotations

import contextlib
import functools
import logging
import struct
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import IO, TypeVar

import psycopg2.errors
from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres.connection import SPOOL_MEMORY, copy_out
from cdckit.dialect.postgres.lsn import format_lsn
from cdckit.dialect.postgres.pending import peek_options
from cdckit.dialect.postgres.replication import can_copy_slots, copy_slot, drop_slot, slot_copy_refused
from cdckit.dialect.postgres.server_version import ServerVersion
from cdckit.errors import DecodingError, first_line

log = logging.getLogger("cdckit")
T = TypeVar("T")
OP_OF_KIND = {ord("I"): "c", ord("U"): "u", ord("D"): "d"}  # a row change's message kind: its op
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
