"""SQL Server capture through the Spark jobs, against the in-process model of SQL Server's CDC objects
(cdckit_lab.sqlserver_model: what it models and what it does not is in its docstring). The same scenarios run
against a real SQL Server 2022 in tests/docker wherever a Docker engine exists."""

from __future__ import annotations

import datetime as dt
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import payload, records, replay

from cdckit.cli import main
from cdckit.config import Config, validate
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel
from readback import check_unreadable_types_scenario

pytestmark = [pytest.mark.spark]
TOPIC = "server1.testDB.dbo.customers"


@pytest.fixture
def model(workdir: Path) -> SqlServerModel:
    server = SqlServerModel(workdir / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    for table in ("customers", "orders"):
        server.create_table("testDB", "dbo", table, [ModelColumn("id", "int", nullable=False),
                                                     ModelColumn("email", "varchar", max_length=255)], ["id"])
        server.enable_table("testDB", "dbo", table)
    return server


def sqlserver_config(model: SqlServerModel, workdir: Path, **overrides: str) -> Config:
    properties = {
        "connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
        "database.hostname": "sqlserver.test", "database.port": "1433", "database.user": "cdckit",
        "database.password": "not-a-real-secret", "database.names": "testDB", "topic.prefix": "server1",
        "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
        "cdckit.sqlserver.model.path": str(workdir / "sqlserver.sqlite"),
        "cdckit.output.path": str(workdir / "out"), "cdckit.checkpoint.location": str(workdir / "checkpoint"),
    }
    properties.update(overrides)
    return validate(properties)


def table_rows(model: SqlServerModel, table: str = "customers") -> dict[tuple[Any, ...], dict[str, Any]]:
    conn = model.connect(database="testDB")
    cursor = conn.cursor()
    cursor.execute(f"SELECT [id], [email] FROM [testDB].[dbo].[{table}] ORDER BY [id]")
    return {(r[0],): {"id": r[0], "email": r[1]} for r in cursor.fetchall()}


def test_changes_stream_as_debezium_sqlserver_events(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "first@example.org"})
    config = sqlserver_config(model, workdir)
    snapshot = run_snapshot(spark, config)
    assert snapshot.rows_per_topic[TOPIC] == 1
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "email": "john.doe@example.org"})
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 2}, {"email": "noreply@example.org"})
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 1}, {"id": 10})
    with model.transaction("testDB") as tx:
        tx.delete("dbo", "customers", {"id": 2})
    run_stream(spark, config)
    found = records(config, TOPIC)
    shape = [(payload(r["key"])["id"], payload(r["value"])["op"] if r["value"] else "tombstone",
              payload(r["value"])["source"]["event_serial_no"] if r["value"] else None) for r in found]
    # a key update: a delete and a create under different __$command_ids, serial 1 each (Debezium's direct mode)
    assert shape == [(1, "r", None), (2, "c", 1), (2, "u", 2), (1, "d", 1), (1, "tombstone", None), (10, "c", 1),
                     (2, "d", 1), (2, "tombstone", None)]
    update = found[2]["value"]
    assert update["schema"]["name"] == "server1.testDB.dbo.customers.Envelope"
    assert found[2]["key"]["schema"]["name"] == "server1.testDB.dbo.customers.Key"
    source = update["payload"]["source"]
    assert list(source) == ["version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table",
                            "change_lsn", "commit_lsn", "event_serial_no"]
    assert (source["connector"], source["name"], source["db"], source["snapshot"]) == (
        "sqlserver", "server1", "testDB", "false")
    assert update["payload"]["before"] == {"id": 2, "email": "john.doe@example.org"}
    assert update["payload"]["after"] == {"id": 2, "email": "noreply@example.org"}
    pk_delete, pk_create = found[3]["value"]["payload"], found[5]["value"]["payload"]
    assert pk_delete["source"]["commit_lsn"] == pk_create["source"]["commit_lsn"]
    assert pk_delete["source"]["change_lsn"] == pk_create["source"]["change_lsn"]
    read = found[0]["value"]["payload"]["source"]
    assert read["snapshot"] == "last" and read["change_lsn"] is None and read["event_serial_no"] is None
    assert replay(config, TOPIC) == table_rows(model)
    schema_changes = records(config, "server1")
    assert {payload(r["value"])["tableChanges"][0]["id"] for r in schema_changes} == {
        '"testDB"."dbo"."customers"', '"testDB"."dbo"."orders"'}


@pytest.mark.version_neutral  # the order of a transaction's changes; the test above runs the Spark path
def test_a_deferred_key_update_streams_every_delete_before_its_create_and_replays_to_the_table(
        model: SqlServerModel, spark: Any, workdir: Path) -> None:
    """UPDATE customers SET id = id + 1 moves keys onto keys the same statement frees: SQL Server logs a deferred
    update, every delete under one command and every insert under the next, the inserts with LOWER seqvals. Ordered
    by seqval, key 2's create would come before key 2's delete, and replay would lose the row."""
    with model.transaction("testDB") as tx:
        for i in range(1, 6):
            tx.insert("dbo", "customers", {"id": i, "email": f"{i}@example.org"})
    config = sqlserver_config(model, workdir, **{"max.batch.size": "3"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.update_many("dbo", "customers", [({"id": i}, {"id": i + 1}) for i in range(1, 6)])
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 3}, {"email": "three@example.org"})
    run_stream(spark, config)
    found = [r for r in records(config, TOPIC) if r["value"] is None or payload(r["value"])["op"] != "r"]
    shape = [(payload(r["key"])["id"], payload(r["value"])["op"]) for r in found if r["value"] is not None]
    assert shape == [(1, "d"), (2, "d"), (3, "d"), (4, "d"), (5, "d"), (2, "c"), (3, "c"), (4, "c"), (5, "c"),
                     (6, "c"), (3, "u")]
    assert replay(config, TOPIC) == table_rows(model)
    sources = [payload(r["value"])["source"] for r in found if r["value"] is not None]
    assert len({s["change_lsn"] for s in sources}) == len(sources)  # every change keeps its own seqval


