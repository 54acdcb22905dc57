"""SQL Server 2022 -> cdckit's snapshot and stream jobs -> files, against a real SQL Server in a container.

The scenarios of the PostgreSQL end-to-end and restart suites (tests/integration), for SQL Server, with the
records in Debezium's SQL Server format: topics ``<prefix>.<database>.<schema>.<table>``, ``source.connector``
"sqlserver", ``change_lsn`` / ``commit_lsn`` strings, ``event_serial_no`` numbers.

Every test creates its own tables in testDB (CDC enabled with sql/sqlserver/03_enable_cdc_table.sql) and
captures only those; ``wait_for_capture`` waits for the Agent's capture job before the jobs run.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlserver_docker import (
    TOPIC_PREFIX,
    SqlServerLab,
    payload,
    positions_by_key,
    records,
    replay,
    stream_positions,
    topic,
    unique_name,
)

from cdckit.errors import SourcePreconditionError
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from readback import check_unreadable_types_scenario

pytestmark = [pytest.mark.docker, pytest.mark.spark]

LSN = re.compile(r"^[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}$")
SOURCE_FIELDS = ["version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table", "change_lsn",
                 "commit_lsn", "event_serial_no"]


def _rows(sqlserver: SqlServerLab, table: str, columns: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table as replay() rebuilds it: per primary key (the first column), the row as a dict."""
    found = sqlserver.fetch(f"SELECT {', '.join(columns)} FROM dbo.{table}")
    return {(row[0],): dict(zip(columns, row, strict=True)) for row in found}


def _shape(found: list[dict[str, Any]]) -> list[tuple[Any, str]]:
    return [(payload(r["key"])["id"], payload(r["value"])["op"] if r["value"] is not None else "tombstone")
            for r in found]


# -- inserts, updates, deletes, a primary-key update ---------------------------------------------------------
def test_inserts_updates_deletes_and_primary_key_update(sqlserver: SqlServerLab, spark: Any,
                                                        workdir: Path) -> None:
    table = sqlserver.create_table("items", "id int PRIMARY KEY, name nvarchar(40) NOT NULL, qty int NULL",
                                   "INSERT INTO dbo.{table} VALUES (1, N'one', 1), (2, N'two', 2)")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table])
    name = topic(table)

    snapshot = run_snapshot(spark, config)
    assert snapshot.rows_per_topic == {name: 2}
    reads = [payload(r["value"]) for r in records(config, name)]
    assert [(v["op"], v["source"]["snapshot"]) for v in reads] == [("r", "true"), ("r", "last")]
    assert all(v["source"]["change_lsn"] is None and v["source"]["event_serial_no"] is None for v in reads)

    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (3, N'three', 3)",
                      f"UPDATE dbo.{table} SET qty = 20 WHERE id = 2",
                      f"UPDATE dbo.{table} SET id = 10 WHERE id = 1",
                      f"DELETE FROM dbo.{table} WHERE id = 3")
    sqlserver.wait_for_capture()
    stream = run_stream(spark, config)
    assert stream.batches >= 1

    streamed = [r for r in records(config, name) if r["value"] is None or payload(r["value"])["op"] != "r"]
    assert _shape(streamed) == [(3, "c"), (2, "u"), (1, "d"), (1, "tombstone"), (10, "c"), (3, "d"),
                                (3, "tombstone")]

    create = streamed[0]
    assert create["topic"] == name
    assert create["key"]["schema"]["name"] == f"{name}.Key"
    assert create["key"]["payload"] == {"id": 3}
    value = create["value"]
    assert value["schema"]["name"] == f"{name}.Envelope"
    assert [f["field"] for f in value["schema"]["fields"]] == ["before", "after", "source", "op", "ts_ms",
                                                               "transaction"]
    source = value["payload"]["source"]
    assert list(source) == SOURCE_FIELDS
    assert (source["connector"], source["name"], source["db"], source["schema"], source["table"]) == (
        "sqlserver", "it", "testDB", "dbo", table)
    assert source["snapshot"] == "false"
    assert LSN.match(source["change_lsn"]) and LSN.match(source["commit_lsn"])
    assert source["event_serial_no"] == 1
    assert isinstance(source["ts_ms"], int) and isinstance(value["payload"]["ts_ms"], int)
    assert value["payload"]["before"] is None
    assert value["payload"]["after"] == {"id": 3, "name": "three", "qty": 3}

    update = payload(streamed[1]["value"])
    assert update["before"] == {"id": 2, "name": "two", "qty": 2}  # SQL Server CDC keeps the whole old row
    assert update["after"] == {"id": 2, "name": "two", "qty": 20}
    assert update["source"]["event_serial_no"] == 2

    # A primary-key update: SQL Server logs a delete and an insert, with different __$command_id values; Debezium's
    # direct mode emits the delete (event_serial_no 1), its tombstone, and the create (event_serial_no 1).
    pk_delete, pk_create = payload(streamed[2]["value"]), payload(streamed[4]["value"])
    assert pk_delete["before"] == {"id": 1, "name": "one", "qty": 1} and pk_delete["after"] is None
    assert pk_create["before"] is None and pk_create["after"] == {"id": 10, "name": "one", "qty": 1}
    assert (pk_delete["source"]["event_serial_no"], pk_create["source"]["event_serial_no"]) == (1, 1)
    assert pk_delete["source"]["commit_lsn"] == pk_create["source"]["commit_lsn"]
    assert streamed[3]["key"]["payload"] == {"id": 1}

    delete = payload(streamed[5]["value"])
    assert delete["before"] == {"id": 3, "name": "three", "qty": 3} and delete["after"] is None
    assert delete["source"]["event_serial_no"] == 1

    commits = [payload(r["value"])["source"]["commit_lsn"] for r in streamed if r["value"] is not None]
    assert commits == sorted(commits)
    assert len(set(commits)) == 4  # four autocommitted statements, four transactions
    assert replay(config, name) == _rows(sqlserver, table, ("id", "name", "qty"))


# -- deferred updates (Debezium's SqlServerDataQueryModeIT, dbz#2012) ---------------------------------------------
_ORDERS = "id int NOT NULL PRIMARY KEY, order_ref varchar(50) NOT NULL, status varchar(20) NOT NULL"
_ORDERS_SEED = ("INSERT INTO dbo.{table} VALUES (1,'REF-1','NEW'),(2,'REF-2','NEW'),(3,'REF-3','NEW'),"
                "(4,'REF-4','NEW'),(5,'REF-5','NEW'),(6,'REF-6','NEW'),(7,'REF-7','NEW'),(8,'REF-8','NEW'),"
                "(9,'REF-9','NEW'),(10,'REF-10','NEW')")


def _orders(sqlserver: SqlServerLab) -> str:
    table = sqlserver.create_table("orders", _ORDERS, _ORDERS_SEED)
    sqlserver.execute(f"CREATE UNIQUE NONCLUSTERED INDEX UX_{table}_order_ref ON dbo.{table}(order_ref)")
    return table


