"""A single-node Apache Kafka broker in KRaft mode, run with ``java`` from its Maven Central artefacts.

For the tests and the local lab: no Docker, no download of a Kafka distribution. The jars are fetched once into
the cache folder (``$CDCKIT_CACHE``, default ``~/.cache/cdckit``). While it runs, ``<folder>/bootstrap.servers``
holds its address (``make kafka``: ``.cdckit-kafka/bootstrap.servers``). The broker's JVM ends with the process that
started it, however that ends (on Linux): ``stop``, SIGTERM or SIGINT to ``main``, or the process killed.

Example::

    with KafkaBroker(Path(".cdckit-kafka")) as broker:
        print(broker.bootstrap_servers)
"""

from __future__ import annotations

import base64
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType

from cdckit.artifacts import fetch
from cdckit_lab.embedded_postgres import free_port

KAFKA_VERSION = "4.1.1"
BOOTSTRAP_FILE = "bootstrap.servers"  # in the broker's folder while it runs: its address, for a connector to read
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that started it ends
_PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None  # looked up before any fork


def cluster_id() -> str:
    """A random KRaft cluster id, as Kafka's Uuid makes them: URL-safe base64 that never starts with '-' (which
    the storage tool would read as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def kafka_jars() -> list[Path]:
    return fetch(f"kafka-broker-{KAFKA_VERSION}", [("org.apache.kafka", "kafka_2.13", KAFKA_VERSION, ()),
                                                   ("org.slf4j", "slf4j-reload4j", "1.7.36", ())])


def _die_with(parent: int) -> None:
    """In the broker's JVM before it starts (``preexec_fn``): ask Linux to send it SIGTERM when the thread that
    started it ends, so that a killed wrapper leaves no broker behind; end at once if that already happened."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class KafkaBroker:
    def __init__(self, base_dir: Path, port: int | None = None) -> None:
        self.base_dir = base_dir.resolve()
        self.port = port or free_port()
        self.controller_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("a Java runtime (17+) is needed to run Kafka; install one")
        classpath = os.pathsep.join(str(jar) for jar in kafka_jars())
        return [java, "-Xms256m", "-Xmx512m", "-cp", classpath]

    def _configure(self) -> Path:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        properties = self.base_dir / "server.properties"
        properties.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT", f"log.dirs={self.base_dir / 'data'}",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1", "group.initial.rebalance.delay.ms=0", "num.partitions=1",
            "auto.create.topics.enable=false", "",
        ]))
        (self.base_dir / "log4j.properties").write_text("log4j.rootLogger=WARN, file\n"
                                                        "log4j.appender.file=org.apache.log4j.FileAppender\n"
                                                        f"log4j.appender.file.File={self.base_dir / 'kafka.log'}\n"
                                                        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
                                                        "log4j.appender.file.layout.ConversionPattern=%d %p %c: %m%n\n")
        return properties

    def start(self, timeout_s: float = 90.0) -> KafkaBroker:
        properties = self._configure()
        if not (self.base_dir / "data" / "meta.properties").exists():
            result = subprocess.run([*self._java(), "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c",
                                     str(properties), "--standalone"], capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"formatting Kafka's storage failed: {(result.stderr or result.stdout)[-1000:]}")
        log = (self.base_dir / "stdout.log").open("ab")
        # Its own session (a Ctrl-C at the terminal reaches the wrapper, which stops it in order); ended with the
        # starting thread where that is the main thread (another thread's end would stop it early)
        parent = os.getpid()
        watch = threading.current_thread() is threading.main_thread()
        self.process = subprocess.Popen(
            [*self._java(), f"-Dlog4j.configuration=file:{self.base_dir / 'log4j.properties'}", "kafka.Kafka",
             str(properties)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=(lambda: _die_with(parent)) if watch else None)
        try:
            self._wait(timeout_s)
        except BaseException:
            self.stop()
            raise
        (self.base_dir / BOOTSTRAP_FILE).write_text(self.bootstrap_servers + "\n")
        return self

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.process.returncode}; see {self.base_dir}/stdout.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                if self._answers():
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"Kafka did not answer on {self.bootstrap_servers} within {timeout_s:.0f}s")

    def _answers(self) -> bool:
        try:
            from confluent_kafka.admin import AdminClient
        except ImportError:
            return True  # the port is open; without a client the metadata check is skipped
        try:
            metadata = AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(timeout=3)
        except Exception:
            return False
        return bool(metadata.brokers)

    def stop(self) -> None:
        (self.base_dir / BOOTSTRAP_FILE).unlink(missing_ok=True)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _stop_on_signal(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (kill, a service manager) stops the broker as Ctrl-C does


def main() -> None:
    """``python -m cdckit_lab.kafka_broker [folder]`` (``make kafka``): run a broker in the foreground until Ctrl-C
    or SIGTERM, which stop it; its address is in ``<folder>/bootstrap.servers`` meanwhile."""
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".cdckit-kafka")
    signal.signal(signal.SIGTERM, _stop_on_signal)
    broker = KafkaBroker(folder, port=int(os.environ.get("CDCKIT_KAFKA_PORT", "0")) or None)
    try:
        broker.start()
        address = folder / BOOTSTRAP_FILE
        print(f"Kafka {KAFKA_VERSION} (KRaft) on {broker.bootstrap_servers}; data in {folder}; Ctrl-C stops it\n"
              f"its address is in {address} while it runs; point cdckit at it with\n"
              f"  --set kafka.bootstrap.servers={broker.bootstrap_servers}\n"
              f"or, from another shell in this folder,\n"
              f"  --set kafka.bootstrap.servers=$(cat {address})", flush=True)
        while broker.process is not None and broker.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the broker's shutdown is not cut short by a second one
        broker.stop()


if __name__ == "__main__":
    main()
