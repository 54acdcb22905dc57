"""Spark batch data source: a SQL Server snapshot in primary-key chunks, each reconciled by watermarks.

Each partition reads one chunk and reports its high watermark in a control row (op ``_watermark``) that sinks
do not write; the driver stores the watermarks so the stream can skip changes a chunk already holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from cdckit.dialect.sqlserver.catalog import CaptureInstance, capture_instances, databases
from cdckit.dialect.sqlserver.connection import connect
from cdckit.dialect.sqlserver.snapshot import Chunk, plan_chunks, read_chunk, snapshot_events
from cdckit.events import Position
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.spark.options import from_spark_options
from cdckit.spark.records import record_builder
from cdckit.spark.rows import EVENT_SCHEMA, EventRow, now_ms, record


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
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        chunk_rows = int(self.options.get("cdckit.snapshot.chunk.rows", "50000"))
        planned: list[ChunkPartition] = []
        for database in databases(self.options):
            conn = connect(self.options, database)
            try:
                cursor = conn.cursor()
                for instance in capture_instances(cursor, database, self.options):
                    planned.extend(ChunkPartition(instance, chunk) for chunk in plan_chunks(cursor, instance,
                                                                                           chunk_rows))
            finally:
                conn.close()
        if planned:
            final = planned[-1]
            planned[-1] = ChunkPartition(final.instance, Chunk(**{**final.chunk.__dict__, "last": True}))
        return list(planned) or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[EventRow]:
        if isinstance(partition, ChunkPartition):
            yield from read_snapshot_chunk(self.options, partition.instance, partition.chunk,
                                           "last" if partition.chunk.last else "true")


def read_snapshot_chunk(options: dict[str, str], instance: CaptureInstance, chunk: Chunk, marker: str,
                        condition: str | None = None) -> Iterator[EventRow]:
    """The ``r`` records of one chunk as of its high watermark, then a control row with that watermark.

    ``marker`` is ``source.snapshot`` of the chunk's last row (``last`` on the snapshot's final chunk,
    ``incremental`` for every row of an ad hoc snapshot, else ``true``).
    """
    table_format = TableFormat(instance, format_settings(options))
    records = record_builder(options, lambda _event: (instance, table_format), lambda event: "")
    conn = connect(options, instance.database)
    try:
        rows, _low, high = read_chunk(conn, instance, chunk, options.get("snapshot.isolation.mode",
                                                                          "repeatable_read"), condition=condition)
    finally:
        conn.close()
    every = "incremental" if marker == "incremental" else "true"
    for event in snapshot_events(instance, rows, high, marker, now_ms(), every):
        yield from records.rows(event)
    mark = {"database": instance.database, "schema": instance.schema, "table": instance.name,
            "lower": chunk.lower, "upper": chunk.upper, "high": high}
    yield record("", None, json.dumps(mark), op="_watermark", position=Position(high, high, 0), ts_ms=now_ms())
