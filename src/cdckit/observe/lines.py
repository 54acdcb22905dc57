"""``cdckit stream`` when its output is not a terminal (a log file, a pipe, a CI job): one readable line per
committed micro-batch, from the batch's records per topic and the job's metrics::

    batch 3: 1,204 records (shop.public.orders=1,000, shop.public.customers=204) in 0.8 s, 1,505 rows/s, lag 1.2 s

(the terminal gets the live view of ``cdckit.observe.live`` instead)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

TOPICS_SHOWN = 4  # topics named on a batch's line, the largest first; the rest are counted


class BatchLines:
    """Pass ``metrics`` as the job's metrics listener and ``batch`` as its per-batch callback: the job publishes a
    batch's metrics just before it calls back, so each line has the batch's time and the lag after it."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.document: dict[str, Any] = {}

    def metrics(self, document: dict[str, Any]) -> None:
        self.document = document

    def batch(self, batch_id: int, summary: Mapping[str, int]) -> None:
        self.write(batch_line(batch_id, summary, self.document))


def batch_line(batch_id: int, summary: Mapping[str, int], document: Mapping[str, Any]) -> str:
    """One batch as a line: its records (per topic, the largest first), time, rate and the lag after it."""
    records = sum(summary.values())
    line = f"batch {batch_id}: {records:,} record{'' if records == 1 else 's'}"
    counts = sorted(((n, topic) for topic, n in summary.items() if n), key=lambda item: (-item[0], item[1]))
    if counts:
        shown = [f"{topic}={n:,}" for n, topic in counts[:TOPICS_SHOWN]]
        if len(counts) > TOPICS_SHOWN:
            shown.append(f"{len(counts) - TOPICS_SHOWN} more topics")
        line += f" ({', '.join(shown)})"
    batch = document.get("batch") or {}
    if batch.get("id") == batch_id and "write_ms" in batch:
        seconds = int(batch["write_ms"]) / 1000
        line += f" in {seconds:.1f} s"
        if records and seconds > 0:
            rate = records / seconds
            line += f", {rate:,.0f} rows/s" if rate >= 10 else f", {rate:.1f} rows/s"
    lags = [int(values.get("MilliSecondsBehindSource", -1))
            for values in (document.get("streaming") or {}).values()]
    known = [lag for lag in lags if lag >= 0]
    line += f", lag {max(known) / 1000:.1f} s" if known else ", lag -"
    return line
