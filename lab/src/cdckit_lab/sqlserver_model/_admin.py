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
from ._cdc import add_column, add_table, datetime_text, disable_table, enable_table, schema_id_of
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
        return datetime_text(self.clock())

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
    def command_id_column(self) -> bool:
        """Whether capture instances enabled from now on get a ``__$command_id`` column (True). False models a
        SQL Server 2012-2016 without the cumulative update of KB 3030352, whose change tables lack the column."""
        conn = store.open_sqlite(self.path)
        try:
            return bool(store.server_value(conn, "command_id_column") != 0)
        finally:
            conn.close()

    @command_id_column.setter
    def command_id_column(self, present: bool) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES ('command_id_column', ?)", (int(present),))

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
    def create_database(self, name: str, first_lsn: int = _FIRST_LSN) -> None:
        """CREATE DATABASE; ``first_lsn``: where its log starts (the default is a young database's; a database years
        into its life has VLF sequence numbers past 0x7FFF, LSNs beyond 2**63)."""
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM databases WHERE name = ?", (name,)).fetchone():
                raise server_error(ProgrammingError, "42000", 1801, f"Database '{name}' already exists. "
                                   "Choose a different database name.")
            database_id = store.server_value(conn, "next_database_id")
            conn.execute("UPDATE server SET v = v + 1 WHERE k = 'next_database_id'")
            conn.execute("INSERT INTO databases VALUES (?, ?, 0, ?, 1, ?, 5)",
                         (name, database_id, first_lsn.to_bytes(10, "big"), _FIRST_OBJECT_ID))
            conn.executemany("INSERT INTO schemas VALUES (?, ?, ?)",
                             [(name, 1, "dbo"), (name, 2, "guest"), (name, 3, "INFORMATION_SCHEMA"), (name, 4, "sys")])

    def create_table(self, db: str, schema: str, table: str, columns: Sequence[ModelColumn],
                     primary_key: Sequence[str] = (), unique: Sequence[Sequence[str]] = ()) -> int:
        """CREATE TABLE (the schema is created if missing); returns the table's object_id. ``unique``: the column
        lists of UNIQUE constraints (unique indexes), which decide whether an update is logged as a split update."""
        names = [c.name.casefold() for c in columns]
        if len(set(names)) != len(names) or any(k.casefold() not in names for k in primary_key) or any(
                not group or any(c.casefold() not in names for c in group) for group in unique):
            raise ValueError(f"bad column list, primary key or unique constraint for {schema}.{table}")
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
            object_id = add_table(conn, db, schema, table, normalised, self._now())
            if primary_key:
                conn.execute("INSERT INTO indexes VALUES (?, ?, 1, ?, 1)",
                             (db, object_id, f"PK__{table[:8]}__{object_id:016X}"))
                ids = {c.name.casefold(): i for i, c in enumerate(normalised, start=1)}
                conn.executemany("INSERT INTO index_columns VALUES (?, ?, 1, ?, ?)",
                                 [(db, object_id, n, ids[k.casefold()]) for n, k in enumerate(primary_key, 1)])
            ids = {c.name.casefold(): i for i, c in enumerate(normalised, start=1)}
            for index_id, group in enumerate(unique, start=2):
                conn.execute("INSERT INTO indexes VALUES (?, ?, ?, ?, 0)",
                             (db, object_id, index_id, f"UQ__{table[:8]}__{object_id + index_id:016X}"))
                conn.executemany("INSERT INTO index_columns VALUES (?, ?, ?, ?, ?)",
                                 [(db, object_id, index_id, n, ids[c.casefold()]) for n, c in enumerate(group, 1)])
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
            add_column(conn, db, info.object_id, max((i for i, _ in info.columns), default=0) + 1, column)
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
            schema_id_of(conn, db, "cdc")
            conn.execute("UPDATE databases SET is_cdc_enabled = 1 WHERE name = ?", (db,))

    def enable_table(self, db: str, schema: str, table: str, capture_instance: str | None = None,
                     columns: Sequence[str] | None = None) -> str:
        """``sys.sp_cdc_enable_table``; returns the capture instance name. Its start_lsn is the current LSN."""
        with self._write() as conn:
            return enable_table(conn, db, schema, table, capture_instance, columns, self._now())

    def disable_table(self, db: str, capture_instance: str) -> None:
        """``sys.sp_cdc_disable_table``: the instance, its change table and its ddl_history rows are dropped."""
        with self._write() as conn:
            disable_table(conn, db, capture_instance)

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

    # -- logins, permissions and the server's view of itself ---------------------------------------------------
    def create_login(self, name: str, password: str, databases: Sequence[str] | None = None) -> None:
        """CREATE LOGIN with a password, and a user for it in ``databases`` (None: every database). From the first
        login on, connections are authenticated: an unknown login or a wrong password fails with error 18456
        ("Login failed for user '<name>'.", SQLSTATE 28000); a database the login has no user in fails with error
        4060 ('Cannot open database "<db>" requested by the login. The login failed.', SQLSTATE 42000), as one
        that does not exist does (Microsoft's "Database engine events and errors" pages)."""
        value = json.dumps({"password": password,
                            "databases": None if databases is None else [d.casefold() for d in databases]})
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES (?, ?)", (f"login:{name.casefold()}", value))

    def set_capture_access(self, db: str, capture_instance: str, login: str, allowed: bool) -> None:
        """Whether ``login`` may read the change data of a capture instance: SELECT on every captured column of its
        source table and, when the instance has a gating role, membership of that role (the Permissions sections of
        sys.fn_cdc_get_min_lsn and cdc.fn_cdc_get_all_changes_<capture_instance>). Without it,
        ``sys.fn_cdc_get_min_lsn`` returns 0x00, as for a capture instance that does not exist; the instance's
        row in cdc.change_tables stays readable with SELECT on the cdc schema."""
        key = f"capture_denied:{db.casefold()}:{capture_instance.casefold()}:{login.casefold()}"
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES (?, ?)", (key, int(not allowed)))

    @property
    def agent_service_listed(self) -> bool:
        """Whether sys.dm_server_services has a 'SQL Server Agent (...)' row (True). False models a server that does
        not list the Agent to the login: Azure SQL Database and Amazon RDS, or a login whose view of the server's
        state shows no such row; cdckit then cannot tell whether the Agent runs."""
        return not self._server_flag("agent_service_hidden")

    @agent_service_listed.setter
    def agent_service_listed(self, listed: bool) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES ('agent_service_hidden', ?)", (int(not listed),))

    @property
    def max_text_repl_size(self) -> int:
        """The 'max text repl size' server option: the most bytes of text, ntext, image, varchar(max),
        nvarchar(max), varbinary(max) and xml data one INSERT or UPDATE may put into a column a capture instance
        captures (65536 by default; -1 for no limit but the type's). Microsoft: "max text repl size (server
        configuration option)" and the "Large object data types" section of cdc.<capture_instance>_CT."""
        conn = store.open_sqlite(self.path)
        try:
            value = store.server_value(conn, "max text repl size")
        finally:
            conn.close()
        return 65536 if value is None else int(value)

    def configure(self, option: str, value: int) -> None:
        """``EXEC sp_configure '<option>', <value>; RECONFIGURE;`` for 'max text repl size' (-1 or 0 to
        2147483647; it takes effect at once, without a restart)."""
        if option.strip().casefold() != "max text repl size":
            raise server_error(ProgrammingError, "42000", 15123, f"The configuration option '{option}' does not "
                               "exist, or it may be an advanced option.")
        if not -1 <= value <= 2_147_483_647:
            raise server_error(ProgrammingError, "42000", 1274, f"The value {value} for configuration option "
                               f"'{option}' is out of range (-1 to 2147483647).")
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES ('max text repl size', ?)", (value,))

    def clear_start_lsn(self, db: str, capture_instance: str) -> None:
        """cdc.change_tables.start_lsn NULL: "the low endpoint has not been established" (Microsoft's
        cdc.change_tables page); sys.fn_cdc_get_min_lsn then returns 0x00."""
        with self._write() as conn:
            db = store.database_name(conn, db)
            if not store.instances(conn, db, name=capture_instance):
                raise server_error(ProgrammingError, "42000", 22985, f"Could not find the capture instance "
                                   f"'{capture_instance}'.")
            conn.execute("UPDATE change_tables SET start_lsn = NULL WHERE db = ? AND capture_instance = ?",
                         (db, capture_instance))

    def purge_lsn_time_mapping(self, db: str) -> None:
        """What the cleanup job can leave in a quiet database: no cdc.lsn_time_mapping row, so
        sys.fn_cdc_get_max_lsn() returns NULL although the Agent runs (Debezium's streaming source warns of "low
        activity database where the cdc clean up job periodically clears entries from the cdc tables")."""
        with self._write() as conn:
            db = store.database_name(conn, db)
            conn.execute("DELETE FROM lsn_time_mapping WHERE db = ?", (db,))

    # -- DML ----------------------------------------------------------------------------------------------------
    def transaction(self, db: str) -> ModelTransaction:
        """One committed transaction (one commit LSN); rolled back if the block raises."""
        return ModelTransaction(self, db)