def old_database(workdir: Path) -> SqlServerModel:
    """testDB with dbo.customers captured, on a log years into its life: VLF 0x0004B3E1, LSNs past 2**63."""
    server = SqlServerModel(workdir / "sqlserver.sqlite")
    server.create_database("testDB", first_lsn=(0x4B3E1 << 48) | (0x1F40 << 16) | 2)
    server.enable_cdc("testDB")
    server.create_table("testDB", "dbo", "customers", [ModelColumn("id", "int", nullable=False),
                                                       ModelColumn("email", "varchar", max_length=255)], ["id"])
    server.enable_table("testDB", "dbo", "customers")
    return server


def test_a_database_whose_lsns_pass_64_bits_snapshots_and_streams(spark: Any, workdir: Path) -> None:
    """A SQL Server LSN is 80 bits: VLF sequence number, log block, slot. A database years into its life (VLF
    0x0004B3E1 here, as a busy database's log reaches within months) has LSNs past 2**63, which once stopped the
    snapshot (Spark's BIGINT) and the stream (the metrics' JSON). Positions are DECIMAL(25, 0) now."""
    server = old_database(workdir)
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "one@example.org"})
    config = sqlserver_config(server, workdir)
    run_snapshot(spark, config)
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "email": "two@example.org"})
    with server.transaction("testDB") as tx:
        tx.update_many("dbo", "customers", [({"id": i}, {"id": i + 1}) for i in (1, 2)])
    run_stream(spark, config)
    found = records(config, TOPIC)
    sources = [payload(r["value"])["source"] for r in found if r["value"] is not None]
    assert all(s["commit_lsn"].startswith("0004b3e1:") for s in sources)
    assert [payload(r["value"])["op"] for r in found if r["value"] is not None] == ["r", "c", "d", "d", "c", "c"]
    assert replay(config, TOPIC) == table_rows(server)


def test_the_debezium_3_6_format_for_sql_server(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "first@example.org"})
    config = sqlserver_config(model, workdir, **{"cdckit.debezium.format": "3.6"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 1}, {"email": "second@example.org"})
    run_stream(spark, config)
    read, update = (r["value"] for r in records(config, TOPIC))
    for document in (read, update):
        assert list(document["payload"]) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us",
                                             "ts_ns"]
        assert document["schema"]["version"] == 2
        source = document["payload"]["source"]
        assert list(source)[:8] == ["version", "connector", "name", "ts_ms", "snapshot", "db", "ts_us", "ts_ns"]
        assert source["version"] == "3.6.0.Final" and source["ts_us"] == source["ts_ms"] * 1000
    assert (read["payload"]["op"], update["payload"]["op"]) == ("r", "u")
    assert update["payload"]["after"]["email"] == "second@example.org"
    assert replay(config, TOPIC) == table_rows(model)


def test_one_transaction_over_two_tables_with_transaction_metadata(model: SqlServerModel, spark: Any,
                                                                   workdir: Path) -> None:
    config = sqlserver_config(model, workdir, **{"provide.transaction.metadata": "true"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        for i in range(3):
            tx.insert("dbo", "customers", {"id": i, "email": f"c{i}"})
        tx.insert("dbo", "orders", {"id": 1, "email": "o1"})
    run_stream(spark, config)
    begin, end = (payload(r["value"]) for r in records(config, "server1.transaction"))
    assert (begin["status"], end["status"]) == ("BEGIN", "END")
    assert begin["id"] == end["id"] and len(begin["id"]) == len("00000027:00000758:0005")
    assert end["event_count"] == 4
    assert end["data_collections"] == [{"data_collection": "testDB.dbo.customers", "event_count": 3},
                                       {"data_collection": "testDB.dbo.orders", "event_count": 1}]
    blocks = [payload(r["value"])["transaction"] for r in records(config, TOPIC)]
    assert [b["total_order"] for b in blocks] == [1, 2, 3]
    assert payload(records(config, "server1.testDB.dbo.orders")[0]["value"])["transaction"]["total_order"] == 4


def test_datetimeoffset_columns_keep_their_own_offset_in_snapshot_and_stream(model: SqlServerModel, spark: Any,
                                                                             workdir: Path) -> None:
    """Debezium's ZonedTimestamp: ISO-8601 at the value's own offset ('Z' for +00:00), fraction digits trimmed."""
    model.create_table("testDB", "dbo", "meetings", [ModelColumn("id", "int", nullable=False),
                                                     ModelColumn("starts", "datetimeoffset", precision=30, scale=3),
                                                     ModelColumn("ends", "datetimeoffset")], ["id"])
    model.enable_table("testDB", "dbo", "meetings")
    plus_11, minus_0530 = dt.timezone(dt.timedelta(hours=11)), dt.timezone(-dt.timedelta(hours=5, minutes=30))
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "meetings", {"id": 1, "starts": dt.datetime(2018, 7, 13, 12, 23, 45, 456000, plus_11),
                                      "ends": None})
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.meetings"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "meetings", {"id": 2, "starts": dt.datetime(2024, 2, 29, 23, 59, 59, 999000, minus_0530),
                                      "ends": dt.datetime(2024, 3, 1, 0, 0, 0, 123456, dt.timezone.utc)})
        tx.update("dbo", "meetings", {"id": 1}, {"ends": dt.datetime(2018, 7, 13, 20, 0, 0, 120000, minus_0530)})
    run_stream(spark, config)
    found = records(config, "server1.testDB.dbo.meetings")
    after_fields = {f["field"]: f for f in found[0]["value"]["schema"]["fields"][1]["fields"]}
    assert after_fields["starts"]["name"] == after_fields["ends"]["name"] == "io.debezium.time.ZonedTimestamp"
    assert [(payload(r["value"])["op"], payload(r["value"])["after"]) for r in found] == [
        ("r", {"id": 1, "starts": "2018-07-13T12:23:45.456+11:00", "ends": None}),
        ("c", {"id": 2, "starts": "2024-02-29T23:59:59.999-05:30", "ends": "2024-03-01T00:00:00.123456Z"}),
        ("u", {"id": 1, "starts": "2018-07-13T12:23:45.456+11:00", "ends": "2018-07-13T20:00:00.12-05:30"})]


