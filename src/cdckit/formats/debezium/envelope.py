"""Debezium data-change messages: keys, envelopes, tombstones, as Kafka Connect's JsonConverter writes them.

One ``TableFormat`` per captured table builds the key and value schemas once and turns neutral change events
into message text. The connector (PostgreSQL, YugabyteDB, SQL Server) decides the ``source`` block, the schema
and topic names and the type mapping; see docs/decisions/0002 and 0006.

Example::

    fmt = TableFormat(table, FormatSettings(topic_prefix="inventory", database="shop"))
    fmt.key_json(event.after)      # '{"schema":{...},"payload":{"id":1}}'
    fmt.value_json(event, ts_ms)   # '{"schema":{...},"payload":{"before":null,"after":{...},...}}'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from cdckit.errors import TopicCollisionError, UnsupportedValueError
from cdckit.events import UNAVAILABLE, ChangeEvent, Row
from cdckit.formats.debezium.column_mappers import (
    ColumnMapping,
    ColumnRule,
    column_mapping,
    emitted_key_columns,
    parse_message_key_columns,
    parse_rules,
)
from cdckit.formats.debezium.naming import adjust_name, adjust_schema_name, data_change_topic
from cdckit.formats.debezium.pg_toast import PLACEHOLDER, unavailable_value
from cdckit.formats.debezium.postgres_types import ColumnType, MappedField, MappingSettings, map_column
from cdckit.formats.debezium.source import PostgresSource, SourceBlock, SqlServerSource
from cdckit.formats.debezium.source import field as _field
from cdckit.formats.debezium.sqlserver_types import (
    SqlServerColumn,
    SqlServerMappingSettings,
    map_sqlserver_column,
)

logger = logging.getLogger(__name__)
_DROPPED_WARNED: set[tuple[str, str, str, str]] = set()  # (schema, table, column, type) warned of in this process

TRANSACTION_BLOCK_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [_field("string", "id", False), _field("int64", "total_order", False),
               _field("int64", "data_collection_order", False)],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}

_PG_CHARACTER = {"text", "varchar", "bpchar", "char", "name", "citext"}
_MSSQL_CHARACTER = {"char", "varchar", "text", "nchar", "nvarchar", "ntext"}

AnyColumn = ColumnType | SqlServerColumn


class TableLike(Protocol):
    @property
    def schema(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def key_columns(self) -> tuple[str, ...]: ...
    @property
    def columns(self) -> Sequence[AnyColumn]: ...

    def emitted_columns(self) -> Sequence[AnyColumn]: ...


@dataclass(frozen=True)
class FormatSettings:
    topic_prefix: str
    database: str
    connector: str = "postgresql"  # source.connector: "postgresql", "YugabyteDB" or "sqlserver"
    key_schemas_enable: bool = True
    value_schemas_enable: bool = True
    mapping: MappingSettings = field(default_factory=MappingSettings)
    sqlserver_mapping: SqlServerMappingSettings = field(default_factory=SqlServerMappingSettings)
    schema_name_adjustment: str = "none"
    field_name_adjustment: str = "none"
    column_rules: tuple[ColumnRule, ...] = ()
    message_key_columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    wrap_values: bool = False  # yboutput: every column as {"value": v, "set": true}, unsent columns null
    debezium_format: str = "2.5"  # cdckit.debezium.format: whose records, Debezium 2.5.2's or 3.6.0's

    @property
    def is_sqlserver(self) -> bool:
        return self.connector == "sqlserver"


def format_settings(options: Mapping[str, str]) -> FormatSettings:
    """Format settings from connector properties (strings, as Spark options carry them)."""
    def flag(name: str, default: str = "true") -> bool:
        return options.get(name, default).strip().lower() in ("true", "1", "yes", "on")

    connector_class = options.get("connector.class", "")
    connector = ("sqlserver" if connector_class.endswith("SqlServerConnector")
                 else "YugabyteDB" if connector_class.endswith("YugabyteDBConnector") else "postgresql")
    return FormatSettings(
        topic_prefix=options["topic.prefix"],
        database=options.get("database.dbname", ""),
        connector=connector,
        key_schemas_enable=flag("key.converter.schemas.enable"),
        value_schemas_enable=flag("value.converter.schemas.enable"),
        mapping=MappingSettings(
            time_precision_mode=options.get("time.precision.mode", "adaptive"),
            decimal_handling_mode=options.get("decimal.handling.mode", "precise"),
            binary_handling_mode=options.get("binary.handling.mode", "bytes"),
            interval_handling_mode=options.get("interval.handling.mode", "numeric"),
            hstore_handling_mode=options.get("hstore.handling.mode", "json"),
        ),
        sqlserver_mapping=SqlServerMappingSettings(
            time_precision_mode=options.get("time.precision.mode", "adaptive"),
            decimal_handling_mode=options.get("decimal.handling.mode", "precise"),
            binary_handling_mode=options.get("binary.handling.mode", "bytes"),
        ),
        schema_name_adjustment=options.get("schema.name.adjustment.mode", "none"),
        field_name_adjustment=options.get("field.name.adjustment.mode", "none"),
        column_rules=parse_rules(options),
        message_key_columns=parse_message_key_columns(options.get("message.key.columns", "")),
        wrap_values=options.get("plugin.name", "pgoutput") == "yboutput",
        debezium_format=options.get("cdckit.debezium.format", "2.5"),
    )


# Where orjson's text differs from Jackson's (Kafka Connect's JsonConverter): Jackson writes a character
# outside the Basic Multilingual Plane as an escaped surrogate pair and a control character's escape in upper
# case hex ('\uD83D\uDE00', '\u001F'); orjson writes the first as UTF-8 and the second in lower case. An
# escaped backslash is matched first, so text that merely looks like an escape is left alone.
_JACKSON_DIFFERENCES = re.compile(r"\\\\|\\u00([0-9a-f]{2})|([\U00010000-\U0010FFFF])")


def _as_jackson(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return "\\u00" + match.group(1).upper()
    if match.group(2) is not None:
        code = ord(match.group(2)) - 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return match.group(0)


def dumps(document: object) -> str:
    """Compact JSON, keys in insertion order, byte for byte as Kafka Connect's JsonConverter writes it."""
    text = orjson.dumps(document).decode("utf-8")
    if "\\u" in text or not text.isascii():
        return _JACKSON_DIFFERENCES.sub(_as_jackson, text)
    return text


