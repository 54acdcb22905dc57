"""PostgreSQL -> stream job -> a real Apache Kafka broker (KRaft, from Maven Central), with Spark's Kafka sink."""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, payload
from kafka_helpers import consume, end_offsets, partition_count

from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOPIC = "it.public.accounts"


def _kafka_config(postgres: Any, database: str, workdir: Path, bootstrap: str, **overrides: str) -> Any:
    return make_config(postgres, database, workdir, **{
        "topic.prefix": "it", "cdckit.sink": "kafka", "kafka.bootstrap.servers": bootstrap,
        "topic.creation.default.partitions": "3", "kafka.delivery.timeout.ms": "20000",
        "kafka.request.timeout.ms": "5000", **overrides})


def _source(dsn: str) -> dict[Any, dict[str, Any]]:
    return {row[0]: {"id": row[0], "owner": row[1], "balance": row[2]}
            for row in fetch(dsn, "SELECT id, owner, balance FROM public.accounts")}


def _workload(dsn: str, start: int, count: int) -> None:
    statements = []
    for i in range(start, start + count):
        statements.append(f"INSERT INTO public.accounts VALUES ({i}, 'o{i}', {i})")
        if i % 3 == 0:
            statements.append(f"UPDATE public.accounts SET balance = balance + 1 WHERE id = {i}")
        if i % 7 == 0:
            statements.append(f"DELETE FROM public.accounts WHERE id = {i}")
        if i % 11 == 0:
            statements.append(f"UPDATE public.accounts SET id = {i + 100000} WHERE id = {i}")
    execute(dsn, *statements)


def _position(value: dict[str, Any]) -> tuple[int, int, int]:
    source = value["source"]
    snapshot = source["snapshot"] != "false"
    return (0 if snapshot else 1, source["lsn"], {"d": 0, "c": 2}.get(value["op"], 1))


def _per_key_in_order(records: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    """The records by key, after checking that each key's records are in one partition, in position order."""
    by_key: dict[Any, list[dict[str, Any]]] = {}
    for record in records:
        by_key.setdefault(payload(record["key"])["id"], []).append(record)
    for key, items in by_key.items():
        assert len({r["partition"] for r in items}) == 1, f"key {key} spans partitions"
        positions = [_position(payload(r["value"])) for r in items if r["value"] is not None]
        assert positions == sorted(positions), f"events of key {key} are out of order"
    return by_key


def _replay_deduplicated(records: list[dict[str, Any]]) -> tuple[dict[Any, dict[str, Any]], int]:
    """Apply records per key in partition order, dropping replays by position; returns (state, replays)."""
    state: dict[Any, dict[str, Any]] = {}
    last: dict[Any, tuple[int, int, int]] = {}
    replays = 0
    for record in records:
        value = payload(record["value"]) if record["value"] is not None else None
        key = payload(record["key"])["id"]
        if value is None:
            continue
        position = _position(value)
        if key in last and position <= last[key]:
            replays += 1  # an event this consumer has already applied
            continue
        last[key] = position
        if value["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = value["after"]
    return state, replays


def test_events_reach_kafka_per_key_in_order_with_tombstones(postgres: Any, spark: Any, kafka: Any, database: str,
                                                             workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)",
            "INSERT INTO public.accounts SELECT g, 'seed' || g, g FROM generate_series(1, 50) g")
    config = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers, **{"max.batch.size": "40"})
    run_snapshot(spark, config)
    _workload(dsn, 51, 120)
    stream = run_stream(spark, config)
    assert stream.batches >= 3
    records = consume(kafka.bootstrap_servers, TOPIC)
    assert partition_count(kafka.bootstrap_servers, TOPIC) == 3
    assert len(records) == end_offsets(kafka.bootstrap_servers, TOPIC) == sum(stream.events_per_topic.values()) + 50
    first = records[0]
    assert first["key"]["schema"]["name"] == "it.public.accounts.Key"
    assert first["value"]["schema"]["name"] == "it.public.accounts.Envelope"
    for key, items in _per_key_in_order(records).items():
        for earlier, later in itertools.pairwise(items):
            if earlier["value"] is not None and payload(earlier["value"])["op"] == "d":
                assert later["value"] is None, f"the delete of key {key} is not followed by its tombstone"
    state, replays = _replay_deduplicated(records)
    assert replays == 0
    assert state == _source(dsn)
    # the quality suites, as a library call on the topic read back by Spark's Kafka source
    from cdckit.quality import check_records
    from cdckit.quality.records import read_kafka

    topics = read_kafka(spark, "it\\.public\\..*", {"kafka.bootstrap.servers": kafka.bootstrap_servers})
    report = check_records(topics, config.as_properties(include_secrets=True), reconcile=True)
    assert report.success, report.to_markdown()
    assert report.rows["envelopes"] == sum(1 for r in records if r["value"] is not None)
    assert report.rows["reconciliation_rows"] == len(state)


