"""Snapshot and stream throughput on this machine, measured in one run.

Prints rows per second for a snapshot read as one partition and as several partitions under the same exported
snapshot, their ratio, and streamed events per second. Usage::

    .venv/bin/python bench/snapshot_throughput.py [--rows 200000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import psycopg2

from cdckit.config import validate
from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit.lab.embedded_postgres import EmbeddedPostgres
from cdckit.pipeline import run_snapshot, run_stream
from cdckit.spark.session import get_spark


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdckit-bench-"))
    pg = EmbeddedPostgres(base / "pg").start()
    try:
        dsn = pg.dsn("postgres")
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text NOT NULL, "
                        "amount numeric(12,2) NOT NULL, placed_at timestamptz NOT NULL, note text)")
            cur.execute("INSERT INTO public.orders SELECT g, 'customer-' || (g %% 5000), (g %% 100000) / 100.0, "
                        "now() - g * interval '1 second', md5(g::text) FROM generate_series(1, %s) g", (args.rows,))
            cur.execute("ANALYZE public.orders")
        conn.commit()
        spark = get_spark()
        rates = {}
        for label, chunk_rows in (("1 partition", args.rows * 2), ("parallel", max(1, args.rows // 8))):
            work = base / label.replace(" ", "_")
            config = validate({
                "connector.class": POSTGRES_CONNECTOR, **pg.connector_properties("postgres"),
                "topic.prefix": "bench", "table.include.list": "public.orders",
                "slot.name": f"bench_{len(rates)}", "publication.name": "bench",
                "cdckit.output.path": str(work / "out"), "cdckit.checkpoint.location": str(work / "checkpoint"),
                "cdckit.snapshot.chunk.rows": str(chunk_rows), "max.batch.size": "20000",
            })
            started = time.perf_counter()
            report = run_snapshot(spark, config)
            seconds = time.perf_counter() - started
            rates[label] = report.rows / seconds
            print(f"snapshot {label:12s}: {report.rows} rows in {seconds:6.2f}s = {rates[label]:9.0f} rows/s")
        print(f"parallel / 1 partition: {rates['parallel'] / rates['1 partition']:.2f}x "
              f"(spark master {spark.sparkContext.master})")
        with conn.cursor() as cur:
            cur.execute("UPDATE public.orders SET note = 'changed' WHERE id % 4 = 0")
        conn.commit()
        started = time.perf_counter()
        stream = run_stream(spark, config)
        seconds = time.perf_counter() - started
        print(f"stream: {stream.events} events in {stream.batches} batches, {seconds:.2f}s = "
              f"{stream.events / seconds:.0f} events/s (including query start-up)")
        print(f"stream events/s / parallel snapshot rows/s: {stream.events / seconds / rates['parallel']:.2f}")
        conn.close()
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
