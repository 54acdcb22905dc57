"""Reading topics back from the test broker."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from cdckit_lab.debezium import EndOffsets

_groups = itertools.count()


def consume(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Every record of ``topic`` up to its current end, as {partition, offset, key, value (parsed JSON or bytes)}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cdckit-test-{next(_groups)}",
                         "enable.auto.commit": False})
    found: list[dict[str, Any]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        remaining = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while remaining and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            found.append({"partition": message.partition(), "offset": message.offset(),
                          "key": _parse(message.key()), "value": _parse(message.value()),
                          "headers": list(message.headers() or ())})
            if message.offset() + 1 >= ends[message.partition()]:
                remaining.discard(message.partition())
    finally:
        consumer.close()
    return sorted(found, key=lambda r: (r["partition"], r["offset"]))


def _parse(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw


def partition_count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdckit-metadata"})
    try:
        return len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> int:
    """The records ``topic`` holds: the sum of its partitions' end offsets."""
    offsets = EndOffsets(bootstrap, topic)
    try:
        return offsets.total()
    finally:
        offsets.close()
