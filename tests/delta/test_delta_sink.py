"""The Delta sink against real PostgreSQL, Spark and Delta Lake: change tables written once, state tables kept by
MERGE that equal the source, read back with Spark and with delta-rs (the ``deltalake`` package)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config

from cdckit.pipeline import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _state(spark: Any, delta: Path, topic: str, columns: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(str(delta / "state" / topic))
    return sorted(tuple(r) for r in df.selectExpr(*columns.split(",")).collect())


def _changes(spark: Any, delta: Path, topic: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(str(delta / "changes" / topic))
    return [tuple(r) for r in df.orderBy("__commit_lsn", "__lsn", "__serial").select("id", "__op").collect()]


def test_state_table_equals_the_source_after_inserts_updates_deletes_and_key_updates(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text, balance numeric(12,2))",
            "INSERT INTO public.accounts SELECT g, 'owner ' || g, g * 10 FROM generate_series(1, 50) g")
    delta = workdir / "delta"
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta)})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.accounts VALUES (51, 'new', 1.5)",
            "UPDATE public.accounts SET balance = balance + 1 WHERE id <= 10",
            "DELETE FROM public.accounts WHERE id BETWEEN 20 AND 24",
            "UPDATE public.accounts SET id = 100 WHERE id = 30",  # a key update moves the row
            "UPDATE public.accounts SET owner = 'twice' WHERE id = 1",
            "UPDATE public.accounts SET owner = 'thrice' WHERE id = 1")
    run_stream(spark, config)

    source = sorted(fetch(dsn, "SELECT id, owner, balance FROM public.accounts"))
    assert _state(spark, delta, "it.public.accounts", "id,owner,balance") == source
    changes = _changes(spark, delta, "it.public.accounts")
    assert len([c for c in changes if c[1] == "r"]) == 50
    assert (30, "d") in changes and (100, "c") in changes and changes.count((1, "u")) == 3

    from deltalake import DeltaTable

    read = DeltaTable(str(delta / "state" / "it.public.accounts")).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["owner"], r["balance"]) for r in read) == source
    assert len(DeltaTable(str(delta / "changes" / "it.public.accounts")).to_pyarrow_table()) == len(changes)
