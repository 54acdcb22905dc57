"""Qlik Replicate's metadata and data messages (Kafka / Azure Event Hubs targets), as pure functions.

Shapes (field names and order as Qlik Replicate's "Metadata and data messages" topic lists them):

    metadata: {"schemaId", "lineage": {"server", "task", "schema", "table", "tableVersion", "timestamp"},
               "tableStructure": {"tableColumns": {<name>: {"ordinal", "type", "length", "precision", "scale",
                                                            "primaryKeyPosition"}}},
               "dataSchema": <Avro schema of data messages, as a JSON string>}
    data:     {"schema", "table", "headers": {"operation", "changeSequence", "timestamp", "streamPosition",
               "transactionId", "changeMask", "columnMask", "transactionEventCounter", "transactionLastEvent"},
               "data": {...}, "beforeData": {...} | None}

Masks are hexadecimal strings of a little-endian bitmask: bit ``ordinal - 1`` stands for the column at that
metadata ordinal, and the number is written most significant digit first, uppercase, in ``ncolumns // 8 + 1``
bytes (Qlik's own output: 3 columns -> "07", 16 columns -> "00FFFF"). So "0B" = bits 0, 1, 3 = ordinals 1, 2, 4.

The Avro dataSchema follows the record Qlik publishes: DataRecord {data: Data, beforeData: [null, Data],
headers: com.attunity.queue.msg.Headers}; schema and table names reach Avro consumers through the metadata message
that the schemaId points to. Data values use Qlik's Avro logical types (date, time-millis, timestamp-micros, decimal).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from cdckit.formats.qlik.model import OPERATIONS, QlikChange, QlikColumn, QlikSettings, QlikTable, QlikValue

__all__ = [
    "HEADERS_AVRO_SCHEMA",
    "column_mask",
    "data_message",
    "data_schema",
    "format_timestamp",
    "mask_hex",
    "metadata_message",
    "schema_id",
]

_UTC = datetime.timezone.utc

HEADERS_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Headers",
    "namespace": "com.attunity.queue.msg",
    "fields": [
        {"name": "operation", "type": {"type": "enum", "name": "operation", "symbols": list(OPERATIONS)}},
        {"name": "changeSequence", "type": "string"},
        {"name": "timestamp", "type": "string"},
        {"name": "streamPosition", "type": "string"},
        {"name": "transactionId", "type": "string"},
        {"name": "changeMask", "type": ["null", "bytes"], "default": None},
        {"name": "columnMask", "type": ["null", "bytes"], "default": None},
        {"name": "transactionEventCounter", "type": ["null", "long"], "default": None},
        {"name": "transactionLastEvent", "type": ["null", "boolean"], "default": None},
    ],
}

_AVRO_PRIMITIVES: dict[str, Any] = {
    "BOOLEAN": "boolean",
    "INT1": "int", "INT2": "int", "INT4": "int", "UINT1": "int", "UINT2": "int",
    "INT8": "long", "UINT4": "long",
    "REAL4": "float", "REAL8": "double",
    "STRING": "string", "WSTRING": "string", "CLOB": "string", "NCLOB": "string",
    "BYTES": "bytes", "BLOB": "bytes",
    "DATE": {"type": "int", "logicalType": "date"},
    "TIME": {"type": "int", "logicalType": "time-millis"},
    "DATETIME": {"type": "long", "logicalType": "timestamp-micros"},
    "UINT8": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0},
}


def _avro_type(column: QlikColumn) -> Any:
    if column.type == "NUMERIC":
        return {"type": "bytes", "logicalType": "decimal", "precision": column.precision, "scale": column.scale}
    return _AVRO_PRIMITIVES[column.type]


def _avro_name(text: str) -> str:
    """An Avro name part: [A-Za-z_][A-Za-z0-9_]*."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else "_" + cleaned


def data_schema(table: QlikTable) -> dict[str, Any]:
    """The Avro schema of the table's data messages (every column nullable, default null)."""
    for column in table.columns:
        if _avro_name(column.name) != column.name:
            raise ValueError(f"column '{column.name}' of {table.schema}.{table.table} is not a valid Avro field "
                             "name; rename it with a transformation before publishing Qlik Avro messages")
    fields = [{"name": column.name, "type": ["null", _avro_type(column)], "default": None}
              for column in table.columns]
    return {
        "type": "record",
        "name": "DataRecord",
        "namespace": f"com.attunity.queue.msg.{_avro_name(table.schema)}.{_avro_name(table.table)}",
        "fields": [
            {"name": "data", "type": {"type": "record", "name": "Data", "fields": fields}},
            {"name": "beforeData", "type": ["null", "Data"], "default": None},
            {"name": "headers", "type": HEADERS_AVRO_SCHEMA},
        ],
    }


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _table_columns(table: QlikTable) -> dict[str, dict[str, int | str]]:
    return {
        column.name: {
            "ordinal": ordinal,
            "type": column.type,
            "length": column.length,
            "precision": column.precision,
            "scale": column.scale,
            "primaryKeyPosition": column.primary_key_position,
        }
        for ordinal, column in enumerate(table.columns, start=1)
    }


