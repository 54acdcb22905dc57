"""Single message transforms on cdckit's own records: ExtractNewRecordState, ByLogicalTableRouter, RegexRouter.

Byte-for-byte agreement with Debezium 2.5.2 running the same chains is checked end to end by the parity profiles
smt-a, smt-b and smt-c (``make test-debezium-modes``); these tests pin each rule on its own.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.formats.debezium.transforms import (
    BY_LOGICAL_TABLE_ROUTER,
    EXTRACT_NEW_RECORD_STATE,
    REGEX_ROUTER,
    Record,
    TransformConfigError,
    apply_chain,
    chain,
    java_replacement,
)

COLUMNS = (ColumnType("id", "int4", 23, optional=False), ColumnType("email", "varchar", 1043),
           ColumnType("score", "float8", 701))
CUSTOMERS = TableInfo("inventory", "customers", 16385, COLUMNS, ("id",), "d")
TOPIC = "dbserver1.inventory.customers"
ROW = {"id": "1001", "email": "sally@example.com", "score": "10000000000"}


def table_format(**changes: Any) -> TableFormat:
    settings = FormatSettings(topic_prefix="dbserver1", database="shop")
    return TableFormat(CUSTOMERS, dataclasses.replace(settings, **changes))


def record(op: str, before: dict[str, str] | None = None, after: dict[str, str] | None = None,
           snapshot: str = "false", schemas: bool = True) -> Record:
    fmt = table_format(key_schemas_enable=schemas, value_schemas_enable=schemas)
    event = ChangeEvent("inventory", "customers", op, before, after, Position(300, 200, 0), 1_700_000_000_123,
                        tx_id=771, snapshot=snapshot)
    key = fmt.key_json(after or before or {})
    return Record(TOPIC, key, fmt.value_json(event, 1_700_000_000_500), [], op, (schemas, schemas))


def tombstone() -> Record:
    return Record(TOPIC, table_format().key_json(ROW), None, [], "tombstone", (True, True))


def run(settings: dict[str, str], item: Record) -> Record | None:
    return apply_chain(chain(settings), item)


def unwrap(**options: str) -> dict[str, str]:
    return {"transforms": "unwrap", "transforms.unwrap.type": EXTRACT_NEW_RECORD_STATE,
            **{f"transforms.unwrap.{name.replace('_', '.')}": value for name, value in options.items()}}


def value(item: Record | None) -> Any:
    assert item is not None
    text = item.value_text()
    return None if text is None else json.loads(text)


# -- ExtractNewRecordState --------------------------------------------------------------------------------------


def test_unwrap_writes_the_after_image_with_its_schema_and_keeps_the_key() -> None:
    original = record("c", after=ROW)
    envelope = json.loads(original.value or "")
    after_schema = next(f for f in envelope["schema"]["fields"] if f["field"] == "after")
    result = run(unwrap(), original)
    document = value(result)
    assert document["payload"] == envelope["payload"]["after"]
    # Kafka's InsertField / Debezium's addFields copy the schema without its optional flag
    assert document["schema"] == {**{k: v for k, v in after_schema.items() if k != "field"}, "optional": False}
    assert list(document["schema"]) == ["type", "fields", "optional", "name"]
    assert result is not None and result.key_text() == table_format().key_json(ROW)
    assert result.topic == TOPIC


def test_unwrap_keeps_numbers_exactly_as_jsonconverter_wrote_them() -> None:
    result = run(unwrap(), record("c", after=ROW))
    assert result is not None and '"score":1.0E10' in (result.value_text() or "")


def test_by_default_deletes_and_tombstones_are_dropped_and_truncates_too() -> None:
    assert run(unwrap(), record("d", before=ROW)) is None
    assert run(unwrap(), tombstone()) is None
    assert run(unwrap(), record("t")) is None
    assert run(unwrap(drop_tombstones="false"), tombstone()) is not None


def test_delete_handling_rewrite_marks_deletes_and_other_changes() -> None:
    settings = unwrap(delete_handling_mode="rewrite")
    deleted = value(run(settings, record("d", before=ROW)))
    assert deleted["payload"]["__deleted"] == "true" and deleted["payload"]["id"] == 1001
    assert deleted["schema"]["fields"][-1] == {"type": "string", "optional": True, "field": "__deleted"}
    assert value(run(settings, record("u", before=ROW, after=ROW)))["payload"]["__deleted"] == "false"


@pytest.mark.parametrize(("mode", "delete_kept", "tombstone_kept"), [
    ("drop", False, False), ("tombstone", True, False), ("rewrite", True, False),
    ("rewrite-with-tombstone", True, True)])
def test_delete_tombstone_handling_mode(mode: str, delete_kept: bool, tombstone_kept: bool) -> None:
    settings = unwrap(delete_tombstone_handling_mode=mode)
    assert (run(settings, record("d", before=ROW)) is not None) == delete_kept
    assert (run(settings, tombstone()) is not None) == tombstone_kept


def test_a_delete_as_tombstone_keeps_the_after_schema_with_a_null_payload() -> None:
    deleted = value(run(unwrap(delete_tombstone_handling_mode="tombstone"), record("d", before=ROW)))
    assert deleted["payload"] is None and deleted["schema"]["optional"] is True
    schemaless = run(unwrap(delete_tombstone_handling_mode="tombstone"), record("d", before=ROW, schemas=False))
    assert schemaless is not None and schemaless.value_text() == "null"  # JsonConverter's null, not no value


def test_add_fields_copies_envelope_and_source_fields_with_optional_schemas() -> None:
    settings = unwrap(add_fields="op,source.ts_ms,table:tbl,snapshot,id")
    document = value(run(settings, record("c", after=ROW)))
    assert {k: document["payload"][k] for k in ("__op", "__source_ts_ms", "__tbl", "__snapshot", "__id")} == {
        "__op": "c", "__source_ts_ms": 1_700_000_000_123, "__tbl": "customers",
        "__snapshot": None,  # Debezium leaves source.snapshot unset while streaming
        "__id": None}  # no transaction block without provide.transaction.metadata
    added = {f["field"]: f for f in document["schema"]["fields"]}
    assert added["__source_ts_ms"] == {"type": "int64", "optional": True, "field": "__source_ts_ms"}
    assert "default" not in added["__snapshot"] and added["__snapshot"]["name"] == "io.debezium.data.Enum"
    read = value(run(settings, record("r", after=ROW, snapshot="true")))
    assert read["payload"]["__snapshot"] == "true" and read["payload"]["__op"] == "r"


def test_add_fields_prefix_and_add_headers() -> None:
    settings = unwrap(add_fields="op", add_fields_prefix="_", add_headers="op,source.ts_ms,db",
                      drop_tombstones="false")
    result = run(settings, record("u", before=ROW, after=ROW))
    assert result is not None and value(result)["payload"]["_op"] == "u"
    # Kafka Connect's SimpleHeaderConverter: text as UTF-8, numbers as their text
    assert result.headers == [("__op", b"u"), ("__source_ts_ms", b"1700000000123"), ("__db", b"shop")]
    kept = run(settings, tombstone())
    assert kept is not None and kept.headers == [("__op", b"d")]  # a tombstone carries the delete's op only


def test_records_without_an_envelope_pass_unchanged() -> None:
    transaction = Record("dbserver1.transaction", '{"id":"771"}', '{"status":"BEGIN","id":"771"}', [], "tx",
                         (False, False))
    result = run(unwrap(), transaction)
    assert result is not None and result.value_text() == '{"status":"BEGIN","id":"771"}'


def test_route_by_field_names_the_topic_from_the_row() -> None:
    result = run(unwrap(route_by_field="email"), record("c", after=ROW))
    assert result is not None and result.topic == "sally@example.com"


# -- routers ------------------------------------------------------------------------------------------------------


def merge(**options: str) -> dict[str, str]:
    return {"transforms": "merge", "transforms.merge.type": BY_LOGICAL_TABLE_ROUTER,
            "transforms.merge.topic.regex": r"dbserver1\.inventory\.(.*)",
            "transforms.merge.topic.replacement": "dbserver1.all",
            **{f"transforms.merge.{name.replace('_', '.')}": value for name, value in options.items()}}


def test_by_logical_table_router_renames_topic_and_schemas_and_makes_keys_unique() -> None:
    result = run(merge(), record("u", before=ROW, after=ROW))
    assert result is not None and result.topic == "dbserver1.all"
    key = json.loads(result.key_text() or "")
    assert key["schema"]["name"] == "dbserver1.all.Key"
    assert key["schema"]["fields"][-1] == {"type": "string", "optional": False,
                                           "field": "__dbz__physicalTableIdentifier"}
    assert key["payload"] == {"id": 1001, "__dbz__physicalTableIdentifier": TOPIC}
    document = value(result)
    assert document["schema"]["name"] == "dbserver1.all.Envelope"
    assert {f["field"]: f.get("name") for f in document["schema"]["fields"]}["before"] == "dbserver1.all.Value"
    assert {f["field"]: f.get("name") for f in document["schema"]["fields"]}["after"] == "dbserver1.all.Value"


def test_by_logical_table_router_key_field_options_and_unmatched_topics() -> None:
    settings = merge(key_field_name="src", key_field_regex=r"dbserver1\.(.*)", key_field_replacement="$1")
    result = run(settings, record("c", after=ROW, schemas=False))
    assert result is not None and json.loads(result.key_text() or "") == {"id": 1001, "src": "inventory.customers"}
    other = Record("other.topic", '{"id":1}', None, [], "tombstone", (False, False))
    assert run(settings, other) is other and other.topic == "other.topic"
    unique_off = run(merge(key_enforce_uniqueness="false"), record("c", after=ROW))
    assert unique_off is not None and json.loads(unique_off.key_text() or "")["payload"] == {"id": 1001}


def test_regex_router_uses_java_replacement_syntax() -> None:
    settings = {"transforms": "route", "transforms.route.type": REGEX_ROUTER,
                "transforms.route.regex": r"dbserver1\.(\w+)\.(\w+)", "transforms.route.replacement": r"cdc.$2\$"}
    result = run(settings, record("c", after=ROW))
    assert result is not None and result.topic == "cdc.customers$"
    assert result.value_text() == record("c", after=ROW).value  # the record itself is untouched


def test_java_replacement_names_groups_by_number_and_name() -> None:
    import re

    match = re.fullmatch(r"(?P<db>\w+)\.(\w+)", "shop.orders")
    assert match is not None
    assert java_replacement("${db}-$2")(match) == "shop-orders"


def test_a_chain_runs_in_the_configured_order() -> None:
    settings = {**merge(), **unwrap(), "transforms": "merge,unwrap"}
    document = value(run(settings, record("c", after=ROW)))
    assert document["schema"]["name"] == "dbserver1.all.Value"


def test_chain_refuses_an_option_it_does_not_know() -> None:
    with pytest.raises(TransformConfigError, match=r"drop\.fields\.from\.key"):
        chain(unwrap(drop_fields_from_key="true"))
