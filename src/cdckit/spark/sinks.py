"""Sinks for event rows: JSON Lines files (one folder per topic) and the console.

Files layout (``cdckit.output.path``)::

    <output>/<topic>/snapshot-00003.jsonl             rows of snapshot partition 3
    <output>/<topic>/stream-000000000012-00001.jsonl  events of micro-batch 12, partition 1 (PostgreSQL),
                                                      in position order, after those of partition 0
    <output>/<topic>/stream-000000000012.jsonl        events of micro-batch 12 (SQL Server), in position order

Each line is one Kafka record: ``{"topic": ..., "key": <key JSON>, "value": <value JSON or null>,
"headers": [...]}``; a binary (Avro) value is a base64 string followed by ``"valueEncoding": "base64"``.
Files are written to a temporary name and renamed, and a replayed batch rewrites the same file, so a restart
never leaves partial or duplicate files behind.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql import DataFrame

from cdckit.spark.jsonl import TopicFiles, record_line, without_controls

if TYPE_CHECKING:
    import pyarrow as pa

    from cdckit.spark.delta_sink import WholeSnapshot

POSITION_ORDER = ("topic", "commit_lsn", "lsn", "serial")
DELTA_CONTROLS = "delta-snapshot.json"  # a Delta snapshot's control rows, written at once after its commits
WriteSummary = dict[str, int]


def _persist_controls(controls_dir: str | None, values: list[str]) -> None:
    """Record control rows (chunk watermarks) once the partition's records are durably written."""
    if not controls_dir or not values:
        return
    from cdckit.state import StateStore

    store = StateStore(controls_dir)
    for value in values:
        store.write_json(f"{hashlib.sha1(value.encode()).hexdigest()}.json", json.loads(value))


def _file_writer(output: str, label: str, per_partition: bool, controls_dir: str | None = None
                 ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[tuple[str, int]]]:
    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, int]]:
        suffix = f"-{TaskContext.get().partitionId():05d}" if per_partition else ""  # type: ignore[union-attr]
        control_rows: list[pa.RecordBatch] = []
        counts = TopicFiles(output, f"{label}{suffix}").write_all(without_controls(batches, control_rows))
        controls = [value for rows in control_rows for value in rows.column("value").to_pylist()]
        _persist_controls(controls_dir, controls)
        yield from counts.items()
        for value in controls:
            yield ("_control", value)  # type: ignore[misc]

    return write


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
        _persist_controls(controls_dir, controls)
        yield from counts.items()
        for value in controls:
            yield ("_control", value)  # type: ignore[misc]

    return write


PartitionWriter = Callable[[Iterable[Any]], Iterator[tuple[str, Any]]]


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


def _summarize(pairs: Iterable[tuple[str, Any]], controls: list[str] | None = None) -> WriteSummary:
    summary: Counter[str] = Counter()
    for topic, count in pairs:
        if topic == "_control":
            if controls is not None:
                controls.append(count)
            continue
        summary[topic] += count
    return dict(sorted(summary.items()))


def write_snapshot(df: DataFrame, sink: str, output: str, controls: list[str] | None = None,
                   controls_dir: str | None = None) -> WriteSummary:
    """Write snapshot rows partition by partition (no shuffle); returns rows per topic. Control rows (chunk
    watermarks) are not written but handed back in ``controls`` and, partition by partition as soon as its
    records are written, kept in ``controls_dir`` (so a failed snapshot knows which chunks are done)."""
    if sink == "files":
        writer = _file_writer(output, "snapshot", per_partition=True, controls_dir=controls_dir)
        return _summarize(on_partitions(df, writer, arrow=True), controls)
    return _summarize(on_partitions(df, _console_writer("snapshot", controls_dir)), controls)


def write_stream_batch(df: DataFrame, batch_id: int, sink: str, output: str,
                       controls: list[str] | None = None, ordered_partitions: bool = False) -> WriteSummary:
    """Write one micro-batch in position order; returns rows per topic. Control rows (watermarks of ad hoc
    snapshot chunks) are handed back in ``controls``.

    Records of a topic go to one file, ``stream-<batch>.jsonl``, after a shuffle and sort; when the source's
    partitions are consecutive position ranges in position order (``ordered_partitions``), the files sink
    writes each partition's records as they come, ``stream-<batch>-<partition>.jsonl``, with no shuffle
    (file names sort in position order)."""
    label = f"stream-{batch_id:012d}"
    if sink == "files" and ordered_partitions:
        return _summarize(on_partitions(df, _file_writer(output, label, per_partition=True), arrow=True), controls)
    ordered = df.repartition("topic").sortWithinPartitions(*POSITION_ORDER)
    if sink == "files":
        return _summarize(on_partitions(ordered, _file_writer(output, label, per_partition=False), arrow=True),
                          controls)
    return _summarize(on_partitions(ordered, _console_writer(label)), controls)


