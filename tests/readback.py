"""Reading back what cdckit wrote to local files, as a consumer would: shared by the integration and Docker suites."""

from __future__ import annotations

from typing import Any

from cdckit.config import Config
from cdckit.spark.sinks import read_records


def records(config: Config, topic: str) -> list[dict[str, Any]]:
    return list(read_records(config.str("cdckit.output.path"), topic))


def payload(document: Any) -> Any:
    if isinstance(document, dict) and "payload" in document:
        return document["payload"]
    return document


def replay(config: Config, topic: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Apply a topic's records per key in order: the table as a consumer would rebuild it."""
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records(config, topic):
        key = tuple(payload(record["key"]).values())
        value = payload(record["value"])
        if value is None:
            continue  # tombstone
        if value["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = value["after"]
    return state