def schema_id(table: QlikTable) -> str:
    """32 uppercase hex digits (MD5) of the dataSchema and the column descriptions.

    Names, order, types, lengths, precision, scale, key positions and the schema/table names feed it; the
    tableVersion, the task and the server do not, so the id changes exactly when the table structure does.
    """
    canonical = _compact([data_schema(table), _table_columns(table)])
    return hashlib.md5(canonical.encode("utf-8"), usedforsecurity=False).hexdigest().upper()


def format_timestamp(moment: datetime.datetime | int) -> str:
    """Qlik's header/lineage timestamp: UTC 'YYYY-MM-DDTHH:MM:SS.mmm' from an aware datetime or epoch millis."""
    if isinstance(moment, int):
        moment = datetime.datetime(1970, 1, 1, tzinfo=_UTC) + datetime.timedelta(milliseconds=moment)
    elif moment.tzinfo is None:
        raise ValueError("format_timestamp needs a timezone-aware datetime (or epoch milliseconds)")
    utc = moment.astimezone(_UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + f".{utc.microsecond // 1000:03d}"


def metadata_message(table: QlikTable, settings: QlikSettings, timestamp: str) -> dict[str, Any]:
    """The metadata message Qlik publishes before the first data message of each table version."""
    return {
        "schemaId": schema_id(table),
        "lineage": {
            "server": settings.server,
            "task": settings.task,
            "schema": table.schema,
            "table": table.table,
            "tableVersion": table.table_version,
            "timestamp": timestamp,
        },
        "tableStructure": {"tableColumns": _table_columns(table)},
        "dataSchema": _compact(data_schema(table)),
    }


def mask_hex(table: QlikTable, names: frozenset[str] | set[str]) -> str:
    """The hex bitmask of the named columns: bit (ordinal - 1), ``len(columns) // 8 + 1`` bytes, uppercase."""
    bits = 0
    for name in names:
        bits |= 1 << (table.ordinal(name) - 1)
    return f"{bits:0{2 * (len(table.columns) // 8 + 1)}X}"


def column_mask(table: QlikTable, row: Mapping[str, QlikValue]) -> str:
    """Columns present in the row (a null value is present; a column left out of the dict is not)."""
    return mask_hex(table, set(row))


def _changed(table: QlikTable, change: QlikChange, data: Mapping[str, QlikValue]) -> set[str]:
    if change.operation in ("INSERT", "REFRESH"):
        names = set(data)
    elif change.operation == "DELETE":
        names = {column.name for column in table.columns if column.primary_key_position > 0}
    elif change.changed_columns is not None:
        names = set(change.changed_columns)
    elif change.before_data is None:
        names = set(data)  # no before image: every delivered column may have changed
    else:
        before = change.before_data
        names = {name for name, value in data.items() if name not in before or not _same(before[name], value)}
    lobs = {column.name for column in table.columns if column.is_lob}
    return names - lobs


def _same(left: QlikValue, right: QlikValue) -> bool:
    # bool is an int subclass and Decimal('1.0') == 1: compare type as well as value.
    return type(left) is type(right) and left == right


def _check_columns(table: QlikTable, row: Mapping[str, QlikValue] | None, what: str) -> None:
    if row is None:
        return
    unknown = sorted(set(row) - set(table.column_names))
    if unknown:
        raise ValueError(f"{what} names columns {unknown} that {table.schema}.{table.table} "
                         f"(version {table.table_version}) does not have")


def _row(table: QlikTable, row: Mapping[str, QlikValue]) -> dict[str, QlikValue]:
    """All columns in ordinal order; a column the source did not deliver is written as null."""
    return {name: row.get(name) for name in table.column_names}


def data_message(table: QlikTable, change: QlikChange, settings: QlikSettings | None = None) -> dict[str, Any]:
    """The data message of one change; values stay typed Python values (the encoders render them)."""
    del settings  # the data message carries no task-level field; kept for a uniform signature
    data = change.data or {}
    _check_columns(table, data, "data")
    _check_columns(table, change.before_data, "beforeData")
    if change.changed_columns is not None:
        _check_columns(table, dict.fromkeys(change.changed_columns), "changed_columns")
    if change.operation == "REFRESH":  # full load: the CDC-only headers are empty strings and nulls
        headers: dict[str, Any] = {
            "operation": "REFRESH", "changeSequence": "", "timestamp": "", "streamPosition": "",
            "transactionId": "", "changeMask": None, "columnMask": None,
            "transactionEventCounter": None, "transactionLastEvent": None,
        }
    else:
        headers = {
            "operation": change.operation,
            "changeSequence": change.change_sequence,
            "timestamp": change.timestamp,
            "streamPosition": change.stream_position,
            "transactionId": change.transaction_id,
            "changeMask": mask_hex(table, _changed(table, change, data)),
            "columnMask": column_mask(table, data),
            "transactionEventCounter": change.transaction_event_counter,
            "transactionLastEvent": change.transaction_last_event,
        }
    before = _row(table, change.before_data) if change.before_data is not None else None  # UPDATE only (model)
    return {
        "schema": table.schema,
        "table": table.table,
        "headers": headers,
        "data": _row(table, data),
        "beforeData": before,
    }
