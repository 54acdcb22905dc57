"""Debezium's own PostgreSQL connector (in Debezium Server), run beside cdckit on the same PostgreSQL and Kafka.

    .venv/bin/python -m cdckit_lab.debezium       # quick self-check: 50,000 rows, own PostgreSQL and broker
    DBZ_BENCH_ROWS=5000 DBZ_BENCH_KEEP=1 ...       # fewer rows; keep the temp folder (logs) afterwards
    DBZ_BENCH_VERSION=2.5.2.Final ...              # another Debezium release (default VERSION, 3.6.0.Final)

What is measured: how fast Debezium Server (the Debezium PostgreSQL connector in its standalone Quarkus runtime,
pgoutput, Kafka sink, JSON with schemas as Kafka Connect's JsonConverter writes it) puts change records into a
real Kafka topic:

- snapshot: ``snapshot.mode=initial`` on a table; one record per row;
- stream: ``snapshot.mode=no_data`` (``never`` before Debezium 2.6, ``snapshot_mode_for``) on a fresh slot; the
  changes are applied while the server streams (live), or before it starts (backlog, as bench/run.py's
  measure_stream times cdckit), one record per changed row.

How: the Debezium Server distribution is fetched once from Maven Central into the cdckit cache folder and run as
a subprocess with an application.properties written into a work folder (the only place the database password is
written; the server's log goes to a file there too). Records are counted on the broker: the topic's end offsets
summed over its partitions (less what the topic held before), polled every 50 ms with confluent-kafka, so a
record counts once Kafka has acknowledged it. ``seconds`` runs from the start of the server's process (JVM and
Quarkus start, connector start, slot creation included) to the poll that saw the expected count; ``startup_s``
is the time to the first record, so ``steady_records_per_s`` shows the rate without the start. Debezium's own
settings stay at their defaults (max.batch.size 2048, max.queue.size 8192, decimal.handling.mode precise,
time.precision.mode adaptive, the producer's defaults).

The broker of cdckit_lab.kafka_broker has auto.create.topics.enable=false and Debezium Server's Kafka sink does
not create topics, so ``run_debezium`` creates the topic first (``partitions``, replication factor 1).

Runtimes (``fetch_runtime``): a distribution is started as its run.sh starts it, from the work folder: 3.x's
run.sh puts config/lib on the classpath and Quarkus reads config/application.properties in the working folder;
2.x's run.sh puts conf/ on the classpath instead, so the properties go to conf/application.properties there.
Debezium Server 3.x needs Java 21 or newer (``required_java`` reads it from the jars' class files and
``find_java`` picks a JDK that fits); on Java 24+ it is started with ``--add-opens java.base/java.lang``, which
Quarkus's thread pool needs there. Maven Central, as reached here, has no ``debezium-server-dist`` 2.5.2.Final
(HTTP 404; its listing holds 3.0.0.Final and 3.6.0.Final only), so for such a release ``fetch_embedded`` has
Maven resolve ``debezium-embedded`` and ``debezium-connector-postgres`` of that release (needs ``mvn``; 67 jars,
31.5 MB, about 20 s the first time) and compiles ``CdckitDebeziumRunner``: Debezium's embedded engine, which Debezium
Server wraps, with Debezium Server's property names and its Kafka sink's behaviour (each batch sent, the
broker's acks awaited, then the records marked processed). The connector builds the records and JsonConverter
writes them in both, so the texts are the ones Debezium Server would write. 2.5.2 needs Java 11 and runs on the
default OpenJDK 17.

The self-check compares Debezium's records with cdckit's for the same changes, as parsed JSON
(``compare_envelopes``) and byte for byte (``text_differences``): the snapshot's first 20 records (``EDGE_ROWS``
first: timestamptz values ending in zero microseconds, NULLs, odd numerics and dates, text JSON must escape)
and its middle and last ones, built by cdckit's envelope code from the row as cdckit's snapshot reads it and
given Debezium's lsn, txId and ts_ms; then an insert, a delete (and its tombstone) and two update transactions,
decoded by cdckit's ChangeDecoder from a slot of its own, each record written with Debezium's record ts_ms.

Found against Debezium 2.5.2.Final, the release cdckit's format follows (decision 0002): what differed, what
cdckit changed to match it (the Envelope schema's version, timestamptz fraction widths, snapshot markers and
times, Jackson's escapes and float notation) and what still differs is in docs/decisions/0016;
tests/integration/test_debezium_compat.py checks it in CI.

Found against Debezium 3.6.0.Final, besides the above: ``ts_us``/``ts_ns`` in the envelope (after ``ts_ms``,
with ``transaction`` moved before ``op``) and in ``source`` (after ``sequence``), ``source.origin`` and
``origin_lsn``, ``source`` schema ``"version":1`` and Envelope ``"version":2``, ``snapshot`` allowing
"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental", ``source.version``
"3.6.0.Final", and its first streamed transaction's ``sequence`` ``[null,"<lsn>"]`` too. The column schemas and
the other values are the same.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg2

from cdckit.artifacts import cache_root, fetch
from cdckit_lab.embedded_postgres import free_port

VERSION = "3.6.0.Final"
FORMAT_VERSION = "2.5.2.Final"  # the release whose PostgreSQL message format cdckit reproduces (decision 0002)
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
POSTGRES_CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
STRING_SERIALIZER = "org.apache.kafka.common.serialization.StringSerializer"
EMBEDDED_MAIN = "CdckitDebeziumRunner"


class DebeziumServerError(RuntimeError):
    """Debezium Server could not be fetched, started, or did not deliver the expected records in time."""


class DistributionMissing(DebeziumServerError):
    """Maven Central answered 404 for ``debezium-server-dist:<version>:tar.gz``."""


def version_tuple(version: str) -> tuple[int, int]:
    """``version_tuple("2.5.2.Final") == (2, 5)``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if not found:
        raise ValueError(f"not a Debezium version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def snapshot_mode_for(version: str, mode: str) -> str:
    """``snapshot.mode`` as ``version`` names it: Debezium before 2.6 calls ``no_data`` ``never``."""
    return "never" if mode == "no_data" and version_tuple(version) < (2, 6) else mode


# -- the distribution ------------------------------------------------------------------------------------------
def dist_url(version: str = VERSION) -> str:
    """``io.debezium:debezium-server-dist:<version>:tar.gz`` on Maven Central."""
    return f"{MAVEN_CENTRAL}/io/debezium/debezium-server-dist/{version}/debezium-server-dist-{version}.tar.gz"


def fetch_server(version: str = VERSION) -> Path:
    """Debezium Server's home folder (the one holding ``run.sh`` and ``lib/``), downloaded from Maven Central and
    extracted into ``<cache>/debezium-server-<version>`` the first time, reused afterwards (``.complete`` marks a
    finished extraction; the download's size and time are kept in ``download.json``)."""
    folder = cache_root() / f"debezium-server-{version}"
    done = folder / ".complete"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        home = folder / "debezium-server"
        shutil.rmtree(home, ignore_errors=True)
        tarball = folder / "download.tar.gz.part"
        url = dist_url(version)
        print(f"fetching Debezium Server {version} from Maven Central (once, into {folder})", file=sys.stderr,
              flush=True)
        started = time.perf_counter()
        try:
            size = _download(url, tarball)
        except DistributionMissing:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        seconds = time.perf_counter() - started
        try:
            with tarfile.open(tarball, "r:gz") as archive:
                if sys.version_info >= (3, 11, 4):
                    archive.extractall(folder, filter="data")
                else:  # pragma: no cover - older interpreters lack extraction filters
                    archive.extractall(folder)
        finally:
            tarball.unlink(missing_ok=True)
        if not (home / "run.sh").exists():
            raise DebeziumServerError(f"{url} did not hold debezium-server/run.sh; see {folder}")
        (folder / "download.json").write_text(json.dumps({"url": url, "bytes": size, "seconds": round(seconds, 1)}))
        done.touch()
    return folder / "debezium-server"


def _download(url: str, target: Path) -> int:
    """Stream ``url`` into ``target``, checked against Maven Central's SHA-1; returns the size in bytes.
    Raises ``DistributionMissing`` when Maven Central has no such file (HTTP 404)."""
    try:
        with urllib.request.urlopen(url + ".sha1", timeout=60) as response:
            expected = response.read().decode().split()[0].strip().lower()
        digest = hashlib.sha1()  # Maven Central publishes SHA-1 checksums
        size = 0
        with urllib.request.urlopen(url, timeout=60) as response, target.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
    except urllib.error.HTTPError as error:
        target.unlink(missing_ok=True)
        if error.code == 404:
            raise DistributionMissing(f"{url}: not on Maven Central (HTTP 404)") from error
        raise DebeziumServerError(f"downloading {url} failed: {error}") from error
    except OSError as error:
        target.unlink(missing_ok=True)
        raise DebeziumServerError(f"downloading {url} failed: {error}") from error
    if digest.hexdigest() != expected:
        target.unlink(missing_ok=True)
        raise DebeziumServerError(f"{url}: SHA-1 {digest.hexdigest()} does not match Maven Central's {expected}")
    return size


def download_stats(version: str = VERSION) -> dict[str, Any]:
    """The size (bytes) and time (s) of the download, as ``fetch_server`` or ``fetch_embedded`` recorded them."""
    for kind in ("server", "embedded"):
        path = cache_root() / f"debezium-{kind}-{version}" / "download.json"
        if path.exists():
            stats: dict[str, Any] = json.loads(path.read_text())
            return stats
    return {}


# -- the embedded engine, for a release whose Debezium Server distribution Maven Central lacks ----------------
# Debezium Server is Quarkus around Debezium's embedded engine (DebeziumEngine) with a sink; this runner is the
# same engine with the Kafka sink's behaviour (send each batch, wait for the broker's acks, then mark the records
# processed) and the same property names, so the record texts are the ones Debezium Server would write: the
# connector builds the records and Kafka Connect's JsonConverter writes them in both.
EMBEDDED_RUNNER_SOURCE = r"""
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedWriter;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;

/** Debezium's embedded engine with a Kafka sink, configured by a Debezium Server application.properties; with
 * debezium.sink.type=file it writes each record instead as one JSON line {"topic", "key", "value"} (key and value
 * as the converters' texts, null for none) to debezium.sink.file.path. */
public final class CdckitDebeziumRunner {
    private static final String SOURCE = "debezium.source.";
    private static final String PRODUCER = "debezium.sink.kafka.producer.";
    private static final String KEY_FORMAT = "debezium.format.key.";
    private static final String VALUE_FORMAT = "debezium.format.value.";

    public static void main(String[] args) throws Exception {
        Properties all = new Properties();
        try (Reader reader = Files.newBufferedReader(Paths.get(args[0]))) {
            all.load(reader);
        }
        for (String format : new String[] {"debezium.format.key", "debezium.format.value"}) {
            if (!"json".equals(all.getProperty(format, "json"))) {
                throw new IllegalArgumentException(format + ": this runner writes json only");
            }
        }
        Properties engineProperties = new Properties();
        Properties producerProperties = new Properties();
        for (String name : all.stringPropertyNames()) {
            String value = all.getProperty(name);
            if (name.startsWith(SOURCE)) {
                engineProperties.setProperty(name.substring(SOURCE.length()), value);
            } else if (name.startsWith(PRODUCER)) {
                producerProperties.setProperty(name.substring(PRODUCER.length()), value);
            } else if (name.startsWith(KEY_FORMAT)) {
                engineProperties.setProperty("key.converter." + name.substring(KEY_FORMAT.length()), value);
            } else if (name.startsWith(VALUE_FORMAT)) {
                engineProperties.setProperty("value.converter." + name.substring(VALUE_FORMAT.length()), value);
            }
        }
        engineProperties.putIfAbsent("name", "kafka");  // Debezium Server names the engine after its sink
        boolean toFile = "file".equals(all.getProperty("debezium.sink.type"));
        KafkaProducer<String, String> producer = toFile ? null : new KafkaProducer<>(producerProperties);
        BufferedWriter file = toFile ? Files.newBufferedWriter(Paths.get(all.getProperty("debezium.sink.file.path")),
                StandardCharsets.UTF_8) : null;
        ObjectMapper json = new ObjectMapper();
        CountDownLatch done = new CountDownLatch(1);
        AtomicBoolean failed = new AtomicBoolean(false);
        AtomicBoolean stopping = new AtomicBoolean(false);
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(engineProperties)
                .notifying((records, committer) -> {
                    if (file != null) {
                        for (ChangeEvent<String, String> record : records) {
                            write(file, json, record);
                            committer.markProcessed(record);
                        }
                        write(file, json, null);
                        committer.markBatchFinished();
                        return;
                    }
                    List<Future<RecordMetadata>> sent = new ArrayList<>(records.size());
                    for (ChangeEvent<String, String> record : records) {
                        sent.add(producer.send(new ProducerRecord<>(record.destination(), record.key(),
                                record.value())));
                    }
                    for (Future<RecordMetadata> future : sent) {
                        try {
                            future.get();
                        } catch (ExecutionException error) {
                            throw new IllegalStateException("Kafka did not take a record", error.getCause());
                        }
                    }
                    for (ChangeEvent<String, String> record : records) {
                        committer.markProcessed(record);
                    }
                    committer.markBatchFinished();
                })
                .using((success, message, error) -> {
                    if (!success) {
                        failed.set(true);
                        System.err.println("Debezium engine stopped: " + message);
                        if (error != null) {
                            error.printStackTrace();
                        }
                    }
                    done.countDown();
                })
                .build();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            try {
                engine.close();  // stops the connector and commits its offsets
                done.await(30, TimeUnit.SECONDS);
            } catch (Exception error) {
                error.printStackTrace();
            }
            close(producer, file);
        }));
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        done.await();
        if (!stopping.get()) {
            executor.shutdown();
            close(producer, file);
            System.exit(failed.get() ? 1 : 0);
        }
    }

    /** One record as a JSON line, or (record null) a flush. */
    private static void write(BufferedWriter file, ObjectMapper json, ChangeEvent<String, String> record) {
        try {
            if (record == null) {
                file.flush();
                return;
            }
            ObjectNode line = json.createObjectNode();
            line.put("topic", record.destination());
            line.put("key", record.key());
            line.put("value", record.value());
            file.write(json.writeValueAsString(line));
            file.write('\n');
        } catch (java.io.IOException error) {
            throw new java.io.UncheckedIOException(error);
        }
    }

    private static void close(KafkaProducer<String, String> producer, BufferedWriter file) {
        try {
            if (producer != null) {
                producer.close(Duration.ofSeconds(10));
            }
            if (file != null) {
                file.close();
            }
        } catch (Exception error) {
            error.printStackTrace();
        }
    }
}
"""


def fetch_embedded(version: str) -> Path:
    """A home folder (``lib/`` with Debezium's embedded engine, the PostgreSQL connector and their dependencies
    as Maven resolves them from Maven Central, through cdckit.artifacts, plus slf4j-simple for a log; ``classes/``
    with the runner compiled) in ``<cache>/debezium-embedded-<version>``, made the first time and reused
    afterwards (``.complete`` marks a finished one; the jars' size and the time taken are kept in
    ``download.json``)."""
    folder = cache_root() / f"debezium-embedded-{version}"
    home = folder / "runner"
    done = folder / ".complete"
    if done.exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    print(f"fetching Debezium {version}'s embedded engine and PostgreSQL connector from Maven Central with mvn "
          f"(once, into {cache_root()})", file=sys.stderr, flush=True)
    started = time.perf_counter()
    jars = fetch(f"debezium-embedded-{version}-jars", [("io.debezium", "debezium-embedded", version, ()),
                                                       ("io.debezium", "debezium-connector-postgres", version, ())])
    api = next((jar for jar in jars if jar.name.startswith("slf4j-api-")), None)
    if api is not None:  # a binding of the same release, so the engine's log is written
        slf4j = api.name[len("slf4j-api-"):-len(".jar")]
        jars += fetch(f"slf4j-simple-{slf4j}", [("org.slf4j", "slf4j-simple", slf4j, ())], keep=("slf4j-simple",))
    lib = home / "lib"
    lib.mkdir()
    for jar in jars:
        (lib / jar.name).symlink_to(jar)
    seconds = time.perf_counter() - started
    runner_classes(home, version)
    (folder / "download.json").write_text(json.dumps({"via": "cdckit.artifacts.fetch (mvn)", "jars": len(jars),
                                                      "bytes": sum(jar.stat().st_size for jar in jars),
                                                      "seconds": round(seconds, 1)}))
    done.touch()
    return home


def runner_classes(home: Path, version: str) -> Path:
    """The runner compiled against ``home/lib``, in a folder named after its source's hash (compiled when that
    folder is missing, so a changed runner is compiled again)."""
    digest = hashlib.sha256(EMBEDDED_RUNNER_SOURCE.encode()).hexdigest()[:12]
    classes = home / f"classes-{digest}"
    if (classes / f"{EMBEDDED_MAIN}.class").exists():
        return classes
    java, _ = find_java(required_java(home), f"Debezium {version}")
    javac = java.parent / "javac"
    if not javac.exists():
        raise DebeziumServerError(f"{javac} not found: compiling the embedded runner needs a JDK, not only a JRE")
    source = home / "src" / digest / f"{EMBEDDED_MAIN}.java"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(EMBEDDED_RUNNER_SOURCE)
    compiled = subprocess.run([str(javac), "--release", str(required_java(home)), "-cp", str(home / "lib" / "*"),
                               "-d", str(classes), str(source)], capture_output=True, text=True, timeout=300)
    if compiled.returncode != 0:
        shutil.rmtree(classes, ignore_errors=True)
        raise DebeziumServerError(f"compiling {source} failed:\n{compiled.stdout}{compiled.stderr}")
    return classes


@dataclass(frozen=True)
class Runtime:
    """What runs a Debezium release: ``server``, the Debezium Server distribution (``home`` holds run.sh), or
    ``embedded``, Debezium's embedded engine with this module's runner (for releases whose distribution Maven
    Central lacks, such as 2.5.2.Final)."""

    version: str
    kind: str
    home: Path


def fetch_runtime(version: str = VERSION, kind: str | None = None) -> Runtime:
    """The Debezium Server distribution of ``version`` or, when Maven Central has none, its embedded engine;
    ``kind`` asks for one: ``embedded`` (Debezium 3.x's runs on Java 17, its server needs 21) or ``server``."""
    if kind == "server":
        return Runtime(version, "server", fetch_server(version))
    if kind == "embedded" or (cache_root() / f"debezium-embedded-{version}" / ".complete").exists():
        return Runtime(version, "embedded", fetch_embedded(version))
    try:
        return Runtime(version, "server", fetch_server(version))
    except DistributionMissing as missing:
        print(f"{missing}; running Debezium {version}'s embedded engine instead", file=sys.stderr, flush=True)
        return Runtime(version, "embedded", fetch_embedded(version))


# -- Java ------------------------------------------------------------------------------------------------------
def required_java(home: Path) -> int:
    """The lowest Java feature release that runs the distribution: read from the class-file version of the
    Debezium Server and PostgreSQL connector jars (major version - 44)."""
    needed = 0
    for pattern in ("debezium-server-core-*.jar", "debezium-connector-postgres-*.jar", "debezium-core-*.jar"):
        for jar in (home / "lib").glob(pattern):
            with zipfile.ZipFile(jar) as archive:
                name = next((n for n in archive.namelist()
                             if n.endswith(".class") and not n.startswith(("META-INF/", "module-info"))), None)
                if name is not None:
                    header = archive.read(name)[:8]
                    needed = max(needed, int.from_bytes(header[6:8], "big") - 44)
    if needed == 0:
        raise DebeziumServerError(f"no Debezium jar found in {home / 'lib'} to tell which Java it needs")
    return needed


def _java_version(java_home: Path) -> int | None:
    release = java_home / "release"
    if release.exists():
        found = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?', release.read_text(), flags=re.MULTILINE)
        if found:
            major = int(found.group(1))
            return int(found.group(2) or 0) if major == 1 else major
    java = java_home / "bin" / "java"
    if not java.exists():
        return None
    try:
        result = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def find_java(minimum: int, for_what: str = f"Debezium Server {VERSION}") -> tuple[Path, int]:
    """A ``java`` executable of release ``minimum`` or newer, and its release: ``$JAVA_HOME`` first, then the
    ``java`` on the PATH, then the lowest fitting JDK under /usr/lib/jvm."""
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path).resolve().parent.parent)
    jvm_root = Path("/usr/lib/jvm")
    installed = sorted((p.resolve() for p in jvm_root.iterdir() if (p / "bin" / "java").exists())
                       if jvm_root.is_dir() else [], key=lambda p: (_java_version(p) or 0, str(p)))
    candidates.extend(installed)
    seen: list[str] = []
    for home in dict.fromkeys(candidates):
        version = _java_version(home)
        seen.append(f"{home} ({version or 'unknown'})")
        if version is not None and version >= minimum and (home / "bin" / "java").exists():
            return home / "bin" / "java", version
    raise DebeziumServerError(
        f"{for_what} needs Java {minimum} or newer; found {', '.join(seen) or 'no Java'}. Install "
        f"one (Debian: apt-get install openjdk-{minimum}-jre-headless) or point JAVA_HOME at one")


