"""Qlik Replicate metadata and data messages: fields, masks, encoders, schema ids."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from cdckit.formats.qlik import (
    ENVELOPE_AVRO_SCHEMA,
    METADATA_AVRO_SCHEMA,
    QlikChange,
    QlikColumn,
    QlikSettings,
    QlikTable,
    avro_envelope,
    data_message,
    decode_avro,
    encode_data,
    encode_metadata,
    format_timestamp,
    json_envelope,
    mask_hex,
    metadata_message,
    schema_id,
)

UTC = datetime.timezone.utc
JSON = QlikSettings(server="rep-1", task="orders-task", encoding="json")
AVRO = QlikSettings(server="rep-1", task="orders-task", encoding="avro")
COLUMNS = (
    QlikColumn("id", "INT4", primary_key_position=1, nullable=False),
    QlikColumn("region", "STRING", length=8, primary_key_position=2, nullable=False),
    QlikColumn("amount", "NUMERIC", precision=10, scale=2),
    QlikColumn("note", "CLOB"),
    QlikColumn("created", "DATETIME", scale=6),
    QlikColumn("payload", "BLOB"),
    QlikColumn("born", "DATE"),
    QlikColumn("at", "TIME", scale=3),
    QlikColumn("flag", "BOOLEAN"),
    QlikColumn("ratio", "REAL8"),
    QlikColumn("big", "INT8"),
)
TABLE = QlikTable("sales", "orders", COLUMNS)
ROW: dict[str, Any] = {
    "id": 7, "region": "EU", "amount": Decimal("12.50"), "note": "long text", "payload": b"\x00\xab",
    "created": datetime.datetime(2024, 2, 29, 13, 14, 15, 123456, tzinfo=UTC), "born": datetime.date(1999, 12, 31),
    "at": datetime.time(8, 30, 0, 250000), "flag": True, "ratio": 0.25, "big": 2**40,
}
CDC = {"change_sequence": "000000000000000001000000000000000009900000", "timestamp": "2024-02-29T13:14:15.123",
       "stream_position": "0/3E8", "transaction_id": "0" * 29 + "1F4", "transaction_event_counter": 2,
       "transaction_last_event": True}


def change(operation: str, data: dict[str, Any], before: dict[str, Any] | None = None, **extra: Any) -> QlikChange:
    return QlikChange(operation, data, before, **{**CDC, **extra})  # type: ignore[arg-type]


def bits(table: QlikTable, mask: str) -> set[str]:
    number = int(mask, 16)
    return {column.name for ordinal, column in enumerate(table.columns, 1) if number >> (ordinal - 1) & 1}


# ---- metadata message -------------------------------------------------------------------------------------------


def test_metadata_message_has_the_documented_fields_in_order() -> None:
    message = metadata_message(TABLE, JSON, "2024-02-29T13:14:15.000")
    assert list(message) == ["schemaId", "lineage", "tableStructure", "dataSchema"]
    assert message["lineage"] == {"server": "rep-1", "task": "orders-task", "schema": "sales", "table": "orders",
                                  "tableVersion": 1, "timestamp": "2024-02-29T13:14:15.000"}
    assert list(message["lineage"]) == ["server", "task", "schema", "table", "tableVersion", "timestamp"]
    columns = message["tableStructure"]["tableColumns"]
    assert list(columns) == [column.name for column in COLUMNS]
    assert columns["amount"] == {"ordinal": 3, "type": "NUMERIC", "length": 0, "precision": 10, "scale": 2,
                                 "primaryKeyPosition": 0}
    assert columns["region"]["primaryKeyPosition"] == 2 and columns["region"]["length"] == 8
    assert [entry["ordinal"] for entry in columns.values()] == list(range(1, len(COLUMNS) + 1))


def test_metadata_data_schema_is_a_json_string_of_a_valid_avro_schema_with_qlik_headers() -> None:
    schema = json.loads(metadata_message(TABLE, JSON, "t")["dataSchema"])
    fastavro.parse_schema(schema)
    assert [field["name"] for field in schema["fields"]] == ["data", "beforeData", "headers"]
    headers = schema["fields"][2]["type"]
    assert headers["namespace"] == "com.attunity.queue.msg"
    assert [field["name"] for field in headers["fields"]] == [
        "operation", "changeSequence", "timestamp", "streamPosition", "transactionId", "changeMask", "columnMask",
        "transactionEventCounter", "transactionLastEvent"]
    data_fields = {field["name"]: field["type"] for field in schema["fields"][0]["type"]["fields"]}
    assert data_fields["amount"] == ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]
    assert data_fields["created"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert data_fields["id"] == ["null", "int"] and data_fields["big"] == ["null", "long"]


def test_metadata_message_round_trips_through_avro_and_json() -> None:
    message = metadata_message(TABLE, AVRO, "2024-02-29T13:14:15.000")
    assert decode_avro(encode_metadata(message, AVRO), METADATA_AVRO_SCHEMA) == message
    assert json.loads(encode_metadata(message, JSON)) == message


# ---- schema ids -------------------------------------------------------------------------------------------------


def test_schema_id_is_stable_for_the_same_structure_and_ignores_the_table_version() -> None:
    same = QlikTable("sales", "orders", tuple(COLUMNS))
    assert schema_id(TABLE) == schema_id(same)
    assert schema_id(TABLE) == schema_id(QlikTable("sales", "orders", COLUMNS, table_version=5))
    assert len(schema_id(TABLE)) == 32 and schema_id(TABLE) == schema_id(TABLE).upper()


def test_schema_id_changes_when_a_column_is_added_with_the_next_table_version() -> None:
    evolved = QlikTable("sales", "orders", (*COLUMNS, QlikColumn("channel", "STRING", length=20)), 2)
    before, after = metadata_message(TABLE, JSON, "t"), metadata_message(evolved, JSON, "t")
    assert before["schemaId"] != after["schemaId"]
    assert after["lineage"]["tableVersion"] == before["lineage"]["tableVersion"] + 1
    assert after["tableStructure"]["tableColumns"]["channel"]["ordinal"] == len(COLUMNS) + 1


def test_schema_id_changes_when_only_a_column_length_changes() -> None:
    wider = QlikTable("sales", "orders", (COLUMNS[0], QlikColumn("region", "STRING", length=16,
                                                                  primary_key_position=2), *COLUMNS[2:]))
    assert schema_id(wider) != schema_id(TABLE)


# ---- masks ------------------------------------------------------------------------------------------------------


def test_mask_0b_means_ordinals_1_2_and_4_changed_as_the_seed_example_says() -> None:
    table = QlikTable("s", "t", tuple(QlikColumn(f"c{i}", "INT4") for i in range(1, 5)))
    assert mask_hex(table, {"c1", "c2", "c4"}) == "0B"
    assert bits(table, "0B") == {"c1", "c2", "c4"}


def test_masks_are_written_most_significant_digit_first_in_columns_over_8_plus_1_bytes() -> None:
    # Qlik's own output for a 16-column table: columnMask "00FFFF", ordinals 8 and 16 changed -> "008080".
    table = QlikTable("s", "t", tuple(QlikColumn(f"c{i}", "STRING", length=5) for i in range(1, 17)))
    assert mask_hex(table, set(table.column_names)) == "00FFFF"
    assert mask_hex(table, {"c8", "c16"}) == "008080"
    three = QlikTable("s", "t", tuple(QlikColumn(f"c{i}", "INT4") for i in range(1, 4)))
    assert mask_hex(three, {"c1", "c2", "c3"}) == "07" and mask_hex(three, set()) == "00"


def test_insert_sets_every_inserted_column_except_lobs_in_the_change_mask() -> None:
    headers = data_message(TABLE, change("INSERT", ROW), JSON)["headers"]
    assert bits(TABLE, headers["columnMask"]) == set(TABLE.column_names)
    assert bits(TABLE, headers["changeMask"]) == set(TABLE.column_names) - {"note", "payload"}


def test_column_left_out_of_the_data_is_absent_from_the_column_mask_and_written_as_null() -> None:
    partial = {name: value for name, value in ROW.items() if name != "ratio"}
    message = data_message(TABLE, change("UPDATE", partial), JSON)
    assert "ratio" not in bits(TABLE, message["headers"]["columnMask"])
    assert "ratio" not in bits(TABLE, message["headers"]["changeMask"])
    assert message["data"]["ratio"] is None and list(message["data"]) == list(TABLE.column_names)


def test_delete_sets_only_the_primary_key_columns_in_the_change_mask() -> None:
    message = data_message(TABLE, change("DELETE", ROW), JSON)
    assert bits(TABLE, message["headers"]["changeMask"]) == {"id", "region"}
    assert bits(TABLE, message["headers"]["columnMask"]) == set(TABLE.column_names)
    assert message["data"]["id"] == 7 and message["beforeData"] is None


def test_update_sets_the_columns_whose_value_changed_but_never_a_lob() -> None:
    after = {**ROW, "amount": Decimal("13.00"), "note": "edited", "flag": False}
    message = data_message(TABLE, change("UPDATE", after, ROW), JSON)
    assert bits(TABLE, message["headers"]["changeMask"]) == {"amount", "flag"}
    assert message["beforeData"] == ROW and message["data"]["note"] == "edited"


def test_update_without_a_before_image_sets_every_present_column_but_lobs() -> None:
    message = data_message(TABLE, change("UPDATE", ROW), JSON)
    assert bits(TABLE, message["headers"]["changeMask"]) == set(TABLE.column_names) - {"note", "payload"}
    assert message["beforeData"] is None


def test_update_uses_the_changed_columns_it_is_given() -> None:
    given = change("UPDATE", ROW, changed_columns=frozenset({"born", "note"}))
    assert bits(TABLE, data_message(TABLE, given, JSON)["headers"]["changeMask"]) == {"born"}


def test_update_treats_true_and_1_as_different_values() -> None:
    table = QlikTable("s", "t", (QlikColumn("k", "INT4", primary_key_position=1), QlikColumn("b", "BOOLEAN")))
    message = data_message(table, change("UPDATE", {"k": 1, "b": True}, {"k": 1, "b": 1}), JSON)
    assert bits(table, message["headers"]["changeMask"]) == {"b"}


def test_refresh_carries_empty_cdc_headers_and_null_masks_as_qlik_full_load_does() -> None:
    message = data_message(TABLE, QlikChange("REFRESH", ROW), JSON)
    assert message["headers"] == {
        "operation": "REFRESH", "changeSequence": "", "timestamp": "", "streamPosition": "", "transactionId": "",
        "changeMask": None, "columnMask": None, "transactionEventCounter": None, "transactionLastEvent": None}


def test_cdc_headers_are_copied_from_the_change_in_documented_order() -> None:
    headers = data_message(TABLE, change("INSERT", ROW), JSON)["headers"]
    assert list(headers) == ["operation", "changeSequence", "timestamp", "streamPosition", "transactionId",
                             "changeMask", "columnMask", "transactionEventCounter", "transactionLastEvent"]
    assert headers["transactionId"] == CDC["transaction_id"] and headers["transactionEventCounter"] == 2
    assert headers["transactionLastEvent"] is True


@pytest.mark.parametrize("operation", ["INSERT", "DELETE", "REFRESH"])
def test_before_data_is_only_accepted_on_update(operation: str) -> None:
    with pytest.raises(ValueError, match="beforeData applies to UPDATE only"):
        change(operation, ROW, ROW)
    assert data_message(TABLE, change(operation, ROW), JSON)["beforeData"] is None


def test_data_naming_an_unknown_column_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"\['ghost'\]"):
        data_message(TABLE, change("INSERT", {**ROW, "ghost": 1}), JSON)


# ---- encoders ---------------------------------------------------------------------------------------------------


def test_json_encoding_is_compact_in_documented_order_with_qlik_value_renderings() -> None:
    encoded = encode_data(TABLE, data_message(TABLE, change("INSERT", ROW), JSON), JSON)
    assert b": " not in encoded and b", " not in encoded
    decoded = json.loads(encoded)
    assert list(decoded) == ["schema", "table", "headers", "data", "beforeData"]
    assert decoded["data"] == {
        "id": 7, "region": "EU", "amount": "12.50", "note": "long text", "created": "2024-02-29 13:14:15.123456",
        "payload": "00AB", "born": "1999-12-31", "at": "08:30:00.250", "flag": True, "ratio": 0.25, "big": 2**40}


def test_json_renders_non_finite_doubles_as_strings() -> None:
    table = QlikTable("s", "t", (QlikColumn("k", "INT4", primary_key_position=1), QlikColumn("r", "REAL8")))
    encoded = encode_data(table, data_message(table, change("INSERT", {"k": 1, "r": float("nan")})), JSON)
    assert json.loads(encoded)["data"]["r"] == "NaN"


def _avro_roundtrip(message: dict[str, Any]) -> dict[str, Any]:
    data_schema = metadata_message(TABLE, AVRO, "t")["dataSchema"]
    decoded: dict[str, Any] = decode_avro(encode_data(TABLE, message, AVRO), data_schema)
    return decoded


@pytest.mark.parametrize("operation", ["INSERT", "UPDATE", "DELETE"])
def test_avro_data_message_decodes_with_the_metadata_data_schema_to_equal_values(operation: str) -> None:
    before = {**ROW, "amount": Decimal("1.05"), "created": None} if operation == "UPDATE" else None
    message = data_message(TABLE, change(operation, ROW, before), AVRO)
    decoded = _avro_roundtrip(message)
    assert decoded["data"] == message["data"]
    assert decoded["beforeData"] == message["beforeData"]
    expected_headers = {**message["headers"], "changeMask": bytes.fromhex(message["headers"]["changeMask"]),
                        "columnMask": bytes.fromhex(message["headers"]["columnMask"])}
    assert decoded["headers"] == expected_headers


def test_avro_refresh_message_round_trips_with_null_masks() -> None:
    message = data_message(TABLE, QlikChange("REFRESH", ROW), AVRO)
    decoded = _avro_roundtrip(message)
    assert decoded["headers"] == message["headers"] and decoded["data"] == message["data"]


def test_avro_writes_numeric_at_the_column_scale() -> None:
    message = data_message(TABLE, change("INSERT", {**ROW, "amount": Decimal("3.1")}), AVRO)
    assert _avro_roundtrip(message)["data"]["amount"] == Decimal("3.10")


def test_avro_envelope_names_the_schema_id_of_a_data_message() -> None:
    metadata = metadata_message(TABLE, AVRO, "t")
    payload = encode_data(TABLE, data_message(TABLE, change("INSERT", ROW)), AVRO)
    envelope = decode_avro(avro_envelope("DT", payload, message_schema_id=metadata["schemaId"]), ENVELOPE_AVRO_SCHEMA)
    assert envelope["magic"] == b"atMSG" and envelope["type"] == "DT" and envelope["messageSchema"] is None
    assert envelope["messageSchemaId"] == metadata["schemaId"]
    assert decode_avro(envelope["message"], metadata["dataSchema"])["data"]["id"] == 7
    with pytest.raises(ValueError, match="exactly one"):
        avro_envelope("MD", payload)


def test_json_envelope_wraps_the_message_like_qlik_kafka_output() -> None:
    wrapped = json_envelope("MD", {"schemaId": "X"})
    assert list(wrapped) == ["magic", "type", "headers", "messageSchemaId", "messageSchema", "message"]
    assert wrapped["magic"] == "atMSG" and wrapped["message"] == {"schemaId": "X"}


def test_format_timestamp_writes_utc_milliseconds_like_qlik_headers() -> None:
    assert format_timestamp(1_709_212_455_123) == "2024-02-29T13:14:15.123"
    moment = datetime.datetime(2024, 2, 29, 15, 14, 15, 123999, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert format_timestamp(moment) == "2024-02-29T13:14:15.123"
    with pytest.raises(ValueError, match="timezone-aware"):
        format_timestamp(datetime.datetime(2024, 1, 1))
