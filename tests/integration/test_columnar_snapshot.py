"""The PostgreSQL snapshot reader's column-at-a-time path against its row-at-a-time reference, on a real server:
every chunk of a table of mixed types (plain values, values the kernels leave to the reference, nulls) gives the
same records, key and value texts byte for byte, in the same order, with the snapshot markers on the same rows,
whatever the fetch size, in either release's records (``cdckit.debezium.format``). Only the processing time (the
envelope's ``ts_ms``, and Debezium 3's ``ts_us`` and ``ts_ns``) is taken once a block instead of once a row."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import execute, make_config

from cdckit.config import Config
from cdckit.dialect.postgres.lsn import format_lsn
from cdckit.dialect.postgres.replication import create_slot_exporting_snapshot
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.pipelines.dispatch import prepare_source
from cdckit.spark.rows import arrow_batches
from cdckit.spark.sources import postgres_snapshot
from cdckit.spark.sources.postgres_snapshot import PostgresSnapshotReader, SnapshotPartition

pytestmark = [pytest.mark.postgres]
PROCESSING_TIME = re.compile(r'("op":"r","ts_ms":)\d+(?:,"ts_us":\d+,"ts_ns":\d+)?')
RELEASES = pytest.mark.parametrize("release", ["2.5", "3.6"])

TABLE = """CREATE TABLE public.mixed (
    id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL, wide numeric(30,4),
    anything numeric, placed_at timestamptz NOT NULL, at3 timestamptz(3), due date, paid boolean, ref uuid,
    note varchar(20) DEFAULT 'it''s', doc jsonb, ratio float8, spent interval, stamp timestamp, tags text[])"""
FILL = r"""INSERT INTO public.mixed
SELECT g, 'customer-' || (g % 50) || CASE WHEN g % 7 = 0 THEN E' "quoted" \\ tab\t' ELSE '' END
           || CASE WHEN g % 11 = 0 THEN U&'\+01F600' ELSE '' END,
       (g % 1000) / 100.0 - 3,
       CASE WHEN g % 5 = 0 THEN 123456789012345678901.5 END,
       CASE WHEN g % 13 = 0 THEN 'NaN'::numeric ELSE g / 7.0 END,
       CASE WHEN g % 17 = 0 THEN TIMESTAMPTZ '1500-01-01 00:00:00+00' WHEN g % 19 = 0 THEN 'infinity'
            ELSE TIMESTAMPTZ '2024-03-05 10:20:05+00' - g * interval '1.1 second' END,
       TIMESTAMPTZ '2024-03-05 10:20:05+00' - g * interval '0.25 second',
       CASE WHEN g % 23 = 0 THEN DATE '0044-03-15 BC' WHEN g % 29 = 0 THEN 'infinity'
            WHEN g % 3 = 0 THEN NULL ELSE DATE '2024-01-01' + (g % 700) END,
       CASE WHEN g % 4 = 0 THEN NULL ELSE g % 2 = 0 END,
       md5(g::text)::uuid,
       CASE WHEN g % 6 = 0 THEN NULL ELSE 'n' || g END,
       jsonb_build_object('g', g),
       g / 3.0, g * interval '1 minute', TIMESTAMP '2020-01-01' + g * interval '1 hour', ARRAY['a', g::text]
