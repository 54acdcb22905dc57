"""PostgreSQL -> snapshot and stream jobs -> files, against a real PostgreSQL and a real Spark."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, payload, positions_by_key, records, replay

from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

ROWS = 100_000


def _accounts_table(dsn: str, rows: int) -> None:
    execute(dsn,
            "CREATE TABLE public.accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance integer NOT NULL)",
            f"INSERT INTO public.accounts SELECT g, 'owner-' || g, g % 1000 FROM generate_series(1, {rows}) g")


def _source_rows(dsn: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(row[0],): {"id": row[0], "owner": row[1], "balance": row[2]}
            for row in fetch(dsn, "SELECT id, owner, balance FROM public.accounts")}


class Writer(threading.Thread):
    """Keeps writing (insert, update, delete, one transaction each) until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stop_event = threading.Event()
        self.transactions = 0

    def run(self) -> None:
        import psycopg2

        conn = psycopg2.connect(self.dsn)
        next_id = ROWS + 1
        try:
            while not self.stop_event.is_set():
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO public.accounts VALUES (%s, %s, 0)", (next_id, f"new-{next_id}"))
                    cur.execute("UPDATE public.accounts SET balance = balance + 1 WHERE id = %s",
                                (1 + (next_id * 7919) % ROWS,))
                    cur.execute("DELETE FROM public.accounts WHERE id = %s", (1 + (next_id * 104729) % ROWS,))
                conn.commit()
                next_id += 1
                self.transactions += 1
                self.stop_event.wait(0.002)  # a steady trickle, not a flood that would dominate the test
        finally:
            conn.close()


def test_snapshot_under_concurrent_writes_then_stream_reproduces_the_table(postgres: Any, spark: Any, database: str,
                                                                          workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _accounts_table(dsn, ROWS)
    config = make_config(postgres, database, workdir, **{"cdckit.snapshot.chunk.rows": "20000",
                                                         "max.batch.size": "20000"})
    writer = Writer(dsn)
    writer.start()
    try:
        snapshot = run_snapshot(spark, config)
    finally:
        writer.stop_event.set()
        writer.join()
    assert writer.transactions > 0, "the writer must have written while the snapshot ran"
    assert snapshot.rows_per_topic == {"it.public.accounts": snapshot.rows}
    assert ROWS - writer.transactions <= snapshot.rows <= ROWS + writer.transactions

    stream = run_stream(spark, config)
    assert stream.batches >= 1
    topic = "it.public.accounts"
    assert replay(config, topic) == _source_rows(dsn)

    for key, positions in positions_by_key(config, topic).items():
        assert positions == sorted(positions), f"events of key {key} are out of order"
    reads = [payload(r["value"]) for r in records(config, topic)
             if r["value"] is not None and payload(r["value"])["op"] == "r"]
    snapshot_markers = [read["source"]["snapshot"] for read in reads]
    assert snapshot_markers.count("last") == 1
    assert snapshot_markers.count("first") == 1 and snapshot_markers[0] == "first"  # the first chunk's first row
    assert len(snapshot_markers) == snapshot.rows
    # As Debezium: every snapshot record's source.ts_ms is the snapshot's start, before any record was written.
    assert len({read["source"]["ts_ms"] for read in reads}) == 1
    assert reads[0]["source"]["ts_ms"] <= min(read["ts_ms"] for read in reads)


def test_stream_events_are_debezium_envelopes_with_tombstones_and_pk_updates(postgres: Any, spark: Any,
                                                                             database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.items (id integer PRIMARY KEY, name text NOT NULL, qty integer)",
            "INSERT INTO public.items VALUES (1, 'one', 1), (2, 'two', 2)")
    config = make_config(postgres, database, workdir)
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.items VALUES (3, 'three', 3)",
            "UPDATE public.items SET qty = 20 WHERE id = 2",
            "UPDATE public.items SET id = 10 WHERE id = 1",
            "DELETE FROM public.items WHERE id = 3")
    run_stream(spark, config)
    stream_records = [r for r in records(config, "it.public.items") if
                      r["value"] is None or payload(r["value"])["op"] != "r"]
    shape = [(payload(r["key"])["id"], payload(r["value"])["op"] if r["value"] is not None else "tombstone")
             for r in stream_records]
    assert shape == [(3, "c"), (2, "u"), (1, "d"), (1, "tombstone"), (10, "c"), (3, "d"), (3, "tombstone")]

    create = stream_records[0]
    assert create["topic"] == "it.public.items"
    assert create["key"]["schema"]["name"] == "it.public.items.Key"
    value = create["value"]
    assert value["schema"]["name"] == "it.public.items.Envelope"
    assert [f["field"] for f in value["schema"]["fields"]] == ["before", "after", "source", "op", "ts_ms",
                                                               "transaction"]
    source = value["payload"]["source"]
    assert list(source) == ["version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema", "table",
                            "txId", "lsn", "xmin"]
    assert (source["connector"], source["name"], source["db"], source["schema"], source["table"]) == (
        "postgresql", "it", database, "public", "items")
    assert source["snapshot"] == "false" and isinstance(source["txId"], int) and isinstance(source["lsn"], int)
    assert value["payload"]["after"] == {"id": 3, "name": "three", "qty": 3}
    pk_delete = payload(stream_records[2]["value"])
    # REPLICA IDENTITY DEFAULT: only the old key; a NOT NULL column gets its type's neutral value, as Debezium does
    assert pk_delete["before"] == {"id": 1, "name": "", "qty": None}
    assert payload(stream_records[4]["value"])["after"] == {"id": 10, "name": "one", "qty": 1}
    lsns = [payload(r["value"])["source"]["lsn"] for r in stream_records if r["value"] is not None]
    assert lsns == sorted(lsns)


