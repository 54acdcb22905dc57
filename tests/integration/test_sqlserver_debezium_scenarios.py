"""Scenarios of Debezium's own SQL Server integration tests (debezium-connector-sqlserver, SqlServerConnectorIT),
ported to cdckit's snapshot and stream jobs over the model of SQL Server, so that part of what cdckit is tested on was
written by the reference connector's authors. Each test names the method it ports; the setup is that class's:
``tablea (id int primary key, cola varchar(30))`` with one row, ``tableb (id int primary key, colb varchar(30))``.
The docker suite runs the same scenarios against a real SQL Server (tests/docker/test_sqlserver_scenarios.py).

Where cdckit's unit of work differs (a Spark micro-batch holds whole transactions, so "a restart in the middle of a
transaction" is a restart between micro-batches, ``cdckit.stream.max.batches``), the test says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import payload, records, replay

from cdckit.config import Config, validate
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

pytestmark = [pytest.mark.spark]
TABLE_A, TABLE_B = "server1.testDB.dbo.tablea", "server1.testDB.dbo.tableb"


@pytest.fixture
def model(workdir: Path) -> SqlServerModel:
    server = SqlServerModel(workdir / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    for table, column in (("tablea", "cola"), ("tableb", "colb")):
        server.create_table("testDB", "dbo", table, [ModelColumn("id", "int", nullable=False),
                                                     ModelColumn(column, "varchar", 30)], ["id"])
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "tablea", {"id": 1, "cola": "a"})
    server.enable_table("testDB", "dbo", "tablea")
    server.enable_table("testDB", "dbo", "tableb")
    return server


def _config(workdir: Path, **overrides: str) -> Config:
    return validate({
        "connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
        "database.hostname": "sqlserver.test", "database.user": "cdckit", "database.password": "not-a-real-secret",
        "database.names": "testDB", "topic.prefix": "server1",
        "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
        "cdckit.sqlserver.model.path": str(workdir / "sqlserver.sqlite"),
        "cdckit.output.path": str(workdir / "out"), "cdckit.checkpoint.location": str(workdir / "checkpoint"),
        **overrides})


def _streamed(config: Config, topic: str) -> list[dict[str, Any]]:
    return [r for r in records(config, topic) if r["value"] is None or payload(r["value"])["op"] != "r"]


def _shape(found: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(payload(r["key"])["id"], payload(r["value"])["op"] if r["value"] is not None else "tombstone")
            for r in found]


def _table(model: SqlServerModel, table: str, column: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    with model.connect(database="testDB") as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT [id], [{column}] FROM [testDB].[dbo].[{table}] ORDER BY [id]")
        return {(r[0],): {"id": r[0], column: r[1]} for r in cursor.fetchall()}


def test_create_and_delete(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    """createAndDelete: five inserts into each table (one transaction each), then DELETE FROM tableb: tablea
    streams its five creates and nothing else; tableb its five creates, then a delete and a tombstone per row."""
    config = _config(workdir)
    assert run_snapshot(spark, config).rows_per_topic[TABLE_A] == 1
    for i in range(10, 15):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "tablea", {"id": i, "cola": "a"})
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "tableb", {"id": i, "colb": "b"})
    run_stream(spark, config)
    with model.transaction("testDB") as tx:
        assert tx.delete("dbo", "tableb", {}) == 5
    run_stream(spark, config)
    table_a, table_b = _streamed(config, TABLE_A), _streamed(config, TABLE_B)
    assert _shape(table_a) == [(i, "c") for i in range(10, 15)]
    assert [payload(r["value"])["after"] for r in table_a] == [{"id": i, "cola": "a"} for i in range(10, 15)]
    assert all(payload(r["value"])["before"] is None for r in table_a)
    assert _shape(table_b) == [(i, "c") for i in range(10, 15)] + [
        item for i in range(10, 15) for item in ((i, "d"), (i, "tombstone"))]
    deletes = [payload(r["value"]) for r in table_b[5:] if r["value"] is not None]
    assert [d["before"] for d in deletes] == [{"id": i, "colb": "b"} for i in range(10, 15)]
    assert all(d["after"] is None for d in deletes)
    assert replay(config, TABLE_B) == {}


@pytest.mark.version_neutral  # the batches' bounds; test_create_and_delete runs the Spark path
def test_update_primary_key_with_restart_in_middle(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    """updatePrimaryKeyWithRestartInMiddle: one transaction moves key 1 to 100 in both tables; the job stops after
    one micro-batch and a second run goes on. Each table streams the old key's delete, its tombstone and the new
    key's create, once."""
    config = _config(workdir, **{"cdckit.stream.max.batches": "1"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "tableb", {"id": 1, "colb": "b"})
    run_stream(spark, config)  # the insert's batch, then the job stops
    with model.transaction("testDB") as tx:
        tx.update("dbo", "tablea", {"id": 1}, {"id": 100})
        tx.update("dbo", "tableb", {"id": 1}, {"id": 100})
    run_stream(spark, config)
    run_stream(spark, config)
    assert _shape(_streamed(config, TABLE_A)) == [(1, "d"), (1, "tombstone"), (100, "c")]
    assert _shape(_streamed(config, TABLE_B)) == [(1, "c"), (1, "d"), (1, "tombstone"), (100, "c")]
    for topic, column, value in ((TABLE_A, "cola", "a"), (TABLE_B, "colb", "b")):
        delete, _, create = (r["value"] for r in _streamed(config, topic)[-3:])
        assert payload(delete)["before"] == {"id": 1, column: value} and payload(delete)["after"] is None
        assert payload(create)["after"] == {"id": 100, column: value} and payload(create)["before"] is None
    assert replay(config, TABLE_A) == _table(model, "tablea", "cola")
    assert replay(config, TABLE_B) == _table(model, "tableb", "colb")


@pytest.mark.version_neutral  # the order of a transaction's changes; test_create_and_delete runs the Spark path
def test_update_primary_key_twice_with_restart_in_middle_of_tx(model: SqlServerModel, spark: Any,
                                                               workdir: Path) -> None:
    """updatePrimaryKeyTwiceWithRestartInMiddleOfTx (DBZ-2329): five inserts, then ``UPDATE tableb SET id = colb +
    300`` twice in one transaction, tombstones off and batches of one change: 20 records, the first UPDATE a
    deferred update (five deletes, then five creates), the second changing no key (five updates)."""
    config = _config(workdir, **{"tombstones.on.delete": "false", "max.batch.size": "1",
                                 "cdckit.stream.max.batches": "2"})
    run_snapshot(spark, config)
    for i in range(1, 6):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "tableb", {"id": i, "colb": str(i)})
    with model.transaction("testDB") as tx:
        tx.update_many("dbo", "tableb", [({"id": i}, {"id": i + 300}) for i in range(1, 6)])
        tx.update_many("dbo", "tableb", [({"id": i + 300}, {"id": i + 300}) for i in range(1, 6)])
    while True:
        before = len(records(config, TABLE_B))
        run_stream(spark, config)
        if len(records(config, TABLE_B)) == before:
            break
    found = _streamed(config, TABLE_B)
    assert len(found) == 20
    shape = _shape(found)
    assert shape[:5] == [(i, "c") for i in range(1, 6)]
    assert sorted(shape[5:10]) == [(i, "d") for i in range(1, 6)]
    assert sorted(shape[10:15]) == [(i + 300, "c") for i in range(1, 6)]
    assert sorted(shape[15:]) == [(i + 300, "u") for i in range(1, 6)]
    assert replay(config, TABLE_B) == _table(model, "tableb", "colb")


