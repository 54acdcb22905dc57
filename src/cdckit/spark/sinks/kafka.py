"""Delivery to Kafka (and Azure Event Hubs' Kafka endpoint) through Spark's own Kafka sink.

Per batch: records are repartitioned by (topic, key) and sorted by position, so every record of a key is
produced by one task, in order, to the key's partition (a batch whose partitions are already consecutive position
ranges is written by one task, in partition order, with no shuffle); the producer is idempotent (``acks=all``).
Topics are created on first use (``topic.creation.*``) or must exist. Producer settings pass through with the
``kafka.`` prefix. Delivery is at least once: after a failure the last batch is sent again with the same positions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from cdckit.errors import CdcKitError, ConfigurationError
from cdckit.fsutil import output_file_mode
from cdckit.spark.sinks.base import (
    POSITION_ORDER,
    SinkWriter,
    WholeSnapshot,
    WriteSummary,
    location_problem,
    persist_controls,
)
from cdckit.spark.sinks.jsonl import direct_writes, write_dead_letters
from cdckit.spark.transforms import has_transforms

log = logging.getLogger("cdckit")

EVENTHUBS_PORT = 9093
# Event Hubs' largest event per tier (bytes), and whether the tier allows compacted topics.
EVENTHUBS_TIERS = {"basic": (256 * 1024, False), "standard": (1024 * 1024, True), "premium": (1024 * 1024, True),
                   "dedicated": (1024 * 1024, True)}
_PRODUCER_DEFAULTS = {"kafka.enable.idempotence": "true", "kafka.acks": "all",
                      "kafka.max.in.flight.requests.per.connection": "5"}
# Throughput: a task sends a whole partition of records at once, so requests carry up to 256 KiB per partition
# (the producer's own default, 16 KiB, holds some 25 change events) and wait up to 20 ms to fill. Records of many
# events compress well with lz4, which every Kafka client reads; Event Hubs is left uncompressed (its Kafka
# endpoint does not take lz4). Each can be set with its ``kafka.`` name. Decision 0023.
THROUGHPUT_DEFAULTS = {"kafka.batch.size": "262144", "kafka.linger.ms": "20"}
KAFKA_COMPRESSION_DEFAULT = {"kafka.compression.type": "lz4"}
ADMIN_API_TIMEOUT_MS = "60000"  # Kafka's default.api.timeout.ms, which bounds the topic checks


class DeliveryError(CdcKitError):
    """Records could not be delivered (broker unreachable, record too large, topic missing)."""


def kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options of Spark's Kafka sink, with the Event Hubs profile applied when chosen."""
    out = {**_PRODUCER_DEFAULTS, **THROUGHPUT_DEFAULTS}
    if options.get("cdckit.sink") != "eventhubs":
        out.update(KAFKA_COMPRESSION_DEFAULT)
    else:
        namespace = options.get("cdckit.eventhubs.namespace", "")
        if not namespace:
            raise ConfigurationError(["cdckit.eventhubs.namespace is required for cdckit.sink=eventhubs (the "
                                      "namespace name, as in <namespace>.servicebus.windows.net)"])
        out["kafka.bootstrap.servers"] = f"{namespace}.servicebus.windows.net:{EVENTHUBS_PORT}"
        out["kafka.security.protocol"] = "SASL_SSL"
        if options.get("cdckit.eventhubs.auth", "connection-string") == "connection-string":
            secret = options.get("cdckit.eventhubs.connection.string", "")
            if not secret:
                raise ConfigurationError(["cdckit.eventhubs.connection.string is required with "
                                          "cdckit.eventhubs.auth=connection-string; use ${env:NAME} to keep it "
                                          "out of files"])
            out["kafka.sasl.mechanism"] = "PLAIN"
            escaped = secret.replace("\\", "\\\\").replace('"', '\\"')
            out["kafka.sasl.jaas.config"] = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                                             f'username="$ConnectionString" password="{escaped}";')
        else:
            out["kafka.sasl.mechanism"] = "OAUTHBEARER"
    out.update({key: value for key, value in options.items() if key.startswith("kafka.")})
    if not out.get("kafka.bootstrap.servers"):
        raise ConfigurationError(["kafka.bootstrap.servers is required for cdckit.sink=kafka"])
    return out


