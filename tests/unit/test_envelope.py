"""Unit tests for Debezium PostgreSQL messages (keys, envelopes, tombstones, heartbeats) and Spark event rows."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.events import UNAVAILABLE, ChangeEvent, Position
from cdckit.formats.debezium.envelope import (
    FormatSettings,
    TableFormat,
    dumps,
    format_settings,
    heartbeat_messages,
)
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.formats.debezium.source import POSTGRES_VERSION as DEBEZIUM_VERSION
from cdckit.spark import rows as rows_module
from cdckit.spark.rows import EVENT_COLUMNS, event_rows

PREFIX = "dbserver1"
COLUMNS = (
    ColumnType("id", "int4", 23, optional=False),
    ColumnType("first_name", "varchar", 1043),
    ColumnType("email", "varchar", 1043, optional=False),
)
CUSTOMERS = TableInfo("inventory", "customers", 16385, COLUMNS, ("id",), "d")
ROW = {"id": "1001", "first_name": "Sally", "email": "sally@example.com"}


def settings(**changes: Any) -> FormatSettings:
    return dataclasses.replace(FormatSettings(topic_prefix=PREFIX, database="shop"), **changes)


def event(op: str = "c", before: dict[str, object] | None = None, after: dict[str, object] | None = None,
          **changes: Any) -> ChangeEvent:
    base = ChangeEvent("inventory", "customers", op, before, after, Position(commit_lsn=300, lsn=200, serial=0),
                       source_ts_ms=1_700_000_000_123, tx_id=771)
    return dataclasses.replace(base, **changes)


def value_doc(fmt: TableFormat, ev: ChangeEvent, ts_ms: int = 1_700_000_000_500) -> dict[str, Any]:
    return json.loads(fmt.value_json(ev, ts_ms))


@pytest.fixture
def fmt() -> TableFormat:
    return TableFormat(CUSTOMERS, settings())


# -- topic and key ------------------------------------------------------------------------------------------------


def test_topic_is_prefix_schema_table(fmt: TableFormat) -> None:
    assert fmt.topic == "dbserver1.inventory.customers"


def test_key_message_has_the_debezium_key_schema_and_payload(fmt: TableFormat) -> None:
    assert json.loads(fmt.key_json(ROW)) == {
        "schema": {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "id"}],
                   "optional": False, "name": "dbserver1.inventory.customers.Key"},
        "payload": {"id": 1001},
    }


def test_key_without_schemas_is_the_bare_payload() -> None:
    fmt = TableFormat(CUSTOMERS, settings(key_schemas_enable=False))
    assert fmt.key_json(ROW) == '{"id":1001}'


# -- value schema -------------------------------------------------------------------------------------------------


def test_value_schema_is_an_envelope_with_optional_value_structs(fmt: TableFormat) -> None:
    schema = value_doc(fmt, event(after=ROW))["schema"]
    assert schema["name"] == "dbserver1.inventory.customers.Envelope"
    assert list(schema)[-2:] == ["name", "version"] and schema["version"] == 1  # as Debezium 2.5.2 writes it
    assert schema["optional"] is False
    assert [f["field"] for f in schema["fields"]] == ["before", "after", "source", "op", "ts_ms", "transaction"]
    before, after = schema["fields"][0], schema["fields"][1]
    for block in (before, after):
        assert block["type"] == "struct"
        assert block["optional"] is True
        assert block["name"] == "dbserver1.inventory.customers.Value"
        assert block["fields"] == [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "string", "optional": True, "field": "first_name"},
            {"type": "string", "optional": False, "field": "email"},
        ]


def test_source_schema_fields_are_in_debezium_order(fmt: TableFormat) -> None:
    source = value_doc(fmt, event(after=ROW))["schema"]["fields"][2]
    assert source["name"] == "io.debezium.connector.postgresql.Source"
    assert source["field"] == "source"
    assert [f["field"] for f in source["fields"]] == [
        "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema", "table", "txId", "lsn",
        "xmin"]


def test_source_snapshot_field_is_a_debezium_enum_defaulting_to_false(fmt: TableFormat) -> None:
    source = value_doc(fmt, event(after=ROW))["schema"]["fields"][2]
    snapshot = source["fields"][4]
    assert snapshot == {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                        "parameters": {"allowed": "true,last,false,incremental"}, "default": "false",
                        "field": "snapshot"}


# -- value payload ------------------------------------------------------------------------------------------------


def test_create_payload_has_debezium_fields_and_source_block(fmt: TableFormat) -> None:
    payload = value_doc(fmt, event(after=ROW, sequence=(100, 200)), ts_ms=1_700_000_000_999)["payload"]
    assert list(payload) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert payload["before"] is None
    assert payload["after"] == {"id": 1001, "first_name": "Sally", "email": "sally@example.com"}
    assert payload["op"] == "c"
    assert payload["ts_ms"] == 1_700_000_000_999
    assert payload["transaction"] is None
    assert payload["source"] == {
        "version": DEBEZIUM_VERSION, "connector": "postgresql", "name": PREFIX, "ts_ms": 1_700_000_000_123,
        "snapshot": "false", "db": "shop", "sequence": '["100","200"]', "schema": "inventory",
        "table": "customers", "txId": 771, "lsn": 200, "xmin": None,
    }


def test_sequence_with_unknown_last_commit_uses_json_null(fmt: TableFormat) -> None:
    source = value_doc(fmt, event(after=ROW, sequence=(None, 200)))["payload"]["source"]
    assert source["sequence"] == '[null,"200"]'
    assert json.loads(source["sequence"]) == [None, "200"]


def test_sequence_without_positions_is_null(fmt: TableFormat) -> None:
    assert value_doc(fmt, event(after=ROW))["payload"]["source"]["sequence"] is None


def test_snapshot_read_carries_the_snapshot_marker(fmt: TableFormat) -> None:
    payload = value_doc(fmt, event(op="r", after=ROW, snapshot="last", tx_id=None))["payload"]
    assert payload["op"] == "r"
    assert payload["source"]["snapshot"] == "last"
    assert payload["source"]["txId"] is None


def test_update_payload_has_before_and_after(fmt: TableFormat) -> None:
    changed = {**ROW, "email": "s@example.org"}
    payload = value_doc(fmt, event(op="u", before=ROW, after=changed))["payload"]
    assert payload["before"]["email"] == "sally@example.com"
    assert payload["after"]["email"] == "s@example.org"


def test_null_values_stay_null(fmt: TableFormat) -> None:
    payload = value_doc(fmt, event(after={**ROW, "first_name": None}))["payload"]
    assert payload["after"]["first_name"] is None


def test_unavailable_text_value_becomes_the_debezium_placeholder(fmt: TableFormat) -> None:
    payload = value_doc(fmt, event(op="u", after={**ROW, "first_name": UNAVAILABLE}))["payload"]
    assert payload["after"]["first_name"] == "__debezium_unavailable_value"
    assert payload["after"]["email"] == "sally@example.com"


def test_value_without_schemas_is_the_bare_payload() -> None:
    fmt = TableFormat(CUSTOMERS, settings(value_schemas_enable=False))
    doc = json.loads(fmt.value_json(event(after=ROW), 5))
    assert list(doc) == ["before", "after", "source", "op", "ts_ms", "transaction"]


def test_json_is_compact_with_keys_in_debezium_order(fmt: TableFormat) -> None:
    text = fmt.value_json(event(after=ROW), 42)
    assert ": " not in text and ", " not in text
    assert text.startswith('{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32",')
    assert text.endswith(',"op":"c","ts_ms":42,"transaction":null}}')
    assert '"payload":{"before":null,"after":{"id":1001,"first_name":"Sally","email":"sally@example.com"},' \
           '"source":{"version":' in text
    assert fmt.key_json(ROW).endswith('"payload":{"id":1001}}')


# -- settings from connector properties ---------------------------------------------------------------------------


def test_yugabytedb_connector_class_sets_source_connector() -> None:
    options = {"topic.prefix": PREFIX, "database.dbname": "yugabyte",
               "connector.class": "io.debezium.connector.postgresql.YugabyteDBConnector"}
    fmt = TableFormat(CUSTOMERS, format_settings(options))
    source = value_doc(fmt, event(after=ROW))["payload"]["source"]
    assert source["connector"] == "YugabyteDB"
    assert source["db"] == "yugabyte"


def test_postgres_connector_class_sets_source_connector_postgresql() -> None:
    options = {"topic.prefix": PREFIX, "database.dbname": "shop",
               "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
               "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "FALSE"}
    fs = format_settings(options)
    assert fs.connector == "postgresql"
    assert not fs.key_schemas_enable
    assert not fs.value_schemas_enable


def test_excluded_column_is_dropped_from_before_and_after_but_key_keeps_id() -> None:
    table = dataclasses.replace(CUSTOMERS, column_filter=("id", "first_name"))
    fmt = TableFormat(table, settings())
    doc = value_doc(fmt, event(op="u", before=ROW, after=ROW))
    assert doc["payload"]["before"] == {"id": 1001, "first_name": "Sally"}
    assert doc["payload"]["after"] == {"id": 1001, "first_name": "Sally"}
    assert [f["field"] for f in doc["schema"]["fields"][1]["fields"]] == ["id", "first_name"]
    assert json.loads(fmt.key_json(ROW))["payload"] == {"id": 1001}


def test_key_column_excluded_from_values_stays_in_the_key() -> None:
    table = dataclasses.replace(CUSTOMERS, column_filter=("first_name",))
    fmt = TableFormat(table, settings())
    assert json.loads(fmt.key_json(ROW))["payload"] == {"id": 1001}
    assert value_doc(fmt, event(after=ROW))["payload"]["after"] == {"first_name": "Sally"}


def test_json_text_escapes_as_jacksons_json_converter_does() -> None:
    # Kafka Connect's JsonConverter (Jackson) escapes characters beyond U+FFFF as surrogate pairs and writes
    # control-character escapes in upper-case hex; other non-ASCII text stays UTF-8.
    value = "é 中文 😀 \x01\x1f \\u001f"
    text = dumps({"v": value})
    assert text == '{"v":"é 中文 \\uD83D\\uDE00 \\u0001\\u001F \\\\u001f"}'
    assert json.loads(text)["v"] == value
    assert dumps({"v": "plain ascii"}) == '{"v":"plain ascii"}'


# -- Spark event rows ---------------------------------------------------------------------------------------------


def test_create_gives_one_row_keyed_by_after(fmt: TableFormat, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows_module, "now_ms", lambda: 1234)
    (row,) = event_rows(event(after=ROW), fmt, tombstones=True)
    record = dict(zip(EVENT_COLUMNS, row, strict=True))
    assert record["topic"] == "dbserver1.inventory.customers"
    assert json.loads(record["key"])["payload"] == {"id": 1001}
    assert json.loads(record["value"])["payload"]["ts_ms"] == 1234
    assert record["table"] == "inventory.customers"
    assert (record["op"], record["commit_lsn"], record["lsn"], record["serial"]) == ("c", 300, 200, 0)
    assert record["source_ts_ms"] == 1_700_000_000_123
    assert record["headers"] == []


def test_delete_is_followed_by_a_tombstone_with_the_same_key(fmt: TableFormat) -> None:
    delete = event(op="d", before=ROW, position=Position(300, 200, serial=4))
    first, tombstone = event_rows(delete, fmt, tombstones=True)
    deleted, tomb = dict(zip(EVENT_COLUMNS, first, strict=True)), dict(zip(EVENT_COLUMNS, tombstone, strict=True))
    assert deleted["op"] == "d"
    assert json.loads(deleted["value"])["payload"]["after"] is None
    assert json.loads(deleted["key"])["payload"] == {"id": 1001}
    assert tomb["value"] is None
    assert tomb["key"] == deleted["key"]
    assert tomb["topic"] == deleted["topic"]
    assert tomb["serial"] == 5
    assert (tomb["commit_lsn"], tomb["lsn"]) == (300, 200)


def test_delete_without_tombstones_gives_only_the_delete(fmt: TableFormat) -> None:
    rows = event_rows(event(op="d", before=ROW), fmt, tombstones=False)
    assert len(rows) == 1
    assert rows[0][EVENT_COLUMNS.index("op")] == "d"


def test_arrow_batches_keep_every_record_in_order_with_values_intact(fmt: TableFormat,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows_module, "ARROW_BATCH_ROWS", 3)
    records = [row for i in range(4) for row in event_rows(
        event(op="d", before={**ROW, "id": 1001 + i}, position=Position(300, 200 + i, serial=0)), fmt, True)]
    records.append(rows_module.record("t", None, b"\x00avro", op="c", position=Position(1, 1, 0), ts_ms=5))
    batches = list(rows_module.arrow_batches(records))
    assert [b.num_rows for b in batches] == [3, 3, 3]
    assert all(b.schema.equals(rows_module.event_arrow_schema()) for b in batches)
    back = [tuple(d[name] for name in EVENT_COLUMNS) for b in batches for d in b.to_pylist()]
    assert back == records  # deletes, tombstones (null value) and a binary value, in order, unchanged


def test_arrow_batches_hand_over_early_after_many_bytes_of_text(fmt: TableFormat,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows_module, "ARROW_BATCH_BYTES", 3000)
    records = [row for i in range(10) for row in event_rows(event(after={**ROW, "id": i}), fmt, True)]
    size = len(str(records[0][EVENT_COLUMNS.index("value")]))
    batches = list(rows_module.arrow_batches(records))
    assert sum(b.num_rows for b in batches) == 10
    assert max(b.num_rows for b in batches) == -(-3000 // size)


def test_arrow_schema_is_the_event_schema() -> None:
    schema = rows_module.event_arrow_schema()
    assert schema.names == list(EVENT_COLUMNS)
    ddl = dict(part.strip().split(" ", 1) for part in rows_module.EVENT_SCHEMA.split(", ") if ": " not in part)
    assert {name.strip("`"): kind for name, kind in ddl.items()} == {
        "topic": "STRING", "key": "STRING", "value": "STRING", "table": "STRING", "op": "STRING",
        "commit_lsn": "DECIMAL(25,0)", "lsn": "DECIMAL(25,0)", "serial": "INT", "source_ts_ms": "BIGINT",
        "value_binary": "BINARY"}
    assert [str(schema.field(n).type) for n in ("topic", "commit_lsn", "serial", "value_binary")] == [
        "string", "decimal128(25, 0)", "int32", "binary"]
    assert str(schema.field("headers").type) == "list<element: struct<key: string, value: binary>>"


# -- heartbeats ---------------------------------------------------------------------------------------------------


def test_heartbeat_messages_use_debezium_schemas() -> None:
    # Versioned, as Debezium 2.5.2's SchemaFactory.heartbeatKeySchema / heartbeatValueSchema build them.
    key, value = heartbeat_messages(settings(), 1_700_000_000_000)
    assert json.loads(key) == {
        "schema": {"type": "struct", "fields": [{"type": "string", "optional": False, "field": "serverName"}],
                   "optional": False, "name": "io.debezium.connector.common.ServerNameKey", "version": 1},
        "payload": {"serverName": PREFIX},
    }
    assert json.loads(value) == {
        "schema": {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}],
                   "optional": False, "name": "io.debezium.connector.common.Heartbeat", "version": 1},
        "payload": {"ts_ms": 1_700_000_000_000},
    }


def test_heartbeat_without_schemas_is_bare_payloads() -> None:
    key, value = heartbeat_messages(settings(key_schemas_enable=False, value_schemas_enable=False), 7)
    assert (key, value) == ('{"serverName":"dbserver1"}', '{"ts_ms":7}')
