"""The SparkSession cdckit runs in: the one spark-submit provides, or a local one for the command line."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from pyspark import SparkConf
from pyspark.sql import SparkSession

from cdckit.config.secrets import SECRET_NAME_REGEX
from cdckit.fsutil import folder_mode, output_file_mode
from cdckit.spark.compat import check_spark
from cdckit.spark.sinks.kafka import use_v2_write
from cdckit.spark.sources.postgres_snapshot import PostgresSnapshotDataSource
from cdckit.spark.sources.postgres_stream import PostgresChangeDataSource
from cdckit.spark.sources.sqlserver_snapshot import SqlServerSnapshotDataSource
from cdckit.spark.sources.sqlserver_stream import SqlServerChangeDataSource

DEFAULT_LOCAL_MASTER = "local[2]"
# Spark's own default (secret|password|token|access[.]?key) and every name cdckit.config.secrets holds secret
REDACTION_REGEX = rf"(?i)secret|password|token|access[.]?key|{SECRET_NAME_REGEX}"


def submitted() -> bool:
    """Whether spark-submit (or another launcher with its own JVM) started this Python process: its master and
    configuration are then in that JVM, where a ``SparkConf()`` made before the session does not look."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or SparkSession.getActiveSession() is not None


DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def get_spark(extra_conf: Mapping[str, str] | None = None, kafka: bool = False, delta: bool = False,
              quiet: bool = True) -> SparkSession:
    """Return the active session (spark-submit) or start a local one, with cdckit's data sources registered.

    A local session logs Spark's warnings, less those known to be harmless here (``log4j2.properties``);
    ``quiet=False`` (``cdckit --verbose``) logs them all (``log4j2-verbose.properties``).

    ``kafka`` puts Spark's Kafka connector on a local session's class path, ``delta`` Delta Lake (with its SQL
    extension and catalog), both fetched once from Maven Central; with spark-submit, pass them yourself
    (``--jars`` or ``--packages``, and for Delta the two ``spark.sql`` settings; on EMR, the ``delta-defaults``
    classification).
    """
    check_spark()
    # Spark's Python workers must use this interpreter (and so this virtualenv's packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {"spark.app.name": "cdckit"}
    local = not submitted() and not SparkConf().contains("spark.master")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings["spark.master"] = os.environ.get("CDCKIT_SPARK_MASTER", DEFAULT_LOCAL_MASTER)
        settings["spark.sql.shuffle.partitions"] = "4"
        settings["spark.ui.enabled"] = "false"
        jars = []
        if kafka:
            from cdckit.artifacts import spark_kafka_jars

            jars += spark_kafka_jars()
        if delta:
            from cdckit.artifacts import delta_jars

            jars += delta_jars()
            settings["spark.sql.extensions"] = DELTA_EXTENSION
            settings["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
            # Delta rebuilds a table's state in this many tasks (50 by default), which on a few local cores costs
            # more than the state itself.
            settings["spark.databricks.delta.snapshotPartitions"] = "2"
        if jars:
            settings["spark.jars"] = ",".join(str(jar) for jar in jars)
        log_config = Path(__file__).with_name("log4j2.properties" if quiet else "log4j2-verbose.properties")
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log_config}"
    settings["spark.ui.showConsoleProgress"] = "false"
    # Spark hides option values whose keys match this in plans, the UI and event logs; cdckit's secrets include
    # SASL JAAS settings and the Event Hubs connection string besides passwords.
    settings["spark.redaction.regex"] = REDACTION_REGEX
    settings.update(extra_conf or {})
    if local and quiet:
        _start_jvm(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    use_v2_write(spark)
    if "CDCKIT_SPARK_LOG_LEVEL" in os.environ:
        spark.sparkContext.setLogLevel(os.environ["CDCKIT_SPARK_LOG_LEVEL"])
    spark.dataSource.register(PostgresSnapshotDataSource)
    spark.dataSource.register(PostgresChangeDataSource)
    spark.dataSource.register(SqlServerSnapshotDataSource)
    spark.dataSource.register(SqlServerChangeDataSource)
    return spark


def _start_jvm(settings: Mapping[str, str]) -> None:
    """Start the local session's JVM (unless this process has one) with its stderr passed on through a thread that
    leaves out ``JVM_NOISE``. That is the JVM's own "WARNING: Using incubator modules: jdk.incubator.vector" at its
    start: Spark's launcher always adds ``--add-modules=jdk.incubator.vector``, and no JVM option silences the
    warning that module gives. Spark's own log (log4j2.properties) comes through the same way, line by line."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf()
    conf.setAll(list(settings.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    threading.Thread(target=_pass_on, args=(gateway.proc.stderr,), daemon=True, name="cdckit-jvm-stderr").start()
    SparkContext(conf=conf, gateway=gateway)


JVM_NOISE = (b"WARNING: Using incubator modules: ",)


def _pass_on(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to this process's, line by line, less ``JVM_NOISE``."""
    with contextlib.suppress(OSError, ValueError), os.fdopen(os.dup(2), "wb") as stderr:
        for line in iter(stream.readline, b""):
            if not line.startswith(JVM_NOISE):
                stderr.write(line)
                stderr.flush()


@contextlib.contextmanager
def session_setting(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """The session's SQL setting ``key`` at ``value`` while in the block; its own value (or none) put back after."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def apply_file_mode(spark: SparkSession, options: Mapping[str, str]) -> None:
    """Spark's own files as private as the files sink's: the checkpoint (and Delta's files) on a local or HDFS file
    system get Hadoop's umask from ``cdckit.files.mode`` (600: umask 077), unless Spark's configuration sets
    ``spark.hadoop.fs.permissions.umask-mode`` itself. S3 keeps no such permissions."""
    if spark.sparkContext.getConf().contains("spark.hadoop.fs.permissions.umask-mode"):
        return
    umask = f"{0o777 & ~folder_mode(output_file_mode(options)):03o}"
    # the session's Hadoop configuration is a copy of the context's, made when the session state was; the local file
    # system Hadoop caches (which writes a local checkpoint: compat.local_checkpoint_files) keeps the one it was
    # made with
    shared = spark._jsparkSession.sharedState().hadoopConf()
    local = spark._jvm.org.apache.hadoop.fs.FileSystem.getLocal(shared)  # type: ignore[union-attr]
    for conf in (spark.sparkContext._jsc.hadoopConfiguration(), shared, local.getConf(),  # type: ignore[union-attr]
                 local.getRawFileSystem().getConf()):
        conf.set("fs.permissions.umask-mode", umask)
