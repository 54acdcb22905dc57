"""cdckit on a real multi-process cluster, as users run it: a Spark standalone master and two workers on 127.0.0.1
(each worker with its own work folder, home and temporary folder), jobs started with ``spark-submit jobs/....py``.

The same database is captured twice, through two slots: once in local mode in this process, once on the cluster.
Both see the same rows and the same changes at the same positions, so their records must be the same record for
record (bar the times they were written at), with an executor killed in the middle of a cluster batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config
from kafka_helpers import consume

from cdckit.artifacts import spark_kafka_jars
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.spark.sinks import read_records
from cdckit_lab.embedded_postgres import free_port
from cdckit_lab.inventory import apply_changes, create_inventory
from cdckit_lab.spark_cluster import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
PREFIX = "cluster"
TOPICS = ("inventory.customers", "inventory.orders", "inventory.products", "public.ledger")
LEDGER_ROWS = 12_000
PASSWORD_VARIABLE = "CDCKIT_CLUSTER_TEST_PASSWORD"
# Batches of whole transactions up to 1500 changes (a dozen batches, so that an executor is killed while a task
# runs even on a slow machine), each read by two tasks (one per executor) taking turns on the slot; the snapshot
# in partitions of 2000 rows.
TUNING = {"max.batch.size": "1500", "cdckit.stream.partition.min.events": "500", "cdckit.snapshot.chunk.rows": "2000",
          "topic.prefix": PREFIX}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2) as running:
        yield running


def _connector_file(postgres: Any, database: str, folder: Path, slot: str, **overrides: str) -> Path:
    """A connector configuration as a user writes one: the password comes from the environment."""
    config = make_config(postgres, database, folder, **{**TUNING, "slot.name": slot, **overrides})
    properties = {**config.as_properties(include_secrets=False),
                  "database.password": f"${{env:{PASSWORD_VARIABLE}}}"}
    path = folder / "connector.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": f"{PREFIX}-{slot}", "config": properties}))
    return path


class _Driver:
    """A spark-submit driver whose output is read as it comes: a driver whose pipe nobody reads stops at its next
    log line once the pipe is full (while the test watches the stream, say)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: list[str] = []
        stdout = process.stdout
        assert stdout is not None
        self._reader = threading.Thread(target=lambda: self._lines.extend(iter(stdout.readline, "")), daemon=True)
        self._reader.start()

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def output(self, timeout_s: float = 300) -> str:
        """The driver's whole output, once it has ended (killed after ``timeout_s``)."""
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(30)
        return "".join(self._lines)


