"""Spark batch data source: a SQL Server snapshot in primary-key chunks, each reconciled by watermarks.

Each partition reads one chunk and reports its high watermark in a control row (op ``_watermark``) that sinks
do not write; the driver stores the watermarks so the stream can skip changes a chunk already holds.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from cdckit.dialect.sqlserver.catalog import CaptureInstance, capture_instances, databases
from cdckit.dialect.sqlserver.changes import require_max_lsn
from cdckit.dialect.sqlserver.connection import connect
from cdckit.dialect.sqlserver.snapshot import (
    Chunk,
    plan_chunks,
    read_chunk,
    read_override,
    select_overrides,
    snapshot_events,
)
from cdckit.errors import first_line
from cdckit.events import Position
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.spark.options import from_spark_options
from cdckit.spark.records import record_builder
from cdckit.spark.rows import EVENT_SCHEMA, EventRow, arrow_batches, now_ms, record

PLAN_OPTION = "cdckit.sqlserver.snapshot.plan"
DONE_OPTION = "cdckit.sqlserver.snapshot.done"

log = logging.getLogger("cdckit.signals")


class ChunkPartition(InputPartition):
    def __init__(self, instance: CaptureInstance, chunk: Chunk) -> None:
        super().__init__(chunk.id)
        self.instance = instance
        self.chunk = chunk


class SqlServerSnapshotDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cdckit_sqlserver_snapshot"

    def schema(self) -> str:
        return EVENT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SqlServerSnapshotReader(from_spark_options(self.options))


class SqlServerSnapshotReader(DataSourceReader):
    """Reads the chunks planned by the driver (``PLAN_OPTION``); chunks already finished in an earlier, failed
    run (``DONE_OPTION``) become empty partitions, so partition numbers and output file names stay stable."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        plan = [Chunk(**item) for item in json.loads(self.options.get(PLAN_OPTION, "[]"))]
        done = set(json.loads(self.options.get(DONE_OPTION, "[]")))
        instances: dict[tuple[str, str, str], CaptureInstance] = {}
        for database in databases(self.options):
            with closing(connect(self.options, database)) as conn:
                for instance in capture_instances(conn.cursor(), database, self.options):
                    instances[(database, instance.schema, instance.name)] = instance
        partitions: list[InputPartition] = []
        for chunk in plan:
            found = instances.get((chunk.database, chunk.schema, chunk.table))
            if chunk.id in done or found is None:
                partitions.append(InputPartition(("done", chunk.id)))
            else:
                partitions.append(ChunkPartition(found, chunk))
        return partitions or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return arrow_batches(self.rows(partition))

    def rows(self, partition: InputPartition) -> Iterator[EventRow]:
        if isinstance(partition, ChunkPartition):
            yield from read_snapshot_chunk(self.options, partition.instance, partition.chunk,
                                           "last" if partition.chunk.last else "true")


def plan_snapshot(options: dict[str, str], instances: list[CaptureInstance]) -> list[Chunk]:
    """Every table's chunks, in table order; the snapshot's final chunk is marked ``last``. Runs on the driver:
    the plan is small (chunk bounds only) and is stored so a failed snapshot resumes chunk by chunk."""
    chunk_rows = int(options.get("cdckit.snapshot.chunk.rows", "50000"))
    overrides = select_overrides(options)
    planned: list[Chunk] = []
    for database in databases(options):
        with closing(connect(options, database)) as conn:
            cursor = conn.cursor()
            for instance in (i for i in instances if i.database == database):
                if instance.qualified_name.lower() in overrides:
                    planned.append(Chunk(database, instance.schema, instance.name, 0, None, None))
                else:
                    planned.extend(plan_chunks(cursor, instance, chunk_rows))
    if planned:
        planned[-1] = Chunk(**{**asdict(planned[-1]), "last": True})
    return planned


def _read_conditioned(conn: Any, options: dict[str, str], instance: CaptureInstance, chunk: Chunk, isolation: str,
                      fetch_size: int, condition: str) -> tuple[list[dict[str, object]], int]:
    """An ad hoc snapshot's chunk read with its signal's additional condition, within
    ``cdckit.incremental.snapshot.query.timeout.ms``. Should the read fail (over the time, or an error the planning's
    empty read could not show), the chunk is reported and skipped, read as empty at the current maximum LSN, and
    the batch goes on: a replay would fail the same way at every restart."""
    timeout_ms = int(options.get("cdckit.incremental.snapshot.query.timeout.ms", "300000"))
    with contextlib.suppress(AttributeError):  # pyodbc's query timeout, in whole seconds (0: none)
        conn.timeout = -(-timeout_ms // 1000)
    try:
        rows, _low, high = read_chunk(conn, instance, chunk, isolation, fetch_size, condition=condition)
        return rows, high
    except Exception as error:  # the driver's own error (pyodbc.Error), or the model's
        log.error("incremental snapshot of %s: chunk %s, read with the additional condition %r, skipped, the "
                  "snapshot of the table is incomplete: %s", instance.qualified_name, chunk.id, condition,
                  first_line(error))
    retry = connect(options, instance.database)
    try:
        return [], require_max_lsn(retry.cursor(), instance.database) or max(instance.start_lsn - 1, 0)
    finally:
        retry.close()


def read_snapshot_chunk(options: dict[str, str], instance: CaptureInstance, chunk: Chunk, marker: str,
                        condition: str | None = None) -> Iterator[EventRow]:
    """The ``r`` records of one chunk as of its high watermark, then a control row with that watermark.

    ``marker`` is ``source.snapshot`` of the chunk's last row (``last`` on the snapshot's final chunk,
    ``incremental`` for every row of an ad hoc snapshot, else ``true``).
    """
    table_format = TableFormat(instance, format_settings(options))
    records = record_builder(options, lambda _event: (instance, table_format), lambda event: "")
    conn = connect(options, instance.database)
    override = select_overrides(options).get(instance.qualified_name.lower()) if marker != "incremental" else None
    isolation = options.get("snapshot.isolation.mode", "repeatable_read")
    fetch_size = int(options.get("snapshot.fetch.size", "10240"))
    try:
        # the initial snapshot's locking reads wait snapshot.lock.timeout.ms for a lock (an ad hoc one's do not)
        lock_timeout = int(options.get("snapshot.lock.timeout.ms", "10000")) if marker != "incremental" else None
        if override is not None:
            rows, high = read_override(conn, instance, override, isolation, fetch_size, lock_timeout)
        elif condition:
            rows, high = _read_conditioned(conn, options, instance, chunk, isolation, fetch_size, condition)
        else:
            rows, _low, high = read_chunk(conn, instance, chunk, isolation, fetch_size, condition=condition,
                                          lock_timeout_ms=lock_timeout)
    finally:
        conn.close()
    every = "incremental" if marker == "incremental" else "true"
    for event in snapshot_events(instance, rows, high, marker, now_ms(), every):
        yield from records.rows(event)
    # A chunk read by an override SELECT is not reconciled: its rows carry the stream's start position and no
    # watermark, so every later change is streamed over them (at least once) instead of being skipped.
    mark = {"database": instance.database, "schema": instance.schema, "table": instance.name,
            "lower": chunk.lower, "upper": chunk.upper, "high": high, "chunk": chunk.id,
            "reconciled": override is None}
    yield record("", None, json.dumps(mark), op="_watermark", position=Position(high, high, 0), ts_ms=now_ms())