@pytest.mark.version_neutral  # the values' path; the other tests run the Spark path on every Spark
def test_spatial_hierarchyid_variant_rowversion_and_100_ns_columns_snapshot_and_stream_exactly(
        model: SqlServerModel, spark: Any, workdir: Path) -> None:
    """Columns pyodbc cannot fetch (geometry, geography, hierarchyid: ODBC type -151; sql_variant: -150) are read
    through the query's conversions (docs/decisions/0032), a rowversion keeps its bytes from snapshot to stream, and
    datetime2(7), time(7) and datetimeoffset(7) keep their 100 ns digit."""
    names = ["id", "shape", "place", "node", "tag", "version", "at", "clock", "zoned"]
    types = ["int", "geometry", "geography", "hierarchyid", "sql_variant", "timestamp", "datetime2", "time",
             "datetimeoffset"]
    model.create_table("testDB", "dbo", "shapes", [ModelColumn(n, t, nullable=n != "id")
                                                   for n, t in zip(names, types, strict=True)], ["id"])
    model.enable_table("testDB", "dbo", "shapes")
    with model.transaction("testDB") as tx:
        version = tx.insert("dbo", "shapes", {
            "id": 1, "shape": "LINESTRING(0 0, 3 4)", "place": ("POINT(-122.35 47.65)", 4326), "node": "/1/",
            "tag": 7, "at": "2024-01-02 03:04:05.1234567", "clock": "00:00:00.0000001",
            "zoned": "2024-01-02 03:04:05.1234567 +11:00"})["version"]
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.shapes"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.update("dbo", "shapes", {"id": 1}, {"node": "/1/2/", "tag": "seven", "clock": "12:00:00.9999999"})
    run_stream(spark, config)
    found = records(config, "server1.testDB.dbo.shapes")
    check_unreadable_types_scenario(found, version)


