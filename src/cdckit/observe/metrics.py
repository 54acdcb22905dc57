"""Debezium's connector metrics, kept by the driver from what a job's Spark tasks report.

Nothing reads the data again for them. Each partition a change source reads ends with one control row
(``stats_document``): its events by op, its transactions, the events it filtered out and its last event. The
driver adds a batch's partitions up when the batch is committed; Spark's own progress (``StreamingQueryListener``)
gives the batch's timing and says when a trigger found nothing new. Snapshots report their tables and the rows
each one gave.

Names and meanings are Debezium's (the connectors' "Monitoring" sections), per captured database, in two contexts:

* ``streaming``: ``MilliSecondsBehindSource``, ``TotalNumberOfEventsSeen``, ``TotalNumberOf{Create,Update,Delete}
  EventsSeen``, ``NumberOfEventsFiltered``, ``NumberOfCommittedTransactions``, ``LastEvent``, ``Connected``,
  ``SourceEventPosition``, ``LastTransactionId``, ``MilliSecondsSinceLastEvent``;
* ``snapshot``: ``TotalTableCount``, ``RemainingTableCount``, ``SnapshotRunning``, ``SnapshotCompleted``,
  ``SnapshotAborted``, ``SnapshotDurationInSeconds``, ``RowsScanned`` (per table), ``TotalNumberOfEventsSeen``.

Where cdckit differs, by its nature: an event counts as seen once the batch holding it is committed to the sink (a
batch Spark runs again after a crash is counted again, as Debezium counts events re-read after a restart), and
``MilliSecondsBehindSource`` is the time from the last event's commit at the source to that commit to the sink, and
0 once a trigger finds nothing new (caught up). Counts start at 0 with each run of the job, as Debezium's start
with each connector start.

Beyond Debezium, what pages people: a PostgreSQL replication slot's retained WAL (``SlotRetainedWalBytes``), and
for SQL Server the capture job's latency (``CaptureJobLatencySeconds``) and how far the stream's position is ahead
of the cleanup job's low-water mark (``CleanupMarginSeconds``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

STREAMING = "streaming"
SNAPSHOT = "snapshot"
STATS_KIND = "stats"  # the ``kind`` of a partition's stats control row
DATA_OPS = ("r", "c", "u", "d", "t")  # Debezium's data change events (not tombstones, heartbeats or metadata)
PLUGINS = {"postgresql": "postgres", "YugabyteDB": "postgres", "sqlserver": "sql_server"}  # the MBeans' domains


@dataclass(frozen=True)
class Sample:
    """One value: Debezium's attribute name, its context and database, and any further labels (``table``)."""

    name: str
    context: str
    database: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


@dataclass
class _Streaming:
    events: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    filtered: int = 0
    transactions: int = 0
    last: dict[str, Any] | None = None  # the last event (``stats_document``'s ``last``)
    last_seen_ms: int | None = None  # when the batch holding the last event was committed
    behind_ms: int = -1
    connected: bool = False


@dataclass
class _Snapshot:
    tables: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # rows scanned per table
    estimates: dict[str, int] = field(default_factory=dict)  # the source's row estimate per table, where it has one
    done: set[str] = field(default_factory=set)
    running: bool = False
    completed: bool = False
    aborted: bool = False
    started_ms: int | None = None
    ended_ms: int | None = None


def stats_document(database: str, ops: Mapping[str, int], transactions: int, filtered: int,
                   last: Mapping[str, Any] | None) -> dict[str, Any]:
    """The control row a partition of a change source ends with (``kind`` ``stats``)."""
    return {"kind": STATS_KIND, "database": database, "ops": dict(ops), "transactions": transactions,
            "filtered": filtered, "last": dict(last) if last else None}


