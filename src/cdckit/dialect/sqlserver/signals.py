"""Debezium signals read from the signalling table's change stream (``signal.data.collection``).

Supported: ``execute-snapshot`` (``data-collections``: regular expressions matched against
``<database>.<schema>.<table>``; ``type``: ``incremental``; optional ``additional-condition``) and
``stop-snapshot`` (for the listed collections, or all). Signals take effect in the micro-batch whose range
holds their commit LSN: the requested tables are read there, chunk by chunk, each chunk reconciled with the
change tables by watermarks, so an ad hoc snapshot never goes back in time against the stream.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cdckit.dialect.sqlserver import queries

log = logging.getLogger("cdckit.signals")


@dataclass(frozen=True)
class Signal:
    id: str
    type: str
    data: dict[str, Any]


@dataclass(frozen=True)
class SnapshotRequest:
    data_collections: tuple[str, ...]
    condition: str | None = None

    def selects(self, qualified_table: str) -> bool:
        return any(re.fullmatch(p, qualified_table, flags=re.IGNORECASE) for p in self.data_collections)


def parse_signal(row: dict[str, object]) -> Signal | None:
    signal_id, kind, data = str(row.get("id") or ""), str(row.get("type") or ""), row.get("data")
    try:
        document = json.loads(str(data)) if data else {}
    except json.JSONDecodeError:
        log.error("signal %s has data that is not JSON; ignored: %r", signal_id, data)
        return None
    if not isinstance(document, dict):
        log.error("signal %s data must be a JSON object; ignored", signal_id)
        return None
    return Signal(signal_id, kind, document)


def snapshot_requests(signals: Iterable[Signal]) -> list[SnapshotRequest]:
    """The snapshots the signals (in commit order) leave requested."""
    requests: list[SnapshotRequest] = []
    for signal in signals:
        collections = tuple(str(c) for c in signal.data.get("data-collections") or ())
        if signal.type == "execute-snapshot":
            kind = str(signal.data.get("type", "incremental")).lower()
            if kind != "incremental":
                log.error("signal %s asks for a %s snapshot; only incremental snapshots are supported", signal.id,
                          kind)
                continue
            if not collections:
                log.error("signal %s has no data-collections; ignored", signal.id)
                continue
            condition = signal.data.get("additional-condition")
            try:
                checked = queries.check_condition(str(condition)) if condition else None
            except ValueError as error:
                log.error("signal %s ignored: %s", signal.id, error)
                continue
            requests.append(SnapshotRequest(collections, checked))
        elif signal.type == "stop-snapshot":
            if not collections:
                requests.clear()
            else:
                requests = [r for r in requests if not set(r.data_collections) <= set(collections)]
        else:
            log.info("signal %s of type %s is not handled by cdckit", signal.id, signal.type)
    return requests
