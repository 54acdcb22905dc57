"""The files sink's files written past the page cache (``O_DIRECT``) and through it, on one folder's file system:
what ``cdckit.files.direct.writes`` chooses between.

    .venv/bin/python bench/direct_writes.py [--folder /var/tmp] [--megabytes 200] [--repeats 3] [--tasks 1]

No Spark: the sink's own writer (``TopicFiles``, as a task uses it) writes ``megabytes`` of JSON lines of the
benchmarks' 3.4 KB updates, in files of the sizes a batch writes, each synced and renamed as a batch's file is,
by ``tasks`` processes at once (a stage's tasks, one per core), each its share of the files:

- 100 events (0.34 MB), a trickle's micro-batch;
- 2,048 events (7 MB), a micro-batch of Debezium's default ``max.batch.size``;
- 25,000 events (85 MB), a task's part of a backlog batch of 50,000, or half a snapshot chunk.

Each repeat writes every size once directly and once through the page cache, in alternating order, and removes
the files between runs. Prints, per size, the MB/s of each (median of the repeats, wall time from the first line
to the last file's rename and folder sync), the CPU seconds the tasks spent per GB written, and the ratio of the
two rates measured in this run. Writes nothing else.

With ``--spark ROWS``, then also cdckit's own path, as ``bench/run.py`` measures it (an embedded PostgreSQL,
Spark in local mode, after its warm-up): a snapshot of ``ROWS`` rows and a stream backlog of ``ROWS`` updates
(batches of 50,000) into the files sink under ``--folder``, ``repeats`` times each with
``cdckit.files.direct.writes`` true and false, alternated (each stream from a slot of its own made before the
updates).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdckit.spark.rows import ARROW_BATCH_BYTES, ARROW_BATCH_ROWS, EVENT_COLUMNS, event_arrow_schema
from cdckit.spark.sinks.jsonl import TopicFiles, direct_writes_suit, record_lines

TOPIC = "bench.public.updates"
SIZES = {"trickle (100 events)": 100, "default batch (2,048 events)": 2_048, "backlog part (25,000 events)": 25_000}


def update_rows(count: int) -> list[dict[str, object]]:
    """``count`` update records of about 3.4 KB each, as the benchmarks' stream writes them."""
    filler = "x" * 3_200
    rows = []
    for n in range(count):
        value = {"before": None, "after": {"id": n, "payload": filler}, "source": {"lsn": 1_000_000 + n},
                 "op": "u", "ts_ms": 1_700_000_000_000}
        rows.append({"topic": TOPIC, "key": json.dumps({"id": n}), "value": json.dumps(value), "headers": None,
                     "table": "public.updates", "op": "u", "commit_lsn": 1, "lsn": n, "serial": 0,
                     "source_ts_ms": 0, "value_binary": None})
    return rows