# -- Kafka -----------------------------------------------------------------------------------------------------
def ensure_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` (replication factor 1) unless it exists."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    if topic in admin.list_topics(timeout=10).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(30)
    except Exception as error:  # TOPIC_ALREADY_EXISTS from a concurrent creator is fine
        if "already exists" not in str(error).lower():
            raise
    deadline = time.monotonic() + 30  # a new topic's metadata, and its partitions' leaders, come a moment later
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (metadata is not None and metadata.error is None and len(metadata.partitions) == partitions
                and all(each.error is None and each.leader >= 0 for each in metadata.partitions.values())):
            return
        time.sleep(0.1)
    raise DebeziumServerError(f"topic {topic} was created but its {partitions} partitions had no leader in the "
                              f"broker's metadata after 30 s")


class EndOffsets:
    """The sum over a topic's partitions of their end offsets (high watermarks): the records it holds."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dbz-bench-{os.getpid()}",
                                  "enable.auto.commit": False, "log_level": 3})
        metadata = self.consumer.list_topics(topic, timeout=10).topics[topic]
        if metadata.error is not None:
            raise DebeziumServerError(f"topic {topic}: {metadata.error}")
        self.partitions = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]

    def total(self) -> int:
        from confluent_kafka import KafkaError, KafkaException

        deadline = time.monotonic() + 30
        while True:
            try:
                return sum(self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                           for tp in self.partitions)
            except KafkaException as error:  # a partition between leaders (a new topic's, moments after creation)
                code = error.args[0].code() if error.args else None
                if code not in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE) or \
                        time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        self.consumer.close()


def read_records(bootstrap: str, topic: str, offset: int = 0, count: int = 1, partition: int = 0,
                 timeout_s: float = 30.0) -> list[tuple[str | None, str | None]]:
    """``count`` records (key, value text) of one partition of ``topic`` from ``offset``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dbz-bench-read-{os.getpid()}",
                         "enable.auto.commit": False, "log_level": 3})
    found: list[tuple[str | None, str | None]] = []
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout_s
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            key, value = message.key(), message.value()
            found.append((None if key is None else key.decode(), None if value is None else value.decode()))
    finally:
        consumer.close()
    return found


# -- PostgreSQL ------------------------------------------------------------------------------------------------
def _connect(dsn_properties: Mapping[str, str]) -> Any:
    conn = psycopg2.connect(host=dsn_properties["database.hostname"], port=int(dsn_properties["database.port"]),
                            user=dsn_properties["database.user"], password=dsn_properties["database.password"],
                            dbname=dsn_properties["database.dbname"], connect_timeout=10)
    conn.autocommit = True
    return conn


def slot_active(dsn_properties: Mapping[str, str], slot: str) -> bool:
    conn = _connect(dsn_properties)
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
    conn = _connect(dsn_properties)
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


# -- comparing records with cdckit's ---------------------------------------------------------------------------
def _cdckit_options(dsn_properties: Mapping[str, str], topic_prefix: str, **extra: str) -> dict[str, str]:
    from cdckit.config.properties import POSTGRES_CONNECTOR

    return {"topic.prefix": topic_prefix, "connector.class": POSTGRES_CONNECTOR,
            **{key: str(value) for key, value in dsn_properties.items() if key.startswith("database.")}, **extra}


def cdckit_snapshot_texts(dsn_properties: Mapping[str, str], schema: str, table: str, key_ids: list[int], *,
                          lsn: int, tx_id: int | None, source_ts_ms: int, processed_ts_ms: int,
                          first_id: int | None = None, last_id: int | None = None, topic_prefix: str = "bench"
                          ) -> dict[int, tuple[str | None, str]]:
    """cdckit's key and value texts for snapshot reads of the rows ``key_ids``, built without Spark as its
    snapshot builds them (cdckit.spark.sources.postgres_snapshot): the row as PostgreSQL's text output on a cdckit
    connection, ``op`` r, ``source.lsn`` the snapshot's LSN and ``source.sequence`` ``[null, "<lsn>"]``,
    ``txId`` the snapshot transaction's, ``snapshot`` "first" for the table's first row (``first_id``), "last"
    for its last row (``last_id``, which wins for a table of one row) and "true" for the others. The LSN, txId
    and both ts_ms are given (a comparison passes Debezium's), so that the texts can be compared with
    Debezium's byte for byte."""
    from cdckit.dialect.postgres.catalog import load_table
    from cdckit.dialect.postgres.connection import connect
    from cdckit.events import ChangeEvent, Position
    from cdckit.formats.debezium.envelope import TableFormat, format_settings

    options = _cdckit_options(dsn_properties, topic_prefix)
    conn = connect(options)
    try:
        info = load_table(conn, schema, table, options)
        columns = [column.name for column in info.columns]
        with conn.cursor() as cur:
            selected = ", ".join(f'"{name}"' for name in columns)
            cur.execute(f'SELECT {selected} FROM "{schema}"."{table}" WHERE id = ANY(%s)', (key_ids,))
            rows = [dict(zip(columns, values, strict=True)) for values in cur.fetchall()]
        conn.rollback()
    finally:
        conn.close()
    table_format = TableFormat(info, format_settings(options))
    texts: dict[int, tuple[str | None, str]] = {}
    for row in rows:
        key_id = int(str(row["id"]))
        event = ChangeEvent(schema, table, "r", None, row, Position(lsn, lsn, 0), source_ts_ms, tx_id,
                            snapshot="last" if key_id == last_id else "first" if key_id == first_id else "true",
                            sequence=(None, lsn))
        texts[key_id] = (table_format.key_json(row), table_format.value_json(event, processed_ts_ms))
    missing = set(key_ids) - set(texts)
    if missing:
        raise DebeziumServerError(f"no rows with ids {sorted(missing)} in {schema}.{table}")
    return texts


def cdckit_envelope(dsn_properties: Mapping[str, str], schema: str, table: str, key_id: int,
                    topic_prefix: str = "bench", op: str = "r") -> dict[str, Any]:
    """cdckit's value message (schema and payload) for one snapshot row, LSN and txId left at 0 and None."""
    if op != "r":
        raise ValueError("cdckit_envelope builds snapshot reads; stream changes come from cdckit_stream_events")
    now = int(time.time() * 1000)
    (_, text), = cdckit_snapshot_texts(dsn_properties, schema, table, [key_id], lsn=0, tx_id=None,
                                       source_ts_ms=now, processed_ts_ms=now, topic_prefix=topic_prefix).values()
    message: dict[str, Any] = json.loads(text)
    return message


def create_comparison_slot(dsn_properties: Mapping[str, str], slot: str, tables: str) -> None:
    """A pgoutput slot and a publication ``FOR TABLE tables``, both named ``slot``, whose changes
    ``cdckit_stream_events`` decodes as cdckit's stream does (created before the changes to compare)."""
    _sql(dsn_properties, f'CREATE PUBLICATION "{slot}" FOR TABLE {tables}',
         f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")


def cdckit_stream_events(dsn_properties: Mapping[str, str], slot: str, schema: str, table: str,
                         max_changes: int, topic_prefix: str = "bench") -> list[tuple[Any, Any]]:
    """cdckit's change events (and the TableFormat that writes them) for the first transactions pending on the
    comparison ``slot``, decoded without Spark by cdckit's own ChangeDecoder from a peek of the slot (as
    cdckit.spark.sources.postgres_stream does, from the slot's confirmed_flush_lsn); whole transactions, until
    ``max_changes`` changes are reached."""
    from cdckit.dialect.postgres import pgoutput
    from cdckit.dialect.postgres.catalog import TableInfo, table_from_relation
    from cdckit.dialect.postgres.connection import connect
    from cdckit.dialect.postgres.decoder import ChangeDecoder
    from cdckit.dialect.postgres.lsn import parse_lsn
    from cdckit.dialect.postgres.peek import as_bytes
    from cdckit.dialect.postgres.pending import peek_options
    from cdckit.formats.debezium.envelope import TableFormat, format_settings

    options = _cdckit_options(dsn_properties, topic_prefix, **{"slot.name": slot, "publication.name": slot})
    settings = format_settings(options)
    conn = connect(options)
    formats: dict[tuple[str, str], Any] = {}
    try:
        def table_for(relation: pgoutput.Relation) -> TableInfo | None:
            if (relation.namespace, relation.name) != (schema, table):
                return None
            info = table_from_relation(conn, relation.namespace, relation.name, relation.relation_id,
                                       [(c.name, c.type_oid, c.type_modifier) for c in relation.columns], options)
            formats[(info.schema, info.name)] = TableFormat(info, settings)
            return info

        with conn.cursor() as cur:
            cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            found = cur.fetchone()
            if found is None:
                raise DebeziumServerError(f"no slot {slot}")
            decoder = ChangeDecoder(parse_lsn(str(found[0])), 2**64 - 1, table_for)
            cur.execute("SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, "
                        "VARIADIC %s)", (slot, max_changes, peek_options(options)))
            peeked = cur.fetchall()
        conn.rollback()
        events: list[tuple[Any, Any]] = []
        for lsn_text, data in peeked:
            for event in decoder.feed(parse_lsn(str(lsn_text)), as_bytes(data)):
                if event.op in ("c", "u", "d"):
                    events.append((event, formats[(event.schema, event.table)]))
        return events
    finally:
        conn.close()


def snapshot_positions(dsn_properties: Mapping[str, str], slot: str = "cdckit_snapshot_check") -> dict[str, Any]:
    """The position a snapshot reports, taken both ways at the same moment: cdckit's (``lsn`` the consistent
    point of a slot created with an exported snapshot, ``txId`` that snapshot's xmin, as cdckit.pipelines.postgres and
    cdckit.spark.sources.postgres_snapshot take them) and Debezium 2.5's (inside the transaction that adopted the
    exported snapshot, ``pg_current_wal_lsn()`` and ``txid_current()``, as its log's "Read xlogStart at ... from
    transaction ..." reports). The slot is dropped afterwards."""
    from cdckit.dialect.postgres.connection import connect
    from cdckit.dialect.postgres.lsn import parse_lsn
    from cdckit.dialect.postgres.replication import create_slot_exporting_snapshot

    options = _cdckit_options(dsn_properties, "bench", **{"slot.name": slot})
    exported = create_slot_exporting_snapshot(options)
    try:
        conn = connect(options)
        try:
            conn.set_session(isolation_level="REPEATABLE READ")
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (exported.snapshot_name,))
                cur.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text, pg_current_wal_lsn()::text, "
                            "txid_current()::text")
                xmin, current_lsn, current_txid = cur.fetchone()
            conn.rollback()
        finally:
            conn.close()
    finally:
        exported.release()
        drop_slot(dsn_properties, slot)
    return {"cdckit": {"lsn": exported.consistent_point, "txId": int(xmin)},
            "debezium_2_5": {"lsn": parse_lsn(str(current_lsn)), "txId": int(current_txid)}}


def _fields(schema: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = next(f for f in schema["fields"] if f["field"] == name)["fields"]
    return fields


def compare_envelopes(debezium: Mapping[str, Any], cdckit: Mapping[str, Any]) -> list[str]:
    """Differences in field order, schemas, source values and row values between two value messages of the
    same change."""
    notes: list[str] = []
    d_top = [f["field"] for f in debezium["schema"]["fields"]]
    c_top = [f["field"] for f in cdckit["schema"]["fields"]]
    if d_top != c_top:
        notes.append(f"envelope fields: Debezium {d_top} / cdckit {c_top}")
    if list(debezium["payload"]) != list(cdckit["payload"]):
        notes.append(f"envelope payload keys: Debezium {list(debezium['payload'])} / cdckit {list(cdckit['payload'])}")
    d_src = [f["field"] for f in _fields(debezium["schema"], "source")]
    c_src = [f["field"] for f in _fields(cdckit["schema"], "source")]
    if d_src != c_src:
        notes.append(f"source fields: Debezium {d_src} / cdckit {c_src}")
    d_src_schema = {f["field"]: f for f in _fields(debezium["schema"], "source")}
    c_src_schema = {f["field"]: f for f in _fields(cdckit["schema"], "source")}
    for name in d_src_schema:
        if name in c_src_schema and d_src_schema[name] != c_src_schema[name]:
            notes.append(f"source schema of {name}: Debezium {json.dumps(d_src_schema[name])} / cdckit "
                         f"{json.dumps(c_src_schema[name])}")
    for name in ("op", "ts_ms", "transaction"):
        if debezium["payload"].get(name) != cdckit["payload"].get(name):
            notes.append(f"payload.{name}: Debezium {debezium['payload'].get(name)!r} / cdckit "
                         f"{cdckit['payload'].get(name)!r}")
    d_payload_src, c_payload_src = debezium["payload"]["source"], cdckit["payload"]["source"]
    for name in dict.fromkeys([*d_payload_src, *c_payload_src]):
        if d_payload_src.get(name) != c_payload_src.get(name):
            notes.append(f"source.{name}: Debezium {d_payload_src.get(name)!r} / cdckit {c_payload_src.get(name)!r}")
    d_cols = {f["field"]: f for f in _fields(debezium["schema"], "after")}
    c_cols = {f["field"]: f for f in _fields(cdckit["schema"], "after")}
    if list(d_cols) != list(c_cols):
        notes.append(f"row fields: Debezium {list(d_cols)} / cdckit {list(c_cols)}")
    for name in d_cols:
        if name in c_cols and d_cols[name] != c_cols[name]:
            notes.append(f"schema of {name}: Debezium {json.dumps(d_cols[name])} / cdckit {json.dumps(c_cols[name])}")
        if name in c_cols and list(d_cols[name]) != list(c_cols[name]):
            notes.append(f"key order in the schema of {name}: Debezium {list(d_cols[name])} / cdckit "
                         f"{list(c_cols[name])}")
    for part in ("before", "after"):
        d_row, c_row = debezium["payload"][part], cdckit["payload"][part]
        if (d_row is None) != (c_row is None):
            notes.append(f"payload.{part}: Debezium {d_row!r} / cdckit {c_row!r}")
            continue
        for name in d_row or {}:
            if d_row.get(name) != (c_row or {}).get(name):
                notes.append(f"value of {name}: Debezium {d_row.get(name)!r} / cdckit {(c_row or {}).get(name)!r}")
    return notes


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s"{}\[\]:,]+|[{}\[\]:,]|\s+')


def text_differences(debezium: str | None, cdckit: str | None, context: int = 6) -> list[str]:
    """Where two message texts differ, compared as sequences of JSON tokens (strings, numbers, literals,
    punctuation, character for character within each): each differing stretch in brackets with ``context``
    tokens before it and a few after, as ``Debezium's text / cdckit's text``; empty when the texts are equal."""
    return [text for _, text in _differences(debezium, cdckit, context)]


def _differences(debezium: str | None, cdckit: str | None, context: int = 6) -> list[tuple[str, str]]:
    """``text_differences`` with the kind of each: the JSON key it falls under and the differing stretches with
    their digits masked, to count like differences of different rows together."""
    if debezium is None or cdckit is None:
        return [] if debezium == cdckit else [("null", f"{debezium!r} / {cdckit!r}")]
    if debezium == cdckit:
        return []
    d_tokens, c_tokens = _JSON_TOKEN.findall(debezium), _JSON_TOKEN.findall(cdckit)
    found: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(None, d_tokens, c_tokens, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        before = "".join(d_tokens[max(0, i1 - context):i1])
        d_part, c_part = "".join(d_tokens[i1:i2]), "".join(c_tokens[j1:j2])
        d_after, c_after = "".join(d_tokens[i2:i2 + 2]), "".join(c_tokens[j2:j2 + 2])
        key = next((d_tokens[k - 1] for k in range(i1, 0, -1) if d_tokens[k] == ":" and k >= 1), "")
        kind = re.sub(r"\d", "9", f"{key}:{d_part}/{c_part}")
        found.append((kind, f"…{before}[{d_part}]{d_after}… / …{before}[{c_part}]{c_after}…"))
    return found


def excerpt(value_text: str) -> str:
    """A compact view of a value message: the row schema's field types, then the payload."""
    value = json.loads(value_text)
    types = ", ".join(f"{f['field']}:{f['type']}" + (f"/{f['name']}" if "name" in f else "")
                      for f in _fields(value["schema"], "after"))
    payload = {key: item for key, item in value["payload"].items() if key != "before" or item is not None}
    return f"after schema: {types}\npayload: {json.dumps(payload, separators=(',', ':'))}"


# -- quick self-check ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _lab(root: Path) -> Iterator[tuple[Any, Any]]:
    from cdckit_lab.embedded_postgres import EmbeddedPostgres
    from cdckit_lab.kafka_broker import KafkaBroker

    pg = EmbeddedPostgres(root / "pg", password=secrets.token_urlsafe(18)).start()  # never printed
    try:
        broker = KafkaBroker(root / "kafka").start()
        try:
            yield pg, broker
        finally:
            broker.stop()
    finally:
        pg.stop()


# Rows 1.. of the self-check's table, the first a snapshot reads: timestamptz values whose microseconds end in
# zeros (.120000, .000000, .100000), use all six digits or just one microsecond, lie before the epoch or were
# written with another offset; NULLs in every nullable column; numeric(12,2) zero, negative and at its maximum;
# dates far from the epoch; text that JSON must escape, and a character outside the Basic Multilingual Plane.
EDGE_ROWS = (
    "(1, 'edge-1', 12.30, '2024-03-05 10:20:05.120000+00', DATE '2024-03-05', true, "
    "'00000000-0000-0000-0000-000000000000', 'plain')",
    "(2, 'edge-2', 0.00, '2024-03-05 10:20:05.000000+00', NULL, NULL, NULL, NULL)",
    r"(3, 'edge-3', -1.50, '2024-03-05 10:20:05.100000+00', DATE '1969-12-31', false, "
    r"'ffffffff-ffff-ffff-ffff-ffffffffffff', E'quote \" backslash \\ tab \t newline \n cr \r ctl \x01 del \x7f')",
    "(4, 'edge-4', 9999999997.99, '2024-03-05 10:20:05.123456+00', DATE '0001-01-01', true, "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '')",
    "(5, 'edge-5', -0.01, '2024-03-05 10:20:05.000001+00', DATE '9999-12-31', false, NULL, "
    "'é ü 中文 😀 \u2028 </script>')",
    "(6, 'edge-6', 100.00, '1969-12-31 23:59:59.500000+00', DATE '1970-01-01', NULL, NULL, 'before the epoch')",
    "(7, 'edge-7', 0.10, '2024-03-05 12:20:05.12+02', DATE '2024-02-29', true, NULL, 'written at +02')",
)


def _sql(dsn_properties: Mapping[str, str], *statements: str) -> None:
    with contextlib.closing(_connect(dsn_properties)) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _show(label: str, result: Mapping[str, Any]) -> None:
    shown = {key: round(value, 2) if isinstance(value, float) else value for key, value in result.items()}
    print(f"{label}: {json.dumps(shown)}", flush=True)


class _Tally:
    """Differences over many record pairs: each note once, with how many records showed it."""

    def __init__(self) -> None:
        self.pairs = 0
        self.identical = 0
        self.notes: dict[str, list[str]] = {}
        self.bytes: dict[str, tuple[str, int]] = {}  # by the difference with its digits masked: example, count

    def add(self, debezium: tuple[str | None, str | None], cdckit: tuple[str | None, str | None]) -> None:
        """One pair of records (key and value texts; a tombstone's value is None)."""
        self.pairs += 1
        d_key, d_value = debezium
        c_key, c_value = cdckit
        if d_key == c_key and d_value == c_value:
            self.identical += 1
        if d_value is not None and c_value is not None:
            for note in compare_envelopes(json.loads(d_value), json.loads(c_value)):
                group = note.split(":")[0] if note.startswith(("value of", "source.", "payload.")) else note
                self.notes.setdefault(group, []).append(note)
        for where, d_text, c_text in (("key", d_key, c_key), ("value", d_value, c_value)):
            for kind, difference in _differences(d_text, c_text):
                example, count = self.bytes.get(f"{where}:{kind}", (f"{where}: {difference}", 0))
                self.bytes[f"{where}:{kind}"] = (example, count + 1)

    def show(self, label: str, limit: int = 25) -> None:
        print(f"{label}: {self.identical} of {self.pairs} records byte-identical (key and value); differences "
              f"(Debezium / cdckit):")
        for found in list(self.notes.values()) or [["none"]]:
            print(f"  - {found[0]}" + (f" ({len(found)} of {self.pairs} records)" if len(found) > 1 else ""))
        print("  texts compared byte for byte ([...] marks what differs; one example of each kind, digits aside):")
        for text, count in list(self.bytes.values())[:limit]:
            print(f"  - {text}" + (f" ({count} of {self.pairs} records)" if count > 1 else ""))
        if len(self.bytes) > limit:
            print(f"  - ... {len(self.bytes) - limit} more")


def _source(value_text: str | None) -> dict[str, Any]:
    source: dict[str, Any] = json.loads(value_text or "{}")["payload"]["source"]
    return source


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import TABLE_DDL, TABLE_FILL

    rows = int(os.environ.get("DBZ_BENCH_ROWS", "50000"))
    version = os.environ.get("DBZ_BENCH_VERSION", VERSION)
    per_tx = 1000
    compare_rows = 20
    topic = "bench.public.orders"
    runtime = fetch_runtime(version)
    print(f"Debezium {version} ({'Debezium Server' if runtime.kind == 'server' else 'embedded engine'}) in "
          f"{runtime.home}; download {download_stats(version)}; cdckit writes Debezium {FORMAT_VERSION}'s format",
          flush=True)
    root = Path(tempfile.mkdtemp(prefix="cdckit-dbz-"))
    try:
        with _lab(root) as (pg, broker):
            db = pg.connector_properties("postgres")
            bootstrap = broker.bootstrap_servers
            _sql(db, "DROP TABLE IF EXISTS public.orders", TABLE_DDL.format(name="public.orders"),
                 f"INSERT INTO public.orders VALUES {', '.join(EDGE_ROWS)}",
                 TABLE_FILL.format(name="public.orders", start=len(EDGE_ROWS) + 1, end=rows),
                 "ANALYZE public.orders")

            def updates() -> None:
                for start in range(1, rows + 1, per_tx):
                    _sql(db, f"UPDATE public.orders SET note = 'changed', amount = amount + 1 WHERE id BETWEEN "
                             f"{start} AND {start + per_tx - 1}")

            snapshot = run_debezium(db, bootstrap, root / "snapshot", table_include="public\\.orders",
                                    snapshot_mode="initial", expected_records=rows, topic=topic,
                                    slot_name="dbz_bench_snapshot", publication_name="dbz_bench_snapshot",
                                    version=version)
            _show("snapshot", snapshot)
            records = read_records(bootstrap, topic, offset=0, count=compare_rows)
            key, value = records[0]
            print(f"first Debezium record: key {key}\n{excerpt(value or '{}')}")
            marks = {"first": 0, "second": 1, "middle": rows // 2, "last": rows - 1}
            sampled = {label: read_records(bootstrap, topic, offset=offset)[0] for label, offset in marks.items()}
            snapshot_tally = _Tally()
            cdckit_marks: dict[str, str] = {}
            for label, (d_key, d_value) in [*((str(i), r) for i, r in enumerate(records)), *sampled.items()]:
                if label.isdigit() and int(label) in (0, 1):
                    continue  # the same records as "first" and "second"
                debezium_value = json.loads(d_value or "{}")
                source = debezium_value["payload"]["source"]
                key_id = int(debezium_value["payload"]["after"]["id"])
                (c_key, c_value), = cdckit_snapshot_texts(
                    db, "public", "orders", [key_id], lsn=source["lsn"], tx_id=source["txId"],
                    source_ts_ms=source["ts_ms"], processed_ts_ms=debezium_value["payload"]["ts_ms"],
                    first_id=1, last_id=rows).values()
                if label in marks:
                    cdckit_marks[label] = _source(c_value)["snapshot"]
                    if label == "first":
                        print(f"cdckit's envelope for the same row:\n{excerpt(c_value)}")
                        print(f"source of the first snapshot record: Debezium {json.dumps(source)}\n"
                              f"                                     cdckit   {json.dumps(_source(c_value))}\n"
                              f"  (cdckit given Debezium's lsn, txId and ts_ms, as its own snapshot has its own)")
                snapshot_tally.add((d_key, d_value), (c_key, c_value))
            print("source.snapshot by position (Debezium / cdckit): " + ", ".join(
                f"{label} {_source(sampled[label][1])['snapshot']!r} / {cdckit_marks[label]!r}" for label in marks))
            record_ts = {label: json.loads(text or "{}")["payload"]["ts_ms"] for label, (_, text) in sampled.items()}
            print("Debezium's source.ts_ms (and the record's ts_ms) by position: " + ", ".join(
                f"{label} {_source(sampled[label][1])['ts_ms']} ({record_ts[label]})" for label in marks)
                + "; cdckit's source.ts_ms is each row's read time (postgres_snapshot's now_ms())")
            snapshot_tally.show(f"snapshot: the first {compare_rows} records (ids 1-{len(EDGE_ROWS)} are the "
                                f"EDGE_ROWS) and the middle and last ones")
            print(f"a snapshot's source.lsn and txId, both ways at one moment: {json.dumps(snapshot_positions(db))}")

            def live_changes() -> None:  # an insert and a delete (and its tombstone), then the updates
                _sql(db, f"INSERT INTO public.orders VALUES ({rows + 1}, 'inserted', 1.05, "
                         f"'2024-03-05 10:20:05.120000+00', NULL, true, NULL, 'inserted')",
                     f"DELETE FROM public.orders WHERE id = {rows + 1}")
                updates()

            comparison_slot = "cdckit_compare"
            create_comparison_slot(db, comparison_slot, "public.orders")
            try:
                live = run_debezium(db, bootstrap, root / "stream-live", table_include="public\\.orders",
                                    snapshot_mode="no_data", expected_records=rows + 3, topic=topic,
                                    slot_name="dbz_bench_live", publication_name="dbz_bench_live",
                                    on_streaming=live_changes, version=version)
                _show("stream (an insert, a delete and updates applied while streaming)", live)
                stream_records = read_records(bootstrap, topic, offset=live["first_offset"], count=3 + 2 * per_tx)
                ours: dict[tuple[int, int, bool], tuple[Any, Any]] = {}
                for event, table_format in cdckit_stream_events(db, comparison_slot, "public", "orders",
                                                                2 + 2 * per_tx):
                    key_id = int(str((event.after if event.op in ("c", "u") else event.before or {})["id"]))
                    ours[(event.position.lsn, key_id, False)] = (event, table_format)
                    if event.op == "d":  # cdckit writes a tombstone after each delete (tombstones.on.delete)
                        ours[(event.position.lsn, key_id, True)] = (event, table_format)
            finally:
                drop_slot(db, comparison_slot, comparison_slot)
            stream_tally = _Tally()
            shown_tx: list[Any] = []
            lsn = 0
            for d_key, d_value in stream_records:
                key_id = int(json.loads(d_key or "{}")["payload"]["id"])
                payload = json.loads(d_value)["payload"] if d_value is not None else None
                if payload is not None:
                    lsn = payload["source"]["lsn"]
                match = ours.get((lsn, key_id, payload is None))
                if match is None:
                    print(f"no cdckit record for Debezium's {'tombstone' if payload is None else payload['op']} "
                          f"at lsn {lsn}, id {key_id}")
                    continue
                event, table_format = match
                c_key = table_format.key_json(event.after if event.op in ("c", "u") else event.before or {})
                c_text = None if payload is None else table_format.value_json(event, payload["ts_ms"])
                if payload is not None and payload["op"] != "u":
                    print(f"{payload['op']} record: Debezium before {json.dumps(payload['before'])}, after "
                          f"{json.dumps(payload['after'])}\n{' ' * 11}cdckit   before "
                          f"{json.dumps(json.loads(c_text or '{}')['payload']['before'])}, after "
                          f"{json.dumps(json.loads(c_text or '{}')['payload']['after'])}")
                if payload is not None and payload["op"] == "u" and payload["source"]["txId"] not in shown_tx:
                    shown_tx.append(payload["source"]["txId"])
                    print(f"source of update transaction {len(shown_tx)}'s first record: Debezium "
                          f"{json.dumps(payload['source'])}\n{' ' * 43}cdckit   {json.dumps(_source(c_text))}")
                stream_tally.add((d_key, d_value), (c_key, c_text))
            stream_tally.show(f"stream: the first {len(stream_records)} records (insert, delete, tombstone, two "
                              f"update transactions), cdckit's decoded by its ChangeDecoder from a slot of its own")
            update = json.loads(stream_records[3][1] or "{}")
            print(f"first update record: op {update['payload']['op']}, before {update['payload']['before']}, "
                  f"after.note {update['payload']['after']['note']!r}, after.amount "
                  f"{update['payload']['after']['amount']!r}")

            # As bench/run.py's measure_stream times cdckit: slot first, changes next, then the capture alone.
            backlog_dir = root / "stream-backlog"
            create_slot(db, bootstrap, backlog_dir, table_include="public\\.orders", topic=topic,
                        slot_name="dbz_bench_backlog", publication_name="dbz_bench_backlog", version=version)
            updates()
            backlog = run_debezium(db, bootstrap, backlog_dir, table_include="public\\.orders",
                                   snapshot_mode="no_data", expected_records=rows, topic=topic,
                                   slot_name="dbz_bench_backlog", publication_name="dbz_bench_backlog",
                                   version=version)
            _show("stream (backlog of updates, server started after them)", backlog)
            (_, backlog_text), = read_records(bootstrap, topic, offset=backlog["first_offset"])
            print(f"source of the backlog's first record: Debezium {json.dumps(_source(backlog_text))}")
            conn = _connect(db)
            with conn.cursor() as cur:
                cur.execute("SELECT slot_name FROM pg_replication_slots")
                print(f"slots left: {[row[0] for row in cur.fetchall()]}")
            conn.close()
    finally:
        if os.environ.get("DBZ_BENCH_KEEP"):
            print(f"kept {root} (the database password is in its */conf*/application.properties)")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
