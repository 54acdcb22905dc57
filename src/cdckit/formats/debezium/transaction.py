"""Transaction metadata (``provide.transaction.metadata``): BEGIN / END records and the ``transaction`` block.

A transaction's BEGIN is written before its first data event and its END after its last, with the number of
events per data collection; transactions without captured events produce neither, as in Debezium.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cdckit.formats.debezium.source import field as _field

KEY_SCHEMA: dict[str, Any] = {"type": "struct", "fields": [_field("string", "id", False)], "optional": False,
                              "name": "io.debezium.connector.common.TransactionMetadataKey"}
_COLLECTION_SCHEMA: dict[str, Any] = {"type": "struct", "fields": [_field("string", "data_collection", False),
                                                                   _field("int64", "event_count", False)],
                                      "optional": False, "name": "event.collection", "version": 1}
VALUE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _field("string", "status", False),
        _field("string", "id", False),
        _field("int64", "ts_ms", False),
        _field("int64", "event_count", True),
        {"type": "array", "items": _COLLECTION_SCHEMA, "optional": True, "field": "data_collections"},
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
}


def transaction_topic(prefix: str, topic_transaction: str = "transaction") -> str:
    return f"{prefix}.{topic_transaction}"


def begin_payload(transaction_id: str, ts_ms: int) -> dict[str, Any]:
    return {"status": "BEGIN", "id": transaction_id, "ts_ms": ts_ms, "event_count": None, "data_collections": None}


def end_payload(transaction_id: str, ts_ms: int, per_collection: Counter[str]) -> dict[str, Any]:
    return {"status": "END", "id": transaction_id, "ts_ms": ts_ms, "event_count": sum(per_collection.values()),
            "data_collections": [{"data_collection": name, "event_count": count}
                                 for name, count in per_collection.items()]}


def wrap(payload: dict[str, Any], schema: dict[str, Any], schemas_enable: bool) -> dict[str, Any]:
    return {"schema": schema, "payload": payload} if schemas_enable else payload


@dataclass
class TransactionTracker:
    """Numbers the events of the current transaction and produces its BEGIN and END payloads."""

    transaction_id: str | None = None
    ts_ms: int = 0
    per_collection: Counter[str] = field(default_factory=Counter)
    begun: bool = False

    def start(self, transaction_id: str, ts_ms: int) -> None:
        self.transaction_id, self.ts_ms, self.begun = transaction_id, ts_ms, False
        self.per_collection = Counter()

    def data_event(self, data_collection: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """(BEGIN payload if this is the transaction's first event, the event's ``transaction`` block)."""
        assert self.transaction_id is not None, "data_event() before start()"
        begin = None
        if not self.begun:
            begin, self.begun = begin_payload(self.transaction_id, self.ts_ms), True
        self.per_collection[data_collection] += 1
        block = {"id": self.transaction_id, "total_order": sum(self.per_collection.values()),
                 "data_collection_order": self.per_collection[data_collection]}
        return begin, block

    def end(self) -> dict[str, Any] | None:
        """The END payload, or None when the transaction emitted no event."""
        if not self.begun or self.transaction_id is None:
            return None
        payload = end_payload(self.transaction_id, self.ts_ms, self.per_collection)
        self.transaction_id, self.begun = None, False
        return payload
