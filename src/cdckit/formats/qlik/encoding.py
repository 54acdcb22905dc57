"""Bytes for Qlik messages: compact JSON, Avro binary (fastavro), and Qlik's "atMSG" message envelope.

JSON renders values as Qlik's Kafka / Event Hubs targets document: numbers for INT*/UINT1/UINT2/UINT4/REAL*,
booleans for BOOLEAN, strings for everything else: NUMERIC and UINT8 in plain decimal notation, BYTES/BLOB as
uppercase hexadecimal digits, DATE 'YYYY-MM-DD', TIME 'HH:MM:SS[.mmm]', DATETIME 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC,
as Qlik writes it, e.g. "2023-03-21 14:34:21.000000"). Non-finite floats become the strings "NaN", "Infinity",
"-Infinity" (JSON has no literal for them).

Avro: data messages are written with the metadata message's dataSchema (schemaless, no container header); masks
become the bytes of their hex strings. Metadata messages are self-describing in Qlik's envelope, so they are Avro too,
with METADATA_AVRO_SCHEMA (cdckit's rendering of the documented fields; Qlik does not publish its own).
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import math
from typing import Any, Literal

import fastavro

from cdckit.formats.qlik.messages import data_schema
from cdckit.formats.qlik.model import QlikColumn, QlikSettings, QlikTable, QlikValue

__all__ = [
    "ENVELOPE_AVRO_SCHEMA",
    "METADATA_AVRO_SCHEMA",
    "avro_envelope",
    "decode_avro",
    "encode_data",
    "encode_metadata",
    "json_envelope",
    "json_value",
    "render_json",
]

MAGIC = b"atMSG"
MessageKind = Literal["MD", "DT"]  # metadata message, data message

ENVELOPE_AVRO_SCHEMA: dict[str, Any] = {  # as documented in "The Replicate envelope"
    "type": "record",
    "name": "MessageEnvelope",
    "fields": [
        {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 5}},
        {"name": "type", "type": "string"},
        {"name": "headers", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "messageSchemaId", "type": ["null", "string"]},
        {"name": "messageSchema", "type": ["null", "string"]},
        {"name": "message", "type": "bytes"},
    ],
}

_COLUMN_FIELDS = ("ordinal", "type", "length", "precision", "scale", "primaryKeyPosition")
METADATA_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "MetadataRecord",
    "namespace": "com.attunity.queue.msg",
    "fields": [
        {"name": "schemaId", "type": "string"},
        {"name": "lineage", "type": {"type": "record", "name": "Lineage", "fields": [
            {"name": "server", "type": "string"},
            {"name": "task", "type": "string"},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "tableVersion", "type": "int"},
            {"name": "timestamp", "type": "string"},
        ]}},
        {"name": "tableStructure", "type": {"type": "record", "name": "TableStructure", "fields": [
            {"name": "tableColumns", "type": {"type": "map", "values": {
                "type": "record", "name": "Column",
                "fields": [{"name": name, "type": "string" if name == "type" else "int"} for name in _COLUMN_FIELDS],
            }}},
        ]}},
        {"name": "dataSchema", "type": "string"},
    ],
}

_JSON_NUMBER_TYPES = frozenset({"INT1", "INT2", "INT4", "INT8", "UINT1", "UINT2", "UINT4"})
_WIDE = decimal.Context(prec=100)


def _compact_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _plain(value: decimal.Decimal | int) -> str:
    return format(decimal.Decimal(value), "f")


def _datetime_text(value: datetime.datetime) -> str:
    utc = value.astimezone(datetime.timezone.utc) if value.tzinfo is not None else value
    return (f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d} "
            f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}.{utc.microsecond:06d}")


def _time_text(value: datetime.time) -> str:
    text = f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    return text + (f".{value.microsecond // 1000:03d}" if value.microsecond else "")


def json_value(column: QlikColumn, value: QlikValue) -> Any:
    """One value as Qlik's JSON messages render it for the column's Qlik type."""
    kind = column.type
    if value is None:
        return None
    if kind == "BOOLEAN":
        return bool(value)
    if kind in _JSON_NUMBER_TYPES:
        return int(value)  # type: ignore[arg-type]
    if kind in ("REAL4", "REAL8"):
        number = float(value)  # type: ignore[arg-type]
        if math.isfinite(number):
            return number
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    if kind in ("NUMERIC", "UINT8"):
        return _plain(value)  # type: ignore[arg-type]
    if kind in ("BYTES", "BLOB"):
        return bytes(value).hex().upper()  # type: ignore[arg-type]
    if isinstance(value, datetime.datetime):
        return _datetime_text(value)
    if isinstance(value, datetime.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, datetime.time):
        return _time_text(value)
    return str(value)


def _json_row(table: QlikTable, row: dict[str, QlikValue] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {column.name: json_value(column, row.get(column.name)) for column in table.columns}


def render_json(table: QlikTable, message: dict[str, Any]) -> dict[str, Any]:
    """A data message with every value rendered as Qlik's JSON shows it (key order kept)."""
    rendered = dict(message)
    rendered["data"] = _json_row(table, message["data"])
    rendered["beforeData"] = _json_row(table, message["beforeData"])
    return rendered


