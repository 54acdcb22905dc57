"""Helpers for the end-to-end tests: configurations, reading the files sink back, replaying events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2

from cdckit.config import Config, validate
from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit.spark.sinks import read_records


def make_config(postgres: Any, database: str, workdir: Path, **overrides: str) -> Config:
    properties = {
        "connector.class": POSTGRES_CONNECTOR,
        **postgres.connector_properties(database),
        "topic.prefix": "it",
        "slot.name": f"slot_{database}",
        "publication.name": f"pub_{database}",
        "publication.autocreate.mode": "filtered",
        "cdckit.output.path": str(workdir / "out"),
        "cdckit.checkpoint.location": str(workdir / "checkpoint"),
    }
    properties.update({key.replace("__", "."): value for key, value in overrides.items()})
    return validate(properties)


def execute(dsn: str, *statements: str) -> None:
    conn = psycopg2.connect(dsn)
    try:
        for statement in statements:
            with conn.cursor() as cur:
                cur.execute(statement)
            conn.commit()
    finally:
        conn.close()


def fetch(dsn: str, query: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(query)
            return list(cur.fetchall())
    finally:
        conn.close()


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


def positions_by_key(config: Config, topic: str) -> dict[tuple[Any, ...], list[tuple[int, int]]]:
    """Per key, the (lsn, snapshot-first) positions of its data events in file order."""
    seen: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for record in records(config, topic):
        value = payload(record["value"])
        if value is None:
            continue
        key = tuple(payload(record["key"]).values())
        source = value["source"]
        seen.setdefault(key, []).append((0 if source["snapshot"] != "false" else 1, source["lsn"]))
    return seen
