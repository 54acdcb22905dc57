"""The Kafka side of a comparison: a topic created before Debezium Server writes to it, the records it holds
(its end offsets), and records read back."""

from __future__ import annotations

import os
import time

from cdckit_lab.debezium.runtime import DebeziumServerError


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