def clear_snapshot_files(output: str) -> None:
    """Remove an earlier snapshot's files before a new snapshot writes: its whole files, and the temporary file
    a task stopped in the middle of writing leaves (Spark kills the Python worker of a cancelled task)."""
    folder = Path(output)
    for stale in [*folder.glob("*/snapshot-*.jsonl"), *folder.glob("*/.snapshot-*.jsonl.tmp")]:
        stale.unlink(missing_ok=True)


def read_records(output: str, topic: str) -> Iterator[dict[str, Any]]:
    """Read back one topic's records in order (snapshot files first, then stream batches)."""
    import orjson

    folder = Path(output) / topic
    if not folder.exists():
        return
    files = sorted(folder.glob("snapshot-*.jsonl")) + sorted(folder.glob("stream-*.jsonl"))
    for path in files:
        with path.open("rb") as handle:
            for line in handle:
                yield orjson.loads(line)


def write_dead_letters(df: DataFrame, output: str, label: str) -> WriteSummary:
    """Records a target refused (too large), as JSON lines under ``<output>/_dead-letter/<topic>/``."""
    writer = _file_writer(str(Path(output) / "_dead-letter"), label, per_partition=True)
    return _summarize(on_partitions(df, writer, arrow=True))


def source_writes(options: Mapping[str, str]) -> str | None:
    """The folder a source may write its records into itself, as the sink would (the files sink without
    transforms), or None."""
    from cdckit.formats.debezium.transforms import chain
    from cdckit.spark.transforms import transform_settings

    if options.get("cdckit.sink", "files") != "files" or chain(transform_settings(options)):
        return None
    return options.get("cdckit.output.path", "cdckit-output")


def kafka_in_one_pass(options: Mapping[str, str]) -> bool:
    """Whether a stream batch read by one task can go to Kafka in one pass (``write_kafka``'s ``single_range``):
    Debezium's format, no transforms, no size limit to check first. Event Hubs always has one."""
    from cdckit.formats.debezium.transforms import chain
    from cdckit.spark.kafka_sink import max_message_bytes
    from cdckit.spark.transforms import transform_settings

    return (options.get("cdckit.sink", "files") == "kafka" and not chain(transform_settings(options))
            and options.get("cdckit.message.format", "debezium") == "debezium" and not max_message_bytes(options))


