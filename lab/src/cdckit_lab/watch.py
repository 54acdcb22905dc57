"""A stream watched as an operator would: ``cdckit stream`` runs against an embedded PostgreSQL while writes go
on and then pause, and its Prometheus endpoint is scraped twice a second; ``cdckit status`` is run during the
writes and after the stream stops.

    python -m cdckit_lab.watch --out docs/monitoring [--write-seconds 20] [--pause-seconds 20]

Writes to ``--out``: ``watch-samples.json`` (every scrape), ``watch-lag.png`` (lag, events per second and the
slot's retained WAL over time), ``watch-scrape.txt`` (one scrape taken during the writes) and
``watch-status.txt`` (the status during the writes and after the stop).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg2

from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit_lab.embedded_postgres import EmbeddedPostgres

WATCHED = ("debezium_metrics_MilliSecondsBehindSource", "debezium_metrics_TotalNumberOfEventsSeen",
           "cdckit_slot_retained_wal_bytes", "debezium_metrics_NumberOfCommittedTransactions")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


def _values(text: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in WATCHED and sample.labels.get("context") == "streaming":
                found[sample.name] = sample.value
    return found


def _writer(dsn: str, stop: threading.Event, written: dict[str, int]) -> None:
    conn = psycopg2.connect(dsn)
    next_id = 1_000_000
    try:
        while not stop.is_set():
            with conn.cursor() as cur:
                cur.execute("INSERT INTO public.orders SELECT g, 'new' FROM generate_series(%s, %s) g",
                            (next_id, next_id + 49))
                cur.execute("UPDATE public.orders SET note = 'changed' WHERE id BETWEEN %s AND %s",
                            (next_id, next_id + 9))
            conn.commit()
            written["events"] += 60
            written["transactions"] += 1
            next_id += 50
            stop.wait(0.02)
    finally:
        conn.close()


def _status(config_file: Path) -> str:
    """What ``cdckit status`` prints, the run's temporary folder named ``<run folder>``."""
    text = subprocess.run([sys.executable, "-m", "cdckit", "status", str(config_file)], capture_output=True,
                          text=True, check=False, env={**os.environ, "COLUMNS": "160"}).stdout
    return text.replace(str(config_file.parent), "<run folder>")


def watch(out: Path, write_seconds: float, pause_seconds: float) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="cdckit-watch-"))
    out.mkdir(parents=True, exist_ok=True)
    pg = EmbeddedPostgres(base / "pg").start()
    try:
        dsn = pg.dsn("postgres")
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE public.orders (id integer PRIMARY KEY, note text)")
            cur.execute("INSERT INTO public.orders SELECT g, 'seed' FROM generate_series(1, 20000) g")
        port = _free_port()
        properties = {"connector.class": POSTGRES_CONNECTOR, **pg.connector_properties("postgres"),
                      "topic.prefix": "watch", "table.include.list": "public\\.orders", "slot.name": "watch",
                      "publication.name": "watch", "publication.autocreate.mode": "filtered",
                      "max.batch.size": "1000", "cdckit.trigger": "processing-time",
                      "cdckit.trigger.interval": "500 milliseconds", "cdckit.metrics.port": str(port),
                      "cdckit.output.path": str(base / "out"), "cdckit.checkpoint.location": str(base / "checkpoint")}
        config_file = base / "connector.json"
        config_file.write_text(json.dumps({"name": "watch", "config": properties}))
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        with (base / "stream.log").open("wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        samples: list[dict[str, float]] = []
        started = time.monotonic()
        while _scrape(port) is None and time.monotonic() - started < 300:
            time.sleep(0.5)
        while time.monotonic() - started < 300:  # the snapshot first: wait for the stream's first report
            text = _scrape(port)
            if text and "debezium_metrics_MilliSecondsBehindSource" in text and \
                    _values(text).get("debezium_metrics_MilliSecondsBehindSource", -1) >= 0:
                break
            time.sleep(0.5)
        stop = threading.Event()
        written = {"events": 0, "transactions": 0}
        writer = threading.Thread(target=_writer, args=(dsn, stop, written))
        t0 = time.monotonic()
        writer.start()
        scrape_during = ""
        status_during = ""
        while time.monotonic() - t0 < write_seconds + pause_seconds:
            elapsed = time.monotonic() - t0
            if elapsed >= write_seconds and not stop.is_set():
                stop.set()
                writer.join()
            text = _scrape(port)
            if text:
                samples.append({"t": round(elapsed, 2), "writing": not stop.is_set(), **_values(text)})
                if not scrape_during and elapsed >= write_seconds / 2:
                    scrape_during = text
                    status_during = _status(config_file)
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)  # as Ctrl-C: the job stops its query and says so
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        status_after = _status(config_file)
    finally:
        pg.stop()
    (out / "watch-samples.json").write_text(json.dumps({"written": written, "samples": samples}, indent=1) + "\n")
    (out / "watch-scrape.txt").write_text(scrape_during)
    (out / "watch-status.txt").write_text("# during the writes\n" + status_during + "\n# after the stop\n"
                                          + status_after)
    _plot(samples, write_seconds, out / "watch-lag.png")
    last = samples[-1] if samples else {}
    return {"written": written, "scrapes": len(samples), "final": last,
            "max_lag_ms": max((s.get("debezium_metrics_MilliSecondsBehindSource", 0) for s in samples), default=0)}


def _plot(samples: list[dict[str, float]], write_seconds: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [s["t"] for s in samples]
    figure, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(times, [s.get("debezium_metrics_MilliSecondsBehindSource", 0) / 1000 for s in samples])
    axes[0].set_ylabel("lag (s)")
    axes[0].set_title("cdckit stream, scraped from cdckit.metrics.port: writes, then a pause")
    rates = [0.0]
    for before, after in itertools.pairwise(samples):
        seconds = after["t"] - before["t"]
        seen = after.get("debezium_metrics_TotalNumberOfEventsSeen", 0) - \
            before.get("debezium_metrics_TotalNumberOfEventsSeen", 0)
        rates.append(seen / seconds if seconds > 0 else 0.0)
    axes[1].plot(times, rates)
    axes[1].set_ylabel("events/s")
    axes[2].plot(times, [s.get("cdckit_slot_retained_wal_bytes", 0) / 1048576 for s in samples])
    axes[2].set_ylabel("slot WAL (MiB)")
    axes[2].set_xlabel("seconds since the writes started")
    for axis in axes:
        axis.axvspan(0, write_seconds, color="orange", alpha=0.15, label="writes")
        axis.grid(alpha=0.3)
    axes[0].legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--write-seconds", type=float, default=20)
    parser.add_argument("--pause-seconds", type=float, default=20)
    args = parser.parse_args(argv)
    print(json.dumps(watch(args.out, args.write_seconds, args.pause_seconds), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