def _by_op(found: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    result: dict[str, dict[int, dict[str, Any]]] = {"c": {}, "u": {}, "d": {}}
    for r in found:
        if r["value"] is not None and payload(r["value"])["op"] in result:
            result[payload(r["value"])["op"]][payload(r["key"])["id"]] = payload(r["value"])
    return result


def test_a_deferred_update_streams_each_keys_delete_before_its_create(sqlserver: SqlServerLab, spark: Any,
                                                                       workdir: Path) -> None:
    """shouldNotLoseDeferredUpdateAtAnyFetchBoundary: an update of a UNIQUE-indexed column of five rows is a deferred
    update, five deletes and five inserts; every key's delete streams before its create, so replay keeps them."""
    table = _orders(sqlserver)
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table], max__batch__size="3")
    name = topic(table)
    run_snapshot(spark, config)
    sqlserver.execute(f"UPDATE dbo.{table} SET order_ref = order_ref + '_v2' WHERE id BETWEEN 1 AND 5")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    streamed = [r for r in records(config, name) if r["value"] is None or payload(r["value"])["op"] != "r"]
    by_op = _by_op(streamed)
    assert sorted(by_op["d"]) == sorted(by_op["c"]) == [1, 2, 3, 4, 5]
    for i in range(1, 6):
        assert by_op["d"][i]["before"]["order_ref"] == f"REF-{i}"
        assert by_op["c"][i]["after"]["order_ref"] == f"REF-{i}_v2"
    order = [(payload(r["key"])["id"], payload(r["value"])["op"]) for r in streamed if r["value"] is not None]
    assert all(order.index((i, "d")) < order.index((i, "c")) for i in range(1, 6))
    assert replay(config, name) == _rows(sqlserver, table, ("id", "order_ref", "status"))


def test_a_deferred_update_a_plain_update_and_a_key_move_in_one_transaction(sqlserver: SqlServerLab, spark: Any,
                                                                             workdir: Path) -> None:
    """shouldDeliverEveryChangeInBothQueryModes (direct): 7 deletes, 7 creates, 3 updates; a plain update's
    event_serial_no is 2, a moved key's delete and create have 1 each."""
    table = _orders(sqlserver)
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table])
    name = topic(table)
    run_snapshot(spark, config)
    sqlserver.transaction(f"UPDATE dbo.{table} SET order_ref = order_ref + '_v2' WHERE id BETWEEN 1 AND 5",
                          f"UPDATE dbo.{table} SET status = 'PROCESSED' WHERE id BETWEEN 6 AND 8",
                          f"UPDATE dbo.{table} SET id = id + 100 WHERE id BETWEEN 9 AND 10")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    streamed = [r for r in records(config, name) if r["value"] is not None and payload(r["value"])["op"] != "r"]
    by_op = _by_op(streamed)
    assert (len(by_op["d"]), len(by_op["c"]), len(by_op["u"])) == (7, 7, 3)
    assert all(u["source"]["event_serial_no"] == 2 and u["after"]["status"] == "PROCESSED"
               for u in by_op["u"].values())
    assert all(by_op["d"][i]["source"]["event_serial_no"] == 1 for i in (9, 10))
    assert all(by_op["c"][i]["source"]["event_serial_no"] == 1 for i in (109, 110))
    assert replay(config, name) == _rows(sqlserver, table, ("id", "order_ref", "status"))


def test_deferred_updates_of_two_tables_in_one_transaction(sqlserver: SqlServerLab, spark: Any,
                                                           workdir: Path) -> None:
    """shouldOrderChangesFromTwoTablesByCommandId."""
    orders = _orders(sqlserver)
    shipments = sqlserver.create_table(
        "shipments", "id int NOT NULL PRIMARY KEY, tracking_ref varchar(50) NOT NULL UNIQUE, carrier varchar(20)",
        "INSERT INTO dbo.{table} VALUES (1,'TRK-1','ACME'),(2,'TRK-2','ACME'),(3,'TRK-3','ACME'),(4,'TRK-4','ACME'),"
        "(5,'TRK-5','ACME')")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [orders, shipments])
    run_snapshot(spark, config)
    sqlserver.transaction(f"UPDATE dbo.{orders} SET order_ref = order_ref + '_v2' WHERE id BETWEEN 1 AND 5",
                          f"UPDATE dbo.{shipments} SET tracking_ref = tracking_ref + '_v2' WHERE id BETWEEN 1 AND 5")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    assert replay(config, topic(orders)) == _rows(sqlserver, orders, ("id", "order_ref", "status"))
    assert replay(config, topic(shipments)) == _rows(sqlserver, shipments, ("id", "tracking_ref", "carrier"))


# -- Debezium's SqlServerConnectorIT (tests/integration/test_sqlserver_debezium_scenarios.py runs them on the model) --
def test_debezium_create_and_delete(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    """createAndDelete: five inserts into each table, then DELETE FROM tableb: a delete and a tombstone per row."""
    table_a = sqlserver.create_table("tablea", "id int primary key, cola varchar(30)",
                                     "INSERT INTO dbo.{table} VALUES (1, 'a')")
    table_b = sqlserver.create_table("tableb", "id int primary key, colb varchar(30)")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table_a, table_b])
    run_snapshot(spark, config)
    for i in range(10, 15):
        sqlserver.execute(f"INSERT INTO dbo.{table_a} VALUES ({i}, 'a')",
                          f"INSERT INTO dbo.{table_b} VALUES ({i}, 'b')")
    sqlserver.execute(f"DELETE FROM dbo.{table_b}")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    streamed_a = [r for r in records(config, topic(table_a)) if payload(r["value"])["op"] != "r"]
    assert _shape(streamed_a) == [(i, "c") for i in range(10, 15)]
    assert _shape(records(config, topic(table_b))) == [(i, "c") for i in range(10, 15)] + [
        item for i in range(10, 15) for item in ((i, "d"), (i, "tombstone"))]


def test_debezium_update_primary_key_twice(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    """updatePrimaryKeyTwiceWithRestartInMiddleOfTx (DBZ-2329): UPDATE SET id = colb + 300 twice in one transaction,
    tombstones off, batches of one change: 20 records, and the replay equals the table."""
    table = sqlserver.create_table("tableb", "id int primary key, colb varchar(30)")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table], tombstones__on__delete="false", max__batch__size="1")
    run_snapshot(spark, config)
    for i in range(1, 6):
        sqlserver.execute(f"INSERT INTO dbo.{table} (id, colb) VALUES ({i}, '{i}')")
    sqlserver.transaction(f"UPDATE dbo.{table} SET id = colb + 300", f"UPDATE dbo.{table} SET id = colb + 300")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    found = records(config, topic(table))
    assert Counter(op for _, op in _shape(found)) == {"c": 10, "d": 5, "u": 5}
    assert replay(config, topic(table)) == _rows(sqlserver, table, ("id", "colb"))


def test_debezium_skipped_update_and_delete_operations(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    """shouldEmitNoEventsForSkippedUpdateAndDeleteOperations."""
    table = sqlserver.create_table("tablea", "id int primary key, cola varchar(30)")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table], skipped__operations="u,d")
    run_snapshot(spark, config)
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (201, 'insert201')",
                      f"UPDATE dbo.{table} SET cola = 'insert201-update' WHERE id = 201",
                      f"INSERT INTO dbo.{table} VALUES (202, 'insert202')", f"DELETE FROM dbo.{table} WHERE id = 202")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    assert _shape(records(config, topic(table))) == [(201, "c"), (202, "c")]


def test_debezium_keyless_table(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    """keylessTable: null keys throughout, a delete followed by its tombstone."""
    table = sqlserver.create_table("keyless", "id int, name varchar(30)", "INSERT INTO dbo.{table} VALUES (1, 'k')")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table])
    run_snapshot(spark, config)
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (2, 'k')", f"UPDATE dbo.{table} SET id = 3 WHERE id = 2",
                      f"DELETE FROM dbo.{table} WHERE id = 3")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    found = records(config, topic(table))
    assert [payload(r["value"])["op"] if r["value"] is not None else "tombstone" for r in found] == [
        "r", "c", "u", "d", "tombstone"]
    assert all(r["key"] is None for r in found)