def test_qlik_messages_for_sql_server_snapshot_and_stream(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    """cdckit.message.format=qlik with the SQL Server connector: a metadata message with Qlik's SQL Server types
    before the data of every batch, REFRESH rows from the snapshot, INSERT / UPDATE / DELETE with LSN headers."""
    model.create_table("testDB", "dbo", "items", [
        ModelColumn("id", "int", nullable=False), ModelColumn("name", "nvarchar", max_length=80),
        ModelColumn("qty", "tinyint"), ModelColumn("price", "decimal", precision=10, scale=2),
        ModelColumn("made", "datetime2", precision=23, scale=3), ModelColumn("opens", "time", precision=8),
        ModelColumn("due", "datetimeoffset", precision=30, scale=3)], ["id"])
    model.enable_table("testDB", "dbo", "items")
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "items", {"id": 1, "name": "Zoë", "qty": 3, "price": "2.50",
                                   "made": dt.datetime(2024, 5, 1, 8, 30, 0, 125000), "opens": dt.time(9, 0),
                                   "due": dt.datetime(2024, 5, 2, 17, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))})
    config = sqlserver_config(model, workdir, **{"cdckit.message.format": "qlik", "cdckit.qlik.task": "items-task",
                                                 "table.include.list": "dbo\\.items"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "items", {"id": 2, "name": "two", "qty": 255, "price": "10.05", "made": None,
                                   "opens": None, "due": None})
        tx.update("dbo", "items", {"id": 1}, {"price": "2.75"})
    with model.transaction("testDB") as tx:
        tx.delete("dbo", "items", {"id": 2})
    run_stream(spark, config)

    messages = [r["value"] for r in records(config, "server1.testDB.dbo.items")]
    kinds = ["metadata" if "lineage" in m else m["headers"]["operation"] for m in messages]
    assert kinds == ["metadata", "REFRESH", "metadata", "INSERT", "UPDATE", "DELETE"]
    metadata = messages[0]
    assert metadata["lineage"] == {**metadata["lineage"], "server": "server1", "task": "items-task", "schema": "dbo",
                                   "table": "items", "tableVersion": 1}
    assert {name: (c["ordinal"], c["type"], c["length"], c["precision"], c["scale"], c["primaryKeyPosition"])
            for name, c in metadata["tableStructure"]["tableColumns"].items()} == {
        "id": (1, "INT4", 0, 0, 0, 1), "name": (2, "WSTRING", 40, 0, 0, 0), "qty": (3, "UINT1", 0, 0, 0, 0),
        "price": (4, "NUMERIC", 0, 10, 2, 0), "made": (5, "DATETIME", 0, 0, 3, 0),
        "opens": (6, "STRING", 16, 0, 0, 0), "due": (7, "STRING", 34, 0, 0, 0)}
    refresh, insert, update, delete = messages[1], messages[3], messages[4], messages[5]
    assert refresh["data"] == {"id": 1, "name": "Zoë", "qty": 3, "price": "2.50", "made": "2024-05-01 08:30:00.125000",
                               "opens": "09:00:00", "due": "2024-05-02 17:00:00.000 +02:00"}
    assert refresh["headers"]["changeSequence"] == "" and refresh["headers"]["streamPosition"] == ""
    assert insert["data"] == {"id": 2, "name": "two", "qty": 255, "price": "10.05", "made": None, "opens": None,
                              "due": None}
    assert update["beforeData"] == refresh["data"] and update["data"] == {**refresh["data"], "price": "2.75"}
    assert update["headers"]["changeMask"] == "08"  # SQL Server CDC keeps the old row: only price changed
    assert delete["data"] == insert["data"] and delete["headers"]["changeMask"] == "01"
    headers = [m["headers"] for m in (insert, update, delete)]
    assert all(re.fullmatch(r"[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}", h["streamPosition"]) for h in headers)
    assert all(len(h["changeSequence"]) == 55 for h in headers)
    assert [h["changeSequence"] for h in headers] == sorted(h["changeSequence"] for h in headers)
    assert headers[0]["transactionId"] == headers[1]["transactionId"] != headers[2]["transactionId"]
    assert all(re.fullmatch(r"[0-9A-F]{32}", h["transactionId"]) for h in headers)
    assert [(h["transactionEventCounter"], h["transactionLastEvent"]) for h in headers] == [
        (1, False), (2, True), (1, True)]
    assert [r["key"] for r in records(config, "server1.testDB.dbo.items") if r["key"] is not None] == [
        {"id": 1}, {"id": 2}, {"id": 1}, {"id": 2}]
    # Qlik's metadata messages announce the structure: no Debezium schema change records beside them
    assert not list(records(config, "server1"))


class Writer(threading.Thread):
    def __init__(self, model: SqlServerModel) -> None:
        super().__init__(daemon=True)
        self.model, self.stop_event, self.transactions = model, threading.Event(), 0

    def run(self) -> None:
        next_id = 100_000
        while not self.stop_event.is_set():
            with self.model.transaction("testDB") as tx:
                tx.insert("dbo", "customers", {"id": next_id, "email": f"new{next_id}"})
                tx.update("dbo", "customers", {"id": 1 + next_id % 3000}, {"email": f"upd{next_id}"})
                tx.delete("dbo", "customers", {"id": 1 + (next_id * 7) % 3000})
            next_id += 1
            self.transactions += 1
            self.stop_event.wait(0.01)


@pytest.mark.version_neutral  # the model's concurrency; the other tests run its Spark path
def test_chunked_snapshot_under_concurrent_writes_then_stream_reproduces_the_table(
        model: SqlServerModel, spark: Any, workdir: Path) -> None:
    for start in range(1, 3001, 500):
        with model.transaction("testDB") as tx:
            for i in range(start, start + 500):
                tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
    config = sqlserver_config(model, workdir, **{"cdckit.snapshot.chunk.rows": "400", "max.batch.size": "300",
                                                 "table.include.list": "dbo\\.customers"})
    writer = Writer(model)
    writer.start()
    try:
        snapshot = run_snapshot(spark, config)
    finally:
        writer.stop_event.set()
        writer.join()
    assert writer.transactions > 0
    assert snapshot.rows_per_topic[TOPIC] > 2500
    stream = run_stream(spark, config)
    assert stream.batches >= 1
    assert replay(config, TOPIC) == table_rows(model)
    positions = [(payload(r["value"])["source"]["commit_lsn"], payload(r["value"])["source"]["change_lsn"])
                 for r in records(config, TOPIC) if r["value"] and payload(r["value"])["op"] != "r"]
    assert positions == sorted(positions)


@pytest.mark.version_neutral  # test_restarts.py runs the restarts' Spark path
def test_restart_at_every_batch_boundary_loses_and_repeats_nothing(model: SqlServerModel, spark: Any,
                                                                   workdir: Path) -> None:
    config = sqlserver_config(model, workdir, **{"max.batch.size": "7"})
    run_snapshot(spark, config)
    for i in range(40):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
            if i % 4 == 0:
                tx.update("dbo", "customers", {"id": i}, {"email": f"u{i}"})
    one_batch = sqlserver_config(model, workdir, **{"max.batch.size": "7", "cdckit.trigger": "processing-time",
                                                    "cdckit.trigger.interval": "100 milliseconds",
                                                    "cdckit.stream.max.batches": "1"})
    runs = 0
    while replay(config, TOPIC) != table_rows(model) and runs < 20:
        run_stream(spark, one_batch)
        runs += 1
    assert replay(config, TOPIC) == table_rows(model)
    assert runs >= 5  # 50 changes, at most 7 per batch: several restarts
    positions = [(payload(r["value"])["source"]["commit_lsn"], payload(r["value"])["source"]["change_lsn"],
                  payload(r["value"])["source"]["event_serial_no"]) for r in records(config, TOPIC) if r["value"]]
    assert positions == sorted(set(positions))


def _cli(capsys: pytest.CaptureFixture[str], config: Config, workdir: Path, command: str) -> tuple[int, str]:
    import json

    path = workdir / "connector.json"
    path.write_text(json.dumps({"name": "t", "config": config.as_properties(include_secrets=True)}))
    status = main([*command.split()[:1], str(path), *command.split()[1:]])
    captured = capsys.readouterr()
    if command.startswith("schema-evolution --plan"):
        return status, captured.out.strip()
    return status, " ".join((captured.out + captured.err).split())


def test_purged_changes_stop_the_stream_with_a_clear_error(model: SqlServerModel, spark: Any, workdir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = sqlserver_config(model, workdir)
    run_snapshot(spark, config)
    lsns = []
    for i in range(3):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "customers", {"id": i, "email": "x"})
        lsns.append(tx.commit_lsn)
    model.cleanup("testDB", "dbo_customers", lsns[-1])
    status, output = _cli(capsys, config, workdir, "stream")
    assert status == 2
    assert "were removed by the CDC cleanup job" in output and "testDB.dbo.customers" in output
    assert "Traceback" not in output


def test_agent_not_running_is_reported_as_such(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = SqlServerModel(workdir / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    server.create_table("testDB", "dbo", "customers", [ModelColumn("id", "int", nullable=False)], ["id"])
    server.enable_table("testDB", "dbo", "customers")
    server.stop_agent()
    status, output = _cli(capsys, sqlserver_config(server, workdir), workdir, "snapshot")
    assert status == 2
    assert "the SQL Server Agent is not running" in output and "'testDB'" in output


def test_disabled_capture_is_reported_by_table_name(model: SqlServerModel, spark: Any, workdir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    model.disable_table("testDB", "dbo_customers")
    status, output = _cli(capsys, config, workdir, "stream")
    assert status == 2
    assert "CDC was disabled for table testDB.dbo.customers" in output


def _signal_table(model: SqlServerModel) -> None:
    model.create_table("testDB", "dbo", "debezium_signal",
                       [ModelColumn("id", "varchar", max_length=42, nullable=False),
                        ModelColumn("type", "varchar", max_length=32, nullable=False),
                        ModelColumn("data", "varchar", max_length=2048)], ["id"])
    model.enable_table("testDB", "dbo", "debezium_signal")


def _reads(config: Config) -> list[dict[str, Any]]:
    """The snapshot reads of the customers topic, in order."""
    return [payload(r["value"]) for r in records(config, TOPIC) if r["value"] and payload(r["value"])["op"] == "r"]


def test_signal_runs_an_incremental_snapshot_that_never_goes_back_in_time(model: SqlServerModel, spark: Any,
                                                                           workdir: Path) -> None:
    _signal_table(model)
    with model.transaction("testDB") as tx:
        for i in range(1, 61):
            tx.insert("dbo", "customers", {"id": i, "email": f"before{i}"})
    config = sqlserver_config(model, workdir, **{"snapshot.mode": "no_data", "table.include.list": "dbo\\.customers",
                                                 "signal.data.collection": "testDB.dbo.debezium_signal",
                                                 "incremental.snapshot.chunk.size": "25"})
    run_stream(spark, config)
    assert records(config, TOPIC) == []  # no_data: rows that existed before streaming are not emitted
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "debezium_signal", {"id": "ad-hoc-1", "type": "execute-snapshot",
                                             "data": '{"data-collections": ["testDB\\\\.dbo\\\\.customers"], '
                                                     '"type": "incremental"}'})
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 5}, {"email": "changed-after-signal"})
        tx.delete("dbo", "customers", {"id": 6})
    run_stream(spark, config)
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 7}, {"email": "later"})
    run_stream(spark, config)
    found = records(config, TOPIC)
    reads = [payload(r["value"]) for r in found if r["value"] and payload(r["value"])["op"] == "r"]
    assert len(reads) == 59 and {r["source"]["snapshot"] for r in reads} == {"incremental"}
    assert replay(config, TOPIC) == table_rows(model)
    assert not records(config, "server1.testDB.dbo.debezium_signal")  # signals are not data