FROM generate_series(1, 700) g"""


def _records(batches: Any) -> list[tuple[Any, ...]]:
    table = pa.Table.from_batches(list(batches))
    return [(row["topic"], row["key"], PROCESSING_TIME.sub(r"\g<1>0", row["value"]), row["table"],
             row["op"], row["commit_lsn"], row["lsn"], row["serial"], row["source_ts_ms"], row["headers"])
            for row in table.to_pylist()]


@contextmanager
def _snapshot_reader(config: Config) -> Iterator[tuple[PostgresSnapshotReader, dict[str, str]]]:
    """The snapshot source's reader of ``config``'s tables under a fresh exported snapshot, and its options; the
    snapshot released afterwards."""
    options, _tables = prepare_source(config)
    exported = create_slot_exporting_snapshot(options)
    try:
        reader_options = {**config.as_properties(include_secrets=True), "cdckit.snapshot.name": exported.snapshot_name,
                          "cdckit.snapshot.lsn": format_lsn(exported.consistent_point),
                          "cdckit.snapshot.ts_ms": "1700000000000"}
        yield PostgresSnapshotReader(reader_options), reader_options
    finally:
        exported.release()


@RELEASES
@pytest.mark.parametrize(("fetch_size", "piece"), [("1", None), ("64", None), ("10240", None), ("10240", 100)],
                         ids=["fetch-1", "fetch-64", "fetch-10240", "fetch-10240-formatted-by-100"])
def test_columnar_snapshot_records_equal_the_row_by_row_reference(postgres: Any, database: str, workdir: Path,
                                                                  fetch_size: str, piece: int | None, release: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if piece is not None:  # a fetched block larger than what is formatted at once
        monkeypatch.setattr(postgres_snapshot, "ARROW_BATCH_ROWS", piece)
    execute(postgres.dsn(database), TABLE, FILL)
    config = make_config(postgres, database, workdir, **{"table.include.list": r"public\.mixed",
                                                         "cdckit.snapshot.chunk.rows": "250",
                                                         "snapshot.fetch.size": fetch_size,
                                                         "cdckit.debezium.format": release})
    with _snapshot_reader(config) as (reader, reader_options):
        partitions = [p for p in reader.partitions() if isinstance(p, SnapshotPartition)]
        assert len(partitions) == 3
        markers: list[str] = []
        for partition in partitions:
            table_format = TableFormat(partition.table, format_settings(reader_options))
            assert reader._columnar(table_format)
            columnar = _records(reader.columnar_batches(partition, table_format))
            reference = _records(arrow_batches(reader.rows(partition)))
            assert columnar == reference, f"chunk {partition.chunk.index}"
            markers += [re.search(r'"snapshot":"(\w+)"', value).group(1)  # type: ignore[union-attr]
                        for _topic, _key, value, *_ in columnar]
        assert len(markers) == 700
        assert markers[0] == "first" and markers[-1] == "last" and set(markers[1:-1]) == {"true"}


READINGS = """CREATE TABLE public.readings (id int PRIMARY KEY, v numeric(10, 2), n numeric, f float8, r real, d date,
    ts timestamp, tz timestamptz)"""
READINGS_ROWS = """INSERT INTO public.readings VALUES
    (1, 1.5, 1.5, 1.5, 1.5, '2024-03-05', '2024-03-05 10:20:05', '2024-03-05 10:20:05+00'),
    (2, 'NaN', 'NaN', 'NaN', 'NaN', 'infinity', 'infinity', 'infinity'),
    (3, 'NaN', 'Infinity', 'Infinity', 'Infinity', '-infinity', '-infinity', '-infinity'),
    (4, NULL, '-Infinity', '-Infinity', '-Infinity', NULL, NULL, NULL)"""


@RELEASES
@pytest.mark.parametrize(("mode", "numerics"), [
    ("precise", [None, None, None, None, None]),  # as Debezium 2.5.2's snapshot writes them (with an error logged)
    ("string", ["NAN", "NAN", "NAN", "POSITIVE_INFINITY", "NEGATIVE_INFINITY"]),
    ("double", ["NaN", "NaN", "NaN", "Infinity", "-Infinity"]),
])
def test_special_values_in_a_columnar_snapshot_equal_the_reference(postgres: Any, database: str, workdir: Path,
                                                                   mode: str, numerics: list[Any],
                                                                   release: str) -> None:
    """NaN and the infinities of numerics (with and without a typmod) and floats, infinite dates and timestamps:
    the COPY output read in columns gives the row-by-row reference's records."""
    execute(postgres.dsn(database), READINGS, READINGS_ROWS)
    config = make_config(postgres, database, workdir, **{"table.include.list": r"public\.readings",
                                                         "decimal.handling.mode": mode,
                                                         "cdckit.debezium.format": release})
    with _snapshot_reader(config) as (reader, reader_options):
        [partition] = [p for p in reader.partitions() if isinstance(p, SnapshotPartition)]
        table_format = TableFormat(partition.table, format_settings(reader_options))
        assert reader._columnar(table_format)
        columnar = _records(reader.columnar_batches(partition, table_format))
        assert columnar == _records(arrow_batches(reader.rows(partition)))
    after = {row["id"]: row for row in (json.loads(value)["payload"]["after"] for _t, _k, value, *_ in columnar)}
    assert [after[2]["v"], after[3]["v"], after[2]["n"], after[3]["n"], after[4]["n"]] == numerics
    assert [after[i]["f"] for i in (2, 3, 4)] == [after[i]["r"] for i in (2, 3, 4)] == ["NaN", "Infinity", "-Infinity"]
    assert after[2]["tz"] == "infinity" and after[3]["tz"] == "-infinity"


def test_rows_over_4_mib_in_a_columnar_snapshot_equal_the_reference(postgres: Any, database: str,
                                                                    workdir: Path) -> None:
    """Rows longer than the CSV reader's block (read in blocks of at most twice the longest row): the same records
    as the row-by-row reference, the markers on the same rows."""
    big = 5 * 1024 * 1024
    execute(postgres.dsn(database), "CREATE TABLE public.huge (id int PRIMARY KEY, body text, doc jsonb)",
            f"INSERT INTO public.huge SELECT g, CASE WHEN g IN (1, 150, 300) THEN repeat(md5(g::text), {big // 32}) "
            f"ELSE repeat('r', 500) || g END, jsonb_build_object('g', g) FROM generate_series(1, 300) g")
    config = make_config(postgres, database, workdir, **{"table.include.list": r"public\.huge"})
    with _snapshot_reader(config) as (reader, reader_options):
        [partition] = [p for p in reader.partitions() if isinstance(p, SnapshotPartition)]
        table_format = TableFormat(partition.table, format_settings(reader_options))
        batches = list(reader.columnar_batches(partition, table_format))
        columnar = _records(batches)
        assert columnar == _records(arrow_batches(reader.rows(partition)))
    assert len(columnar) == 300 and len(batches) >= 3  # a block for each long row at least
    markers = [re.search(r'"snapshot":"(\w+)"', value).group(1)  # type: ignore[union-attr]
               for _topic, _key, value, *_ in columnar]
    assert markers[0] == "first" and markers[-1] == "last" and set(markers[1:-1]) == {"true"}