def topic_name(settings: FormatSettings, schema: str, table: str, database: str = "") -> str:
    """A table's topic, as Debezium names it: ``<prefix>.<schema>.<table>`` (SQL Server:
    ``<prefix>.<database>.<schema>.<table>``), every character outside ``[A-Za-z0-9._-]`` replaced with ``_``
    (``naming.data_change_topic``)."""
    if settings.is_sqlserver:
        return data_change_topic(settings.topic_prefix, (database or settings.database, schema, table))
    return data_change_topic(settings.topic_prefix, (schema, table))


def table_label(parts: Sequence[str]) -> str:
    """A table's name for a message, each part quoted as SQL quotes identifiers (``"app"."a b"``), so a name with
    dots stays unambiguous, and characters that do not print escaped, so the message stays one line."""
    quoted = ".".join('"' + part.replace('"', '""') + '"' for part in parts)
    return "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in quoted)


def check_distinct_topics(tables: Iterable[tuple[Sequence[str], str]]) -> None:
    """Refuse two captured tables that would write to one topic (``TopicCollisionError``, one line naming both):
    ``tables`` holds each table's name parts (schema and table; SQL Server: database first) and its topic. Topic
    names replace characters (``topic_name``), so ``app."a b"`` and ``app.a_b`` are both ``<prefix>.app.a_b``, and
    a dot in a name makes ``"app"."x.y"`` and ``"app.x"."y"`` one topic too."""
    seen: dict[str, tuple[str, ...]] = {}
    for parts, topic in tables:
        other = seen.setdefault(topic, tuple(parts))
        if other != tuple(parts):
            raise TopicCollisionError(
                f"captured tables {table_label(other)} and {table_label(parts)} would both write to topic {topic} "
                f"(topic names replace every character outside A-Z, a-z, 0-9, '.', '_' and '-' with '_', as "
                f"Debezium's do, and join the names with '.'); leave one out with table.exclude.list or rename one")


def source_block(settings: FormatSettings) -> SourceBlock:
    if settings.is_sqlserver:
        return SqlServerSource(settings.debezium_format)
    return PostgresSource(settings.connector, settings.debezium_format)


