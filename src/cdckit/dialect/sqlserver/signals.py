"""Debezium signals read from the signalling table's change stream (``signal.data.collection``).

Supported: ``execute-snapshot`` (``data-collections``: regular expressions matched against
``<database>.<schema>.<table>``; ``type``: ``incremental``; optional ``additional-condition``) and
``stop-snapshot`` (for the listed collections, or all). Signals take effect in the micro-batch whose range
holds their commit LSN: the requested tables are read there, chunk by chunk, each chunk reconciled with the
change tables by watermarks, so an ad hoc snapshot never goes back in time against the stream.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from cdckit.dialect.signals import Signal, parse_signal
from cdckit.dialect.sqlserver import queries

__all__ = ["Signal", "SnapshotRequest", "parse_signal", "snapshot_requests"]

log = logging.getLogger("cdckit.signals")


@dataclass(frozen=True)
class SnapshotRequest:
    data_collections: tuple[str, ...]
    condition: str | None = None

    def selects(self, qualified_table: str) -> bool:
        return any(re.fullmatch(p, qualified_table, flags=re.IGNORECASE) for p in self.data_collections)


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
