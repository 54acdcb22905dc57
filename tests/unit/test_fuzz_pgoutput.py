"""Fuzzing the pgoutput decoder (``cdckit.dialect.postgres.pgoutput``) and the change decoder that feeds on it.

Valid messages are built by a small encoder written from PostgreSQL's "Logical Replication Message Formats"
(protocol version 1: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html) and must
decode to what was encoded. Every truncation of a valid message, every single-byte mutation of one, and random
bytes must either decode or raise ``DecodingError`` with one line naming the message kind: never another exception,
never a hang, never an allocation the size a length field announces.
"""

from __future__ import annotations

import struct
import tracemalloc
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.dialect.postgres.decoder import ChangeDecoder
from cdckit.dialect.postgres.pgoutput import (
    PG_EPOCH_OFFSET_US,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    NotUtf8,
    Other,
    Relation,
    RelationColumn,
    Truncate,
    Update,
    decode_message,
    tuple_columns,
)
from cdckit.errors import DecodingError
from cdckit.events import UNAVAILABLE
from cdckit.formats.debezium.postgres_types import ColumnType

# Fast enough for CI and the same examples on every run; a decode is microseconds, so the deadline only catches a
# hang or a quadratic path (pytest-timeout's marker bounds each test as a whole).
FUZZ = settings(max_examples=300, derandomize=True, database=None, deadline=timedelta(seconds=2),
                suppress_health_check=[HealthCheck.too_slow])
pytestmark = pytest.mark.timeout(120)

KINDS_DECODED = "BCRIUDTM"  # what decode_message reads field by field; 'Y' and 'O' are skipped as Other


# -- the encoder: PostgreSQL's message formats, protocol version 1 -------------------------------------------------


def int8(value: int) -> bytes:
    return struct.pack(">B", value)


def int16(value: int) -> bytes:
    return struct.pack(">h", value)


def int32(value: int) -> bytes:
    return struct.pack(">i", value)


def uint32(value: int) -> bytes:
    return struct.pack(">I", value)


def int64(value: int) -> bytes:
    return struct.pack(">q", value)


def string(text: str) -> bytes:
    """String: UTF-8, NUL-terminated."""
    return text.encode("utf-8") + b"\x00"


@dataclass(frozen=True)
class Text:
    """A 't' column whose bytes need not be UTF-8 (pgoutput sends what the database holds)."""

    raw: bytes


