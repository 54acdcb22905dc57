"""The model's catalog writes shared by the admin API and the SQL it answers: tables and their columns, and the CDC
system procedures (``sys.sp_cdc_enable_table``, ``sys.sp_cdc_disable_table``) inside an open write transaction."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Sequence

from . import _sqlite as store
from ._dml import allocate_lsn, cdc_enabled
from ._errors import ProgrammingError, server_error
from ._types import ModelColumn, coerce

_OBJECT_ID_STEP = 16_057
_CHANGE_TABLE_META = (("__$start_lsn", "binary", 10), ("__$end_lsn", "binary", 10), ("__$seqval", "binary", 10),
                      ("__$operation", "int", 4), ("__$update_mask", "varbinary", 128))


def datetime_text(value: dt.datetime) -> str:
    """A value of SQL Server's ``datetime`` type (1/300 s ticks), stored as ISO text."""
    return str(coerce(ModelColumn("t", "datetime", 8, 23, 3), value).isoformat())


def allocate_object_id(conn: sqlite3.Connection, db: str) -> int:
    value = conn.execute("SELECT next_object_id FROM databases WHERE name = ?", (db,)).fetchone()[0]
    conn.execute("UPDATE databases SET next_object_id = ? WHERE name = ?", (value + _OBJECT_ID_STEP, db))
    return int(value)


def schema_id_of(conn: sqlite3.Connection, db: str, schema: str) -> int:
    row = conn.execute("SELECT schema_id FROM schemas WHERE db = ? AND name = ?", (db, schema)).fetchone()
    if row is not None:
        return int(row[0])
    schema_id = conn.execute("SELECT next_schema_id FROM databases WHERE name = ?", (db,)).fetchone()[0]
    conn.execute("UPDATE databases SET next_schema_id = ? WHERE name = ?", (schema_id + 1, db))
    conn.execute("INSERT INTO schemas VALUES (?, ?, ?)", (db, schema_id, schema))
    return int(schema_id)


def add_table(conn: sqlite3.Connection, db: str, schema: str, name: str, columns: Sequence[ModelColumn],
               created: str, shipped: bool = False) -> int:
    object_id = allocate_object_id(conn, db)
    conn.execute("INSERT INTO tables VALUES (?, ?, ?, ?, ?, ?, 1)",
                 (db, object_id, schema_id_of(conn, db, schema), name, int(shipped), created))
    for column_id, column in enumerate(columns, start=1):
        add_column(conn, db, object_id, column_id, column)
    return object_id


def add_column(conn: sqlite3.Connection, db: str, object_id: int, column_id: int, column: ModelColumn) -> None:
    conn.execute("INSERT INTO columns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (db, object_id, column_id, column.name, column.type_name, column.max_length, column.precision,
                  column.scale, int(column.nullable), int(column.identity)))


def enable_table(conn: sqlite3.Connection, db: str, schema: str, table: str, capture_instance: str | None,
                 columns: Sequence[str] | None, now: str) -> str:
    """``sys.sp_cdc_enable_table``; returns the capture instance name. Its start_lsn is the current LSN."""
    db = store.database_name(conn, db)
    if not cdc_enabled(conn, db):
        raise server_error(ProgrammingError, "42000", 22901, f"The database '{db}' is not enabled for "
                           "Change Data Capture. Ensure that the correct database context is set and retry "
                           "the operation. To report on the databases enabled for Change Data Capture, "
                           "query the is_cdc_enabled column in the sys.databases catalog view.")
    info = store.table_info(conn, db, schema, table)
    name = capture_instance or f"{info.schema}_{info.name}"
    if store.instances(conn, db, name=name):
        raise server_error(ProgrammingError, "42000", 22926, f"Could not create a capture instance because "
                           f"the capture instance name '{name}' already exists in the current database. "
                           "Specify an explicit unique name for the parameter @capture_instance.")
    if len(store.instances(conn, db, source_object_id=info.object_id)) >= 2:
        raise server_error(ProgrammingError, "42000", 22962, f"Two capture instances already exist for "
                           f"source table '{info.schema}.{info.name}'. A table can have at most two capture "
                           "instances. If the current tracking options are not appropriate, disable change "
                           "tracking for the obsolete instance by using sys.sp_cdc_disable_table and retry "
                           "the operation.")
    selected = [c for _, c in info.columns] if columns is None else []
    for wanted in columns or ():
        found = info.column(wanted)
        if found is None:
            raise server_error(ProgrammingError, "42000", 22833, f"Could not create a capture instance "
                               f"because the column '{wanted}' in the @captured_column_list is not a "
                               "column of the source table.")
        selected.append(found)
    ids = {c.name: i for i, c in info.columns}
    selected.sort(key=lambda c: ids[c.name])  # change-table order is the source column order
    missing = [k for k in info.primary_key if k not in [c.name for c in selected]]
    if missing:
        raise server_error(ProgrammingError, "42000", 22832, f"Could not update the metadata that "
                           f"indicates table '{info.schema}.{info.name}' is enabled for Change Data "
                           f"Capture: the primary key column(s) {missing} must be captured.")
    lsn = allocate_lsn(conn, db)
    now = now
    meta = [ModelColumn(n, t, size, 0, 0) for n, t, size in _CHANGE_TABLE_META]
    # __$command_id arrived with the cumulative update of KB 3030352 (SQL Server 2012-2016; always there since 2017)
    command_id = [ModelColumn("__$command_id", "int", 4, 10)] if store.server_value(conn, "command_id_column") != 0 \
        else []
    # a timestamp (rowversion) column is binary(8) in the change table, with the same values (Microsoft's
    # cdc.<capture_instance>_CT page, "Captured Column Data Types")
    copied = [ModelColumn(c.name, "binary", 8, 0, 0, c.nullable) if c.type_name == "timestamp" else c for c in selected]
    change_table = add_table(conn, db, "cdc", f"{name}_CT", [*meta, *copied, *command_id], now, True)
    seq = conn.execute("SELECT COALESCE(MAX(create_seq), 0) + 1 FROM change_tables").fetchone()[0]
    index_name = f"PK__{info.name[:8]}__{info.object_id:016X}" if info.primary_key else None
    conn.execute("INSERT INTO change_tables VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (db, change_table, info.object_id, name, lsn, now, seq, index_name))
    conn.executemany("INSERT INTO captured_columns VALUES (?, ?, ?, ?, ?, ?)",
                     [(db, change_table, c.name, ids[c.name], c.type_name, n)
                      for n, c in enumerate(selected, start=1)])
    conn.executemany("INSERT INTO cdc_index_columns VALUES (?, ?, ?, ?, ?)",
                     [(db, change_table, k, n, ids[k]) for n, k in enumerate(info.primary_key, start=1)])
    return name


def disable_table(conn: sqlite3.Connection, db: str, capture_instance: str) -> None:
    """``sys.sp_cdc_disable_table``: the instance, its change table and its ddl_history rows are dropped."""
    db = store.database_name(conn, db)
    found = store.instances(conn, db, name=capture_instance)
    if not found:
        raise server_error(ProgrammingError, "42000", 22985, f"Could not find the capture instance "
                           f"'{capture_instance}'.")
    object_id = found[0].object_id
    for table in ("change_tables", "captured_columns", "cdc_index_columns", "ddl_history", "change_rows",
                  "columns", "tables"):
        conn.execute(f"DELETE FROM {table} WHERE db = ? AND object_id = ?", (db, object_id))
