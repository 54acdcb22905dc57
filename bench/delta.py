"""The Delta sink's benchmark, next to the files sink's measured in the same run on the same data.

    .venv-spark-4.0.2/bin/python bench/delta.py [--rows 1000000] [--changes 500000]

Runs on a Spark with a Delta Lake build (``cdckit.versions.DELTA_BUILDS``; ``bench/run.py`` starts it in the
oldest supported Spark's virtualenv). On one embedded PostgreSQL and one Spark session:

- a snapshot of ``rows`` mixed rows into the files sink, then into Delta with ``cdckit.delta.mode`` changes, state
  and both;
- a stream backlog of ``changes`` updates (1,000 per transaction), read by one slot per sink and mode, into the
  same targets.

Prints the results as JSON (rows or events per second, and each Delta figure as a ratio of the files sink's).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from run import Bench

from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.spark.session import get_spark
from cdckit_lab.embedded_postgres import EmbeddedPostgres

TARGETS: dict[str, dict[str, str]] = {
    "files": {},
    "delta_changes": {"cdckit.sink": "delta", "cdckit.delta.mode": "changes"},
    "delta_state": {"cdckit.sink": "delta", "cdckit.delta.mode": "state"},
    "delta_both": {"cdckit.sink": "delta", "cdckit.delta.mode": "both"},
}


def _delta_path(bench: Bench, name: str) -> dict[str, str]:
    return {"cdckit.delta.path": str(bench.base / f"delta-{name}-{bench.counter}")} if name != "files" else {}


def measure(rows: int, changes: int, batch: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="cdckit-bench-delta-"))
    pg = EmbeddedPostgres(root / "pg").start()
    try:
        bench = Bench(root / "work", pg, get_spark(delta=True))
        bench.base.mkdir(parents=True)
        bench.table("public.warmup", 10_000)
        for name, extra in TARGETS.items():  # the session's first jobs and Delta's first tables, not measured
            run_snapshot(bench.spark, bench.config("public\\.warmup", **extra, **_delta_path(bench, name)))
        bench.drop_slots()

        bench.table("public.orders", rows)
        snapshot: dict[str, Any] = {"rows": rows}
        for name, extra in TARGETS.items():
            config = bench.config("public\\.orders", **extra, **_delta_path(bench, name))
            started = time.perf_counter()
            report = run_snapshot(bench.spark, config)
            seconds = time.perf_counter() - started
            snapshot[name] = {"rows": report.rows, "seconds": seconds, "rows_per_s": report.rows / seconds}
        bench.drop_slots()

        bench.table("public.orders", max(rows, changes))
        configs = {}
        for name, extra in TARGETS.items():
            configs[name] = bench.config("public\\.orders", **{"snapshot.mode": "no_data", "max.batch.size":
                                                                 str(batch)}, **extra, **_delta_path(bench, name))
            run_snapshot(bench.spark, configs[name], data=False)  # slot and publication, no rows
        bench.update_rows("public.orders", changes)
        stream: dict[str, Any] = {"changes": changes, "max_batch_size": batch}
        for name, config in configs.items():
            started = time.perf_counter()
            streamed = run_stream(bench.spark, config)
            seconds = time.perf_counter() - started
            stream[name] = {"events": streamed.events, "batches": streamed.batches, "seconds": seconds,
                            "events_per_s": streamed.events / seconds}
        bench.drop_slots()
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    for result, rate in ((snapshot, "rows_per_s"), (stream, "events_per_s")):
        for name in TARGETS:
            if name != "files":
                result[name]["ratio_to_files"] = result[name][rate] / result["files"][rate]
    import pyspark

    from cdckit import versions

    return {"spark": pyspark.__version__, "delta": versions.delta_build(pyspark.__version__), "snapshot": snapshot,
            "stream": stream}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=50_000, help="max.batch.size of the streams")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.rows, args.changes, args.batch), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
