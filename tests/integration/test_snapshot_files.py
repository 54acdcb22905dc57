"""A PostgreSQL snapshot into the files sink is written by the snapshot's own tasks (the records never cross to the
JVM and back): the files are those the files sink writes from the records (the same files, lines and snapshot
markers), and a write that fails says where and leaves no partial file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config

from cdckit.dialect.postgres.replication import create_slot_exporting_snapshot
from cdckit.errors import CdcKitError
from cdckit.pipelines.dispatch import prepare_source, run_snapshot
from cdckit.pipelines.postgres import snapshot_frame
from cdckit.spark.sinks import Sink

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
PROCESSING_TIME = re.compile(r'"ts_ms":\d+')
MARKER = re.compile(r'"snapshot":"[a-z_]+"')


def _files(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): PROCESSING_TIME.sub('"ts_ms":0', path.read_text())
            for path in sorted(folder.glob("*/*.jsonl"))}


def _tables(dsn: str) -> None:
    execute(dsn, "CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), "
                 "placed_at timestamptz, note text)",
            "INSERT INTO public.orders SELECT g, 'c' || (g % 40) || CASE WHEN g % 9 = 0 THEN E' \"q\" \\\\' "
            "ELSE '' END, g / 8.0, TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * interval '1 minute', "
            "CASE WHEN g % 3 = 0 THEN NULL ELSE repeat('x', g % 30) END FROM generate_series(1, 2500) g",
            "CREATE TABLE public.tags (id integer PRIMARY KEY, name varchar(20), score float8)",
            "INSERT INTO public.tags SELECT g, 'tag' || g, g / 3.0 FROM generate_series(1, 40) g",
            "CREATE TABLE public.empty (id integer PRIMARY KEY)",
            "ANALYZE public.orders")  # its row estimate exact, so the snapshot's chunks are the 700 rows asked for


def test_a_snapshot_written_by_its_own_tasks_equals_the_files_sinks_output(postgres: Any, spark: Any,
                                                                            database: str, workdir: Path) -> None:
    _tables(postgres.dsn(database))
    config = make_config(postgres, database, workdir, **{"include.schema.changes": "true",
                                                         "cdckit.snapshot.chunk.rows": "700"})
    options, _ = prepare_source(config)
    sink = Sink(spark, options)
    assert sink.source_writes() == str(workdir / "out")
    exported = create_slot_exporting_snapshot(options)
    try:  # one exported snapshot, written both ways
        frame = snapshot_frame(spark, config, exported.snapshot_name, exported.consistent_point,
                               str(workdir / "direct"))
        written = sink.written(frame)
        frame = snapshot_frame(spark, config, exported.snapshot_name, exported.consistent_point)
        through_sink = sink.snapshot(frame)
    finally:
        exported.release()
    assert written == through_sink == {"it": 3, "it.public.orders": 2500, "it.public.tags": 40}
    direct, sunk = _files(workdir / "direct"), _files(workdir / "out")
    assert len([name for name in direct if name.startswith("it.public.orders/")]) >= 4  # one file per chunk
    assert sorted(direct) == sorted(sunk)
    for name, text in direct.items():
        # A chunk's query has no ORDER BY (as Debezium's snapshot SELECT has none), and PostgreSQL may return
        # its rows in another order on a second read (a synchronized scan starts where a concurrent one is): the
        # same lines, and the snapshot markers on the same lines of the file.
        mine, theirs = text.splitlines(), sunk[name].splitlines()
        assert [MARKER.findall(line) for line in mine] == [MARKER.findall(line) for line in theirs], name
        assert sorted(MARKER.sub("", line) for line in mine) == sorted(MARKER.sub("", line) for line in theirs), name


def test_transforms_keep_the_snapshot_in_the_files_sink(postgres: Any, spark: Any, database: str,
                                                       workdir: Path) -> None:
    _tables(postgres.dsn(database))
    config = make_config(postgres, database, workdir, **{
        "transforms": "route", "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "it\\.public\\.(.*)", "transforms.route.replacement": "moved.$1"})
    options, _ = prepare_source(config)
    assert Sink(spark, options).source_writes() is None
    report = run_snapshot(spark, config)
    assert report.rows_per_topic == {"moved.orders": 2500, "moved.tags": 40}
    assert sorted(path.name for path in (workdir / "out").iterdir()) == ["moved.orders", "moved.tags"]


def test_a_failed_write_names_the_folder_and_the_next_run_leaves_no_partial_file(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    _tables(postgres.dsn(database))
    out = workdir / "out"
    out.mkdir()
    (out / "it.public.tags").write_text("a file where the topic's folder belongs")
    config = make_config(postgres, database, workdir)
    with pytest.raises(CdcKitError, match=r"writing snapshot-\d+ files under .*out failed: .*written again"):
        run_snapshot(spark, config)
    # The other task may still be writing, or be killed mid-file, when the job's error comes back: what it leaves
    # is a temporary file, never a partial .jsonl, and the next snapshot removes it.
    assert all(path.name.startswith(".") for path in out.glob("it.public.orders/*") if path.suffix != ".jsonl")
    (out / "it.public.orders").mkdir(exist_ok=True)  # the other task may not have started before the job stopped
    (out / "it.public.orders" / ".snapshot-00007.jsonl.tmp").write_text("left by a killed task")
    (out / "it.public.tags").unlink()
    report = run_snapshot(spark, config)  # the snapshot starts again, whole
    assert not list(out.glob("*/.*.tmp"))
    assert report.rows_per_topic == {"it.public.orders": 2500, "it.public.tags": 40}
    assert sum(len(path.read_text().splitlines()) for path in out.glob("it.public.orders/*.jsonl")) == 2500
