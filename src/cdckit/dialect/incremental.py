"""An incremental (ad hoc) snapshot's progress, as Debezium's signals move it; both dialects keep it in their
stream's offsets and plan chunks from it (``postgres/incremental.py``, ``spark/sources/sqlserver_stream.py``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cdckit.dialect.signals import Signal, check_condition, check_patterns, matches

log = logging.getLogger("cdckit.signals")


@dataclass(frozen=True)
class TableRequest:
    schema: str
    table: str
    condition: str | None = None  # the signal's additional condition for this table

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "table": self.table, "condition": self.condition}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> TableRequest:
        return cls(str(document["schema"]), str(document["table"]), document.get("condition"))


Key = tuple[str, ...]  # a position in a table, as text: PostgreSQL, the key columns' values in key order


@dataclass(frozen=True)
class Progress:
    """Where the incremental snapshot stands at a batch's end (kept in the end offset)."""

    pending: tuple[TableRequest, ...] = ()  # tables still to read, in order
    current: TableRequest | None = None  # the table being read
    # Where the current table stands, as the dialect plans its chunks (PostgreSQL: the key read up to, and the
    # largest key when the table's snapshot began; SQL Server: the next chunk, and the table's chunk plan).
    last: Key | None = None
    high: Key | None = None
    paused: bool = False
    chunks: int = 0  # chunks planned so far: the next chunk's id

    @property
    def active(self) -> bool:
        return self.current is not None or bool(self.pending)

    @property
    def runnable(self) -> bool:
        return self.active and not self.paused

    def to_json(self) -> dict[str, Any] | None:
        """The offset's ``incremental`` entry; None when nothing is requested or paused (the offset leaves it out)."""
        if not self.active and not self.paused:
            return None
        return {"pending": [r.to_json() for r in self.pending],
                "current": self.current.to_json() if self.current else None,
                "last": list(self.last) if self.last is not None else None,
                "high": list(self.high) if self.high is not None else None,
                "paused": self.paused, "chunks": self.chunks}

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> Progress:
        document = offset.get("incremental")
        if not document:
            return cls()
        current = document.get("current")
        return cls(tuple(TableRequest.from_json(r) for r in document.get("pending") or ()),
                   TableRequest.from_json(current) if current else None,
                   tuple(document["last"]) if document.get("last") is not None else None,
                   tuple(document["high"]) if document.get("high") is not None else None,
                   bool(document.get("paused")), int(document.get("chunks") or 0))

    def after(self, signals: Iterable[Signal], captured: Sequence[tuple[str, str]], dialect: str = "postgres",
              qualifier: str = "") -> Progress:
        """The progress once ``signals`` (in commit order) are applied. ``captured``: the (schema, table) names the
        include and exclude lists capture; ``qualifier`` goes before ``<schema>.<table>`` where the connector names
        tables with more (SQL Server: ``<database>.``); ``dialect``: sqlglot's, for additional conditions."""
        progress = self
        for signal in signals:
            progress = progress._apply(signal, captured, dialect, qualifier)
        return progress

    def _apply(self, signal: Signal, captured: Sequence[tuple[str, str]], dialect: str, qualifier: str) -> Progress:
        collections = signal.data_collections()
        conditions = signal.conditions()
        try:
            check_patterns((*collections, *(conditions if isinstance(conditions, dict) else ())))
        except ValueError as error:
            log.error("signal %s ignored: %s", signal.id, error)
            return self

        def named(request: TableRequest) -> str:
            return qualifier + request.qualified_name

        if signal.type == "execute-snapshot":
            kind = str(signal.data.get("type", "incremental")).lower()
            if kind != "incremental":
                log.error("signal %s asks for a %s snapshot; cdckit takes incremental snapshots only (a blocking one: "
                          "stop the job and run `cdckit snapshot`); ignored", signal.id, kind)
                return self
            if not collections:
                log.error("signal %s: execute-snapshot names no data-collections; nothing to do", signal.id)
                return self
            requested = []
            for schema, table in captured:
                name = f"{qualifier}{schema}.{table}"
                if not matches(collections, name):
                    continue
                condition = conditions if isinstance(conditions, str) or conditions is None else next(
                    (f for c, f in conditions.items() if matches((c,), name)), None)
                try:
                    condition = check_condition(condition, dialect) if condition else None
                except ValueError as error:
                    log.error("signal %s ignored: %s", signal.id, error)
                    return self
                requested.append(TableRequest(schema, table, condition))
            if not requested:
                log.error("signal %s: no captured table matches data-collections %s; name tables as <schema>.<table> "
                          "and add them to table.include.list first", signal.id, list(collections))
                return self
            known = {r.qualified_name for r in (*self.pending, *([self.current] if self.current else []))}
            added = tuple(r for r in requested if r.qualified_name not in known)
            log.info("signal %s: incremental snapshot of %s requested", signal.id,
                     ", ".join(r.qualified_name for r in added) or "tables already being read")
            return replace(self, pending=self.pending + added)
        if signal.type == "stop-snapshot":
            if not collections:
                log.info("signal %s: incremental snapshot stopped", signal.id)
                return replace(self, pending=(), current=None, last=None, high=None)
            pending = tuple(r for r in self.pending if not matches(collections, named(r)))
            progress = replace(self, pending=pending)
            if self.current is not None and matches(collections, named(self.current)):
                progress = replace(progress, current=None, last=None, high=None)
            log.info("signal %s: incremental snapshot of %s stopped", signal.id, list(collections))
            return progress
        if signal.type == "pause-snapshot":
            log.info("signal %s: incremental snapshot paused", signal.id)
            return replace(self, paused=True)
        if signal.type == "resume-snapshot":
            log.info("signal %s: incremental snapshot resumed", signal.id)
            return replace(self, paused=False)
        log.info("signal %s of type %s is not one cdckit acts on; ignored", signal.id, signal.type)
        return self