def unreachable(servers: str, timeout_s: float = 5.0) -> str | None:
    """Why no address of a bootstrap list accepts a TCP connection, or None when one does."""
    import socket

    reasons = []
    for server in (item.strip() for item in servers.split(",")):
        if not server:
            continue
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or server, int(port or 9092)), timeout=timeout_s):
                return None
        except (OSError, ValueError) as exc:
            reasons.append(f"{server}: {getattr(exc, 'strerror', None) or exc}")
    return "; ".join(reasons) or "no address given"


def max_message_bytes(options: Mapping[str, str]) -> int:
    configured = int(options.get("cdckit.kafka.max.message.bytes", "0") or 0)
    if configured:
        return configured
    if options.get("cdckit.sink") == "eventhubs":
        return EVENTHUBS_TIERS[options.get("cdckit.eventhubs.tier", "standard")][0]
    return 0


def check_topic_settings(options: Mapping[str, str]) -> list[str]:
    problems = []
    tier = options.get("cdckit.eventhubs.tier", "standard")
    if options.get("cdckit.sink") == "eventhubs" and not EVENTHUBS_TIERS[tier][1] \
            and "compact" in options.get("topic.creation.default.cleanup.policy", ""):
        problems.append(f"topic.creation.default.cleanup.policy=compact is not available on the Event Hubs {tier} "
                        f"tier; remove it or use the standard tier or higher")
    return problems


class TopicManager:
    """Creates missing topics through Kafka's Java AdminClient (same security settings as the producer)."""

    def __init__(self, spark: SparkSession, options: Mapping[str, str]) -> None:
        self.spark = spark
        self.options = options
        self.known: dict[str, int] = {}

    def ensure(self, topics: list[str]) -> dict[str, int]:
        """Create the missing topics; returns every topic's partition count."""
        missing = [t for t in topics if t not in self.known]
        if not missing:
            return {t: self.known[t] for t in topics}
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        properties = jvm.java.util.Properties()
        options = kafka_options(self.options)
        for key, value in options.items():
            properties.setProperty(key[len("kafka."):], value)
        # Each call fails by itself after the admin's default.api.timeout.ms (Kafka's default 60 s; settable with
        # its kafka. name); the wait below only backs that up.
        wait_s = int(options.get("kafka.default.api.timeout.ms", ADMIN_API_TIMEOUT_MS)) // 1000 + 5
        seconds = jvm.java.util.concurrent.TimeUnit.SECONDS
        admin = jvm.org.apache.kafka.clients.admin.Admin.create(properties)
        try:
            existing = set(admin.listTopics().names().get(wait_s, seconds))
            absent = [t for t in missing if t not in existing]
            if absent and self.options.get("topic.creation.enable", "true").lower() != "true":
                raise DeliveryError(f"topics {', '.join(absent)} do not exist and topic.creation.enable=false; "
                                    f"create them or enable topic creation")
            if absent:
                self._create(jvm, admin, absent, wait_s, seconds)
            described = admin.describeTopics(jvm.java.util.ArrayList(missing)).allTopicNames().get(wait_s, seconds)
            for topic in missing:
                self.known[topic] = int(described.get(topic).partitions().size())
        except DeliveryError:
            raise
        except Exception as exc:
            raise DeliveryError(f"cannot reach Kafka at {kafka_options(self.options)['kafka.bootstrap.servers']} "
                                f"to check topics ({_first_line(exc)}); check kafka.bootstrap.servers and the "
                                f"security settings") from None
        finally:
            admin.close(jvm.java.time.Duration.ZERO)  # a call still pending after a failure is abandoned, not awaited
        return {t: self.known[t] for t in topics}

    def _create(self, jvm: Any, admin: Any, topics: list[str], wait_s: int, seconds: Any) -> None:
        partitions = int(self.options.get("topic.creation.default.partitions", "-1"))
        replication = int(self.options.get("topic.creation.default.replication.factor", "-1"))
        configs = jvm.java.util.HashMap()
        policy = self.options.get("topic.creation.default.cleanup.policy", "")
        if policy:
            configs.put("cleanup.policy", policy)
        new_topics = jvm.java.util.ArrayList()
        optional = jvm.java.util.Optional
        for topic in topics:
            spec = jvm.org.apache.kafka.clients.admin.NewTopic(
                topic, optional.of(jvm.java.lang.Integer(partitions)) if partitions > 0 else optional.empty(),
                optional.of(jvm.java.lang.Short(str(replication))) if replication > 0 else optional.empty())
            new_topics.add(spec.configs(configs))
        try:
            admin.createTopics(new_topics).all().get(wait_s, seconds)
        except Exception as exc:
            if "TopicExistsException" not in str(exc):
                raise


