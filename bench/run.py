"""cdckit's benchmarks, each figure next to the physical limit measured in the same run on the same data.

    .venv/bin/python bench/run.py --quick      # a few minutes (make bench-quick)
    .venv/bin/python bench/run.py              # the full run: 1M and 10M rows (make bench)

Measures, on an embedded PostgreSQL and Spark in local mode:
- snapshot throughput (rows/s, MB/s of COPY text) against COPY ... TO STDOUT with 1 and with N connections;
- streaming throughput (events/s) against the raw logical decoding rate of the same WAL (pgoutput fetched and
  discarded by one client);
- end-to-end latency, commit to the files sink (p50/p95/p99), at several write rates, with the processing-time
  trigger, and with available-now runs started back to back;
- peak memory (RSS) of the driver (JVM + Python) and of the Python workers during snapshots of two sizes;
- scaling: time against rows, against the number of tables (same total rows), against Spark partitions;
- the Kafka sink against the files sink (real broker, KRaft);
- where the time goes: the per-event path (pgoutput decoding, value conversion, envelope, JSON) profiled alone,
  and a snapshot and a stream each read by ever more of cdckit's path (stage by stage);
- the Delta sink's change and state tables against the files sink (``bench/delta.py``, on the Spark with Delta).

Writes bench/results/<mode>-<time>.json, bench/RESULTS.md and bench/plots/*.png.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import datetime as dt
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import psycopg2

from cdckit.config import Config, validate
from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit.dialect.postgres.lsn import format_lsn
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.pipelines.postgres import stream_options
from cdckit.spark.rows import STREAM_FILES_OUTPUT
from cdckit.spark.session import get_spark
from cdckit_lab.embedded_postgres import EmbeddedPostgres

BENCH = Path(__file__).resolve().parent
TABLE_DDL = ("CREATE TABLE {name} (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL, "
             "placed_at timestamptz NOT NULL, due date, paid boolean, ref uuid, note text)")
TABLE_FILL = ("INSERT INTO {name} SELECT g, 'customer-' || (g % 5000), (g % 100000) / 100.0, "
              "now() - g * interval '1 second', DATE '2024-01-01' + (g % 700), g % 3 = 0, md5(g::text)::uuid, "
              "md5((g * 7)::text) FROM generate_series({start}, {end}) g")

QUICK = {"rows": 200_000, "memory_rows": (50_000, 400_000), "scaling_rows": (25_000, 100_000, 400_000),
         "tables": (1, 10, 100), "tables_total_rows": 100_000, "partitions": (1, 2, 4, 8),
         "stream_changes": 100_000, "latency_rates": (20, 200), "latency_seconds": 12, "kafka_rows": 100_000,
         "profile_events": 20_000, "stages_rows": 200_000, "debezium_rows": 100_000, "debezium_changes": 50_000,
         "repeats": 1}
FULL = {"rows": 1_000_000, "memory_rows": (1_000_000, 10_000_000), "scaling_rows": (100_000, 1_000_000, 10_000_000),
        "tables": (1, 20, 200, 1000), "tables_total_rows": 1_000_000, "partitions": (1, 2, 4, 8, 16),
        "stream_changes": 500_000, "latency_rates": (10, 100, 1000, 5000), "latency_seconds": 30,
        "kafka_rows": 1_000_000,
        "profile_events": 100_000, "stages_rows": 1_000_000, "debezium_rows": 1_000_000,
        "debezium_changes": 500_000, "repeats": 3}


class Bench:
    def __init__(self, base: Path, pg: EmbeddedPostgres, spark: Any) -> None:
        self.base = base
        self.pg = pg
        self.spark = spark
        self.dsn = pg.dsn("postgres")
        self.counter = 0

    def sql(self, *statements: str) -> None:
        conn = psycopg2.connect(self.dsn)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()

    def table(self, name: str, rows: int) -> None:
        self.sql(f"DROP TABLE IF EXISTS {name}", TABLE_DDL.format(name=name))
        step = 500_000
        for start in range(1, rows + 1, step):
            self.sql(TABLE_FILL.format(name=name, start=start, end=min(rows, start + step - 1)))
        self.sql(f"ANALYZE {name}")

    def update_rows(self, name: str, count: int, per_transaction: int = 1000) -> None:
        """Update rows 1..count of a bench table, ``per_transaction`` rows per transaction."""
        for start in range(1, count + 1, per_transaction):
            self.sql(f"UPDATE {name} SET note = 'changed', amount = amount + 1 WHERE id BETWEEN {start} AND "
                     f"{min(count, start + per_transaction - 1)}")

    def config(self, tables: str, **extra: str) -> Config:
        self.counter += 1
        work = self.base / f"run{self.counter}"
        return validate({
            "connector.class": POSTGRES_CONNECTOR, **self.pg.connector_properties("postgres"),
            "topic.prefix": "bench", "table.include.list": tables, "slot.name": f"bench_{self.counter}",
            "publication.name": f"bench_{self.counter}", "publication.autocreate.mode": "filtered",
            "cdckit.output.path": str(work / "out"), "cdckit.checkpoint.location": str(work / "checkpoint"),
            **extra})

    def drop_slots(self) -> None:
        self.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active")
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True, exist_ok=True)

    # -- limits -----------------------------------------------------------------------------------------------
    def copy_rate(self, name: str, connections: int) -> dict[str, float]:
        """COPY (SELECT ...) TO STDOUT, split by id range over ``connections`` parallel connections."""
        conn = psycopg2.connect(self.dsn)
        with conn.cursor() as cur:
            cur.execute(f"SELECT min(id), max(id), count(*) FROM {name}")
            low, high, rows = cur.fetchone()
        conn.close()
        bounds = [low + (high - low + 1) * i // connections for i in range(connections + 1)]
        sizes = [0] * connections

        class Sink(io.RawIOBase):
            def __init__(self, index: int) -> None:
                self.index = index

            def writable(self) -> bool:
                return True

            def write(self, data: Any) -> int:
                sizes[self.index] += len(data)
                return len(data)

        def copy(index: int) -> None:
            c = psycopg2.connect(self.dsn)
            with c.cursor() as cur:
                cur.copy_expert(f"COPY (SELECT * FROM {name} WHERE id >= {bounds[index]} AND id < "
                                f"{bounds[index + 1] + (1 if index == connections - 1 else 0)}) TO STDOUT",
                                Sink(index))
            c.close()

        started = time.perf_counter()
        threads = [threading.Thread(target=copy, args=(i,)) for i in range(connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "mb": sum(sizes) / 1e6,
                "mb_per_s": sum(sizes) / 1e6 / seconds}

    def raw_decoding_rate(self, slot: str, publication: str) -> dict[str, float]:
        """The slot's pending WAL decoded by pgoutput and fetched by one client, discarded."""
        conn = psycopg2.connect(self.dsn)
        started = time.perf_counter()
        messages = size = 0
        with conn.cursor(name="raw") as cur:
            cur.itersize = 20_000
            cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', "
                        "'1', 'publication_names', %s)", (slot, publication))
            for (data,) in cur:
                messages += 1
                size += len(data)
        seconds = time.perf_counter() - started
        conn.close()
        return {"messages": messages, "seconds": seconds, "messages_per_s": messages / seconds, "mb": size / 1e6}

    # -- cdckit ---------------------------------------------------------------------------------------------
    def snapshot(self, tables: str, chunk_rows: int | None = None) -> dict[str, float]:
        extra = {"cdckit.snapshot.chunk.rows": str(chunk_rows)} if chunk_rows else {}
        return self.timed_snapshot(self.config(tables, **extra))

    def timed_snapshot(self, config: Config, unit: str = "rows") -> dict[str, float]:
        """Run ``config``'s snapshot, timed: its ``unit`` (rows, or records for the side by side with Debezium),
        seconds and rate."""
        started = time.perf_counter()
        report = run_snapshot(self.spark, config)
        seconds = time.perf_counter() - started
        return {unit: report.rows, "seconds": seconds, f"{unit}_per_s": report.rows / seconds}

    def stream(self, config: Config, unit: str = "events") -> dict[str, Any]:
        """Run ``config``'s stream to the end of what its slot holds, timed: its ``unit`` (events, or records for
        the side by side with Debezium) and their rate, batches, seconds and ``max.batch.size``."""
        from pyspark.sql.streaming import StreamingQueryListener

        durations: list[dict[str, int]] = []

        class Batches(StreamingQueryListener):  # type: ignore[misc]
            """Each batch's time by Spark's phases (``durationMs``), for where a stream's time goes."""

            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                if event.progress.numInputRows:
                    durations.append(dict(event.progress.durationMs))

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        listener = Batches()
        self.spark.streams.addListener(listener)
        try:
            started = time.perf_counter()
            report = run_stream(self.spark, config)
            seconds = time.perf_counter() - started
            time.sleep(0.5)  # the listener bus hands over the last batch's progress
        finally:
            self.spark.streams.removeListener(listener)
        return {unit: report.events, "batches": report.batches, "seconds": seconds,
                f"{unit}_per_s": report.events / seconds, "max_batch_size": config["max.batch.size"],
                "batch_ms": batch_phases(durations)}


BATCH_PHASES = {"latestOffset": "planning (latestOffset)", "walCommit": "offset log", "queryPlanning": "query planning",
                "addBatch": "reading and writing", "commitOffsets": "commit log"}


