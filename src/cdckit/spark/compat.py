"""What differs between the Spark releases cdckit runs on (``cdckit.versions``: 4.0.2 to 4.3.x), in one place.

Streaming admission control for Python data sources (``latestOffset(start, limit)``, read limits, the
available-now mixin, ``pyspark.sql.streaming.datasource``) is Spark 4.2+. Spark 4.0 and 4.1 call
``latestOffset()`` with neither a start nor a limit, and run ``Trigger.AvailableNow`` as one batch of everything
(their ``AvailableNowDataStreamWrapper``). So on those releases:

- the change readers bound each micro-batch themselves (``max.batch.size``, whole transactions) from the start
  they keep (:class:`SelfBoundedReader`): the end of the batch they planned or replayed last, else the end of the
  last batch committed in the query's checkpoint, else the source's initial offset;
- the available-now trigger runs as a processing-time query over a source capped at the position the database
  had when the query started; the query is stopped once a trigger finds nothing new
  (``StreamingQuery.processAllAvailable``), so it still processes everything there was and stops.

Example::

    class MyReader(SelfBoundedReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
        def next_offset(self, start, limit): ...
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyspark
from py4j.protocol import Py4JError

from cdckit import versions
from cdckit.errors import CdcKitError
from cdckit.spark.batch_sizes import FIRST, BatchSizes
from cdckit.state import StateStore

__all__ = ["ADMISSION_CONTROL", "CATCH_UP_OPTION", "CHECKPOINT_FILE_MANAGER", "MAX_BATCHES_OPTION", "STREAM_CHECKPOINT",
           "WAIT_OPTION", "ReadAllAvailable", "ReadLimit", "ReadMaxRows", "SelfBoundedReader",
           "SupportsTriggerAvailableNow", "check_spark", "committed_offset", "last_end_offset",
           "local_checkpoint_files", "read_limit_rows"]

CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
# Spark's checkpoint file manager over Hadoop's FileSystem API: its package moved after Spark 4.0
_FILE_SYSTEM_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)

try:  # Spark 4.2+
    from pyspark.sql.streaming.datasource import (  # type: ignore[import-not-found,unused-ignore]
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # Spark 4.0 / 4.1: the same names, for the readers' own use only
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """A bound on one micro-batch."""

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        def prepareForTriggerAvailableNow(self) -> None:
            raise NotImplementedError


# The Structured Streaming checkpoint of the change stream, below cdckit.checkpoint.location.
STREAM_CHECKPOINT = "stream"
# Set by the pipeline on Spark before 4.2 for the available-now trigger: cap the source at the position the
# database has when the query starts (what prepareForTriggerAvailableNow does on 4.2+).
CATCH_UP_OPTION = "cdckit.stream.catch.up"
# Plan no more than this many batches in one run of the query (the pipeline stops it after as many).
MAX_BATCHES_OPTION = "cdckit.stream.max.batches"
# Set by the pipeline for a processing-time stream at its default interval, whose triggers run back to back: when
# nothing is pending, the source looks again for up to this many milliseconds (poll.interval.ms) before it says so
# (docs/decisions/0041-a-stream-that-waits-for-changes.md).
WAIT_OPTION = "cdckit.stream.wait.ms"


def check_spark() -> str:
    """The running Spark's version; a clear error when cdckit does not support it."""
    version = pyspark.__version__
    if not versions.supported(version):
        raise CdcKitError(
            f"cdckit runs on Spark {versions.OLDEST_SPARK} to {versions.SPARK_BELOW} (exclusive); this is Spark "
            f"{version}. On Amazon EMR use the release {versions.EMR_RELEASE_LABEL} (EMR 7.x is Spark 3.5, which "
            f"has no Python data source API); elsewhere install a supported PySpark (pip install "
            f"'cdckit[spark]') or run on a supported Spark")
    return version


def committed_offset(options: Mapping[str, str]) -> dict[str, Any] | None:
    """The end offset of the last batch committed in the change stream's checkpoint, or None when none is.

    Spark's offset log (``offsets/<batch>``) holds a version line, the batch's metadata and then one line per
    source with the offset as the source wrote it; the commit log (``commits/<batch>``) marks the batch done.
    """
    store = StateStore(options.get("cdckit.checkpoint.location", "cdckit-checkpoint"))
    batch = max((int(name) for name in store.names(f"{STREAM_CHECKPOINT}/commits") if name.isdigit()), default=-1)
    if batch < 0:
        return None
    text = store.read_text(f"{STREAM_CHECKPOINT}/offsets/{batch}")
    lines = (text or "").splitlines()
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise CdcKitError(
            f"the stream checkpoint's offset log entry {batch} under "
            f"{options.get('cdckit.checkpoint.location')}/{STREAM_CHECKPOINT}/offsets is missing or not in "
            f"Spark's format; restore the checkpoint, or start a new one (a new snapshot)")
    document = json.loads(lines[2])
    return document if isinstance(document, dict) else None