@pytest.mark.version_neutral  # the signal's checks; test_signal_runs_... runs the Spark path on every Spark
def test_a_signals_filter_reads_only_its_rows_and_a_hostile_one_reads_nothing(model: SqlServerModel, spark: Any,
                                                                             workdir: Path) -> None:
    _signal_table(model)
    with model.transaction("testDB") as tx:
        for i in range(1, 41):
            tx.insert("dbo", "customers", {"id": i, "email": f"user{i}@example.com"})
    config = sqlserver_config(model, workdir, **{"snapshot.mode": "no_data", "table.include.list": "dbo\\.customers",
                                                 "signal.data.collection": "testDB.dbo.debezium_signal",
                                                 "incremental.snapshot.chunk.size": "10"})
    run_stream(spark, config)

    def signal(signal_id: str, condition: str) -> None:
        data = ('{"data-collections": ["testDB.dbo.customers"], "additional-conditions": '
                f'[{{"data-collection": "testDB.dbo.customers", "filter": "{condition}"}}]}}')
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "debezium_signal", {"id": signal_id, "type": "execute-snapshot", "data": data})
        run_stream(spark, config)
        run_stream(spark, config)

    # T-SQL's reach into other servers, a column the table does not have, a conversion SQL Server refuses (245):
    # refused or dropped at planning, never a failed batch
    signal("hostile", "EXISTS (SELECT * FROM OPENQUERY(linked, 'SELECT 1'))")
    signal("unknown-column", "salary > 100")
    signal("type-error", "id = 'many'")
    assert [r for r in records(config, TOPIC) if r["value"]] == []
    signal("filtered", "id BETWEEN 5 AND 9 OR email LIKE 'user3%'")
    reads = [payload(r["value"]) for r in records(config, TOPIC) if r["value"] and payload(r["value"])["op"] == "r"]
    assert sorted(r["after"]["id"] for r in reads) == [3, 5, 6, 7, 8, 9, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39]