def batch_phases(durations: list[dict[str, int]]) -> dict[str, float]:
    """The batches' mean milliseconds in each of Spark's phases (``BATCH_PHASES``, and ``triggerExecution``, the
    whole batch) and their sums (``total_<phase>``)."""
    if not durations:
        return {}
    keys = [*BATCH_PHASES, "triggerExecution"]
    return {**{key: statistics.mean(d.get(key, 0) for d in durations) for key in keys},
            **{f"total_{key}": float(sum(d.get(key, 0) for d in durations)) for key in keys}}


def phases_text(ms: dict[str, float]) -> str:
    """``batch_phases``'s means as a sentence's list: planning 53 ms, offset log 13 ms, ..."""
    return ", ".join(f"{label} {ms.get(key, 0):,.0f} ms" for key, label in BATCH_PHASES.items())


def median_run(runs: list[dict[str, Any]], rate: str) -> dict[str, Any]:
    """The run of median ``rate`` (of an even count, the lower middle one), with every run's ``rate`` in the order
    they ran under ``runs``: the goals' figures, since one run's rate on this machine varies by a fifth or more.
    A single run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    ordered = sorted(runs, key=lambda run: float(run[rate]))
    return {**ordered[(len(ordered) - 1) // 2], "runs": [run[rate] for run in runs]}


@contextmanager
def peak_memory() -> Iterator[dict[str, float]]:
    """Peak RSS (MB) of this process, its JVM, and its Python workers, sampled every 50 ms."""
    me = psutil.Process()
    peaks = {"driver_python_mb": 0.0, "driver_jvm_mb": 0.0, "workers_mb": 0.0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                children = me.children(recursive=True)
                jvm = sum(c.memory_info().rss for c in children if "java" in c.name())
                workers = sum(c.memory_info().rss for c in children if "python" in c.name())
                peaks["driver_python_mb"] = max(peaks["driver_python_mb"], me.memory_info().rss / 1e6)
                peaks["driver_jvm_mb"] = max(peaks["driver_jvm_mb"], jvm / 1e6)
                peaks["workers_mb"] = max(peaks["workers_mb"], workers / 1e6)
            except psutil.Error:
                pass
            stop.wait(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peaks
    finally:
        stop.set()
        thread.join()


WARM_UP_CHANGES = 100_000  # streamed in batches of WARM_UP_BATCH: enough micro-batches for the JIT to compile them
WARM_UP_BATCH = 2_000


def warm_up(bench: Bench) -> dict[str, Any]:
    """A small snapshot and a small stream first, so that the figures measure throughput rather than the Spark
    session's first jobs and first streaming query (which start the JVM's code paths, its JIT compiling them, and
    the Python workers), as a stream that runs for hours would; their time is that one-off cost."""
    bench.table("public.warmup", WARM_UP_CHANGES)
    result = bench.snapshot("public\\.warmup")
    config = bench.config("public\\.warmup", **{"snapshot.mode": "no_data", "max.batch.size": str(WARM_UP_BATCH)})
    run_snapshot(bench.spark, config, data=False)
    bench.update_rows("public.warmup", WARM_UP_CHANGES)
    result["stream"] = bench.stream(config)
    result["seconds"] += result["stream"]["seconds"]
    bench.sql("DROP TABLE public.warmup")
    bench.drop_slots()
    return result


def measure_snapshot(bench: Bench, rows: int, repeats: int = 1) -> dict[str, Any]:
    """cdckit's snapshot of ``rows`` rows into the files sink (``repeats`` times: the median run) and COPY's."""
    bench.table("public.orders", rows)
    result = {"rows": rows, "copy_1": bench.copy_rate("public.orders", 1),
              "copy_n": bench.copy_rate("public.orders", os.cpu_count() or 2)}
    with peak_memory() as memory:
        runs = [bench.snapshot("public\\.orders") for _ in range(repeats)]
    result["cdckit"] = median_run(runs, "rows_per_s")
    result["memory"] = memory
    result["cdckit"]["mb_per_s"] = result["copy_1"]["mb"] / result["cdckit"]["seconds"]
    result["ratio_to_copy_n"] = result["copy_n"]["rows_per_s"] / result["cdckit"]["rows_per_s"]
    bench.drop_slots()
    return result


LARGE_BATCH = 200_000  # the stream backlog again with a max.batch.size: what the tuned setting reaches
STAGE_BATCH = 50_000  # the stream's stages walk batches of a fixed size


def measure_stream(bench: Bench, changes: int, repeats: int = 1) -> dict[str, Any]:
    """cdckit's stream of a backlog of ``changes`` updates into the files sink at its defaults (``repeats`` times,
    each from a slot of its own made before the updates: the median run), once more at ``max.batch.size``
    ``LARGE_BATCH`` (tuned), and raw decoding's."""
    bench.table("public.orders", changes)
    configs = [bench.config("public\\.orders", **{"snapshot.mode": "no_data"}) for _ in range(repeats)]
    large = bench.config("public\\.orders", **{"snapshot.mode": "no_data", "max.batch.size": str(LARGE_BATCH)})
    for each in (*configs, large):
        run_snapshot(bench.spark, each, data=False)  # slot and publication, no rows
    bench.sql("SELECT pg_create_logical_replication_slot('bench_raw', 'pgoutput')")
    bench.update_rows("public.orders", changes)
    raw = bench.raw_decoding_rate("bench_raw", configs[0].str("publication.name"))
    runs = [bench.stream(each) for each in configs]
    larger = bench.stream(large)
    bench.sql("SELECT pg_drop_replication_slot('bench_raw')")
    result = {"changes": changes, "raw": raw, "cdckit": median_run(runs, "events_per_s"), "large_batches": larger}
    result["ratio_to_raw"] = raw["messages_per_s"] / result["cdckit"]["events_per_s"]
    bench.drop_slots()
    return result


def _latencies(output: Path) -> list[float]:
    """Commit -> in-the-sink, per event: the file's modification time minus the event's source.ts_ms."""
    found = []
    for path in output.glob("*/stream-*.jsonl"):
        written_ms = path.stat().st_mtime * 1000
        for line in path.read_text().splitlines():
            value = json.loads(line)["value"]
            if value is None:
                continue
            payload = value.get("payload", value)
            if payload.get("op") in ("c", "u", "d"):
                found.append(written_ms - payload["source"]["ts_ms"])
    return found


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"events": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"events": len(values), "p50_ms": at(0.50), "p95_ms": at(0.95), "p99_ms": at(0.99),
            "mean_ms": statistics.fmean(values)}


