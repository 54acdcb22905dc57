"""The console sink (``cdckit.sink=console``): each record printed as a JSON line, for trying a configuration."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyspark.sql import DataFrame

from cdckit.spark.sinks.base import (
    POSITION_ORDER,
    SinkWriter,
    WholeSnapshot,
    WriteSummary,
    on_partitions,
    persist_controls,
    summarize,
)
from cdckit.spark.sinks.jsonl import record_line


class ConsoleSink(SinkWriter):
    names = ("console",)

    def snapshot(self, df: DataFrame, controls: list[str] | None, controls_dir: str | None,
                 topics: list[str] | None, whole: WholeSnapshot | None) -> WriteSummary:
        return summarize(on_partitions(df, _console_writer("snapshot", controls_dir)), controls)

    def batch(self, df: DataFrame, batch_id: int, controls: list[str] | None, ordered_partitions: bool,
              topics: Callable[[], list[str]] | None) -> WriteSummary:
        ordered = df.repartition("topic").sortWithinPartitions(*POSITION_ORDER)
        return summarize(on_partitions(ordered, _console_writer(f"stream-{batch_id:012d}")), controls)


def _console_writer(label: str, controls_dir: str | None = None
                    ) -> Callable[[Iterable[dict[str, Any]]], Iterator[tuple[str, int]]]:
    def write(rows: Iterable[dict[str, Any]]) -> Iterator[tuple[str, int]]:
        counts: Counter[str] = Counter()
        controls: list[str] = []
        for row in rows:
            if row["op"].startswith("_"):
                controls.append(row["value"])
                continue
            print(f"[{label}] {record_line(row)}", flush=True)
            counts[row["topic"]] += 1
        persist_controls(controls_dir, controls)
        yield from counts.items()
        for value in controls:
            yield ("_control", value)  # type: ignore[misc]

    return write