def file_batches(rows: list[dict[str, object]]) -> list[pa.RecordBatch]:
    """A file's records in the Arrow batches a reader hands a task (``ARROW_BATCH_ROWS``, ``ARROW_BATCH_BYTES``)."""
    width = len(str(rows[0]["value"])) if rows else 1
    step = max(1, min(ARROW_BATCH_ROWS, ARROW_BATCH_BYTES // width))
    schema = event_arrow_schema()
    return [pa.RecordBatch.from_pylist([{name: row[name] for name in EVENT_COLUMNS} for row in rows[at:at + step]],
                                       schema=schema) for at in range(0, len(rows), step)]


def direct_taken(folder: Path) -> bool:
    """Whether the folder's file system takes an aligned ``O_DIRECT`` write."""
    if not hasattr(os, "O_DIRECT"):
        return False
    import mmap

    probe = folder / ".direct-probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    except OSError:
        return False
    try:
        block = mmap.mmap(-1, 4096)
        return os.pwrite(fd, memoryview(block), 0) == 4096
    except OSError:
        return False
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def file_system(folder: Path) -> str:
    """The type and source of the mount holding ``folder`` (``/proc/self/mounts``, longest prefix)."""
    best = ("", "?", "?")
    with contextlib.suppress(OSError), open("/proc/self/mounts") as mounts:
        resolved = str(folder.resolve())
        for line in mounts:
            source, target, kind = line.split()[:3]
            if (resolved == target or resolved.startswith(target.rstrip("/") + "/")) and len(target) > len(best[0]):
                best = (target, kind, source)
    return f"{best[1]} ({best[2]} on {best[0]})"


def task(run: Path, number: int, batches: list[pa.RecordBatch], files: int, direct: str, start: Any,
         cpu: Any) -> None:
    """One task's files, one after the other, once every task is ready; its CPU seconds put in ``cpu``."""
    before = os.times()
    start.wait()
    for file in range(files):
        TopicFiles(str(run), f"stream-{file:012d}-{number:05d}", direct=direct).write_all(batches)
    after = os.times()
    cpu.put((after.user - before.user) + (after.system - before.system))


def one_run(folder: Path, batches: list[pa.RecordBatch], files: int, direct: str, tasks: int
            ) -> tuple[float, float]:
    """``tasks`` processes at once (a stage's tasks, one per core), each writing its share of ``files`` files of
    ``batches``; (wall, CPU) seconds: from every task's start to the last one's last folder sync, and the tasks'
    CPU time together."""
    context = multiprocessing.get_context("fork")  # the batches built once, shared with the tasks
    run = folder / f"run-{direct}"
    run.mkdir()
    start, cpu = context.Barrier(tasks + 1), context.Queue()
    shares = [files // tasks + (1 if number < files % tasks else 0) for number in range(tasks)]
    workers = [context.Process(target=task, args=(run, number, batches, share, direct, start, cpu))
               for number, share in enumerate(shares)]
    try:
        for worker in workers:
            worker.start()
        start.wait()
        started = time.perf_counter()
        spent = [cpu.get() for _ in workers]
        wall = time.perf_counter() - started
        for worker in workers:
            worker.join()
            if worker.exitcode != 0:
                raise SystemExit(f"a task failed ({worker.exitcode})")
        return wall, sum(spent)
    finally:
        shutil.rmtree(run)


def measured(folder: Path, megabytes: int, repeats: int, tasks: int) -> Iterator[dict[str, object]]:
    for label, events in SIZES.items():
        rows = update_rows(events)
        batches = file_batches(rows)
        file_bytes = sum(pc.sum(pc.binary_length(record_lines(batch))).as_py() for batch in batches)
        files = max(1, round(megabytes * 1_000_000 / file_bytes))
        written = files * file_bytes / 1_000_000
        runs: dict[str, list[tuple[float, float]]] = {"true": [], "false": []}
        for repeat in range(repeats):
            for direct in (("true", "false") if repeat % 2 == 0 else ("false", "true")):
                runs[direct].append(one_run(folder, batches, files, direct, tasks))
        rate = {direct: statistics.median(written / wall for wall, _ in each) for direct, each in runs.items()}
        cpu = {direct: statistics.median(seconds for _, seconds in each) * 1000 / written
               for direct, each in runs.items()}
        yield {"files": label, "file_mb": round(file_bytes / 1_000_000, 2), "count": files, "mb": round(written),
               "direct_mb_s": [round(written / wall) for wall, _ in runs["true"]],
               "cached_mb_s": [round(written / wall) for wall, _ in runs["false"]],
               "direct_median": round(rate["true"]), "cached_median": round(rate["false"]),
               "ratio": round(rate["true"] / rate["false"], 2),
               "direct_cpu_s_per_gb": round(cpu["true"], 2), "cached_cpu_s_per_gb": round(cpu["false"], 2)}


def measured_spark(folder: Path, rows: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Rows/s of ``repeats`` snapshots and events/s of ``repeats`` streams each way (``cdckit.files.direct.writes``
    true and false, alternated)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import Bench, warm_up  # the benchmarks' own harness, beside this file

    from cdckit.pipelines.dispatch import run_snapshot
    from cdckit.spark.session import get_spark
    from cdckit_lab.embedded_postgres import EmbeddedPostgres

    order = [("true", "false") if repeat % 2 == 0 else ("false", "true") for repeat in range(repeats)]
    found: dict[str, dict[str, list[float]]] = {"snapshot": {"true": [], "false": []},
                                                "stream": {"true": [], "false": []}}
    pg = EmbeddedPostgres(folder / "pg").start()
    try:
        bench = Bench(folder / "work", pg, get_spark())
        warm_up(bench)
        bench.table("public.orders", rows)
        for pair in order:
            for direct in pair:
                config = bench.config("public\\.orders", **{"cdckit.files.direct.writes": direct})
                found["snapshot"][direct].append(bench.timed_snapshot(config)["rows_per_s"])
                shutil.rmtree(config.str("cdckit.output.path"))  # 3.5 GB per million rows
        bench.drop_slots()
        streams = [(direct, bench.config("public\\.orders", **{"snapshot.mode": "no_data",
                                                               "cdckit.files.direct.writes": direct}))
                   for pair in order for direct in pair]
        for _, config in streams:
            run_snapshot(bench.spark, config, data=False)  # slot and publication, no rows
        bench.update_rows("public.orders", rows)
        for direct, config in streams:
            found["stream"][direct].append(bench.stream(config)["events_per_s"])
            shutil.rmtree(config.str("cdckit.output.path"))
        bench.drop_slots()
    finally:
        pg.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the files are written (a folder of the file system to measure)")
    parser.add_argument("--megabytes", type=int, default=200, help="written per size, mode and repeat (0: none)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1, help="tasks writing at once, each its share of the files")
    parser.add_argument("--spark", type=int, metavar="ROWS", help="then a snapshot and a stream of ROWS through "
                        "Spark, with and without direct writes")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cdckit-bench-direct-", dir=args.folder))
    try:
        print(f"{folder}: {file_system(folder)}; O_DIRECT taken: {'yes' if direct_taken(folder) else 'no'}; "
              f"cdckit.files.direct.writes=auto would write directly: {'yes' if direct_writes_suit(folder) else 'no'}")
        print(f"{args.megabytes} MB per size and mode, {args.tasks} task(s) at once, {args.repeats} repeats, "
              f"alternated; MB/s median (each run)")
        for result in measured(folder, args.megabytes, args.repeats, args.tasks) if args.megabytes else ():
            print(f"  {result['files']:<30} {result['count']:>4} files of {result['file_mb']:>6} MB: "
                  f"direct {result['direct_median']:>5} MB/s {result['direct_mb_s']}, "
                  f"page cache {result['cached_median']:>5} MB/s {result['cached_mb_s']}; "
                  f"ratio {result['ratio']:.2f}; CPU s/GB direct {result['direct_cpu_s_per_gb']}, "
                  f"page cache {result['cached_cpu_s_per_gb']}")
            sys.stdout.flush()
        if args.spark:
            print(f"cdckit into the files sink, {args.spark:,} rows and updates, {args.repeats} runs each way, "
                  f"alternated; median (each run)")
            for step, runs in measured_spark(folder, args.spark, args.repeats).items():
                rate = {direct: statistics.median(each) for direct, each in runs.items()}
                unit = "rows/s" if step == "snapshot" else "events/s"
                print(f"  {step:<8}: direct {rate['true']:>9,.0f} {unit} {[round(r) for r in runs['true']]}, "
                      f"page cache {rate['false']:>9,.0f} {[round(r) for r in runs['false']]}; "
                      f"ratio {rate['true'] / rate['false']:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
