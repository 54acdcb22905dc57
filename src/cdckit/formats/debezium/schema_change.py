"""Schema change events (``include.schema.changes``) in the SQL Server connector's format.

Topic: the bare ``topic.prefix``. Key ``io.debezium.connector.<connector>.SchemaChangeKey`` holds the database
name; the value holds ``source``, ``ts_ms``, ``databaseName``, ``schemaName``, ``ddl`` (always null: the
connector sees no DDL text) and ``tableChanges``, each with the table's columns after the change. cdckit offers
the same format for PostgreSQL (schema ``io.debezium.connector.postgresql.SchemaChange*``), where Debezium
itself emits none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdckit.events import ChangeEvent
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.formats.debezium.source import SourceBlock
from cdckit.formats.debezium.source import field as _field
from cdckit.formats.debezium.sqlserver_types import SqlServerColumn

# java.sql.Types codes, as the JDBC drivers report them.
_PG_JDBC = {"bool": -7, "bit": -7, "int2": 5, "int4": 4, "int8": -5, "oid": -5, "float4": 7, "float8": 8,
            "numeric": 2, "money": 8, "bpchar": 1, "char": 1, "varchar": 12, "text": 12, "name": 12,
            "bytea": -2, "date": 91, "time": 92, "timetz": 92, "timestamp": 93, "timestamptz": 93}
_PG_OTHER = 1111
_PG_ARRAY = 2003
_MSSQL_JDBC = {"bit": -7, "tinyint": -6, "smallint": 5, "int": 4, "bigint": -5, "real": 7, "float": 8,
               "decimal": 3, "numeric": 2, "money": 3, "smallmoney": 3, "char": 1, "varchar": 12, "text": -1,
               "nchar": -15, "nvarchar": -9, "ntext": -16, "xml": -16, "date": 91, "time": 92, "datetime": 93,
               "datetime2": 93, "smalldatetime": 93, "datetimeoffset": -155, "binary": -2, "varbinary": -3,
               "image": -4, "timestamp": -2, "rowversion": -2, "uniqueidentifier": 1}
_MSSQL_PRECISION = {"bit": 1, "tinyint": 3, "smallint": 5, "int": 10, "bigint": 19, "real": 24, "float": 53,
                    "money": 19, "smallmoney": 10, "date": 10, "datetime": 23, "smalldatetime": 16}


@dataclass(frozen=True)
class ColumnDescription:
    name: str
    jdbc_type: int
    type_name: str
    length: int | None
    scale: int | None
    position: int
    optional: bool
    auto_incremented: bool = False
    generated: bool = False

    def payload(self) -> dict[str, Any]:
        return {"name": self.name, "jdbcType": self.jdbc_type, "nativeType": None, "typeName": self.type_name,
                "typeExpression": self.type_name, "charsetName": None, "length": self.length, "scale": self.scale,
                "position": self.position, "optional": self.optional, "autoIncremented": self.auto_incremented,
                "generated": self.generated}


def describe_postgres_columns(columns: Sequence[ColumnType]) -> list[ColumnDescription]:
    out = []
    for position, column in enumerate(columns, start=1):
        name = column.type_name
        jdbc = _PG_ARRAY if name.startswith("_") else _PG_JDBC.get(name, _PG_OTHER)
        length: int | None = None
        scale: int | None = None
        if name in ("varchar", "bpchar") and column.modifier > 4:
            length = column.modifier - 4
        elif name == "numeric" and column.modifier > 4:
            length, scale = ((column.modifier - 4) >> 16) & 0xFFFF, (column.modifier - 4) & 0xFFFF
        out.append(ColumnDescription(column.name, jdbc, name, length, scale, position, column.optional))
    return out


def describe_sqlserver_columns(columns: Sequence[SqlServerColumn], identity: Sequence[str] = ()
                               ) -> list[ColumnDescription]:
    out = []
    for position, column in enumerate(columns, start=1):
        name = column.type_name
        length: int | None
        scale: int | None = None
        if name in ("decimal", "numeric"):
            length, scale = column.precision, column.scale
        elif name in _MSSQL_PRECISION:
            length, scale = _MSSQL_PRECISION[name], (0 if name not in ("real", "float", "date") else None)
            if name in ("money", "smallmoney"):
                scale = 4
        elif name in ("time", "datetime2", "datetimeoffset"):
            length, scale = column.precision, column.scale
        elif column.max_length < 0:
            length = 2147483647
        else:
            length = column.max_length // 2 if name in ("nchar", "nvarchar") else column.max_length
        type_name = f"{name} identity" if column.name in identity else name
        out.append(ColumnDescription(column.name, _MSSQL_JDBC.get(name, 1111), type_name, length, scale, position,
                                     column.optional))
    return out


@dataclass(frozen=True)
class TableChange:
    kind: str  # CREATE, ALTER, DROP
    database: str
    schema: str
    table: str
    primary_key: tuple[str, ...]
    columns: tuple[ColumnDescription, ...]

    def payload(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "id": f'"{self.database}"."{self.schema}"."{self.table}"',
            "table": {
                "defaultCharsetName": None,
                "primaryKeyColumnNames": list(self.primary_key),
                "columns": [column.payload() for column in self.columns],
                "attributes": [],
            },
        }


_COLUMN_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [_field("string", "name", False), _field("int32", "jdbcType", False),
               _field("int32", "nativeType", True), _field("string", "typeName", False),
               _field("string", "typeExpression", True), _field("string", "charsetName", True),
               _field("int32", "length", True), _field("int32", "scale", True), _field("int32", "position", False),
               _field("boolean", "optional", True), _field("boolean", "autoIncremented", True),
               _field("boolean", "generated", True)],
    "optional": False, "name": "io.debezium.connector.schema.Column",
}
_ATTRIBUTE_SCHEMA: dict[str, Any] = {"type": "struct", "fields": [_field("string", "name", False),
                                                                  _field("string", "value", False)],
                                     "optional": False, "name": "io.debezium.connector.schema.Attribute"}
_TABLE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [_field("string", "defaultCharsetName", True),
               {"type": "array", "items": {"type": "string", "optional": False}, "optional": True,
                "field": "primaryKeyColumnNames"},
               {"type": "array", "items": _COLUMN_SCHEMA, "optional": False, "field": "columns"},
               {"type": "array", "items": _ATTRIBUTE_SCHEMA, "optional": True, "field": "attributes"}],
    "optional": True, "name": "io.debezium.connector.schema.Table", "field": "table",
}
_CHANGE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [_field("string", "type", False), _field("string", "id", False), _TABLE_SCHEMA],
    "optional": False, "name": "io.debezium.connector.schema.Change",
}


def key_schema(connector: str) -> dict[str, Any]:
    return {"type": "struct", "fields": [_field("string", "databaseName", False)], "optional": False,
            "name": f"io.debezium.connector.{_family(connector)}.SchemaChangeKey"}


def value_schema(connector: str, source: SourceBlock) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [source.schema, _field("int64", "ts_ms", False), _field("string", "databaseName", True),
                   _field("string", "schemaName", True), _field("string", "ddl", True),
                   {"type": "array", "items": _CHANGE_SCHEMA, "optional": False, "field": "tableChanges"}],
        "optional": False,
        "name": f"io.debezium.connector.{_family(connector)}.SchemaChangeValue",
    }


def _family(connector: str) -> str:
    return "sqlserver" if connector == "sqlserver" else "postgresql"


def schema_change_payloads(change: TableChange, event: ChangeEvent, source: SourceBlock, topic_prefix: str,
                           processed_ts_ms: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(key payload, value payload) of one schema change record; ``event`` carries the source position."""
    key = {"databaseName": change.database}
    value = {
        "source": source.payload(event, topic_prefix, change.database),
        "ts_ms": processed_ts_ms,
        "databaseName": change.database,
        "schemaName": change.schema,
        "ddl": None,
        "tableChanges": [change.payload()],
    }
    return key, value
