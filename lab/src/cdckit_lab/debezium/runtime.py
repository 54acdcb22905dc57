"""Debezium's runtimes, fetched once into cdckit's cache: the Debezium Server distribution from Maven Central or, for a
release Maven Central has none of, Debezium's embedded engine with a runner compiled here; and a Java that runs it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdckit.artifacts import cache_root, fetch

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
