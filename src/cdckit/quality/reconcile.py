"""Reconciliation: replay the events to each table's current state and compare it with the source table.

The source is read by the snapshot reader (in parallel chunks, under one exported snapshot) and formatted exactly
as events are, so both sides are compared as the ``after`` rows they would carry: per table the row counts, then
per key a hash of the row. A table without a key (a null key; ``message.key.columns`` gives one a key) is compared
as a multiset of rows: the copies of each distinct row, its deletes and updates taking away the row their before
image (REPLICA IDENTITY FULL) names. One whose updates or deletes carry no before image cannot be replayed: it is
named and left out. A value the stream could not see (``__debezium_unavailable_value``, an unchanged TOAST
value) is left out of both sides of that row. Run it once the stream has caught up with a quiet source; rows
changed since are reported as differences. PostgreSQL / YugabyteDB (an exported snapshot) and SQL Server (the
snapshot reader's chunks, under ``snapshot.isolation.mode``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from cdckit.quality.envelopes import UNAVAILABLE, classify, event_position

FIRST_KEYS = 5


def _canonical(column: Column) -> Column:
    return F.to_json(F.array_sort(F.map_entries(F.from_json(column, "map<string,string>"))))


def _data_events(classified: DataFrame) -> DataFrame:
    return classified.where(F.col("kind") == "data").select(
        "topic", "part", "seq", F.col("key_payload").isNull().alias("keyless"),
        _canonical(F.col("key_payload")).alias("key"), "op", "before", "after", "src")


def unreconcilable_topics(classified: DataFrame, limit: int = 100) -> list[str]:
    """Topics of tables without a key whose updates or deletes carry no before image (REPLICA IDENTITY DEFAULT or
    NOTHING): which of the identical rows changed cannot be told, so they cannot be replayed (a bounded list)."""
    data = _data_events(classified)
    rows = data.where(F.col("keyless") & F.col("op").isin("u", "d") & F.col("before").isNull()).select(
        "topic").distinct().orderBy("topic").limit(limit).collect()
    return [str(row["topic"]) for row in rows]


def replayed_state(classified: DataFrame, skip: list[str] | None = None) -> DataFrame:
    """The tables as the events leave them, as (topic, key, after, n, keyless): per key, its last data event in
    consumer order (keys whose last event is a delete are gone), n 1. A table without a key (a null key) is a
    multiset of rows: each row (its key is the row itself) counted by its reads, creates and updates' after
    images less its deletes' and updates' before images (REPLICA IDENTITY FULL), n its count. A streamed event
    delivered twice (the same position, op and row) counts once. The ``skip`` topics are left out."""
    data = _data_events(classified)
    if skip:
        data = data.where(~F.col("topic").isin(*skip))
    keyed = data.where(~F.col("keyless"))
    last = Window.partitionBy("topic", "key").orderBy(F.col("part").desc(), F.col("seq").desc())
    latest = keyed.withColumn("n", F.row_number().over(last)).where("n = 1")
    state = latest.where(F.col("op") != "d").select("topic", "key", "after", F.lit(1).cast("long").alias("n"),
                                                    F.lit(False).alias("keyless"))
    keyless = data.where(F.col("keyless")).withColumn(
        "position", event_position(F.col("src")))
    streamed = keyless.where(F.col("op") != "r").dropDuplicates(["topic", "position", "op", "before", "after"])
    keyless = keyless.where(F.col("op") == "r").unionByName(streamed)
    added = keyless.where(F.col("op").isin("r", "c", "u")).select(
        "topic", _canonical(F.col("after")).alias("key"), "after", F.lit(1).alias("n"))
    removed = keyless.where(F.col("op").isin("u", "d")).select(
        "topic", _canonical(F.col("before")).alias("key"), F.col("before").alias("after"), F.lit(-1).alias("n"))
    rows = added.unionByName(removed).groupBy("topic", "key").agg(
        F.first("after", ignorenulls=True).alias("after"), F.sum("n").cast("long").alias("n"))
    return state.unionByName(rows.where(F.col("n") != 0).withColumn("keyless", F.lit(True)))


def source_state(spark: SparkSession, options: Mapping[str, str]) -> tuple[DataFrame, Any]:
    """The captured tables read now, as (topic, key, after); returns the frame and, for PostgreSQL, the connection
    holding the exported snapshot open (close it once the frame has been used)."""
    if str(options.get("connector.class", "")).endswith("SqlServerConnector"):
        return _sqlserver_source_state(spark, options), None
    from cdckit.dialect.postgres.connection import connect
    from cdckit.spark.options import to_spark_options
    from cdckit.spark.sources.postgres_snapshot import PostgresSnapshotDataSource

    conn = connect(dict(options))
    conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_export_snapshot(), pg_current_wal_lsn()::text")
        snapshot_name, lsn = cur.fetchone()
    spark.dataSource.register(PostgresSnapshotDataSource)
    read_options = {**to_spark_options(dict(options)), "cdckit.snapshot.name": snapshot_name,
                    "cdckit.snapshot.lsn": lsn, "include.schema.changes": "false",
                    "cdckit.message.format": "debezium"}
    records = spark.read.format("cdckit_postgres_snapshot").options(**read_options).load()
    return _as_after_rows(records), conn


def _as_after_rows(records: DataFrame) -> DataFrame:
    """(topic, key, after, n, keyless) as ``replayed_state`` gives them: a table without a key counted per
    identical row."""
    rows = classify(records.where(F.col("op") == "r").select("topic", F.lit(0).alias("part"),
                                                             F.lit(0).cast("long").alias("seq"), "key", "value"))
    rows = rows.select("topic", F.col("key_payload").isNull().alias("keyless"),
                       _canonical(F.col("key_payload")).alias("key"),
                       "after")
    keyed = rows.where(~F.col("keyless")).select("topic", "key", "after", F.lit(1).cast("long").alias("n"),
                                                 "keyless")
    keyless = rows.where(F.col("keyless")).groupBy("topic", _canonical(F.col("after")).alias("key")).agg(
        F.first("after").alias("after"), F.count(F.lit(1)).alias("n")).withColumn("keyless", F.lit(True))
    return keyed.unionByName(keyless)


def _sqlserver_source_state(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """SQL Server: the captured tables read by the snapshot reader's chunks (under snapshot.isolation.mode)."""
    import json
    from dataclasses import asdict

    from cdckit.config import validate
    from cdckit.pipelines.dispatch import prepare_source
    from cdckit.spark.options import to_spark_options
    from cdckit.spark.sources.sqlserver_snapshot import DONE_OPTION, PLAN_OPTION, plan_snapshot

    prepared, instances = prepare_source(validate(dict(options)))
    plan = [asdict(chunk) for chunk in plan_snapshot(prepared, instances)]
    read_options = {**prepared, PLAN_OPTION: json.dumps(plan), DONE_OPTION: "[]", "cdckit.message.format": "debezium"}
    records = spark.read.format("cdckit_sqlserver_snapshot").options(**to_spark_options(read_options)).load()
    return _as_after_rows(records)


