"""Debezium PostgreSQL connector messages: keys, envelopes, tombstones, heartbeats, as JsonConverter writes them.

The format is that of Debezium 2.5 (the release the YugabyteDB connector of seed 002 is built on); see
docs/decisions/0002-debezium-postgres-message-format.md for the choices where the sources disagree.

Example::

    fmt = TableFormat(table, FormatSettings(topic_prefix="inventory", database="shop"))
    fmt.key_json(event.after)      # '{"schema":{...},"payload":{"id":1}}'
    fmt.value_json(event, ts_ms)   # '{"schema":{...},"payload":{"before":null,"after":{...},...}}'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from cdckit.events import UNAVAILABLE, ChangeEvent, Row
from cdckit.formats.debezium.postgres_types import ColumnType, MappingSettings, map_column

DEBEZIUM_VERSION = "2.5.2.Final"
UNAVAILABLE_VALUE = "__debezium_unavailable_value"

SOURCE_SCHEMA_NAME = "io.debezium.connector.postgresql.Source"
_SNAPSHOT_ENUM = {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                  "parameters": {"allowed": "true,last,false,incremental"}, "default": "false",
                  "field": "snapshot"}


def _field(type_: str, name: str, optional: bool) -> dict[str, Any]:
    return {"type": type_, "optional": optional, "field": name}


SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _field("string", "version", False),
        _field("string", "connector", False),
        _field("string", "name", False),
        _field("int64", "ts_ms", False),
        _SNAPSHOT_ENUM,
        _field("string", "db", False),
        _field("string", "sequence", True),
        _field("string", "schema", False),
        _field("string", "table", False),
        _field("int64", "txId", True),
        _field("int64", "lsn", True),
        _field("int64", "xmin", True),
    ],
    "optional": False,
    "name": SOURCE_SCHEMA_NAME,
    "field": "source",
}

TRANSACTION_BLOCK_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _field("string", "id", False),
        _field("int64", "total_order", False),
        _field("int64", "data_collection_order", False),
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


class TableLike(Protocol):
    @property
    def schema(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def key_columns(self) -> tuple[str, ...]: ...
    @property
    def columns(self) -> tuple[ColumnType, ...]: ...

    def emitted_columns(self) -> tuple[ColumnType, ...]: ...


@dataclass(frozen=True)
class FormatSettings:
    topic_prefix: str
    database: str
    connector: str = "postgresql"  # source.connector: "postgresql" or "YugabyteDB"
    key_schemas_enable: bool = True
    value_schemas_enable: bool = True
    mapping: MappingSettings = field(default_factory=MappingSettings)


def format_settings(options: Mapping[str, str]) -> FormatSettings:
    """Format settings from connector properties (strings, as Spark options carry them)."""
    def flag(name: str) -> bool:
        return options.get(name, "true").strip().lower() in ("true", "1", "yes", "on")

    yugabyte = options.get("connector.class", "").endswith("YugabyteDBConnector")
    return FormatSettings(
        topic_prefix=options["topic.prefix"],
        database=options["database.dbname"],
        connector="YugabyteDB" if yugabyte else "postgresql",
        key_schemas_enable=flag("key.converter.schemas.enable"),
        value_schemas_enable=flag("value.converter.schemas.enable"),
        mapping=MappingSettings(
            time_precision_mode=options.get("time.precision.mode", "adaptive"),
            decimal_handling_mode=options.get("decimal.handling.mode", "precise"),
            binary_handling_mode=options.get("binary.handling.mode", "bytes"),
            interval_handling_mode=options.get("interval.handling.mode", "numeric"),
            hstore_handling_mode=options.get("hstore.handling.mode", "json"),
        ),
    )


def dumps(document: object) -> str:
    """Compact JSON, keys in insertion order, as Kafka Connect's JsonConverter writes it."""
    return orjson.dumps(document).decode("utf-8")


def topic_name(prefix: str, schema: str, table: str) -> str:
    return f"{prefix}.{schema}.{table}"