@dataclass(frozen=True)
class _Field:
    name: str  # the column name in the source row
    json_name: str  # the field name in messages (after field.name.adjustment.mode)
    mapped: MappedField
    read_value: Callable[[Any], Any]  # the converter of a snapshot's value (Debezium reads those through JDBC)
    mapping: ColumnMapping
    placeholder: Any  # what an unavailable value (an unchanged TOASTed one) is written as
    fallback: Any  # what a NOT NULL column holds when the source sent no value (a key-only before image)
    # The field schema's default (None: none). Kafka Connect's JsonConverter writes it in place of a null value
    # (replace.null.with.default, on unless configured off), in keys, before and after images alike.
    default: Any


# Debezium's JdbcValueConverters give a required column without a value its type's neutral value.
_FALLBACK_BY_NAME: dict[str, Any] = {
    "io.debezium.time.ZonedTimestamp": "1970-01-01T00:00:00Z",
    "io.debezium.time.ZonedTime": "00:00:00Z",
    "org.apache.kafka.connect.data.Decimal": "AA==",
    "io.debezium.data.VariableScaleDecimal": {"scale": 0, "value": "AA=="},
}
_FALLBACK_BY_TYPE: dict[str, Any] = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "float": 0.0, "double": 0.0,
                                     "boolean": False, "string": "", "bytes": ""}


def _fallback(schema: Mapping[str, Any]) -> Any:
    if schema.get("optional", True):
        return None
    if "default" in schema:  # Debezium's converters give a required column without a value its schema's default
        return schema["default"]
    name = schema.get("name")
    if name in _FALLBACK_BY_NAME:
        return _FALLBACK_BY_NAME[name]
    if schema["type"] == "array":
        return []
    if schema["type"] == "map":
        return {}
    return _FALLBACK_BY_TYPE.get(str(schema["type"]))


