"""Capture instances and their columns: what SQL Server's CDC catalog says cdckit can read."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cdckit.dialect.sqlserver import queries
from cdckit.errors import SourcePreconditionError, TableNotFoundError
from cdckit.formats.debezium.sqlserver_types import SqlServerColumn


def lsn_int(value: Any) -> int:
    """A binary(10) LSN (bytes from pyodbc) as an integer; None and empty as 0."""
    if value is None:
        return 0
    return int.from_bytes(bytes(value), "big")


def lsn_bytes(value: int) -> bytes:
    return value.to_bytes(10, "big")


@dataclass(frozen=True)
class CaptureInstance:
    database: str
    schema: str
    name: str  # the table name (TableLike.name)
    capture_instance: str
    # cdc.change_tables.start_lsn; 0 when it is NULL, "the low endpoint has not been established" (Microsoft's
    # cdc.change_tables page): nothing bounds the instance's changes from below yet
    start_lsn: int
    object_id: int  # the change table's object id
    source_object_id: int
    columns: tuple[SqlServerColumn, ...]
    key_columns: tuple[str, ...]
    identity_columns: tuple[str, ...] = ()
    column_filter: tuple[str, ...] | None = None
    # Captured columns the table no longer has (dropped since the instance was created): the change table keeps
    # them, and later changes carry NULL in them.
    dropped_columns: tuple[str, ...] = ()
    # The table's older capture instance while both exist (after a schema change): it is read for commits before
    # this instance's start LSN, this one from there on, so the switch has no gap and no duplicate.
    previous: CaptureInstance | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    def emitted_columns(self) -> tuple[SqlServerColumn, ...]:
        if self.column_filter is None:
            return self.columns
        return tuple(c for c in self.columns if c.name in self.column_filter)


def databases(options: Mapping[str, str]) -> list[str]:
    names = [name.strip() for name in options.get("database.names", "").split(",") if name.strip()]
    return names


def _listed(options: Mapping[str, str], name: str) -> list[str]:
    return [item.strip() for item in options.get(name, "").split(",") if item.strip()]


def _matches(patterns: Sequence[str], text: str) -> bool:
    return any(re.fullmatch(p, text, flags=re.IGNORECASE) for p in patterns)


def check_database(cursor: Any, database: str) -> None:
    cursor.execute(queries.DATABASE_CDC_ENABLED, database)
    row = cursor.fetchone()
    if row is None:
        raise TableNotFoundError(f"database {database!r} does not exist on the server; check database.names")
    if not row[0]:
        raise SourcePreconditionError(
            f"CDC is not enabled on database {database!r}; run sql/sqlserver/01_enable_cdc_database.sql "
            f"(EXEC sys.sp_cdc_enable_db) as sysadmin")


def capture_instances(cursor: Any, database: str, options: Mapping[str, str],
                      previously_captured: Sequence[str] = ()) -> list[CaptureInstance]:
    """The newest capture instance of every captured table that the include/exclude lists select.

    ``previously_captured`` lists ``schema.table`` names read in earlier runs: one of them without a capture
    instance now means CDC was disabled for it, which is reported by name.
    """
    db = queries.quote_name(database)
    cursor.execute(queries.CAPTURE_INSTANCES.format(db=db))
    rows = cursor.fetchall()
    newest: dict[tuple[str, str], Any] = {}
    older: dict[tuple[str, str], Any] = {}
    for row in rows:  # ordered by create_date: the last one per table wins
        key = (str(row[0]), str(row[1]))
        if key in newest:
            older[key] = newest[key]
        newest[key] = row
    for key in list(older):
        if newest[key][3] is None:  # the new instance's low endpoint is not established: the older one is read on
            newest[key] = older.pop(key)
    include, exclude = _listed(options, "table.include.list"), _listed(options, "table.exclude.list")
    schema_in, schema_out = _listed(options, "schema.include.list"), _listed(options, "schema.exclude.list")

    def listed(patterns: list[str], schema: str, table: str) -> bool:
        # Entries name schema.table, or database.schema.table when several databases are captured.
        return _matches(patterns, f"{schema}.{table}") or _matches(patterns, f"{database}.{schema}.{table}")

    def selected(schema: str, table: str) -> bool:
        """Debezium's lists: schemas (anchored names), then tables."""
        schema_ok = (not schema_in or _matches(schema_in, schema)) and not (schema_out and _matches(schema_out, schema))
        return schema_ok and (not include or listed(include, schema, table)) and not (
            exclude and listed(exclude, schema, table))

    chosen = [row for (schema, table), row in newest.items() if selected(schema, table)]
    current = {f"{schema}.{table}".lower() for schema, table in newest}
    for name in previously_captured:
        schema, _, table = name.partition(".")
        if selected(schema, table) and name.lower() not in current:
            raise SourcePreconditionError(
                f"CDC was disabled for table {database}.{name}, which cdckit was capturing (it has no capture "
                f"instance any more); re-enable it with sys.sp_cdc_enable_table (sql/sqlserver/"
                f"03_enable_cdc_table.sql) and take a new snapshot of it, or remove it from table.include.list")
    loaded = []
    for row in chosen:
        instance = _load(cursor, database, row, options)
        previous = older.get((str(row[0]), str(row[1])))
        if previous is not None:
            instance = replace(instance, previous=_load(cursor, database, previous, options))
        loaded.append(instance)
    return loaded