def test_stop_snapshot_signal_cancels_a_requested_snapshot(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    _signal_table(model)
    config = sqlserver_config(model, workdir, **{"snapshot.mode": "no_data", "table.include.list": "dbo\\.customers",
                                                 "signal.data.collection": "testDB.dbo.debezium_signal"})
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "x"})
    run_stream(spark, config)
    data = '{"data-collections": ["testDB\\\\.dbo\\\\.customers"], "type": "incremental"}'
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "debezium_signal", {"id": "go", "type": "execute-snapshot", "data": data})
        tx.insert("dbo", "debezium_signal", {"id": "stop", "type": "stop-snapshot", "data": data})
    run_stream(spark, config)
    assert records(config, TOPIC) == []


@pytest.mark.version_neutral  # the windows' logic; the signal tests run its Spark path
def test_an_incremental_snapshot_spreads_over_batches_and_pauses_resumes_and_stops(model: SqlServerModel, spark: Any,
                                                                                    workdir: Path) -> None:
    _signal_table(model)
    with model.transaction("testDB") as tx:
        for i in range(1, 301):
            tx.insert("dbo", "customers", {"id": i, "email": f"before{i}"})
    settings = {"snapshot.mode": "no_data", "table.include.list": "dbo\\.customers",
                "signal.data.collection": "testDB.dbo.debezium_signal", "incremental.snapshot.chunk.size": "25",
                "max.batch.size": "50"}
    config = sqlserver_config(model, workdir, **settings)
    two_batches = sqlserver_config(model, workdir, **{**settings, "cdckit.stream.max.batches": "2"})
    run_stream(spark, config)

    def signal(kind: str, number: int, data: str = "{}") -> None:
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "debezium_signal", {"id": f"{kind}-{number}", "type": kind, "data": data})

    def reads() -> list[dict[str, Any]]:
        return _reads(config)

    everything = '{"data-collections": ["testDB.dbo.customers"], "type": "incremental"}'
    signal("execute-snapshot", 1, everything)
    run_stream(spark, two_batches)  # the signal's batch, then one batch of two chunks
    first = len(reads())
    assert 0 < first <= 50
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 5}, {"email": "changed-during"})
        tx.update("dbo", "customers", {"id": 250}, {"email": "changed-before-its-chunk"})
        tx.delete("dbo", "customers", {"id": 251})
    signal("pause-snapshot", 2)
    run_stream(spark, config)
    paused = len(reads())
    # at most the chunks of the batch the bounded run had planned when it stopped, and of the signal's batch
    assert paused <= first + 100
    run_stream(spark, config)
    assert len(reads()) == paused < 300, "nothing is read while paused"
    signal("resume-snapshot", 3)
    run_stream(spark, config)
    assert sorted({r["after"]["id"] for r in reads()}) == [i for i in range(1, 301) if i != 251]
    assert {r["source"]["snapshot"] for r in reads()} == {"incremental"}
    assert replay(config, TOPIC) == table_rows(model)

    signal("execute-snapshot", 4, everything)
    run_stream(spark, two_batches)
    signal("stop-snapshot", 5, everything)
    run_stream(spark, config)
    again = len(reads()) - 299
    assert 0 < again < 299, "stopped mid-way"
    run_stream(spark, config)
    assert len(reads()) - 299 == again
    assert replay(config, TOPIC) == table_rows(model)


def test_an_incremental_snapshot_cut_by_a_failure_goes_on_from_the_checkpoint(model: SqlServerModel, spark: Any,
                                                                               workdir: Path) -> None:
    _signal_table(model)
    with model.transaction("testDB") as tx:
        for i in range(1, 201):
            tx.insert("dbo", "customers", {"id": i, "email": f"before{i}"})
    config = sqlserver_config(model, workdir, **{
        "snapshot.mode": "no_data", "table.include.list": "dbo\\.customers", "max.batch.size": "40",
        "signal.data.collection": "testDB.dbo.debezium_signal", "incremental.snapshot.chunk.size": "20"})
    run_stream(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "debezium_signal", {"id": "go", "type": "execute-snapshot",
                                             "data": '{"data-collections": ["testDB.dbo.customers"]}'})

    def reads() -> list[int]:
        return [r["after"]["id"] for r in _reads(config)]

    def fail_in_the_middle(batch_id: int, summary: dict[str, int]) -> None:
        if len(reads()) >= 60:
            with model.transaction("testDB") as tx:  # changed while the job is down
                tx.update("dbo", "customers", {"id": 150}, {"email": "changed-while-down"})
                tx.delete("dbo", "customers", {"id": 3})
            raise RuntimeError("simulated crash after the sink wrote a batch of the snapshot")

    with pytest.raises(Exception, match="simulated crash"):
        run_stream(spark, config, on_batch=fail_in_the_middle)
    read_before = len(reads())
    assert 60 <= read_before < 200
    run_stream(spark, config)
    found = reads()
    # the failed batch's chunks are read again (its files rewritten); nothing before them is
    assert sorted(set(found)) == list(range(1, 201)) and len(found) <= 200 + 40
    assert replay(config, TOPIC) == table_rows(model)


