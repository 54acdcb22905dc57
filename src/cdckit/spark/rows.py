"""The one row shape every source emits: what a Kafka record carries, plus ordering metadata.

One streaming query serves all captured tables, and sinks need no per-table code.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from cdckit.events import ChangeEvent
from cdckit.formats.debezium.envelope import TableFormat

EVENT_SCHEMA = (
    "topic STRING, key STRING, value STRING, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
    "`table` STRING, op STRING, commit_lsn BIGINT, lsn BIGINT, serial INT, source_ts_ms BIGINT"
)
EVENT_COLUMNS = ("topic", "key", "value", "headers", "table", "op", "commit_lsn", "lsn", "serial", "source_ts_ms")

EventRow = tuple[object, ...]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def event_rows(event: ChangeEvent, table_format: TableFormat, tombstones: bool) -> list[EventRow]:
    """The records of one change event: the event itself and, after a delete, its tombstone."""
    key_row = event.after if event.op in ("c", "r", "u") else event.before
    key = table_format.key_json(key_row or {})
    table = f"{event.schema}.{event.table}"
    position = event.position
    rows: list[EventRow] = [(table_format.topic, key, table_format.value_json(event, now_ms()), [], table, event.op,
                             position.commit_lsn, position.lsn, position.serial, event.source_ts_ms)]
    if event.op == "d" and tombstones:
        rows.append((table_format.topic, key, None, [], table, "tombstone", position.commit_lsn, position.lsn,
                     position.serial + 1, event.source_ts_ms))
    return rows


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    return default if value is None else value.strip().lower() in ("true", "1", "yes", "on")