class TableFormat:
    """Key and value schemas of one table, built once, and the messages of its events."""

    def __init__(self, table: TableLike, settings: FormatSettings) -> None:
        self.settings = settings
        self.table = table
        self.database = str(getattr(table, "database", "") or settings.database)
        self.topic = topic_name(settings, table.schema, table.name, self.database)
        self.source = source_block(settings)
        by_name = {column.name: column for column in table.columns}
        key_names = self._key_columns(table)
        missing = [name for name in key_names if name not in by_name]
        if missing:
            raise ValueError(f"message.key.columns names {', '.join(missing)}, which table "
                             f"{table.schema}.{table.name} does not have")
        self._key_fields = [f for name in key_names if (f := self._field(by_name[name], key=True)) is not None]
        self._value_fields = [f for column in table.emitted_columns()
                              if (f := self._field(column, key=False)) is not None]
        # What row_payload needs of each field, unpacked once: it runs for every column of every event. A
        # snapshot's rows take the JDBC converters (see MappedField.read_value).
        self._value_plan: list[tuple[str, str, Callable[[Any], Any], Callable[[Any], Any] | None, Any, Any, Any]] = [
            (f.name, f.json_name, f.mapped.convert_value, f.mapping.mapper, f.placeholder,
             f.fallback, f.default) for f in self._value_fields]
        self._read_plan = [(name, json_name, f.read_value, mapper, placeholder, fallback, default) for
                           (name, json_name, _convert, mapper, placeholder, fallback, default), f in
                           zip(self._value_plan, self._value_fields, strict=True)]
        # Debezium's record schema names start with the table's (sanitised) topic: recordSchemaPrefix (naming.py)

        def schema_name(suffix: str) -> str:
            return adjust_schema_name(f"{self.topic}.{suffix}", settings.schema_name_adjustment)

        self.key_schema = {"type": "struct", "fields": [f.mapped.schema for f in self._key_fields],
                           "optional": False, "name": schema_name("Key")}
        row_schema = {"type": "struct", "fields": [self._value_schema(f) for f in self._value_fields],
                      "optional": True, "name": schema_name("Value")}
        self.version_3 = settings.debezium_format != "2.5"
        images = [{**row_schema, "field": "before"}, {**row_schema, "field": "after"}, self.source.schema]
        self.value_schema = {
            "type": "struct",
            # Debezium 3 (decision 0028): the transaction block before op, the processing time in finer units too
            "fields": [*images, TRANSACTION_BLOCK_SCHEMA, _field("string", "op", False), _field("int64", "ts_ms", True),
                       _field("int64", "ts_us", True), _field("int64", "ts_ns", True)] if self.version_3 else
            [*images, _field("string", "op", False), _field("int64", "ts_ms", True), TRANSACTION_BLOCK_SCHEMA],
            "optional": False,
            "name": schema_name("Envelope"),
        }
        if self.version_3:
            self.value_schema["version"] = 2
        elif not settings.is_sqlserver:
            # Debezium 2.5.2's PostgreSQL connector versions its envelope schema (measured side by side,
            # docs/decisions/0016); the documentation's examples leave the version out.
            self.value_schema["version"] = 1
        # The schemas are the same in every message of the table: serialize them once.
        self._key_prefix = '{"schema":' + dumps(self.key_schema) + ',"payload":'
        self._value_prefix = '{"schema":' + dumps(self.value_schema) + ',"payload":'

    @property
    def has_key(self) -> bool:
        return bool(self._key_fields)

    @property
    def key_fields(self) -> Sequence[_Field]:
        return tuple(self._key_fields)

    @property
    def value_fields(self) -> Sequence[_Field]:
        return tuple(self._value_fields)

    def wrappers(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """The texts a key's and a value's payload stand between: the schema before it and the closing brace
        after it, or nothing with schemas off."""
        key = (self._key_prefix, "}") if self.settings.key_schemas_enable else ("", "")
        value = (self._value_prefix, "}") if self.settings.value_schemas_enable else ("", "")
        return key, value

    def _key_columns(self, table: TableLike) -> tuple[str, ...]:
        return emitted_key_columns(self.settings.message_key_columns, f"{table.schema}.{table.name}",
                                   table.key_columns)

    def _field(self, column: AnyColumn, key: bool) -> _Field | None:
        """The field of a column; None where Debezium has no converter for its type (left out, with a warning
        once per process, in Debezium's words)."""
        settings = self.settings
        if key and column.optional:
            column = replace(column, optional=False)
        if isinstance(column, SqlServerColumn):
            mapped = map_sqlserver_column(column, settings.sqlserver_mapping)
            character = column.type_name in _MSSQL_CHARACTER
            length = -1 if column.max_length < 0 else column.max_length // (2 if column.type_name[0] == "n" else 1)
            # Debezium's unavailable.value.placeholder for an unchanged large object: the text, or its bytes in the
            # binary.handling.mode's form (SqlServerValueConverters.convertString / convertBinary)
            placeholder = PLACEHOLDER if character or column.type_name == "xml" else (
                mapped.convert_value(PLACEHOLDER.encode()) if column.type_name in ("binary", "varbinary", "image")
                else None)
        else:
            found = map_column(column, settings.mapping)
            if found is None:
                self._warn_dropped(column)
                return None
            mapped = found
            character = column.type_name in _PG_CHARACTER
            length = column.modifier - 4 if column.type_name in ("varchar", "bpchar") and column.modifier > 4 else -1
            placeholder = unavailable_value(column, settings.mapping)
        json_name = adjust_name(column.name, settings.field_name_adjustment)
        mapping = ColumnMapping() if key else column_mapping(
            settings.column_rules, f"{self.table.schema}.{self.table.name}.{column.name}", character, length)
        schema = {**mapped.schema, "field": json_name}
        if mapping.parameters:
            schema = _with_parameters(schema, mapping.parameters)
        return _Field(column.name, json_name, MappedField(schema, mapped.convert_value),
                      mapped.read_value or mapped.convert_value, mapping, placeholder, _fallback(schema),
                      schema.get("default"))

    def _warn_dropped(self, column: ColumnType) -> None:
        seen = (self.table.schema, self.table.name, column.name, column.type_name)
        if seen not in _DROPPED_WARNED:
            _DROPPED_WARNED.add(seen)
            logger.warning("No converter found for column %s.%s.%s of type %s. The column will not be part of "
                           "change events for that table.", *seen)

    def _value_schema(self, value_field: _Field) -> dict[str, Any]:
        schema = value_field.mapped.schema
        if not self.settings.wrap_values:
            return schema
        inner = {key: value for key, value in schema.items() if key != "field"}
        return {"type": "struct", "fields": [{**inner, "field": "value"}, _field("boolean", "set", False)],
                "optional": True, "field": schema["field"]}

    # -- payloads ----------------------------------------------------------------------------------
    def key_payload(self, row: Row, read: bool = False) -> dict[str, Any]:
        """The key of a row; ``read``: a snapshot's row. A key column the change did not carry (an old key of
        REPLICA IDENTITY USING INDEX) holds its default, or else its type's neutral value, as Debezium's key does."""
        return {f.json_name: f.fallback if row.get(f.name) is None
                else (f.read_value if read else f.mapped.convert_value)(row.get(f.name))
                for f in self._key_fields}

    def row_payload(self, row: Row | None, read: bool = False) -> dict[str, Any] | None:
        """The before or after image of a row; ``read``: a snapshot's row."""
        if row is None:
            return None
        if not self.settings.wrap_values:
            out: dict[str, Any] = {}
            for name, json_name, convert, mapper, placeholder, fallback, default in (
                    self._read_plan if read else self._value_plan):
                value = row.get(name)
                if value is None:
                    converted = fallback
                elif value is UNAVAILABLE:
                    out[json_name] = default if placeholder is None else placeholder
                    continue
                else:
                    converted = convert(value)
                result = converted if mapper is None else mapper(converted)
                out[json_name] = default if result is None else result
            return out
        # yboutput: every column as {"value": v, "set": true}; a column the change did not carry is null.
        out = {}
        for name, json_name, convert, mapper, _placeholder, fallback, default in (
                self._read_plan if read else self._value_plan):
            value = row.get(name, UNAVAILABLE)
            if value is UNAVAILABLE:
                out[json_name] = None
                continue
            converted = fallback if value is None else convert(value)
            result = converted if mapper is None else mapper(converted)
            out[json_name] = {"value": default if result is None else result, "set": True}
        return out

    # -- serialized messages -----------------------------------------------------------------------
    def key_json(self, row: Row, read: bool = False) -> str | None:
        """The key; None for a table without key columns (Debezium's null key). ``read``: a snapshot's row."""
        if not self._key_fields:
            return None
        payload = dumps(self.key_payload(row, read))
        return self._key_prefix + payload + "}" if self.settings.key_schemas_enable else payload

    def value_payload(self, event: ChangeEvent, processed_ts_ms: int) -> dict[str, Any]:
        read = event.op == "r"  # a snapshot's row: Debezium reads those through JDBC
        try:
            before, after = self.row_payload(event.before, read), self.row_payload(event.after, read)
        except UnsupportedValueError as error:
            raise UnsupportedValueError(f"table {self.table.schema}.{self.table.name}: {error}") from None
        source = self.source.payload(event, self.settings.topic_prefix, self.database)
        if self.version_3:
            return {"before": before, "after": after, "source": source, "transaction": event.extra.get("transaction"),
                    "op": event.op, "ts_ms": processed_ts_ms, "ts_us": processed_ts_ms * 1000,
                    "ts_ns": processed_ts_ms * 1_000_000}
        return {
            "before": before,
            "after": after,
            "source": source,
            "op": event.op,
            "ts_ms": processed_ts_ms,
            "transaction": event.extra.get("transaction"),
        }

    def value_json(self, event: ChangeEvent, processed_ts_ms: int) -> str:
        text = dumps(self.value_payload(event, processed_ts_ms))
        return self._value_prefix + text + "}" if self.settings.value_schemas_enable else text


def _with_parameters(schema: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """Add schema parameters keeping JsonConverter's key order (parameters after name/version/doc)."""
    merged = {**schema.get("parameters", {}), **parameters}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("parameters", "default", "field"):
            continue
        out[key] = value
    out["parameters"] = merged
    for key in ("default", "field"):
        if key in schema:
            out[key] = schema[key]
    return out


# Versioned, as Debezium 2.5.2's SchemaFactory builds them.
HEARTBEAT_KEY_SCHEMA = {"type": "struct", "fields": [_field("string", "serverName", False)], "optional": False,
                        "name": "io.debezium.connector.common.ServerNameKey", "version": 1}
HEARTBEAT_VALUE_SCHEMA = {"type": "struct", "fields": [_field("int64", "ts_ms", False)], "optional": False,
                          "name": "io.debezium.connector.common.Heartbeat", "version": 1}


def heartbeat_topic(prefix: str, heartbeat_prefix: str) -> str:
    return f"{heartbeat_prefix}.{prefix}"


def heartbeat_messages(settings: FormatSettings, ts_ms: int) -> tuple[str, str]:
    """(key, value) of a heartbeat record, as Debezium's heartbeat topic carries them."""
    key: dict[str, Any] = {"serverName": settings.topic_prefix}
    value: dict[str, Any] = {"ts_ms": ts_ms}
    key_doc = {"schema": HEARTBEAT_KEY_SCHEMA, "payload": key} if settings.key_schemas_enable else key
    value_doc = {"schema": HEARTBEAT_VALUE_SCHEMA, "payload": value} if settings.value_schemas_enable else value
    return dumps(key_doc), dumps(value_doc)