class KafkaSink(SinkWriter):
    """Kafka (``cdckit.sink=kafka``), and Azure Event Hubs through its Kafka endpoint (``cdckit.sink=eventhubs``:
    the same producer, with Event Hubs' address, authentication and size limit from ``kafka_options``)."""

    names = ("kafka", "eventhubs")

    def __init__(self, spark: Any, options: Mapping[str, str]) -> None:
        super().__init__(spark, options)
        kafka_options(options)  # configuration problems surface before any data is read
        self.topics = TopicManager(spark, options)

    @classmethod
    def problems(cls, options: Mapping[str, str], keyless: Sequence[str], offline: bool) -> list[str]:
        """A broker answers at a ``kafka.bootstrap.servers`` address (a TCP connection: what the producer needs
        first; authentication is the producer's to check), and the dead letters' folder can be written."""
        try:
            servers = kafka_options(options)["kafka.bootstrap.servers"]
        except ConfigurationError as exc:
            return list(exc.problems)
        found = []
        if options.get("cdckit.kafka.oversize.handling", "fail") == "dead-letter":
            problem = location_problem(options, "cdckit.output.path", "cdckit-output", offline)
            if problem:
                found.append(problem)
        if not offline:
            refused = unreachable(servers)
            if refused is not None:
                prop = "cdckit.eventhubs.namespace" if options.get("cdckit.sink") == "eventhubs" else \
                    "kafka.bootstrap.servers"
                found.append(f"no Kafka broker answers at {servers} ({refused}); check {prop}, that the broker "
                             f"runs, and that this machine may reach it")
        return found

    @classmethod
    def one_pass(cls, options: Mapping[str, str]) -> bool:
        """A stream batch read by one task goes in one pass (``write_kafka``'s ``single_range``) with Debezium's
        format, no transforms and no size limit to check first. Event Hubs always has one."""
        return (options.get("cdckit.sink", "files") == "kafka" and not has_transforms(options)
                and options.get("cdckit.message.format", "debezium") == "debezium" and not max_message_bytes(options))

    def snapshot(self, df: DataFrame, controls: list[str] | None, controls_dir: str | None,
                 topics: list[str] | None, whole: WholeSnapshot | None) -> WriteSummary:
        """One record per key in position order; with ``controls_dir``, the control rows are kept only after the
        records are in Kafka."""
        if controls is None and not controls_dir:
            return write_kafka(df, self.options, self.topics, self.output, "snapshot", one_per_key=True,
                               known_topics=topics)
        found: list[str] = []
        summary = write_kafka(df, self.options, self.topics, self.output, "snapshot", found, one_per_key=True)
        if controls_dir:
            persist_controls(controls_dir, found)  # only after the records are in Kafka
        if controls is not None:
            controls.extend(found)
        return summary

    def batch(self, df: DataFrame, batch_id: int, controls: list[str] | None, ordered_partitions: bool,
              topics: Callable[[], list[str]] | None) -> WriteSummary:
        label = f"stream-{batch_id:012d}"
        if topics is not None:
            return write_kafka(df, self.options, self.topics, self.output, label, controls, known_topics=topics(),
                               ordered_partitions=ordered_partitions, single_range=True)
        return write_kafka(df, self.options, self.topics, self.output, label, controls,
                           ordered_partitions=ordered_partitions)


