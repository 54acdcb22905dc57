"""Spark batch data source: a PostgreSQL snapshot read in parallel chunks under one exported snapshot.

Options: the connector properties plus ``cdckit.snapshot.name`` (the exported snapshot),
``cdckit.snapshot.lsn`` (the slot's consistent point) and ``cdckit.snapshot.ts_ms`` (when the snapshot started:
every record's ``source.ts_ms``, as Debezium writes it). Rows stream from the database through the
executors; nothing is collected on the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from cdckit.dialect.postgres.catalog import TableInfo, discover_tables
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.dialect.postgres.snapshot import SnapshotChunk, plan_chunks, read_chunk, snapshot_marker, snapshot_xmin
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.formats.debezium.schema_change import TableChange, describe_postgres_columns
from cdckit.spark.options import from_spark_options
from cdckit.spark.records import record_builder, schema_change_record
from cdckit.spark.rows import EVENT_SCHEMA, EventRow, arrow_batches, now_ms, option_bool


class SchemaChangePartition(InputPartition):
    """Emits one CREATE schema change record for a table (``include.schema.changes``, a PostgreSQL extension)."""

    def __init__(self, table: TableInfo, tx_id: int) -> None:
        super().__init__(("schema", table.schema, table.name))
        self.table = table
        self.tx_id = tx_id


class SnapshotPartition(InputPartition):
    def __init__(self, table: TableInfo, chunk: SnapshotChunk, tx_id: int) -> None:
        super().__init__(chunk.index)
        self.table = table
        self.chunk = chunk
        self.tx_id = tx_id


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
            tables = discover_tables(conn, self.options)
            # YugabyteDB has no meaningful ctid ranges: tables without an integer key are read whole there.
            yugabyte = self.options.get("connector.class", "").endswith("YugabyteDBConnector")
            chunk_rows = int(self.options.get("cdckit.snapshot.chunk.rows", "50000"))
            chunks = plan_chunks(conn, tables, chunk_rows, ctid_ranges=not yugabyte)
            conn.rollback()
        by_name = {(t.schema, t.name): t for t in tables}
        partitions: list[InputPartition] = [SnapshotPartition(by_name[(c.schema, c.table)], c, tx_id) for c in chunks]
        if option_bool(self.options, "include.schema.changes", False):
            partitions = [SchemaChangePartition(t, tx_id) for t in tables] + partitions
        return partitions or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return arrow_batches(self.rows(partition))

    def rows(self, partition: InputPartition) -> Iterator[EventRow]:
        options = self.options
        lsn = parse_lsn(options["cdckit.snapshot.lsn"])
        started_ms = int(options.get("cdckit.snapshot.ts_ms") or now_ms())
        if isinstance(partition, SchemaChangePartition):
            yield schema_change_row(options, partition.table, lsn, partition.tx_id)
            return
        if not isinstance(partition, SnapshotPartition):
            return
        table = partition.table
        table_format = TableFormat(table, format_settings(options))
        records = record_builder(options, lambda _event: (table, table_format), lambda event: str(event.tx_id))
        fetch_size = int(options.get("snapshot.fetch.size", "10240"))
        chunk = partition.chunk
        previous: dict[str, Any] | None = None
        first_row = True
        for row in read_chunk(options, options["cdckit.snapshot.name"], table, chunk, fetch_size):
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


def schema_change_row(options: dict[str, str], table: TableInfo, lsn: int, tx_id: int, kind: str = "CREATE",
                      position: Position | None = None) -> EventRow:
    """A CREATE (snapshot) or ALTER (stream) record of one table on the ``topic.prefix`` topic, in the SQL Server
    connector's format."""
    settings = format_settings(options)
    change = TableChange(kind, settings.database, table.schema, table.name, table.key_columns,
                         tuple(describe_postgres_columns(table.columns)))
    event = ChangeEvent(table.schema, table.name, "r", None, None, position or Position(lsn, lsn, -3), now_ms(),
                        tx_id or None, snapshot="true" if kind == "CREATE" else "false", sequence=(None, lsn))
    return schema_change_record(settings, change, event, f"{table.schema}.{table.name}")
