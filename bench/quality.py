"""What a quality run costs: ``cdckit quality`` on the output of a snapshot and a stream of updates, at two sizes,
next to Spark's own JSON reader counting the same records (the least any Spark job on them pays).

    .venv/bin/python bench/quality.py                  # 10,000 and 100,000 rows (a few minutes)
    .venv/bin/python bench/quality.py --rows 20000 200000

Each command runs as a user runs it: a new process, Spark started cold. A run's fixed part (the JVM, Spark's and
Great Expectations' start, the first jobs) is what the smaller size costs; the cost per 10,000 records is the
difference between the sizes. With ``--reconcile``, the runs also compare the replayed events with the tables.
Prints the figures and the ratios; writes nothing else.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import Bench  # the benchmarks' own harness, beside this file

from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.spark.session import get_spark
from cdckit_lab.embedded_postgres import EmbeddedPostgres

PEER = """
import sys
from cdckit.spark.session import get_spark
spark = get_spark()
print(spark.read.json(sys.argv[1] + "/*/*.jsonl").selectExpr("count(value)").collect()[0][0])
"""


def records(output: Path) -> int:
    return sum(1 for path in output.glob("*/*.jsonl") for _ in path.open("rb"))


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs=2, default=(10_000, 100_000), metavar=("SMALL", "LARGE"))
    parser.add_argument("--reconcile", action="store_true", help="compare with the source tables as well")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cdckit-bench-quality-"))
    pg = EmbeddedPostgres(root / "pg").start()
    try:
        bench = Bench(root / "work", pg, get_spark())
        results = []
        for rows in args.rows:
            name = f"public.orders_{rows}"
            bench.table(name, rows)
            config = bench.config(name.replace(".", "\\."))
            run_snapshot(bench.spark, config)
            bench.update_rows(name, rows // 5)
            run_stream(bench.spark, config)
            output = Path(config.str("cdckit.output.path"))
            connector = root / f"connector-{rows}.json"
            connector.write_text(json.dumps({"name": "bench", "config": config.as_properties(include_secrets=True)}))
            connector.chmod(0o600)
            count = records(output)
            command = [sys.executable, "-m", "cdckit", "quality", str(connector), "--input", str(output),
                       "--report", str(root / f"report-{rows}")]
            quality = timed(command if args.reconcile else [*command, "--no-reconcile"])
            peer = timed([sys.executable, "-c", PEER, str(output)])
            results.append({"rows": rows, "records": count, "quality_s": quality, "peer_s": peer})
            print(f"{count:>9,} records: cdckit quality {quality:6.1f} s, Spark's JSON reader counting them "
                  f"{peer:5.1f} s (ratio {quality / peer:.1f})", flush=True)
        small, large = results
        per_10k = (large["quality_s"] - small["quality_s"]) / (large["records"] - small["records"]) * 10_000
        peer_10k = (large["peer_s"] - small["peer_s"]) / (large["records"] - small["records"]) * 10_000
        fixed = small["quality_s"] - per_10k * small["records"] / 10_000
        print(f"cost per 10,000 records: {per_10k:.2f} s (Spark's JSON reader: {peer_10k:.2f} s); "
              f"fixed part of a run: {fixed:.1f} s")
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