def write_kafka(df: DataFrame, options: Mapping[str, str], topics: TopicManager, output: str,
                label: str, controls: list[str] | None = None, *, one_per_key: bool = False,
                known_topics: Sequence[str] | None = None, ordered_partitions: bool = False,
                single_range: bool = False) -> WriteSummary:
    """Deliver one batch (or the snapshot) to Kafka; returns records per topic. The batch is kept on local disk so
    the source is read once although counts, control rows and the write each pass over it; on disk, not in the
    JVM's heap, so a snapshot of any size is held in a partition's worth of memory (a heap-first cache of a
    multi-gigabyte snapshot ran a 1 GB driver out of memory).

    The batch is read from that cache twice: once for its counts and control rows, once for the write (and
    again only for a batch with a record over the target's size limit).

    A batch can hold several events of one key: they are shuffled into one task and written in position order.
    ``one_per_key`` (a snapshot: one read per row) skips that shuffle, since there is no order to keep. So do
    ``ordered_partitions`` (the batch's partitions are consecutive position ranges, each in position order, as a
    PostgreSQL stream's are): one task writes them one after the other, from the cache, already in order.

    ``known_topics``: the only topics the records can go to, known before the batch is read (a snapshot's
    tables in Debezium's format, without transforms). When there is also no size limit to check and no control
    row to collect, the batch is written in one pass, with no cache: the topics are created first and the
    counts are observed during the write (on the DataSource V2 write path only: ``use_v2_write``).

    ``single_range``: a stream batch that is one partition in position order (a PostgreSQL stream read by one task).
    With ``known_topics`` (the topics of the tables captured now) it is written in one pass too, its control rows
    observed during the write; records of a topic outside them (a table dropped or renamed since its changes) are
    still written and counted. Should that one pass fail, the batch is written again by the two reads, which
    create the batch's own topics first."""
    if known_topics is not None and not max_message_bytes(options) and _writes_v2(df.sparkSession) and (
            (one_per_key and controls is None) or single_range):
        known = sorted(set(known_topics))
        if not single_range:
            return _write_in_one_pass(df, options, topics, known)
        try:
            return _write_in_one_pass(df, options, topics, known, controls, others_expected=True)
        except DeliveryError as exc:
            log.warning("%s; writing %s again, reading it twice to create its own topics first (records the first "
                        "attempt delivered may arrive twice)", exc, label)
    cached = df.persist(StorageLevel.DISK_ONLY)
    try:
        is_control = F.col("op").startswith("_")
        announce = F.col("op") == "qlik-metadata"
        size = F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(
            F.octet_length(F.coalesce(F.col("value").cast("binary"), F.col("value_binary"))), F.lit(0))
        # One pass over the batch for what the driver needs before the write: records and the largest record per
        # topic, whether a topic has announcements, and the control rows (a few per batch).
        counted = cached.groupBy("topic").agg(
            F.count(F.when(~is_control, F.lit(1))).alias("count"),
            F.max(F.when(~is_control, announce.cast("int"))).alias("announces"),
            F.max(F.when(~is_control, size)).alias("largest"),
            F.collect_list(F.when(is_control, F.col("value"))).alias("controls")).collect()
        if controls is not None:
            controls.extend(value for row in counted for value in row["controls"])
        records = cached.filter(~is_control).withColumn(
            "_value", F.coalesce(F.col("value").cast("binary"), F.col("value_binary")))
        limit = max_message_bytes(options)
        oversize = [row["topic"] for row in counted if limit and (row["largest"] or 0) > limit]
        if oversize:
            records = _oversize(records, limit, options, output, label)
            counted = records.groupBy("topic").agg(F.count(F.lit(1)).alias("count"),
                                                   F.max(announce.cast("int")).alias("announces")).collect()
        summary = {row["topic"]: int(row["count"]) for row in counted if row["count"]}
        if not summary:
            return {}
        partitions = topics.ensure(sorted(summary))
        # Announcements (Qlik metadata messages) go first, to every partition, so each partition's consumer
        # meets a table's structure before its data; then the records, every key's in position order.
        announcements = records.filter(announce)
        if any(row["announces"] for row in counted):
            spread = announcements.withColumn("partition", F.explode(F.sequence(
                F.lit(0), F.element_at(F.create_map(*[F.lit(x) for pair in partitions.items() for x in pair]),
                                       F.col("topic")) - 1)))
            _save(spread.select("topic", "key", F.col("_value").alias("value"), "headers", "partition"), options)
        data = records.filter(~announce)
        if ordered_partitions and not one_per_key:
            data = data.coalesce(1)
        elif not one_per_key:
            data = data.repartition("topic", "key").sortWithinPartitions(*POSITION_ORDER)
        _save(data.select("topic", "key", F.col("_value").alias("value"), "headers"), options)
        return dict(sorted(summary.items()))
    finally:
        cached.unpersist()