def planned_batch(options: Mapping[str, str], end: Mapping[str, Any]) -> int:
    """The id of the batch Spark is planning, which ends at ``end``: the last entry of the change stream's offset
    log, which Spark writes before it plans a batch (a batch replayed after a restart is that entry too)."""
    store = StateStore(options.get("cdckit.checkpoint.location", "cdckit-checkpoint"))
    logged = [int(name) for name in store.names(f"{STREAM_CHECKPOINT}/offsets") if name.isdigit()]
    if logged:
        batch = max(logged)
        lines = (store.read_text(f"{STREAM_CHECKPOINT}/offsets/{batch}") or "").splitlines()
        if len(lines) >= 3 and lines[0].startswith("v") and json.loads(lines[2]) == dict(end):
            return batch
    raise CdcKitError(
        f"the batch ending at {json.dumps(dict(end))} is not the last entry of the stream checkpoint's offset log "
        f"under {options.get('cdckit.checkpoint.location')}/{STREAM_CHECKPOINT}/offsets, so its files cannot be "
        f"named; this is a bug: report it with the checkpoint's offsets folder")


class SelfBoundedReader:
    """A change source's stream reader that serves Spark 4.2+ and Spark 4.0/4.1 alike.

    Subclasses call ``__init__`` with their options, implement ``next_offset(start, limit)``
    (the end of the next batch after ``start``, or ``start`` when nothing is pending), ``initialOffset`` and
    ``prepareForTriggerAvailableNow``, call :meth:`started` with the initial offset, and :meth:`planned` with the end
    offset in ``partitions``.

    Under ``WAIT_OPTION`` a trigger that finds nothing pending waits for changes: it looks again every
    ``wait_step_s`` seconds (None: once, when the wait ends) where :meth:`may_have_changes` says something may have
    been committed, and plans the batch as soon as one look finds changes.
    """

    wait_step_s: float | None = None
    _clock = staticmethod(time.monotonic)
    _sleep = staticmethod(time.sleep)

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        given = options.get("max.batch.size")
        # the bound of the next batch: max.batch.size where the configuration sets it, else adapted (batch_sizes)
        self.sizes = BatchSizes(int(given) if given else None)
        self._planned_end: dict[str, Any] | None = None  # where the next batch starts (Spark before 4.2)
        self._catching_up = False
        self._run_ends: set[str] = set()  # the end offsets of the batches this run planned or replayed

    def _count(self, end: Mapping[str, Any]) -> None:
        self._run_ends.add(json.dumps(dict(end), sort_keys=True))

    def _enough(self) -> bool:
        """``cdckit.stream.max.batches`` batches ran in this query run: plan no more, so none starts (and commits)
        while the driver stops the query after the last one it counts."""
        limit = self._limit()
        return bool(limit) and len(self._run_ends) >= limit

    def _limit(self) -> int:
        return int(self.options.get(MAX_BATCHES_OPTION) or 0)

    def initialOffset(self) -> dict[str, Any]:
        raise NotImplementedError

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.sizes.fixed or FIRST)

    def batch_bound(self, limit: Any) -> int:
        """How many changes the next batch may take under ``limit``: everything under ``ReadAllAvailable``, the
        adapted bound under the default read limit where ``max.batch.size`` is not set, else the limit's rows."""
        if self.sizes.adaptive and limit == ReadMaxRows(FIRST):
            return self.sizes.size
        return read_limit_rows(limit, self.sizes.size)

    def prepareForTriggerAvailableNow(self) -> None:
        raise NotImplementedError

    def next_offset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        raise NotImplementedError

    def started(self, start: dict[str, Any]) -> None:
        """The query starts at ``start`` (its initial offset): the first batch starts there."""
        self._planned_end = start

    def planned(self, end: dict[str, Any]) -> None:
        """Spark plans (or replays) the batch that ends at ``end``: the next one starts there. Spark 4.0 also plans
        the checkpoint's last committed batch again when a query starts, which runs nothing: not counted."""
        self._planned_end = end
        if self._limit() and dict(end) != committed_offset(self.options):
            self._count(end)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start is None:  # Spark before 4.2
            if self.options.get(CATCH_UP_OPTION) == "true" and not self._catching_up:
                self.prepareForTriggerAvailableNow()
                self._catching_up = True
            start = self._planned_end or committed_offset(self.options) or self.initialOffset()
            limit = self.getDefaultReadLimit()
        if self._enough():
            return start
        end = self._waited(start, limit, self.next_offset(start, limit))
        self._planned_end = end
        if end != start:
            self._count(end)
        return end

    def may_have_changes(self) -> bool:
        """While waiting (``WAIT_OPTION``): whether a change may have been committed since the last look (a cheap
        test that saves a look at the source); by default, always."""
        return True

    def _waited(self, start: dict[str, Any], limit: Any, end: dict[str, Any]) -> dict[str, Any]:
        """``end``, or where nothing was pending and the stream waits for changes (``WAIT_OPTION``), the end of the
        first batch that appears within the wait (``start`` when none does)."""
        wait_ms = int(self.options.get(WAIT_OPTION) or 0)
        if end != start or wait_ms <= 0 or self._catching_up:
            return end
        deadline = self._clock() + wait_ms / 1000
        while end == start:
            remaining = deadline - self._clock()
            if remaining <= 0:
                break
            self._sleep(min(self.wait_step_s or remaining, remaining))
            if self.may_have_changes():
                end = self.next_offset(start, limit)
        return end


