"""The one row shape every source emits: what a Kafka record carries, plus ordering metadata.

One streaming query serves all captured tables, and sinks need no per-table code. ``value`` holds text
messages (JSON); ``value_binary`` holds binary ones (Avro), and exactly one of them is set unless the record
is a tombstone.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import TableFormat

EVENT_SCHEMA = (
    "topic STRING, key STRING, value STRING, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
    "`table` STRING, op STRING, commit_lsn BIGINT, lsn BIGINT, serial INT, source_ts_ms BIGINT, value_binary BINARY"
)
EVENT_COLUMNS = ("topic", "key", "value", "headers", "table", "op", "commit_lsn", "lsn", "serial", "source_ts_ms",
                 "value_binary")

EventRow = tuple[object, ...]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def record(topic: str, key: str | None, value: str | bytes | None, *, op: str, position: Position, ts_ms: int,
           table: str | None = None, serial: int | None = None) -> EventRow:
    """One output record; ``value`` bytes go to ``value_binary``."""
    text, binary = (None, value) if isinstance(value, bytes) else (value, None)
    return (topic, key, text, [], table, op, position.commit_lsn, position.lsn,
            position.serial if serial is None else serial, ts_ms, binary)


def event_rows(event: ChangeEvent, table_format: TableFormat, tombstones: bool) -> list[EventRow]:
    """The records of one change event: the event itself and, after a delete, its tombstone."""
    key_row = event.after if event.op in ("c", "r", "u") else event.before
    key = table_format.key_json(key_row or {})
    table = f"{event.schema}.{event.table}"
    rows = [record(table_format.topic, key, table_format.value_json(event, now_ms()), op=event.op,
                   position=event.position, ts_ms=event.source_ts_ms, table=table)]
    if event.op == "d" and tombstones:
        rows.append(record(table_format.topic, key, None, op="tombstone", position=event.position,
                           ts_ms=event.source_ts_ms, table=table, serial=event.position.serial + 1))
    return rows


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    return default if value is None else value.strip().lower() in ("true", "1", "yes", "on")