def _until_waiting_for_data(spark: Any, seconds: float = 120.0) -> None:
    """Wait until a streaming query runs and has finished a trigger (it waits for data or for the next one; at the
    default interval, triggers that wait in the source follow each other 10 ms apart, so it is looked at often)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any("Waiting for" in str(query.status.get("message", "")) for query in spark.streams.active):
            return
        time.sleep(0.002)
    raise RuntimeError("the stream did not start within two minutes")


def measure_latency(bench: Bench, rate: int, seconds: int, trigger: str, interval: str = "200 milliseconds"
                    ) -> dict[str, Any]:
    """Commit to the files sink under ``rate`` commits/s for ``seconds``; ``interval`` "default": the trigger's
    default interval (poll.interval.ms)."""
    bench.sql("DROP TABLE IF EXISTS public.events", "CREATE TABLE public.events (id bigserial PRIMARY KEY, "
              "body text, at timestamptz DEFAULT now())")
    timing = {} if interval == "default" else {"cdckit.trigger.interval": interval}
    config = bench.config("public\\.events", **{"snapshot.mode": "no_data", "cdckit.trigger": trigger, **timing})
    run_snapshot(bench.spark, config, data=False)
    done = threading.Event()

    def write() -> None:
        conn = psycopg2.connect(bench.dsn)
        conn.autocommit = True
        interval = 1.0 / rate
        next_at = time.perf_counter()
        with conn.cursor() as cur:
            while not done.is_set():
                cur.execute("INSERT INTO public.events (body) VALUES ('x')")
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))
        conn.close()

    writer = threading.Thread(target=write)
    if trigger == "processing-time":
        config_run = validate({**config.as_properties(include_secrets=True),
                               "cdckit.stream.max.batches": "1000000"})
        runner = threading.Thread(target=lambda: run_stream(bench.spark, config_run))
        runner.start()
        _until_waiting_for_data(bench.spark)  # latency under load, not the query's start
        stop_at = time.monotonic() + seconds
        writer.start()
        while time.monotonic() < stop_at:
            time.sleep(0.2)
        done.set()
        writer.join()
        time.sleep(2)
        for query in bench.spark.streams.active:
            query.stop()
        runner.join()
    else:
        writer.start()
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            run_stream(bench.spark, config)
        done.set()
        writer.join()
        run_stream(bench.spark, config)
    result = {"rate": rate, "trigger": trigger, "interval": interval if trigger == "processing-time" else "",
              **_percentiles(_latencies(Path(config.str("cdckit.output.path"))))}
    bench.drop_slots()
    return result


def measure_kafka(bench: Bench, rows: int) -> dict[str, Any]:
    from cdckit_lab.kafka_broker import KafkaBroker

    bench.table("public.orders", rows)
    files = bench.snapshot("public\\.orders")
    broker = KafkaBroker(bench.base.parent / "kafka").start()
    try:
        kafka = bench.timed_snapshot(bench.config("public\\.orders", **{
            "cdckit.sink": "kafka", "kafka.bootstrap.servers": broker.bootstrap_servers,
            "topic.creation.default.partitions": "4"}))
    finally:
        broker.stop()
    result = {"rows": rows, "files": files, "kafka": kafka}
    result["kafka_over_files"] = result["kafka"]["rows_per_s"] / files["rows_per_s"]
    bench.drop_slots()
    return result


def profile_event_path(events: int) -> dict[str, Any]:
    """The per-event work of an executor, without Spark: format ``events`` update events of the bench table and
    report where the time goes (cumulative seconds per function, top entries)."""
    from cdckit.dialect.postgres.catalog import ColumnType, TableInfo
    from cdckit.events import ChangeEvent, Position
    from cdckit.formats.debezium.envelope import TableFormat, format_settings

    columns = tuple(ColumnType(name=n, type_name=t, type_oid=0, modifier=m, optional=o) for n, t, m, o in (
        ("id", "int8", -1, False), ("customer", "text", -1, False), ("amount", "numeric", (12 << 16 | 2) + 4, False),
        ("placed_at", "timestamptz", -1, False), ("due", "date", -1, True), ("paid", "bool", -1, True),
        ("ref", "uuid", -1, True), ("note", "text", -1, True)))
    table = TableInfo("public", "orders", 1, columns, ("id",), "d")
    options = {"topic.prefix": "bench", "connector.class": POSTGRES_CONNECTOR, "database.dbname": "postgres"}
    table_format = TableFormat(table, format_settings(options))
    row = {"id": "1", "customer": "customer-1", "amount": "12.34", "placed_at": "2024-01-02 03:04:05.123456+00",
           "due": "2024-02-29", "paid": "t", "ref": "c4ca4238-a0b9-3382-8dcc-509a6f75849b", "note": "changed"}

    def run() -> None:
        for i in range(events):
            event = ChangeEvent("public", "orders", "u", None, {**row, "id": str(i)}, Position(i, i, 0),
                                1_700_000_000_000, 7)
            table_format.key_json({"id": str(i)})
            table_format.value_json(event, 1_700_000_000_000)

    started = time.perf_counter()
    run()
    plain = time.perf_counter() - started
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.runcall(run)
    seconds = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    top = sorted(((v[3], f"{Path(k[0]).name}:{k[2]}") for k, v in stats.stats.items()  # type: ignore[attr-defined]
                  if "cdckit" in k[0] or "orjson" in k[0] or "json" in k[2]), reverse=True)[:12]
    return {"events": events, "seconds": plain, "events_per_s_one_core": events / plain,
            "top_cumulative": [{"function": name, "seconds": round(s, 3), "share": round(s / seconds, 3)}
                               for s, name in top]}


def measure_stages(bench: Bench, rows: int) -> dict[str, Any]:
    """Where a snapshot's time goes: the same table under one exported snapshot, read by ever more of cdckit's
    path. Each stage's rate, next to the one before it, tells what that stage costs."""
    from cdckit.dialect.postgres.replication import create_slot_exporting_snapshot
    from cdckit.dialect.postgres.snapshot import read_chunk, read_chunk_columns
    from cdckit.pipelines.dispatch import prepare_source
    from cdckit.pipelines.postgres import snapshot_frame
    from cdckit.spark.rows import arrow_batches
    from cdckit.spark.sinks import Sink
    from cdckit.spark.sources.postgres_snapshot import PostgresSnapshotReader, SnapshotPartition

    bench.table("public.orders", rows)
    config = bench.config("public\\.orders")
    options, _tables = prepare_source(config)
    exported = create_slot_exporting_snapshot(options)
    stages: list[dict[str, Any]] = []

    def timed(stage: str, what: str, run: Callable[[], int], after: str = "") -> None:
        started = time.perf_counter()
        count = run()
        seconds = time.perf_counter() - started
        stages.append({"stage": stage, "what": what, "rows": count, "seconds": seconds,
                       "rows_per_s": count / seconds, **({"after": after} if after else {})})

    try:
        copy = bench.copy_rate("public.orders", 1)
        stages.append({"stage": "copy", "what": "COPY TO STDOUT, 1 connection (the limit)", **copy})
        spark_options = config.as_properties(include_secrets=True)
        spark_options["cdckit.snapshot.name"] = exported.snapshot_name
        spark_options["cdckit.snapshot.lsn"] = format_lsn(exported.consistent_point)
        reader = PostgresSnapshotReader(spark_options)
        partitions = [p for p in reader.partitions() if isinstance(p, SnapshotPartition)]

        def cursor_rows() -> int:
            return sum(1 for p in partitions for _ in read_chunk(spark_options, exported.snapshot_name, p.table,
                                                                  p.chunk, 10_240))

        def copied_rows() -> int:
            return sum(len(next(iter(block.values()))) for p in partitions
                       for block in read_chunk_columns(spark_options, exported.snapshot_name, p.table, p.chunk, 10_240))

        def formatted_rows() -> int:
            return sum(batch.num_rows for p in partitions for batch in reader.read(p))

        def reference_rows() -> int:
            return sum(batch.num_rows for p in partitions for batch in arrow_batches(reader.rows(p)))

        timed("cursor", "rows fetched by the chunk queries' cursors (the reference's read), 1 process", cursor_rows)
        timed("format_reference", "+ events formatted a row at a time (the reference), 1 process", reference_rows)
        timed("columns", "rows read by the chunks' COPY into Arrow columns, 1 process", copied_rows, after="copy")
        timed("format", "+ events formatted a column at a time into Arrow batches, 1 process", formatted_rows,
              after="columns")
        frame = snapshot_frame(bench.spark, config, exported.snapshot_name, exported.consistent_point)
        frame.write.format("noop").mode("overwrite").save()  # the Python workers start and warm up

        def spark_read() -> int:
            frame.write.format("noop").mode("overwrite").save()
            return rows

        sink = Sink(bench.spark, options)
        written = snapshot_frame(bench.spark, config, exported.snapshot_name, exported.consistent_point,
                                 sink.source_writes())

        def files_sink() -> int:
            return sum(sink.written(written).values())

        def files_sink_from_spark() -> int:
            return sum(sink.snapshot(frame).values())

        timed("spark", f"+ Spark reads the data source ({os.cpu_count()} cores), nothing written", spark_read)
        timed("sink", "+ the files sink writes the records (in the snapshot's tasks, as `make demo` does)", files_sink)
        timed("sink_from_spark", "+ the files sink writing the records Spark read (the path with transforms)",
              files_sink_from_spark, after="spark")
    finally:
        exported.release()
    bench.drop_slots()
    return {"rows": rows, "stages": stages}


