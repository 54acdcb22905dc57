"""DML transactions of the admin API and the capture job that moves committed log records into change tables."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from . import _sqlite as store
from ._computed import computed_names, with_computed
from ._errors import IntegrityError, ProgrammingError, lob_too_long, server_error
from ._types import ZERO_LSN, ModelColumn, coerce, compare_key, decode, encode, int_to_lsn


class SqlServerModel(Protocol):
    """What a transaction needs of the model (``_admin.SqlServerModel``): its file and its clock."""

    path: Path

    def _now(self) -> str: ...


def allocate_lsn(conn: sqlite3.Connection, db: str) -> bytes:
    stored = conn.execute("SELECT next_lsn FROM databases WHERE name = ?", (db,)).fetchone()[0]
    # kept as the 10-byte LSN: a real log's LSNs pass SQLite's 64-bit integers once its VLF number passes 0x7FFF
    value = int.from_bytes(stored, "big") if isinstance(stored, bytes) else int(stored)
    conn.execute("UPDATE databases SET next_lsn = ? WHERE name = ?", (int_to_lsn(value + 1), db))
    return int_to_lsn(value)


def next_rowversion(conn: sqlite3.Connection, db: str) -> bytes:
    """The database's next rowversion (``@@DBTS`` + 1): 8 bytes from a per-database counter, which every insert and
    update of a row with a ``timestamp``/``rowversion`` column advances (Microsoft's rowversion page: "Each database
    has a counter that is incremented for each insert or update operation ... on a table that contains a rowversion
    column")."""
    value = int(store.server_value(conn, f"dbts:{db}") or 2000) + 1
    conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES (?, ?)", (f"dbts:{db}", value))
    return value.to_bytes(8, "big")


def cdc_enabled(conn: sqlite3.Connection, db: str) -> bool:
    return bool(conn.execute("SELECT is_cdc_enabled FROM databases WHERE name = ?", (db,)).fetchone()[0])


def tran_id(conn: sqlite3.Connection, db: str) -> bytes:
    value = conn.execute("SELECT next_tran FROM databases WHERE name = ?", (db,)).fetchone()[0]
    conn.execute("UPDATE databases SET next_tran = ? WHERE name = ?", (value + 1, db))
    return int(0x3A0 + value).to_bytes(10, "big")


def harvest(conn: sqlite3.Connection, db: str, now: str | None = None) -> None:
    """The capture job's scan: committed log records -> change tables, ``cdc.ddl_history``, ``cdc.lsn_time_mapping``.

    A change reaches each capture instance of its table enabled before the change committed. A transaction with
    at least one captured change gets a mapping row with its transaction id; a scan whose last transaction
    captured nothing ends with a mapping row with ``tran_id`` 0x00 (SQL Server's "LSN processing completed" entry).
    A DDL record changing a captured column's type alters that column in the instance's change table first.
    """
    records = conn.execute("SELECT id, commit_lsn, seqval, kind, source_object_id, before, after, changed, "
                           "command_id, begin_time, end_time, tran_id FROM log WHERE db = ? AND commit_lsn IS NOT "
                           "NULL ORDER BY commit_lsn, seqval, id", (db,)).fetchall()
    cache: dict[int, list[store.InstanceInfo]] = {}
    last: tuple[bytes, str, str] | None = None
    captured_last = False
    for index, record in enumerate(records):
        (_, commit, seqval, kind, source, before, after, changed, command_id, begin, end, tran_id) = record
        if source not in cache:
            cache[source] = store.instances(conn, db, source_object_id=source)
        targets = [i for i in cache[source] if i.start_lsn < bytes(commit)]
        if index == 0 or bytes(records[index - 1][1]) != bytes(commit):
            captured_last = False
        for instance in targets:
            if kind == "ddl":
                retyped = after is not None and _alter_captured_column(conn, instance, ModelColumn(**json.loads(after)))
                conn.execute("INSERT INTO ddl_history VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (db, source, instance.object_id, int(retyped), changed, commit, end))
                continue
            _write_change(conn, instance, kind, commit, seqval, command_id, before, after, json.loads(changed))
            captured_last = True
        if kind == "ddl":
            cache.pop(source)  # a change table may have been altered
        last_of_transaction = index + 1 == len(records) or bytes(records[index + 1][1]) != bytes(commit)
        if last_of_transaction and captured_last:
            conn.execute("INSERT INTO lsn_time_mapping VALUES (?, ?, ?, ?, ?)", (db, commit, begin, end, tran_id))
        last = (bytes(commit), begin, end)
    if last is not None and not captured_last:
        conn.execute("INSERT INTO lsn_time_mapping VALUES (?, ?, ?, ?, ?)", (db, last[0], last[1], last[2], ZERO_LSN))
    conn.execute("DELETE FROM log WHERE db = ? AND commit_lsn IS NOT NULL", (db,))
    if records and now is not None:
        # sys.dm_cdc_log_scan_sessions: one session per scan; its latency, the seconds from the last transaction
        # it processed committing to the scan's end
        committed = max(dt.datetime.fromisoformat(str(record[10])) for record in records)
        latency = max(0, int((dt.datetime.fromisoformat(now) - committed).total_seconds()))
        conn.execute("INSERT INTO log_scan_sessions (db, start_time, end_time, latency) VALUES (?, ?, ?, ?)",
                     (db, now, now, latency))


def _alter_captured_column(conn: sqlite3.Connection, instance: store.InstanceInfo, column: ModelColumn) -> bool:
    """A captured column's new type reaches the change table (its rows converted) and ``cdc.captured_columns``;
    False when the instance does not capture the column."""
    old = next((c for _, c in instance.captured if c.name.casefold() == column.name.casefold()), None)
    if old is None:
        return False
    conn.execute("UPDATE columns SET type_name = ?, max_length = ?, precision = ?, scale = ? WHERE db = ? "
                 "AND object_id = ? AND name = ?", (column.type_name, column.max_length, column.precision,
                                                    column.scale, instance.db, instance.object_id, old.name))
    conn.execute("UPDATE captured_columns SET column_type = ? WHERE db = ? AND object_id = ? AND column_name = ?",
                 (column.type_name, instance.db, instance.object_id, old.name))
    for rowid, data in conn.execute("SELECT rowid, data FROM change_rows WHERE db = ? AND object_id = ?",
                                    (instance.db, instance.object_id)).fetchall():
        values = json.loads(data)
        values[old.name] = encode(column, coerce(column, decode(old, values.get(old.name))))
        conn.execute("UPDATE change_rows SET data = ? WHERE rowid = ?", (json.dumps(values), rowid))
    return True


def _write_change(conn: sqlite3.Connection, instance: store.InstanceInfo, kind: str, commit: bytes, seqval: bytes,
                  command_id: int, before: str | None, after: str | None, changed: list[str]) -> None:
    names = [column.name for _, column in instance.captured]
    # "Computed columns that are included in a capture instance always have a value of NULL" (cdc.<instance>_CT)
    computed = computed_names(conn, instance.db, instance.source_object_id)
    all_bits = (1 << len(names)) - 1
    changed_folded = {name.casefold() for name in changed}
    update_bits = sum(1 << (ordinal - 1) for ordinal, column in instance.captured
                      if column.name.casefold() in changed_folded)
    width = max(1, (len(names) + 7) // 8)

    # Large object data types (cdc.<capture_instance>_CT): image, text and ntext are always NULL when __$operation is
    # 1 or 3; varbinary(max), varchar(max) and nvarchar(max) are NULL when it is 3 unless the column changed. xml and
    # the CLR types, stored as large objects (max_length -1 in sys.columns), are taken to behave as the (max) types.
    old_lobs = {c.name.casefold() for _, c in instance.captured if c.type_name in ("text", "ntext", "image")}
    max_lobs = {c.name.casefold() for _, c in instance.captured if c.max_length == -1} - old_lobs

    def blanked(operation: int) -> set[str]:
        if operation == 1:
            return old_lobs
        if operation == 3:
            return old_lobs | (max_lobs - changed_folded)
        return set()

    def row(operation: int, image: str | None, bits: int, command: int = command_id) -> None:
        values = json.loads(image or "{}")
        nulls = computed | blanked(operation)
        data = json.dumps({name: None if name.casefold() in nulls else values.get(name) for name in names})
        conn.execute("INSERT INTO change_rows VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (instance.db, instance.object_id, commit, seqval, operation, bits.to_bytes(width, "big"),
                      command, data))

    if kind == "insert":
        row(2, after, all_bits)
    elif kind == "delete":
        row(1, before, all_bits)
    elif kind == "key_update":
        # a one-row update of a key: a delete and an insert at one seqval, the insert one command later
        row(1, before, all_bits)
        row(2, after, all_bits, command_id + 1)
    else:
        row(3, before, update_bits)
        row(4, after, update_bits)


class ModelTransaction:
    """Holds SQLite's write lock from ``__enter__`` to commit, so model transactions are serialised."""

    def __init__(self, model: SqlServerModel, db: str) -> None:
        self._model, self._db_requested = model, db
        self._conn: sqlite3.Connection | None = None
        self._commands = 0
        self.commit_lsn: bytes | None = None

    def __enter__(self) -> ModelTransaction:
        self._conn = store.open_sqlite(self._model.path)
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._db = store.database_name(self._conn, self._db_requested)
            self._cdc = cdc_enabled(self._conn, self._db)
            self._begin = self._model._now()
            allocate_lsn(self._conn, self._db)  # LOP_BEGIN_XACT
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._conn.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        assert self._conn is not None
        conn, self._conn = self._conn, None
        try:
            if kind is not None:
                conn.execute("ROLLBACK")
                return
            if self._commands and self._cdc:
                self.commit_lsn = allocate_lsn(conn, self._db)
                conn.execute("UPDATE log SET commit_lsn = ?, begin_time = ?, end_time = ?, tran_id = ? "
                             "WHERE db = ? AND commit_lsn IS NULL",
                             (self.commit_lsn, self._begin, self._model._now(),
                              tran_id(conn, self._db), self._db))
                if store.server_value(conn, "agent_running"):
                    harvest(conn, self._db, self._model._now())
            conn.execute("COMMIT")
        finally:
            conn.close()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("use the transaction inside its `with` block")
        return self._conn

    def _command(self, count: int = 1) -> int:
        """The next ``__$command_id`` of this transaction (``count`` consecutive ones taken)."""
        self._commands += count
        return self._commands - count + 1

    def _log(self, kind: str, info: store.TableInfo, before: dict[str, Any] | None, after: dict[str, Any] | None,
             changed: Sequence[str] = (), command: int | None = None, seqval: bytes | None = None) -> None:
        command = self._command() if command is None else command
        if not self._cdc:
            return
        seqval = allocate_lsn(self.conn, self._db) if seqval is None else seqval
        images = [None if image is None else json.dumps(self._encoded(info, image)) for image in (before, after)]
        self.conn.execute("INSERT INTO log (db, seqval, kind, source_object_id, before, after, changed, command_id) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          (self._db, seqval, kind, info.object_id, images[0], images[1], json.dumps(list(changed)),
                           command))

    def _check_lob_sizes(self, info: store.TableInfo, row: Mapping[str, Any], written: Sequence[str]) -> None:
        """Error 7139: the statement fails when it writes more than 'max text repl size' bytes (65536 by default,
        -1 no limit) into a text, ntext, image, varchar(max), nvarchar(max), varbinary(max) or xml column that a
        capture instance captures (Microsoft: cdc.<capture_instance>_CT, "Large Object Data Types", and "max text
        repl size (server configuration option)"). Bytes as stored: one a character for varchar and text (the
        code page), UTF-16 for nvarchar, ntext and xml."""
        if not self._cdc:
            return
        limit = store.server_value(self.conn, "max text repl size")
        limit = 65536 if limit is None else int(limit)
        if limit == -1:
            return
        captured = {c.name.casefold() for i in store.instances(self.conn, self._db, source_object_id=info.object_id)
                    for _, c in i.captured}
        for name in written:
            column = info.column(name)
            value = row.get(column.name) if column is not None else None
            if column is None or value is None or column.name.casefold() not in captured:
                continue
            large = column.type_name in ("text", "ntext", "image", "xml") or (
                column.type_name in ("varchar", "nvarchar", "varbinary") and column.max_length == -1)
            if not large:
                continue
            if isinstance(value, (bytes, bytearray, memoryview)):
                length = len(bytes(value))
            elif column.type_name in ("nvarchar", "ntext", "xml"):
                length = len(str(value).encode("utf-16-le"))
            else:
                length = len(str(value))
            if length > limit:
                raise lob_too_long(length, limit)

    @staticmethod
    def _encoded(info: store.TableInfo, row: Mapping[str, Any]) -> dict[str, Any]:
        return {c.name: encode(c, row.get(c.name)) for _, c in info.columns}

    def _matching(self, info: store.TableInfo, key: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        wanted = {}
        for name, value in key.items():
            column = info.column(name)
            if column is None:
                raise server_error(ProgrammingError, "42S22", 207, f"Invalid column name '{name}'.")
            wanted[column.name] = compare_key(coerce(column, value))
        return [(rid, row) for rid, row in store.table_rows(self.conn, info)
                if all(row[n] is not None and compare_key(row[n]) == v for n, v in wanted.items())]

    def _check_key(self, info: store.TableInfo, row: Mapping[str, Any], skip_rid: int | None = None) -> None:
        """Error 2627 when ``row`` repeats the primary key or a UNIQUE constraint's values of another row (one NULL
        is allowed per unique column set, as SQL Server's unique constraints treat NULLs as equal)."""
        groups = [("PRIMARY KEY", f"PK__{info.name[:8]}__{info.object_id:016X}", info.primary_key)] if \
            info.primary_key else []
        groups += [("UNIQUE KEY", f"UQ__{info.name[:8]}__{info.object_id + n:016X}", g)
                   for n, g in enumerate(info.unique, start=2)]
        if not groups:
            return
        rows = store.table_rows(self.conn, info)
        for kind, name, columns in groups:
            wanted = tuple(compare_key(row[c]) for c in columns)
            for rid, other in rows:
                if rid != skip_rid and tuple(compare_key(other[c]) for c in columns) == wanted:
                    raise server_error(IntegrityError, "23000", 2627, f"Violation of {kind} constraint '{name}'. "
                                       f"Cannot insert duplicate key in object '{info.schema}.{info.name}'. The "
                                       f"duplicate key value is ({', '.join(str(row[c]) for c in columns)}).")

    def _store(self, info: store.TableInfo, row: Mapping[str, Any], rid: int | None = None) -> None:
        data = json.dumps(self._encoded(info, with_computed(self.conn, info, row)))
        if rid is None:
            self.conn.execute("INSERT INTO source_rows (db, object_id, data) VALUES (?, ?, ?)",
                              (info.db, info.object_id, data))
        else:
            self.conn.execute("UPDATE source_rows SET data = ? WHERE rid = ?", (data, rid))

    def insert(self, schema: str, table: str, row: Mapping[str, Any]) -> dict[str, Any]:
        """INSERT one row; returns it as stored (identity value assigned, values converted to the column types)."""
        info = store.table_info(self.conn, self._db, schema, table)
        given = {k.casefold(): v for k, v in row.items()}
        unknown = set(given) - {c.name.casefold() for _, c in info.columns}
        if unknown:
            raise server_error(ProgrammingError, "42S22", 207, f"Invalid column name '{sorted(unknown)[0]}'.")
        stored: dict[str, Any] = {}
        for _, column in info.columns:
            if column.identity:
                if column.name.casefold() in given:
                    raise server_error(ProgrammingError, "23000", 544, f"Cannot insert explicit value for identity "
                                       f"column in table '{info.name}' when IDENTITY_INSERT is set to OFF.")
                value = self.conn.execute("SELECT next_identity FROM tables WHERE db = ? AND object_id = ?",
                                          (info.db, info.object_id)).fetchone()[0]
                self.conn.execute("UPDATE tables SET next_identity = ? WHERE db = ? AND object_id = ?",
                                  (value + 1, info.db, info.object_id))
                stored[column.name] = coerce(column, value)
            elif column.type_name == "timestamp":
                if column.name.casefold() in given:
                    raise server_error(ProgrammingError, "42000", 273, "Cannot insert an explicit value into a "
                                       "timestamp column. Use INSERT with a column list to exclude the timestamp "
                                       "column, or insert a DEFAULT into the timestamp column.")
                stored[column.name] = next_rowversion(self.conn, self._db)
            else:
                stored[column.name] = coerce(column, given.get(column.name.casefold()), info.qualified)
        self._check_lob_sizes(info, stored, [c.name for _, c in info.columns])
        self._check_key(info, stored)
        self._store(info, stored)
        self._log("insert", info, None, stored)
        return stored

    def update(self, schema: str, table: str, key: Mapping[str, Any], changes: Mapping[str, Any]) -> int:
        """UPDATE ... SET <changes> WHERE <key columns = values>: one statement; returns the number of rows updated."""
        return self.update_many(schema, table, [(key, changes)])

    def update_many(self, schema: str, table: str,
                    updates: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> int:
        """One UPDATE statement over several rows, each matched by its key with its own new values (what
        ``UPDATE t SET id = id + 100 WHERE id BETWEEN 9 AND 10`` does); returns the number of rows updated.

        How SQL Server logs it (Microsoft's cdc.<capture_instance>_CT page and KB 3030352, which added
        ``__$command_id`` because ``__$seqval`` misorders these rows; Debezium's documentation of
        ``event_serial_no``): an update that changes no primary-key or UNIQUE column value is an update in place,
        rows 3 and 4 at one seqval. One that does is a split update. A statement splitting one row logs its delete
        and insert at one seqval, the insert one command later. A statement splitting several rows is a deferred
        update: every delete under one ``__$command_id``, then every insert under the next, and the inserts'
        seqvals lower than the deletes' (so ordered by seqval, each key's insert comes before its delete; ordered
        by command id, the deletes come first). Uniqueness is checked on the statement's result, as SQL Server does.
        """
        info = store.table_info(self.conn, self._db, schema, table)
        targets: list[tuple[int, dict[str, Any], dict[str, Any], list[str]]] = []
        seen: set[int] = set()
        for key, changes in updates:
            for rid, old in self._matching(info, key):
                if rid in seen:
                    continue
                seen.add(rid)
                new = dict(old)
                changed = []
                for name, value in changes.items():
                    column = info.column(name)
                    if column is None:
                        raise server_error(ProgrammingError, "42S22", 207, f"Invalid column name '{name}'.")
                    if column.identity:
                        raise server_error(ProgrammingError, "42000", 8102, f"Cannot update identity column "
                                           f"'{column.name}'.")
                    if column.type_name == "timestamp":
                        raise server_error(ProgrammingError, "42000", 272, "Cannot update a timestamp column.")
                    new[column.name] = coerce(column, value, info.qualified)
                    changed.append(column.name)
                for _, column in info.columns:  # the row's rowversion, new on every update
                    if column.type_name == "timestamp":
                        new[column.name] = next_rowversion(self.conn, self._db)
                targets.append((rid, old, new, changed))
        for _, _, new, changed in targets:
            self._check_lob_sizes(info, new, changed)
        self.conn.execute("SAVEPOINT statement")  # a statement that fails changes nothing; the transaction goes on
        try:
            for rid, _, new, _ in targets:
                self._store(info, new, rid)
            for rid, _, new, _ in targets:
                self._check_key(info, new, skip_rid=rid)
        except BaseException:
            self.conn.execute("ROLLBACK TO statement")
            raise
        finally:
            self.conn.execute("RELEASE statement")
        key_columns = [*info.primary_key, *(c for group in info.unique for c in group)]
        split = [t for t in targets if any(compare_key(t[1][c]) != compare_key(t[2][c]) for c in key_columns)]
        command = self._command()
        for rid, old, new, changed in targets:
            if not any(rid == t[0] for t in split):
                self._log("update", info, old, new, changed, command)
        if len(split) == 1:
            _, old, new, changed = split[0]
            self._log("key_update", info, old, new, changed, command)
            self._command()  # the insert's
        elif split:
            inserts = self._command()
            seqvals = [allocate_lsn(self.conn, self._db) if self._cdc else b"" for _ in split]  # the inserts' first
            for _, old, _, _ in split:
                self._log("delete", info, old, None, (), command)
            for (_, _, new, _), seqval in zip(split, seqvals, strict=True):
                self._log("insert", info, None, new, (), inserts, seqval)
        return len(targets)

    def delete_many(self, schema: str, table: str, keys: Sequence[Mapping[str, Any]]) -> int:
        """One DELETE statement removing the rows each key matches (one ``__$command_id``); returns the count."""
        info = store.table_info(self.conn, self._db, schema, table)
        command = self._command()
        count = 0
        seen: set[int] = set()
        for key in keys:
            for rid, old in self._matching(info, key):
                if rid in seen:
                    continue
                seen.add(rid)
                self.conn.execute("DELETE FROM source_rows WHERE rid = ?", (rid,))
                self._log("delete", info, old, None, (), command)
                count += 1
        return count

    def delete(self, schema: str, table: str, key: Mapping[str, Any]) -> int:
        """DELETE ... WHERE <key columns = values>: one statement; returns the number of rows deleted."""
        return self.delete_many(schema, table, [key])
