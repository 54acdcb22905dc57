"""Unit tests for the pgoutput decoder and LSN helpers, on messages built by hand per PostgreSQL's
"Logical Replication Message Formats" (protocol version 1)."""

from __future__ import annotations

import struct
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdckit.dialect.postgres.lsn import format_lsn, parse_lsn
from cdckit.dialect.postgres.pgoutput import (
    NULL,
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
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

PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
COMMIT_TIME = datetime(2024, 3, 15, 12, 30, 45, 123456, tzinfo=timezone.utc)
PG_MICROS = int((COMMIT_TIME - PG_EPOCH).total_seconds()) * 1_000_000 + COMMIT_TIME.microsecond
UNIX_MICROS = int(COMMIT_TIME.timestamp()) * 1_000_000 + COMMIT_TIME.microsecond


def cstring(text: str) -> bytes:
    return text.encode("utf-8") + b"\x00"


def tuple_data(*values: object) -> bytes:
    """TupleData: int16 count, then 'n' | 'u' | 't' + int32 length + text."""
    out = struct.pack(">h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is UNAVAILABLE:
            out += b"u"
        else:
            raw = str(value).encode("utf-8")
            out += b"t" + struct.pack(">i", len(raw)) + raw
    return out


def begin(final_lsn: int, pg_micros: int, xid: int) -> bytes:
    return b"B" + struct.pack(">qqi", final_lsn, pg_micros, xid)


def commit(commit_lsn: int, end_lsn: int, pg_micros: int) -> bytes:
    return b"C" + struct.pack(">bqqq", 0, commit_lsn, end_lsn, pg_micros)


def relation(relid: int, namespace: str, name: str, identity: bytes, columns: list[tuple[int, str, int, int]]) -> bytes:
    out = b"R" + struct.pack(">i", relid) + cstring(namespace) + cstring(name) + identity
    out += struct.pack(">h", len(columns))
    for flags, column, oid, typmod in columns:
        out += struct.pack(">b", flags) + cstring(column) + struct.pack(">ii", oid, typmod)
    return out


def logical_message(flags: int, lsn: int, prefix: str, content: bytes) -> bytes:
    return b"M" + struct.pack(">bq", flags, lsn) + cstring(prefix) + struct.pack(">i", len(content)) + content


# -- transaction boundaries ---------------------------------------------------------------------------------------


def test_begin_converts_the_commit_time_to_unix_epoch_microseconds() -> None:
    message = decode_message(begin(0x16B374D848, PG_MICROS, 7_654_321))
    assert message == Begin(final_lsn=0x16B374D848, commit_time_us=UNIX_MICROS, xid=7_654_321)


def test_begin_at_the_postgres_epoch_is_unix_time_2000_01_01() -> None:
    message = decode_message(begin(1, 0, 1))
    assert isinstance(message, Begin)
    assert message.commit_time_us == 946_684_800_000_000


def test_commit_carries_commit_and_end_lsn_and_unix_time() -> None:
    message = decode_message(commit(0x1000, 0x1038, PG_MICROS))
    assert message == Commit(commit_lsn=0x1000, end_lsn=0x1038, commit_time_us=UNIX_MICROS)


def test_decoder_accepts_a_memoryview() -> None:
    assert decode_message(memoryview(commit(1, 2, 0))) == Commit(1, 2, 946_684_800_000_000)


# -- relation -----------------------------------------------------------------------------------------------------


def test_relation_lists_columns_with_key_flags_types_and_modifiers() -> None:
    data = relation(16385, "inventory", "customers", b"d",
                    [(1, "id", 23, -1), (0, "first_name", 1043, 259), (0, "email", 1043, -1)])
    assert decode_message(data) == Relation(
        relation_id=16385, namespace="inventory", name="customers", replica_identity="d",
        columns=(RelationColumn("id", 23, -1, True), RelationColumn("first_name", 1043, 259, False),
                 RelationColumn("email", 1043, -1, False)))


def test_relation_with_empty_namespace_is_in_pg_catalog() -> None:
    message = decode_message(relation(1259, "", "pg_class", b"n", []))
    assert isinstance(message, Relation)
    assert message.namespace == "pg_catalog"
    assert message.replica_identity == "n"
    assert message.columns == ()


def test_relation_names_are_utf8() -> None:
    message = decode_message(relation(5, "ventes", "clientèle", b"f", [(1, "numéro", 20, -1)]))
    assert isinstance(message, Relation)
    assert message.name == "clientèle"
    assert message.columns[0].name == "numéro"


# -- row changes --------------------------------------------------------------------------------------------------


def test_insert_decodes_text_null_and_unchanged_toast_values() -> None:
    data = b"I" + struct.pack(">i", 16385) + b"N" + tuple_data("1001", None, UNAVAILABLE, "Zoë ✓")
    assert decode_message(data) == Insert(16385, ["1001", None, UNAVAILABLE, "Zoë ✓"])


def test_insert_of_an_empty_string_is_not_null() -> None:
    message = decode_message(b"I" + struct.pack(">i", 1) + b"N" + tuple_data(""))
    assert isinstance(message, Insert)
    assert message.new == [""]


def test_update_with_old_key() -> None:
    data = b"U" + struct.pack(">i", 7) + b"K" + tuple_data("1", None) + b"N" + tuple_data("2", "b")
    assert decode_message(data) == Update(7, old=None, old_key=["1", None], new=["2", "b"])


def test_update_with_whole_old_tuple() -> None:
    data = b"U" + struct.pack(">i", 7) + b"O" + tuple_data("1", "a") + b"N" + tuple_data("1", UNAVAILABLE)
    assert decode_message(data) == Update(7, old=["1", "a"], old_key=None, new=["1", UNAVAILABLE])


def test_update_without_old_values() -> None:
    data = b"U" + struct.pack(">i", 7) + b"N" + tuple_data("1", "b")
    assert decode_message(data) == Update(7, old=None, old_key=None, new=["1", "b"])


def test_delete_with_old_key() -> None:
    data = b"D" + struct.pack(">i", 9) + b"K" + tuple_data("42", None, None)
    assert decode_message(data) == Delete(9, old=None, old_key=["42", None, None])


def test_delete_with_whole_old_tuple() -> None:
    data = b"D" + struct.pack(">i", 9) + b"O" + tuple_data("42", "x", None)
    assert decode_message(data) == Delete(9, old=["42", "x", None], old_key=None)


def test_truncate_lists_relations_and_options() -> None:
    data = b"T" + struct.pack(">ib", 3, 1) + struct.pack(">iii", 16385, 16390, 16400)
    assert decode_message(data) == Truncate(relation_ids=(16385, 16390, 16400), options=1)


def test_relation_ids_above_two_to_the_31_are_positive() -> None:
    data = b"I" + struct.pack(">I", 3_000_000_000) + b"N" + tuple_data("1")
    message = decode_message(data)
    assert isinstance(message, Insert)
    assert message.relation_id == 3_000_000_000


# -- logical messages and others ----------------------------------------------------------------------------------


def test_transactional_logical_message() -> None:
    message = decode_message(logical_message(1, 0x2A00, "cdckit", b"\x00\xffpayload"))
    assert message == LogicalMessage(transactional=True, lsn=0x2A00, prefix="cdckit", content=b"\x00\xffpayload")


def test_non_transactional_logical_message() -> None:
    message = decode_message(logical_message(0, 5, "audit", b""))
    assert message == LogicalMessage(transactional=False, lsn=5, prefix="audit", content=b"")


@pytest.mark.parametrize("kind", [b"O", b"Y", b"S"])
def test_unknown_message_kinds_decode_to_other(kind: bytes) -> None:
    assert decode_message(kind + b"\x00\x01\x02") == Other(kind.decode())


# -- malformed input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "kind"), [
    (begin(1, 2, 3)[:-2], "'B'"),
    (commit(1, 2, 3)[:10], "'C'"),
    (relation(1, "public", "t", b"d", [(1, "id", 23, -1)])[:-3], "'R'"),
    (b"R" + struct.pack(">i", 1) + b"public", "'R'"),  # namespace without its NUL
    (b"I" + struct.pack(">i", 1) + b"N" + struct.pack(">h", 2) + b"n", "'I'"),  # fewer columns than announced
    (b"T" + struct.pack(">ib", 2, 0) + struct.pack(">i", 1), "'T'"),
    (b"M" + struct.pack(">bq", 1, 5) + b"prefix", "'M'"),
    (b"R" + struct.pack(">i", 1) + b"p\xffublic\x00", "'R'"),
], ids=["begin", "commit", "relation", "relation-no-nul", "insert-columns", "truncate", "message", "bad-utf8-name"])
def test_truncated_message_raises_decoding_error_naming_the_type(data: bytes, kind: str) -> None:
    with pytest.raises(DecodingError, match=kind):
        decode_message(data)