@pytest.mark.version_neutral  # skipped.operations; test_create_and_delete runs the Spark path
def test_should_emit_no_events_for_skipped_update_and_delete_operations(model: SqlServerModel, spark: Any,
                                                                        workdir: Path) -> None:
    """shouldEmitNoEventsForSkippedUpdateAndDeleteOperations: with skipped.operations=u,d only the creates stream."""
    config = _config(workdir, **{"skipped.operations": "u,d"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "tablea", {"id": 201, "cola": "insert201"})
    with model.transaction("testDB") as tx:
        tx.update("dbo", "tablea", {"id": 201}, {"cola": "insert201-update"})
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "tablea", {"id": 202, "cola": "insert202"})
    with model.transaction("testDB") as tx:
        tx.delete("dbo", "tablea", {"id": 202})
    run_stream(spark, config)
    found = _streamed(config, TABLE_A)
    assert _shape(found) == [(201, "c"), (202, "c")]
    assert [payload(r["value"])["after"]["cola"] for r in found] == ["insert201", "insert202"]


@pytest.mark.version_neutral  # keys; test_create_and_delete runs the Spark path
def test_keyless_table(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    """keylessTable: a table without a primary key has a null key in every record: the snapshot's read, a create,
    an update (UPDATE keyless SET id=3 WHERE id=2: before and after images), and a delete with its tombstone."""
    model.create_table("testDB", "dbo", "keyless", [ModelColumn("id", "int"), ModelColumn("name", "varchar", 30)])
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "keyless", {"id": 1, "name": "k"})
    model.enable_table("testDB", "dbo", "keyless")
    config = _config(workdir, **{"table.include.list": "dbo.keyless"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "keyless", {"id": 2, "name": "k"})
    with model.transaction("testDB") as tx:
        tx.update("dbo", "keyless", {"id": 2}, {"id": 3})
    with model.transaction("testDB") as tx:
        tx.delete("dbo", "keyless", {"id": 3})
    run_stream(spark, config)
    found = records(config, "server1.testDB.dbo.keyless")
    ops = [payload(r["value"])["op"] if r["value"] is not None else "tombstone" for r in found]
    assert ops == ["r", "c", "u", "d", "tombstone"]
    assert all(r["key"] is None for r in found)
    update = payload(found[2]["value"])
    assert (update["before"], update["after"]) == ({"id": 2, "name": "k"}, {"id": 3, "name": "k"})
