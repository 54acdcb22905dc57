"""Debezium Server run as a subprocess with an application.properties of its own (the only place the database
password is written), until a topic holds the records expected; its slot and publication dropped after."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil
import psycopg2

from cdckit_lab.debezium.runtime import (
    EMBEDDED_MAIN,
    POSTGRES_CONNECTOR_CLASS,
    STRING_SERIALIZER,
    VERSION,
    DebeziumServerError,
    fetch_runtime,
    find_java,
    required_java,
    runner_classes,
    snapshot_mode_for,
)
from cdckit_lab.debezium.topics import EndOffsets, ensure_topic
from cdckit_lab.embedded_postgres import free_port


# -- PostgreSQL ------------------------------------------------------------------------------------------------
def connect(dsn_properties: Mapping[str, str]) -> Any:
    conn = psycopg2.connect(host=dsn_properties["database.hostname"], port=int(dsn_properties["database.port"]),
                            user=dsn_properties["database.user"], password=dsn_properties["database.password"],
                            dbname=dsn_properties["database.dbname"], connect_timeout=10)
    conn.autocommit = True
    return conn


def slot_active(dsn_properties: Mapping[str, str], slot: str) -> bool:
    conn = connect(dsn_properties)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            row = cur.fetchone()
        return bool(row and row[0])
    finally:
        conn.close()


def drop_slot(dsn_properties: Mapping[str, str], slot: str, publication: str | None = None,
              timeout_s: float = 30.0) -> None:
    """Drop the replication slot (once its walsender has let go of it) and the publication, when given."""
    conn = connect(dsn_properties)
    try:
        with conn.cursor() as cur:
            deadline = time.monotonic() + timeout_s
            while True:
                cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                row = cur.fetchone()
                if row is None:
                    break
                if row[0] is None:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    break
                if time.monotonic() > deadline:
                    cur.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                time.sleep(0.2)
            if publication:
                cur.execute(f'DROP PUBLICATION IF EXISTS "{publication}"')
    finally:
        conn.close()


# -- the server ------------------------------------------------------------------------------------------------
def _escape(value: str) -> str:
    """A value for a Java properties file (backslashes doubled, line breaks escaped); SmallRye would expand
    ``${...}``, so such values are refused."""
    if "${" in value:
        raise ValueError("a Debezium Server property value must not contain '${'")
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def server_properties(dsn_properties: Mapping[str, str], kafka_bootstrap: str, work_dir: Path, *,
                      table_include: str, snapshot_mode: str, slot_name: str, publication_name: str,
                      topic_prefix: str = "bench", http_port: int | None = None,
                      extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Debezium Server's application.properties: Kafka sink, JSON with schemas, the PostgreSQL connector."""
    source = {
        "connector.class": POSTGRES_CONNECTOR_CLASS,
        **{key: str(value) for key, value in dsn_properties.items() if key.startswith("database.")},
        "topic.prefix": topic_prefix,
        "table.include.list": table_include,
        "plugin.name": "pgoutput",
        "slot.name": slot_name,
        "publication.name": publication_name,
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": snapshot_mode,
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(work_dir / "offsets.dat"),
    }
    properties = {
        "debezium.sink.type": "kafka",
        "debezium.sink.kafka.producer.bootstrap.servers": kafka_bootstrap,
        "debezium.sink.kafka.producer.key.serializer": STRING_SERIALIZER,
        "debezium.sink.kafka.producer.value.serializer": STRING_SERIALIZER,
        "debezium.format.key": "json",
        "debezium.format.value": "json",
        "debezium.format.key.schemas.enable": "true",
        "debezium.format.value.schemas.enable": "true",
        **{f"debezium.source.{key}": value for key, value in source.items()},
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": str(http_port or free_port()),
        "quarkus.log.level": "INFO",
    }
    properties.update(extra or {})
    return properties


