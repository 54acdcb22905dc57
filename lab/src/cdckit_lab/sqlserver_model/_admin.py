"""The model's Python admin API: databases, tables, CDC enablement, DML transactions, the capture and cleanup jobs."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import _sqlite as store
from ._dml import ModelTransaction, allocate_lsn, cdc_enabled, harvest, tran_id
from ._errors import ProgrammingError, server_error
from ._types import (
    ZERO_LSN,
    ModelColumn,
    coerce,
    decode,
    encode,
    lsn_text,
    normalise_column,
    type_declaration,
)

_FIRST_LSN = (0x25 << 48) | (0x0D08 << 16) | 1  # 00000025:00000d08:0001, like a young database's log
_FIRST_OBJECT_ID = 901_578_250
_OBJECT_ID_STEP = 16_057
_CHANGE_TABLE_META = (("__$start_lsn", "binary", 10), ("__$end_lsn", "binary", 10), ("__$seqval", "binary", 10),
                      ("__$operation", "int", 4), ("__$update_mask", "varbinary", 128))


def _datetime(value: dt.datetime) -> str:
    """A value of SQL Server's ``datetime`` type (1/300 s ticks), stored as ISO text."""
    return str(coerce(ModelColumn("t", "datetime", 8, 23, 3), value).isoformat())


def _allocate_object_id(conn: sqlite3.Connection, db: str) -> int:
    value = conn.execute("SELECT next_object_id FROM databases WHERE name = ?", (db,)).fetchone()[0]
    conn.execute("UPDATE databases SET next_object_id = ? WHERE name = ?", (value + _OBJECT_ID_STEP, db))
    return int(value)


def _schema_id(conn: sqlite3.Connection, db: str, schema: str) -> int:
    row = conn.execute("SELECT schema_id FROM schemas WHERE db = ? AND name = ?", (db, schema)).fetchone()
    if row is not None:
        return int(row[0])
    schema_id = conn.execute("SELECT next_schema_id FROM databases WHERE name = ?", (db,)).fetchone()[0]
    conn.execute("UPDATE databases SET next_schema_id = ? WHERE name = ?", (schema_id + 1, db))
    conn.execute("INSERT INTO schemas VALUES (?, ?, ?)", (db, schema_id, schema))
    return int(schema_id)


def _add_table(conn: sqlite3.Connection, db: str, schema: str, name: str, columns: Sequence[ModelColumn],
               created: str, shipped: bool = False) -> int:
    object_id = _allocate_object_id(conn, db)
    conn.execute("INSERT INTO tables VALUES (?, ?, ?, ?, ?, ?, 1)",
                 (db, object_id, _schema_id(conn, db, schema), name, int(shipped), created))
    for column_id, column in enumerate(columns, start=1):
        _add_column(conn, db, object_id, column_id, column)
    return object_id


def _add_column(conn: sqlite3.Connection, db: str, object_id: int, column_id: int, column: ModelColumn) -> None:
    conn.execute("INSERT INTO columns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (db, object_id, column_id, column.name, column.type_name, column.max_length, column.precision,
                  column.scale, int(column.nullable), int(column.identity)))