# -- many changes in one transaction -------------------------------------------------------------------------
def test_many_changes_in_one_transaction_stay_together(sqlserver: SqlServerLab, spark: Any,
                                                       workdir: Path) -> None:
    table = sqlserver.create_table("bulk", "id int PRIMARY KEY, amount int NOT NULL")
    config = sqlserver.config(workdir, [table], max__batch__size="100")
    name = topic(table)
    run_snapshot(spark, config)
    ids = range(1, 501)
    sqlserver.transaction(*[f"INSERT INTO dbo.{table} VALUES ({i}, {i})" for i in ids],
                          f"UPDATE dbo.{table} SET amount = amount * 2 WHERE id % 3 = 0",
                          f"DELETE FROM dbo.{table} WHERE id % 5 = 0")
    sqlserver.wait_for_capture()
    stream = run_stream(spark, config)

    # 767 changes, more than max.batch.size: one transaction is admitted whole, alone, in one batch (Spark may
    # run a further, empty batch up to the max LSN, which writes no file).
    assert stream.batches >= 1
    assert len(list((Path(config.str("cdckit.output.path")) / name).glob("stream-*.jsonl"))) == 1
    events = stream_positions(config, name)
    assert Counter(op for *_, op in events) == {"c": len(ids), "u": sum(1 for i in ids if i % 3 == 0),
                                                "d": sum(1 for i in ids if i % 5 == 0)}
    assert len({commit for commit, *_ in events}) == 1, "one transaction, one commit_lsn"
    assert [event[:3] for event in events] == sorted(event[:3] for event in events)
    assert replay(config, name) == _rows(sqlserver, table, ("id", "amount"))


# -- two tables in one transaction, with transaction metadata ------------------------------------------------
def test_transaction_metadata_brackets_a_transaction_over_two_tables(sqlserver: SqlServerLab, spark: Any,
                                                                      workdir: Path) -> None:
    first = sqlserver.create_table("txa", "id int PRIMARY KEY")
    second = sqlserver.create_table("txb", "id int PRIMARY KEY")
    config = sqlserver.config(workdir, [first, second], provide__transaction__metadata="true")
    run_snapshot(spark, config)
    sqlserver.transaction(f"INSERT INTO dbo.{first} VALUES (1)", f"INSERT INTO dbo.{second} VALUES (1)",
                          f"INSERT INTO dbo.{second} VALUES (2)")
    sqlserver.wait_for_capture()
    run_stream(spark, config)

    boundaries = [payload(r["value"]) for r in records(config, "it.transaction")]
    assert [b["status"] for b in boundaries] == ["BEGIN", "END"]
    begin, end = boundaries
    assert begin["id"] == end["id"] and LSN.match(begin["id"])  # the SQL Server connector's id: the commit LSN
    assert begin["event_count"] is None and begin["data_collections"] is None
    assert end["event_count"] == 3
    assert end["data_collections"] == [{"data_collection": f"testDB.dbo.{first}", "event_count": 1},
                                       {"data_collection": f"testDB.dbo.{second}", "event_count": 2}]
    values = [payload(r["value"]) for table in (first, second) for r in records(config, topic(table))]
    assert [v["transaction"] for v in values] == [
        {"id": begin["id"], "total_order": 1, "data_collection_order": 1},
        {"id": begin["id"], "total_order": 2, "data_collection_order": 1},
        {"id": begin["id"], "total_order": 3, "data_collection_order": 2}]
    assert {v["source"]["commit_lsn"] for v in values} == {begin["id"]}


# -- datetimeoffset columns (pyodbc reads them only through cdckit's output converter) -------------------------
def test_datetimeoffset_columns_keep_their_own_offset_in_snapshot_and_stream(sqlserver: SqlServerLab, spark: Any,
                                                                             workdir: Path) -> None:
    table = sqlserver.create_table("meetings", "id int PRIMARY KEY, starts datetimeoffset(3) NOT NULL, "
                                   "ends datetimeoffset NULL",
                                   "INSERT INTO dbo.{table} VALUES (1, '2018-07-13 12:23:45.456 +11:00', NULL)")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table])
    name = topic(table)
    run_snapshot(spark, config)
    sqlserver.transaction(f"INSERT INTO dbo.{table} VALUES (2, '2024-02-29 23:59:59.999 -05:30', "
                          "'2024-03-01 00:00:00.1234567 +00:00')",
                          f"UPDATE dbo.{table} SET ends = '2018-07-13 20:00:00.12 -05:30' WHERE id = 1")
    sqlserver.wait_for_capture()
    run_stream(spark, config)

    found = records(config, name)
    after_fields = {f["field"]: f for f in found[0]["value"]["schema"]["fields"][1]["fields"]}
    assert after_fields["starts"]["name"] == after_fields["ends"]["name"] == "io.debezium.time.ZonedTimestamp"
    # The seventh fraction digit (100 ns) is kept: the connections' converters read SQL Server's text of the value.
    assert [(payload(r["value"])["op"], payload(r["value"])["after"]) for r in found] == [
        ("r", {"id": 1, "starts": "2018-07-13T12:23:45.456+11:00", "ends": None}),
        ("c", {"id": 2, "starts": "2024-02-29T23:59:59.999-05:30", "ends": "2024-03-01T00:00:00.1234567Z"}),
        ("u", {"id": 1, "starts": "2018-07-13T12:23:45.456+11:00", "ends": "2018-07-13T20:00:00.12-05:30"})]


def test_spatial_hierarchyid_variant_rowversion_and_100_ns_columns_snapshot_and_stream_exactly(
        sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    """Columns pyodbc cannot fetch (geometry, geography, hierarchyid: ODBC type -151; sql_variant: -150) are read
    through the query's conversions (docs/decisions/0032), a rowversion keeps its bytes from snapshot to stream, and
    datetime2(7), time(7) and datetimeoffset(7) keep their 100 ns digit (the model's scenario in
    tests/integration/test_sqlserver_end_to_end.py)."""
    table = sqlserver.create_table(
        "shapes", "id int PRIMARY KEY, shape geometry NULL, place geography NULL, node hierarchyid NULL, "
        "tag sql_variant NULL, version rowversion NOT NULL, at datetime2(7) NULL, clock time(7) NULL, "
        "zoned datetimeoffset(7) NULL",
        "INSERT INTO dbo.{table} (id, shape, place, node, tag, at, clock, zoned) VALUES (1, "
        "geometry::STGeomFromText('LINESTRING(0 0, 3 4)', 0), geography::STGeomFromText('POINT(-122.35 47.65)', 4326), "
        "hierarchyid::Parse('/1/'), CAST(7 AS int), '2024-01-02 03:04:05.1234567', '00:00:00.0000001', "
        "'2024-01-02 03:04:05.1234567 +11:00')")
    sqlserver.wait_for_capture()
    version = bytes(sqlserver.fetch(f"SELECT version FROM dbo.{table}")[0][0])
    config = sqlserver.config(workdir, [table])
    run_snapshot(spark, config)
    sqlserver.transaction(f"UPDATE dbo.{table} SET node = hierarchyid::Parse('/1/2/'), "
                          "tag = CAST(N'seven' AS nvarchar(10)), clock = '12:00:00.9999999' WHERE id = 1")
    sqlserver.wait_for_capture()
    run_stream(spark, config)

    found = records(config, topic(table))
    check_unreadable_types_scenario(found, version)


# -- settings the SQL Server path reads: schema lists, snapshot.fetch.size, database.connect.timeout.ms ---------
def test_schema_lists_choose_the_captured_schemas(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    table = unique_name("orders")
    sqlserver.execute("IF SCHEMA_ID(N'sales') IS NULL EXEC(N'CREATE SCHEMA sales')",
                      f"CREATE TABLE sales.{table} (id int PRIMARY KEY)", f"INSERT INTO sales.{table} VALUES (1)")
    sqlserver.enable_cdc_table(table, schema="sales")
    other = sqlserver.create_table("orders", "id int PRIMARY KEY", "INSERT INTO dbo.{table} VALUES (1)")
    sqlserver.wait_for_capture()
    both = rf"dbo\.{other},sales\.{table}"
    for number, (lists, expected) in enumerate([({"schema.include.list": "sales"}, [topic(table, schema="sales")]),
                                                ({"schema.exclude.list": "sales"}, [topic(other)])]):
        config = sqlserver.config(workdir / str(number), [], **{"table.include.list": both}, **{
            key.replace(".", "__"): value for key, value in lists.items()})
        report = run_snapshot(spark, config)
        assert sorted(report.rows_per_topic) == expected, lists


def test_snapshot_fetch_size_smaller_than_the_table_reads_every_row(sqlserver: SqlServerLab, spark: Any,
                                                                     workdir: Path) -> None:
    table = sqlserver.create_table("fetched", "id int PRIMARY KEY",
                                   "INSERT INTO dbo.{table} SELECT value FROM GENERATE_SERIES(1, 25)")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table], snapshot__fetch__size="4")
    assert run_snapshot(spark, config).rows_per_topic == {topic(table): 25}


