"""SQL Server's schema evolution: rotate capture instances after a table's structure changed (the
schema-evolution job, ``cdckit.pipelines.sqlserver``, and the stream with ``cdckit.sqlserver.schema.evolution=stream``).

Debezium's online procedure, run for the user: when a captured table gained, lost or retyped a column since its
capture instance was created, create a second capture instance (which captures the new structure from its start
LSN); the stream reads the old instance before that LSN and the new one from it, so nothing is missed or
doubled; once the stream's committed position has passed the switch, drop the old instance. ``--plan`` prints
the T-SQL for a DBA instead (for logins that may not alter CDC). SQL Server allows two instances per table, so
a new rotation waits until the previous one is finished.

PostgreSQL and YugabyteDB need no rotation: pgoutput sends each table's structure (Relation messages) in the
stream itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from cdckit.dialect.sqlserver import queries
from cdckit.dialect.sqlserver.catalog import CaptureInstance, capture_instances, databases
from cdckit.dialect.sqlserver.catalog import lsn_bytes as _lsn_bytes
from cdckit.dialect.sqlserver.connection import connect
from cdckit.errors import CdcKitError
from cdckit.formats.debezium.source import format_sqlserver_lsn


@dataclass(frozen=True)
class Rotation:
    action: str  # "create" (a second capture instance) or "drop" (the old one, once the stream passed the switch)
    database: str
    schema: str
    table: str
    capture_instance: str
    reason: str
    role_name: str | None = None

    def parameters(self) -> tuple[Any, ...]:
        if self.action == "create":
            return (self.schema, self.table, self.role_name, self.capture_instance)
        return (self.schema, self.table, self.capture_instance)

    def statement(self) -> str:
        template = queries.ENABLE_TABLE if self.action == "create" else queries.DISABLE_TABLE
        return template.format(db=queries.quote_name(self.database))

    def tsql(self) -> str:
        """The statement with its values written out, for a DBA to run."""
        text = self.statement()
        for value in self.parameters():
            literal = "NULL" if value is None else "N'" + str(value).replace("'", "''") + "'"
            text = text.replace("?", literal, 1)
        return f"-- {self.reason}\n{text};"


def _column_signature(name: str, type_name: str, max_length: int, precision: int, scale: int) -> tuple[Any, ...]:
    return (name.lower(), type_name.lower(), int(max_length), int(precision), int(scale))


def drift(cursor: Any, instance: CaptureInstance) -> str | None:
    """Why the table no longer matches its capture instance, or None.

    The instance's columns are what it recorded (``cdc.captured_columns`` and its change table), so a column
    dropped from the table is still among them. A captured column whose type changed shows either as a
    different type there, or, where SQL Server altered the change table's column to the new type, as a
    ``cdc.ddl_history`` row with ``required_column_update``.
    """
    cursor.execute(queries.TABLE_COLUMNS.format(db=queries.quote_name(instance.database)), instance.source_object_id)
    current = {str(r[0]).lower(): _column_signature(str(r[0]), str(r[1]), r[2], r[3], r[4])
               for r in cursor.fetchall()}
    captured = {c.name.lower(): _column_signature(c.name, c.type_name, c.max_length, c.precision, c.scale)
                for c in instance.columns}
    history = _ddl_since(cursor, instance)
    dropped = sorted(set(captured) - set(current))
    changed = sorted({name for name in set(captured) & set(current) if captured[name] != current[name]}
                     | (_retyped(history) & set(current)))
    if dropped or changed:
        return (f"{instance.qualified_name}: " + "; ".join(
            ([f"columns dropped: {', '.join(dropped)}"] if dropped else [])
            + ([f"columns changed: {', '.join(changed)}"] if changed else [])))
    added = sorted(set(current) - set(captured))
    # A column present in the table but not captured is drift only if DDL ran after the instance was created (a
    # capture instance may leave columns out on purpose).
    if added and history:
        return f"{instance.qualified_name}: columns added: {', '.join(added)}"
    return None


def _ddl_since(cursor: Any, instance: CaptureInstance) -> list[tuple[bool, str]]:
    """(required_column_update, ddl_command) of the DDL on the table that reached the instance after it started."""
    cursor.execute(queries.DDL_HISTORY.format(db=queries.quote_name(instance.database)),
                   _lsn_bytes(instance.start_lsn))
    return [(bool(row[2]), str(row[3])) for row in cursor.fetchall()
            if int(row[0]) == instance.source_object_id and int(row[1]) == instance.object_id]


_ALTER_COLUMN = re.compile(r"\bALTER\s+COLUMN\s+(\[(?:[^\]]|\]\])+\]|\"[^\"]+\"|[^\s\[\"]+)", re.IGNORECASE)


def _retyped(history: list[tuple[bool, str]]) -> set[str]:
    """The (lower-case) columns whose type change SQL Server applied to the change table, named by the DDL."""
    names = set()
    for required_column_update, command in history:
        match = _ALTER_COLUMN.search(command) if required_column_update else None
        if match:
            names.add(match.group(1).strip('[]"').replace("]]", "]").lower())
    return names


def next_instance_name(current: str) -> str:
    match = re.search(r"_v(\d+)$", current)
    return f"{current[:match.start()]}_v{int(match.group(1)) + 1}" if match else f"{current}_v2"


def plan_for(options: Mapping[str, str], position: Mapping[str, int]) -> list[Rotation]:
    """The rotations due, given the stream's committed position per database."""
    role = options.get("cdckit.sqlserver.cdc.role") or None
    rotations: list[Rotation] = []
    for database in databases(options):
        with closing(connect(options, database)) as conn:
            cursor = conn.cursor()
            for instance in capture_instances(cursor, database, options):
                if instance.previous is not None:
                    passed = position.get(database, 0) >= instance.start_lsn
                    if passed:
                        rotations.append(Rotation(
                            "drop", database, instance.schema, instance.name, instance.previous.capture_instance,
                            f"the stream passed {instance.capture_instance}'s start LSN "
                            f"{format_sqlserver_lsn(instance.start_lsn)}: {instance.previous.capture_instance} is "
                            f"no longer read"))
                    continue  # two instances: a new rotation waits for this one to finish
                reason = drift(cursor, instance)
                if reason is not None:
                    rotations.append(Rotation("create", database, instance.schema, instance.name,
                                              next_instance_name(instance.capture_instance), reason, role))
    return rotations


def apply_with(options: Mapping[str, str], rotations: list[Rotation]) -> None:
    for rotation in rotations:
        conn = connect(options, rotation.database)
        try:
            conn.cursor().execute(rotation.statement(), *rotation.parameters())
        except Exception as exc:
            raise CdcKitError(
                f"{rotation.action} of capture instance {rotation.capture_instance} on {rotation.database}."
                f"{rotation.schema}.{rotation.table} failed ({' '.join(str(exc).split())[:300]}); the login may "
                f"lack db_owner: run `cdckit schema-evolution --plan` and give the T-SQL to a DBA") from None
        finally:
            conn.close()

