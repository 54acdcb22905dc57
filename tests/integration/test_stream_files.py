"""A PostgreSQL stream into the files sink is written by the stream's own tasks (the records never cross to the
JVM and back): the files are those the files sink writes from the records (the same names, lines and order), and
a batch replayed after a restart rewrites its own files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config

from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.pipelines.postgres import stream_options
from cdckit.pipelines.streaming import StreamReport, run_query
from cdckit.spark.rows import STREAM_FILES_OUTPUT

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
PROCESSING_TIME = re.compile(r'("op":"[cud]","ts_ms":)\d+')
# the first transaction's "last commit" is where its slot started, and the two slots start apart
LAST_COMMIT = re.compile(r'("sequence":"\[)[^,]*,')
CHANGES = [  # transactions of 100 rows, so that a batch holds several and is cut into partitions
    *(f"INSERT INTO public.orders SELECT g, 'c' || g, g / 8.0 FROM generate_series({start}, {start + 99}) g"
      for start in range(1, 3000, 100)),
    *(f"UPDATE public.orders SET amount = amount + 1 WHERE id % 2 = 0 AND id BETWEEN {start} AND {start + 199}"
      for start in range(1, 3000, 200)),
    "UPDATE public.orders SET id = id + 100000 WHERE id = 7",  # a key change: delete, tombstone, create
    "ALTER TABLE public.orders ADD COLUMN note text",  # a new structure part-way
    "UPDATE public.orders SET note = 'n' || id WHERE id % 5 = 0",
    "DELETE FROM public.orders WHERE id > 2900",
]


def _files(folder: Path) -> dict[str, list[str]]:
    return {str(path.relative_to(folder)): LAST_COMMIT.sub(r"\g<1>,", PROCESSING_TIME.sub(r"\g<1>0", path.read_text()))
            .splitlines()
            for path in sorted(folder.glob("*/stream-*.jsonl"))}


def test_a_stream_written_by_its_own_tasks_equals_the_files_sinks_output(postgres: Any, spark: Any, database: str,
                                                                         workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2))")
    settings = {"snapshot.mode": "no_data", "max.batch.size": "2000", "cdckit.stream.partitions": "2",
                "cdckit.stream.partition.min.events": "300", "cdckit.trigger": "available-now"}
    direct = make_config(postgres, database, workdir / "direct", **settings)
    sunk = make_config(postgres, database, workdir / "sunk", **{**settings, "slot.name": f"other_{database}"})
    for config in (direct, sunk):
        run_snapshot(spark, config, data=False)  # both slots before the changes
    execute(dsn, *CHANGES)

    assert stream_options(spark, direct)[STREAM_FILES_OUTPUT] == str(workdir / "direct" / "out")
    written = run_stream(spark, direct)
    source = stream_options(spark, sunk)
    source.pop(STREAM_FILES_OUTPUT)  # the records go through Spark to the sink
    report = StreamReport()
    run_query(spark, sunk, "cdckit_postgres_changes", source, "through_sink", report,
              on_controls=None, ordered_partitions=True)

    assert written.events_per_topic == report.events_per_topic
    # inserts, updates, a key change (delete, tombstone, create), updates, deletes (of 2901-3000 and 100007) and
    # their tombstones
    assert written.events_per_topic["it.public.orders"] == 3000 + 1500 + 3 + 600 + 2 * 101
    mine, theirs = _files(workdir / "direct" / "out"), _files(workdir / "sunk" / "out")
    assert len([name for name in mine if name.startswith("it.public.orders/")]) >= 4  # batches of 2 partitions
    assert mine == theirs


def test_a_replayed_batch_rewrites_its_own_files(postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2))")
    config = make_config(postgres, database, workdir, **{"snapshot.mode": "no_data", "max.batch.size": "1000",
                                                          "cdckit.trigger": "available-now"})
    run_snapshot(spark, config, data=False)
    execute(dsn, *CHANGES[:45])  # 3000 inserts, 1500 updates

    def fail_after_writing(batch_id: int, _summary: Any) -> None:
        if batch_id == 1:
            raise RuntimeError("the driver went away after the batch was written, before it was committed")

    with pytest.raises(Exception, match="went away"):
        run_stream(spark, config, on_batch=fail_after_writing)
    out = workdir / "out" / "it.public.orders"
    replayed = sorted(out.glob("stream-000000000001-*.jsonl"))
    assert replayed and not list(out.glob("stream-000000000002-*.jsonl"))
    for path in replayed:
        path.write_text("")  # whatever the failed attempt left is written again
    report = run_stream(spark, config)

    lines = [line for path in sorted(out.glob("stream-*.jsonl")) for line in path.read_text().splitlines()]
    positions = [re.search(r'"lsn":(\d+),"xmin"', line).group(1) for line in lines]  # type: ignore[union-attr]
    assert len(lines) == 4500 and len(set(positions)) == 4500  # all of them, none twice
    assert all(path.stat().st_size > 0 for path in replayed)
    assert report.events_per_topic["it.public.orders"] == 4500 - 1000  # batch 0 was committed before
