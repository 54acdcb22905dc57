"""The schema history of PostgreSQL / YugabyteDB tables: each structure a table had, keyed by the position from
which the stream met it (pgoutput's Relation messages carry it).

Stored as ``<cdckit.checkpoint.location>/schema-history.json``, written by the driver after a batch is written
(from control rows the executors emit), read when the next batch is planned. A structure that differs from the
last one recorded is a schema change: with ``include.schema.changes`` an ALTER record goes to the ``topic.prefix``
topic (in the SQL Server connector's format), and Qlik messages get a new metadata message with the next
``tableVersion``. Events themselves are always formatted with the structure of the Relation message before them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import FormatSettings, format_settings
from cdckit.formats.debezium.schema_change import TableChange, describe_postgres_columns
from cdckit.spark.records import schema_change_record
from cdckit.spark.rows import EventRow, now_ms, option_bool, record
from cdckit.state import StateStore

FILE_NAME = "schema-history.json"


def _store(options: Mapping[str, str]) -> StateStore:
    return StateStore(options.get("cdckit.checkpoint.location", "cdckit-checkpoint"))


def signature(table: TableInfo) -> list[list[Any]]:
    """The table's structure as the stream sees it (generated columns are not in its tuples)."""
    return [[c.name, c.type_name, c.modifier, c.optional] for c in table.columns
            if c.name not in table.generated_columns]


class SchemaHistory:
    def __init__(self, versions: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.versions = versions or {}

    @classmethod
    def load(cls, options: Mapping[str, str]) -> SchemaHistory:
        return cls(_store(options).read_json(FILE_NAME) or {})

    @classmethod
    def from_json(cls, text: str) -> SchemaHistory:
        return cls(json.loads(text))

    def to_json(self) -> str:
        return json.dumps(self.versions)

    def version(self, qualified_name: str) -> int:
        return max(1, len(self.versions.get(qualified_name, [])))

    def observe(self, table: TableInfo, position: Position, options: Mapping[str, str],
                settings: FormatSettings) -> Iterator[EventRow]:
        """Record ``table``'s structure if it is new; yields the control row (and the ALTER record) it causes."""
        name = table.qualified_name
        versions = self.versions.setdefault(name, [])
        columns = signature(table)
        if versions and versions[-1]["columns"] == columns:
            return
        entry = {"position": list(position.as_tuple()), "columns": columns, "key": list(table.key_columns)}
        versions.append(entry)
        yield record("", None, json.dumps({"kind": "schema", "table": name, **entry}), op="_schema",
                     position=position, ts_ms=now_ms())
        if len(versions) > 1 and option_bool(options, "include.schema.changes", False):
            yield schema_change_row(dict(options), table, position.commit_lsn, 0, kind="ALTER",
                                    position=Position(position.commit_lsn, position.lsn, -3))


def record_schema_controls(options: Mapping[str, str], controls: Sequence[str]) -> None:
    """Add the structures a batch met to the history (on the driver, after the batch is written)."""
    found = [json.loads(c) for c in controls]
    found = [c for c in found if isinstance(c, dict) and c.get("kind") == "schema"]
    if not found:
        return
    history = SchemaHistory.load(options)
    for control in found:
        versions = history.versions.setdefault(control["table"], [])
        if not versions or versions[-1]["columns"] != control["columns"]:
            versions.append({"position": control["position"], "columns": control["columns"], "key": control["key"]})
    _store(options).write_json(FILE_NAME, history.versions)


def schema_change_row(options: dict[str, str], table: TableInfo, lsn: int, tx_id: int, kind: str = "CREATE",
                      position: Position | None = None) -> EventRow:
    """A CREATE (snapshot) or ALTER (stream) record of one table on the ``topic.prefix`` topic, in the SQL Server
    connector's format."""
    settings = format_settings(options)
    change = TableChange(kind, settings.database, table.schema, table.name, table.key_columns,
                         tuple(describe_postgres_columns(table.columns)))
    event = ChangeEvent(table.schema, table.name, "r", None, None, position or Position(lsn, lsn, -3), now_ms(),
                        tx_id or None, snapshot="true" if kind == "CREATE" else "false", sequence=(None, lsn))
    return schema_change_record(settings, change, event, f"{table.schema}.{table.name}")
