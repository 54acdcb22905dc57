"""The ``source`` block of each connector: its Kafka Connect schema and its payload for an event.

Field names and order are each connector's own (decision 0002 for PostgreSQL, 0006 for SQL Server).
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from cdckit.events import ChangeEvent

POSTGRES_VERSION = "2.5.2.Final"
SQLSERVER_VERSION = "2.0.1.Final"
# cdckit.debezium.format: the Debezium release whose records are reproduced (decision 0028)
FORMATS = ("2.5", "3.6")
VERSION_3 = "3.6.0.Final"


def field(type_: str, name: str, optional: bool) -> dict[str, Any]:
    return {"type": type_, "optional": optional, "field": name}


SNAPSHOT_ENUM: dict[str, Any] = {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                                 "parameters": {"allowed": "true,last,false,incremental"}, "default": "false",
                                 "field": "snapshot"}


# Debezium 3 names every marker its snapshots write (measured against 3.6.0.Final, decision 0028).
SNAPSHOT_ENUM_3: dict[str, Any] = {
    **SNAPSHOT_ENUM,
    "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"}}


def source_microseconds(event: ChangeEvent) -> int:
    """The source time in microseconds: the commit's own where the source gave it, else ``ts_ms`` in them."""
    micros = event.extra.get("source_ts_us")
    return int(str(micros)) if micros is not None else event.source_ts_ms * 1000


class SourceBlock(Protocol):
    connector: str
    schema: dict[str, Any]

    def payload(self, event: ChangeEvent, topic_prefix: str, database: str) -> dict[str, Any]: ...


class PostgresSource:
    """``io.debezium.connector.postgresql.Source`` (PostgreSQL and YugabyteDB connectors)."""

    def __init__(self, connector: str = "postgresql", debezium_format: str = "2.5") -> None:
        self.connector = connector
        self.version_3 = debezium_format != "2.5"
        common = [field("string", "version", False), field("string", "connector", False),
                  field("string", "name", False), field("int64", "ts_ms", False),
                  SNAPSHOT_ENUM_3 if self.version_3 else SNAPSHOT_ENUM,
                  field("string", "db", False), field("string", "sequence", True)]
        if self.version_3:  # Debezium 3: the source time in finer units, and the replication origin
            common += [field("int64", "ts_us", True), field("int64", "ts_ns", True)]
        own = [field("string", "schema", False), field("string", "table", False), field("int64", "txId", True),
               field("int64", "lsn", True), field("int64", "xmin", True)]
        if self.version_3:
            own += [field("string", "origin", True), field("int64", "origin_lsn", True)]
        self.schema: dict[str, Any] = {"type": "struct", "fields": common + own, "optional": False,
                                       "name": "io.debezium.connector.postgresql.Source"}
        if self.version_3:
            self.schema["version"] = 1
        self.schema["field"] = "source"

    def payload(self, event: ChangeEvent, topic_prefix: str, database: str) -> dict[str, Any]:
        last_commit, current = event.sequence
        sequence = None
        if last_commit is not None or current is not None:
            sequence = orjson.dumps([None if last_commit is None else str(last_commit),
                                     None if current is None else str(current)]).decode()
        head: dict[str, Any] = {"version": VERSION_3 if self.version_3 else POSTGRES_VERSION,
                                "connector": self.connector, "name": topic_prefix, "ts_ms": event.source_ts_ms,
                                "snapshot": event.snapshot, "db": database, "sequence": sequence}
        if self.version_3:
            micros = source_microseconds(event)
            head.update(ts_us=micros, ts_ns=micros * 1000)
        own: dict[str, Any] = {"schema": event.schema, "table": event.table, "txId": event.tx_id,
                               "lsn": event.position.lsn, "xmin": None}
        if self.version_3:
            own.update(origin=None, origin_lsn=None)
        return {**head, **own}


def format_sqlserver_lsn(value: int | None) -> str | None:
    """A 10-byte SQL Server LSN as Debezium prints it: ``00000027:00000758:0003``."""
    if value is None:
        return None
    return f"{value >> 48:08x}:{(value >> 16) & 0xFFFFFFFF:08x}:{value & 0xFFFF:04x}"


def parse_sqlserver_lsn(text: str) -> int:
    parts = text.split(":")
    if len(parts) != 3 or [len(p) for p in parts] != [8, 8, 4]:
        raise ValueError(f"{text!r} is not a SQL Server LSN (expected xxxxxxxx:xxxxxxxx:xxxx in hexadecimal)")
    return (int(parts[0], 16) << 48) | (int(parts[1], 16) << 16) | int(parts[2], 16)


class SqlServerSource:
    """``io.debezium.connector.sqlserver.Source``."""

    connector = "sqlserver"

    def __init__(self, debezium_format: str = "2.5") -> None:
        self.version_3 = debezium_format != "2.5"
        fields = [field("string", "version", False), field("string", "connector", False),
                  field("string", "name", False), field("int64", "ts_ms", False),
                  SNAPSHOT_ENUM_3 if self.version_3 else SNAPSHOT_ENUM, field("string", "db", False)]
        if self.version_3:  # after the fields every connector's source shares, as PostgreSQL's (not measured here)
            fields += [field("int64", "ts_us", True), field("int64", "ts_ns", True)]
        fields += [field("string", "schema", False), field("string", "table", False),
                   field("string", "change_lsn", True), field("string", "commit_lsn", True),
                   field("int64", "event_serial_no", True)]
        self.schema: dict[str, Any] = {"type": "struct", "fields": fields, "optional": False,
                                       "name": "io.debezium.connector.sqlserver.Source"}
        if self.version_3:
            self.schema["version"] = 1
        self.schema["field"] = "source"

    def payload(self, event: ChangeEvent, topic_prefix: str, database: str) -> dict[str, Any]:
        snapshot = event.snapshot != "false"
        serial = event.extra.get("event_serial_no")
        payload: dict[str, Any] = {
            "version": VERSION_3 if self.version_3 else SQLSERVER_VERSION,
            "connector": self.connector,
            "name": topic_prefix,
            "ts_ms": event.source_ts_ms,
            "snapshot": event.snapshot,
            "db": event.database or database,
        }
        if self.version_3:
            micros = source_microseconds(event)
            payload.update(ts_us=micros, ts_ns=micros * 1000)
        return {
            **payload,
            "schema": event.schema,
            "table": event.table,
            "change_lsn": None if snapshot else format_sqlserver_lsn(_change_lsn(event)),
            "commit_lsn": format_sqlserver_lsn(event.position.commit_lsn),
            "event_serial_no": None if snapshot or serial is None else int(str(serial)),
        }


def _change_lsn(event: ChangeEvent) -> int:
    """A SQL Server change's ``__$seqval``: its position's LSN, unless the change was logged out of seqval order (a
    deferred update), when its position is its place in the transaction and the seqval is kept beside it."""
    value = event.extra.get("change_lsn")
    return event.position.lsn if value is None else int(str(value))