def tuple_data(values: list[object]) -> bytes:
    """TupleData: Int16 number of columns, then per column 'n' (NULL), 'u' (unchanged TOASTed value), or 't'/'b'
    with Int32 length and the value's bytes."""
    out = int16(len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is UNAVAILABLE:
            out += b"u"
        elif isinstance(value, Text):
            out += b"t" + int32(len(value.raw)) + value.raw
        else:
            assert isinstance(value, bytes)
            out += b"b" + int32(len(value)) + value
    return out


def decoded_tuple(values: list[object]) -> list[object]:
    """What the decoder makes of a tuple: text decoded (or kept as ``NotUtf8``), binary as bytes."""
    out: list[object] = []
    for index, value in enumerate(values):
        if isinstance(value, Text):
            try:
                out.append(value.raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                out.append(NotUtf8(index, exc.reason, exc.start))
        else:
            out.append(value)
    return out


# -- strategies of (encoded message, expected decoding) ------------------------------------------------------------

LSNS = st.integers(0, 2**63 - 1)
TIMES = st.integers(-(2**62), 2**62)  # microseconds since 2000-01-01
OIDS = st.integers(0, 2**32 - 1)
NAMES = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20)
COLUMN_VALUES = st.one_of(
    st.none(),
    st.just(UNAVAILABLE),
    st.text(max_size=30).map(lambda text: Text(text.encode("utf-8", "surrogatepass"))),
    st.binary(max_size=12).map(Text),  # mostly not UTF-8: kept undecoded
    st.binary(max_size=12),  # 'b': binary format
)
TUPLES = st.lists(COLUMN_VALUES, max_size=6)

Encoded = tuple[bytes, Message]


def _begin() -> st.SearchStrategy[Encoded]:
    return st.builds(lambda lsn, time, xid: (b"B" + int64(lsn) + int64(time) + uint32(xid),
                                             Begin(lsn, time + PG_EPOCH_OFFSET_US, xid)), LSNS, TIMES, OIDS)


def _commit() -> st.SearchStrategy[Encoded]:
    return st.builds(lambda lsn, end, time: (b"C" + int8(0) + int64(lsn) + int64(end) + int64(time),
                                             Commit(lsn, end, time + PG_EPOCH_OFFSET_US)), LSNS, LSNS, TIMES)


def _relation() -> st.SearchStrategy[Encoded]:
    columns = st.lists(st.tuples(st.sampled_from([0, 1]), NAMES, OIDS, st.integers(-(2**31), 2**31 - 1)),
                       max_size=6)

    def build(relation_id: int, namespace: str, name: str, identity: str,
              cols: list[tuple[int, str, int, int]]) -> Encoded:
        data = b"R" + uint32(relation_id) + string(namespace) + string(name) + identity.encode() + int16(len(cols))
        for flags, column, oid, modifier in cols:
            data += int8(flags) + string(column) + uint32(oid) + int32(modifier)
        expected = Relation(relation_id, namespace or "pg_catalog", name, identity,
                            tuple(RelationColumn(column, oid, modifier, bool(flags)) for flags, column, oid, modifier
                                  in cols))
        return data, expected

    return st.builds(build, OIDS, NAMES, NAMES, st.sampled_from("dnfi"), columns)


def _insert() -> st.SearchStrategy[Encoded]:
    return st.builds(lambda relation_id, new: (b"I" + uint32(relation_id) + b"N" + tuple_data(new),
                                               Insert(relation_id, decoded_tuple(new))), OIDS, TUPLES)


def _update() -> st.SearchStrategy[Encoded]:
    def build(relation_id: int, old_kind: str, old: list[object], new: list[object]) -> Encoded:
        data = b"U" + uint32(relation_id)
        if old_kind:
            data += old_kind.encode() + tuple_data(old)
        data += b"N" + tuple_data(new)
        before = decoded_tuple(old)
        return data, Update(relation_id, before if old_kind == "O" else None, before if old_kind == "K" else None,
                            decoded_tuple(new))

    return st.builds(build, OIDS, st.sampled_from(["", "K", "O"]), TUPLES, TUPLES)


def _delete() -> st.SearchStrategy[Encoded]:
    def build(relation_id: int, old_kind: str, old: list[object]) -> Encoded:
        before = decoded_tuple(old)
        return (b"D" + uint32(relation_id) + old_kind.encode() + tuple_data(old),
                Delete(relation_id, before if old_kind == "O" else None, before if old_kind == "K" else None))

    return st.builds(build, OIDS, st.sampled_from(["K", "O"]), TUPLES)


def _truncate() -> st.SearchStrategy[Encoded]:
    return st.builds(lambda options, ids: (b"T" + int32(len(ids)) + int8(options) + b"".join(map(uint32, ids)),
                                           Truncate(tuple(ids), options)),
                     st.integers(0, 3), st.lists(OIDS, max_size=6))


def _type() -> st.SearchStrategy[Encoded]:
    return st.builds(lambda oid, namespace, name: (b"Y" + uint32(oid) + string(namespace) + string(name), Other("Y")),
                     OIDS, NAMES, NAMES)


def _origin() -> st.SearchStrategy[Encoded]:
    return st.builds(lambda lsn, name: (b"O" + int64(lsn) + string(name), Other("O")), LSNS, NAMES)


def _logical_message() -> st.SearchStrategy[Encoded]:
    return st.builds(lambda flags, lsn, prefix, content: (
        b"M" + int8(flags) + int64(lsn) + string(prefix) + int32(len(content)) + content,
        LogicalMessage(bool(flags & 1), lsn, prefix, content)), st.sampled_from([0, 1]), LSNS, NAMES,
        st.binary(max_size=40))


MESSAGES = st.one_of(_begin(), _commit(), _relation(), _insert(), _update(), _delete(), _truncate(), _type(),
                     _origin(), _logical_message())


def decodes_or_fails_clearly(data: bytes) -> Message | None:
    """Decode ``data``: a message, or None after a ``DecodingError`` of one line that names the message kind.
    Any other exception fails the test."""
    try:
        return decode_message(data)
    except DecodingError as exc:
        text = str(exc)
        assert "\n" not in text and "\r" not in text, text
        assert text.startswith(f"pgoutput message {chr(data[0])!r} is malformed" if data else "empty"), text
        assert not data or " at byte " in text, text  # where the message goes wrong
        return None


# -- valid messages round-trip -------------------------------------------------------------------------------------


@FUZZ
@given(MESSAGES)
def test_every_message_kind_decodes_to_what_was_encoded(encoded: Encoded) -> None:
    data, expected = encoded
    assert decode_message(data) == expected
    assert decode_message(memoryview(data)) == expected


# -- truncated, mutated and random input ---------------------------------------------------------------------------


@FUZZ
@given(MESSAGES)
def test_every_truncation_of_a_message_is_a_decoding_error_never_a_shorter_message(encoded: Encoded) -> None:
    data = encoded[0]
    for end in range(len(data)):
        decoded = decodes_or_fails_clearly(data[:end])
        if data[0] in KINDS_DECODED.encode():
            assert decoded is None, f"{data[:end]!r} (cut at {end} of {len(data)}) decoded as {decoded}"


@FUZZ
@given(MESSAGES, st.data())
def test_a_message_with_one_byte_changed_decodes_or_fails_clearly(encoded: Encoded, data: st.DataObject) -> None:
    raw = bytearray(encoded[0])
    at = data.draw(st.integers(0, len(raw) - 1), label="at")
    raw[at] = data.draw(st.integers(0, 255), label="byte")
    decodes_or_fails_clearly(bytes(raw))


@FUZZ
@given(st.one_of(st.binary(max_size=64),
                 st.tuples(st.sampled_from(KINDS_DECODED), st.binary(max_size=64)).map(
                     lambda kind_rest: kind_rest[0].encode() + kind_rest[1])))
@example(b"R" + uint32(1) + b"public")  # a string without its NUL
@example(b"R" + uint32(1) + b"p\xffublic\x00")  # a name that is not UTF-8
@example(b"I" + uint32(1) + b"N" + int16(2) + b"n")  # fewer columns than announced
@example(b"T" + int32(2**31 - 1) + int8(0) + uint32(1))  # many more relations than the message holds
def test_random_bytes_decode_or_fail_clearly(data: bytes) -> None:
    decodes_or_fails_clearly(data)


@pytest.mark.parametrize(("data", "says"), [
    (b"B" + int64(1), "at byte 9"),
    (b"R" + uint32(1) + b"public", "the string at byte 5 has no terminating NUL"),
    (b"R" + uint32(1) + b"p\xffublic\x00", "the string at byte 5 is not UTF-8"),
    (b"I" + uint32(1) + b"N" + int16(2) + b"n", "ends at byte 9, inside column 1 of the 2"),
    (b"I" + uint32(1) + b"N" + int16(1) + b"t" + int32(2**31 - 1) + b"ab", "column 0 at byte 8 announces 2147483647"),
    (b"U" + uint32(1) + b"X" + int16(0), "tuple marker 'X' at byte 5"),
    (b"I" + uint32(1) + b"N" + int16(-1), "announces -1 columns"),
    (b"R" + uint32(1) + string("public") + string("t") + b"d" + int16(-2), "announces -2 columns"),
    (b"T" + int32(-1) + int8(0), "announces -1 relations"),
], ids=["field-cut", "no-nul", "not-utf8", "columns-missing", "huge-length", "marker", "negative-tuple",
        "negative-relation", "negative-truncate"])
def test_a_malformed_message_is_one_line_naming_its_kind_and_where(data: bytes, says: str) -> None:
    """Regression: the decoding errors said what Python's struct, bytes.index or the UTF-8 codec had met ("index out
    of range", "subsection not found") without where; negative counts decoded as no columns or relations."""
    with pytest.raises(DecodingError) as failure:
        decode_message(data)
    text = str(failure.value)
    assert text.startswith(f"pgoutput message {chr(data[0])!r} is malformed") and says in text and "\n" not in text


@pytest.mark.parametrize("data", [
    b"I" + uint32(1) + b"N" + int16(1) + b"t" + int32(2**31 - 1) + b"x" * 16,  # a value of 2 GiB announced
    b"I" + uint32(1) + b"N" + int16(1) + b"b" + struct.pack(">I", 2**31) + b"x" * 16,  # -2 GiB: a negative length
    b"M" + int8(1) + int64(5) + string("p") + int32(2**31 - 1) + b"x" * 16,  # a logical message's content
    b"T" + int32(2**31 - 1) + int8(0) + uint32(1) * 4,  # 2^31 relations
    b"R" + uint32(1) + string("s") + string("t") + b"d" + int16(32767) + b"\x00",  # 32767 columns
    b"I" + uint32(1) + b"N" + int16(32767) + b"n" * 16,  # 32767 values
], ids=["text-2gib", "binary-negative", "message-2gib", "truncate-2g", "relation-32767", "tuple-32767"])
@pytest.mark.timeout(20)
def test_a_huge_announced_length_or_count_allocates_nothing_of_its_size(data: bytes) -> None:
    """Lengths are checked against the message before anything is sliced, counts drive loops that stop at its end."""
    tracemalloc.start()
    try:
        assert decodes_or_fails_clearly(data) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"decoding {data[:12]!r}... allocated {peak} bytes"


# -- the change decoder over a stream of messages ------------------------------------------------------------------

RELATION_ID = 16384
TABLE = TableInfo("public", "t", RELATION_ID, (ColumnType("id", "int4", 23), ColumnType("body", "text", 25)),
                  ("id",), "d")


def _relation_message(columns: int = 2) -> bytes:
    names = ["id", "body", "extra"][:columns]
    return (b"R" + uint32(RELATION_ID) + string("public") + string("t") + b"d" + int16(columns)
            + b"".join(int8(1 if name == "id" else 0) + string(name) + uint32(23 if name == "id" else 25) + int32(-1)
                       for name in names))


def _row(key: int, body: str | None) -> bytes:
    return tuple_data([Text(str(key).encode()), None if body is None else Text(body.encode())])


CHANGES = st.one_of(
    st.builds(lambda key, body: b"I" + uint32(RELATION_ID) + b"N" + _row(key, body), st.integers(0, 99),
              st.none() | st.text(max_size=8)),
    st.builds(lambda key, body: b"U" + uint32(RELATION_ID) + b"N" + _row(key, body), st.integers(0, 99),
              st.text(max_size=8)),
    st.builds(lambda key, body: b"U" + uint32(RELATION_ID) + b"O" + _row(key, "old") + b"N" + _row(key + 1, body),
              st.integers(0, 99), st.text(max_size=8)),
    st.builds(lambda key: b"D" + uint32(RELATION_ID) + b"K" + _row(key, None), st.integers(0, 99)),
)


def _stream(changes: list[bytes], relation: bytes) -> list[bytes]:
    return [b"B" + int64(100) + int64(0) + uint32(7), relation, *changes,
            b"C" + int8(0) + int64(100) + int64(120) + int64(0)]


def feeds_or_fails_clearly(messages: list[bytes], plain: bool) -> list[Any]:
    """Feed a stream to a ``ChangeDecoder`` (with ``plain``, taking plain changes aside as the stream partitions
    do, then making their events); its events, or an empty list after a one-line ``DecodingError``."""
    decoder = ChangeDecoder(0, 1000, lambda relation: TABLE)
    events: list[Any] = []
    try:
        for lsn, data in enumerate(messages, start=1):
            if plain and decoder.take_plain(lsn, data, frozenset("cud")):
                continue
            events.extend(decoder.feed(lsn, data))
        taken = decoder.plain_changes()
        if taken is not None:
            events.extend(decoder.events_of(taken))
    except DecodingError as exc:
        assert "\n" not in str(exc), str(exc)
        return []
    return events


@FUZZ
@given(st.lists(CHANGES, min_size=1, max_size=8), st.data(), st.booleans())
def test_a_stream_with_one_byte_changed_decodes_or_fails_clearly(changes: list[bytes], data: st.DataObject,
                                                                 plain: bool) -> None:
    messages = _stream(changes, _relation_message())
    assert feeds_or_fails_clearly(messages, plain)  # unchanged, it decodes
    index = data.draw(st.integers(1, len(messages) - 2), label="message")
    raw = bytearray(messages[index])
    raw[data.draw(st.integers(0, len(raw) - 1), label="at")] = data.draw(st.integers(0, 255), label="byte")
    messages[index] = bytes(raw)
    feeds_or_fails_clearly(messages, plain)


@pytest.mark.parametrize("plain", [False, True], ids=["feed", "plain"])
@pytest.mark.parametrize("columns", [1, 3])
def test_a_change_with_another_number_of_columns_than_its_relation_is_a_decoding_error(plain: bool,
                                                                                       columns: int) -> None:
    """Regression: the change decoder zipped the relation's names with the tuple's values strictly, so a tuple of
    another width (a corrupt message) stopped the job with a bare ValueError from zip()."""
    messages = _stream([b"I" + uint32(RELATION_ID) + b"N" + _row(1, "a")], _relation_message(columns))
    with pytest.raises(DecodingError, match=rf"carries 2 columns where its relation message announced {columns}"):
        _feed_strictly(messages, plain)


def _feed_strictly(messages: list[bytes], plain: bool) -> None:
    decoder = ChangeDecoder(0, 1000, lambda relation: TABLE)
    for lsn, data in enumerate(messages, start=1):
        if plain and decoder.take_plain(lsn, data, frozenset("cud")):
            continue
        list(decoder.feed(lsn, data))
    taken = decoder.plain_changes()
    if taken is not None:
        list(decoder.events_of(taken))


# -- tuples a column at a time -------------------------------------------------------------------------------------


def _block(messages: list[bytes]) -> tuple[Any, Any, Any]:
    """The messages one after the other (8 more bytes after the last, as ``MessageBlock`` has them), where each
    one's tuple starts (after the kind, the relation id and 'N') and where it ends."""
    lengths = np.array([len(message) for message in messages])
    ends = np.cumsum(lengths)
    return np.frombuffer(b"".join(messages) + bytes(8), dtype=np.uint8), ends - lengths + 6, ends


@FUZZ
@given(st.lists(st.builds(lambda key, body: b"U" + uint32(RELATION_ID) + b"N" + _row(key, body), st.integers(0, 99),
                          st.none() | st.text(max_size=8)), min_size=1, max_size=12), st.data())
def test_tuples_a_column_at_a_time_with_one_byte_changed_decode_or_fail_clearly(messages: list[bytes],
                                                                                data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(messages) - 1), label="message")
    raw = bytearray(messages[index])
    raw[data.draw(st.integers(6, len(raw) - 1), label="at")] = data.draw(st.integers(0, 255), label="byte")
    messages[index] = bytes(raw)
    buffer, starts, ends = _block(messages)
    try:
        columns = tuple_columns(buffer, starts, ends, 2)
    except DecodingError as exc:
        assert "\n" not in str(exc)
        return
    if columns is not None:  # what the column-at-a-time decoder takes, the one-by-one decoder reads the same
        one_by_one = [decode_message(message) for message in messages]
        assert all(isinstance(message, Update) and len(message.new) == 2 for message in one_by_one)