class Sink:
    """Where a job's records go: ``files``, ``console``, ``kafka``, ``eventhubs`` or ``delta`` (``cdckit.sink``)."""

    def __init__(self, spark: Any, options: dict[str, str]) -> None:
        self.kind = options.get("cdckit.sink", "files")
        self.options = options
        self.output = options.get("cdckit.output.path", "cdckit-output")
        self._topics: Any = None
        if self.kind in ("kafka", "eventhubs"):
            from cdckit.spark.kafka_sink import TopicManager, kafka_options

            kafka_options(options)  # configuration problems surface before any data is read
            self._topics = TopicManager(spark, options)
        self._delta: Any = None
        self._app: str | None = None
        if self.kind == "delta":
            from cdckit.spark.delta_sink import DeltaSink

            self._delta = DeltaSink(spark, options)

    def _transformed(self, df: DataFrame) -> DataFrame:
        """The records through the configured single message transforms (``transforms=...``)."""
        from cdckit.spark.transforms import transformed

        return transformed(df, self.options)

    def snapshot(self, df: DataFrame, controls: list[str] | None = None,
                 controls_dir: str | None = None, topics: list[str] | None = None,
                 whole: WholeSnapshot | None = None) -> WriteSummary:
        """Write a snapshot; a cdckit error raised in a Spark task comes back as itself, one line. ``topics``: the
        topics of the snapshot's records as the source names them, when known before reading (the Kafka sink then
        writes in one pass). ``whole``: the snapshot reads whole tables (what the Delta sink replaces and deletes;
        other sinks need not know). With the Delta sink, the control rows go to ``controls_dir`` as one document,
        once every table is committed, so a snapshot resumed after a kill reads either every chunk again or none."""
        from cdckit.errors import from_spark

        with from_spark("the snapshot stopped"):
            if self._delta is not None:
                found: list[str] = []
                summary = self._delta.commit(on_partitions(df, self._delta.stage_writer("snapshot")), "snapshot",
                                             found, snapshot=whole)
                if controls_dir and found:
                    from cdckit.state import StateStore

                    StateStore(controls_dir).write_json(DELTA_CONTROLS, [json.loads(value) for value in found])
                if controls is not None:
                    controls.extend(found)
                return summary  # type: ignore[no-any-return]
            transformed = self._transformed(df)
            known = topics if transformed is df and self.options.get("cdckit.message.format", "debezium") == \
                "debezium" else None
            return self._snapshot(transformed, controls, controls_dir, known)

    def source_writes(self) -> str | None:
        """The folder a source may write its records into itself (``source_writes``), or None."""
        return source_writes(self.options)

    def written(self, df: DataFrame, controls: list[str] | None = None, what: str = "the snapshot stopped"
                ) -> WriteSummary:
        """Run a snapshot or stream batch whose source writes its own records (``source_writes``); returns rows
        per topic, summed from the source's ``_written`` rows (one per task and topic). The source's control
        rows go to ``controls``."""
        from cdckit.errors import from_spark
        from cdckit.spark.rows import WRITTEN

        with from_spark(what):
            # Only control rows come (the tasks wrote the records): collected as they are, without a filter and a
            # projection for Spark to analyse and plan again for every micro-batch.
            reported = [row for row in df.collect() if row["op"].startswith("_")]
        return _summarize(((row["topic"], int(row["value"])) if row["op"] == WRITTEN else ("_control", row["value"])
                           for row in reported), controls)

    def _snapshot(self, df: DataFrame, controls: list[str] | None = None,
                  controls_dir: str | None = None, topics: list[str] | None = None) -> WriteSummary:
        if self._topics is None:
            return write_snapshot(df, self.kind, self.output, controls, controls_dir)
        from cdckit.spark.kafka_sink import write_kafka

        if controls is None and not controls_dir:
            return write_kafka(df, self.options, self._topics, self.output, "snapshot", one_per_key=True,
                               known_topics=topics)
        found: list[str] = []
        summary = write_kafka(df, self.options, self._topics, self.output, "snapshot", found, one_per_key=True)
        if controls_dir:
            _persist_controls(controls_dir, found)  # only after the records are in Kafka
        if controls is not None:
            controls.extend(found)
        return summary

    def batch(self, df: DataFrame, batch_id: int, controls: list[str] | None = None,
              ordered_partitions: bool = False, source_wrote: bool = False,
              topics: Callable[[], list[str]] | None = None) -> WriteSummary:
        """Write one micro-batch; ``source_wrote``: its source wrote the records itself (``source_writes``).
        ``topics``: the batch is one partition in position order, and this gives the topics of the tables captured
        now; given only where ``kafka_in_one_pass``, for the Kafka sink to write the batch in one pass."""
        if source_wrote:
            return self.written(df, controls, "the stream stopped")
        if self._delta is not None:
            from cdckit.spark.delta_sink import stream_app_id

            if self._app is None:  # the query's id, fixed for the checkpoint's life: read once
                self._app = stream_app_id(self.options.get("cdckit.checkpoint.location", "cdckit-checkpoint"))
            app = self._app
            label = f"stream-{batch_id:012d}"
            return self._delta.commit(on_partitions(df, self._delta.stage_writer(label)),  # type: ignore[no-any-return]
                                      label, controls, txn=(app, batch_id))
        if topics is not None:
            from cdckit.spark.kafka_sink import write_kafka

            return write_kafka(df, self.options, self._topics, self.output, f"stream-{batch_id:012d}", controls,
                               known_topics=topics(), ordered_partitions=ordered_partitions, single_range=True)
        df = self._transformed(df)
        if self._topics is None:
            return write_stream_batch(df, batch_id, self.kind, self.output, controls, ordered_partitions)
        from cdckit.spark.kafka_sink import write_kafka

        return write_kafka(df, self.options, self._topics, self.output, f"stream-{batch_id:012d}", controls,
                           ordered_partitions=ordered_partitions)
