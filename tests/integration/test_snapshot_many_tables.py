"""A PostgreSQL snapshot of many small tables reads several tables' chunks in one Spark partition: the records are
exactly those of a read of one chunk per partition (the same lines, in the same order, with the same snapshot
markers), and the number of Spark tasks follows the rows, not the tables."""

from __future__ import annotations

import re
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import make_config

from cdckit.dialect.postgres.lsn import format_lsn
from cdckit.dialect.postgres.replication import create_slot_exporting_snapshot
from cdckit.pipelines.dispatch import prepare_source
from cdckit.pipelines.postgres import snapshot_frame
from cdckit.spark.sinks import Sink
from cdckit.spark.sinks.jsonl import lines_by_topic
from cdckit.spark.sources.postgres_snapshot import PostgresSnapshotReader, SnapshotChunksPartition

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TIMES = re.compile(r'"ts_(ms|us|ns)":\d+')


def _small_tables(dsn: str, count: int, rows: int) -> None:
    """``count`` tables in schema ``many`` of ``rows`` rows each (every seventh without a primary key, read by page
    ranges; every eleventh empty), and ANALYZEd."""
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        conn.autocommit = True
        cur.execute("DROP SCHEMA IF EXISTS many CASCADE; CREATE SCHEMA many")
        for i in range(count):
            key = "" if i % 7 == 3 else " PRIMARY KEY"
            cur.execute(f"CREATE TABLE many.t{i:03d} (id bigint{key}, name text, amount numeric(8,2), at timestamptz)")
            if i % 11 != 5:
                cur.execute(f"INSERT INTO many.t{i:03d} SELECT g, 'n' || g || CASE WHEN g % 4 = 0 THEN E' \"q\"\\n' "
                            f"ELSE '' END, g / 4.0, TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * interval '1 hour' "
                            f"FROM generate_series(1, {rows + i % 5}) g")
        cur.execute("ANALYZE")


def _split(text: str) -> list[str]:
    """The lines of ``text``, the processing times left out."""
    return TIMES.sub('"ts_\\1":0', text).split("\n")[:-1]


def _lines(folder: Path) -> dict[str, list[str]]:
    """Each topic's lines, its files in name order (as a consumer of the files sink reads them)."""
    topics: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*/snapshot-*.jsonl")):
        topics.setdefault(path.parent.name, []).extend(_split(path.read_text()))
    return topics


def test_many_small_tables_give_the_records_of_one_chunk_per_partition(postgres: Any, spark: Any, database: str,
                                                                       workdir: Path) -> None:
    _small_tables(postgres.dsn(database), 300, 6)
    config = make_config(postgres, database, workdir, **{"table.include.list": r"many\..*",
                                                         "include.schema.changes": "true"})
    options, tables = prepare_source(config)
    assert len(tables) == 300
    exported = create_slot_exporting_snapshot(options)
    try:
        frame = snapshot_frame(spark, config, exported.snapshot_name, exported.consistent_point,
                               str(workdir / "direct"))
        written = Sink(spark, options).written(frame)
        # the reference: the same snapshot, each chunk read as a partition of its own
        reader = PostgresSnapshotReader({**config.as_properties(include_secrets=True),
                                         "cdckit.snapshot.name": exported.snapshot_name,
                                         "cdckit.snapshot.lsn": format_lsn(exported.consistent_point)})
        partitions = reader.partitions()
        alone: dict[str, list[str]] = {}
        for partition in partitions:
            for part in partition.parts if isinstance(partition, SnapshotChunksPartition) else [partition]:
                for batch in reader.read(part):  # each record as the files sink writes its line
                    for topic, lines, _count in lines_by_topic(batch):
                        alone.setdefault(topic, []).extend(_split(bytes(lines).decode()))
    finally:
        exported.release()
    # 300 tables, 2,400 rows: a few partitions of schema change records (a hundred each), a few of chunks
    assert len(partitions) <= 6
    packed = _lines(workdir / "direct")
    assert packed == alone
    assert written == {topic: len(lines) for topic, lines in alone.items()}
    filled = 300 - len(range(5, 300, 11))
    assert len(alone) == 1 + filled  # the schema changes' topic, and every table with rows
    markers = [re.findall(r'"snapshot":"(\w+)"', line)[0] for topic, lines in packed.items() if topic != "it"
               for line in lines]
    assert markers[0] == "first" and markers[-1] == "last"
    assert markers.count("first_in_data_collection") == markers.count("last_in_data_collection") == filled - 1


def _tasks(spark: Any, config: Any, group: str) -> int:
    """The Spark tasks of a snapshot of ``config``'s tables (what the Spark UI shows), read and discarded; its jobs
    in the job group ``group``."""
    options, _tables = prepare_source(config)
    exported = create_slot_exporting_snapshot(options)
    context = spark.sparkContext
    try:
        context.setJobGroup(group, "the snapshot's tasks")
        frame = snapshot_frame(spark, config, exported.snapshot_name, exported.consistent_point)
        frame.write.format("noop").mode("overwrite").save()
        tracker = context.statusTracker()
        stages = [stage for job in tracker.getJobIdsForGroup(group)
                  for stage in tracker.getJobInfo(job).stageIds]
        return sum(tracker.getStageInfo(stage).numTasks for stage in stages)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        exported.release()


def test_the_snapshots_tasks_follow_the_rows_not_the_tables(postgres: Any, spark: Any, database: str,
                                                           workdir: Path) -> None:
    settings = {"table.include.list": r"many\..*", "cdckit.snapshot.chunk.rows": "1000"}
    tasks = {}
    for count in (10, 100, 400):  # 4,000 rows or so each time
        _small_tables(postgres.dsn(database), count, 4_000 // count)
        config = make_config(postgres, database, workdir / str(count), **settings,
                             **{"slot.name": f"slot_{database}_{count}", "publication.name": f"pub_{database}_{count}"})
        tasks[count] = _tasks(spark, config, f"snapshot-of-{database}-{count}")
    assert max(tasks.values()) <= 6, tasks  # one table of these rows is 4 or 5 chunks (one task each): not 10, 100, 400
