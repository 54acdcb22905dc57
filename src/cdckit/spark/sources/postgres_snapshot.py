"""Spark batch data source: a PostgreSQL snapshot read in parallel chunks under one exported snapshot.

Options: the connector properties plus ``cdckit.snapshot.name`` (the exported snapshot),
``cdckit.snapshot.lsn`` (the slot's consistent point) and ``cdckit.snapshot.ts_ms`` (when the snapshot started:
every record's ``source.ts_ms``, as Debezium writes it). Rows stream from the database through the
executors; nothing is collected on the driver.

With ``cdckit.snapshot.files.output`` (the files sink without transforms), each task writes its records itself,
as the files sink would (``<output>/<topic>/snapshot-<partition>.jsonl``), and yields only a ``_written`` row per
topic with the count: the records never cross to the JVM and back (decision 0022).

A partition reads a chunk, or several consecutive chunks (small tables, or more chunks than a snapshot has
partitions) one after another on one connection under the exported snapshot (decision 0040): the partitions, and
the tasks' fixed costs, grow with the rows, not with the tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, closing
from typing import Any

import pyarrow as pa
from psycopg2.extensions import connection as Connection
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from cdckit.dialect.postgres.catalog import TableInfo, discover_tables
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.dialect.postgres.snapshot import (
    CHUNKS_PER_PARTITION,
    SnapshotChunk,
    group_chunks,
    plan_chunks,
    read_chunk,
    read_chunk_columns,
    snapshot_marker,
    snapshot_xmin,
    under_snapshot,
)
from cdckit.errors import SourceReadError
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium import columnar
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat, format_settings
from cdckit.fsutil import output_file_mode
from cdckit.spark.options import from_spark_options
from cdckit.spark.records import record_builder
from cdckit.spark.rows import (
    ARROW_BATCH_ROWS,
    EVENT_SCHEMA,
    EventRow,
    arrow_batches,
    now_ms,
    option_bool,
    read_record_batches,
    skipped_operations,
)
from cdckit.spark.schema_history import schema_change_row
from cdckit.spark.sinks.jsonl import TopicFiles, direct_writes, written_rows


class SchemaChangePartition(InputPartition):
    """Emits one CREATE schema change record for a table (``include.schema.changes``, a PostgreSQL extension).
    ``number``: the partition's place in the plan, which is Spark's partition id and names its files."""

    def __init__(self, table: TableInfo, tx_id: int, number: int) -> None:
        super().__init__(("schema", table.schema, table.name))
        self.table = table
        self.tx_id = tx_id
        self.number = number


class SnapshotPartition(InputPartition):
    """One chunk of a table; ``number`` as for ``SchemaChangePartition``."""

    def __init__(self, table: TableInfo, chunk: SnapshotChunk, tx_id: int, number: int) -> None:
        super().__init__(chunk.index)
        self.table = table
        self.chunk = chunk
        self.tx_id = tx_id
        self.number = number


class SnapshotChunksPartition(InputPartition):
    """Consecutive chunks, of one table or of several, read one after another in one task, on one connection under
    the exported snapshot: each part a ``SnapshotPartition`` (or, for the schema change records, a
    ``SchemaChangePartition``); ``number`` as for ``SchemaChangePartition``."""

    def __init__(self, parts: list[SnapshotPartition] | list[SchemaChangePartition], number: int) -> None:
        super().__init__(("chunks", number))
        self.parts = parts
        self.number = number


class PostgresSnapshotDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cdckit_postgres_snapshot"

    def schema(self) -> str:
        return EVENT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return PostgresSnapshotReader(from_spark_options(self.options))


class PostgresSnapshotReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        with closing(connect(self.options)) as conn:
            conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (self.options["cdckit.snapshot.name"],))
            tx_id = snapshot_xmin(conn)
            tables = discover_tables(conn, self.options, tell=False)  # the job's driver told
            # YugabyteDB has no meaningful ctid ranges: tables without an integer key are read whole there.
            yugabyte = self.options.get("connector.class", "").endswith("YugabyteDBConnector")
            chunk_rows = int(self.options.get("cdckit.snapshot.chunk.rows", "50000"))
            chunks = plan_chunks(conn, tables, chunk_rows, ctid_ranges=not yugabyte)
            conn.rollback()
        by_name = {(t.schema, t.name): t for t in tables}
        partitions: list[InputPartition] = []
        if option_bool(self.options, "include.schema.changes", False):
            for start in range(0, len(tables), CHUNKS_PER_PARTITION):
                number = len(partitions)
                changes = [SchemaChangePartition(t, tx_id, number) for t in tables[start:start + CHUNKS_PER_PARTITION]]
                partitions.append(changes[0] if len(changes) == 1 else SnapshotChunksPartition(changes, number))
        for group in group_chunks(chunks, chunk_rows):
            number = len(partitions)
            parts = [SnapshotPartition(by_name[(c.schema, c.table)], c, tx_id, number) for c in group]
            partitions.append(parts[0] if len(parts) == 1 else SnapshotChunksPartition(parts, number))
        return partitions or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SnapshotPartition):
            batches = self.chunks_batches([partition])
        elif isinstance(partition, SnapshotChunksPartition):
            batches = self.chunks_batches(partition.parts)
        else:
            batches = self.batches(partition)
        folder = self.options.get("cdckit.snapshot.files.output")
        if folder and isinstance(partition, SnapshotPartition | SnapshotChunksPartition | SchemaChangePartition):
            return written_rows(batches, TopicFiles(folder, f"snapshot-{partition.number:05d}",
                                                    mode=output_file_mode(self.options),
                                                    direct=direct_writes(self.options)))
        return batches

    def batches(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's records as Arrow batches (``rows.EVENT_SCHEMA``)."""
        if isinstance(partition, SnapshotPartition):
            return self.chunks_batches([partition])
        if isinstance(partition, SnapshotChunksPartition):
            return self.chunks_batches(partition.parts)
        return arrow_batches(self.rows(partition))

    def chunks_batches(self, parts: list[SnapshotPartition] | list[SchemaChangePartition]
                       ) -> Iterator[pa.RecordBatch]:
        """The records of ``parts``, in order, as Arrow batches: the chunks read on one connection under the
        exported snapshot (opened for the first chunk), each table's formatting set up once. The server's refusal
        to read a table (a privilege, a row-level security policy, a statement timeout) becomes one line naming the
        table, in place of the task's traceback."""
        import psycopg2

        reading = ""
        try:
            with ExitStack() as stack:
                conn = None
                settings: FormatSettings | None = None
                formats: dict[tuple[str, str], TableFormat] = {}
                for part in parts:
                    if isinstance(part, SchemaChangePartition):
                        yield from arrow_batches(self.rows(part))
                        continue
                    table = part.table
                    reading = table.qualified_name
                    if conn is None:
                        conn = stack.enter_context(under_snapshot(self.options, self.options["cdckit.snapshot.name"]))
                    table_format = formats.get((table.schema, table.name))
                    if table_format is None:
                        settings = settings or format_settings(self.options)
                        table_format = formats[(table.schema, table.name)] = TableFormat(table, settings)
                    if self._columnar(table_format):
                        yield from self.columnar_batches(part, table_format, conn)
                    else:
                        yield from arrow_batches(self.rows(part, conn, table_format))
        except psycopg2.Error as exc:
            detail = " ".join((exc.pgerror or str(exc)).split())
            raise SourceReadError(f"reading table {reading} failed on the server: {detail}; fix what the server says "
                                  f"(a privilege, a row-level security policy, a timeout) or leave the table out with "
                                  f"table.exclude.list, and run again") from None

    def _columnar(self, table_format: TableFormat) -> bool:
        """Whether the chunk's records are Debezium's reads that ``columnar.ColumnarReads`` formats."""
        options = self.options
        return (columnar.supports(table_format) and options.get("cdckit.message.format", "debezium") == "debezium"
                and "r" not in skipped_operations(options) and bool(table_format.table.columns))

    def columnar_batches(self, partition: SnapshotPartition, table_format: TableFormat,
                         conn: Connection | None = None) -> Iterator[pa.RecordBatch]:
        """The chunk's records, a fetched block of rows at a time, formatted column by column: the same records
        as ``rows`` gives (bar the processing time ``ts_ms``, taken once a block). Read on ``conn`` when given (a
        connection under the exported snapshot)."""
        options = self.options
        lsn = parse_lsn(options["cdckit.snapshot.lsn"])
        started_ms = int(options.get("cdckit.snapshot.ts_ms") or now_ms())
        table, chunk = partition.table, partition.chunk
        reads = columnar.ColumnarReads(table_format, table_format.settings.topic_prefix)

        def event(marker: str) -> ChangeEvent:
            return columnar.read_event(table.schema, table.name, lsn, started_ms, partition.tx_id, marker)

        # at most snapshot.fetch.size rows (and ARROW_BATCH_ROWS) formatted at once
        blocks = read_chunk_columns(options, options["cdckit.snapshot.name"], table, chunk,
                                    min(ARROW_BATCH_ROWS, int(options.get("snapshot.fetch.size", "10240"))), conn)
        block, first = next(blocks, None), True
        while block is not None:
            following = next(blocks, None)
            count = len(next(iter(block.values())))
            markers = ["true"] * count
            markers[-1] = snapshot_marker(chunk, first and count == 1, last_row=following is None)
            markers[0] = snapshot_marker(chunk, first, last_row=following is None and count == 1)
            keys, values = reads.texts(block, pa.array(markers, type=pa.string()), event, now_ms())
            yield from read_record_batches(table_format.topic, f"{table.schema}.{table.name}", keys, values,
                                           Position(lsn, lsn, 0), started_ms)
            block, first = following, False

    def rows(self, partition: InputPartition, conn: Connection | None = None,
             table_format: TableFormat | None = None) -> Iterator[EventRow]:
        """The partition's records a row at a time (a chunk's read on ``conn`` when given, formatted by
        ``table_format`` when given)."""
        options = self.options
        lsn = parse_lsn(options["cdckit.snapshot.lsn"])
        started_ms = int(options.get("cdckit.snapshot.ts_ms") or now_ms())
        if isinstance(partition, SchemaChangePartition):
            yield schema_change_row(options, partition.table, lsn, partition.tx_id)
            return
        if not isinstance(partition, SnapshotPartition):
            return
        table = partition.table
        table_format = table_format or TableFormat(table, format_settings(options))
        records = record_builder(options, lambda _event: (table, table_format), lambda event: str(event.tx_id))
        fetch_size = int(options.get("snapshot.fetch.size", "10240"))
        chunk = partition.chunk
        previous: dict[str, Any] | None = None
        first_row = True
        for row in read_chunk(options, options["cdckit.snapshot.name"], table, chunk, fetch_size, conn):
            if previous is not None:
                marker = snapshot_marker(chunk, first_row, last_row=False)
                yield from records.rows(_read_event(partition, previous, lsn, marker, started_ms))
                first_row = False
            previous = row
        if previous is not None:
            marker = snapshot_marker(chunk, first_row, last_row=True)
            yield from records.rows(_read_event(partition, previous, lsn, marker, started_ms))


def _read_event(partition: SnapshotPartition, row: dict[str, Any], lsn: int, marker: str,
                started_ms: int) -> ChangeEvent:
    return ChangeEvent(partition.table.schema, partition.table.name, "r", None, row, Position(lsn, lsn, 0), started_ms,
                       partition.tx_id, snapshot=marker, sequence=(None, lsn))
