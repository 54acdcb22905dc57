"""Name adjustment, column masking / truncation / hashing, custom keys, skipped operations, transaction tracking."""

from __future__ import annotations

import hashlib

import pytest

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.column_mappers import (
    _java_serialized_string,
    column_mapping,
    java_substring,
    parse_message_key_columns,
    parse_rules,
    validate_rule,
)
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat
from cdckit.formats.debezium.naming import adjust_name, adjust_schema_name
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.formats.debezium.transaction import TransactionTracker
from cdckit.spark.records import RecordBuilder


def test_avro_adjustment_replaces_invalid_characters_with_underscores() -> None:
    adjusted = adjust_schema_name("my-server.inventory.order lines.Value", "avro")
    assert adjusted == "my_server.inventory.order_lines.Value"
    assert adjust_name("1st-column", "avro") == "_st_column"
    assert adjust_name("ok_name9", "avro") == "ok_name9"


def test_avro_unicode_adjustment_keeps_distinct_names_distinct() -> None:
    assert adjust_name("a-b", "avro_unicode") == "a_u002db"
    assert adjust_name("a.b", "avro_unicode") != adjust_name("a-b", "avro_unicode")


def test_no_adjustment_leaves_names_alone() -> None:
    assert adjust_schema_name("my-server.x.y", "none") == "my-server.x.y"


def test_mask_replaces_values_and_nulls_of_character_columns_only() -> None:
    rules = parse_rules({"column.mask.with.3.chars": "inv.cust.ssn"})
    masked = column_mapping(rules, "inv.cust.ssn", is_character=True, column_length=-1)
    assert masked.mapper is not None
    assert masked.mapper("123-45-6789") == "***" and masked.mapper(None) == "***"
    assert masked.parameters == {"masked": "true"}
    assert column_mapping(rules, "inv.cust.ssn", is_character=False, column_length=-1).mapper is None
    assert column_mapping(rules, "inv.cust.name", is_character=True, column_length=-1).mapper is None


def test_truncation_counts_utf16_units_and_skips_columns_short_enough() -> None:
    rules = parse_rules({"column.truncate.to.3.chars": "s.t.c"})
    mapping = column_mapping(rules, "s.t.c", is_character=True, column_length=-1)
    assert mapping.mapper is not None and mapping.mapper("abcdef") == "abc"
    assert mapping.parameters == {"truncateLength": "3"}
    assert java_substring("a😀b", 2) == "a"  # an emoji is two UTF-16 units: Java cuts it, Python must not split it
    assert column_mapping(rules, "s.t.c", is_character=True, column_length=3).mapper is None


def test_hash_v2_hashes_salt_and_utf8_text_and_shortens_to_the_column_length() -> None:
    rules = parse_rules({"column.mask.hash.v2.SHA-256.with.salt.CzQMA0cB5K": "inv.orders.customerName"})
    mapping = column_mapping(rules, "inv.orders.customerName", is_character=True, column_length=20)
    assert mapping.mapper is not None
    assert mapping.mapper("Bob") == hashlib.sha256(b"CzQMA0cB5K" + b"Bob").hexdigest()[:20]
    assert mapping.mapper(None) is None


def test_hash_v1_hashes_the_java_serialized_string() -> None:
    assert _java_serialized_string("alice") == bytes.fromhex("aced0005") + b"\x74\x00\x05alice"
    assert _java_serialized_string("é") == bytes.fromhex("aced0005") + b"\x74\x00\x02\xc3\xa9"
    rules = parse_rules({"column.mask.hash.MD5.with.salt.s": "a.b.c"})
    mapping = column_mapping(rules, "a.b.c", is_character=True, column_length=-1)
    assert mapping.mapper is not None
    assert mapping.mapper("alice") == hashlib.md5(b"s" + bytes.fromhex("aced00057400 05".replace(" ", ""))
                                                  + b"alice").hexdigest()


def test_invalid_rules_are_reported() -> None:
    assert "positive" in (validate_rule("column.truncate.to.0.chars", "a.b.c") or "")
    assert "not supported" in (validate_rule("column.mask.hash.WHIRL.with.salt.x", "a.b.c") or "")
    assert "regular expression" in (validate_rule("column.mask.with.2.chars", "a.(b") or "")


def test_message_key_columns_parse_and_reject_malformed_entries() -> None:
    assert parse_message_key_columns("inventory.customers:pk1,pk2;(.*).purchaseorders:pk3") == (
        ("inventory.customers", ("pk1", "pk2")), ("(.*).purchaseorders", ("pk3",)))
    with pytest.raises(ValueError, match="not of the form"):
        parse_message_key_columns("inventory.customers")


def _table() -> TableInfo:
    columns = (ColumnType("id", "int4", 23, -1, False), ColumnType("email", "varchar", 1043, 259, False))
    return TableInfo("inv", "cust", 1, columns, ("id",), "d")


def test_custom_key_columns_replace_the_primary_key() -> None:
    settings = FormatSettings("p", "db", message_key_columns=(("inv.cust", ("email",)),), key_schemas_enable=False)
    fmt = TableFormat(_table(), settings)
    assert fmt.key_json({"id": "1", "email": "a@b"}) == '{"email":"a@b"}'


def test_custom_key_naming_an_unknown_column_is_refused() -> None:
    with pytest.raises(ValueError, match="does not have"):
        TableFormat(_table(), FormatSettings("p", "db", message_key_columns=(("inv.cust", ("nope",)),)))


def test_transaction_tracker_numbers_events_per_collection_and_ends_with_counts() -> None:
    tracker = TransactionTracker()
    tracker.start("42", 1000)
    begin, first = tracker.data_event("s.a")
    again, second = tracker.data_event("s.b")
    _, third = tracker.data_event("s.b")
    assert begin is not None and begin["status"] == "BEGIN" and again is None
    assert [b["total_order"] for b in (first, second, third)] == [1, 2, 3]
    assert [b["data_collection_order"] for b in (first, second, third)] == [1, 1, 2]
    end = tracker.end()
    assert end is not None and end["event_count"] == 3
    assert end["data_collections"] == [{"data_collection": "s.a", "event_count": 1},
                                       {"data_collection": "s.b", "event_count": 2}]
    assert tracker.end() is None


def test_skipped_operations_are_not_written() -> None:
    fmt = TableFormat(_table(), FormatSettings("p", "db"))
    builder = RecordBuilder({"skipped.operations": "u,d", "topic.prefix": "p"}, fmt.settings, lambda e: fmt,
                            lambda e: "1")
    events = [ChangeEvent("inv", "cust", op, None if op == "c" else {"id": "1", "email": "x"},
                          None if op == "d" else {"id": "1", "email": "x"}, Position(1, 1, 0), 0, 1)
              for op in ("c", "u", "d")]
    written = [row for event in events for row in builder.rows(event)]
    assert [row[5] for row in written] == ["c"]
