"""``cdckit stream`` on a terminal: a live view of the job's metrics (rich), rows per second and lag per database,
the last batch, and the snapshot's tables, each with a bar of the rows read against the source's estimate."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text


class LiveView:
    """Call ``update`` with each metrics document; use as a context manager around the stream."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = Live(Text("starting..."), console=console, refresh_per_second=4, transient=False)
        self._previous: tuple[float, dict[str, int]] | None = None

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def update(self, document: dict[str, Any]) -> None:
        self.live.update(self.render(document))

    def render(self, document: dict[str, Any]) -> Group:
        now = time.monotonic()
        seen = {db: int(v.get("TotalNumberOfEventsSeen", 0)) for db, v in document.get("streaming", {}).items()}
        rates = {}
        if self._previous is not None and now > self._previous[0]:
            rates = {db: (n - self._previous[1].get(db, 0)) / (now - self._previous[0]) for db, n in seen.items()}
        self._previous = (now, seen)
        table = Table(title=f"cdckit {document.get('name', '')}: {document.get('event', '')}", expand=False)
        for column in ("database", "lag", "events/s", "events", "c / u / d", "transactions", "last event", "source"):
            table.add_column(column, justify="left" if column in ("database", "last event", "source") else "right")
        for database, v in document.get("streaming", {}).items():
            lag = v.get("MilliSecondsBehindSource", -1)
            source = []
            if "SlotRetainedWalBytes" in v:
                source.append(f"slot {v['SlotRetainedWalBytes'] / 1048576:.1f} MiB")
            if "CaptureJobLatencySeconds" in v:
                source.append(f"capture {v['CaptureJobLatencySeconds']:.0f} s")
            if "CleanupMarginSeconds" in v:
                source.append(f"cleanup margin {v['CleanupMarginSeconds'] / 3600:.1f} h")
            table.add_row(database, "-" if lag < 0 else f"{lag / 1000:.1f} s",
                          f"{rates[database]:.0f}" if database in rates else "-",
                          str(v.get("TotalNumberOfEventsSeen", 0)),
                          f"{v.get('TotalNumberOfCreateEventsSeen', 0)} / {v.get('TotalNumberOfUpdateEventsSeen', 0)}"
                          f" / {v.get('TotalNumberOfDeleteEventsSeen', 0)}",
                          str(v.get("NumberOfCommittedTransactions", 0)), str(v.get("LastEvent") or "-"),
                          ", ".join(source) or ("connected" if v.get("Connected") else "not connected"))
        parts: list[Any] = [table]
        batch = document.get("batch") or {}
        if batch:
            parts.append(Text(f"last batch {batch.get('id')}: {batch.get('records', 0)} records"
                              + (f" in {batch['duration_ms']} ms" if "duration_ms" in batch else "")))
        for database, snapshot in (document.get("snapshot") or {}).items():
            state = "running" if snapshot.get("SnapshotRunning") else "completed" if snapshot.get(
                "SnapshotCompleted") else "aborted" if snapshot.get("SnapshotAborted") else ""
            total = int(snapshot.get("TotalTableCount", 0))
            done = total - int(snapshot.get("RemainingTableCount", 0))
            parts.append(Text(f"snapshot of {database}: {state}, {done} of {total} tables, "
                              f"{snapshot.get('SnapshotDurationInSeconds', 0)} s"))
            estimates = snapshot.get("EstimatedRows") or {}
            bars = Table.grid(padding=(0, 2))
            for name, rows in (snapshot.get("RowsScanned") or {}).items():
                estimate = int(estimates.get(name) or 0)
                if estimate > 0:
                    bars.add_row(f"  {name}", ProgressBar(total=max(estimate, rows), completed=rows, width=40),
                                 f"{rows} of about {estimate} rows")
                else:
                    bars.add_row(f"  {name}", "", f"{rows} rows")
            parts.append(bars)
        return Group(*parts)
