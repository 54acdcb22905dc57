"""Transaction metadata (``provide.transaction.metadata``): BEGIN / END records and the ``transaction`` block.

A transaction's BEGIN is written before its first data event and its END after its last, with the number of
events per data collection; transactions without captured events produce neither, as in Debezium.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cdckit.formats.debezium.source import field as _field

# As Debezium 2.5.2's SchemaFactory builds them, measured with its PostgreSQL connector: versioned, ts_ms last.
KEY_SCHEMA: dict[str, Any] = {"type": "struct", "fields": [_field("string", "id", False)], "optional": False,
                              "name": "io.debezium.connector.common.TransactionMetadataKey", "version": 1}
_COLLECTION_SCHEMA: dict[str, Any] = {"type": "struct", "fields": [_field("string", "data_collection", False),
                                                                   _field("int64", "event_count", False)],
                                      "optional": True, "name": "event.collection", "version": 1}
VALUE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _field("string", "status", False),
        _field("string", "id", False),
        _field("int64", "event_count", True),
        {"type": "array", "items": _COLLECTION_SCHEMA, "optional": True, "field": "data_collections"},
        _field("int64", "ts_ms", False),
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
}
# The SQL Server and YugabyteDB formats follow their seeds' examples (decisions 0006, 0016): ts_ms third, and no
# versions.
SEED_KEY_SCHEMA: dict[str, Any] = {key: value for key, value in KEY_SCHEMA.items() if key != "version"}
_BY_NAME = {field["field"]: field for field in VALUE_SCHEMA["fields"]}
SEED_VALUE_SCHEMA: dict[str, Any] = {
    **{key: value for key, value in VALUE_SCHEMA.items() if key != "version"},
    "fields": [*(_BY_NAME[name] for name in ("status", "id", "ts_ms", "event_count")),
               {**_BY_NAME["data_collections"], "items": {**_COLLECTION_SCHEMA, "optional": False}}],
}


def schemas(seed_form: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(key schema, value schema) of transaction records."""
    return (SEED_KEY_SCHEMA, SEED_VALUE_SCHEMA) if seed_form else (KEY_SCHEMA, VALUE_SCHEMA)


def transaction_topic(prefix: str, topic_transaction: str = "transaction") -> str:
    return f"{prefix}.{topic_transaction}"


def begin_payload(transaction_id: str, ts_ms: int, seed_form: bool = False) -> dict[str, Any]:
    return _ordered({"status": "BEGIN", "id": transaction_id, "event_count": None, "data_collections": None,
                     "ts_ms": ts_ms}, seed_form)


def end_payload(transaction_id: str, ts_ms: int, per_collection: Counter[str], seed_form: bool = False
                ) -> dict[str, Any]:
    return _ordered({"status": "END", "id": transaction_id, "event_count": sum(per_collection.values()),
                     "data_collections": [{"data_collection": name, "event_count": count}
                                          for name, count in per_collection.items()], "ts_ms": ts_ms}, seed_form)


def _ordered(payload: dict[str, Any], seed_form: bool) -> dict[str, Any]:
    """The payload in its schema's field order."""
    return {field["field"]: payload[field["field"]] for field in schemas(seed_form)[1]["fields"]}


def wrap(payload: dict[str, Any], schema: dict[str, Any], schemas_enable: bool) -> dict[str, Any]:
    return {"schema": schema, "payload": payload} if schemas_enable else payload


@dataclass
class TransactionTracker:
    """Numbers the events of the current transaction and produces its BEGIN and END payloads.

    ``transaction_id`` tells transactions apart; each record may show its own label of it (Debezium 2.5.2's
    PostgreSQL connector writes ``<xid>:<LSN>``, the LSN where the record's message sits); without one, the id."""

    transaction_id: str | None = None
    ts_ms: int = 0
    per_collection: Counter[str] = field(default_factory=Counter)
    begun: bool = False
    begin_label: str | None = None
    seed_form: bool = False  # SQL Server and YugabyteDB: the seeds' field order

    def start(self, transaction_id: str, ts_ms: int, begin_label: str | None = None) -> None:
        self.transaction_id, self.ts_ms, self.begun = transaction_id, ts_ms, False
        self.begin_label = begin_label
        self.per_collection = Counter()

    def data_event(self, data_collection: str, label: str | None = None
                   ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """(BEGIN payload if this is the transaction's first event, the event's ``transaction`` block)."""
        assert self.transaction_id is not None, "data_event() before start()"
        begin = None
        if not self.begun:
            begin = begin_payload(self.begin_label or self.transaction_id, self.ts_ms, self.seed_form)
            self.begun = True
        self.per_collection[data_collection] += 1
        block = {"id": label or self.transaction_id, "total_order": sum(self.per_collection.values()),
                 "data_collection_order": self.per_collection[data_collection]}
        return begin, block

    def end(self, label: str | None = None) -> dict[str, Any] | None:
        """The END payload, or None when the transaction emitted no event."""
        if not self.begun or self.transaction_id is None:
            return None
        payload = end_payload(label or self.transaction_id, self.ts_ms, self.per_collection, self.seed_form)
        self.transaction_id, self.begun = None, False
        return payload
