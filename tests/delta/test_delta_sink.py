"""The Delta sink against real PostgreSQL, Spark and Delta Lake: change tables written once, state tables kept by
MERGE that equal the source, structure changes, read back with Spark and with delta-rs (the ``deltalake`` package,
which shares no code with the writer)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from deltalake import DeltaTable
from helpers import execute, fetch, make_config

from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.errors import CdcKitError
from cdckit.pipelines.base import read_snapshot_state, write_snapshot_state
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOPIC = "it.public.accounts"


def _state(spark: Any, delta: Path, topic: str, columns: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(str(delta / "state" / topic))
    return sorted(tuple(r) for r in df.selectExpr(*columns.split(",")).collect())


def _changes(spark: Any, delta: Path, topic: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(str(delta / "changes" / topic))
    return [tuple(r) for r in df.orderBy("__commit_lsn", "__lsn", "__serial").select("id", "__op").collect()]


def _history(spark: Any, path: Path) -> list[str]:
    return [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()]


def _accounts(postgres: Any, database: str, rows: int = 50) -> str:
    dsn = str(postgres.dsn(database))
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text, balance numeric(12,2))",
            f"INSERT INTO public.accounts SELECT g, 'owner ' || g, g * 10 FROM generate_series(1, {rows}) g")
    return dsn


def _source(dsn: str) -> list[tuple[Any, ...]]:
    return sorted(fetch(dsn, "SELECT id, owner, balance FROM public.accounts"))


def test_state_table_equals_the_source_after_inserts_updates_deletes_and_key_updates(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = _accounts(postgres, database)
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

    source = _source(dsn)
    assert _state(spark, delta, TOPIC, "id,owner,balance") == source
    changes = _changes(spark, delta, TOPIC)
    assert len([c for c in changes if c[1] == "r"]) == 50
    assert (30, "d") in changes and (100, "c") in changes and changes.count((1, "u")) == 3
    # delta-rs reads both tables as Spark does
    read = DeltaTable(str(delta / "state" / TOPIC)).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["owner"], r["balance"]) for r in read) == source
    assert len(DeltaTable(str(delta / "changes" / TOPIC)).to_pyarrow_table()) == len(changes)
    # the change data feed is on
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0) \
        .load(str(delta / "state" / TOPIC))
    assert feed.filter("_change_type = 'delete'").count() == 6  # ids 20-24 and the moved 30


def test_snapshot_under_concurrent_writes_then_stream_reconciles(postgres: Any, spark: Any, database: str,
                                                                 workdir: Path) -> None:
    dsn = _accounts(postgres, database, rows=20_000)
    delta = workdir / "delta"
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta),
                                                         "max.batch.size": "500"})
    stop, done = threading.Event(), [0]

    def write() -> None:
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        next_id = 100_000
        with conn.cursor() as cur:
            while not stop.is_set():
                next_id += 1
                cur.execute("INSERT INTO public.accounts VALUES (%s, 'w', 1)", (next_id,))
                cur.execute("UPDATE public.accounts SET balance = balance + 1 WHERE id = %s", (next_id % 20_000 + 1,))
                cur.execute("DELETE FROM public.accounts WHERE id = %s", ((next_id * 7) % 20_000 + 1,))
                cur.execute("UPDATE public.accounts SET id = -id WHERE id = %s", ((next_id * 13) % 20_000 + 1,))
                done[0] += 1
                stop.wait(0.01)
        conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        run_snapshot(spark, config)
    finally:
        stop.set()
        writer.join()
    assert done[0] > 20
    report = run_stream(spark, config)
    assert report.batches >= 2
    assert _state(spark, delta, TOPIC, "id,owner,balance") == _source(dsn)


def test_a_replayed_stream_batch_commits_nothing_twice(postgres: Any, spark: Any, database: str,
                                                       workdir: Path) -> None:
    dsn = _accounts(postgres, database)
    delta = workdir / "delta"
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta)})
    run_snapshot(spark, config)
    execute(dsn, "UPDATE public.accounts SET balance = 0 WHERE id <= 5", "DELETE FROM public.accounts WHERE id = 9")

    def crash_after_the_sink(batch_id: int, summary: Any) -> None:
        raise RuntimeError("the process died after the batch's Delta commits, before Spark recorded the batch")

    with pytest.raises(Exception, match="process died"):
        run_stream(spark, config, on_batch=crash_after_the_sink)
    committed = _history(spark, delta / "changes" / TOPIC)
    assert committed.count("WRITE") == 2  # the snapshot and batch 0
    report = run_stream(spark, config)  # Spark runs batch 0 again
    assert report.batches == 1 and report.events_per_topic == {TOPIC: 6}
    assert _history(spark, delta / "changes" / TOPIC) == committed  # nothing committed again
    assert _changes(spark, delta, TOPIC).count((9, "d")) == 1
    assert _state(spark, delta, TOPIC, "id,owner,balance") == _source(dsn)


def test_a_table_whose_creation_was_killed_is_created_again(postgres: Any, spark: Any, database: str,
                                                            workdir: Path) -> None:
    dsn = _accounts(postgres, database)
    delta = workdir / "delta"
    # what a kill -9 between Delta making the log folder and writing its first commit leaves behind
    (delta / "state" / TOPIC / "_delta_log" / "_staged_commits").mkdir(parents=True)
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta)})
    run_snapshot(spark, config)
    assert _state(spark, delta, TOPIC, "id,owner,balance") == _source(dsn)


def test_a_restarted_snapshot_replaces_the_unfinished_attempt(postgres: Any, spark: Any, database: str,
                                                              workdir: Path) -> None:
    dsn = _accounts(postgres, database)
    execute(dsn, "CREATE TABLE public.notes (id integer PRIMARY KEY)", "INSERT INTO public.notes VALUES (1), (2)")
    delta = workdir / "delta"
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta)})
    first = run_snapshot(spark, config)
    # As if the job died after the tables were written but before the snapshot was recorded as complete.
    state = read_snapshot_state(config)
    assert state is not None
    write_snapshot_state(config, {"status": "started", "slot_name": state["slot_name"], "tables": state["tables"],
                                  "attempts": [parse_lsn(first.consistent_point)]})
    execute(dsn, "DELETE FROM public.accounts WHERE id > 40", "INSERT INTO public.accounts VALUES (60, 'late', 6)",
            "DELETE FROM public.notes")
    second = run_snapshot(spark, config)
    assert second.status == "completed" and second.consistent_point != first.consistent_point

    changes = _changes(spark, delta, TOPIC)
    assert len(changes) == 41 and {op for _, op in changes} == {"r"}  # only the second attempt's rows
    assert _state(spark, delta, TOPIC, "id,owner,balance") == _source(dsn)
    # a table the second attempt read empty keeps none of the first attempt's rows
    assert _state(spark, delta, "it.public.notes", "id") == []
    assert spark.read.format("delta").load(str(delta / "changes" / "it.public.notes")).count() == 0


def test_structure_changes_add_and_widen_columns_and_stop_on_what_delta_cannot_follow(
        postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = str(postgres.dsn(database))
    execute(dsn, "CREATE TABLE public.items (id integer PRIMARY KEY, code integer, qty smallint)",
            "INSERT INTO public.items VALUES (1, 10, 1)")
    delta = workdir / "delta"
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta)})
    run_snapshot(spark, config)
    execute(dsn, "ALTER TABLE public.items ADD COLUMN note text", "INSERT INTO public.items VALUES (2, 20, 2, 'n')",
            "ALTER TABLE public.items ALTER COLUMN qty TYPE bigint", "UPDATE public.items SET qty = 5000000000 "
            "WHERE id = 1")
    run_stream(spark, config)
    for kind in ("changes", "state"):
        schema = {f.name: f.dataType.simpleString()
                  for f in spark.read.format("delta").load(str(delta / kind / "it.public.items")).schema.fields}
        assert schema["note"] == "string" and schema["qty"] == "bigint", (kind, schema)
    assert _state(spark, delta, "it.public.items", "id,code,qty,note") == [(1, 10, 5_000_000_000, None),
                                                                           (2, 20, 2, "n")]

    changes_before = _history(spark, delta / "changes" / "it.public.items")
    state_before = _history(spark, delta / "state" / "it.public.items")
    execute(dsn, "ALTER TABLE public.items ALTER COLUMN code TYPE text", "INSERT INTO public.items VALUES "
            "(3, 'A-30', 3, 'x')")
    with pytest.raises(CdcKitError) as stopped:
        run_stream(spark, config)
    message = str(stopped.value)
    assert "public.items" in message and "'code'" in message and "int to string" in message
    assert "Choices" in message and "resumes from it" in message
    assert _history(spark, delta / "changes" / "it.public.items") == changes_before
    assert _history(spark, delta / "state" / "it.public.items") == state_before
    assert not (delta / "_staging").exists()  # no staged file, nor an empty staging folder, left behind


def test_keyless_tables_keep_changes_only_and_partition_columns_apply(postgres: Any, spark: Any, database: str,
                                                                      workdir: Path) -> None:
    dsn = str(postgres.dsn(database))
    execute(dsn, "CREATE TABLE public.events (at integer, what text)", "ALTER TABLE public.events REPLICA "
            "IDENTITY FULL", "INSERT INTO public.events VALUES (1, 'a'), (2, 'b')")
    delta = workdir / "delta"
    both = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta)})
    with pytest.raises(CdcKitError, match=r"no primary key.*message\.key\.columns.*cdckit\.delta\.mode=changes"):
        run_snapshot(spark, both)
    assert not (delta / "state").exists()
    # the refused run leaves neither its staging folder nor the slot it created
    assert not (delta / "_staging").exists()
    assert not _slots(dsn, database)
    changes = make_config(postgres, database, workdir / "second", **{
        "cdckit.sink": "delta", "cdckit.delta.path": str(delta), "cdckit.delta.mode": "changes",
        "cdckit.delta.partition.columns": "__op", "slot.name": "second"})
    run_snapshot(spark, changes)
    execute(dsn, "INSERT INTO public.events VALUES (3, 'c')", "DELETE FROM public.events WHERE at = 1")
    run_stream(spark, changes)
    table = delta / "changes" / "it.public.events"
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0]
    assert list(detail["partitionColumns"]) == ["__op"]
    assert detail["properties"]["delta.enableChangeDataFeed"] == "true"
    ops = sorted((r["at"], r["__op"]) for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist())
    assert ops == [(1, "d"), (1, "r"), (2, "r"), (3, "c")]
    assert not (delta / "state").exists()


def _slots(dsn: str, database: str) -> list[str]:
    import psycopg2

    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s", (database,))
        return [row[0] for row in cur.fetchall()]


def test_a_folder_of_the_former_parquet_lake_sink_is_refused_as_a_delta_location(spark: Any, workdir: Path) -> None:
    from cdckit.config import validate
    from cdckit.spark.sinks import Sink
    from cdckit.spark.sinks.delta import DeltaSinkError

    lake = workdir / "lake"
    (lake / "shop.public.orders").mkdir(parents=True)
    (lake / "shop.public.orders" / "_cdckit_lake.json").write_text("{}")
    options = validate({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                        "database.hostname": "db", "database.user": "u", "database.password": "pw",
                        "database.dbname": "d", "topic.prefix": "shop", "cdckit.sink": "delta",
                        "cdckit.delta.path": str(lake)}).as_properties()
    with pytest.raises(DeltaSinkError) as refused:
        Sink(spark, options)
    message = str(refused.value)
    assert "shop.public.orders/_cdckit_lake.json" in message and "does not convert" in message
    assert "new cdckit.delta.path" in message


def test_tables_on_s3(postgres: Any, spark: Any, database: str, workdir: Path, s3_endpoint: str) -> None:
    """cdckit.delta.path in S3 (an S3 API served by moto): staging through pyarrow, Delta's commits through S3A."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="lake")
    dsn = _accounts(postgres, database)
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": "s3://lake/delta"})
    run_snapshot(spark, config)
    execute(dsn, "UPDATE public.accounts SET balance = 0 WHERE id <= 5", "DELETE FROM public.accounts WHERE id = 9")
    run_stream(spark, config)
    state = spark.read.format("delta").load(f"s3a://lake/delta/state/{TOPIC}")
    assert sorted(tuple(r) for r in state.select("id", "owner", "balance").collect()) == _source(dsn)
    assert spark.read.format("delta").load(f"s3a://lake/delta/changes/{TOPIC}").count() == 50 + 5 + 1
    names = [item["Key"] for item in s3.list_objects_v2(Bucket="lake", Prefix="delta/").get("Contents", [])]
    assert any(name.startswith(f"delta/changes/{TOPIC}/_delta_log/") for name in names)
    assert not [name for name in names if name.startswith("delta/_staging/") and name.endswith(".parquet")]
