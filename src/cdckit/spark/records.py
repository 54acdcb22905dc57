"""From neutral change events to the records a sink writes: data events, tombstones, transaction metadata,
heartbeats. Dialect-neutral; the stream readers of every source feed their events through one ``RecordBuilder``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from cdckit.events import ChangeEvent
from cdckit.formats.debezium import transaction as tx
from cdckit.formats.debezium.envelope import (
    FormatSettings,
    TableFormat,
    dumps,
    heartbeat_messages,
    heartbeat_topic,
)
from cdckit.spark.rows import EventRow, event_rows, option_bool


class RecordBuilder:
    """Turns a batch's events, in order, into records.

    ``format_for`` gives the table format of a data event; ``transaction_id`` the id Debezium's connector would
    give the event's transaction (PostgreSQL: the xid; SQL Server: the commit LSN).
    """

    def __init__(self, options: Mapping[str, str], settings: FormatSettings,
                 format_for: Callable[[ChangeEvent], TableFormat],
                 transaction_id: Callable[[ChangeEvent], str]) -> None:
        self.settings = settings
        self.format_for = format_for
        self.transaction_id = transaction_id
        self.tombstones = option_bool(options, "tombstones.on.delete", True)
        self.skipped = {op.strip() for op in options.get("skipped.operations", "t").split(",")}
        self.with_transactions = option_bool(options, "provide.transaction.metadata", False)
        self.transaction_topic = tx.transaction_topic(settings.topic_prefix, options.get("topic.transaction",
                                                                                         "transaction"))
        self.heartbeat_topic = heartbeat_topic(settings.topic_prefix,
                                               options.get("topic.heartbeat.prefix", "__debezium-heartbeat"))
        self.tracker = tx.TransactionTracker()

    def rows(self, event: ChangeEvent) -> Iterator[EventRow]:
        position = event.position
        if event.op == "hb":
            key, value = heartbeat_messages(self.settings, event.source_ts_ms)
            yield (self.heartbeat_topic, key, value, [], None, "hb", position.commit_lsn, position.lsn, 0,
                   event.source_ts_ms)
            return
        if event.op == "txend":
            end = self.tracker.end() if self.with_transactions else None
            if end is not None:
                yield self._transaction_row(end, position.commit_lsn, position.lsn, 0, event.source_ts_ms)
            return
        if event.op in self.skipped:
            return
        table_format = self.format_for(event)
        if self.with_transactions:
            transaction_id = self.transaction_id(event)
            if self.tracker.transaction_id != transaction_id:
                self.tracker.start(transaction_id, event.source_ts_ms)
            begin, block = self.tracker.data_event(f"{event.schema}.{event.table}" if not self.settings.is_sqlserver
                                                   else f"{table_format.database}.{event.schema}.{event.table}")
            if begin is not None:
                yield self._transaction_row(begin, position.commit_lsn, position.lsn, -1, event.source_ts_ms)
            event.extra["transaction"] = block
        yield from event_rows(event, table_format, self.tombstones)

    def _transaction_row(self, payload: dict[str, Any], commit_lsn: int, lsn: int, serial: int,
                         ts_ms: int) -> EventRow:
        key = tx.wrap({"id": payload["id"]}, tx.KEY_SCHEMA, self.settings.key_schemas_enable)
        value = tx.wrap(payload, tx.VALUE_SCHEMA, self.settings.value_schemas_enable)
        return (self.transaction_topic, dumps(key), dumps(value), [], None, "tx", commit_lsn, lsn, serial, ts_ms)
