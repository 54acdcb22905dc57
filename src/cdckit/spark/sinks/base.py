"""The sinks' interface (``SinkWriter``) and the write mechanism they share: a DataFrame written partition by
partition on the executors, each task reporting what it wrote per topic (``on_partitions``, ``summarize``), and
the control rows (chunk watermarks) kept once their records are written (``persist_controls``). Imports no sink."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark.sql import DataFrame

from cdckit.state import StateStore

POSITION_ORDER = ("topic", "commit_lsn", "lsn", "serial")
WriteSummary = dict[str, int]
PartitionWriter = Callable[[Iterable[Any]], Iterator[tuple[str, Any]]]


@dataclass(frozen=True)
class WholeSnapshot:
    """A snapshot of whole tables, committed at once. ``since``: each captured table's topic and the position its
    ``r`` rows of this snapshot are at or after (PostgreSQL: the first attempt's consistent point; SQL Server: the
    database's maximum LSN when the snapshot started, below every chunk's high watermark). ``resumed``: earlier
    attempts may have committed rows, which this one replaces (``r`` rows at or after ``since``; rows of another
    snapshot there can only be the same rows read again, the source having logged no change in between)."""

    since: Mapping[str, int]
    resumed: bool

    def replaced(self, topic: str) -> str:
        """The change rows of ``topic`` this snapshot replaces: a Delta predicate."""
        return f"__op = 'r' AND __commit_lsn >= {int(self.since[topic])}"



class SinkWriter(ABC):
    """One kind of sink, registered under its ``cdckit.sink`` names in ``cdckit.spark.sinks.SINKS``.

    A writer gets the records as the sources make them (``cdckit.spark.rows.EVENT_SCHEMA``), control rows among
    them (``op`` starting with ``_``), already through the configured single message transforms where
    ``transforms`` is true; it returns records per topic and hands the control rows back in ``controls``."""

    names: ClassVar[tuple[str, ...]]
    transforms: ClassVar[bool] = True  # whether the records reach it through the single message transforms

    def __init__(self, spark: Any, options: Mapping[str, str]) -> None:
        self.options = options
        self.output = options.get("cdckit.output.path", "cdckit-output")

    @classmethod
    def source_folder(cls, options: Mapping[str, str]) -> str | None:
        """The folder a source may write its records into itself, as this sink would, or None."""
        return None

    @classmethod
    def one_pass(cls, options: Mapping[str, str]) -> bool:
        """Whether a stream batch read by one task, in position order, can be written in one pass."""
        return False

    @classmethod
    def problems(cls, options: Mapping[str, str], keyless: Sequence[str], offline: bool) -> list[str]:
        """What would stop this sink taking the job's records, found before anything starts (``cdckit validate``
        and every job's start), each as one line naming the fix. ``keyless``: the captured tables without a key
        (no primary key, nothing in ``message.key.columns``); ``offline``: check nothing over the network."""
        return []

    @abstractmethod
    def snapshot(self, df: DataFrame, controls: list[str] | None, controls_dir: str | None,
                 topics: list[str] | None, whole: WholeSnapshot | None) -> WriteSummary:
        """Write a snapshot. ``controls_dir``: where control rows are kept once their records are written;
        ``topics``: the records' topics when known before reading; ``whole``: the snapshot reads whole tables."""

    @abstractmethod
    def batch(self, df: DataFrame, batch_id: int, controls: list[str] | None, ordered_partitions: bool,
              topics: Callable[[], list[str]] | None) -> WriteSummary:
        """Write one micro-batch in position order. ``ordered_partitions``: the partitions are consecutive position
        ranges in order; ``topics``: given where ``one_pass``, the topics of the tables captured now."""


def location_problem(options: Mapping[str, str], prop: str, default: str, offline: bool) -> str | None:
    """Why the location in ``prop`` cannot be written (``StateStore.write_problem``); an S3 location only when not
    ``offline``."""
    location = options.get(prop) or default
    store = StateStore(location)
    if store.remote and offline:
        return None
    return store.write_problem(prop)


def persist_controls(controls_dir: str | None, values: list[str]) -> None:
    """Record control rows (chunk watermarks) once the partition's records are durably written."""
    if not controls_dir or not values:
        return
    store = StateStore(controls_dir)
    for value in values:
        store.write_json(f"{hashlib.sha1(value.encode()).hexdigest()}.json", json.loads(value))



def on_partitions(df: DataFrame, writer: PartitionWriter, *, arrow: bool = False) -> list[tuple[str, Any]]:
    """Run ``writer`` once per partition on the executors and return what it reports, in partition order.

    The writer gets the partition's rows as dicts, read from Arrow batches (``mapInArrow``), or with ``arrow``
    the Arrow record batches themselves; it reports small ``(name, JSON-serializable item)`` pairs such as rows
    per topic, which are all that reaches the driver.
    """
    def apply(batches: Iterator[Any]) -> Iterator[Any]:
        import orjson
        import pyarrow as pa

        def rows() -> Iterator[dict[str, Any]]:
            for batch in batches:  # column by column: several times faster than batch.to_pylist()
                names = batch.schema.names
                for values in zip(*(column.to_pylist() for column in batch.columns), strict=True):
                    yield dict(zip(names, values, strict=True))

        reported = list(writer(batches if arrow else rows()))
        yield pa.RecordBatch.from_pydict({"name": [name for name, _ in reported],
                                          "item": [orjson.dumps(item).decode() for _, item in reported]},
                                         schema=pa.schema([("name", pa.string()), ("item", pa.string())]))

    return [(row["name"], json.loads(row["item"])) for row in df.mapInArrow(apply, _REPORT_SCHEMA).collect()]

_REPORT_SCHEMA = "name STRING, item STRING"


def summarize(pairs: Iterable[tuple[str, Any]], controls: list[str] | None = None) -> WriteSummary:
    summary: Counter[str] = Counter()
    for topic, count in pairs:
        if topic == "_control":
            if controls is not None:
                controls.append(count)
            continue
        summary[topic] += count
    return dict(sorted(summary.items()))