def _write_in_one_pass(df: DataFrame, options: Mapping[str, str], topics: TopicManager, known: list[str],
                       controls: list[str] | None = None, others_expected: bool = False) -> WriteSummary:
    """Write records whose topics are (all but rare ones, with ``others_expected``) in ``known``, reading the batch
    once; returns records per topic. With ``controls``, the batch's control rows are observed during the write and
    handed back there (a batch in one partition keeps their order)."""
    if known:
        topics.ensure(known)
    observation = Observation("cdckit_kafka_counts")
    is_record = ~F.col("op").startswith("_")
    metrics = [F.count_if(is_record).alias("_total"),
               *[F.count_if(is_record & (F.col("topic") == topic)).alias(f"_{index}") for index, topic in
                 enumerate(known)]]
    # lists travel as JSON text: PySpark 4.0's Observation hands arrays back as Java objects
    if others_expected:
        in_known = F.col("topic").isin(known) if known else F.lit(False)
        metrics.append(F.to_json(F.collect_set(F.when(is_record & ~in_known, F.col("topic")))).alias("_others"))
    if controls is not None:
        metrics.append(F.to_json(F.collect_list(F.when(~is_record, F.col("value")))).alias("_controls"))
    records = df.observe(observation, *metrics).filter(is_record)
    frame = records.select("topic", "key", F.coalesce(F.col("value").cast("binary"), F.col("value_binary"))
                           .alias("value"), "headers")
    # Observed metrics reach the driver only from the Kafka sink's DataSource V2 write (use_v2_write)
    _save(frame, options)
    counted = observation.get
    if controls is not None:
        controls.extend(json.loads(counted["_controls"]))
    summary = {topic: int(counted[f"_{index}"]) for index, topic in enumerate(known) if counted[f"_{index}"]}
    rest = int(counted["_total"]) - sum(summary.values())
    if rest and not others_expected:
        raise DeliveryError(f"{rest} records went to topics other than {', '.join(known)}, which were the only ones "
                            f"expected and created; report this as a bug, with the connector configuration (its "
                            f"secrets removed)")
    if rest:
        others = ", ".join(sorted(json.loads(counted["_others"])))
        log.warning("%d records went to %s, which cdckit had not listed before the write (a table dropped or "
                    "renamed since its changes were made); the broker created any missing topic with its own "
                    "defaults", rest, others)
        summary[others] = rest
    return dict(sorted(summary.items()))


_V1_SOURCES = "spark.sql.sources.useV1SourceList"


def _v1_sources(spark: SparkSession) -> list[str]:
    return [name for name in (spark.conf.get(_V1_SOURCES) or "").split(",") if name.strip()]


def use_v2_write(spark: SparkSession) -> None:
    """Take ``kafka`` off the session's V1 source list (once, when cdckit sets the session up), so Spark's Kafka
    sink writes through DataSource V2. Metrics observed on the written frame (``Observation``) reach the driver
    from that write, not from the V1 one, whose inner query runs apart from the command (decision 0023). The
    other sources keep the path they had."""
    listed = _v1_sources(spark)
    kept = [name for name in listed if name.strip().lower() != "kafka"]
    if kept != listed:
        spark.conf.set(_V1_SOURCES, ",".join(kept))


def _writes_v2(spark: SparkSession) -> bool:
    return all(name.strip().lower() != "kafka" for name in _v1_sources(spark))


def _save(frame: DataFrame, options: Mapping[str, str]) -> None:
    # append: the only mode Kafka's DataSource V2 write takes (it adds records; nothing is replaced)
    writer = frame.write.format("kafka").mode("append").options(**kafka_options(options))
    try:
        writer.save()
    except Exception as exc:
        raise DeliveryError(f"delivering to Kafka at {kafka_options(options)['kafka.bootstrap.servers']} failed "
                            f"({_first_line(exc)}); the batch is delivered again when the job restarts from its "
                            f"checkpoint") from None


def _oversize(records: DataFrame, limit: int, options: Mapping[str, str], output: str, label: str) -> DataFrame:
    size = F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("_value"), F.lit(0))
    measured = records.withColumn("_size", size)
    offenders = measured.filter(F.col("_size") > limit)
    found = offenders.select("topic", "key", "_size").limit(3).collect()
    if not found:
        return records
    if options.get("cdckit.kafka.oversize.handling", "fail") == "dead-letter":
        write_dead_letters(offenders.drop("_size", "_value"), output, label,
                           output_file_mode(options), direct_writes(options))
        return measured.filter(F.col("_size") <= limit).drop("_size")
    first = found[0]
    raise DeliveryError(
        f"a record of {first['_size']} bytes for topic {first['topic']} (key {str(first['key'])[:200]}) exceeds the "
        f"{limit}-byte limit of the target; nothing of this batch was sent. Set "
        f"cdckit.kafka.oversize.handling=dead-letter to write such records to {output}/_dead-letter instead, or "
        f"exclude or truncate the large columns (column.exclude.list, column.truncate.to.N.chars)")


def _first_line(exc: BaseException) -> str:
    """The first line of a (Java) exception that names its cause, without stack frames."""
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip(" :\t")
        if ("Exception" in line or "Error" in line) and not line.startswith("at "):
            return line[:300]
    return text.splitlines()[0][:300] if text else type(exc).__name__