def test_failed_snapshot_resumes_with_only_the_unfinished_chunks(model: SqlServerModel, spark: Any,
                                                                 workdir: Path) -> None:
    import json

    with model.transaction("testDB") as tx:
        for i in range(1, 201):
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
    config = sqlserver_config(model, workdir, **{"cdckit.snapshot.chunk.rows": "50",
                                                 "table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    state_path = workdir / "checkpoint" / "snapshot" / "state.json"
    chunks_dir = state_path.parent / "chunks"
    finished = sorted(chunks_dir.glob("*.json"))
    assert len(finished) == 4
    # Make it look as if the job died after two chunks: their markers and files survive, the rest do not.
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({"status": "started", "tables": state["tables"],
                                      "consistent_point": state["consistent_point"], "plan": state["plan"]}))
    lost = [json.loads(p.read_text())["chunk"] for p in finished[2:]]
    for path in finished[2:]:
        path.unlink()
    out = workdir / "out" / TOPIC
    files = sorted(out.glob("snapshot-*.jsonl"))
    kept = {p.name: p.stat().st_mtime_ns for p in files}
    index_of = {chunk["database"] + "." + chunk["schema"] + "." + chunk["table"] + "#" + str(chunk["index"]): n
                for n, chunk in enumerate(state["plan"])}
    for chunk_id in lost:
        lost_file = out / f"snapshot-{index_of[chunk_id]:05d}.jsonl"
        lost_file.unlink()
        kept.pop(lost_file.name)
    model.record_statements = True
    report = run_snapshot(spark, config)
    assert report.rows_per_topic[TOPIC] == 100  # only the two unfinished chunks were read again
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("snapshot-*.jsonl") if p.name in kept} == kept
    assert replay(config, TOPIC) == table_rows(model)
    assert len(list(chunks_dir.glob("*.json"))) == 4


def test_snapshot_select_statement_override_is_used(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    with model.transaction("testDB") as tx:
        for i in range(1, 6):
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
    statement = "SELECT [email], [id] FROM [testDB].[dbo].[customers] ORDER BY [id]"
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers",
                                                 "snapshot.select.statement.overrides": "dbo.customers",
                                                 "snapshot.select.statement.overrides.dbo.customers": statement})
    model.record_statements = True
    run_snapshot(spark, config)
    assert any(entry[1] == statement for entry in model.statement_log())
    assert replay(config, TOPIC) == table_rows(model)


def test_override_that_is_not_a_select_is_refused() -> None:
    from cdckit.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="must be a single SELECT"):
        validate({"connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
                  "database.hostname": "h", "database.user": "u", "database.password": "p",
                  "database.names": "d", "topic.prefix": "t",
                  "snapshot.select.statement.overrides.dbo.customers": "DELETE FROM dbo.customers"})


def test_large_transaction_stays_whole_and_heartbeats_are_written(model: SqlServerModel, spark: Any,
                                                                  workdir: Path) -> None:
    config = sqlserver_config(model, workdir, **{"max.batch.size": "10", "heartbeat.interval.ms": "1",
                                                 "table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        for i in range(25):
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "orders", {"id": 1, "email": "not captured"})  # moves the max LSN only
    stream = run_stream(spark, config)
    files = sorted((workdir / "out" / TOPIC).glob("stream-*.jsonl"))
    assert len(files) == 1, "25 changes of one transaction are admitted together despite max.batch.size=10"
    commits = {payload(r["value"])["source"]["commit_lsn"] for r in records(config, TOPIC)}
    assert len(commits) == 1 and stream.batches >= 2
    beats = records(config, "__debezium-heartbeat.server1")
    assert beats and beats[0]["key"]["payload"] == {"serverName": "server1"}


def test_purged_changes_can_resnapshot_the_table_instead(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    config = sqlserver_config(model, workdir, **{"cdckit.sqlserver.purged.changes": "resnapshot",
                                                 "table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    lsns = []
    for i in range(5):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
        lsns.append(tx.commit_lsn)
    model.cleanup("testDB", "dbo_customers", lsns[3])  # inserts 0-2 are gone from the change table
    run_stream(spark, config)
    reads = [payload(r["value"]) for r in records(config, TOPIC) if payload(r["value"])["op"] == "r"]
    assert {r["after"]["id"] for r in reads} == {0, 1, 2, 3, 4}
    assert {r["source"]["snapshot"] for r in reads} == {"incremental"}
    assert replay(config, TOPIC) == table_rows(model)


def test_several_databases_in_one_job(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    model.create_database("salesDB")
    model.enable_cdc("salesDB")
    model.create_table("salesDB", "dbo", "invoices", [ModelColumn("id", "int", nullable=False),
                                                      ModelColumn("email", "varchar", max_length=255)], ["id"])
    model.enable_table("salesDB", "dbo", "invoices")
    config = sqlserver_config(model, workdir, **{"database.names": "testDB,salesDB",
                                                 "table.include.list": "dbo\\.customers,dbo\\.invoices"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "a"})
    with model.transaction("salesDB") as tx:
        tx.insert("dbo", "invoices", {"id": 7, "email": "b"})
    run_stream(spark, config)
    (customer,) = records(config, TOPIC)
    (invoice,) = records(config, "server1.salesDB.dbo.invoices")
    assert payload(customer["value"])["source"]["db"] == "testDB"
    assert payload(invoice["value"])["source"]["db"] == "salesDB"
    assert invoice["value"]["schema"]["name"] == "server1.salesDB.dbo.invoices.Envelope"


def test_second_capture_instance_takes_over_at_its_start_lsn(model: SqlServerModel, spark: Any,
                                                             workdir: Path) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "before"})
    model.alter_table_add_column("testDB", "dbo", "customers", ModelColumn("tier", "int"))
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "email": "missed-by-the-old-instance", "tier": 1})
    model.enable_table("testDB", "dbo", "customers", capture_instance="dbo_customers_v2")
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 3, "email": "after", "tier": 7})
        tx.update("dbo", "customers", {"id": 1}, {"tier": 2})
    run_stream(spark, config)
    events = [payload(r["value"]) for r in records(config, TOPIC) if r["value"]]
    assert [(e["op"], (e["after"] or {}).get("id")) for e in events] == [("c", 1), ("c", 2), ("c", 3), ("u", 1)]
    assert "tier" not in events[0]["after"] and "tier" not in events[1]["after"]  # read from the old instance
    assert events[2]["after"] == {"id": 3, "email": "after", "tier": 7}  # the new instance from its start LSN
    assert events[3]["after"]["tier"] == 2
    (alter,) = [payload(r["value"]) for r in records(config, "server1") if
                payload(r["value"])["tableChanges"][0]["type"] == "ALTER"]
    assert [c["name"] for c in alter["tableChanges"][0]["table"]["columns"]] == ["id", "email", "tier"]