def test_a_batch_read_by_several_tasks_reaches_kafka_in_order_without_a_shuffle(
        postgres: Any, spark: Any, kafka: Any, database: str, workdir: Path) -> None:
    """A stream batch cut into 3 position ranges is written by one task, range after range: each key's events
    (insert, updates, key change, delete, spread over the ranges) reach its partition in order."""
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)")
    config = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers, **{
        "topic.prefix": "parts", "max.batch.size": "100000", "cdckit.stream.partitions": "3",
        "cdckit.stream.partition.min.events": "1", "snapshot.mode": "no_data"})
    run_snapshot(spark, config, data=False)
    execute(dsn, *(f"INSERT INTO public.accounts VALUES ({i}, 'o{i}', {i})" for i in range(1, 61)),
            *(f"UPDATE public.accounts SET balance = balance + 1 WHERE id = {i}" for i in range(1, 61)),
            *(f"UPDATE public.accounts SET balance = balance * 2 WHERE id = {i}" for i in range(1, 61, 2)),
            "UPDATE public.accounts SET id = id + 1000 WHERE id % 7 = 0",
            "DELETE FROM public.accounts WHERE id % 5 = 0")
    stream = run_stream(spark, config)
    assert stream.batches == 1
    offsets = next(Path(config.str("cdckit.checkpoint.location")).glob("**/offsets/0")).read_text()
    assert len(json.loads(offsets.splitlines()[-1])["splits"]) == 2  # the batch was cut into 3 ranges
    records = consume(kafka.bootstrap_servers, "parts.public.accounts")
    assert len(records) == sum(stream.events_per_topic.values())
    _per_key_in_order(records)
    state, replays = _replay_deduplicated(records)
    assert replays == 0
    assert state == _source(dsn)


