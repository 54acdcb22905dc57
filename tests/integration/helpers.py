"""Helpers for the end-to-end tests: configurations, reading the files sink back, replaying events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2

from cdckit.config import Config, validate
from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit_lab.inventory import execute as execute
from readback import payload as payload
from readback import records as records
from readback import replay as replay


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


def fetch(dsn: str, query: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(query)
            return list(cur.fetchall())
    finally:
        conn.close()


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


@contextmanager
def idle_reports_every(spark: Any, milliseconds: int) -> Iterator[None]:
    """An idle query reports itself every ``milliseconds`` (Spark's noDataProgressEventInterval), while in the
    block; the session's setting is put back after it."""
    from cdckit.spark.progress import IDLE_INTERVAL
    from cdckit.spark.session import session_setting

    with session_setting(spark, IDLE_INTERVAL, str(milliseconds)):
        yield