def measure_stream_stages(bench: Bench, changes: int) -> dict[str, Any]:
    """Where a stream's time goes: one backlog of ``changes`` updates (1000-row transactions, 50,000-change
    batches) read by ever more of cdckit's path, each stage from its own slot. The one-process stages walk the
    batches as the stream plans them (each batch one range); the Spark stages sum the micro-batches' own times
    (``triggerExecution``: planning, reading, writing, both logs), which leaves out the query's start."""
    from cdckit.dialect.postgres import pgoutput
    from cdckit.dialect.postgres.connection import connect
    from cdckit.dialect.postgres.lsn import parse_lsn
    from cdckit.dialect.postgres.peek import peek_rows
    from cdckit.dialect.postgres.replication import slot_status
    from cdckit.pipelines.streaming import StreamReport, run_query
    from cdckit.spark.compat import ReadMaxRows
    from cdckit.spark.options import to_spark_options
    from cdckit.spark.rows import arrow_batches
    from cdckit.spark.sources.postgres_stream import PostgresChangeStreamReader
    from cdckit.spark.sources.postgres_stream_partition import LsnRange

    bench.table("public.orders", changes)
    tuned = {"snapshot.mode": "no_data", "max.batch.size": str(STAGE_BATCH)}
    walk = bench.config("public\\.orders", **tuned)
    noop = bench.config("public\\.orders", **tuned)
    files = bench.config("public\\.orders", **tuned)
    for config in (walk, noop, files):
        run_snapshot(bench.spark, config, data=False)  # every slot exists before the updates
    bench.sql("SELECT pg_create_logical_replication_slot('bench_raw', 'pgoutput')")
    bench.update_rows("public.orders", changes)
    stages: list[dict[str, Any]] = []

    def stage(name: str, what: str, events: int, seconds: float) -> None:
        stages.append({"stage": name, "what": what, "events": events, "seconds": seconds,
                       "events_per_s": events / seconds})

    raw = bench.raw_decoding_rate("bench_raw", walk.str("publication.name"))
    bench.sql("SELECT pg_drop_replication_slot('bench_raw')")
    stage("raw", "pgoutput decoding fetched by one client (the limit)", raw["messages"], raw["seconds"])

    options = stream_options(bench.spark, walk)
    slot, batch = walk.str("slot.name"), walk.int("max.batch.size")
    reader = PostgresChangeStreamReader(options)
    planned = decoded = formatted = reference = 0.0
    batches = events = 0
    with closing(connect(options)) as conn:
        start = slot_status(conn, slot).confirmed_flush_lsn  # type: ignore[union-attr]
        while True:
            began = time.perf_counter()  # the reader's own planning: it confirms start, and counts (or planned)
            end = parse_lsn(reader.next_offset({"lsn": format_lsn(start)}, ReadMaxRows(batch))["lsn"])
            planned += time.perf_counter() - began
            if end == start:
                break
            began = time.perf_counter()
            for _lsn, data in peek_rows(conn, options, end):
                pgoutput.decode_message(data)
            decoded += time.perf_counter() - began
            began = time.perf_counter()
            sum(b.num_rows for b in arrow_batches(reader.rows(LsnRange(start, end))))
            reference += time.perf_counter() - began
            began = time.perf_counter()
            events += sum(b.num_rows for b in reader.read(LsnRange(start, end)))
            formatted += time.perf_counter() - began
            batches += 1
            start = end
    reader.stop()
    stage("plan", "batches planned (latestOffset: the changes counted and cut), 1 process", events, planned)
    stage("decode", "+ pgoutput messages fetched and decoded, 1 process", events, planned + decoded)
    stage("format_reference", "+ events formatted a record at a time (the reference), 1 process", events,
          planned + reference)
    stage("format", "+ events formatted a column at a time into Arrow batches (instead of only decoded), 1 process",
          events, planned + formatted)

    def stream_seconds(config: Config, sink: bool) -> tuple[int, float, list[dict[str, Any]]]:
        source = stream_options(bench.spark, config)
        report = StreamReport()
        if sink:  # the tasks write the files themselves (STREAM_FILES_OUTPUT): Spark's rows are their counts
            query = run_query(bench.spark, config, "cdckit_postgres_changes", source, "bench_files", report,
                              ordered_partitions=True)
        else:
            source.pop(STREAM_FILES_OUTPUT, None)  # the records themselves go to Spark
            query = (bench.spark.readStream.format("cdckit_postgres_changes")
                     .options(**to_spark_options(source)).load().writeStream.format("noop")
                     .option("checkpointLocation", str(bench.base / "noop-checkpoint"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
        progress = [dict(p.durationMs, rows=p.numInputRows) for p in query.recentProgress if p.numInputRows]
        return (report.events if sink else sum(int(p["rows"]) for p in progress),
                sum(p["triggerExecution"] for p in progress) / 1000, progress)

    count, seconds, _ = stream_seconds(noop, sink=False)
    stage("spark", f"+ Spark reads the micro-batches ({os.cpu_count()} cores), nothing written", count, seconds)
    count, seconds, progress = stream_seconds(files, sink=True)
    stage("sink", "+ the files sink writes the records (each task its own, instead of handing them to Spark)", count,
          seconds)
    per_batch = batch_phases(progress)
    bench.drop_slots()
    return {"changes": changes, "batches": batches, "partitions_per_batch": reader.parts, "stages": stages,
            "files_sink_batch_ms": per_batch}


def tree_cpu() -> float:
    """CPU seconds (user and system) this process and every process under it (Spark's JVM, its Python workers)
    have used so far, the Kafka broker's left out."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with suppress(psutil.Error):
            if "kafka.Kafka" not in child.cmdline():
                total += sum(child.cpu_times()[:2])
    return total


def kafka_timed(bench: Bench, bootstrap: str, topic: str, expected: int, run: Callable[[], Any]) -> dict[str, Any]:
    """Run a cdckit job (``run``) into ``topic`` (made first, 4 partitions, as Debezium's runs make theirs),
    counted as Debezium's runs are: from the broker's end offsets, sampled every 20 ms from the job's start until
    they hold ``expected`` records more. Gives records, seconds (to the last record), startup_s (to the first),
    steady_s and steady_records_per_s (first to last record), records_per_s, cpu_s (the whole process tree's)
    and cpu_us_per_record."""
    from cdckit_lab.debezium.topics import EndOffsets, ensure_topic

    ensure_topic(bootstrap, topic, 4)
    offsets = EndOffsets(bootstrap, topic)
    baseline = offsets.total()
    seen: dict[str, float] = {}
    done = threading.Event()

    def sample() -> None:
        while True:
            count = offsets.total() - baseline
            now = time.perf_counter()
            if count > 0:
                seen.setdefault("first", now)
            if count >= expected:
                seen["last"] = now
                return
            if done.is_set() and now - seen.get("done", now) > 30:
                return
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    cpu = tree_cpu()
    started = time.perf_counter()
    sampler.start()
    try:
        run()
    finally:
        seen["done"] = time.perf_counter()
        done.set()
        sampler.join()
    cpu = tree_cpu() - cpu
    records = offsets.total() - baseline
    offsets.close()
    if records < expected or "last" not in seen:
        raise RuntimeError(f"cdckit wrote {records:,} records to {topic}, {expected:,} expected")
    seconds, startup = seen["last"] - started, seen["first"] - started
    return {"records": records, "seconds": seconds, "records_per_s": records / seconds, "startup_s": startup,
            "steady_s": seconds - startup, "steady_records_per_s": records / max(1e-9, seconds - startup),
            "cpu_s": cpu, "cpu_us_per_record": cpu / records * 1e6}


def kafka_replay(bootstrap: str, topic: str) -> tuple[int, dict[int, tuple[str, str | None, Any]]]:
    """Every record of a bench topic read back from the broker (an independent consumer), applied by key in
    order: how many records, and each row's (customer, note, amount) as a consumer would rebuild the table."""
    from decimal import Decimal

    import orjson
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{os.getpid()}",
                         "enable.auto.commit": False, "log_level": 3})
    partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    remaining = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    state: dict[int, tuple[str, str | None, Any]] = {}
    count = 0
    while count < remaining:
        messages = consumer.consume(20_000, timeout=10)
        if not messages:
            raise RuntimeError(f"{topic}: {count:,} of {remaining:,} records read back")
        for message in messages:
            if message.error():
                continue
            count += 1
            key = orjson.loads(message.key())["payload"]["id"]
            value = message.value()
            if value is None:
                continue
            payload = orjson.loads(value)["payload"]
            after = payload["after"]
            if payload["op"] == "d" or after is None:
                state.pop(key, None)
                continue
            unscaled = int.from_bytes(base64.b64decode(after["amount"]), "big", signed=True)
            state[key] = (after["customer"], after["note"], Decimal(unscaled).scaleb(-2))
    consumer.close()
    return count, state


def source_rows(bench: Bench, upto: int) -> dict[int, tuple[str, str | None, Any]]:
    from decimal import Decimal

    conn = psycopg2.connect(bench.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, customer, note, amount::text FROM public.orders WHERE id <= %s", (upto,))
            return {row[0]: (row[1], row[2], Decimal(row[3])) for row in cur}
    finally:
        conn.close()


# Each side by side: cdckit in a release's format against that release of Debezium. 3.6.0 runs as Debezium Server;
# 2.5.2, whose server Maven Central does not hold, as its embedded engine with Debezium Server's Kafka sink
# behaviour (the compatibility tests' runtime).
PAIRS = {"3.6": {"version": "3.6.0.Final", "runtime": "server"},
         "2.5": {"version": "2.5.2.Final", "runtime": "embedded"}}


def measure_debezium(bench: Bench, rows: int, changes: int, repeats: int = 1) -> dict[str, Any]:
    """Debezium's PostgreSQL connector and cdckit side by side on the same table, the same changes and the same
    Kafka broker, each at its defaults: cdckit in 3.6's format against Debezium Server 3.6.0, and in 2.5's against
    Debezium 2.5.2, on the snapshot of ``rows`` rows, then a backlog of ``changes`` updates (every slot exists
    before the updates; each capture then runs alone until the last record is in Kafka). Both sides are counted
    from the broker's end offsets. Each pair runs ``repeats`` times, in turn; Debezium Server 3.6.0 runs once more
    with its own producer defaults and once with ``linger.ms=0`` (controls). cdckit's 3.6 records are read back
    from the broker and replayed against the table."""
    from cdckit_lab.debezium import create_slot, run_debezium
    from cdckit_lab.kafka_broker import KafkaBroker

    bench.table("public.orders", rows)
    properties = bench.pg.connector_properties("postgres")
    work = bench.base / "debezium"
    broker = KafkaBroker(bench.base.parent / "kafka-debezium").start()
    try:
        bootstrap = broker.bootstrap_servers
        kafka = {"cdckit.sink": "kafka", "kafka.bootstrap.servers": bootstrap,
                 "topic.creation.default.partitions": "4"}
        # Debezium's producer gets cdckit's throughput settings (batching, lz4): both sides send alike; the
        # controls give it its own defaults, and linger.ms=0
        from cdckit.spark.sinks.kafka import KAFKA_COMPRESSION_DEFAULT, THROUGHPUT_DEFAULTS

        producer = {key[len("kafka."):]: value for key, value in {**THROUGHPUT_DEFAULTS,
                                                                   **KAFKA_COMPRESSION_DEFAULT}.items()}
        debeziums: dict[str, dict[str, Any]] = {
            **{fmt: {**pair, "producer": producer} for fmt, pair in PAIRS.items()},
            "3.6 own producer": {**PAIRS["3.6"], "producer": None},
            "3.6 linger.ms=0": {**PAIRS["3.6"], "producer": {**producer, "linger.ms": "0"}}}
        # the pairs in turn, which goes first alternating from run to run; the controls after them
        plan = [(side, run) for run in range(repeats) for side in (list(PAIRS) if run % 2 == 0 else list(PAIRS)[::-1])]
        plan += [(side, 0) for side in debeziums if side not in PAIRS]
        counter = iter(range(10_000))

        def names(step: str) -> dict[str, str]:  # each run its own slot, publication and topic
            name = f"{step}{next(counter)}"
            return {"topic": f"dbz{name}.public.orders", "topic_prefix": f"dbz{name}", "slot_name": f"dbz_{name}",
                    "publication_name": f"dbz_{name}"}

        def cdckit(fmt: str, step: str, **extra: str) -> tuple[Config, str]:
            prefix = f"ck{step}{next(counter)}"
            format_setting = {"cdckit.debezium.format": fmt} if fmt != "2.5" else {}
            return (bench.config("public\\.orders", **kafka, **format_setting, **extra, **{"topic.prefix": prefix}),
                    f"{prefix}.public.orders")

        def debezium(side: str, step: str, named: dict[str, str], expected: int) -> dict[str, Any]:
            setting = debeziums[side]
            return run_debezium(properties, bootstrap, work / named["slot_name"],
                                snapshot_mode="initial" if step == "snapshot" else "no_data",
                                expected_records=expected, table_include="public.orders", partitions=4,
                                version=setting["version"], runtime=setting["runtime"],
                                producer=setting["producer"], **named)

        result: dict[str, Any] = {"rows": rows, "changes": changes, "producer": producer, "repeats": repeats}
        # cdckit's Kafka path warmed up in both formats first (the session's first Kafka jobs start its producer
        # and JIT-compile it), as the warm-up step does for the files sink
        bench.table("public.kafka_warmup", WARM_UP_CHANGES)
        for fmt in PAIRS:
            warm_config = bench.config("public\\.kafka_warmup", **kafka, **{"topic.prefix": f"warm{fmt[0]}",
                                                                          "cdckit.debezium.format": fmt})
            run_snapshot(bench.spark, warm_config)
        bench.sql("DROP TABLE public.kafka_warmup")
        snapshots: dict[str, list[dict[str, Any]]] = {}
        checked: dict[str, Any] = {}
        for side, _run in plan:
            snapshots.setdefault(f"debezium {side}", []).append(debezium(side, "snapshot", names("snapshot"), rows))
            if side in PAIRS:
                config, topic = cdckit(side, "snapshot")
                snapshots.setdefault(f"cdckit {side}", []).append(
                    kafka_timed(bench, bootstrap, topic, rows, lambda config=config: run_snapshot(bench.spark, config)))
                checked["snapshot"] = topic

        # cdckit's snapshot read back from the broker against the table, before the updates change it
        records, state = kafka_replay(bootstrap, checked["snapshot"])
        result["snapshot_check"] = {"topic": checked["snapshot"], "records": records, "expected_records": rows,
                                    "keys": len(state), "matches_source": state == source_rows(bench, rows)}
        del state
        slots = {(side, run): names("stream") for side, run in plan}
        for (side, _run), named in slots.items():
            create_slot(properties, bootstrap, work / named["slot_name"], table_include="public.orders",
                        partitions=4, version=debeziums[side]["version"], **named)
        ours = {(side, run): cdckit(side, "stream", **{"snapshot.mode": "no_data"}) for side, run in plan
                if side in PAIRS}
        for config, _topic in ours.values():
            run_snapshot(bench.spark, config, data=False)
        bench.update_rows("public.orders", changes)
        streams: dict[str, list[dict[str, Any]]] = {}
        for side, run in plan:
            streams.setdefault(f"debezium {side}", []).append(debezium(side, "stream", slots[(side, run)], changes))
            if (side, run) in ours:
                config, topic = ours[(side, run)]
                streams.setdefault(f"cdckit {side}", []).append(
                    kafka_timed(bench, bootstrap, topic, changes,
                                lambda config=config: run_stream(bench.spark, config)))
                if side == "3.6":
                    checked["stream"] = topic
        records, state = kafka_replay(bootstrap, checked["stream"])
        result["stream_check"] = {"topic": checked["stream"], "records": records, "expected_records": changes,
                                  "keys": len(state), "matches_source": state == source_rows(bench, changes)}
    finally:
        broker.stop()
    bench.drop_slots()

    def medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        return {side: median_run(each, "steady_records_per_s") for side, each in runs.items()}

    result["snapshot"], result["stream"] = medians(snapshots), medians(streams)
    return result


def measure_delta(rows: int, changes: int) -> dict[str, Any]:
    """The Delta sink (``bench/delta.py``), in the virtualenv of the Spark that has a Delta build (the oldest
    supported one, ``make bench`` builds it), with the files sink measured beside it in that run."""
    import subprocess
    import sys

    import cdckit.versions as versions

    python = BENCH.parent / f".venv-spark-{versions.OLDEST_SPARK}" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: `make bench` builds it (or make .venv-spark-{versions.OLDEST_SPARK}"
                         f"/.installed)")
    env = {**os.environ, "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
    done = subprocess.run([str(python), str(BENCH / "delta.py"), "--rows", str(rows), "--changes", str(changes)],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f"bench/delta.py failed ({done.returncode})")
    return json.loads(done.stdout[done.stdout.index("{"):])  # type: ignore[no-any-return]


def delta_section(result: dict[str, Any] | None) -> list[str]:
    if not result:
        return []
    snap, stream = result["snapshot"], result["stream"]
    build = result.get("delta") or ["?", "?"]
    lines = ["", "## Delta sink", "",
             f"`bench/delta.py`, in its own process on Spark {result['spark']} with {build[0]} {build[1]} (Delta's "
             f"build for that Spark), the files sink measured in the same run on the same data. The snapshot reads "
             f"{snap['rows']:,} rows; the stream a backlog of {stream['changes']:,} updates in 1000-row "
             f"transactions, batches of {stream['max_batch_size']:,}.", "",
             "| target | snapshot rows/s | / files sink | stream events/s | / files sink |", "|---|---|---|---|---|"]
    names = {"files": "files sink", "delta_changes": "Delta change table (`cdckit.delta.mode=changes`)",
             "delta_state": "Delta state table, MERGE (`state`)", "delta_both": "both tables (`both`, the default)"}
    for key, label in names.items():
        s, t = snap[key], stream[key]
        lines.append(f"| {label} | {s['rows_per_s']:,.0f} | {s.get('ratio_to_files', 1.0):.2f} | "
                     f"{t['events_per_s']:,.0f} ({t['batches']} batches) | {t.get('ratio_to_files', 1.0):.2f} |")
    return lines


def measure_scaling(bench: Bench, params: dict[str, Any]) -> dict[str, Any]:
    rows_curve = []
    for rows in params["scaling_rows"]:
        bench.table("public.orders", rows)
        rows_curve.append({"rows": rows, **bench.snapshot("public\\.orders")})
        bench.drop_slots()
    tables_curve = []
    tables_stream: dict[str, Any] = {}
    for count in params["tables"]:
        per_table = params["tables_total_rows"] // count
        bench.sql("DROP SCHEMA IF EXISTS many CASCADE", "CREATE SCHEMA many")
        for i in range(count):
            bench.table(f"many.t{i:04d}", per_table)
        tables_curve.append({"tables": count, **bench.snapshot("many\\..*")})
        if count == max(params["tables"]):
            # a stream over every table at the defaults: a transaction per table updating half its rows
            config = bench.config("many\\..*", **{"snapshot.mode": "no_data"})
            run_snapshot(bench.spark, config, data=False)
            bench.sql(*(f"UPDATE many.t{i:04d} SET note = 'changed', amount = amount + 1 WHERE id <= "
                        f"{per_table // 2}" for i in range(count)))
            tables_stream = {"tables": count, **bench.stream(config)}
        bench.drop_slots()
    bench.sql("DROP SCHEMA IF EXISTS many CASCADE")
    bench.table("public.orders", params["tables_total_rows"])
    partitions_curve = []
    for partitions in params["partitions"]:
        chunk = -(-params["tables_total_rows"] // partitions)
        partitions_curve.append({"partitions": partitions, **bench.snapshot("public\\.orders", chunk)})
        bench.drop_slots()
    return {"rows": rows_curve, "tables": tables_curve, "partitions": partitions_curve, "tables_stream": tables_stream}


def many_tables_section(results: dict[str, Any]) -> list[str]:
    """Where the time goes with many tables: the snapshot's time per table beyond one table's, and the stream's
    batches by Spark's phases against the one-table stream's at the defaults."""
    tables = {point["tables"]: point for point in results["scaling"].get("tables", [])}
    many = results["scaling"].get("tables_stream") or {}
    one = (results.get("stream") or {}).get("cdckit") or {}
    if len(tables) < 2 and not many:
        return []
    lines = ["", "### Where the time goes with many tables", ""]
    if len(tables) >= 2:
        fewest, most = tables[min(tables)], tables[max(tables)]
        extra = (most["seconds"] - fewest["seconds"]) / (most["tables"] - fewest["tables"]) * 1000
        lines.append(f"- snapshot: {most['tables']:,} tables took {most['seconds'] - fewest['seconds']:+.1f} s against "
                     f"{fewest['tables']:,} table(s) of the same total rows, {extra:.1f} ms per table more: the "
                     f"catalog, the partitions' planning, and a file and a folder sync per table in the files sink.")
    if many.get("batch_ms") and one.get("batch_ms"):
        m, o = many["batch_ms"], one["batch_ms"]
        per_table = ((many["seconds"] - many["events"] / one["events_per_s"]) / many["tables"] * 1000
                     if one.get("events_per_s") else 0.0)
        lines.append(f"- stream: over {many['tables']:,} tables a batch took {m['triggerExecution']:,.0f} ms on "
                     f"average ({many['batches']} batches: {phases_text(m)}); over one table "
                     f"{o['triggerExecution']:,.0f} ms ({one['batches']} batches: {phases_text(o)}). The same events "
                     f"took {per_table:.1f} ms per table more, spent where the phases grew.")
    return lines


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "platform": platform.platform(), "python": platform.python_version(),
            "processor": platform.processor() or platform.machine()}


def plots(results: dict[str, Any], folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    made = []
    scaling = results["scaling"]
    for key, label in (("rows", "rows"), ("tables", "tables (same total rows)"), ("partitions", "Spark partitions")):
        curve = scaling[key]
        figure, axis = plt.subplots(figsize=(5, 3.2))
        axis.plot([p[key] for p in curve], [p["seconds"] for p in curve], marker="o")
        axis.set_xlabel(label)
        axis.set_ylabel("snapshot seconds")
        if key == "rows":
            axis.set_xscale("log")
            axis.set_yscale("log")
        axis.grid(True, alpha=0.3)
        figure.tight_layout()
        name = f"scaling-{key}.png"
        figure.savefig(folder / name, dpi=110)
        plt.close(figure)
        made.append(name)
    figure, axis = plt.subplots(figsize=(5, 3.2))
    for trigger in ("processing-time", "available-now"):
        points = [p for p in results["latency"] if p["trigger"] == trigger and p.get("events")]
        axis.plot([p["rate"] for p in points], [p["p95_ms"] for p in points], marker="o", label=f"{trigger} p95")
        axis.plot([p["rate"] for p in points], [p["p50_ms"] for p in points], marker=".", linestyle="--",
                  label=f"{trigger} p50")
    axis.set_xscale("log")
    axis.set_xlabel("commits per second")
    axis.set_ylabel("commit to sink, ms")
    axis.legend(fontsize=7)
    axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(folder / "latency.png", dpi=110)
    plt.close(figure)
    made.append("latency.png")
    return made


def goals_section(results: dict[str, Any]) -> list[str]:
    """The goals, each against this run's figures: met or not."""
    snap, stream, dbz = results["snapshot"], results["stream"], results.get("debezium")
    rows: list[tuple[str, str, bool]] = []
    if dbz and "cdckit 3.6" in dbz["stream"]:
        ours = dbz["stream"]["cdckit 3.6"]
        side, best = best_debezium(dbz, "stream")
        main = dbz["stream"]["debezium 3.6"]
        ratio, total = (ours["steady_records_per_s"] / best["steady_records_per_s"],
                        ours["records_per_s"] / main["records_per_s"])
        rows.append(("defaults: the backlog into Kafka at 3x Debezium Server 3.6.0's records/s or more (cdckit in "
                     "3.6's format; steady rates, against Debezium's fastest configuration)",
                     f"{ratio:.2f}x ({ours['steady_records_per_s']:,.0f} against {best['steady_records_per_s']:,.0f}, "
                     f"{side}; totals {total:.2f}x)", ratio >= 3.0))
    events = stream["cdckit"]["events_per_s"]
    rows.append(("defaults: the backlog into the files sink at 100,000 events/s or more",
                 f"{events:,.0f} events/s ({stream['cdckit']['batches']} batches)", events >= 100_000))
    default_trigger = [p for p in results["latency"] if p.get("events") and p.get("interval") == "default"
                       and p["rate"] >= 5000]
    if default_trigger:
        top = default_trigger[0]
        rows.append(("defaults: latency p99 at or under 500 ms at 5,000 commits/s (processing-time trigger at its "
                     "default interval: back to back, each waiting in the source up to poll.interval.ms, 500)",
                     f"p99 {top['p99_ms']:,.0f} ms", top["p99_ms"] <= 500))
    rate, copy = snap["cdckit"]["rows_per_s"], snap["copy_1"]["rows_per_s"]
    rows.append(("tuned: snapshot within 5x of COPY (1 connection)", f"{rate:,.0f} rows/s, {copy / rate:.2f}x",
                 copy / rate <= 5))
    if "large_batches" in stream:
        large, raw = stream["large_batches"]["events_per_s"], stream["raw"]["messages_per_s"]
        rows.append((f"tuned: stream within 5x of raw decoding (`max.batch.size` "
                     f"{stream['large_batches']['max_batch_size']:,})", f"{large:,.0f} events/s, {raw / large:.2f}x",
                     raw / large <= 5))
    if dbz and "cdckit 3.6" in dbz["stream"] and "cpu_us_per_record" in dbz["stream"]["cdckit 3.6"]:
        for step in ("snapshot", "stream"):
            new, old = dbz[step]["cdckit 3.6"]["cpu_us_per_record"], dbz[step]["cdckit 2.5"]["cpu_us_per_record"]
            rows.append((f"3.6's records cost no more than 1.2x the CPU per record of 2.5's ({step} into Kafka, whole "
                         f"process tree)", f"{new / old:.2f}x ({new:.1f} against {old:.1f} µs)", new / old <= 1.2))
        for step in ("snapshot", "stream"):
            check = dbz.get(f"{step}_check")
            if check:
                rows.append((f"cdckit's output read back from the broker matches the source ({step}: records per "
                             f"topic, rows replayed by key)", f"{check['records']:,} records, "
                             f"{'rows match' if check['matches_source'] else 'rows differ'}",
                             check["matches_source"] and check["records"] == check["expected_records"]))
    small, big = results["memory"]
    growth = big["memory"]["driver_jvm_mb"] / max(1.0, small["memory"]["driver_jvm_mb"])
    workers = big["memory"]["workers_mb"] / max(1.0, small["memory"]["workers_mb"])
    rows.append((f"memory flat: {small['rows']:,} to {big['rows']:,} rows (peak RSS, driver JVM and Python workers)",
                 f"{growth:.2f}x and {workers:.2f}x", growth <= 1.15 and workers <= 1.25))
    tables = results["scaling"]["tables"]
    one, most = tables[0], tables[-1]
    rows.append((f"many tables: {most['tables']:,} tables snapshot at 0.8x or more the rows/s of one table "
                 f"(same total rows)", f"{most['rows_per_s'] / one['rows_per_s']:.2f}x ({most['rows_per_s']:,.0f} "
                 f"against {one['rows_per_s']:,.0f})", most["rows_per_s"] >= 0.8 * one["rows_per_s"]))
    many_stream = results["scaling"].get("tables_stream")
    if many_stream:
        rows.append((f"many tables: a stream over {many_stream['tables']:,} tables at 0.8x or more the events/s of "
                     f"one table's (defaults)", f"{many_stream['events_per_s'] / events:.2f}x "
                     f"({many_stream['events_per_s']:,.0f} against {events:,.0f})",
                     many_stream["events_per_s"] >= 0.8 * events))
    lines = ["", "## Goals", "", "| goal | this run | met |", "|---|---|---|"]
    lines += [f"| {goal} | {figure} | {'yes' if met else 'no'} |" for goal, figure, met in rows]
    return lines


def before_section(before: dict[str, Any] | None) -> list[str]:
    """The stage tables of an earlier run (``--before``), for the before-and-after comparison."""
    if not before:
        return []
    lines = ["", f"## Before: the run of {before['started']}", "",
             "The same stages in the earlier run this one is compared with (its own machine and data).", ""]
    for line in stages_section(before.get("stages")) + stream_stages_section(before.get("stream_stages")):
        if line.startswith("## Where the time goes") or (not line and not lines[-1]):
            continue
        lines.append("#" + line if line.startswith("### ") else line)
    return lines


def each_run(run: dict[str, Any]) -> str:
    """``; median of N runs: a, b, c`` (each run's rate, in the order they ran) for a median run, else nothing."""
    rates = run.get("runs", [])
    return f"; median of {len(rates)} runs: " + ", ".join(f"{rate:,.0f}" for rate in rates) if len(rates) > 1 else ""


def report(results: dict[str, Any], images: list[str], before: dict[str, Any] | None = None) -> str:
    snap, stream, kafka, profile = results["snapshot"], results["stream"], results["kafka"], results["profile"]
    m = results["machine"]
    small, big = results["memory"]

    def ratio(limit: float, ours: float) -> str:
        value = limit / ours
        return f"{value:.2f}x" + ("" if value <= 2 else " (over 2x)")

    repeats = results["params"].get("repeats", 1)
    figures = (f"The goals' figures (the snapshot and the stream into the files sink, and both sides of the side by "
               f"side with Debezium Server) are each the median of {repeats} runs, whose rates are given beside it "
               f"in the order they ran; the other figures are one run's" if repeats > 1 else "Figures are one run's")

    lines = [
        "# cdckit benchmarks", "",
        f"Run `{results['mode']}` on {results['started']}: {m['cpus']} cores, {m['memory_gb']} GB, {m['platform']}, "
        f"Python {m['python']}; embedded PostgreSQL 18, Spark local[*]. Regenerate with `make bench` "
        f"(`make bench-quick` for the short run). {figures}; each ratio is limit / cdckit, measured in "
        f"the same run on the same data (goal: within 2x). A {WARM_UP_CHANGES:,}-row snapshot and a stream of as "
        f"many updates (in batches of {WARM_UP_BATCH:,}) run first, so that the figures measure throughput, not the "
        f"session's first jobs and JIT compilation (they took "
        f"{results.get('warmup', {}).get('seconds', float('nan')):.1f} s).", "",
        "| what | cdckit | limit measured in the same run | limit / cdckit |", "|---|---|---|---|",
        f"| snapshot, {snap['rows']:,} rows of 8 mixed columns | {snap['cdckit']['rows_per_s']:,.0f} rows/s, "
        f"{snap['cdckit']['mb_per_s']:.1f} MB/s{each_run(snap['cdckit'])} | COPY TO STDOUT, 1 connection: "
        f"{snap['copy_1']['rows_per_s']:,.0f} rows/s ({snap['copy_1']['mb_per_s']:.1f} MB/s) | "
        f"{ratio(snap['copy_1']['rows_per_s'], snap['cdckit']['rows_per_s'])} |",
        f"| | | COPY TO STDOUT, {m['cpus']} connections: {snap['copy_n']['rows_per_s']:,.0f} rows/s | "
        f"{ratio(snap['copy_n']['rows_per_s'], snap['cdckit']['rows_per_s'])} |",
        f"| stream, {stream['changes']:,} updates in 1000-row transactions, defaults | "
        f"{stream['cdckit']['events_per_s']:,.0f} events/s ({stream['cdckit']['batches']} batches, query start "
        f"included{each_run(stream['cdckit'])}) | pgoutput decoding fetched by one client: "
        f"{stream['raw']['messages_per_s']:,.0f} messages/s | "
        f"{ratio(stream['raw']['messages_per_s'], stream['cdckit']['events_per_s'])} |",
        *([f"| the same backlog, `max.batch.size` {stream['large_batches']['max_batch_size']:,} (tuned) | "
           f"{stream['large_batches']['events_per_s']:,.0f} events/s ({stream['large_batches']['batches']} batches) "
           f"| the same | {ratio(stream['raw']['messages_per_s'], stream['large_batches']['events_per_s'])} |"]
          if "large_batches" in stream else []),
        f"| Kafka sink (snapshot, real broker) | {kafka['kafka']['rows_per_s']:,.0f} rows/s | files sink in the same "
        f"run: {kafka['files']['rows_per_s']:,.0f} rows/s | "
        f"{kafka['files']['rows_per_s'] / kafka['kafka']['rows_per_s']:.2f}x |",
        *limits_for_debezium(results.get("debezium"), snap, stream),
        *goals_section(results),
        "", "## Latency, commit to the files sink", "",
        "| trigger | commits/s | events | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|---|---|"]
    for point in results["latency"]:
        if point.get("events"):
            trigger = point["trigger"] + (f", {point['interval']}" if point.get("interval") else "")
            lines.append(f"| {trigger} | {point['rate']} | {point['events']} | {point['p50_ms']:.0f} | "
                         f"{point['p95_ms']:.0f} | {point['p99_ms']:.0f} |")
    lines += ["", "processing-time polls every 200 ms (`cdckit.trigger.interval`), or at its default interval "
              "runs micro-batches back to back, each that finds nothing waiting in the source up to poll.interval.ms "
              "(500 ms) and starting as soon as a change is committed (decision 0041; runs before 2026-11-29 04:00 "
              "polled every 500 ms instead); the writes start once the query runs (runs before "
              "2026-11-25 21:00 started them with the query, so their first second of events also waited for the "
              "query's start); available-now runs are started back to back, so their latency includes starting a "
              "query.", "",
              "## Memory (peak RSS during the snapshot)", "",
              "| rows | driver JVM MB | driver Python MB | Python workers MB |", "|---|---|---|---|"]
    for point in (small, big):
        mem = point["memory"]
        lines.append(f"| {point['rows']:,} | {mem['driver_jvm_mb']:.0f} | {mem['driver_python_mb']:.0f} | "
                     f"{mem['workers_mb']:.0f} |")
    growth = big["memory"]["driver_jvm_mb"] / max(1.0, small["memory"]["driver_jvm_mb"])
    lines += ["", f"{big['rows'] / small['rows']:.0f}x the rows took {growth:.2f}x the driver JVM memory: memory "
              f"follows the partition size, not the table size.", "", "## Scaling", ""]
    for key, label in (("rows", "rows"), ("tables", "tables"), ("partitions", "partitions")):
        lines.append(f"- {label}: " + ", ".join(f"{p[key]:,} -> {p['seconds']:.1f} s ({p['rows_per_s']:,.0f} rows/s)"
                                                 for p in results["scaling"][key]))
    many = results["scaling"].get("tables_stream")
    if many:
        lines.append(f"- a stream over {many['tables']:,} tables (a transaction per table updating half its rows), "
                     f"defaults: {many['events']:,} events in {many['seconds']:.1f} s, {many['events_per_s']:,.0f} "
                     f"events/s, {many['batches']} batches")
    lines += many_tables_section(results)
    lines += debezium_section(results.get("debezium"))
    lines += stages_section(results.get("stages"))
    lines += ["", f"The per-event path alone (no Spark, one core): {profile['events_per_s_one_core']:,.0f} events/s "
              f"formatting update events of the bench table. Largest cumulative shares under the profiler:", "",
              "| function | share |", "|---|---|"]
    for entry in profile["top_cumulative"][:8]:
        lines.append(f"| `{entry['function']}` | {entry['share']:.0%} |")
    lines += stream_stages_section(results.get("stream_stages"))
    lines += delta_section(results.get("delta"))
    lines += before_section(before)
    lines += ["", "## Plots", ""] + [f"![{name}](plots/{name})" for name in images]
    return "\n".join(lines) + "\n"


def limits_for_debezium(result: dict[str, Any] | None, snap: dict[str, Any], stream: dict[str, Any]) -> list[str]:
    """Debezium's own connector against the same limits, for scale: rows of the summary table."""
    if not result or "debezium 3.6" not in result["snapshot"]:
        return []
    dbz_snapshot, dbz_stream = result["snapshot"]["debezium 3.6"], result["stream"]["debezium 3.6"]
    return [
        f"| for scale: Debezium Server's snapshot, {result['rows']:,} rows (steady rate, JVM start left out) | "
        f"{dbz_snapshot['steady_records_per_s']:,.0f} rows/s | COPY TO STDOUT, 1 connection | "
        f"{snap['copy_1']['rows_per_s'] / dbz_snapshot['steady_records_per_s']:.2f}x |",
        f"| for scale: Debezium Server's stream, {result['changes']:,} updates (steady rate) | "
        f"{dbz_stream['steady_records_per_s']:,.0f} events/s | pgoutput decoding fetched by one client | "
        f"{stream['raw']['messages_per_s'] / dbz_stream['steady_records_per_s']:.2f}x |",
    ]


def spread(run: dict[str, Any], rate: str = "steady_records_per_s") -> str:
    """A median run's rate with the lowest and highest of all its runs: ``21,671 (21,469 to 22,589, 3 runs)``."""
    rates = run.get("runs") or [run[rate]]
    low, high = min(rates), max(rates)
    return (f"{run[rate]:,.0f}" + (f" ({low:,.0f} to {high:,.0f}, {len(rates)} runs)" if len(rates) > 1 else ""))


def best_debezium(result: dict[str, Any], step: str) -> tuple[str, dict[str, Any]]:
    """Debezium Server 3.6's fastest configuration (steady rate) of this step: the main run or a control."""
    sides = [side for side in result[step] if side.startswith("debezium 3.6")]
    side = max(sides, key=lambda each: result[step][each]["steady_records_per_s"])
    return side, result[step][side]


def debezium_section(result: dict[str, Any] | None) -> list[str]:
    if not result:
        return []
    if "debezium 3.6" not in result["snapshot"]:  # runs before 2026-11-29 compared one pair only
        return ["", "## Debezium's PostgreSQL connector side by side", "",
                "(this results file holds the earlier form of the side by side; see its JSON)"]
    producer = result.get("producer") or {}
    producer_note = ", ".join(f"`{key}={value}`" for key, value in producer.items())
    server = result["snapshot"]["debezium 3.6"]
    lines = ["", "## Debezium's PostgreSQL connector side by side", "",
             f"Each side at its defaults, on the same table and the same broker (4 partitions): cdckit (Kafka sink, "
             f"no performance setting) in 3.6's format (`cdckit.debezium.format=3.6`) against Debezium Server "
             f"3.6.0.Final (Java {server.get('java', '?')}, pgoutput, its Kafka sink, JSON with schemas), and in 2.5's "
             f"format (the default) against Debezium 2.5.2.Final (its embedded engine with Debezium Server's Kafka "
             f"sink behaviour; Maven Central holds no 2.5.2 server). Debezium's producer gets cdckit's producer "
             f"defaults ({producer_note}); the controls run Debezium Server 3.6.0 with its own producer defaults, "
             f"and with `linger.ms=0`. Both sides are counted from the broker's end offsets, sampled every 20 ms. "
             f"The steady rate is the records over the time from the first record in Kafka to the last: each side's "
             f"start (Debezium's JVM and connector, cdckit's job in a running Spark session) left out; the total "
             f"runs from the process's or the job's start. Each figure is the median run by steady rate, with the "
             f"lowest and highest of the runs; the ratios are of steady rates, totals beside them.", "",
             "| what | side | records/s, steady | records/s, total | first record after | CPU µs per record |",
             "|---|---|---|---|---|---|"]
    for step, label in (("snapshot", f"snapshot, {result['rows']:,} rows"),
                        ("stream", f"stream, backlog of {result['changes']:,} updates")):
        for side, run in result[step].items():
            cpu = f"{run['cpu_us_per_record']:.1f}" if "cpu_us_per_record" in run else ""
            lines.append(f"| {label} | {side} | {spread(run)} | {run['records_per_s']:,.0f} | "
                         f"{run['startup_s']:.1f} s | {cpu} |")
    lines += ["", "| what | pair | cdckit / Debezium, steady | cdckit / Debezium, total |", "|---|---|---|---|"]
    for step in ("snapshot", "stream"):
        for fmt in PAIRS:
            ours, theirs = result[step].get(f"cdckit {fmt}"), result[step].get(f"debezium {fmt}")
            if ours and theirs:
                lines.append(f"| {step} | cdckit {fmt} / Debezium {PAIRS[fmt]['version']} | "
                             f"{ours['steady_records_per_s'] / theirs['steady_records_per_s']:.2f}x | "
                             f"{ours['records_per_s'] / theirs['records_per_s']:.2f}x |")
        side, best = best_debezium(result, step)
        ours = result[step]["cdckit 3.6"]
        lines.append(f"| {step} | cdckit 3.6 / Debezium's fastest 3.6.0 configuration ({side}) | "
                     f"{ours['steady_records_per_s'] / best['steady_records_per_s']:.2f}x | "
                     f"{ours['records_per_s'] / best['records_per_s']:.2f}x |")
    for step in ("snapshot", "stream"):
        check = result.get(f"{step}_check")
        if check:
            lines.append("")
            lines.append(f"cdckit's {step} topic `{check['topic']}` read back from the broker: {check['records']:,} "
                         f"records ({check['expected_records']:,} expected), {check['keys']:,} keys; replayed by key, "
                         f"the rows {'match' if check['matches_source'] else 'DO NOT match'} the table's.")
    return lines


def stages_section(result: dict[str, Any] | None) -> list[str]:
    lines = ["", "## Where the time goes", ""]
    if not result:
        return lines
    lines += ["### The snapshot", "",
              f"A snapshot of {result['rows']:,} rows under one exported snapshot, read by ever more of cdckit's "
              f"path; each row's extra cost is that stage's (wall-clock microseconds per row).", "",
              "| stage | rows/s | µs per row | added by this stage |", "|---|---|---|---|"]
    return lines + _stage_rows(result["stages"], "rows_per_s")


def _stage_rows(stages: list[dict[str, Any]], rate: str) -> list[str]:
    """Table rows of a stage-by-stage measurement: each stage's rate, cost per item and the cost it adds."""
    lines = []
    previous = 0.0
    costs: dict[str, float] = {}
    for stage in stages:
        micros = 1e6 / stage[rate]
        base = costs.get(stage.get("after", ""), previous)  # a stage beside another adds to what that one adds to
        lines.append(f"| {stage['what']} | {stage[rate]:,.0f} | {micros:.1f} | "
                     f"{'' if not base else f'{micros - base:+.1f}'} |")
        costs[stage["stage"]] = micros
        if not stage["stage"].endswith("_reference"):  # a reference stands beside the stage after it
            previous = micros
    return lines


def stream_stages_section(result: dict[str, Any] | None) -> list[str]:
    if not result:
        return []
    lines = ["", "### The stream", "",
             f"A backlog of {result['changes']:,} updates in {result['batches']} batches of up to 50,000 changes "
             f"(each cut into up to {result['partitions_per_batch']} partitions), read by ever more of cdckit's "
             f"path, each stage from its own slot (wall-clock microseconds per event; the Spark stages count the "
             f"micro-batches' own time, not the query's start).", "",
             "| stage | events/s | µs per event | added by this stage |", "|---|---|---|---|"]
    lines += _stage_rows(result["stages"], "events_per_s")
    ms = result["files_sink_batch_ms"]
    lines += ["", f"A files-sink micro-batch took {ms['triggerExecution']:,.0f} ms on average: "
              f"{ms['latestOffset']:,.0f} ms planning it (latestOffset), {ms['walCommit']:,.0f} ms writing the "
              f"offset log, {ms['queryPlanning']:,.0f} ms query planning, {ms['addBatch']:,.0f} ms reading and "
              f"writing the records, {ms['commitOffsets']:,.0f} ms writing the commit log."]
    return lines


def compile_bytecode() -> None:
    """cdckit's modules compiled to bytecode, as installing its wheel does (``pip install``, the job image):
    Spark's streaming source starts a Python process of its own for each query, whose imports would otherwise
    compile cdckit's source again each time where bytecode is not written (``PYTHONDONTWRITEBYTECODE``)."""
    import compileall

    import cdckit

    compileall.compile_dir(Path(cdckit.__file__).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short run (a few minutes)")
    parser.add_argument("--only", default="", help="comma-separated steps to run (after the warm-up), e.g. "
                        "stream,stream_stages: their results are printed as JSON; RESULTS.md is left as it is")
    parser.add_argument("--repeats", type=int, help="runs of each goal's measurement, whose median is its figure "
                        "(default: 3, or 1 with --quick)")
    parser.add_argument("--before", metavar="JSON", help="an earlier run's results file (bench/results/*.json): "
                        "RESULTS.md shows its stage tables beside this run's")
    parser.add_argument("--report", metavar="JSON", help="only write bench/RESULTS.md and the plots again from a "
                        "results file of an earlier run (bench/results/*.json)")
    args = parser.parse_args()
    before = json.loads(Path(args.before).read_text()) if args.before else None
    if args.report:
        results = json.loads(Path(args.report).read_text())
        (BENCH / "RESULTS.md").write_text(report(results, plots(results, BENCH / "plots"), before))
        return
    if args.repeats is not None and args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give at least 1 run (the goals' figures are the median run)")
    only = {name for name in args.only.split(",") if name}
    params = {**(QUICK if args.quick else FULL), **({"repeats": args.repeats} if args.repeats is not None else {})}
    mode = "quick" if args.quick else "full"
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    compile_bytecode()
    root = Path(tempfile.mkdtemp(prefix="cdckit-bench-"))
    pg = EmbeddedPostgres(root / "pg").start()
    results: dict[str, Any] = {"mode": mode, "started": started, "machine": machine(), "params": params}
    try:
        # the Kafka step needs the connector from the start; a producer left idle is closed after 30 s (Spark's
        # default: 10 minutes), so that it does not go on retrying a broker its step has stopped
        bench = Bench(root / "work", pg, get_spark({"spark.kafka.producer.cache.timeout": "30s"}, kafka=True))
        bench.base.mkdir(parents=True)
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("profile", lambda: profile_event_path(params["profile_events"])),
            ("warmup", lambda: warm_up(bench)),
            ("snapshot", lambda: measure_snapshot(bench, params["rows"], params["repeats"])),
            ("stream", lambda: measure_stream(bench, params["stream_changes"], params["repeats"])),
            ("memory", lambda: [measure_snapshot(bench, rows) for rows in params["memory_rows"]]),
            ("latency", lambda: [measure_latency(bench, rate, params["latency_seconds"], trigger)
                                 for trigger in ("processing-time", "available-now")
                                 for rate in params["latency_rates"]]
                                + [measure_latency(bench, max(params["latency_rates"]), params["latency_seconds"],
                                                   "processing-time", "default")]),
            ("scaling", lambda: measure_scaling(bench, params)),
            ("kafka", lambda: measure_kafka(bench, params["kafka_rows"])),
            ("stages", lambda: measure_stages(bench, params["stages_rows"])),
            ("stream_stages", lambda: measure_stream_stages(bench, params["stream_changes"])),
            ("debezium", lambda: measure_debezium(bench, params["debezium_rows"], params["debezium_changes"],
                                                  params["repeats"])),
            ("delta", lambda: measure_delta(params["rows"], params["stream_changes"])),
        ]
        unknown = only - {name for name, _ in steps}
        if unknown:
            parser.error(f"unknown steps {sorted(unknown)}; choose from {[name for name, _ in steps]}")
        out = BENCH / "results" / f"{mode}-{started.replace(' ', 'T').replace(':', '')}.json"
        out.parent.mkdir(exist_ok=True)
        for name, step in steps:
            if only and name not in only | {"warmup"}:
                continue
            began = time.perf_counter()
            results[name] = step()
            print(f"{name}: done in {time.perf_counter() - began:.0f}s", flush=True)
            results.setdefault("seconds", {})[name] = round(time.perf_counter() - began)
            if not only:  # what is measured is kept as it comes, so a step that fails loses only itself
                out.write_text(json.dumps({**results, "complete": False}, indent=1))
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    if only:
        print(json.dumps(results, indent=1))
        return
    results["complete"] = True
    out.write_text(json.dumps(results, indent=1))
    images = plots(results, BENCH / "plots")
    (BENCH / "RESULTS.md").write_text(report(results, images, before))
    print((BENCH / "RESULTS.md").read_text())


if __name__ == "__main__":
    main()
