"""Where a job's records go (``cdckit.sink``): one module per sink behind one interface (``base.SinkWriter``),
registered here by its names, and the ``Sink`` every pipeline writes through.

| module | ``cdckit.sink`` |
|---|---|
| ``files`` | ``files``: JSON Lines, one folder per topic (the default) |
| ``console`` | ``console`` |
| ``kafka`` | ``kafka``, and ``eventhubs`` (Event Hubs' Kafka endpoint) |
| ``delta`` | ``delta``: Delta Lake change and current-state tables |

The mechanism they share is in ``base`` (writing partition by partition on the executors, control rows) and
``jsonl`` (the JSON lines the files sink, the console and the dead letters write). No sink imports another. Adding a
sink: a module with a ``SinkWriter``, and its class in ``SINKS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame

from cdckit.errors import ConfigurationError, from_spark
from cdckit.spark.rows import WRITTEN
from cdckit.spark.sinks.base import SinkWriter, WholeSnapshot, WriteSummary, summarize
from cdckit.spark.sinks.console import ConsoleSink
from cdckit.spark.sinks.delta import DeltaSink
from cdckit.spark.sinks.files import FilesSink, clear_snapshot_files, read_records
from cdckit.spark.sinks.kafka import KafkaSink
from cdckit.spark.transforms import transformed

__all__ = ["SINKS", "Sink", "WholeSnapshot", "WriteSummary", "clear_snapshot_files", "kafka_in_one_pass",
           "read_records", "sink_class", "source_writes"]

SINKS: dict[str, type[SinkWriter]] = {name: sink for sink in (FilesSink, ConsoleSink, KafkaSink, DeltaSink)
                                      for name in sink.names}


def sink_class(options: Mapping[str, str]) -> type[SinkWriter]:
    """The writer of ``cdckit.sink``."""
    kind = options.get("cdckit.sink", "files")
    if kind not in SINKS:
        raise ConfigurationError([f"cdckit.sink={kind} is not a sink cdckit has; choose one of "
                                  f"{', '.join(sorted(SINKS))}"])
    return SINKS[kind]


def source_writes(options: Mapping[str, str]) -> str | None:
    """The folder a source may write its records into itself, as the sink would (the files sink without
    transforms), or None."""
    return sink_class(options).source_folder(options)


def kafka_in_one_pass(options: Mapping[str, str]) -> bool:
    """Whether a stream batch read by one task can go to the sink in one pass (Kafka's ``single_range``): Debezium's
    format, no transforms, no size limit to check first."""
    return sink_class(options).one_pass(options)


class Sink:
    """Where a job's records go: the ``cdckit.sink`` writer, with the single message transforms before it."""

    def __init__(self, spark: Any, options: dict[str, str]) -> None:
        self.options = options
        self.writer = sink_class(options)(spark, options)  # configuration problems surface before data is read

    def snapshot(self, df: DataFrame, controls: list[str] | None = None,
                 controls_dir: str | None = None, topics: list[str] | None = None,
                 whole: WholeSnapshot | None = None) -> WriteSummary:
        """Write a snapshot; a cdckit error raised in a Spark task comes back as itself, one line. ``topics``: the
        topics of the snapshot's records as the source names them, when known before reading (the Kafka sink then
        writes in one pass). ``whole``: the snapshot reads whole tables (what the Delta sink replaces and deletes;
        other sinks need not know). Control rows go to ``controls`` and are kept in ``controls_dir`` once their
        records are written."""
        with from_spark("the snapshot stopped"):
            if not self.writer.transforms:
                return self.writer.snapshot(df, controls, controls_dir, topics, whole)
            records = transformed(df, self.options)
            known = topics if records is df and self.options.get("cdckit.message.format", "debezium") == \
                "debezium" else None
            return self.writer.snapshot(records, controls, controls_dir, known, whole)

    def source_writes(self) -> str | None:
        """The folder a source may write its records into itself (``source_writes``), or None."""
        return source_writes(self.options)

    def written(self, df: DataFrame, controls: list[str] | None = None, what: str = "the snapshot stopped"
                ) -> WriteSummary:
        """Run a snapshot or stream batch whose source writes its own records (``source_writes``); returns rows
        per topic, summed from the source's ``_written`` rows (one per task and topic). The source's control
        rows go to ``controls``."""
        with from_spark(what):
            # Only control rows come (the tasks wrote the records): collected as they are, without a filter and a
            # projection for Spark to analyse and plan again for every micro-batch.
            reported = [row for row in df.collect() if row["op"].startswith("_")]
        return summarize(((row["topic"], int(row["value"])) if row["op"] == WRITTEN else ("_control", row["value"])
                          for row in reported), controls)

    def batch(self, df: DataFrame, batch_id: int, controls: list[str] | None = None,
              ordered_partitions: bool = False, source_wrote: bool = False,
              topics: Callable[[], list[str]] | None = None) -> WriteSummary:
        """Write one micro-batch; ``source_wrote``: its source wrote the records itself (``source_writes``).
        ``topics``: the batch is one partition in position order, and this gives the topics of the tables captured
        now; given only where ``kafka_in_one_pass``, for the sink to write the batch in one pass."""
        if source_wrote:
            return self.written(df, controls, "the stream stopped")
        if self.writer.transforms and topics is None:
            df = transformed(df, self.options)
        return self.writer.batch(df, batch_id, controls, ordered_partitions, topics)