def test_an_unreachable_server_fails_within_database_connect_timeout_ms(sqlserver: SqlServerLab,
                                                                       workdir: Path) -> None:
    from cdckit.dialect.sqlserver.connection import connect
    from cdckit.errors import CdcKitError

    properties = {**sqlserver.properties(workdir, []), "database.hostname": "10.255.255.1",
                  "database.connect.timeout.ms": "3000"}  # a non-routable address: only the timeout ends it
    started = time.monotonic()
    with pytest.raises((CdcKitError, Exception)):
        connect(properties)
    assert time.monotonic() - started < 20


# -- Qlik Replicate messages (cdckit.message.format=qlik) -------------------------------------------------------
def test_qlik_messages_for_sql_server_snapshot_and_stream(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    table = sqlserver.create_table(
        "qitems", "id int PRIMARY KEY, name nvarchar(40) NULL, qty tinyint NULL, price decimal(10, 2) NULL, "
        "made datetime2(3) NULL, opens time(0) NULL, due datetimeoffset(3) NULL",
        "INSERT INTO dbo.{table} VALUES (1, N'Zoë', 3, 2.50, '2024-05-01 08:30:00.125', '09:00', "
        "'2024-05-02 17:00:00 +02:00')")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table], **{"cdckit.message.format": "qlik", "cdckit.qlik.task": "items-task"})
    name = topic(table)
    run_snapshot(spark, config)
    sqlserver.transaction(f"INSERT INTO dbo.{table} VALUES (2, N'two', 255, 10.05, NULL, NULL, NULL)",
                          f"UPDATE dbo.{table} SET price = 2.75 WHERE id = 1")
    sqlserver.execute(f"DELETE FROM dbo.{table} WHERE id = 2")
    sqlserver.wait_for_capture()
    run_stream(spark, config)

    messages = [r["value"] for r in records(config, name)]
    kinds = ["metadata" if "lineage" in m else m["headers"]["operation"] for m in messages]
    assert kinds == ["metadata", "REFRESH", "metadata", "INSERT", "UPDATE", "DELETE"]
    metadata = messages[0]
    assert (metadata["lineage"]["task"], metadata["lineage"]["schema"], metadata["lineage"]["table"]) == (
        "items-task", "dbo", table)
    assert {column: (c["ordinal"], c["type"], c["length"], c["precision"], c["scale"], c["primaryKeyPosition"])
            for column, c in metadata["tableStructure"]["tableColumns"].items()} == {
        "id": (1, "INT4", 0, 0, 0, 1), "name": (2, "WSTRING", 40, 0, 0, 0), "qty": (3, "UINT1", 0, 0, 0, 0),
        "price": (4, "NUMERIC", 0, 10, 2, 0), "made": (5, "DATETIME", 0, 0, 3, 0),
        "opens": (6, "STRING", 16, 0, 0, 0), "due": (7, "STRING", 34, 0, 0, 0)}
    refresh, insert, update, delete = messages[1], messages[3], messages[4], messages[5]
    assert refresh["data"] == {"id": 1, "name": "Zoë", "qty": 3, "price": "2.50", "made": "2024-05-01 08:30:00.125000",
                               "opens": "09:00:00", "due": "2024-05-02 17:00:00.000 +02:00"}
    assert insert["data"] == {"id": 2, "name": "two", "qty": 255, "price": "10.05", "made": None, "opens": None,
                              "due": None}
    assert update["beforeData"] == refresh["data"] and update["data"] == {**refresh["data"], "price": "2.75"}
    assert update["headers"]["changeMask"] == "08"
    assert delete["data"] == insert["data"] and delete["headers"]["changeMask"] == "01"
    headers = [m["headers"] for m in (insert, update, delete)]
    assert all(LSN.match(h["streamPosition"]) and len(h["changeSequence"]) == 55 for h in headers)
    assert [h["changeSequence"] for h in headers] == sorted(h["changeSequence"] for h in headers)
    assert headers[0]["transactionId"] == headers[1]["transactionId"] != headers[2]["transactionId"]
    assert [(h["transactionEventCounter"], h["transactionLastEvent"]) for h in headers] == [
        (1, False), (2, True), (1, True)]


# -- a snapshot while another connection writes, then the stream ---------------------------------------------
ROWS = 20_000


class Writer(threading.Thread):
    """Keeps writing (insert, update, delete, one transaction each) on its own connection until stopped."""

    def __init__(self, sqlserver: SqlServerLab, table: str) -> None:
        super().__init__(daemon=True)
        self.sqlserver = sqlserver
        self.table = table
        self.stop_event = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = self.sqlserver.connect(autocommit=False)
        next_id = ROWS + 1
        try:
            cursor = conn.cursor()
            while not self.stop_event.is_set():
                try:
                    cursor.execute(f"INSERT INTO dbo.{self.table} VALUES (?, ?, 0)", next_id, f"new-{next_id}")
                    cursor.execute(f"UPDATE dbo.{self.table} SET balance = balance + 1 WHERE id = ?",
                                   1 + (next_id * 7919) % ROWS)
                    cursor.execute(f"DELETE FROM dbo.{self.table} WHERE id = ?", 1 + (next_id * 104729) % ROWS)
                    conn.commit()
                except Exception as exc:
                    if getattr(exc, "args", ("",))[0] != "40001":
                        raise
                    conn.rollback()  # chosen as a deadlock victim against a snapshot read: retry, as apps do
                    continue
                next_id += 1
                self.transactions += 1
                self.stop_event.wait(0.005)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            conn.close()


def test_snapshot_under_concurrent_writes_then_stream_reproduces_the_table(sqlserver: SqlServerLab, spark: Any,
                                                                          workdir: Path) -> None:
    table = sqlserver.create_table(
        "accounts", "id bigint PRIMARY KEY, owner nvarchar(40) NOT NULL, balance int NOT NULL",
        f"WITH n AS (SELECT TOP ({ROWS}) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS g "
        "FROM sys.all_objects a CROSS JOIN sys.all_objects b) "
        "INSERT INTO dbo.{table} (id, owner, balance) SELECT g, CONCAT(N'owner-', g), g % 1000 FROM n")
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table], **{"cdckit.snapshot.chunk.rows": "5000",
                                                   "max.batch.size": "5000"})
    name = topic(table)
    writer = Writer(sqlserver, table)
    writer.start()
    try:
        snapshot = run_snapshot(spark, config)
    finally:
        writer.stop_event.set()
        writer.join()
    assert writer.error is None, f"the writer failed: {writer.error!r}"
    assert writer.transactions > 0, "the writer must have written while the snapshot ran"
    assert snapshot.rows_per_topic == {name: snapshot.rows}
    assert ROWS - writer.transactions <= snapshot.rows <= ROWS + writer.transactions

    sqlserver.wait_for_capture()
    stream = run_stream(spark, config)
    assert stream.batches >= 1
    assert replay(config, name) == _rows(sqlserver, table, ("id", "owner", "balance"))
    for key, positions in positions_by_key(config, name).items():
        assert positions == sorted(positions), f"events of key {key} are out of order"
    markers = [payload(r["value"])["source"]["snapshot"] for r in records(config, name)
               if r["value"] is not None and payload(r["value"])["op"] == "r"]
    assert markers.count("last") == 1
    assert len(markers) == snapshot.rows