def _submit(cluster: StandaloneCluster, postgres: Any, job: str, connector: Path, *, ui_port: int | None = None,
            kafka: bool = False) -> _Driver:
    conf = {"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)} if ui_port else {}
    command = cluster.spark_submit(ROOT / "jobs" / f"{job}.py", str(connector), conf=conf,
                                   jars=spark_kafka_jars() if kafka else ())
    env = {**os.environ, PASSWORD_VARIABLE: postgres.password, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    return _Driver(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    cwd=str(connector.parent)))


def _finish(cluster: StandaloneCluster, driver: _Driver, timeout_s: float = 300) -> str:
    output = driver.output(timeout_s)
    assert driver.returncode == 0, f"{output[-6000:]}\n{cluster.executor_logs()[-6000:]}"
    return output


def _get(ui_port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/v1/applications{path}", timeout=2) as answer:
        return json.load(answer)


def _launched_ms_ago(task: dict[str, Any]) -> float:
    launched = datetime.strptime(task["launchTime"].replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return (datetime.now(timezone.utc) - launched).total_seconds() * 1000


LONG_TASK_MS = 300


def _kill_an_executor_while_a_task_runs(cluster: StandaloneCluster, driver: _Driver, ui_port: int,
                                        output: Path, timeout_s: float = 240) -> tuple[str, str]:
    """Once a stream batch has been written, kill the executor of a task of a later batch that has run for
    ``LONG_TASK_MS`` (the large transaction's: the batches of 1,500 changes end sooner, and killing their
    executors just after their tasks succeed would only cost the application its executors), through the driver's
    REST API, until one such task is seen lost with its executor; returns the executor and the task's failure as
    the driver recorded it.

    The driver's log is no witness here: where the master's exit code for the executor reaches the driver after
    the lost connection, Spark logs the task's ExecutorLostFailure only as "its executor exited for a reason
    unrelated to the task". The task's own record in the REST API names the failure either way."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and driver.returncode is None:
        if any(output.glob("*/stream-*.jsonl")):
            try:
                application = _get(ui_port, "")[0]["id"]
                for stage in _get(ui_port, f"/{application}/stages?status=active"):
                    path = f"/{application}/stages/{stage['stageId']}/{stage['attemptId']}/taskList"
                    started = [t for t in _get(ui_port, f"{path}?status=RUNNING")
                               if _launched_ms_ago(t) >= LONG_TASK_MS]
                    if not started:
                        continue
                    task = started[0]
                    cluster.kill_executor(application, str(task["executorId"]))
                    while time.monotonic() < deadline:  # did the task die with it, or finish just before?
                        tasks = {t["taskId"]: t for t in _get(ui_port, f"{path}?length=1000")}
                        status = tasks.get(task["taskId"], {}).get("status")
                        if status in ("FAILED", "KILLED"):
                            return str(task["executorId"]), str(tasks[task["taskId"]].get("errorMessage"))
                        if status == "SUCCESS":
                            break
                        time.sleep(0.1)
            except (OSError, ValueError, IndexError, KeyError, RuntimeError):
                pass
        time.sleep(0.02)
    files = sorted(p.name for p in output.glob("*/stream-*.jsonl"))
    log = driver.output(0)[-5000:]  # killed if still running
    raise AssertionError(f"no stream task was lost with a killed executor; written: {files}\n{log}")


def _normalized(record: dict[str, Any], start: str) -> dict[str, Any]:
    """A record without what differs between two runs by design: when it was written, for snapshot rows the slot's
    own snapshot (its consistent point and transaction), and the slot's starting point ``start`` where the first
    streamed change names it as the last commit before it (``source.sequence``)."""
    value = record["value"]
    if value is None:
        return {"topic": record["topic"], "key": record["key"], "value": None}
    payload = dict(value["payload"])
    payload.pop("ts_ms")
    if payload["op"] == "r":
        payload["source"] = {k: v for k, v in payload["source"].items()
                             if k not in ("ts_ms", "lsn", "sequence", "txId", "xmin")}
    else:
        last_commit, lsn = json.loads(payload["source"]["sequence"])
        payload["source"] = {**payload["source"],
                             "sequence": ["start" if last_commit == start else last_commit, lsn]}
    return {"topic": record["topic"], "key": record["key"], "value": {"schema": value["schema"], "payload": payload}}


def _per_key(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each key's records in order, as text."""
    found: dict[str, list[str]] = {}
    for record in records:
        found.setdefault(json.dumps(record["key"]), []).append(json.dumps(record))
    return found


def _start(run: Path) -> str:
    """The LSN (as a number's text) the run's slot started streaming at: its snapshot's consistent point."""
    state = json.loads((run / "checkpoint" / "snapshot" / "state.json").read_text())
    high, _, low = state["consistent_point"].partition("/")
    return str((int(high, 16) << 32) + int(low, 16))


def _files_output(run: Path) -> dict[str, list[dict[str, Any]]]:
    return {topic: [_normalized(r, _start(run)) for r in read_records(str(run / "out"), f"{PREFIX}.{topic}")]
            for topic in TOPICS}


def _ledger(dsn: str) -> None:
    execute(dsn, "CREATE TABLE public.ledger (id integer PRIMARY KEY, account text NOT NULL, amount numeric(12,2))",
            f"INSERT INTO public.ledger SELECT g, 'acct-' || (g % 97), g * 1.25 "
            f"FROM generate_series(1, {LEDGER_ROWS}) g")


def _changes(dsn: str) -> None:
    apply_changes(dsn)  # inserts, updates, a primary-key update, deletes
    for step in range(24):  # 24 transactions of 500 updates: several batches, each cut in two
        execute(dsn, f"UPDATE public.ledger SET amount = amount + 1 WHERE id % 24 = {step}")
    # One transaction of 24,000 updates: a batch of its own, read by one task that runs long enough (a second or
    # more) for an executor to be killed under it on any machine.
    execute(dsn, "UPDATE public.ledger SET amount = amount + 1; UPDATE public.ledger SET amount = amount - 1")
    execute(dsn, "DELETE FROM public.ledger WHERE id % 10 = 0")


def test_cluster_runs_equal_local_mode_record_for_record_with_an_executor_killed_mid_batch(
        postgres: Any, spark: Any, kafka: Any, cluster: StandaloneCluster, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    create_inventory(dsn)
    _ledger(dsn)
    local = make_config(postgres, database, workdir / "local", **{**TUNING, "slot.name": f"l_{database}"})
    on_files = _connector_file(postgres, database, workdir / "cluster-files", f"c_{database}",
                               **{"cdckit.local.paths.shared": "true"})
    on_kafka = _connector_file(postgres, database, workdir / "cluster-kafka", f"k_{database}",
                               **{"cdckit.local.paths.shared": "true", "cdckit.sink": "kafka",
                                  "kafka.bootstrap.servers": kafka.bootstrap_servers,
                                  "topic.creation.default.partitions": "1"})

    # Three slots, each with its own exported snapshot of the same rows: nothing is written in between.
    run_snapshot(spark, local)
    _finish(cluster, _submit(cluster, postgres, "snapshot", on_files))
    _finish(cluster, _submit(cluster, postgres, "snapshot", on_kafka, kafka=True))
    _changes(dsn)

    run_stream(spark, local)
    ui_port = free_port()
    stream = _submit(cluster, postgres, "stream", on_files, ui_port=ui_port)
    killed, failure = _kill_an_executor_while_a_task_runs(cluster, stream, ui_port, workdir / "cluster-files" / "out")
    driver_log = _finish(cluster, stream)
    (workdir / "stream-driver.log").write_text(driver_log)
    assert failure.startswith(f"ExecutorLostFailure (executor {killed} exited"), \
        f"the task was lost with executor {killed}, not for another reason: {failure}"
    _finish(cluster, _submit(cluster, postgres, "stream", on_kafka, kafka=True))

    expected = _files_output(workdir / "local")
    assert sum(len(records) for records in expected.values()) > 2 * LEDGER_ROWS
    on_cluster = _files_output(workdir / "cluster-files")
    for topic in TOPICS:
        assert on_cluster[topic] == expected[topic], f"{topic}: the cluster's files differ (executor {killed} killed)"

    for topic in TOPICS:  # Kafka keeps each key's records in order; the snapshot comes before the stream
        received = [{"topic": f"{PREFIX}.{topic}", "key": r["key"], "value": r["value"]}
                    for r in consume(kafka.bootstrap_servers, f"{PREFIX}.{topic}")]
        normalized = [_normalized(r, _start(workdir / "cluster-kafka")) for r in received]
        snapshot = [r for r in expected[topic] if r["value"] and r["value"]["payload"]["op"] == "r"]
        text = json.dumps
        assert sorted(map(text, normalized[:len(snapshot)])) == sorted(map(text, snapshot)), topic
        assert _per_key(normalized[len(snapshot):]) == _per_key(expected[topic][len(snapshot):]), \
            f"{topic}: Kafka's stream records differ"

    assert fetch(dsn, "SELECT count(*) FROM public.ledger")[0][0] == LEDGER_ROWS - LEDGER_ROWS // 10


def test_a_node_local_path_with_executors_on_other_machines_is_refused_at_start(
        postgres: Any, cluster: StandaloneCluster, database: str, workdir: Path) -> None:
    create_inventory(postgres.dsn(database))
    connector = _connector_file(postgres, database, workdir, f"r_{database}")
    driver = _submit(cluster, postgres, "snapshot", connector)
    output = driver.output()
    assert driver.returncode == 2, output[-4000:]
    assert "cdckit.checkpoint.location=" in output and "cdckit.output.path=" in output
    assert "Spark runs executors on other machines (master spark://127.0.0.1" in output
    assert "cdckit.local.paths.shared=true" in output and "Traceback" not in output
    assert not (workdir / "out").exists(), "nothing is written before the refusal"