class ConnectorMetrics:
    """One job's metrics; thread-safe (Spark's listener, the HTTP server and the job update or read it)."""

    def __init__(self, connector: str, name: str, databases: Iterable[str], clock: Any = time.time,
                 tags: Mapping[str, str] | None = None) -> None:
        self.plugin = PLUGINS.get(connector, connector)
        self.name = name
        self.tags = dict(tags or {})  # custom.metric.tags: labels on every value
        self.clock = clock
        self._lock = threading.Lock()
        self._streaming: dict[str, _Streaming] = {db: _Streaming() for db in databases}
        self._snapshot: dict[str, _Snapshot] = {}
        self._source: dict[str, dict[str, float]] = {}
        self.batch: dict[str, Any] = {}  # the last committed batch: id, time, rows, Spark's timing

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _db(self, database: str) -> _Streaming:
        return self._streaming.setdefault(database, _Streaming())

    # -- streaming ---------------------------------------------------------------------------------------------

    def batch_committed(self, batch_id: int, stats: Iterable[Mapping[str, Any]], records: int,
                        write_ms: int | None = None) -> None:
        """A micro-batch is in the sink: add up what its partitions read (``stats_document`` each). ``write_ms``:
        the time the batch took to read and write (Spark's progress, which comes later, adds the trigger's)."""
        now = self.now_ms()
        with self._lock:
            lasts: dict[str, dict[str, Any]] = {}
            for doc in stats:
                database = str(doc.get("database", ""))
                metrics = self._db(database)
                ops = {op: int(n) for op, n in (doc.get("ops") or {}).items()}
                metrics.ops.update(ops)
                metrics.events += sum(n for op, n in ops.items() if op in DATA_OPS)
                metrics.transactions += int(doc.get("transactions") or 0)
                metrics.filtered += int(doc.get("filtered") or 0)
                metrics.connected = True
                last = doc.get("last")
                if last and (database not in lasts or _position(last) >= _position(lasts[database])):
                    lasts[database] = dict(last)
            for database, last in lasts.items():
                metrics = self._streaming[database]
                metrics.last, metrics.last_seen_ms = last, now
                if last.get("source_ts_ms"):
                    metrics.behind_ms = max(0, now - int(last["source_ts_ms"]))
            self.batch = {"id": batch_id, "committed_ms": now, "records": records}
            if write_ms is not None:
                self.batch["write_ms"] = write_ms

    def progress(self, progress: Mapping[str, Any]) -> None:
        """Spark's progress of the batch just committed (a ``StreamingQueryProgress`` as a dict)."""
        with self._lock:
            if self.batch.get("id") == progress.get("batchId"):
                durations = progress.get("durationMs") or {}
                duration = int(durations.get("triggerExecution", 0) or 0)
                self.batch["duration_ms"] = duration
                if duration > 0:  # the records it wrote, per second of the batch (Spark's row counts are the source's)
                    self.batch["records_per_second"] = round(int(self.batch.get("records", 0)) * 1000 / duration, 1)

    def caught_up(self) -> None:
        """A trigger found nothing new: every change the source had is in the sink."""
        with self._lock:
            for metrics in self._streaming.values():
                metrics.behind_ms = 0
                metrics.connected = True

    def connected(self, database: str, value: bool) -> None:
        with self._lock:
            self._db(database).connected = value

    def source_health(self, database: str, values: Mapping[str, float | None]) -> None:
        """Values beyond Debezium's (slot retained WAL, capture job latency, cleanup margin); None drops one."""
        with self._lock:
            current = self._source.setdefault(database, {})
            for key, value in values.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = float(value)

    def last_commit(self, database: str) -> int | None:
        """The commit position of the last event of ``database`` a committed batch held, or None."""
        with self._lock:
            last = self._streaming.get(database, _Streaming()).last
            return int(last["position"][0]) if last and last.get("position") else None

    # -- snapshot ----------------------------------------------------------------------------------------------

    def snapshot_started(self, tables: Mapping[str, list[str]],
                         estimates: Mapping[str, Mapping[str, int]] | None = None) -> None:
        """The snapshot's tables per database (``schema.table``), and the source's row estimates where known."""
        now = self.now_ms()
        with self._lock:
            for database, names in tables.items():
                self._snapshot[database] = _Snapshot(tables=list(names), rows={n: 0 for n in names}, running=True,
                                                     started_ms=now,
                                                     estimates=dict((estimates or {}).get(database, {})))

    def snapshot_rows(self, database: str, table: str, rows: int, done: bool = False) -> None:
        """Rows read of a table so far (``done``: all of them)."""
        with self._lock:
            snapshot = self._snapshot.setdefault(database, _Snapshot(running=True, started_ms=self.now_ms()))
            snapshot.rows[table] = rows
            if done:
                snapshot.done.add(table)

    def snapshot_ended(self, completed: bool) -> None:
        now = self.now_ms()
        with self._lock:
            for snapshot in self._snapshot.values():
                snapshot.running = False
                snapshot.completed, snapshot.aborted = completed, not completed
                snapshot.ended_ms = now
                if completed:
                    snapshot.done.update(snapshot.tables)

    # -- reading -----------------------------------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        """Every numeric value now: ``document``'s numbers and flags (strings and maps stay there), with the
        snapshot's ``RowsScanned`` per table and its ``TotalNumberOfEventsSeen``."""
        document = self.document()
        out: list[Sample] = []
        for context in (STREAMING, SNAPSHOT):
            for database, values in document[context].items():
                out.extend(Sample(name, context, database, float(value)) for name, value in values.items()
                           if isinstance(value, (bool, int, float)))
                if context == SNAPSHOT:
                    rows = values["RowsScanned"]
                    out.append(Sample("TotalNumberOfEventsSeen", SNAPSHOT, database, float(sum(rows.values()))))
                    out.extend(Sample("RowsScanned", SNAPSHOT, database, float(n), (("table", table),))
                               for table, n in rows.items())
        return out

    def document(self) -> dict[str, Any]:
        """Everything as JSON-ready data: the per-batch log line, the status file, ``cdckit status``."""
        now = self.now_ms()
        with self._lock:
            streaming = {}
            for database, m in sorted(self._streaming.items()):
                last = m.last or {}
                streaming[database] = {
                    "MilliSecondsBehindSource": m.behind_ms, "TotalNumberOfEventsSeen": m.events,
                    "TotalNumberOfCreateEventsSeen": m.ops.get("c", 0),
                    "TotalNumberOfUpdateEventsSeen": m.ops.get("u", 0),
                    "TotalNumberOfDeleteEventsSeen": m.ops.get("d", 0), "NumberOfEventsFiltered": m.filtered,
                    "NumberOfCommittedTransactions": m.transactions, "Connected": m.connected,
                    "MilliSecondsSinceLastEvent": now - m.last_seen_ms if m.last_seen_ms is not None else -1,
                    "LastEvent": describe(last) if last else "", "LastTransactionId": last.get("transaction") or "",
                    "SourceEventPosition": {k: str(v) for k, v in (last.get("source") or {}).items()},
                    **self._source.get(database, {})}
            snapshot = {}
            for database, s in sorted(self._snapshot.items()):
                ended = s.ended_ms if s.ended_ms is not None else now
                snapshot[database] = {
                    "TotalTableCount": len(s.tables), "RemainingTableCount": len(set(s.tables) - s.done),
                    "SnapshotRunning": s.running, "SnapshotCompleted": s.completed, "SnapshotAborted": s.aborted,
                    "SnapshotDurationInSeconds": (ended - s.started_ms) // 1000 if s.started_ms else 0,
                    "RowsScanned": dict(sorted(s.rows.items())), "EstimatedRows": dict(sorted(s.estimates.items()))}
            return {"connector": self.plugin, "name": self.name, "at_ms": now, "batch": dict(self.batch),
                    STREAMING: streaming, SNAPSHOT: snapshot}


def describe(last: Mapping[str, Any]) -> str:
    """Debezium's ``LastEvent`` as a short line: op, table and position."""
    position = ",".join(str(p) for p in last.get("position") or [])
    return f"{last.get('op', '')} {last.get('table', '')} at {position}".strip()


def _position(last: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(p) for p in last.get("position") or ())