def test_a_batch_read_by_one_task_goes_to_kafka_in_one_pass_with_its_new_tables_and_structures(
        postgres: Any, spark: Any, kafka: Any, database: str, workdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Into Kafka a batch is read by one task and written in one pass: the topics of the tables captured now are
    created first (a table created while the stream was stopped gets cdckit's partition count, not the broker's 1)
    and a new structure is recorded from the control rows observed during the write. Records of a table renamed
    since its changes go to a topic nobody listed, which this broker does not create by itself: that batch is
    written again by the two reads, which create it."""
    from cdckit.spark.schema_history import SchemaHistory

    dsn = postgres.dsn(database)
    bootstrap = kafka.bootstrap_servers
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)",
            "INSERT INTO public.accounts SELECT g, 'o' || g, g FROM generate_series(1, 5) g")
    config = _kafka_config(postgres, database, workdir, bootstrap, **{
        "topic.prefix": "pass", "table.include.list": "public\\.(accounts|fresh|brief)",
        "publication.autocreate.mode": "all_tables", "kafka.max.block.ms": "5000"})
    run_snapshot(spark, config)
    execute(dsn, "CREATE TABLE public.fresh (id integer PRIMARY KEY, note text)",
            "INSERT INTO public.fresh VALUES (1, 'a'), (2, 'b')", "ALTER TABLE public.accounts ADD COLUMN tier text",
            "UPDATE public.accounts SET tier = 'gold' WHERE id <= 2")
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        first = run_stream(spark, config)
    assert "again" not in caplog.text
    assert first.events_per_topic == {"pass.public.accounts": 2, "pass.public.fresh": 2}
    assert partition_count(bootstrap, "pass.public.fresh") == 3
    assert sorted(payload(r["value"])["after"]["id"] for r in consume(bootstrap, "pass.public.fresh")) == [1, 2]
    updates = [payload(r["value"]) for r in consume(bootstrap, "pass.public.accounts")
               if r["value"] is not None and payload(r["value"])["op"] == "u"]
    assert sorted((u["after"]["id"], u["after"]["tier"]) for u in updates) == [(1, "gold"), (2, "gold")]
    assert SchemaHistory.load(config.as_properties()).version("public.accounts") == 2

    execute(dsn, "CREATE TABLE public.brief (id integer PRIMARY KEY)", "INSERT INTO public.brief VALUES (7)",
            "ALTER TABLE public.brief RENAME TO brief_gone")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        second = run_stream(spark, config)
    assert "writing stream-" in caplog.text and "again" in caplog.text
    assert second.events_per_topic == {"pass.public.brief": 1}
    assert [payload(r["value"])["after"]["id"] for r in consume(bootstrap, "pass.public.brief")] == [7]


def test_a_snapshot_reports_the_records_each_topic_received(postgres: Any, spark: Any, kafka: Any, database: str,
                                                             workdir: Path) -> None:
    """A snapshot's records are written in one pass (its topics are known before reading): the report's count per
    topic is what each topic holds, an empty table sends nothing, and the schema change records go to
    topic.prefix."""
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)",
            "INSERT INTO public.accounts SELECT g, 'seed' || g, g FROM generate_series(1, 1234) g",
            "CREATE TABLE public.notes (id integer PRIMARY KEY, body text)",
            "CREATE TABLE public.empty (id integer PRIMARY KEY)",
            "INSERT INTO public.notes SELECT g, repeat('n', g % 50) FROM generate_series(1, 321) g")
    config = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers, **{
        "topic.prefix": "once", "include.schema.changes": "true", "cdckit.snapshot.chunk.rows": "300"})
    report = run_snapshot(spark, config)
    assert report.rows_per_topic == {"once": 3, "once.public.accounts": 1234, "once.public.notes": 321}
    for topic, count in report.rows_per_topic.items():
        assert end_offsets(kafka.bootstrap_servers, topic) == count
    assert sorted(payload(r["key"])["id"] for r in consume(kafka.bootstrap_servers, "once.public.notes")) == \
        list(range(1, 322))
    assert "once.public.empty" not in _topics(kafka.bootstrap_servers) or \
        end_offsets(kafka.bootstrap_servers, "once.public.empty") == 0


@pytest.mark.version_neutral  # a killed job's replay: test_restarts.py runs it on each Spark, the tests here the sink
def test_killed_job_replays_at_least_once_and_consumers_drop_replays(postgres: Any, spark: Any, kafka: Any,
                                                                      database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)")
    config = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers,
                           **{"topic.prefix": "killed", "max.batch.size": "100"})
    run_snapshot(spark, config)
    _workload(dsn, 1, 1500)
    properties = config.as_properties(include_secrets=True)
    properties.update({"cdckit.trigger": "processing-time", "cdckit.trigger.interval": "200 milliseconds"})
    config_file = workdir / "connector.json"
    config_file.write_text(json.dumps({"name": "killed", "config": properties}))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    process = subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    topic = "killed.public.accounts"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                if end_offsets(kafka.bootstrap_servers, topic) > 300:
                    break
            except Exception:  # the topic does not exist yet
                continue
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    run_stream(spark, config)
    state, _replays = _replay_deduplicated(consume(kafka.bootstrap_servers, topic))
    assert state == _source(dsn)


@pytest.mark.version_neutral  # Kafka's admin client; the replay tests run the sink's Spark path
def test_broker_restart_fails_clearly_and_a_restart_delivers_everything(postgres: Any, spark: Any, database: str,
                                                                       workdir: Path) -> None:
    from cdckit.errors import CdcKitError
    from cdckit_lab.kafka_broker import KafkaBroker

    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)")
    broker = KafkaBroker(workdir / "own-broker").start()
    try:
        config = _kafka_config(postgres, database, workdir, broker.bootstrap_servers,
                               **{"topic.prefix": "restart", "kafka.delivery.timeout.ms": "8000",
                                  "kafka.request.timeout.ms": "3000", "kafka.max.block.ms": "8000",
                                  "kafka.default.api.timeout.ms": "8000"})
        run_snapshot(spark, config)
        _workload(dsn, 1, 60)
        broker.stop()
        with pytest.raises(CdcKitError, match=r"Kafka at 127\.0\.0\.1:\d+"):
            run_stream(spark, config)
        broker.start()
        run_stream(spark, config)
        state, _ = _replay_deduplicated(consume(broker.bootstrap_servers, "restart.public.accounts"))
        assert state == _source(dsn)
    finally:
        broker.stop()


def test_qlik_messages_over_kafka_announce_each_table_first(postgres: Any, spark: Any, kafka: Any, database: str,
                                                            workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)",
            "INSERT INTO public.accounts VALUES (1, 'a', 1)")
    config = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers,
                           **{"topic.prefix": "qlik", "cdckit.message.format": "qlik"})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.accounts VALUES (2, 'b', 2)", "UPDATE public.accounts SET balance = 5")
    run_stream(spark, config)
    records = consume(kafka.bootstrap_servers, "qlik.public.accounts")
    kinds = ["metadata" if "lineage" in r["value"] else r["value"]["headers"]["operation"] for r in records]
    assert kinds.count("REFRESH") == 1 and kinds.count("INSERT") == 1 and kinds.count("UPDATE") == 2
    for partition in {r["partition"] for r in records}:
        in_partition = [k for r, k in zip(records, kinds, strict=True) if r["partition"] == partition]
        assert in_partition[0] == "metadata", f"partition {partition} starts with data, not the table's metadata"


def test_record_larger_than_the_limit_fails_or_goes_to_dead_letters(postgres: Any, spark: Any, kafka: Any,
                                                                    database: str, workdir: Path) -> None:
    from cdckit.errors import CdcKitError

    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.docs (id integer PRIMARY KEY, body text)",
            "INSERT INTO public.docs VALUES (1, 'small'), (2, repeat('x', 5000))")
    strict = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers,
                           **{"topic.prefix": "big", "cdckit.kafka.max.message.bytes": "3000"})
    with pytest.raises(CdcKitError, match="exceeds the 3000-byte limit"):
        run_snapshot(spark, strict)
    assert "big.public.docs" not in {t for t in _topics(kafka.bootstrap_servers)}
    lenient = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers,
                            **{"topic.prefix": "big", "cdckit.kafka.max.message.bytes": "3000",
                               "cdckit.kafka.oversize.handling": "dead-letter", "slot.name": f"slot2_{database}",
                               "cdckit.checkpoint.location": str(workdir / "checkpoint2")})
    run_snapshot(spark, lenient)
    delivered = consume(kafka.bootstrap_servers, "big.public.docs")
    assert [payload(r["key"])["id"] for r in delivered] == [1]
    dead = list((workdir / "out" / "_dead-letter" / "big.public.docs").glob("*.jsonl"))
    assert dead and '"id":2' in dead[0].read_text()


def _topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_deleted_topic_is_recreated_or_reported_and_nothing_after_it_is_lost(postgres: Any, spark: Any, kafka: Any,
                                                                             database: str, workdir: Path) -> None:
    from confluent_kafka.admin import AdminClient

    from cdckit.errors import CdcKitError

    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)",
            "INSERT INTO public.accounts VALUES (1, 'a', 1)")
    config = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers, **{"topic.prefix": "gone"})
    run_snapshot(spark, config)
    topic = "gone.public.accounts"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    execute(dsn, "INSERT INTO public.accounts VALUES (2, 'b', 2)",
            "UPDATE public.accounts SET balance = 5 WHERE id = 1")
    strict = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers,
                           **{"topic.prefix": "gone", "topic.creation.enable": "false"})
    with pytest.raises(CdcKitError, match=f"topics {topic} do not exist and topic.creation.enable=false"):
        run_stream(spark, strict)
    run_stream(spark, config)  # the default recreates the topic; the changes since the deletion all arrive
    values = [payload(r["value"]) for r in consume(kafka.bootstrap_servers, topic) if r["value"] is not None]
    assert sorted((v["op"], v["after"]["id"]) for v in values) == [("c", 2), ("u", 1)]


def test_transforms_unwrap_and_route_records_on_their_way_to_kafka(postgres: Any, spark: Any, kafka: Any,
                                                                    database: str, workdir: Path) -> None:
    """transforms=unwrap,route as a Debezium user writes it: flat rows with a __deleted marker and an op header,
    on the renamed topic; replayed by key they give the source table."""
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id integer PRIMARY KEY, owner text NOT NULL, balance integer)",
            "INSERT INTO public.accounts SELECT g, 'seed' || g, g FROM generate_series(1, 20) g")
    config = _kafka_config(postgres, database, workdir, kafka.bootstrap_servers, **{
        "transforms": "unwrap,route",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
        "transforms.unwrap.add.headers": "op,source.lsn",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": r"it\.public\.(.*)", "transforms.route.replacement": "flat.$1"})
    run_snapshot(spark, config)
    _workload(dsn, 21, 60)
    run_stream(spark, config)
    records = consume(kafka.bootstrap_servers, "flat.accounts")
    assert len(records) > 80
    state: dict[Any, dict[str, Any]] = {}
    ops = set()
    for record in records:  # per key in partition order, as a consumer applies them
        assert record["value"] is not None, "rewrite mode leaves no tombstone"
        row = record["value"]["payload"]
        headers = dict(record["headers"])
        ops.add(headers["__op"].decode())
        assert record["value"]["schema"]["name"] == "it.public.accounts.Value"
        if row.pop("__deleted") == "true":
            state.pop(row["id"], None)
        else:
            state[row["id"]] = row
    assert ops == {"r", "c", "u", "d"}
    assert state == _source(dsn)
