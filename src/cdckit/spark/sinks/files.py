"""The files sink (``cdckit.sink=files``): JSON Lines files, one folder per topic.

Files layout (``cdckit.output.path``)::

    <output>/<topic>/snapshot-00003.jsonl             rows of snapshot partition 3
    <output>/<topic>/stream-000000000012-00001.jsonl  events of micro-batch 12, partition 1 (PostgreSQL),
                                                      in position order, after those of partition 0
    <output>/<topic>/stream-000000000012.jsonl        events of micro-batch 12 (SQL Server), in position order

A topic's folder is its name, which Debezium's topic naming keeps to ``[A-Za-z0-9._-]`` and never ``.`` or ``..``;
a topic (one a transform routed records to) that is no plain folder name, or a folder or file that leads outside
the output folder through a symbolic link, is refused before anything of the task is written (``topic_folder``).

Each line is one Kafka record: ``{"topic": ..., "key": <key JSON>, "value": <value JSON or null>,
"headers": [...]}``; a binary (Avro) value is a base64 string followed by ``"valueEncoding": "base64"``.
Files are written to a temporary name, synced and renamed, and their folders synced, before the batch counts as
written; a replayed batch rewrites the same file, so a restart never leaves partial or duplicate files behind. On
a local disk's file system the files are written past the page cache (``cdckit.files.direct.writes``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from cdckit.fsutil import output_file_mode
from cdckit.spark.sinks.base import (
    POSITION_ORDER,
    SinkWriter,
    WholeSnapshot,
    WriteSummary,
    location_problem,
    on_partitions,
    summarize,
)
from cdckit.spark.sinks.jsonl import direct_writes, file_writer, topic_folder
from cdckit.spark.transforms import has_transforms


class FilesSink(SinkWriter):
    names = ("files",)

    @classmethod
    def source_folder(cls, options: Mapping[str, str]) -> str | None:
        """Without transforms, a source may write the files itself: the output folder."""
        if has_transforms(options):
            return None
        return options.get("cdckit.output.path", "cdckit-output")

    @classmethod
    def problems(cls, options: Mapping[str, str], keyless: Sequence[str], offline: bool) -> list[str]:
        problem = location_problem(options, "cdckit.output.path", "cdckit-output", offline)
        return [problem] if problem else []

    def snapshot(self, df: DataFrame, controls: list[str] | None, controls_dir: str | None,
                 topics: list[str] | None, whole: WholeSnapshot | None) -> WriteSummary:
        """Write snapshot rows partition by partition (no shuffle), ``snapshot-<partition>.jsonl``. Control rows
        (chunk watermarks) are not written but handed back in ``controls`` and, partition by partition as soon as
        its records are written, kept in ``controls_dir`` (so a failed snapshot knows which chunks are done)."""
        writer = file_writer(self.output, "snapshot", per_partition=True, controls_dir=controls_dir,
                             mode=output_file_mode(self.options), direct=direct_writes(self.options))
        return summarize(on_partitions(df, writer, arrow=True), controls)

    def batch(self, df: DataFrame, batch_id: int, controls: list[str] | None, ordered_partitions: bool,
              topics: Callable[[], list[str]] | None) -> WriteSummary:
        """Records of a topic go to one file, ``stream-<batch>.jsonl``, after a shuffle and sort; when the source's
        partitions are consecutive position ranges in position order (``ordered_partitions``), each partition's
        records are written as they come, ``stream-<batch>-<partition>.jsonl``, with no shuffle (file names sort
        in position order)."""
        label = f"stream-{batch_id:012d}"
        mode, direct = output_file_mode(self.options), direct_writes(self.options)
        if ordered_partitions:
            return summarize(on_partitions(df, file_writer(self.output, label, per_partition=True, mode=mode,
                                                           direct=direct), arrow=True), controls)
        ordered = df.repartition("topic").sortWithinPartitions(*POSITION_ORDER)
        return summarize(on_partitions(ordered, file_writer(self.output, label, per_partition=False, mode=mode,
                                                            direct=direct), arrow=True), controls)


def clear_snapshot_files(output: str) -> None:
    """Remove an earlier snapshot's files before a new snapshot writes: its whole files, and the temporary file
    a task stopped in the middle of writing leaves (Spark kills the Python worker of a cancelled task)."""
    folder = Path(output)
    for stale in [*folder.glob("*/snapshot-*.jsonl"), *folder.glob("*/.snapshot-*.jsonl.tmp")]:
        stale.unlink(missing_ok=True)


def read_records(output: str, topic: str) -> Iterator[dict[str, Any]]:
    """Read back one topic's records in order (snapshot files first, then stream batches); a topic that cannot be a
    folder under ``output`` is refused (``topic_folder``)."""
    import orjson

    folder = topic_folder(output, topic)
    if not folder.exists():
        return
    files = sorted(folder.glob("snapshot-*.jsonl")) + sorted(folder.glob("stream-*.jsonl"))
    for path in files:
        with path.open("rb") as handle:
            for line in handle:
                yield orjson.loads(line)