# -- restarting the stream from its checkpoint ---------------------------------------------------------------
def _ledger(sqlserver: SqlServerLab) -> str:
    return sqlserver.create_table("ledger", "id int PRIMARY KEY, amount int NOT NULL")


def _write_transactions(sqlserver: SqlServerLab, table: str, count: int) -> None:
    """``count`` inserts, an update for every third and a delete for every fifth, each its own transaction."""
    statements = []
    for i in range(count):
        statements.append(f"INSERT INTO dbo.{table} VALUES ({i}, {i})")
        if i % 3 == 0:
            statements.append(f"UPDATE dbo.{table} SET amount = amount * 2 WHERE id = {i}")
        if i % 5 == 0:
            statements.append(f"DELETE FROM dbo.{table} WHERE id = {i}")
    sqlserver.execute(*statements)
    sqlserver.wait_for_capture()


def test_stop_between_batches_and_restart_loses_and_repeats_nothing(sqlserver: SqlServerLab, spark: Any,
                                                                    workdir: Path) -> None:
    table = _ledger(sqlserver)
    name = topic(table)
    config = sqlserver.config(workdir, [table], max__batch__size="20")
    run_snapshot(spark, config)
    _write_transactions(sqlserver, table, 60)
    partial = sqlserver.config(workdir, [table], **{"max.batch.size": "20", "cdckit.trigger": "processing-time",
                                                    "cdckit.trigger.interval": "100 milliseconds",
                                                    "cdckit.stream.max.batches": "2"})
    first = run_stream(spark, partial)
    assert first.batches >= 2
    assert replay(config, name) != _rows(sqlserver, table, ("id", "amount")), "the first run must stop early"
    run_stream(spark, config)
    assert replay(config, name) == _rows(sqlserver, table, ("id", "amount"))
    positions = stream_positions(config, name)
    assert positions == sorted(positions)
    assert len(positions) == len(set(positions)), "no event may be written twice"


