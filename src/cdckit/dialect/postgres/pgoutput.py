"""A decoder for PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

The format is documented in PostgreSQL's "Logical Replication Message Formats". Each message is one
``bytes`` value as ``pg_logical_slot_peek_binary_changes`` or the streaming protocol returns it.

Example::

    message = decode_message(b"B" + ...)
    if isinstance(message, Begin): ...
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdckit.errors import DecodingError
from cdckit.events import UNAVAILABLE  # an unchanged TOASTed value pgoutput did not send

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

# Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
PG_EPOCH_OFFSET_US = 946_684_800_000_000



@dataclass(frozen=True)
class Begin:
    final_lsn: int  # LSN of the commit record
    commit_time_us: int  # microseconds since the Unix epoch
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # LSN just after the commit record: the transaction's position in offsets
    commit_time_us: int


@dataclass(frozen=True)
class RelationColumn:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    relation_id: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[RelationColumn, ...]


# A tuple is a list of column values: None (SQL NULL), UNAVAILABLE, or the value's text form.
TupleValues = list[object]


@dataclass(frozen=True)
class Insert:
    relation_id: int
    new: TupleValues


@dataclass(frozen=True)
class Update:
    relation_id: int
    old: TupleValues | None  # the whole old row (REPLICA IDENTITY FULL)
    old_key: TupleValues | None  # only key columns, others None (the key changed, or REPLICA IDENTITY INDEX)
    new: TupleValues


@dataclass(frozen=True)
class Delete:
    relation_id: int
    old: TupleValues | None
    old_key: TupleValues | None


@dataclass(frozen=True)
class Truncate:
    relation_ids: tuple[int, ...]
    options: int


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass(frozen=True)
class Other:
    kind: str  # Origin, Type: nothing cdckit emits


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | LogicalMessage | Other

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 1  # after the message type byte

    def byte(self) -> str:
        value = chr(self.data[self.pos])
        self.pos += 1
        return value

    def int8(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def int16(self) -> int:
        (value,) = _INT16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(value)

    def int32(self) -> int:
        (value,) = _INT32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def uint32(self) -> int:
        (value,) = _UINT32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def int64(self) -> int:
        (value,) = _INT64.unpack_from(self.data, self.pos)
        self.pos += 8
        return int(value)

    def take(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.data):
            raise DecodingError(f"the value at byte {self.pos - 4} announces {length} bytes but the message ends "
                                f"after {len(self.data) - self.pos}")
        raw = self.data[self.pos:self.pos + length]
        self.pos += length
        return raw

    def string(self) -> str:
        end = self.data.index(b"\x00", self.pos)
        value = self.data[self.pos:end].decode("utf-8")
        self.pos = end + 1
        return value

    def count(self, what: str) -> int:
        """An Int16 number of ``what``, which is never negative."""
        count = self.int16()
        if count < 0:
            raise DecodingError(f"the count at byte {self.pos - 2} announces {count} {what}")
        return count

    def tuple_data(self) -> TupleValues:
        # The hot loop of the stream (every column of every change): unrolled, on locals.
        data = self.data
        size = len(data)
        (count,) = _INT16.unpack_from(data, self.pos)
        if count < 0:
            raise DecodingError(f"the count at byte {self.pos} announces {count} columns")
        pos = self.pos + 2
        values: TupleValues = []
        append = values.append
        unpack_length = _INT32.unpack_from
        index = 0
        try:
            for index in range(count):
                kind = data[pos]
                pos += 1
                if kind == 116 or kind == 98:  # 't' text, 'b' binary
                    (length,) = unpack_length(data, pos)
                    pos += 4
                    end = pos + length
                    if length < 0 or end > size:
                        raise DecodingError(f"column {index} at byte {pos - 5} announces {length} bytes but the "
                                            f"message ends after {size - pos}")
                    if kind == 98:
                        append(data[pos:end])
                    else:
                        try:
                            append(data[pos:end].decode("utf-8"))
                        except UnicodeDecodeError as exc:
                            append(NotUtf8(index, exc.reason, exc.start))  # an error only if the column is emitted
                    pos = end
                elif kind == 110:  # 'n' null
                    append(None)
                elif kind == 117:  # 'u' unchanged TOASTed value
                    append(UNAVAILABLE)
                else:
                    raise DecodingError(f"pgoutput tuple column kind {chr(kind)!r} of column {index} at byte "
                                        f"{pos - 1} is unknown")
        except (IndexError, struct.error):
            raise DecodingError(f"the message ends at byte {pos}, inside column {index} of the {count} its tuple "
                                f"announces") from None
        self.pos = pos
        return values


@dataclass(frozen=True)
class NotUtf8:
    """A text value that is not UTF-8 (a SQL_ASCII database, or data stored unchecked), kept undecoded."""

    column_index: int
    reason: str
    at_byte: int

    def problem(self, table: str, column: str) -> str:
        return (f"table {table}, column {column!r} holds bytes that are not UTF-8 ({self.reason} at byte "
                f"{self.at_byte}); cdckit writes UTF-8 JSON and does not guess an encoding: convert the column's "
                f"data to UTF-8, or leave the column out (column.exclude.list)")


def decode_message(data: bytes | memoryview) -> Message:
    """Decode one pgoutput message; raises ``DecodingError`` naming the message type, and the byte where it goes
    wrong, on malformed input."""
    raw = bytes(data)
    if not raw:
        raise DecodingError("empty pgoutput message")
    kind = chr(raw[0])
    reader = _Reader(raw)
    try:
        decoder = _DECODERS.get(kind)
        return decoder(reader) if decoder is not None else Other(kind)
    except DecodingError as exc:
        raise DecodingError(f"pgoutput message {kind!r} is malformed: {exc}") from None
    except (struct.error, IndexError):  # a field read past the message's end
        what = f"it ends (after {len(raw)} bytes) inside the field at byte {reader.pos}"
    except UnicodeDecodeError as exc:
        what = f"the string at byte {reader.pos} is not UTF-8 ({exc.reason} at its byte {exc.start})"
    except ValueError:  # bytes.index: a string without its NUL
        what = f"the string at byte {reader.pos} has no terminating NUL"
    raise DecodingError(f"pgoutput message {kind!r} is malformed: {what}; the replication stream is not protocol "
                        f"version 1 pgoutput")


def _begin(reader: _Reader) -> Begin:
    final_lsn = reader.int64()
    commit_time = reader.int64() + PG_EPOCH_OFFSET_US
    return Begin(final_lsn, commit_time, reader.uint32())


def _commit(reader: _Reader) -> Commit:
    reader.int8()  # flags, unused
    commit_lsn = reader.int64()
    end_lsn = reader.int64()
    return Commit(commit_lsn, end_lsn, reader.int64() + PG_EPOCH_OFFSET_US)


def _relation(reader: _Reader) -> Relation:
    relation_id = reader.uint32()
    namespace = reader.string()
    name = reader.string()
    replica_identity = reader.byte()
    columns = []
    for _ in range(reader.count("columns")):
        flags = reader.int8()
        column_name = reader.string()
        type_oid = reader.uint32()
        columns.append(RelationColumn(column_name, type_oid, reader.int32(), bool(flags & 1)))
    return Relation(relation_id, namespace or "pg_catalog", name, replica_identity, tuple(columns))


def _insert(reader: _Reader) -> Insert:
    relation_id = reader.uint32()
    marker = reader.byte()
    if marker != "N":
        raise DecodingError(f"pgoutput insert carries tuple marker {marker!r} at byte {reader.pos - 1}, expected 'N'")
    return Insert(relation_id, reader.tuple_data())


def _update(reader: _Reader) -> Update:
    relation_id = reader.uint32()
    old = old_key = None
    marker = reader.byte()
    if marker == "O":
        old = reader.tuple_data()
        marker = reader.byte()
    elif marker == "K":
        old_key = reader.tuple_data()
        marker = reader.byte()
    if marker != "N":
        raise DecodingError(f"pgoutput update carries tuple marker {marker!r} at byte {reader.pos - 1}, expected 'N'")
    return Update(relation_id, old, old_key, reader.tuple_data())


def _delete(reader: _Reader) -> Delete:
    relation_id = reader.uint32()
    marker = reader.byte()
    if marker == "O":
        return Delete(relation_id, reader.tuple_data(), None)
    if marker == "K":
        return Delete(relation_id, None, reader.tuple_data())
    raise DecodingError(f"pgoutput delete carries tuple marker {marker!r} at byte {reader.pos - 1}, expected 'K' "
                        f"or 'O'")


def _truncate(reader: _Reader) -> Truncate:
    count = reader.int32()
    if count < 0:
        raise DecodingError(f"the count at byte 1 announces {count} relations")
    options = reader.int8()
    return Truncate(tuple(reader.uint32() for _ in range(count)), options)


def _logical_message(reader: _Reader) -> LogicalMessage:
    flags = reader.int8()
    lsn = reader.int64()
    prefix = reader.string()
    length = reader.int32()
    return LogicalMessage(bool(flags & 1), lsn, prefix, reader.take(length))


_DECODERS: dict[str, Callable[[_Reader], Message]] = {
    "M": _logical_message,
    "B": _begin,
    "C": _commit,
    "R": _relation,
    "I": _insert,
    "U": _update,
    "D": _delete,
    "T": _truncate,
}


# -- tuples a column at a time ------------------------------------------------------------------------------------

TEXT, NULL, UNCHANGED = 116, 110, 117  # a tuple column's kind: 't', 'n', 'u' (an unchanged TOASTed value)


@dataclass(frozen=True)
class TupleColumn:
    """One column of a block of tuples: each row's kind (``TEXT``, ``NULL`` or ``UNCHANGED``) and its text's
    UTF-8 bytes (a binary array, null where the kind is not ``TEXT``; not yet checked to be UTF-8)."""

    kinds: np.ndarray
    values: pa.Array


def tuple_columns(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, count: int) -> list[TupleColumn] | None:
    """Decode a block of tuples (TupleData) a column at a time, with NumPy, instead of a value at a time.

    ``buffer`` holds the messages one after the other (uint8, with at least 8 bytes after the last); the tuple of
    row ``i`` starts at ``starts[i]`` and is the last part of its message, which ends at ``ends[i]``. Returns
    ``count`` columns, or None when a tuple has another number of columns or a value in binary form, or does not
    end where its message does (``tuple_data`` decodes those one by one); raises ``DecodingError`` for a value
    that runs past its message.
    """
    import numpy as np
    import pyarrow as pa

    rows = len(starts)
    if rows == 0:
        return [TupleColumn(np.zeros(0, dtype=np.uint8), pa.array([], type=pa.binary())) for _ in range(count)]
    if ((buffer[starts].astype(np.int64) << 8) | buffer[starts + 1] != count).any():
        return None
    position = starts.astype(np.int64) + 2
    columns = []
    for _ in range(count):
        if (position >= ends).any():
            return None
        kinds = buffer[position]
        text = kinds == TEXT
        if not (text | (kinds == NULL) | (kinds == UNCHANGED)).all():
            return None
        lengths = np.zeros(rows, dtype=np.int64)
        at = position[text]
        lengths[text] = ((buffer[at + 1].astype(np.int64) << 24) | (buffer[at + 2].astype(np.int64) << 16)
                         | (buffer[at + 3].astype(np.int64) << 8) | buffer[at + 4])
        step = np.where(text, 5 + lengths, 1)
        if (position + step > ends).any():
            row = int(np.argmax(position + step > ends))
            raise DecodingError(f"pgoutput tuple value announces {int(lengths[row])} bytes but the message ends "
                                f"after {int(ends[row] - position[row] - 5)}")
        offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 1 << 31:
            return None  # over a binary array's 2 GiB: value by value
        data = buffer[np.repeat(position + 5 - offsets[:-1], lengths) + np.arange(offsets[-1])]
        validity = np.packbits(text, bitorder="little")
        values = pa.Array.from_buffers(pa.binary(), rows, [pa.py_buffer(validity), pa.py_buffer(
            offsets.astype(np.int32)), pa.py_buffer(data)], null_count=rows - int(text.sum()))
        columns.append(TupleColumn(kinds, values))
        position = position + step
    if (position != ends).any():
        return None
    return columns