def _avro_value(column: QlikColumn, value: QlikValue) -> Any:
    if value is None:
        return None
    if column.type in ("NUMERIC", "UINT8"):
        number = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
        if not number.is_finite():
            return None
        return number.quantize(decimal.Decimal(1).scaleb(-column.scale), decimal.ROUND_HALF_UP, _WIDE)
    if column.type == "REAL4" or column.type == "REAL8":
        return float(value)  # type: ignore[arg-type]
    return value


def _avro_row(table: QlikTable, row: dict[str, QlikValue] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {column.name: _avro_value(column, row.get(column.name)) for column in table.columns}


def _mask_bytes(mask: str | None) -> bytes | None:
    return None if mask is None else bytes.fromhex(mask)


def _avro_bytes(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), record)
    return buffer.getvalue()


def encode_metadata(message: dict[str, Any], settings: QlikSettings) -> bytes:
    """The metadata message as compact JSON or as Avro binary (METADATA_AVRO_SCHEMA)."""
    if settings.encoding == "json":
        return _compact_bytes(message)
    return _avro_bytes(METADATA_AVRO_SCHEMA, message)


def encode_data(table: QlikTable, message: dict[str, Any], settings: QlikSettings) -> bytes:
    """The data message as compact JSON (documented key order) or as Avro binary with the table's dataSchema."""
    if settings.encoding == "json":
        return _compact_bytes(render_json(table, message))
    headers = dict(message["headers"])
    headers["changeMask"] = _mask_bytes(headers["changeMask"])
    headers["columnMask"] = _mask_bytes(headers["columnMask"])
    record = {
        "data": _avro_row(table, message["data"]),
        "beforeData": _avro_row(table, message["beforeData"]),
        "headers": headers,
    }
    return _avro_bytes(data_schema(table), record)


def decode_avro(payload: bytes, schema: dict[str, Any] | str) -> Any:
    """Read one schemaless Avro record (a data message with the metadata's dataSchema, or a metadata message)."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(parsed), None)


def json_envelope(kind: MessageKind, message: dict[str, Any]) -> dict[str, Any]:
    """Qlik's JSON envelope, as its Kafka target writes it: the message under "message", schema fields null."""
    return {"magic": MAGIC.decode("ascii"), "type": kind, "headers": None, "messageSchemaId": None,
            "messageSchema": None, "message": message}


def avro_envelope(kind: MessageKind, payload: bytes, *, message_schema_id: str | None = None,
                  message_schema: str | None = None) -> bytes:
    """Qlik's Avro envelope around an Avro payload: a data message names its schemaId, a metadata message embeds
    its schema (the two fields are exclusive)."""
    if (message_schema_id is None) == (message_schema is None):
        raise ValueError("an envelope carries exactly one of message_schema_id and message_schema")
    record = {"magic": MAGIC, "type": kind, "headers": None, "messageSchemaId": message_schema_id,
              "messageSchema": message_schema, "message": payload}
    return _avro_bytes(ENVELOPE_AVRO_SCHEMA, record)
