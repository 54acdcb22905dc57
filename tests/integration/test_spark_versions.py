"""The same stream on every supported Spark: with admission control (4.2+) and without it (4.0, 4.1)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyspark
import pytest
from helpers import execute, fetch, idle_reports_every, make_config, replay

from cdckit import versions
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.spark import compat
from cdckit.spark.progress import ProgressListener, listen

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOPIC = "it.public.orders"


def test_the_admission_control_api_is_used_exactly_where_spark_has_it() -> None:
    assert (versions.release(pyspark.__version__) >= (4, 2)) == compat.ADMISSION_CONTROL
    assert versions.supported(pyspark.__version__)


def test_available_now_reads_a_backlog_in_bounded_batches_of_whole_transactions_and_stops(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id integer PRIMARY KEY, amount integer NOT NULL)")
    config = make_config(postgres, database, workdir, **{"max.batch.size": "10"})
    run_snapshot(spark, config)
    for t in range(40):  # 40 transactions of 3 inserts: 3 fit in a batch of 10
        execute(dsn, f"INSERT INTO public.orders SELECT g, g * 7 FROM generate_series({3 * t}, {3 * t + 2}) g")

    sizes: list[int] = []
    report = run_stream(spark, config, on_batch=lambda _batch, summary: sizes.append(sum(summary.values())))

    assert report.events == 120
    assert sizes and max(sizes) <= 10, f"every batch holds at most max.batch.size changes: {sizes}"
    assert all(size % 3 == 0 for size in sizes), f"batches hold whole transactions: {sizes}"
    assert len(sizes) >= 14
    assert replay(config, TOPIC) == {(i,): {"id": i, "amount": a}
                                     for i, a in fetch(dsn, "SELECT id, amount FROM public.orders")}
    # What the next run starts from on Spark 4.0/4.1: the checkpoint's last committed batch, as Spark wrote it.
    assert compat.committed_offset(config.as_properties(include_secrets=True))["lsn"] == report.last_offset

    execute(dsn, "INSERT INTO public.orders VALUES (1000, 1)")
    again = run_stream(spark, config)
    assert again.events == 1, "a restart resumes after the last committed batch, repeating nothing"


def test_the_jobs_listener_hears_each_batchs_progress_an_idle_trigger_and_the_end_in_one_call_each(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's metrics hear Spark's progress through their own light listener: PySpark's conversion of a whole
    progress into Python objects (a call into the JVM per field) is never run."""
    from pyspark.sql.streaming import listener as pyspark_listener

    def refused(*_args: Any) -> Any:
        raise AssertionError("PySpark's own conversion of the event ran")

    for event in ("QueryProgressEvent", "QueryIdleEvent", "QueryTerminatedEvent"):
        monkeypatch.setattr(getattr(pyspark_listener, event), "fromJObject", classmethod(refused))
    source = tmp_path / "in"
    source.mkdir()
    (source / "1.txt").write_text("first\n")
    progress: list[dict[str, Any]] = []
    idle: list[float] = []
    listener = ProgressListener(progress.append, lambda: idle.append(time.monotonic()))
    remove = listen(spark, listener)
    try:
        with idle_reports_every(spark, 200):
            query = spark.readStream.text(str(source)).writeStream.format("noop") \
                .trigger(processingTime="100 milliseconds").start()
            listener.watch(str(query.id))
            (source / "2.txt").write_text("second\n")  # a batch after the listener watches the query
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (progress and idle):
                time.sleep(0.1)
            query.stop()
        assert listener.terminated.wait(30), "the listener heard the query end"
    finally:
        remove()
    assert progress, "the listener heard a batch's progress"
    assert all(isinstance(p["batchId"], int) for p in progress)
    assert progress[-1]["durationMs"].get("triggerExecution", 0) > 0
    assert idle, "the listener heard a trigger that found nothing new"


def test_a_local_checkpoint_is_written_through_hadoops_file_system_api_on_every_spark(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    """Spark's default checkpoint manager runs readlink and chmod as processes for each batch on a local file
    system (PySpark has no Hadoop native library): a stream with a local checkpoint starts with the FileSystem API's
    manager, by the class name its Spark has, and its offsets and commits are written as before. The setting is
    the query's own: the session's is unset again, so the job's other queries keep Spark's default. A remote
    checkpoint keeps Spark's default, and a manager the job names itself stands."""
    key = compat.CHECKPOINT_FILE_MANAGER
    spark.conf.unset(key)
    try:
        for remote in ("s3a://bucket/checkpoint/stream", "hdfs:/checkpoint/stream", "abfss://c@a.dfs/checkpoint"):
            with compat.local_checkpoint_files(spark, remote) as manager:
                assert manager is None, remote
                assert spark.conf.get(key, None) is None
        with compat.local_checkpoint_files(spark, str(workdir / "rate")) as manager:
            assert manager is not None and manager.endswith(".FileSystemBasedCheckpointFileManager")
            assert spark._jvm.org.apache.spark.util.Utils.classIsLoadable(manager)
            assert spark.conf.get(key) == manager
            query = spark.readStream.format("rate").load().writeStream.format("noop") \
                .option("checkpointLocation", str(workdir / "rate")).start()
        try:
            assert spark.conf.get(key, None) is None  # the session's setting is gone, the query keeps its own
            assert query._jsq.streamingQuery().offsetLog().fileManager().getClass().getName() == manager
        finally:
            query.stop()
        dsn = postgres.dsn(database)
        execute(dsn, "CREATE TABLE public.orders (id integer PRIMARY KEY, amount integer NOT NULL)")
        config = make_config(postgres, database, workdir, **{"max.batch.size": "2"})
        run_snapshot(spark, config)
        execute(dsn, *(f"INSERT INTO public.orders VALUES ({i}, {i})" for i in range(5)))
        assert run_stream(spark, config).events == 5
        assert spark.conf.get(key, None) is None
        stream = workdir / "checkpoint" / compat.STREAM_CHECKPOINT
        assert sorted(int(p.name) for p in (stream / "commits").iterdir() if p.name.isdigit()) == [0, 1, 2]
        assert sorted(int(p.name) for p in (stream / "offsets").iterdir() if p.name.isdigit()) == [0, 1, 2]
        assert replay(config, TOPIC) == {(i,): {"id": i, "amount": i} for i in range(5)}
        execute(dsn, "INSERT INTO public.orders VALUES (5, 5)")
        assert run_stream(spark, config).events == 1  # a restart reads the checkpoint it wrote
        spark.conf.set(key, "the.jobs.OwnManager")
        with compat.local_checkpoint_files(spark, str(workdir)) as manager:
            assert manager is None
        assert spark.conf.get(key) == "the.jobs.OwnManager"
    finally:
        spark.conf.unset(key)
