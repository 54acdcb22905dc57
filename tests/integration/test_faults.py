"""Faults around the PostgreSQL stream: the server restarts, the slot is dropped, the WAL the checkpoint needs is
gone, the files sink's disk is full. cdckit reconnects where it can; otherwise it stops with the cause and the
recovery, and never skips changes silently."""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, fetch, make_config, replay

from cdckit.errors import CdcKitError
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOPIC = "it.public.ledger"


def _ledger(dsn: str, rows: int = 5) -> None:
    execute(dsn, "CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)",
            f"INSERT INTO public.ledger SELECT g, g FROM generate_series(1, {rows}) g")


def _source(dsn: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(i,): {"id": i, "amount": a} for i, a in fetch(dsn, "SELECT id, amount FROM public.ledger")}


def _autocommit(dsn: str, *statements: str) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def test_postgres_restart_while_streaming_loses_nothing(postgres: Any, spark: Any, database: str,
                                                        workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    config = make_config(postgres, database, workdir, **{"cdckit.trigger": "processing-time",
                                                         "cdckit.trigger.interval": "300 milliseconds"})
    run_snapshot(spark, config)
    failures: list[BaseException] = []

    def stream() -> None:
        try:
            run_stream(spark, config)
        except BaseException as exc:
            failures.append(exc)

    runner = threading.Thread(target=stream)
    runner.start()
    try:
        execute(dsn, "INSERT INTO public.ledger VALUES (100, 1)")
        time.sleep(3)
        postgres.restart()
        execute(dsn, "INSERT INTO public.ledger VALUES (101, 1)", "UPDATE public.ledger SET amount = 7 WHERE id = 1")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and replay(config, TOPIC) != _source(dsn) and not failures:
            time.sleep(0.5)
    finally:
        for query in spark.streams.active:
            query.stop()
        runner.join(60)
    assert not failures, failures
    assert replay(config, TOPIC) == _source(dsn)


def test_dropped_slot_stops_the_stream_with_the_recovery(postgres: Any, spark: Any, database: str,
                                                         workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    for mode in ("initial", "no_data"):
        config = make_config(postgres, database, workdir / mode, **{"snapshot.mode": mode,
                                                                    "slot.name": f"slot_{database}_{mode}"})
        run_stream(spark, config)
        execute(dsn, f"SELECT pg_drop_replication_slot('slot_{database}_{mode}')",
                f"INSERT INTO public.ledger VALUES ({200 + len(mode) + ord(mode[0])}, 1)")  # no slot kept it
        with pytest.raises(CdcKitError) as failure:
            run_stream(spark, config)
        message = str(failure.value)
        assert f"replication slot 'slot_{database}_{mode}' no longer exists" in message
        assert "changes since" in message and "re-snapshot" in message
        assert str(workdir / mode / "checkpoint") in message


def test_when_needed_snapshots_again_where_the_slot_cannot_continue(postgres: Any, spark: Any, database: str,
                                                                   workdir: Path) -> None:
    """snapshot.mode=when_needed: a snapshot at the first start, none while the slot continues the checkpoint, and
    a new one (instead of the error initial gives) once the slot is gone; the earlier files are set aside."""
    dsn = postgres.dsn(database)
    _ledger(dsn)
    slot = f"needed_{database}"
    config = make_config(postgres, database, workdir, **{"snapshot.mode": "when_needed", "slot.name": slot})
    first = run_stream(spark, config)
    assert first.snapshot is not None and first.snapshot.status == "completed"
    execute(dsn, "UPDATE public.ledger SET amount = 50 WHERE id = 1")
    second = run_stream(spark, config)
    assert second.snapshot is not None and second.snapshot.status == "skipped" and second.events == 1
    execute(dsn, f"SELECT pg_drop_replication_slot('{slot}')", "INSERT INTO public.ledger VALUES (300, 3)",
            "DELETE FROM public.ledger WHERE id = 2")  # no slot keeps these changes
    third = run_stream(spark, config)
    assert third.snapshot is not None and third.snapshot.status == "completed"
    assert third.snapshot.rows_per_topic == {TOPIC: 5}
    topic_folder = Path(config.str("cdckit.output.path")) / TOPIC
    assert sorted(p.name for p in topic_folder.glob("superseded-*/snapshot-*.jsonl"))
    assert list(topic_folder.glob("superseded-*/stream-*.jsonl"))
    assert replay(config, TOPIC) == _source(dsn)
    execute(dsn, "UPDATE public.ledger SET amount = 9 WHERE id = 3")
    fourth = run_stream(spark, config)
    assert fourth.snapshot is not None and fourth.snapshot.status == "skipped" and fourth.events == 1
    assert replay(config, TOPIC) == _source(dsn)


def test_lost_wal_stops_the_stream_with_the_recovery(postgres: Any, spark: Any, database: str,
                                                     workdir: Path) -> None:
    dsn = postgres.dsn(database)
    admin = postgres.dsn("postgres")
    _ledger(dsn)
    config = make_config(postgres, database, workdir)
    run_stream(spark, config)
    _autocommit(admin, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()")
    try:
        for _ in range(6):  # write more WAL than the slot may keep, then let checkpoints recycle it
            execute(dsn, "INSERT INTO public.ledger SELECT g, g FROM generate_series(1000, 30000) g "
                         "ON CONFLICT (id) DO UPDATE SET amount = public.ledger.amount + 1", "SELECT pg_switch_wal()",
                    "CHECKPOINT")
        status = fetch(admin, f"SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'slot_{database}'")
        assert status == [("lost",)], status
        with pytest.raises(CdcKitError) as failure:
            run_stream(spark, config)
        message = str(failure.value)
        assert f"replication slot 'slot_{database}'" in message and "WAL" in message and "re-snapshot" in message
    finally:
        _autocommit(admin, "ALTER SYSTEM RESET max_slot_wal_keep_size", "SELECT pg_reload_conf()")


def test_full_disk_in_the_files_sink_fails_the_batch_and_a_rerun_writes_everything(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    config = make_config(postgres, database, workdir)
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.ledger VALUES (300, 1)", "DELETE FROM public.ledger WHERE id = 2")
    # The disk fills under the next batch: Spark's Python workers may write no file larger than 64 bytes (their file
    # size limit, which a write passes with EFBIG as a full disk's with ENOSPC). A link planted at the file's name,
    # as this test once did, is now refused before anything is written (test_topic_names).
    folder = workdir / "out" / TOPIC
    with _file_size_limit(64), pytest.raises(CdcKitError) as failure:
        run_stream(spark, config)
    assert "File too large" in str(failure.value) and "written again, whole, on the next run" in str(failure.value)
    assert not (folder / "stream-000000000000-00000.jsonl").exists()
    assert not list(folder.glob(".stream-*.tmp"))  # cdckit removes its temporary files after a failure
    run_stream(spark, config)  # the failed batch was not committed: it comes again, whole
    assert replay(config, TOPIC) == _source(dsn)


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    """Spark's Python workers (PySpark's daemon and the workers it forks, this user's) may write no file larger than
    ``limit`` bytes while the block runs (RLIMIT_FSIZE: Python ignores SIGXFSZ, so a write gets EFBIG)."""
    workers = []
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if b"pyspark.daemon" in status.read_bytes() or b"pyspark.worker" in status.read_bytes():
                workers.append(int(status.parent.name))
    assert workers, "no PySpark worker runs: the session has not used Python yet"
    # the soft limit only: it goes back up afterwards, a lowered hard limit would not
    previous = {pid: resource.prlimit(pid, resource.RLIMIT_FSIZE) for pid in workers}
    for pid, (_soft, hard) in previous.items():
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        for pid, limits in previous.items():
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)


def test_a_foreign_slot_is_refused_with_a_recovery_that_works(postgres: Any, spark: Any, database: str,
                                                              workdir: Path) -> None:
    """A slot cdckit did not make: the error names the mode that streams from it, and that mode does."""
    dsn = postgres.dsn(database)
    _ledger(dsn)
    slot = f"foreign_{database}"
    execute(dsn, f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
    config = make_config(postgres, database, workdir, **{"snapshot.mode": "no_data", "slot.name": slot})
    with pytest.raises(CdcKitError) as failure:
        run_stream(spark, config)
    assert "set snapshot.mode=never" in str(failure.value)
    execute(dsn, "INSERT INTO public.ledger VALUES (400, 4)")
    config = make_config(postgres, database, workdir, **{"snapshot.mode": "never", "slot.name": slot})
    assert run_stream(spark, config).events == 1
