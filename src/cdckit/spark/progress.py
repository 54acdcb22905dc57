"""Spark's own progress, for the job's metrics (``cdckit.observe``): a ``StreamingQueryListener`` that hands each
committed batch's progress, and each trigger that found nothing new, to the job; and a snapshot's rows per table
as its tasks finish, through an accumulator."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from pyspark.accumulators import AccumulatorParam
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.streaming.listener import StreamingQueryListener

# How often an idle query reports itself (Spark's spark.sql.streaming.noDataProgressEventInterval, 10 s by default).
IDLE_INTERVAL = "spark.sql.streaming.noDataProgressEventInterval"


class ProgressListener(StreamingQueryListener):
    """Calls ``on_progress`` with a committed batch's progress and ``on_idle`` when a trigger found no new data, for
    the one query whose id ``watch`` is given (a session's listeners hear every query).

    Spark hands a Python listener each event as a JVM object. PySpark's own wrapper turns the whole progress into
    Python objects first, a call into the JVM for each of its fields; this listener reads the progress as its JSON
    text instead, in one call (``_LightListener``). The ``onQuery*`` methods still take PySpark's events, for a
    PySpark that registers listeners some other way."""

    def __init__(self, on_progress: Callable[[dict[str, Any]], None], on_idle: Callable[[], None]) -> None:
        self.on_progress = on_progress
        self.on_idle = on_idle
        self.query_id: str | None = None
        # Spark delivers a query's events in order, its end last: once that came, none of its events is on the
        # way, and the listener may go (a callback into a Python process that is exiting fails noisily)
        self.terminated = threading.Event()

    def watch(self, query_id: str) -> None:
        self.query_id = query_id

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        self.progress(str(progress.id), progress.batchId, dict(progress.durationMs or {}))

    def progress_json(self, text: str) -> None:
        """A progress as Spark's JSON text (``StreamingQueryProgress.json``)."""
        progress = json.loads(text)
        self.progress(str(progress.get("id")), progress.get("batchId"), dict(progress.get("durationMs") or {}))

    def progress(self, query_id: str, batch_id: int, duration_ms: dict[str, int]) -> None:
        if self.query_id is not None and query_id == self.query_id:
            self.on_progress({"batchId": batch_id, "durationMs": duration_ms})

    def onQueryIdle(self, event: Any) -> None:
        self.idle(str(event.id))

    def idle(self, query_id: str) -> None:
        if self.query_id is not None and query_id == self.query_id:
            self.on_idle()

    def onQueryTerminated(self, event: Any) -> None:
        self.ended(str(event.id))

    def ended(self, query_id: str) -> None:
        if self.query_id is not None and query_id == self.query_id:
            self.terminated.set()

    @property
    def _jlistener(self) -> Any:
        """What PySpark's ``addListener`` and ``removeListener`` hand to the JVM: Spark's wrapper of a Python
        listener, around ``_LightListener``. Made once, so that removing finds what was added."""
        made = self.__dict__.get("_light_jlistener")
        if made is None:
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is added to a running session"
            made = self.__dict__["_light_jlistener"] = jvm.PythonStreamingQueryListenerWrapper(_LightListener(self))
        return made


class _LightListener:
    """Spark's Java interface for a Python listener (``PythonStreamingQueryListener``), reading each event with as
    few calls into the JVM as it can: the query's id, and a progress as its JSON text."""

    def __init__(self, listener: ProgressListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self.listener.progress_json(jevent.progress().json())

    def onQueryIdle(self, jevent: Any) -> None:
        self.listener.idle(str(jevent.id()))

    def onQueryTerminated(self, jevent: Any) -> None:
        self.listener.ended(str(jevent.id()))

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen(spark: SparkSession, listener: ProgressListener) -> Callable[[], None]:
    """Add the listener to the session; returns what removes it."""
    spark.streams.addListener(listener)
    return lambda: spark.streams.removeListener(listener)


class _RowsPerTopic(AccumulatorParam):  # type: ignore[type-arg]
    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
        for topic, rows in second.items():
            first[topic] = first.get(topic, 0) + rows
        return first


def counted_source(spark: SparkSession, source: type[DataSource]) -> tuple[str, Callable[[], dict[str, int]]]:
    """A snapshot source whose tasks report the rows they read per topic through a Spark accumulator, as each
    finishes (Debezium's ``RowsScanned``, live). Returns the format name to read it with (registered now) and what
    reads the rows so far on the driver. The subclass is made here so that Spark ships the accumulator with it."""
    accumulator = spark.sparkContext.accumulator({}, _RowsPerTopic())
    name = f"{source.name()}_counted"

    class Counted(source):  # type: ignore[misc, valid-type]
        @classmethod
        def name(cls) -> str:
            return name

        def reader(self, schema: Any) -> DataSourceReader:
            return _CountingReader(super().reader(schema), accumulator)

    spark.dataSource.register(Counted)
    return name, lambda: dict(accumulator.value)


class _CountingReader(DataSourceReader):
    def __init__(self, reader: DataSourceReader, accumulator: Any) -> None:
        self.reader = reader
        self.accumulator = accumulator

    def partitions(self) -> Sequence[InputPartition]:
        return self.reader.partitions()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow.compute as pc

        from cdckit.spark.rows import WRITTEN

        counts: dict[str, int] = {}
        batches: Iterator[Any] = iter(self.reader.read(partition))
        for batch in batches:
            yield batch
            ops = batch.column("op")
            topics = batch.column("topic")
            for topic in pc.unique(topics.filter(pc.equal(ops, "r"))).to_pylist():
                counts[topic] = counts.get(topic, 0) + int(pc.sum(pc.and_(pc.equal(ops, "r"),
                                                                          pc.equal(topics, topic))).as_py() or 0)
            written = batch.filter(pc.equal(ops, WRITTEN))  # a task that wrote its records itself: its counts
            for row in written.select(["topic", "value"]).to_pylist():
                counts[row["topic"]] = counts.get(row["topic"], 0) + int(row["value"])
        self.accumulator.add(counts)