def test_a_value_that_is_not_utf8_is_kept_undecoded_for_the_caller_to_judge() -> None:
    from cdckit.dialect.postgres.pgoutput import NotUtf8

    data = b"I" + struct.pack(">i", 1) + b"N" + struct.pack(">h", 2) + b"t" + struct.pack(">i", 2) + b"\xff\xfe" \
        + b"t" + struct.pack(">i", 2) + b"ok"
    message = decode_message(data)
    assert message.new[1] == "ok"
    marker = message.new[0]
    assert isinstance(marker, NotUtf8) and marker.column_index == 0 and marker.at_byte == 0
    assert "table public.t, column 'body' holds bytes that are not UTF-8" in marker.problem("public.t", "body")


def test_empty_message_raises_decoding_error() -> None:
    with pytest.raises(DecodingError, match="empty"):
        decode_message(b"")


@pytest.mark.parametrize(("data", "name"), [
    (b"I" + struct.pack(">i", 1) + b"X" + tuple_data("1"), "insert"),
    (b"U" + struct.pack(">i", 1) + b"K" + tuple_data("1") + b"X" + tuple_data("1"), "update"),
    (b"D" + struct.pack(">i", 1) + b"N" + tuple_data("1"), "delete"),
])
def test_unexpected_tuple_marker_raises_decoding_error_naming_the_type(data: bytes, name: str) -> None:
    with pytest.raises(DecodingError, match=f"pgoutput {name} carries tuple marker"):
        decode_message(data)