class TableFormat:
    """Key and value schemas of one table, built once, and the messages of its events."""

    def __init__(self, table: TableLike, settings: FormatSettings) -> None:
        self.settings = settings
        self.table = table
        self.topic = topic_name(settings.topic_prefix, table.schema, table.name)
        by_name = {column.name: column for column in table.columns}
        key_columns = [by_name[name] for name in table.key_columns]
        value_columns = list(table.emitted_columns())
        self._key_fields = self._map(key_columns, force_required=True)
        self._value_fields = self._map(value_columns, force_required=False)
        base = f"{settings.topic_prefix}.{table.schema}.{table.name}"
        self.key_schema = {"type": "struct", "fields": [f.schema for _, f in self._key_fields],
                           "optional": False, "name": f"{base}.Key"}
        row_schema = {"type": "struct", "fields": [f.schema for _, f in self._value_fields],
                      "optional": True, "name": f"{base}.Value"}
        self.value_schema = {
            "type": "struct",
            "fields": [
                {**row_schema, "field": "before"},
                {**row_schema, "field": "after"},
                SOURCE_SCHEMA,
                _field("string", "op", False),
                _field("int64", "ts_ms", True),
                TRANSACTION_BLOCK_SCHEMA,
            ],
            "optional": False,
            "name": f"{base}.Envelope",
        }
        self._string_columns = {c.name for c in value_columns if _is_textual(c)}
        # The schemas are the same in every message of the table: serialize them once.
        self._key_prefix = '{"schema":' + dumps(self.key_schema) + ',"payload":'
        self._value_prefix = '{"schema":' + dumps(self.value_schema) + ',"payload":'

    def _map(self, columns: Sequence[ColumnType], force_required: bool) -> list[tuple[str, Any]]:
        mapped = []
        for column in columns:
            if force_required and column.optional:
                column = ColumnType(column.name, column.type_name, column.type_oid, column.modifier, False,
                                    column.enum_values)
            mapped.append((column.name, map_column(column, self.settings.mapping)))
        return mapped

    # -- payloads ----------------------------------------------------------------------------------
    def key_payload(self, row: Row) -> dict[str, Any]:
        return {name: _convert(mapped.convert, row.get(name)) for name, mapped in self._key_fields}

    def row_payload(self, row: Row | None) -> dict[str, Any] | None:
        if row is None:
            return None
        out: dict[str, Any] = {}
        for name, mapped in self._value_fields:
            value = row.get(name)
            if value is UNAVAILABLE:
                out[name] = UNAVAILABLE_VALUE if name in self._string_columns else None
            else:
                out[name] = _convert(mapped.convert, value)
        return out

    def source_payload(self, event: ChangeEvent) -> dict[str, Any]:
        last_commit, current = event.sequence
        sequence = None
        if last_commit is not None or current is not None:
            sequence = dumps([None if last_commit is None else str(last_commit),
                              None if current is None else str(current)])
        return {
            "version": DEBEZIUM_VERSION,
            "connector": self.settings.connector,
            "name": self.settings.topic_prefix,
            "ts_ms": event.source_ts_ms,
            "snapshot": event.snapshot,
            "db": self.settings.database,
            "sequence": sequence,
            "schema": event.schema,
            "table": event.table,
            "txId": event.tx_id,
            "lsn": event.position.lsn,
            "xmin": None,
        }

    # -- serialized messages -----------------------------------------------------------------------
    def key_json(self, row: Row) -> str:
        payload = dumps(self.key_payload(row))
        return self._key_prefix + payload + "}" if self.settings.key_schemas_enable else payload

    def value_json(self, event: ChangeEvent, processed_ts_ms: int) -> str:
        payload = {
            "before": self.row_payload(event.before),
            "after": self.row_payload(event.after),
            "source": self.source_payload(event),
            "op": event.op,
            "ts_ms": processed_ts_ms,
            "transaction": None,
        }
        text = dumps(payload)
        return self._value_prefix + text + "}" if self.settings.value_schemas_enable else text


def _convert(convert: Callable[[str | None], Any], value: object) -> Any:
    if value is None:
        return None
    return convert(str(value))


def _is_textual(column: ColumnType) -> bool:
    return column.type_name in {"text", "varchar", "bpchar", "char", "name", "json", "jsonb", "xml", "citext"}


HEARTBEAT_KEY_SCHEMA = {"type": "struct", "fields": [_field("string", "serverName", False)], "optional": False,
                        "name": "io.debezium.connector.common.ServerNameKey"}
HEARTBEAT_VALUE_SCHEMA = {"type": "struct", "fields": [_field("int64", "ts_ms", False)], "optional": False,
                          "name": "io.debezium.connector.common.Heartbeat"}


def heartbeat_topic(prefix: str, heartbeat_prefix: str) -> str:
    return f"{heartbeat_prefix}.{prefix}"


def heartbeat_messages(settings: FormatSettings, ts_ms: int) -> tuple[str, str]:
    """(key, value) of a heartbeat record, as Debezium's heartbeat topic carries them."""
    key: dict[str, Any] = {"serverName": settings.topic_prefix}
    value: dict[str, Any] = {"ts_ms": ts_ms}
    key_doc = {"schema": HEARTBEAT_KEY_SCHEMA, "payload": key} if settings.key_schemas_enable else key
    value_doc = {"schema": HEARTBEAT_VALUE_SCHEMA, "payload": value} if settings.value_schemas_enable else value
    return dumps(key_doc), dumps(value_doc)