def test_schemas_disabled_and_replica_identity_full(postgres: Any, spark: Any, database: str,
                                                    workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.notes (id integer PRIMARY KEY, body text)",
            "ALTER TABLE public.notes REPLICA IDENTITY FULL")
    config = make_config(postgres, database, workdir, **{"key.converter.schemas.enable": "false",
                                                         "value.converter.schemas.enable": "false",
                                                         "tombstones.on.delete": "false"})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.notes VALUES (1, 'draft')", "UPDATE public.notes SET body = 'final'",
            "DELETE FROM public.notes")
    run_stream(spark, config)
    found = records(config, "it.public.notes")
    assert [r["key"] for r in found] == [{"id": 1}] * 3  # no schema envelope, no tombstone
    update, delete = found[1]["value"], found[2]["value"]
    assert set(update) == {"before", "after", "source", "op", "ts_ms", "transaction"}
    assert update["before"] == {"id": 1, "body": "draft"} and update["after"] == {"id": 1, "body": "final"}
    assert delete["before"] == {"id": 1, "body": "final"} and delete["after"] is None


def test_slot_confirmed_flush_advances_after_batches_commit(postgres: Any, spark: Any, database: str,
                                                           workdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.t (id integer PRIMARY KEY)")
    config = make_config(postgres, database, workdir, **{"max.batch.size": "10"})
    snapshot = run_snapshot(spark, config)
    slot = config.str("slot.name")

    def confirmed() -> int:
        return parse_lsn(fetch(dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                    f"WHERE slot_name = '{slot}'")[0][0])

    assert confirmed() == parse_lsn(snapshot.consistent_point)
    execute(dsn, *[f"INSERT INTO public.t VALUES ({i})" for i in range(25)])
    seen_during_batches: list[int] = []
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        first = run_stream(spark, config,
                           on_batch=lambda batch_id, summary: seen_during_batches.append(confirmed()))
    assert first.batches == 3  # 25 single-row transactions, at most 10 changes per batch
    # three full batches in a row (10, 10, 5): the job says once that the batches are small for a backlog
    hints = [r.getMessage() for r in caplog.records if "small micro-batches" in r.getMessage()]
    assert len(hints) == 1 and "3 in a row were full at max.batch.size=10" in hints[0]
    assert "remove max.batch.size" in hints[0] and "or raise it" in hints[0]
    caplog.clear()
    # While batch N is being written, the slot holds everything after batch N-1: WAL is released batch by batch,
    # never ahead of what Spark has committed.
    assert seen_during_batches[0] == parse_lsn(snapshot.consistent_point)
    assert seen_during_batches == sorted(set(seen_during_batches))
    assert confirmed() == parse_lsn(first.last_offset or "0/0")
    execute(dsn, "INSERT INTO public.t VALUES (100)")
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        second = run_stream(spark, config)
    assert second.batches == 1
    assert "small micro-batches" not in caplog.text  # one batch is no backlog
    assert confirmed() == parse_lsn(second.last_offset or "0/0") > parse_lsn(first.last_offset or "0/0")
    assert len(replay(config, "it.public.t")) == 26


def test_heartbeats_move_an_idle_slot_past_other_tables_wal(postgres: Any, spark: Any, database: str,
                                                            workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.watched (id integer PRIMARY KEY)",
            "CREATE TABLE public.busy (id integer PRIMARY KEY, payload text)")
    config = make_config(postgres, database, workdir, **{"table.include.list": "public.watched",
                                                         "heartbeat.interval.ms": "300",
                                                         "cdckit.trigger": "processing-time",
                                                         "cdckit.trigger.interval": "200 milliseconds",
                                                         "cdckit.stream.max.batches": "2"})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.busy SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g")
    wal_after_busy_writes = parse_lsn(fetch(dsn, "SELECT pg_current_wal_lsn()::text")[0][0])
    stream = run_stream(spark, config)
    assert stream.batches >= 2
    beats = records(config, "__debezium-heartbeat.it")
    # before 14 pgoutput does not deliver the message: the slot moves, but no record is written
    if int(fetch(dsn, "SHOW server_version_num")[0][0]) >= 140000:
        assert beats, "an idle stream must emit heartbeat records"
        assert beats[0]["key"]["payload"] == {"serverName": "it"}
        assert beats[0]["key"]["schema"]["name"] == "io.debezium.connector.common.ServerNameKey"
        assert isinstance(beats[0]["value"]["payload"]["ts_ms"], int)
    else:
        assert beats == []
    assert records(config, "it.public.watched") == []
    slot = config.str("slot.name")
    confirmed = fetch(dsn, f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{slot}'")
    assert parse_lsn(confirmed[0][0]) > wal_after_busy_writes


def test_yugabytedb_connector_class_names_itself_in_source(postgres: Any, spark: Any, database: str,
                                                           workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.employee (employee_id integer PRIMARY KEY, employee_name varchar(255))",
            "INSERT INTO public.employee VALUES (1001, 'Alice')")
    config = make_config(postgres, database, workdir,
                         **{"connector.class": "io.debezium.connector.postgresql.YugabyteDBConnector"})
    run_snapshot(spark, config)
    execute(dsn, "UPDATE public.employee SET employee_name = 'Bob'")
    run_stream(spark, config)
    found = [payload(r["value"]) for r in records(config, "it.public.employee")]
    assert [(v["op"], v["source"]["connector"]) for v in found] == [("r", "YugabyteDB"), ("u", "YugabyteDB")]
    assert found[0]["source"]["snapshot"] == "last"
    assert found[1]["after"] == {"employee_id": 1001, "employee_name": "Bob"}


def test_unchanged_toasted_value_is_the_debezium_placeholder(postgres: Any, spark: Any, database: str,
                                                             workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.documents (id integer PRIMARY KEY, title text, body text)",
            "ALTER TABLE public.documents ALTER COLUMN body SET STORAGE EXTERNAL")  # out of line, uncompressed
    config = make_config(postgres, database, workdir)
    run_snapshot(spark, config)
    big = "x" * 10_000
    execute(dsn, f"INSERT INTO public.documents VALUES (1, 'draft', '{big}')",
            "UPDATE public.documents SET title = 'final' WHERE id = 1")
    run_stream(spark, config)
    insert, update = (payload(r["value"]) for r in records(config, "it.public.documents"))
    assert insert["after"]["body"] == big
    assert update["after"] == {"id": 1, "title": "final", "body": "__debezium_unavailable_value"}


def test_slot_drop_on_stop_removes_the_slot(postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.t (id integer PRIMARY KEY)")
    config = make_config(postgres, database, workdir, **{"slot.drop.on.stop": "true"})
    run_stream(spark, config)
    slot = config.str("slot.name")
    assert fetch(dsn, f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'") == [(0,)]