def last_end_offset(query: Any) -> dict[str, Any] | None:
    """The end offset of the last batch ``query`` reported (its progress comes after the batch is committed).

    Read from the progress's JSON text: PySpark 4.0's ``SourceProgress.endOffset`` holds the Python ``str`` of the
    parsed offset rather than its JSON (fixed in later releases).
    """
    progress = query.lastProgress
    if not progress:
        return None
    sources = json.loads(progress.json).get("sources") or []
    end = sources[0].get("endOffset") if sources else None
    document = json.loads(end) if isinstance(end, str) else end
    return document if isinstance(document, dict) else None


def read_limit_rows(limit: Any, default: int) -> int:
    """How many changes a batch may take under ``limit``."""
    if isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    if isinstance(limit, ReadAllAvailable):
        return 1 << 40
    return default


@contextlib.contextmanager
def local_checkpoint_files(spark: Any, location: str) -> Iterator[str | None]:
    """While a stream starts, have its checkpoint, where it is on a local file system, written through Hadoop's
    FileSystem API; gives the manager set, or None when the location is not local, the session already names a
    manager, or the session is not a classic one.

    Spark's default manager goes through Hadoop's FileContext, which on the local file system, without Hadoop's
    native library (as in PySpark's own jars), runs ``readlink`` and ``chmod`` as processes, some twenty for each
    micro-batch's offset and commit log entries. The FileSystem API writes each entry as a temporary file renamed
    into place, as the default does, and runs ``chmod`` twice an entry. Remote checkpoints (S3, HDFS, ABFS, and a
    path without a scheme where Hadoop's default file system is one of them) keep Spark's default.

    The setting is the starting query's alone: a query keeps a copy of its session's settings, and the session's
    is unset again once the block ends, so the job's other queries keep Spark's default."""
    name = _file_system_manager(spark, location)
    if name is None:
        yield None
        return
    spark.conf.set(CHECKPOINT_FILE_MANAGER, name)
    try:
        yield name
    finally:
        spark.conf.unset(CHECKPOINT_FILE_MANAGER)


def _file_system_manager(spark: Any, location: str) -> str | None:
    """The FileSystem API's checkpoint manager, by the class name this Spark has, for a checkpoint at ``location``
    on a local file system (``local_checkpoint_files``); None otherwise."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None or spark.conf.get(CHECKPOINT_FILE_MANAGER, None) is not None:
        return None
    hadoop = jvm.org.apache.hadoop.fs
    try:
        scheme = (hadoop.Path(location).toUri().getScheme()
                  or hadoop.FileSystem.getDefaultUri(spark._jsc.hadoopConfiguration()).getScheme())
    except Py4JError:  # a location Hadoop cannot parse: Spark's default, which reports it when the query starts
        return None
    if scheme != "file":
        return None
    for name in _FILE_SYSTEM_MANAGERS:
        if jvm.org.apache.spark.util.Utils.classIsLoadable(name):
            return str(name)
    return None