class DebeziumServer:
    """One Debezium Server process run in ``work_dir`` with its own application.properties; its output goes to
    ``work_dir/debezium-server.log``.

    A distribution is started as its run.sh would start it from ``work_dir``: 3.x's run.sh puts config/lib on the
    classpath and Quarkus reads config/application.properties in the working folder; 2.x's run.sh puts conf/ on
    the classpath, where Quarkus finds conf/application.properties. The embedded runtime's runner reads the same
    properties from config/application.properties, given as its argument."""

    def __init__(self, work_dir: Path, properties: Mapping[str, str], java_opts: tuple[str, ...] = (),
                 version: str = VERSION, runtime: str | None = None) -> None:
        self.work_dir = work_dir.resolve()
        self.properties = dict(properties)
        self.java_opts = java_opts
        self.runtime = fetch_runtime(version, runtime)
        self.home = self.runtime.home
        self.java, self.java_version = find_java(required_java(self.home), f"Debezium {version}")
        if self.java_version >= 24:  # JBoss Threads (Quarkus) resets thread locals through java.lang's internals
            self.java_opts = ("--add-opens=java.base/java.lang=ALL-UNNAMED", *self.java_opts)
        self.conf_dir = self.work_dir / self._conf_name()
        self.log_path = self.work_dir / "debezium-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.peak_rss_mb = 0.0

    def _conf_name(self) -> str:
        """``conf`` when the distribution's run.sh puts conf/ on the classpath (2.x), else ``config``."""
        if self.runtime.kind != "server":
            return "config"
        run_sh = self.home / "run.sh"
        text = run_sh.read_text(errors="replace") if run_sh.exists() else ""
        return "conf" if re.search(r'PATH_SEP"?conf"?\$PATH_SEP', text) else "config"

    def _write_conf(self) -> Path:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        path = self.conf_dir / "application.properties"
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)  # the database password is in it
        path.write_text("".join(f"{key}={_escape(value)}\n" for key, value in self.properties.items()))
        return path

    def command(self, conf: Path) -> list[str]:
        """The java command line (classpath and main class) for this runtime."""
        lib = str(self.home / "lib" / "*")
        if self.runtime.kind == "embedded":
            logging = ["-Dorg.slf4j.simpleLogger.showDateTime=true",
                       "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss,SSS",
                       "-Dorg.slf4j.simpleLogger.log.org.apache.kafka=warn"]
            classpath = os.pathsep.join([str(runner_classes(self.home, self.runtime.version)), lib])
            return [str(self.java), *self.java_opts, *logging, "-cp", classpath, EMBEDDED_MAIN, str(conf)]
        runner = next(iter(sorted(self.home.glob("debezium-server-dist-*-runner.jar"))), None)
        if runner is None:
            raise DebeziumServerError(f"no debezium-server-dist-*-runner.jar in {self.home}")
        # As run.sh does, but from this run's folder, so that its application.properties is the one read.
        config = self.conf_dir if self.conf_dir.name == "conf" else self.home / "config" / "lib"
        classpath = os.pathsep.join([str(runner), str(config), lib])
        return [str(self.java), *self.java_opts, "-cp", classpath, "io.debezium.server.Main"]

    def start(self) -> DebeziumServer:
        command = self.command(self._write_conf())
        log = self.log_path.open("ab")
        try:
            self.started_at = time.perf_counter()
            self.process = subprocess.Popen(command, cwd=self.work_dir, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        return self

    def sample_memory(self) -> None:
        """Note the JVM's resident memory, keeping the peak (``peak_rss_mb``)."""
        if self.process is None:
            return
        with contextlib.suppress(psutil.Error):
            rss = psutil.Process(self.process.pid).memory_info().rss / 1e6
            self.peak_rss_mb = max(self.peak_rss_mb, rss)

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise DebeziumServerError(f"Debezium Server exited with {self.process.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        """The end of the server's log, the password masked (Debezium masks it too; this is a second guard)."""
        if not self.log_path.exists():
            return ""
        text = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        password = self.properties.get("debezium.source.database.password")
        return text.replace(password, "********") if password else text

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (Debezium Server then stops the connector and commits its offsets), SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_debezium(dsn_properties: Mapping[str, str], kafka_bootstrap: str, work_dir: Path, *, table_include: str,
                 snapshot_mode: str, expected_records: int, topic: str, timeout_s: float = 600.0,
                 slot_name: str = "dbz_bench", publication_name: str = "dbz_bench", topic_prefix: str = "bench",
                 partitions: int = 1, on_streaming: Callable[[], None] | None = None, keep_slot: bool = False,
                 java_opts: tuple[str, ...] = (), version: str = VERSION,
                 producer: Mapping[str, str] | None = None, runtime: str | None = None) -> dict[str, Any]:
    """Run Debezium Server until ``topic`` holds ``expected_records`` more records than when it started
    (``runtime="embedded"``: the release's embedded engine, as ``fetch_runtime`` says).

    ``dsn_properties`` are the ``database.*`` connector properties (EmbeddedPostgres.connector_properties).
    With ``on_streaming``, the server is first left to reach streaming (its slot active in
    pg_replication_slots) and then ``on_streaming()`` is called (e.g. to apply the changes to capture).
    The server is stopped afterwards (SIGTERM, then SIGKILL) and, unless ``keep_slot``, its slot and
    publication are dropped; ``keep_slot`` keeps them and the offsets in ``work_dir`` for a later run.

    Returns records, seconds (from the process's start to the last record), records_per_s, startup_s (process
    start to the first record), steady_s and steady_records_per_s (first to last record), and with
    ``on_streaming`` also streaming_s (process start to streaming), changes_s (``on_streaming``'s own time) and
    from_changes_s / from_changes_records_per_s (its start to the last record); also first_offset (the topic's
    end offset before the run, where its records start when the topic has one partition), peak_rss_mb (the
    JVM's resident memory, sampled with each poll), version and java.

    ``producer``: settings for its Kafka producer beyond Debezium Server's defaults, in Kafka's names
    (``batch.size``).
    """
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    ensure_topic(kafka_bootstrap, topic, partitions)
    offsets = EndOffsets(kafka_bootstrap, topic)
    properties = server_properties(dsn_properties, kafka_bootstrap, work_dir, table_include=table_include,
                                   snapshot_mode=snapshot_mode_for(version, snapshot_mode), slot_name=slot_name,
                                   publication_name=publication_name, topic_prefix=topic_prefix,
                                   extra={f"debezium.sink.kafka.producer.{key}": value
                                          for key, value in (producer or {}).items()})
    server = DebeziumServer(work_dir, properties, java_opts=java_opts, version=version, runtime=runtime)
    result: dict[str, Any] = {"version": version, "runtime": server.runtime.kind, "java": server.java_version,
                              "snapshot_mode": properties["debezium.source.snapshot.mode"]}
    try:
        baseline = offsets.total()
        server.start()
        started = server.started_at
        deadline = started + timeout_s

        def waiting(what: str) -> None:
            server.check_alive()
            if time.perf_counter() > deadline:
                raise DebeziumServerError(f"Debezium Server: {what} within {timeout_s:.0f}s; log "
                                          f"{server.log_path}:\n{server.log_tail()}")
            time.sleep(0.05)

        if on_streaming is not None:
            while not slot_active(dsn_properties, slot_name):
                server.sample_memory()
                waiting(f"slot {slot_name} not active")
            result["streaming_s"] = time.perf_counter() - started
            changes_started = time.perf_counter()
            on_streaming()
            result["changes_s"] = time.perf_counter() - changes_started
        first_at: float | None = None
        records = 0
        while True:
            records = offsets.total() - baseline
            now = time.perf_counter()
            server.sample_memory()
            if records > 0 and first_at is None:
                first_at = now
            if records >= expected_records:
                break
            waiting(f"{records:,} of {expected_records:,} records in {topic}")
        seconds = now - started
        startup = (first_at or now) - started
        result.update({"records": records, "seconds": seconds, "records_per_s": records / seconds if seconds else 0.0,
                       "startup_s": startup, "steady_s": seconds - startup,
                       "steady_records_per_s": records / (seconds - startup) if seconds > startup else 0.0})
        if on_streaming is not None:
            from_changes = now - changes_started
            result["from_changes_s"] = from_changes
            result["from_changes_records_per_s"] = records / from_changes if from_changes else 0.0
        result["first_offset"] = baseline
        result["peak_rss_mb"] = server.peak_rss_mb
    finally:
        offsets.close()
        server.stop()
        if not keep_slot:
            drop_slot(dsn_properties, slot_name, publication_name)
    if _password_logged(dsn_properties, server.log_path):
        result["warning"] = f"the database password appears in {server.log_path}"
    return result


def create_slot(dsn_properties: Mapping[str, str], kafka_bootstrap: str, work_dir: Path, *, table_include: str,
                topic: str, slot_name: str = "dbz_bench", publication_name: str = "dbz_bench",
                topic_prefix: str = "bench", partitions: int = 1, timeout_s: float = 300.0,
                version: str = VERSION) -> dict[str, Any]:
    """Start Debezium Server with ``snapshot.mode=no_data`` until it streams, then stop it, keeping its slot,
    publication and offsets in ``work_dir``: changes made afterwards are a backlog that a later ``run_debezium``
    on the same ``work_dir`` and slot reads from the process's start (as bench/run.py's measure_stream times
    cdckit: slot first, changes next, then the capture alone)."""
    return run_debezium(dsn_properties, kafka_bootstrap, work_dir, table_include=table_include,
                        snapshot_mode="no_data", expected_records=0, topic=topic, timeout_s=timeout_s,
                        slot_name=slot_name, publication_name=publication_name, topic_prefix=topic_prefix,
                        partitions=partitions, on_streaming=lambda: None, keep_slot=True, version=version)


def _password_logged(dsn_properties: Mapping[str, str], log_path: Path) -> bool:
    """Whether the password shows in the log; only told for a password that cannot be mistaken for other text
    (8 characters or more, not the user's or the database's name)."""
    password = dsn_properties.get("database.password") or ""
    if len(password) < 8 or password in (dsn_properties.get("database.user"), dsn_properties.get("database.dbname")):
        return False
    return log_path.exists() and password in log_path.read_text(errors="replace")


def execute_sql(dsn_properties: Mapping[str, str], *statements: str) -> None:
    with contextlib.closing(connect(dsn_properties)) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