def test_unknown_tuple_column_kind_names_the_message_type() -> None:
    data = b"I" + struct.pack(">i", 1) + b"N" + struct.pack(">h", 1) + b"x"
    with pytest.raises(DecodingError, match=r"(?i)'I'|insert"):
        decode_message(data)


def test_text_value_shorter_than_its_length_raises_decoding_error() -> None:
    data = b"I" + struct.pack(">i", 1) + b"N" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 10) + b"ab"
    with pytest.raises(DecodingError, match="'I'"):
        decode_message(data)


def test_logical_message_content_shorter_than_its_length_raises_decoding_error() -> None:
    data = b"M" + struct.pack(">bq", 1, 5) + cstring("p") + struct.pack(">i", 10) + b"ab"
    with pytest.raises(DecodingError, match="'M'"):
        decode_message(data)


# -- LSN ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("0/0", 0),
    ("0/16B3748", 23_803_720),
    ("16/B374D848", 0x16_B374D848),
    ("FFFFFFFF/FFFFFFFF", 2**64 - 1),
    ("1/0", 2**32),
])
def test_lsn_text_round_trips(text: str, value: int) -> None:
    assert parse_lsn(text) == value
    assert format_lsn(value) == text


def test_parse_lsn_accepts_lower_case_hex() -> None:
    assert format_lsn(parse_lsn("16/b374d848")) == "16/B374D848"


def test_lsn_order_follows_integer_order() -> None:
    assert parse_lsn("0/FFFFFFFF") < parse_lsn("1/0") < parse_lsn("1/1")


@pytest.mark.parametrize("text", ["garbage", "", "16", "/B374D848", "16/"])
def test_parse_lsn_of_text_without_a_slash_part_raises_a_clear_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="is not a PostgreSQL LSN"):
        parse_lsn(text)


@pytest.mark.parametrize("text", ["XYZ/1", "1/2/3", "-1/0", "0/100000000"])
def test_parse_lsn_of_malformed_hex_raises_a_clear_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="is not a PostgreSQL LSN"):
        parse_lsn(text)


# -- tuples a column at a time ------------------------------------------------------------------------------------

VALUES = st.one_of(st.none(), st.just(UNAVAILABLE), st.text(max_size=12), st.text(max_size=300))


def _block(messages: list[bytes]) -> tuple[Any, Any, Any]:
    """The messages one after the other, and where each one's tuple starts (after 'U', the relation id and 'N')
    and where it ends."""
    buffer = np.frombuffer(b"".join(messages) + bytes(8), dtype=np.uint8)
    ends = np.cumsum([len(message) for message in messages])
    return buffer, ends - np.array([len(message) for message in messages]) + 6, ends


def _columns_as_values(columns: list[Any], rows: int) -> list[list[object]]:
    decoded = [[None if kind == NULL else UNAVAILABLE if kind == UNCHANGED else value.decode("utf-8")
                for kind, value in zip(column.kinds, column.values.to_pylist(), strict=True)] for column in columns]
    return [[column[row] for column in decoded] for row in range(rows)]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6).flatmap(lambda width: st.lists(st.lists(VALUES, min_size=width, max_size=width),
                                                         min_size=1, max_size=40)))
def test_tuples_decoded_a_column_at_a_time_equal_those_decoded_one_by_one(rows: list[list[object]]) -> None:
    messages = [b"U" + struct.pack(">I", 16384) + b"N" + tuple_data(*row) for row in rows]
    buffer, starts, ends = _block(messages)
    columns = tuple_columns(buffer, starts, ends, len(rows[0]))
    assert columns is not None
    one_by_one = [decode_message(message).new for message in messages]  # type: ignore[union-attr]
    assert _columns_as_values(columns, len(rows)) == one_by_one


def test_a_block_of_tuples_of_another_shape_is_left_to_the_one_by_one_decoder() -> None:
    plain = b"U" + struct.pack(">I", 1) + b"N" + tuple_data("1", "a")
    wider = b"U" + struct.pack(">I", 1) + b"N" + tuple_data("1", "a", "x")
    binary = b"U" + struct.pack(">I", 1) + b"N" + struct.pack(">h", 2) + b"b" + struct.pack(">i", 1) + b"\x01n"
    for odd in (wider, binary, plain + b"trailing"):
        buffer, starts, ends = _block([plain, odd])
        assert tuple_columns(buffer, starts, ends, 2) is None


def test_a_tuple_value_running_past_its_message_is_a_decoding_error() -> None:
    cut = (b"U" + struct.pack(">I", 1) + b"N" + tuple_data("1", "abcdef"))[:-3]
    buffer, starts, ends = _block([cut])
    with pytest.raises(DecodingError, match="announces 6 bytes but the message ends after 3"):
        tuple_columns(buffer, starts, ends, 2)
