"""The SparkSession cdckit runs in: the one spark-submit provides, or a local one for the command line."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

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


def get_spark(extra_conf: Mapping[str, str] | None = None, kafka: bool = False, delta: bool = False) -> SparkSession:
    """Return the active session (spark-submit) or start a local one, with cdckit's data sources registered.

    ``kafka`` puts Spark's Kafka connector on a local session's class path, ``delta`` Delta Lake (with its SQL
    extension and catalog), both fetched once from Maven Central; with spark-submit, pass them yourself
    (``--jars`` or ``--packages``, and for Delta the two ``spark.sql`` settings; on EMR, the ``delta-defaults``
    classification).
    """
    check_spark()
    # Spark's Python workers must use this interpreter (and so this virtualenv's packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("cdckit")
    if not submitted() and not SparkConf().contains("spark.master"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(os.environ.get("CDCKIT_SPARK_MASTER", DEFAULT_LOCAL_MASTER))
        builder = builder.config("spark.sql.shuffle.partitions", "4")
        builder = builder.config("spark.ui.enabled", "false")
        jars = []
        if kafka:
            from cdckit.artifacts import spark_kafka_jars

            jars += spark_kafka_jars()
        if delta:
            from cdckit.artifacts import delta_jars

            jars += delta_jars()
            builder = builder.config("spark.sql.extensions", DELTA_EXTENSION)
            builder = builder.config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
            # Delta rebuilds a table's state in this many tasks (50 by default), which on a few local cores costs
            # more than the state itself.
            builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
        if jars:
            builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
        log_config = Path(__file__).with_name("log4j2.properties")
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    # Spark hides option values whose keys match this in plans, the UI and event logs; cdckit's secrets include
    # SASL JAAS settings and the Event Hubs connection string besides passwords.
    builder = builder.config("spark.redaction.regex", REDACTION_REGEX)
    for key, value in (extra_conf or {}).items():
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
