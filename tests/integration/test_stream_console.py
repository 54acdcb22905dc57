"""What ``cdckit stream`` prints when its output is not a terminal (a log file, a pipe, CI), as a user runs it: the
snapshot it took first, one readable line per batch, lines as long as they are; on stderr no JSON metrics line and
none of Spark's warnings known to be harmless, unless ``--verbose`` asks for everything."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
ROWS = 2500
HARMLESS = ("ResolveWriteToStream", "spark.sql.adaptive.enabled is not supported", "falling behind",
            "Failed to cancel job group", "replaced a previously registered", "Using incubator modules")
BATCH_LINE = re.compile(r"^batch (\d+): ([\d,]+) records? (\(.*\) )?in \d+\.\d s(, [\d,.]+ rows/s)?, "
                        r"lag (-|\d+\.\d s)$")


def _env() -> dict[str, str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TERM", "CDCKIT_SPARK_LOG_LEVEL"):
        env.pop(name, None)  # rich's width off a terminal: 80 columns
    return env


def test_stream_prints_the_snapshot_and_a_line_per_batch_and_no_noise(postgres: Any, database: str,
                                                                      workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id int PRIMARY KEY, note text)",
            f"INSERT INTO public.orders SELECT g, 'order ' || g FROM generate_series(1, {ROWS}) g")
    properties = make_config(postgres, database, workdir).as_properties(include_secrets=True)
    properties.update({"cdckit.trigger": "processing-time", "cdckit.trigger.interval": "100 milliseconds",
                       "cdckit.stream.max.batches": "3"})
    config_file = workdir / "connector.json"
    config_file.write_text(json.dumps({"name": "console", "config": properties}))
    process = subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(process.stderr or []), daemon=True)
    reader.start()
    stdout: list[str] = []
    snapshot_done = threading.Event()

    def write_changes() -> None:  # a transaction of 100 rows a second, once the snapshot is done, until the end
        snapshot_done.wait(600)
        first = ROWS + 1
        while process.poll() is None and first < ROWS + 100 * 60:
            execute(dsn, f"INSERT INTO public.orders SELECT g, 'new' FROM generate_series({first}, {first + 99}) g")
            first += 100
            time.sleep(1)

    writer = threading.Thread(target=write_changes, daemon=True)
    writer.start()
    try:
        for line in process.stdout or []:
            stdout.append(line.rstrip("\n"))
            if line.startswith("snapshot completed"):
                snapshot_done.set()
        assert process.wait(timeout=600) == 0, "\n".join(stdout) + "".join(stderr)
    finally:
        snapshot_done.set()
        if process.poll() is None:
            process.kill()
    reader.join(10)
    writer.join(10)
    err = "".join(stderr)
    print("\n".join(stdout), f"\n--- stderr:\n{err}")
    assert '{"cdckit.metrics"' not in err
    for text in HARMLESS:
        assert text not in err, f"{text!r} on stderr:\n{err}"
    assert re.fullmatch(r"snapshot completed: 2,500 rows from 1 table in \d+\.\ds; slot \S+ at \S+", stdout[0])
    assert stdout[1] == f"  it.public.orders: {ROWS:,}"
    batches = [line for line in stdout if line.startswith("batch ")]
    assert stdout.index(batches[0]) > 0  # the snapshot's summary came first
    for line in batches:
        assert BATCH_LINE.match(line), line
    stopped = [line for line in stdout if line.startswith("stream stopped after")]
    assert len(stopped) == 1 and "confirmed_flush_lsn" in stopped[0] and len(stopped[0]) > 80  # not wrapped
    (count, records) = re.findall(r"after (\d+) batch\(es\), ([\d,]+) records", stopped[0])[0]
    assert len(batches) == int(count) == 3
    assert sum(int(BATCH_LINE.match(line).group(2).replace(",", "")) for line in batches) == (  # type: ignore[union-attr]
        int(records.replace(",", ""))) > 0
    assert len(stdout) == 2 + len(batches) + 1, "\n".join(stdout)  # nothing else, no line cut in two

    # --verbose: the JSON metrics line (and Spark's warnings) again; the snapshot is taken already
    execute(dsn, "INSERT INTO public.orders VALUES (9999, 'verbose')")
    properties.update({"cdckit.trigger": "available-now"})
    config_file.write_text(json.dumps({"name": "console", "config": properties}))
    run = subprocess.run([sys.executable, "-m", "cdckit", "--verbose", "stream", str(config_file)], env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    metrics = [json.loads(line) for line in run.stderr.splitlines() if line.startswith('{"cdckit.metrics"')]
    assert metrics and metrics[-1]["cdckit.metrics"]["streaming"][database]["TotalNumberOfEventsSeen"] >= 1
    assert "Using incubator modules" in run.stderr  # nothing left out
    assert BATCH_LINE.match(run.stdout.splitlines()[0])  # the snapshot was taken by the first run