def test_schema_evolution_rotates_the_capture_instance_without_gap_or_duplicate(
        model: SqlServerModel, spark: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlglot

    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "one"})
    run_stream(spark, config)
    assert _cli(capsys, config, workdir, "schema-evolution")[1].startswith("every captured table matches")
    model.alter_table_add_column("testDB", "dbo", "customers", ModelColumn("tier", "int"))
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "email": "two", "tier": 1})

    status, planned = _cli(capsys, config, workdir, "schema-evolution --plan")
    assert status == 0 and "columns added: tier" in planned
    statement = planned.split("\n")[-1] if "\n" in planned else planned[planned.index("EXEC"):]
    assert "sys.sp_cdc_enable_table" in statement and "N'dbo_customers_v2'" in statement
    sqlglot.parse_one(statement.rstrip(";"), read="tsql")
    assert [i for i in _instances(model)] == ["dbo_customers"]  # --plan changes nothing

    status, output = _cli(capsys, config, workdir, "schema-evolution")
    assert status == 0 and "created capture instance dbo_customers_v2" in output
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 3, "email": "three", "tier": 7})
    run_stream(spark, config)
    status, output = _cli(capsys, config, workdir, "schema-evolution")
    assert "dropped capture instance dbo_customers" in output
    assert _instances(model) == ["dbo_customers_v2"]
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 2}, {"tier": 2})
    run_stream(spark, config)
    events = [payload(r["value"]) for r in records(config, TOPIC) if r["value"]]
    assert [(e["op"], (e["after"] or {})["id"]) for e in events] == [("c", 1), ("c", 2), ("c", 3), ("u", 2)]
    assert "tier" not in events[1]["after"]  # committed before the new instance existed: the old structure
    assert events[2]["after"]["tier"] == 7 and events[3]["after"] == {"id": 2, "email": "two", "tier": 2}


def _instances(model: SqlServerModel) -> list[str]:
    conn = model.connect(database="testDB")
    cursor = conn.cursor()
    from cdckit.dialect.sqlserver import queries

    cursor.execute(queries.CAPTURE_INSTANCES.format(db="[testDB]"))
    return [str(row[2]) for row in cursor.fetchall() if row[1] == "customers"]


def test_stream_rotates_capture_instances_itself_when_asked(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers",
                                                 "cdckit.sqlserver.schema.evolution": "stream"})
    run_snapshot(spark, config)
    model.alter_table_add_column("testDB", "dbo", "customers", ModelColumn("tier", "int"))
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "old-structure", "tier": 1})
    run_stream(spark, config)  # plans a batch: the rotation happens before it is read
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "email": "new-structure", "tier": 2})
    run_stream(spark, config)
    run_stream(spark, config)  # the old instance is dropped once the stream has passed the switch
    events = [payload(r["value"])["after"] for r in records(config, TOPIC) if r["value"]]
    assert events == [{"id": 1, "email": "old-structure"}, {"id": 2, "email": "new-structure", "tier": 2}]
    assert _instances(model) == ["dbo_customers_v2"]


def test_offline_database_is_reported_and_the_stream_resumes_when_it_is_back(
        model: SqlServerModel, spark: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "before-offline"})
    model.set_database_online("testDB", False)
    status, output = _cli(capsys, config, workdir, "stream")
    assert status == 2
    assert "database 'testDB' on sqlserver.test:1433 is OFFLINE" in output and "SET ONLINE" in output
    model.set_database_online("testDB", True)
    run_stream(spark, config)
    assert [payload(r["value"])["after"] for r in records(config, TOPIC) if r["value"]] == [
        {"id": 1, "email": "before-offline"}]


@pytest.mark.version_neutral  # the quality suites, not Spark
def test_quality_suites_reconcile_sql_server_output_with_the_tables(model: SqlServerModel, spark: Any,
                                                                    workdir: Path) -> None:
    from cdckit.quality import check_records
    from cdckit.quality.records import read_files

    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers",
                                                 "provide.transaction.metadata": "true"})
    with model.transaction("testDB") as tx:
        for i in range(1, 6):
            tx.insert("dbo", "customers", {"id": i, "email": f"c{i}@example.com"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 9, "email": "new@example.com"})
        tx.update("dbo", "customers", {"id": 2}, {"email": "changed@example.com"})
        tx.delete("dbo", "customers", {"id": 3})
    run_stream(spark, config)
    options = config.as_properties(include_secrets=True)
    report = check_records(read_files(spark, str(workdir / "out")), options, reconcile=True)
    assert report.success, report.to_markdown()
    assert report.rows["reconciliation_rows"] == 5 and report.rows["transactions"] == 1
    assert report.rows["type_mappings"] == 2  # from the CREATE schema change records
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 4}, {"email": "not-streamed@example.com"})
    report = check_records(read_files(spark, str(workdir / "out")), options, reconcile=True)
    assert next(o.check for o in report.failed()).startswith("each key's replayed row equals the source row")
    assert any('[{"key":"id","value":"4"}]: differs' in note for note in report.notes), report.notes