def test_failure_in_the_middle_of_a_batch_replays_that_batch_with_the_same_positions(
        sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    table = _ledger(sqlserver)
    name = topic(table)
    config = sqlserver.config(workdir, [table], max__batch__size="25")
    run_snapshot(spark, config)
    _write_transactions(sqlserver, table, 50)
    written_by_failed_attempt: list[tuple[str, str, int, str]] = []

    def crash_in_second_batch(batch_id: int, summary: dict[str, int]) -> None:
        if batch_id == 1:
            written_by_failed_attempt.extend(stream_positions(config, name))
            raise RuntimeError("simulated crash after the sink wrote batch 1 but before Spark committed it")

    with pytest.raises(Exception, match="simulated crash"):
        run_stream(spark, config, on_batch=crash_in_second_batch)
    assert written_by_failed_attempt, "batch 1 had been written when the crash happened"
    run_stream(spark, config)
    after_restart = stream_positions(config, name)
    assert after_restart[:len(written_by_failed_attempt)] == written_by_failed_attempt
    assert replay(config, name) == _rows(sqlserver, table, ("id", "amount"))
    assert after_restart == sorted(set(after_restart))


# -- the cleanup job purging changes cdckit has not read -----------------------------------------------------
ONE_BATCH = {"cdckit.trigger": "processing-time", "cdckit.trigger.interval": "200 milliseconds",
             "cdckit.stream.max.batches": "1"}


def _insert_and_purge(sqlserver: SqlServerLab, table: str, instance: str) -> None:
    """Ten inserts (ids 0 to 9), then what the cleanup job does when the retention expires, done now: every
    change below the low water mark (the newest LSN in cdc.lsn_time_mapping, past all ten inserts) is deleted."""
    sqlserver.execute(*[f"INSERT INTO dbo.{table} (id, amount) VALUES ({i}, {i})" for i in range(10)])
    sqlserver.wait_for_capture()
    inserted = f"SELECT COUNT(*) FROM cdc.[{instance}_CT] WHERE id BETWEEN 0 AND 9"
    assert sqlserver.fetch(inserted) == [(10,)]
    # The cleanup procedure lowers a low water mark to the first LSN committed at the same time (datetime
    # precision, 3 ms); one more capture round later the newest LSN is surely later than every insert.
    time.sleep(0.1)
    sqlserver.wait_for_capture()
    low_water_mark = sqlserver.max_lsn()
    sqlserver.execute(("EXEC sys.sp_cdc_cleanup_change_table @capture_instance = ?, @low_water_mark = ?, "
                       "@threshold = 5000", (instance, low_water_mark)))
    assert sqlserver.fetch(inserted) == [(0,)]


def _first_batch_while_writing(sqlserver: SqlServerLab, table: str, spark: Any, config: Any) -> None:
    """Run the stream until one batch is committed, writing meanwhile: with snapshot.mode=never a stream starts
    at the max LSN it finds, so only changes committed after it started make a batch."""
    stop = threading.Event()

    def write() -> None:
        next_id = 1000
        while not stop.is_set():
            sqlserver.execute(f"INSERT INTO dbo.{table} (id, amount) VALUES ({next_id}, 0)")
            next_id += 1
            stop.wait(0.2)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        assert run_stream(spark, config).batches == 1
    finally:
        stop.set()
        writer.join()


def test_changes_purged_by_the_cleanup_job_give_a_clear_error(sqlserver: SqlServerLab, spark: Any,
                                                              workdir: Path) -> None:
    table = sqlserver.create_table("purged", "id int PRIMARY KEY, amount int NOT NULL")
    instance = f"dbo_{table}"
    config = sqlserver.config(workdir, [table])
    run_snapshot(spark, config)
    _insert_and_purge(sqlserver, table, instance)

    with pytest.raises(Exception, match="removed by the CDC cleanup job") as raised:
        run_stream(spark, config)
    assert f"testDB.dbo.{table}" in str(raised.value)
    assert instance in str(raised.value)


def test_changes_purged_before_a_stream_without_snapshot_read_them_give_a_clear_error(
        sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    table = sqlserver.create_table("purgednever", "id int PRIMARY KEY, amount int NOT NULL")
    never = {"snapshot.mode": "never"}
    _first_batch_while_writing(sqlserver, table, spark, sqlserver.config(workdir, [table], **never, **ONE_BATCH))
    _insert_and_purge(sqlserver, table, f"dbo_{table}")

    with pytest.raises(Exception, match="removed by the CDC cleanup job") as raised:
        run_stream(spark, sqlserver.config(workdir, [table], **never))
    assert f"testDB.dbo.{table}" in str(raised.value)


def test_changes_purged_before_a_stream_without_snapshot_read_them_are_resnapshotted(
        sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    table = sqlserver.create_table("resnapshotnever", "id int PRIMARY KEY, amount int NOT NULL")
    name = topic(table)
    never = {"snapshot.mode": "never", "cdckit.sqlserver.purged.changes": "resnapshot"}
    _first_batch_while_writing(sqlserver, table, spark, sqlserver.config(workdir, [table], **never, **ONE_BATCH))
    _insert_and_purge(sqlserver, table, f"dbo_{table}")
    config = sqlserver.config(workdir, [table], **never)
    run_stream(spark, config)
    reads = [payload(r["value"]) for r in records(config, name) if payload(r["value"])["op"] == "r"]
    assert set(range(10)) <= {r["after"]["id"] for r in reads}
    assert {r["source"]["snapshot"] for r in reads} == {"incremental"}
    assert replay(config, name) == _rows(sqlserver, table, ("id", "amount"))


def test_changes_purged_from_a_capture_instance_created_after_the_snapshot_give_a_clear_error(
        sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    table = sqlserver.create_table("rotated", "id int PRIMARY KEY, amount int NOT NULL")
    second = f"dbo_{table}_v2"
    config = sqlserver.config(workdir, [table])
    run_snapshot(spark, config)
    sqlserver.execute(f"ALTER TABLE dbo.{table} ADD tier int NULL",
                      ("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = ?, @role_name = NULL, "
                       "@capture_instance = ?, @supports_net_changes = 0", (table, second)))
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (100, 100, 1)")
    sqlserver.wait_for_capture()
    run_stream(spark, config)  # reads across the switch to the new instance
    sqlserver.execute(("EXEC sys.sp_cdc_disable_table @source_schema = N'dbo', @source_name = ?, "
                       "@capture_instance = ?", (table, f"dbo_{table}")))
    _insert_and_purge(sqlserver, table, second)

    with pytest.raises(Exception, match="removed by the CDC cleanup job") as raised:
        run_stream(spark, config)
    assert second in str(raised.value)
    assert [payload(r["value"])["after"]["id"] for r in records(config, topic(table))] == [100]


# -- several databases in one job ----------------------------------------------------------------------------
def _wait_for_rows(lab: SqlServerLab, change_table: str, count: int, timeout: float = 90) -> None:
    """Wait until the capture job of ``lab``'s database has copied ``count`` changes into ``change_table``."""
    deadline = time.monotonic() + timeout
    while lab.fetch(f"SELECT COUNT(*) FROM {change_table}")[0][0] < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the capture job of {lab.database} did not fill {change_table} in {timeout} s")
        time.sleep(0.25)


def test_a_busy_database_does_not_hold_back_another(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    other = dataclasses.replace(sqlserver, database=unique_name("salesdb"))
    sqlserver.execute(f"CREATE DATABASE [{other.database}]", database="master")
    other.enable_cdc_database()
    quiet = other.create_table("invoices", "id int PRIMARY KEY, amount int NOT NULL")
    busy = sqlserver.create_table("busy", "id int PRIMARY KEY, amount int NOT NULL")
    both = {"database.names": f"{sqlserver.database},{other.database}", "max.batch.size": "10"}
    config = sqlserver.config(workdir, [busy, quiet], **both)
    run_snapshot(spark, config)
    sqlserver.execute(*[f"INSERT INTO dbo.{busy} VALUES ({i}, {i})" for i in range(40)])
    other.execute(f"INSERT INTO dbo.{quiet} VALUES (7, 7)")
    sqlserver.wait_for_capture()
    _wait_for_rows(other, f"cdc.[dbo_{quiet}_CT]", 1)

    run_stream(spark, sqlserver.config(workdir, [busy, quiet], **both, **ONE_BATCH))
    assert [payload(r["value"])["after"]["id"] for r in records(config, topic(quiet, other.database))] == [7]
    assert 1 <= len(records(config, topic(busy))) <= 10, "the batch stays within max.batch.size"
    run_stream(spark, config)
    assert replay(config, topic(busy)) == _rows(sqlserver, busy, ("id", "amount"))
    commits = [payload(r["value"])["source"]["commit_lsn"] for r in records(config, topic(busy))]
    assert commits == sorted(commits) and len(commits) == 40


# -- schema drift: a dropped column, a changed column type ---------------------------------------------------
def _alter_columns(config: Any) -> list[list[tuple[str, str]]]:
    """(name, typeName) of each ALTER schema change record's columns, in order."""
    return [[(c["name"], c["typeName"]) for c in change["table"]["columns"]]
            for change in (payload(r["value"])["tableChanges"][0] for r in records(config, TOPIC_PREFIX))
            if change["type"] == "ALTER"]


def _capture_instances(sqlserver: SqlServerLab, table: str) -> list[str]:
    return [row[0] for row in sqlserver.fetch("SELECT capture_instance FROM cdc.change_tables "
                                              "WHERE source_object_id = OBJECT_ID(?) ORDER BY create_date",
                                              f"dbo.{table}")]


def test_the_schema_evolution_job_rotates_after_a_column_was_dropped(sqlserver: SqlServerLab, spark: Any,
                                                                     workdir: Path) -> None:
    from cdckit.pipelines.sqlserver import apply_schema_evolution, plan_schema_evolution

    table = sqlserver.create_table("dropped", "id int PRIMARY KEY, email varchar(255) NULL, note varchar(40) NULL")
    config = sqlserver.config(workdir, [table])
    run_snapshot(spark, config)
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (1, 'one', 'kept')")
    sqlserver.execute(f"ALTER TABLE dbo.{table} DROP COLUMN note")
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (2, 'two')")
    sqlserver.wait_for_capture()
    (rotation,) = plan_schema_evolution(config)
    assert (rotation.action, rotation.reason) == ("create", f"dbo.{table}: columns dropped: note")
    apply_schema_evolution(config, [rotation])
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (3, 'three')")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    assert [payload(r["value"])["after"] for r in records(config, topic(table))] == [
        {"id": 1, "email": "one", "note": "kept"}, {"id": 2, "email": "two", "note": None},
        {"id": 3, "email": "three"}]
    assert _alter_columns(config) == [[("id", "int"), ("email", "varchar")]]


def test_the_stream_rotates_after_a_column_type_changed(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    table = sqlserver.create_table("retyped", "id int PRIMARY KEY, email varchar(255) NULL")
    config = sqlserver.config(workdir, [table], **{"cdckit.sqlserver.schema.evolution": "stream"})
    run_snapshot(spark, config)
    sqlserver.execute(f"ALTER TABLE dbo.{table} ALTER COLUMN email nvarchar(500) NULL")
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (1, N'before-the-rotation')")
    sqlserver.wait_for_capture()
    run_stream(spark, config)  # plans a batch: the rotation happens before it is read
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (2, N'after-the-rotation')")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    run_stream(spark, config)  # the old instance is dropped once the stream has passed the switch
    assert _capture_instances(sqlserver, table) == [f"dbo_{table}_v2"]
    assert [payload(r["value"])["after"]["id"] for r in records(config, topic(table))] == [1, 2]
    assert _alter_columns(config) == [[("id", "int"), ("email", "nvarchar")]]


# -- DDL on a captured table: what its capture instance keeps ------------------------------------------------
def test_dropped_and_retyped_columns_as_the_capture_instance_records_them(sqlserver: SqlServerLab) -> None:
    """What the SQL Server model (tests/unit/test_sqlserver_model.py) answers after ALTER TABLE DROP COLUMN and
    ALTER COLUMN on a CDC-enabled table, checked against SQL Server itself."""
    table = sqlserver.create_table("ddl", "id int PRIMARY KEY, note varchar(40) NULL, name nvarchar(100) NULL")
    instance = f"dbo_{table}"
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (1, 'n', N'a')")
    sqlserver.execute(f"ALTER TABLE dbo.{table} DROP COLUMN note",
                      f"ALTER TABLE dbo.{table} ALTER COLUMN name nvarchar(300) NULL")
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (2, N'b')")
    sqlserver.wait_for_capture()
    of_instance = "JOIN cdc.change_tables ct ON ct.object_id = {alias}.object_id WHERE ct.capture_instance = ?"
    assert sqlserver.fetch("SELECT column_name, column_type FROM cdc.captured_columns cc "
                           f"{of_instance.format(alias='cc')} ORDER BY column_ordinal", instance) == [
        ("id", "int"), ("note", "varchar"), ("name", "nvarchar")]
    assert sqlserver.fetch("SELECT c.name, ty.name, c.max_length FROM sys.columns c JOIN sys.types ty "
                           "ON ty.user_type_id = c.user_type_id WHERE c.object_id = OBJECT_ID(?) "
                           "AND c.name NOT LIKE '[_][_]$%' ORDER BY c.column_id", f"cdc.[{instance}_CT]") == [
        ("id", "int", 4), ("note", "varchar", 40), ("name", "nvarchar", 600)]
    assert sqlserver.fetch(f"SELECT id, note FROM cdc.[{instance}_CT] ORDER BY [__$start_lsn]") == [
        (1, "n"), (2, None)]
    history = sqlserver.fetch("SELECT h.required_column_update, h.ddl_command FROM cdc.ddl_history h "
                              f"{of_instance.format(alias='h')} ORDER BY h.ddl_lsn", instance)
    assert [(bool(update), "DROP COLUMN" in command.upper(), "ALTER COLUMN" in command.upper())
            for update, command in history] == [(False, True, False), (True, False, True)]


# -- the SQL Server Agent stopped (last: it changes the server) ----------------------------------------------
def test_agent_stopped_gives_a_clear_error(sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    """CDC enabled while the Agent is down: no capture job has run, so there is no max LSN; cdckit must say
    the Agent is not running rather than stream nothing."""
    agent_xps = ("EXEC sp_configure 'show advanced options', 1; RECONFIGURE; "
                 "EXEC sp_configure 'Agent XPs', {}; RECONFIGURE;")
    sqlserver.execute(agent_xps.format(0), database="master")
    try:
        deadline = time.monotonic() + 30
        while sqlserver.agent_running() is not False and time.monotonic() < deadline:
            time.sleep(1)
        state = sqlserver.agent_running()
        if state is not False:
            seen = "still reports it running" if state else "does not report it"
            pytest.skip(f"the container's SQL Server Agent cannot be stopped from T-SQL: with 'Agent XPs' off, "
                        f"sys.dm_server_services {seen}")
        other = dataclasses.replace(sqlserver, database=unique_name("noagent"))
        sqlserver.execute(f"CREATE DATABASE [{other.database}]", database="master")
        try:
            other.enable_cdc_database()
            table = other.create_table("orphan", "id int PRIMARY KEY")
        except Exception as exc:
            pytest.skip(f"CDC cannot be enabled while the container's SQL Server Agent is stopped: {exc}")
        assert other.max_lsn() is None, "no capture job ran, so the database has no maximum LSN"
        config = other.config(workdir, [table])
        with pytest.raises(SourcePreconditionError, match="SQL Server Agent is not running"):
            run_snapshot(spark, config)
    finally:
        sqlserver.execute(agent_xps.format(1), database="master")


# -- ad hoc incremental snapshots ------------------------------------------------------------------------------
def test_a_signalled_incremental_snapshot_spreads_over_batches_pauses_and_reproduces_the_table(
        sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    import json

    table = sqlserver.create_table("adhoc", "id int PRIMARY KEY, amount int NOT NULL",
                                   "INSERT INTO dbo.{table} SELECT value, value FROM GENERATE_SERIES(1, 600)")
    signals = sqlserver.create_table("signals", "id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
                                                "data varchar(2048) NULL")
    settings = {"snapshot.mode": "no_data", "signal.data.collection": f"testDB.dbo.{signals}",
                "incremental.snapshot.chunk.size": "50", "max.batch.size": "100"}
    config = sqlserver.config(workdir, [table], **settings)
    name = topic(table)

    def signal(signal_id: str, kind: str, data: dict[str, Any]) -> None:
        sqlserver.execute((f"INSERT INTO dbo.{signals} (id, type, data) VALUES (?, ?, ?)",
                           (signal_id, kind, json.dumps(data))))
        sqlserver.wait_for_capture()

    def reads() -> list[dict[str, Any]]:
        return [payload(r["value"]) for r in records(config, name)
                if r["value"] is not None and payload(r["value"])["op"] == "r"]

    sqlserver.wait_for_capture()
    run_stream(spark, config)
    signal("go", "execute-snapshot", {"data-collections": [f"testDB.dbo.{table}"], "type": "incremental"})
    run_stream(spark, sqlserver.config(workdir, [table], **settings, **{"cdckit.stream.max.batches": "2"}))
    started = len(reads())
    assert 0 < started < 600
    sqlserver.execute(f"UPDATE dbo.{table} SET amount = amount + 1000 WHERE id % 7 = 0",
                      f"DELETE FROM dbo.{table} WHERE id % 11 = 0")
    signal("hold", "pause-snapshot", {})
    run_stream(spark, config)
    held = len(reads())
    run_stream(spark, config)
    assert len(reads()) == held < 600, "no chunk is read while paused"
    signal("on", "resume-snapshot", {})
    sqlserver.execute(f"UPDATE dbo.{table} SET amount = -1 WHERE id % 13 = 0")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    assert {r["source"]["snapshot"] for r in reads()} == {"incremental"}
    assert {r["after"]["id"] for r in reads()} >= {i for i in range(1, 601) if i % 11}
    assert len({r["source"]["commit_lsn"] for r in reads()}) >= 3, "read over several batches"
    assert replay(config, name) == _rows(sqlserver, table, ("id", "amount"))


# -- keyset chunks: composite, uniqueidentifier, nvarchar and date keys ---------------------------------------
KEYSET_GUIDS = ["3AAAAAAA-BBBB-CCCC-DDDD-2EEEEEEEEEEE", "2AAAAAAA-BBBB-CCCC-DDDD-1EEEEEEEEEEE",
                "1AAAAAAA-BBBB-CCCC-DDDD-3EEEEEEEEEEE", "00000000-0000-0100-0000-000000000000",
                "00000000-0000-0001-0000-000000000000", "FFFFFFFF-0000-0000-0000-000000000000",
                "0000000A-0000-0000-0000-0000000000FF"]
KEYSET_TAGS = ["beta", "Alpha", "gamma", "ALPHAbet", "Delta", "delta2", "zeta", "Beta2", "aardvark", "Épée"]


def _labels(sqlserver: SqlServerLab, table: str) -> Counter[str]:
    return Counter(row[0] for row in sqlserver.fetch(f"SELECT label FROM dbo.{table}"))


def _label_reads(config: Any, table: str, incremental: bool) -> Counter[str]:
    found = [payload(r["value"]) for r in records(config, topic(table)) if r["value"] is not None]
    return Counter(v["after"]["label"] for v in found
                   if v["op"] == "r" and (v["source"]["snapshot"] == "incremental") == incremental)


def test_composite_guid_nvarchar_and_date_keys_snapshot_in_server_ordered_chunks_and_incrementally(
        sqlserver: SqlServerLab, spark: Any, workdir: Path) -> None:
    """The same scenario as tests/integration/test_sqlserver_keyset_snapshots.py, on the server whose order the
    model approximates: its collation (accents included) and uniqueidentifier's byte groups."""
    import json

    guids = ", ".join(f"('{guid}', N'document {n}')" for n, guid in enumerate(KEYSET_GUIDS))
    tags = ", ".join(f"(N'{tag}', N'tag {tag}')" for tag in KEYSET_TAGS)
    tables = [
        sqlserver.create_table("lines", "SalesOrderID int NOT NULL, SalesOrderDetailID int NOT NULL, "
                               "label nvarchar(80) NOT NULL, PRIMARY KEY (SalesOrderID, SalesOrderDetailID)",
                               "INSERT INTO dbo.{table} SELECT o.value, l.value, CONCAT(N'line ', o.value, N'/', "
                               "l.value) FROM GENERATE_SERIES(43659, 43661) AS o CROSS APPLY "
                               "GENERATE_SERIES(1, 3 + o.value % 3) AS l"),
        sqlserver.create_table("documents", "id uniqueidentifier PRIMARY KEY, label nvarchar(80) NOT NULL",
                               f"INSERT INTO dbo.{{table}} VALUES {guids}"),
        sqlserver.create_table("tags", "tag nvarchar(80) PRIMARY KEY, label nvarchar(80) NOT NULL",
                               f"INSERT INTO dbo.{{table}} VALUES {tags}"),
        sqlserver.create_table("days", "day date PRIMARY KEY, label nvarchar(80) NOT NULL",
                               "INSERT INTO dbo.{table} SELECT DATEADD(day, value, '2024-02-26'), "
                               "CONCAT(N'day ', value) FROM GENERATE_SERIES(0, 7)")]
    signals = sqlserver.create_table("signals", "id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
                                                "data varchar(2048) NULL")
    settings = {"cdckit.snapshot.chunk.rows": "3", "signal.data.collection": f"testDB.dbo.{signals}",
                "incremental.snapshot.chunk.size": "3", "max.batch.size": "6"}
    config = sqlserver.config(workdir, tables, **settings)
    sqlserver.wait_for_capture()

    run_snapshot(spark, config)
    for table in tables:
        assert _label_reads(config, table, False) == _labels(sqlserver, table)  # each row once

    sqlserver.execute(f"UPDATE dbo.{tables[0]} SET label = N'moved' WHERE SalesOrderID = 43660 "
                      "AND SalesOrderDetailID = 2",
                      f"DELETE FROM dbo.{tables[1]} WHERE id = '{KEYSET_GUIDS[0]}'",
                      f"INSERT INTO dbo.{tables[2]} VALUES (N'EPSILON', N'tag EPSILON')",
                      f"UPDATE dbo.{tables[3]} SET label = N'leap day' WHERE day = '2024-02-29'")
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    for table in tables:
        assert Counter(row["label"] for row in replay(config, topic(table)).values()) == _labels(sqlserver, table)

    data = {"data-collections": [rf"testDB\.dbo\.{table}" for table in tables], "type": "incremental"}
    sqlserver.execute((f"INSERT INTO dbo.{signals} (id, type, data) VALUES (?, ?, ?)",
                       ("all-four", "execute-snapshot", json.dumps(data))))
    sqlserver.wait_for_capture()
    bounded = sqlserver.config(workdir, tables, **settings, **{"cdckit.stream.max.batches": "3"})
    for _run in range(12):  # a few chunks a run: the stream restarts between them, from its offsets
        run_stream(spark, bounded)
        if all(_label_reads(config, t, True) == _labels(sqlserver, t) for t in tables):
            break
    for table in tables:
        assert _label_reads(config, table, True) == _labels(sqlserver, table)  # every row, once


# -- a DBA's scripts end to end: the shop and AdventureWorks (on the model: tests/integration/test_sqlserver_replay.py)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _wait_for_capture_in(sqlserver: SqlServerLab, database: str, timeout: float = 120) -> None:
    """wait_for_capture for another database: its own capture job fills its own sentinel's change table."""
    import uuid

    sentinel = "cdckit_sentinel"
    if not sqlserver.fetch("SELECT 1 FROM sys.tables WHERE name = ?", sentinel, database=database):
        sqlserver.execute(f"CREATE TABLE dbo.{sentinel} (token uniqueidentifier PRIMARY KEY)", database=database)
        sqlserver.enable_cdc_table(sentinel, database=database)
    token = str(uuid.uuid4())
    sqlserver.execute((f"INSERT INTO dbo.{sentinel} (token) VALUES (?)", (token,)), database=database)
    deadline = time.monotonic() + timeout
    while not sqlserver.fetch(f"SELECT 1 FROM cdc.[dbo_{sentinel}_CT] WHERE token = ?", token, database=database):
        assert time.monotonic() < deadline, f"the capture job of {database} did not reach a commit in {timeout} s"
        time.sleep(0.25)


@pytest.mark.parametrize(("schema_scripts", "changes"), [
    (["sqlserver/schema.sql"], "sqlserver/changes.sql"),
    (["adventureworks/schema.sql", "adventureworks/data.sql"], "adventureworks/changes.sql"),
], ids=["shop", "adventureworks"])
def test_a_dbas_scripts_snapshot_change_stream_and_replay_to_the_tables(
        sqlserver: SqlServerLab, spark: Any, workdir: Path, schema_scripts: list[str], changes: str) -> None:
    """The schema scripts run with pyodbc in a database of their own, every table CDC-enabled by
    03_enable_cdc_table.sql, cdckit's snapshot, the changes script, the stream; the output replayed per key equals
    the tables as a second snapshot reads them (computed columns left out: NULL in change tables)."""
    from sqlserver_docker import split_batches

    from cdckit.config import validate
    from cdckit.pipelines.sqlserver import plan_schema_evolution
    from cdckit_lab.sqlserver_model.replay import differences

    database = unique_name("replay")
    sqlserver.execute(f"CREATE DATABASE [{database}]", database="master")
    sqlserver.execute(f"ALTER DATABASE [{database}] SET ALLOW_SNAPSHOT_ISOLATION ON", database="master")
    sqlserver.enable_cdc_database(database)
    for script in schema_scripts:
        sqlserver.execute(*split_batches((FIXTURES / script).read_text(encoding="utf-8")), database=database)
    tables = [(str(s), str(t)) for s, t in sqlserver.fetch(
        "SELECT s.name, t.name FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id "
        "WHERE t.is_ms_shipped = 0 ORDER BY s.name, t.name", database=database)]
    for schema, table in tables:
        sqlserver.enable_cdc_table(table, schema, database=database)
    computed: dict[tuple[str, str], list[str]] = {table: [] for table in tables}
    for schema, table, column in sqlserver.fetch(
            "SELECT s.name, t.name, c.name FROM sys.columns c JOIN sys.tables t ON t.object_id = c.object_id "
            "JOIN sys.schemas s ON s.schema_id = t.schema_id WHERE c.is_computed = 1", database=database):
        computed[(str(schema), str(table))].append(str(column))
    _wait_for_capture_in(sqlserver, database)

    def config(name: str) -> Any:
        return validate({**sqlserver.server_properties(), "database.names": database, "topic.prefix": TOPIC_PREFIX,
                         "table.exclude.list": r"dbo\.cdckit_sentinel",
                         "cdckit.output.path": str(workdir / name),
                         "cdckit.checkpoint.location": str(workdir / f"{name}-checkpoint")})

    snapshot = run_snapshot(spark, config("out"))
    assert len(snapshot.tables) == len(tables)
    # columns of alias types (AdventureWorks' Name, Flag, ...) are what their capture instances recorded: no drift
    assert [rotation.reason for rotation in plan_schema_evolution(config("out"))] == []
    sqlserver.execute(*split_batches((FIXTURES / changes).read_text(encoding="utf-8")), database=database)
    _wait_for_capture_in(sqlserver, database)
    assert run_stream(spark, config("out")).events > 0
    run_snapshot(spark, config("final"))
    assert differences(workdir / "out", workdir / "final", f"{TOPIC_PREFIX}.{database}", computed) == []