class SqlServerModel:
    """The admin side of the model (Python calls, not SQL); all state is in the SQLite file at ``path``."""

    def __init__(self, path: str | Path, *, clock: Callable[[], dt.datetime] = dt.datetime.now) -> None:
        self.path = Path(path)
        self.clock = clock
        store.initialise(self.path)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with store.write_transaction(self.path) as conn:
            yield conn

    def _now(self) -> str:
        return _datetime(self.clock())

    # -- server -------------------------------------------------------------------------------------------------
    def _server_flag(self, name: str) -> bool:
        conn = store.open_sqlite(self.path)
        try:
            return bool(store.server_value(conn, name))
        finally:
            conn.close()

    @property
    def agent_running(self) -> bool:
        return self._server_flag("agent_running")

    @agent_running.setter
    def agent_running(self, running: bool) -> None:
        with self._write() as conn:
            conn.execute("UPDATE server SET v = ? WHERE k = 'agent_running'", (int(running),))
            if running:
                for (db,) in conn.execute("SELECT name FROM databases").fetchall():
                    harvest(conn, db, self._now())

    def set_database_online(self, db: str, online: bool) -> None:
        """ALTER DATABASE [db] SET OFFLINE / ONLINE: while offline, connecting to it fails with error 942."""
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES (?, ?)", (f"offline:{db}", int(not online)))

    def start_agent(self) -> None:
        """Start SQL Server Agent: the capture job harvests everything committed while it was stopped."""
        self.agent_running = True

    def stop_agent(self) -> None:
        self.agent_running = False

    @property
    def record_statements(self) -> bool:
        """When True, every statement answered through the DB-API is appended to ``statement_log()``."""
        return self._server_flag("record_statements")

    @record_statements.setter
    def record_statements(self, record: bool) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES ('record_statements', ?)", (int(record),))

    def statement_log(self) -> list[tuple[str, str, str, str | None]]:
        """Every statement answered through the DB-API: (name, normalised SQL, repr of params, isolation level)."""
        conn = store.open_sqlite(self.path)
        try:
            return [tuple(r) for r in conn.execute("SELECT name, sql, params, isolation_level FROM statement_log "
                                                   "ORDER BY id")]  # type: ignore[misc]
        finally:
            conn.close()

    def connect(self, **attributes: Any) -> Any:
        from ._dbapi import Connection

        return Connection(self.path, **attributes)

    # -- catalog ------------------------------------------------------------------------------------------------
    def create_database(self, name: str) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM databases WHERE name = ?", (name,)).fetchone():
                raise server_error(ProgrammingError, "42000", 1801, f"Database '{name}' already exists. "
                                   "Choose a different database name.")
            database_id = store.server_value(conn, "next_database_id")
            conn.execute("UPDATE server SET v = v + 1 WHERE k = 'next_database_id'")
            conn.execute("INSERT INTO databases VALUES (?, ?, 0, ?, 1, ?, 5)",
                         (name, database_id, _FIRST_LSN, _FIRST_OBJECT_ID))
            conn.executemany("INSERT INTO schemas VALUES (?, ?, ?)",
                             [(name, 1, "dbo"), (name, 2, "guest"), (name, 3, "INFORMATION_SCHEMA"), (name, 4, "sys")])

    def create_table(self, db: str, schema: str, table: str, columns: Sequence[ModelColumn],
                     primary_key: Sequence[str] = ()) -> int:
        """CREATE TABLE (the schema is created if missing); returns the table's object_id."""
        names = [c.name.casefold() for c in columns]
        if len(set(names)) != len(names) or any(k.casefold() not in names for k in primary_key):
            raise ValueError(f"bad column list or primary key for {schema}.{table}")
        key = {k.casefold() for k in primary_key}
        normalised = [normalise_column(ModelColumn(c.name, c.type_name, c.max_length, c.precision, c.scale,
                                                   c.nullable and c.name.casefold() not in key, c.identity))
                      for c in columns]
        with self._write() as conn:
            db = store.database_name(conn, db)
            if conn.execute("SELECT 1 FROM tables t JOIN schemas s ON s.db = t.db AND s.schema_id = t.schema_id "
                            "WHERE t.db = ? AND s.name = ? AND t.name = ?", (db, schema, table)).fetchone():
                raise server_error(ProgrammingError, "42S01", 2714,
                                   f"There is already an object named '{table}' in the database.")
            object_id = _add_table(conn, db, schema, table, normalised, self._now())
            if primary_key:
                conn.execute("INSERT INTO indexes VALUES (?, ?, 1, ?, 1)",
                             (db, object_id, f"PK__{table[:8]}__{object_id:016X}"))
                ids = {c.name.casefold(): i for i, c in enumerate(normalised, start=1)}
                conn.executemany("INSERT INTO index_columns VALUES (?, ?, 1, ?, ?)",
                                 [(db, object_id, n, ids[k.casefold()]) for n, k in enumerate(primary_key, 1)])
            return object_id

    def alter_table_add_column(self, db: str, schema: str, table: str, column: ModelColumn) -> None:
        """ALTER TABLE ADD (existing rows read NULL); logged, so the capture job records it in cdc.ddl_history."""
        column = normalise_column(column)
        with self._write() as conn:
            db = store.database_name(conn, db)
            info = store.table_info(conn, db, schema, table)
            if info.column(column.name) is not None:
                raise server_error(ProgrammingError, "42S21", 2705, f"Column names in each table must be unique. "
                                   f"Column name '{column.name}' in table '{schema}.{table}' is specified more "
                                   "than once.")
            if not column.nullable and store.table_rows(conn, info):
                raise server_error(ProgrammingError, "42000", 4901, "ALTER TABLE only allows columns to be added "
                                   "that can contain nulls, or have a DEFAULT definition specified, ...")
            _add_column(conn, db, info.object_id, max((i for i, _ in info.columns), default=0) + 1, column)
            self._log_ddl(conn, info, f"ALTER TABLE [{schema}].[{table}] ADD [{column.name}] "
                          f"{type_declaration(column)} {'NULL' if column.nullable else 'NOT NULL'}")

    def alter_table_drop_column(self, db: str, schema: str, table: str, column_name: str) -> None:
        """ALTER TABLE DROP COLUMN (not of the primary key); logged, so the capture job records it in
        cdc.ddl_history. Capture instances keep the column: their change tables and ``cdc.captured_columns`` are
        unchanged, and later changes carry NULL in it."""
        with self._write() as conn:
            db = store.database_name(conn, db)
            info = store.table_info(conn, db, schema, table)
            column = self._existing_column(info, column_name, "DROP COLUMN")
            conn.execute("DELETE FROM columns WHERE db = ? AND object_id = ? AND name = ?",
                         (db, info.object_id, column.name))
            for rid, data in conn.execute("SELECT rid, data FROM source_rows WHERE db = ? AND object_id = ?",
                                          (db, info.object_id)).fetchall():
                values = json.loads(data)
                values.pop(column.name, None)
                conn.execute("UPDATE source_rows SET data = ? WHERE rid = ?", (json.dumps(values), rid))
            self._log_ddl(conn, info, f"ALTER TABLE [{schema}].[{table}] DROP COLUMN [{column.name}]")

    def alter_table_alter_column(self, db: str, schema: str, table: str, column: ModelColumn) -> None:
        """ALTER TABLE ALTER COLUMN to a new type (not of the primary key): existing rows are converted (a value
        that does not fit fails the statement, as SQL Server's conversion errors do). Logged: when the capture job
        reads it, it alters the column in the change table of every capture instance that captures it (converting
        the change rows) and ``cdc.captured_columns.column_type``, and records the DDL in cdc.ddl_history with
        ``required_column_update`` = 1, as SQL Server does for a captured column's data type change."""
        with self._write() as conn:
            db = store.database_name(conn, db)
            info = store.table_info(conn, db, schema, table)
            old = self._existing_column(info, column.name, "ALTER COLUMN")
            new = normalise_column(ModelColumn(old.name, column.type_name, column.max_length, column.precision,
                                               column.scale, column.nullable, old.identity))
            for rid, data in conn.execute("SELECT rid, data FROM source_rows WHERE db = ? AND object_id = ?",
                                          (db, info.object_id)).fetchall():
                values = json.loads(data)
                values[new.name] = encode(new, coerce(new, decode(old, values.get(old.name)), info.qualified))
                conn.execute("UPDATE source_rows SET data = ? WHERE rid = ?", (json.dumps(values), rid))
            conn.execute("UPDATE columns SET type_name = ?, max_length = ?, precision = ?, scale = ?, "
                         "is_nullable = ? WHERE db = ? AND object_id = ? AND name = ?",
                         (new.type_name, new.max_length, new.precision, new.scale, int(new.nullable), db,
                          info.object_id, new.name))
            self._log_ddl(conn, info, f"ALTER TABLE [{schema}].[{table}] ALTER COLUMN [{new.name}] "
                          f"{type_declaration(new)} {'NULL' if new.nullable else 'NOT NULL'}", new)

    @staticmethod
    def _existing_column(info: store.TableInfo, name: str, action: str) -> ModelColumn:
        column = info.column(name)
        if column is None:
            raise server_error(ProgrammingError, "42000", 4924, f"ALTER TABLE {action} failed because column "
                               f"'{name}' does not exist in table '{info.name}'.")
        if column.name in info.primary_key:
            raise server_error(ProgrammingError, "42000", 5074, f"The object 'PK__{info.name[:8]}__"
                               f"{info.object_id:016X}' is dependent on column '{column.name}'. ALTER TABLE "
                               f"{action} {column.name} failed because one or more objects access this column.")
        return column

    def _log_ddl(self, conn: sqlite3.Connection, info: store.TableInfo, command: str,
                 altered: ModelColumn | None = None) -> None:
        """A DDL log record for the capture job (``altered``: the new definition of a column whose type changed)."""
        if not cdc_enabled(conn, info.db):
            return
        now = self._now()
        lsn = allocate_lsn(conn, info.db)
        definition = None if altered is None else json.dumps(asdict(altered))
        conn.execute("INSERT INTO log (db, commit_lsn, seqval, kind, source_object_id, after, changed, command_id, "
                     "begin_time, end_time, tran_id) VALUES (?, ?, ?, 'ddl', ?, ?, ?, 1, ?, ?, ?)",
                     (info.db, lsn, lsn, info.object_id, definition, command, now, now, tran_id(conn, info.db)))
        if store.server_value(conn, "agent_running"):
            harvest(conn, info.db, now)

    # -- CDC ----------------------------------------------------------------------------------------------------
    def enable_cdc(self, db: str) -> None:
        """``sys.sp_cdc_enable_db``: the cdc schema appears and the database reports is_cdc_enabled = 1."""
        with self._write() as conn:
            db = store.database_name(conn, db)
            _schema_id(conn, db, "cdc")
            conn.execute("UPDATE databases SET is_cdc_enabled = 1 WHERE name = ?", (db,))

    def enable_table(self, db: str, schema: str, table: str, capture_instance: str | None = None,
                     columns: Sequence[str] | None = None) -> str:
        """``sys.sp_cdc_enable_table``; returns the capture instance name. Its start_lsn is the current LSN."""
        with self._write() as conn:
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
            now = self._now()
            meta = [ModelColumn(n, t, size, 0, 0) for n, t, size in _CHANGE_TABLE_META]
            change_table = _add_table(conn, db, "cdc", f"{name}_CT",
                                      [*meta, *selected, ModelColumn("__$command_id", "int", 4, 10)], now, True)
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

    def disable_table(self, db: str, capture_instance: str) -> None:
        """``sys.sp_cdc_disable_table``: the instance, its change table and its ddl_history rows are dropped."""
        with self._write() as conn:
            db = store.database_name(conn, db)
            found = store.instances(conn, db, name=capture_instance)
            if not found:
                raise server_error(ProgrammingError, "42000", 22985, f"Could not find the capture instance "
                                   f"'{capture_instance}'.")
            object_id = found[0].object_id
            for table in ("change_tables", "captured_columns", "cdc_index_columns", "ddl_history", "change_rows",
                          "columns", "tables"):
                conn.execute(f"DELETE FROM {table} WHERE db = ? AND object_id = ?", (db, object_id))

    def cleanup(self, db: str, capture_instance: str, low_water_lsn: bytes) -> None:
        """``sys.sp_cdc_cleanup_change_table``: purge change rows below the LSN and raise the instance's min LSN."""
        low_water_lsn = bytes(low_water_lsn)
        with self._write() as conn:
            db = store.database_name(conn, db)
            found = store.instances(conn, db, name=capture_instance)
            if not found:
                raise server_error(ProgrammingError, "42000", 22985, f"Could not find the capture instance "
                                   f"'{capture_instance}'.")
            instance, top = found[0], store.max_lsn(conn, db)
            if top is None or low_water_lsn > top:
                raise server_error(ProgrammingError, "42000", 22964, f"LSN {lsn_text(low_water_lsn)}, specified as "
                                   "the new low endpoint for the change table associated with capture instance "
                                   f"'{capture_instance}', is not within the Change Data Capture timeline "
                                   f"[{lsn_text(instance.start_lsn)}, {lsn_text(top or ZERO_LSN)}].")
            conn.execute("DELETE FROM change_rows WHERE db = ? AND object_id = ? AND start_lsn < ?",
                         (db, instance.object_id, low_water_lsn))
            if low_water_lsn > instance.start_lsn:
                conn.execute("UPDATE change_tables SET start_lsn = ? WHERE db = ? AND object_id = ?",
                             (low_water_lsn, db, instance.object_id))
            floor = conn.execute("SELECT MIN(start_lsn) FROM change_tables WHERE db = ?", (db,)).fetchone()[0]
            conn.execute("DELETE FROM lsn_time_mapping WHERE db = ? AND start_lsn < ?", (db, floor))

    # -- DML ----------------------------------------------------------------------------------------------------
    def transaction(self, db: str) -> ModelTransaction:
        """One committed transaction (one commit LSN); rolled back if the block raises."""
        return ModelTransaction(self, db)