def check_include_list(options: Mapping[str, str], instances: Sequence[CaptureInstance]) -> None:
    """Every table.include.list entry must match a captured table in one of the databases."""
    for entry in _listed(options, "table.include.list"):
        if not any(_matches([entry], i.qualified_name) or _matches([entry], f"{i.database}.{i.qualified_name}")
                   for i in instances):
            raise TableNotFoundError(
                f"table.include.list entry '{entry}' matches no CDC-enabled table in database.names "
                f"({options.get('database.names', '')}); enable CDC for it (sql/sqlserver/03_enable_cdc_table.sql) "
                f"or fix the entry")


def snapshot_selected(options: Mapping[str, str], instance: CaptureInstance) -> bool:
    """Whether the snapshot reads the table: ``snapshot.include.collection.list`` (regular expressions, anchored, of
    ``<database>.<schema>.<table>``; Debezium's default, every captured table, when it is empty)."""
    patterns = _listed(options, "snapshot.include.collection.list")
    return not patterns or _matches(patterns, f"{instance.database}.{instance.qualified_name}")


def check_snapshot_list(options: Mapping[str, str], instances: Sequence[CaptureInstance]) -> None:
    """Every ``snapshot.include.collection.list`` entry must name a table cdckit captures: the list picks among
    the tables of table.include.list, so an entry matching none of them is a mistake."""
    for entry in _listed(options, "snapshot.include.collection.list"):
        if not any(_matches([entry], f"{i.database}.{i.qualified_name}") for i in instances):
            raise TableNotFoundError(
                f"snapshot.include.collection.list entry '{entry}' matches none of the tables cdckit captures "
                f"({', '.join(f'{i.database}.{i.qualified_name}' for i in instances) or 'none'}); it names "
                f"<database>.<schema>.<table> of tables also in table.include.list: fix the entry")


def _load(cursor: Any, database: str, row: Any, options: Mapping[str, str]) -> CaptureInstance:
    db = queries.quote_name(database)
    schema, table, instance, start_lsn, object_id, source_object_id = row
    cursor.execute(queries.CAPTURED_COLUMNS.format(db=db), source_object_id, object_id)
    columns = []
    identity = []
    dropped = []
    for name, _ordinal, type_name, max_length, precision, scale, nullable, is_identity in cursor.fetchall():
        columns.append(SqlServerColumn(str(name), str(type_name).lower(), int(max_length), int(precision or 0),
                                       int(scale or 0), nullable is None or bool(nullable)))
        if is_identity:
            identity.append(str(name))
        if nullable is None:  # no such column in the table any more
            dropped.append(str(name))
    cursor.execute(queries.PRIMARY_KEY_COLUMNS.format(db=db), source_object_id)
    key = [str(r[0]) for r in cursor.fetchall()]
    if not key:  # no primary key: the unique index CDC was enabled with, if any
        cursor.execute(queries.INDEX_COLUMNS.format(db=db), object_id)
        key = [str(r[0]) for r in cursor.fetchall()]
    include, exclude = _listed(options, "column.include.list"), _listed(options, "column.exclude.list")
    column_filter = None
    if include or exclude:
        column_filter = tuple(c.name for c in columns
                              if (not include or _matches(include, f"{schema}.{table}.{c.name}"))
                              and not (exclude and _matches(exclude, f"{schema}.{table}.{c.name}")))
    return CaptureInstance(database, str(schema), str(table), str(instance), lsn_int(start_lsn), int(object_id),
                           int(source_object_id), tuple(columns), tuple(key), tuple(identity), column_filter,
                           tuple(dropped))