def reconcile_frame(state: DataFrame, source: DataFrame) -> DataFrame:
    """Per key present on either side (for a table without a key, per distinct row): ``status`` ok, missing (in
    the source, not in the events; or fewer copies of the row), extra (in the events, not in the source; or more
    copies) or differs; ``replayed`` and ``source_count`` the copies on each side."""
    s = state.alias("s")
    t = source.alias("t")
    joined = s.join(t, (F.col("s.topic") == F.col("t.topic")) & (F.col("s.key") == F.col("t.key")), "full_outer")
    stream_map = F.from_json(F.col("s.after"), "map<string,string>")
    source_map = F.from_json(F.col("t.after"), "map<string,string>")
    seen = F.map_filter(stream_map, lambda _k, v: v.isNull() | (v != UNAVAILABLE))
    comparable = F.map_filter(source_map, lambda k, _v: ~F.coalesce(stream_map[k] == UNAVAILABLE, F.lit(False)))
    replayed = F.coalesce(F.col("s.n"), F.lit(0))
    in_source = F.coalesce(F.col("t.n"), F.lit(0))
    status = (F.when(replayed < in_source, "missing").when(replayed > in_source, "extra")
              .when(F.sha2(F.to_json(F.array_sort(F.map_entries(seen))), 256)
                    == F.sha2(F.to_json(F.array_sort(F.map_entries(comparable))), 256), "ok")
              .otherwise("differs"))
    return joined.select(F.coalesce("s.topic", "t.topic").alias("topic"), F.coalesce("s.key", "t.key").alias("key"),
                         F.coalesce("s.keyless", "t.keyless").alias("keyless"), status.alias("status"),
                         replayed.alias("replayed"), in_source.alias("source_count")).withColumn(
        "record", F.concat_ws(" ", "topic", "key", "status"))


def count_frame(state: DataFrame, source: DataFrame) -> DataFrame:
    """Per table: rows after replaying the events, rows in the source."""
    replayed = state.groupBy("topic").agg(F.sum("n").alias("replayed_rows"))
    actual = source.groupBy("topic").agg(F.sum("n").alias("source_rows"))
    return replayed.join(actual, "topic", "full_outer").select(
        "topic", F.coalesce("replayed_rows", F.lit(0)).alias("replayed_rows"),
        F.coalesce("source_rows", F.lit(0)).alias("source_rows"))


def first_differences(frame: DataFrame) -> list[str]:
    """The first differing keys per table, in key order (a handful, for the report)."""
    order = Window.partitionBy("topic").orderBy("key")
    rows = frame.where(F.col("status") != "ok").withColumn("n", F.row_number().over(order)).where(
        F.col("n") <= FIRST_KEYS).orderBy("topic", "key").collect()
    return [f"{r['topic']} row {r['key']}: {r['status']} ({r['source_count']} in the source, {r['replayed']} "
            f"replayed)" if r["keyless"] else f"{r['topic']} key {r['key']}: {r['status']}" for r in rows]


def reconcile_expectations() -> list[Any]:
    import great_expectations as gx

    return [gx.expectations.ExpectColumnValuesToBeInSet(
        column="status", value_set=["ok"],
        meta={"check": "each key's replayed row equals the source row (missing: not in the events; extra: deleted "
                       "at the source; differs: other values)"})]


def count_expectations() -> list[Any]:
    import great_expectations as gx

    return [gx.expectations.ExpectColumnPairValuesToBeEqual(
        column_A="replayed_rows", column_B="source_rows",
        meta={"check": "replaying the events gives as many rows as the source table has"})]
