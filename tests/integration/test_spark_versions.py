"""The same stream on every supported Spark: with admission control (4.2+) and without it (4.0, 4.1)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyspark
import pytest
from helpers import execute, fetch, idle_reports_every, make_config, replay

from cdckit import versions
from cdckit.pipeline import run_snapshot, run_stream
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
