"""What every source's jobs share: reports, and running a Structured Streaming query to its end."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from cdckit.config import Config
from cdckit.errors import from_spark
from cdckit.observe.publish import Observer
from cdckit.pipelines.stopping import FINISH_BATCH_SECONDS, STOP
from cdckit.spark import compat
from cdckit.spark.options import to_spark_options
from cdckit.spark.progress import IDLE_INTERVAL, ProgressListener, listen
from cdckit.spark.rows import STREAM_FILES_OUTPUT
from cdckit.spark.sinks import Sink, WriteSummary
from cdckit.state import join

log = logging.getLogger("cdckit")


@dataclass
class SnapshotReport:
    status: str  # "completed", "skipped" (already complete) or "no_data"
    slot_name: str
    consistent_point: str
    tables: list[str]
    rows_per_topic: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stopped_by: str | None = None  # SIGTERM or SIGINT: the snapshot was abandoned (cdckit.pipelines.stopping)

    @property
    def rows(self) -> int:
        return sum(self.rows_per_topic.values())


@dataclass
class StreamReport:
    batches: int = 0
    events_per_topic: dict[str, int] = field(default_factory=dict)
    last_offset: str | None = None
    confirmed_flush_lsn: str | None = None
    seconds: float = 0.0
    snapshot: SnapshotReport | None = None
    stopped_by: str | None = None  # SIGTERM or SIGINT stopped the job (cdckit.pipelines.stopping)
    abandoned: str | None = None  # what a stop abandoned before the query ran: "snapshot", or "start"

    @property
    def events(self) -> int:
        return sum(self.events_per_topic.values())


class SmallBatches:
    """Says once, in the job's log, that a stream catches up in micro-batches too small for Spark.

    A ``max.batch.size`` the configuration sets bounds every micro-batch, as it bounds a Debezium connector's
    batch. A micro-batch also costs Spark a fixed time whatever its size (planning it, its offset and commit logs,
    launching its tasks), so batches of a few thousand changes bound a catch-up to a few thousand changes a second
    (decision 0022); unset, the bound adapts to a backlog (decision 0038). When ``BATCHES`` micro-batches in a
    row each held at least half of a ``max.batch.size`` under ``BELOW``, the stream is working through a backlog in
    such batches: the warning names the setting, the rate seen, and what to do."""

    BATCHES = 3
    BELOW = 10_000

    def __init__(self, max_batch_size: int | None) -> None:
        self.max_batch_size = max_batch_size or 0
        self.said = max_batch_size is None or max_batch_size >= self.BELOW
        # the full batches in a row so far: how many, when the first began, and their records
        self.full, self.since, self.records = 0, 0.0, 0

    def batch(self, began: float, records: int) -> None:
        if self.said:
            return
        if records * 2 < self.max_batch_size:
            self.full, self.records = 0, 0
            return
        if not self.full:
            self.since = began
        self.full += 1
        self.records += records
        if self.full < self.BATCHES:
            return
        self.said = True
        seconds = time.monotonic() - self.since
        log.warning("the stream is catching up a backlog in small micro-batches: %d in a row were full at "
                    "max.batch.size=%d, %s records/s. Each micro-batch also costs Spark a fixed time (planning it, "
                    "its offset and commit logs, launching its tasks), which batches this small do not share out; "
                    "remove max.batch.size (the bound then adapts: larger batches through a backlog, small ones "
                    "once caught up) or raise it to catch up faster", self.full, self.max_batch_size,
                    f"{self.records / seconds:,.0f}" if seconds > 0 else "?")


def run_query(spark: SparkSession, config: Config, source_format: str, options: Mapping[str, str],
              query_name: str, report: StreamReport,
              on_batch: Callable[[int, WriteSummary], None] | None = None,
              on_controls: Callable[[list[str]], None] | None = None,
              ordered_partitions: bool = False,
              batch_topics: Callable[[], list[str]] | None = None,
              observer: Observer | None = None) -> StreamingQuery:
    """Run the change stream into the configured sink until the trigger or ``cdckit.stream.max.batches`` stops it.

    ``ordered_partitions``: the source's partitions are consecutive position ranges, each in position order,
    so the files sink may write them as they are. ``batch_topics``: each batch is one such partition, and this gives
    the topics of the tables captured now (``Sink.batch``). ``observer``: the job's metrics, updated from each
    batch's stats rows (which the source's partitions end with) and Spark's progress. Returns the stopped query (its
    ``lastProgress`` names the last committed batch and offsets).
    """
    sink = Sink(spark, config.as_properties(include_secrets=True))
    source_wrote = bool(options.get(STREAM_FILES_OUTPUT))  # the tasks write the files sink's records themselves
    totals: Counter[str] = Counter()
    enough = threading.Event()
    last_batch_id = [-1]
    in_batch = [False]
    max_batches = config.int("cdckit.stream.max.batches")
    given = config["max.batch.size"]
    small_batches = SmallBatches(given if isinstance(given, int) else None)

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        began = time.monotonic()
        in_batch[0] = True
        controls: list[str] = []
        summary = sink.batch(batch, batch_id, controls, ordered_partitions=ordered_partitions,
                             source_wrote=source_wrote, topics=batch_topics)
        stats, controls = split_stats(controls)
        if controls and on_controls is not None:
            on_controls(controls)
        if observer is not None:
            observer.metrics.batch_committed(batch_id, stats, sum(summary.values()),
                                             write_ms=round((time.monotonic() - began) * 1000))
            observer.poll_health(every_s=2.0)  # a query to the source at most every 2 s
            observer.publish("batch")
        totals.update(summary)
        small_batches.batch(began, sum(summary.values()))
        report.batches += 1
        last_batch_id[0] = batch_id
        if on_batch is not None:
            on_batch(batch_id, summary)
        if max_batches and report.batches >= max_batches:
            enough.set()
        in_batch[0] = False

    available_now = config.str("cdckit.trigger") == "available-now"
    catch_up = available_now and not compat.ADMISSION_CONTROL
    interval = config.str("cdckit.trigger.interval")
    if catch_up:
        options = {**options, compat.CATCH_UP_OPTION: "true"}
    elif not available_now and not interval:
        # triggers back to back, each waiting up to poll.interval.ms for a change when none is pending: a change
        # committed while the stream waits starts a batch at once (decision 0041)
        options = {**options, compat.WAIT_OPTION: str(config.int("poll.interval.ms"))}
    stream = spark.readStream.format(source_format).options(**to_spark_options(options)).load()
    checkpoint = join(config.str("cdckit.checkpoint.location"), compat.STREAM_CHECKPOINT)
    writer = stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint)
    if available_now and not catch_up:
        writer = writer.trigger(availableNow=True)
    elif catch_up:
        # Spark before 4.2 would run available-now as one unbounded batch: bounded batches back to back instead,
        # over a source capped where the database stands now, until a trigger finds nothing new.
        writer = writer.trigger(processingTime="0 seconds")
    else:
        writer = writer.trigger(processingTime=interval or "0 seconds")
    remove_listener = None
    if observer is not None:
        if spark.conf.get(IDLE_INTERVAL, None) is None:
            # a caught-up stream says so within a second (Spark's default: 10 s), unless the job sets its own
            spark.conf.set(IDLE_INTERVAL, "1000")
        listener = ProgressListener(observer.metrics.progress, lambda: _idle(observer))
        remove_listener = listen(spark, listener)
    STOP.interruptible = False  # from now on a stop signal waits for the batch under way (the loop below)
    try:
        with compat.local_checkpoint_files(spark, checkpoint):
            query = writer.queryName(query_name).start()
    except BaseException:
        if remove_listener is not None:
            remove_listener()
        raise
    if observer is not None:
        listener.watch(str(query.id))
    caught_up = threading.Event()
    stop_seen = [0.0]
    if catch_up:
        threading.Thread(target=_until_caught_up, args=(query, caught_up), daemon=True,
                         name="cdckit-catch-up").start()
    try:
        with from_spark("the stream stopped"):
            while query.isActive:
                if caught_up.is_set() or (enough.wait(0.05) and progress_batch(query) >= last_batch_id[0]):
                    # Stop once the last counted batch is committed (Spark reports its progress after its commit).
                    # The source plans no batch beyond it (compat.MAX_BATCHES_OPTION), so none can start meanwhile.
                    query.stop()
                elif STOP.event.is_set():
                    stop_seen[0] = stop_seen[0] or time.monotonic()
                    # once the batch under way is committed; after FINISH_BATCH_SECONDS in the middle of it (Spark
                    # runs an uncommitted batch again at the next start, with the same id and offsets)
                    if ((not in_batch[0] and progress_batch(query) >= last_batch_id[0])
                            or time.monotonic() - stop_seen[0] > FINISH_BATCH_SECONDS):
                        report.stopped_by = STOP.signal_name
                        query.stop()
            query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        report.events_per_topic = dict(sorted(totals.items()))
        if remove_listener is not None:
            if not query.isActive:
                listener.terminated.wait(10)  # its last events, in flight on Spark's listener bus
            remove_listener()
    return query


def split_stats(controls: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """A batch's control values: the partitions' stats documents (for the metrics), and the rest."""
    stats, rest = [], []
    for value in controls:
        if value.startswith('{"kind":"stats"'):
            stats.append(json.loads(value))
        else:
            rest.append(value)
    return stats, rest


def _idle(observer: Observer) -> None:
    observer.metrics.caught_up()
    observer.poll_health()
    observer.publish("idle")


def _until_caught_up(query: StreamingQuery, caught_up: threading.Event) -> None:
    """Wait until a trigger of ``query`` finds nothing new (every batch before it committed), then say so. A
    failed query ends the wait too; the caller sees the failure when it waits for the query's end."""
    try:
        with contextlib.suppress(Exception):  # a failed query: the caller's awaitTermination reports it
            query.processAllAvailable()
    finally:
        caught_up.set()


def progress_batch(query: StreamingQuery) -> int:
    """The id of the last batch the query reported complete (committed), or -1."""
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1
