"""From neutral change events to the records a sink writes: data events, tombstones, transaction metadata,
heartbeats. Dialect-neutral; the stream readers of every source feed their events through one ``RecordBuilder``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from cdckit.events import ChangeEvent, Position
from cdckit.formats import qlik
from cdckit.formats.debezium import schema_change
from cdckit.formats.debezium import transaction as tx
from cdckit.formats.debezium.envelope import (
    FormatSettings,
    TableFormat,
    dumps,
    format_settings,
    heartbeat_messages,
    heartbeat_topic,
    source_block,
    topic_name,
)
from cdckit.formats.qlik import postgres as qlik_postgres
from cdckit.formats.qlik import sqlserver as qlik_sqlserver
from cdckit.spark.rows import EventRow, event_rows, now_ms, option_bool, record, skipped_operations

# How a transaction record names its transaction, from the event at hand and the LSN the record sits at.
TransactionLabel = Callable[[ChangeEvent, int], str]


def xid_at_lsn(event: ChangeEvent, lsn: int) -> str:
    """Debezium 2.5.2's PostgreSQL connector: ``<xid>:<LSN>``, the LSN of the BEGIN, the change or the COMMIT
    the record stands for (PostgresTransactionMonitor)."""
    return f"{event.tx_id}:{lsn}"


class Records(Protocol):
    def rows(self, event: ChangeEvent) -> Iterator[EventRow]: ...


def record_builder(options: Mapping[str, str], tables: Callable[[ChangeEvent], tuple[Any, TableFormat]],
                   transaction_id: Callable[[ChangeEvent], str],
                   table_version: Callable[[str], int] | None = None,
                   transaction_label: TransactionLabel | None = None) -> Records:
    """The builder ``cdckit.message.format`` asks for (Debezium envelopes by default, or Qlik messages).

    ``table_version`` gives a table's structure version (Qlik's ``tableVersion``) from the schema history."""
    if options.get("cdckit.message.format", "debezium") == "qlik":
        return QlikRecordBuilder(options, lambda event: tables(event)[0], table_version)
    return RecordBuilder(options, format_settings(options), lambda event: tables(event)[1], transaction_id,
                         transaction_label)


def schema_change_record(settings: FormatSettings, change: schema_change.TableChange, event: ChangeEvent,
                         table: str) -> EventRow:
    """The schema change record (a table's CREATE or ALTER) on the ``topic.prefix`` topic, in the SQL Server
    connector's format; ``event`` carries the position and source time the record reports."""
    source = source_block(settings)
    key, value = schema_change.schema_change_payloads(change, event, source, settings.topic_prefix, now_ms())
    key_doc = {"schema": schema_change.key_schema(settings.connector), "payload": key} \
        if settings.key_schemas_enable else key
    value_doc = {"schema": schema_change.value_schema(settings.connector, source), "payload": value} \
        if settings.value_schemas_enable else value
    return record(settings.topic_prefix, dumps(key_doc), dumps(value_doc), op="schema", position=event.position,
                  ts_ms=event.source_ts_ms, table=table)


class RecordBuilder:
    """Turns a batch's events, in order, into records.

    ``format_for`` gives the table format of a data event; ``transaction_id`` the id Debezium's connector would
    give the event's transaction (PostgreSQL: the xid; SQL Server: the commit LSN).
    """

    def __init__(self, options: Mapping[str, str], settings: FormatSettings,
                 format_for: Callable[[ChangeEvent], TableFormat],
                 transaction_id: Callable[[ChangeEvent], str],
                 transaction_label: TransactionLabel | None = None) -> None:
        self.settings = settings
        self.format_for = format_for
        self.transaction_id = transaction_id
        self.label = transaction_label
        self.tombstones = option_bool(options, "tombstones.on.delete", True)
        self.skipped = skipped_operations(options)
        self.filtered = 0  # events left out by skipped.operations (NumberOfEventsFiltered)
        self.with_transactions = option_bool(options, "provide.transaction.metadata", False)
        self.transaction_topic = tx.transaction_topic(settings.topic_prefix, options.get("topic.transaction",
                                                                                         "transaction"))
        self.heartbeat_topic = heartbeat_topic(settings.topic_prefix,
                                               options.get("topic.heartbeat.prefix", "__debezium-heartbeat"))
        self.tracker = tx.TransactionTracker(seed_form=settings.connector != "postgresql")
        self.transaction_schemas = tx.schemas(self.tracker.seed_form)

    def rows(self, event: ChangeEvent) -> Iterator[EventRow]:
        position = event.position
        if event.op == "hb":
            key, value = heartbeat_messages(self.settings, event.source_ts_ms)
            yield record(self.heartbeat_topic, key, value, op="hb", position=position, ts_ms=event.source_ts_ms)
            return
        if event.op == "txend":
            end = self.tracker.end(self._label(event, event.position.lsn)) if self.with_transactions else None
            if end is not None:
                yield self._transaction_row(end, position, 0, event.source_ts_ms)
            return
        if event.op in self.skipped:
            self.filtered += 1
            return
        table_format = self.format_for(event)
        # Snapshot reads belong to no captured transaction: Debezium gives them no transaction block and no
        # BEGIN/END (metadata covers transactions that happen after the connector starts).
        if self.with_transactions and event.op != "r":
            transaction_id = self.transaction_id(event)
            if self.tracker.transaction_id != transaction_id:
                begin_lsn = event.extra.get("begin_lsn")
                self.tracker.start(transaction_id, event.source_ts_ms,
                                   self._label(event, begin_lsn) if isinstance(begin_lsn, int) else None)
            begin, block = self.tracker.data_event(f"{event.schema}.{event.table}" if not self.settings.is_sqlserver
                                                   else f"{table_format.database}.{event.schema}.{event.table}",
                                                   self._label(event, event.position.lsn))
            if begin is not None:
                yield self._transaction_row(begin, position, -1, event.source_ts_ms)
            event.extra["transaction"] = block
        yield from event_rows(event, table_format, self.tombstones)

    def _label(self, event: ChangeEvent, lsn: int) -> str | None:
        return None if self.label is None else self.label(event, lsn)

    def _transaction_row(self, payload: dict[str, Any], position: Position, serial: int, ts_ms: int) -> EventRow:
        key_schema, value_schema = self.transaction_schemas
        key = tx.wrap({"id": payload["id"]}, key_schema, self.settings.key_schemas_enable)
        value = tx.wrap(payload, value_schema, self.settings.value_schemas_enable)
        return record(self.transaction_topic, dumps(key), dumps(value), op="tx", position=position, ts_ms=ts_ms,
                      serial=serial)


_QLIK_OPERATIONS = {"r": "REFRESH", "c": "INSERT", "u": "UPDATE", "d": "DELETE"}


class QlikRecordBuilder:
    """Qlik Replicate messages for a batch's events (``cdckit.message.format=qlik``), for the tables of any source
    (PostgreSQL's ``TableInfo``, SQL Server's ``CaptureInstance``), with the source's Qlik mapping.

    Each table's metadata message precedes its first data message in every batch (and every snapshot partition),
    so a consumer starting anywhere meets the structure before the data. ``transactionLastEvent`` needs the next
    event, so data messages are held back by one event until the next event or the transaction's end.
    Heartbeats and tombstones have no Qlik equivalent and are not written. Topics are the Debezium format's.
    """

    def __init__(self, options: Mapping[str, str], table_for: Callable[[ChangeEvent], Any],
                 table_version: Callable[[str], int] | None = None) -> None:
        self.table_version = table_version or (lambda _name: 1)
        self.settings = qlik.QlikSettings(server=options.get("cdckit.qlik.server") or options["topic.prefix"],
                                          task=options.get("cdckit.qlik.task") or options.get("name") or "cdckit",
                                          encoding=options.get("cdckit.qlik.encoding", "json"))  # type: ignore[arg-type]
        self.format_settings = format_settings(options)
        self.mapping = qlik_sqlserver.MAPPING if self.format_settings.is_sqlserver else qlik_postgres.MAPPING
        self.table_for = table_for
        self.skipped = skipped_operations(options)
        self.filtered = 0  # events left out by skipped.operations (NumberOfEventsFiltered)
        self.tables: dict[str, qlik.QlikTable] = {}
        self.pending: ChangeEvent | None = None
        self.counter = 0

    def rows(self, event: ChangeEvent) -> Iterator[EventRow]:
        if event.op == "txend":
            yield from self._flush(last=True)
            self.counter = 0
            return
        if event.op in self.skipped:
            self.filtered += 1
            return
        if event.op not in _QLIK_OPERATIONS:
            return
        if event.op == "r":
            yield from self._emit(event, last=False)
            return
        yield from self._flush(last=False)
        self.pending = event

    def _flush(self, last: bool) -> Iterator[EventRow]:
        if self.pending is not None:
            event, self.pending = self.pending, None
            yield from self._emit(event, last)

    def _emit(self, event: ChangeEvent, last: bool) -> Iterator[EventRow]:
        info = self.table_for(event)
        columns = info.emitted_columns()
        names = {column.name for column in columns}
        topic = topic_name(self.format_settings, info.schema, info.name, getattr(info, "database", ""))
        table = self.tables.get(topic)
        version = self.table_version(info.qualified_name)
        if table is None or table.table_version != version or len(table.columns) != len(columns):
            table = self.mapping.table(info.schema, info.name, columns, info.key_columns, version)
            self.tables[topic] = table
            metadata = qlik.metadata_message(table, self.settings, qlik.format_timestamp(now_ms()))
            yield record(topic, None, self._value(qlik.encode_metadata(metadata, self.settings)), op="qlik-metadata",
                         position=event.position, ts_ms=event.source_ts_ms, table=f"{info.schema}.{info.name}",
                         serial=-2)

        def emitted(row: Mapping[str, object] | None) -> dict[str, object] | None:
            return None if row is None else {name: value for name, value in row.items() if name in names}

        operation = _QLIK_OPERATIONS[event.op]
        row = emitted(event.before if event.op == "d" else event.after)
        data = self.mapping.row(columns, row) or {}
        if event.op == "d" and all(v is None for k, v in (row or {}).items() if k not in info.key_columns):
            data = {k: v for k, v in data.items() if k in info.key_columns}  # only the key is known
        before = self.mapping.row(columns, emitted(event.before)) if event.op == "u" else None
        position = event.position
        if event.op != "r":
            self.counter += 1
        headers = self.mapping.headers(event)
        change = qlik.QlikChange(
            operation, data, before,  # type: ignore[arg-type]
            change_sequence=headers.change_sequence,
            timestamp=qlik.format_timestamp(event.source_ts_ms),
            stream_position=headers.stream_position,
            transaction_id=headers.transaction_id,
            transaction_event_counter=self.counter,
            transaction_last_event=last,
        )
        message = qlik.data_message(table, change, self.settings)
        by_name = {column.name: column for column in table.columns}
        key = dumps({name: qlik.json_value(by_name[name], data.get(name)) for name in info.key_columns})
        yield record(topic, key, self._value(qlik.encode_data(table, message, self.settings)), op=event.op,
                     position=position, ts_ms=event.source_ts_ms, table=f"{info.schema}.{info.name}")

    def _value(self, encoded: bytes) -> str | bytes:
        return encoded.decode("utf-8") if self.settings.encoding == "json" else encoded
