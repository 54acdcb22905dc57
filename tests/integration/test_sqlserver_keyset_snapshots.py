"""SQL Server snapshots of tables keyed on more than an integer, through the Spark jobs and the model of SQL Server: a
composite key, a uniqueidentifier (whose order is not its text's), a mixed-case nvarchar (a case-insensitive
collation) and a date key, each cut into several chunks the server bounds, read once; then an incremental snapshot
of the same tables, restarted between its chunks. The docker suite runs the same scenario on a real server."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import payload, records, replay

from cdckit.config import Config, validate
from cdckit.dialect.sqlserver import queries as q
from cdckit.pipelines.base import read_snapshot_state
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

pytestmark = [pytest.mark.spark]
GUIDS = ["3AAAAAAA-BBBB-CCCC-DDDD-2EEEEEEEEEEE", "2AAAAAAA-BBBB-CCCC-DDDD-1EEEEEEEEEEE",
         "1AAAAAAA-BBBB-CCCC-DDDD-3EEEEEEEEEEE", "00000000-0000-0100-0000-000000000000",
         "00000000-0000-0001-0000-000000000000", "FFFFFFFF-0000-0000-0000-000000000000",
         "0000000A-0000-0000-0000-0000000000FF"]
TAGS = ["beta", "Alpha", "gamma", "ALPHAbet", "Delta", "delta2", "zeta", "Beta2", "aardvark"]
TABLES = {  # (schema, table): the key columns, then the label column every row has its own value in
    ("Sales", "SalesOrderDetail"): ["SalesOrderID", "SalesOrderDetailID"],
    ("dbo", "documents"): ["id"], ("dbo", "tags"): ["tag"], ("dbo", "days"): ["day"]}


def _columns(table: str) -> list[ModelColumn]:
    keys = {"SalesOrderDetail": [ModelColumn("SalesOrderID", "int"), ModelColumn("SalesOrderDetailID", "int")],
            "documents": [ModelColumn("id", "uniqueidentifier")],
            "tags": [ModelColumn("tag", "nvarchar", max_length=80)], "days": [ModelColumn("day", "date")]}[table]
    return [*keys, ModelColumn("label", "nvarchar", max_length=80)]


@pytest.fixture
def model(workdir: Path) -> SqlServerModel:
    server = SqlServerModel(workdir / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    for (schema, table), key in TABLES.items():
        server.create_table("testDB", schema, table, _columns(table), key)
        server.enable_table("testDB", schema, table)
    server.create_table("testDB", "dbo", "debezium_signal", [
        ModelColumn("id", "varchar", max_length=42, nullable=False),
        ModelColumn("type", "varchar", max_length=32, nullable=False),
        ModelColumn("data", "varchar", max_length=2048)], ["id"])
    server.enable_table("testDB", "dbo", "debezium_signal")
    with server.transaction("testDB") as tx:
        for order in (43659, 43660, 43661):
            for line in range(1, 4 + order % 3):
                tx.insert("Sales", "SalesOrderDetail", {"SalesOrderID": order, "SalesOrderDetailID": line,
                                                        "label": f"line {order}/{line}"})
        for n, guid in enumerate(GUIDS):
            tx.insert("dbo", "documents", {"id": guid, "label": f"document {n}"})
        for tag in TAGS:
            tx.insert("dbo", "tags", {"tag": tag, "label": f"tag {tag}"})
        for n in range(8):
            tx.insert("dbo", "days", {"day": dt.date(2024, 2, 26) + dt.timedelta(days=n), "label": f"day {n}"})
    return server


def config_of(model: SqlServerModel, workdir: Path, **overrides: str) -> Config:
    return validate({
        "connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
        "database.hostname": "sqlserver.test", "database.port": "1433", "database.user": "cdckit",
        "database.password": "not-a-real-secret", "database.names": "testDB", "topic.prefix": "server1",
        "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
        "cdckit.sqlserver.model.path": str(model.path), "cdckit.output.path": str(workdir / "out"),
        "cdckit.checkpoint.location": str(workdir / "checkpoint"), **overrides})


def labels(model: SqlServerModel, schema: str, table: str) -> Counter[str]:
    conn = model.connect(database="testDB")
    try:
        sql = q.select_rows(q.quote_name("testDB"), schema, table, ["label"], TABLES[(schema, table)], False, False)
        return Counter(row[0] for row in conn.cursor().execute(sql).fetchall())
    finally:
        conn.close()


def reads(config: Config, schema: str, table: str, marker: str) -> Counter[str]:
    """The labels of a table's snapshot reads: ``marker`` "incremental" for an ad hoc snapshot's."""
    found = [payload(r["value"]) for r in records(config, f"server1.testDB.{schema}.{table}") if r["value"]]
    return Counter(v["after"]["label"] for v in found if v["op"] == "r"
                   and (v["source"]["snapshot"] == "incremental") == (marker == "incremental"))


@pytest.mark.version_neutral  # the chunks' keysets; the other SQL Server tests run the Spark path on every Spark
def test_tables_keyed_on_composite_guid_nvarchar_and_date_keys_snapshot_in_chunks_and_incrementally(
        model: SqlServerModel, spark: Any, workdir: Path) -> None:
    settings = {"cdckit.snapshot.chunk.rows": "3", "table.exclude.list": r"dbo\.debezium_signal",
                "signal.data.collection": "testDB.dbo.debezium_signal", "incremental.snapshot.chunk.size": "3",
                "max.batch.size": "6"}
    config = config_of(model, workdir, **settings)
    run_snapshot(spark, config)
    for (schema, table), _key in TABLES.items():
        assert reads(config, schema, table, "true") == labels(model, schema, table)  # each row once
        assert max(labels(model, schema, table).values()) == 1
    plan = (read_snapshot_state(config) or {})["plan"]  # several chunks a table, cut at keys the server chose
    assert Counter(chunk["table"] for chunk in plan) == {"SalesOrderDetail": 4, "documents": 3, "tags": 3, "days": 3}
    with model.transaction("testDB") as tx:  # changes after the snapshot, in every table
        tx.update("Sales", "SalesOrderDetail", {"SalesOrderID": 43660, "SalesOrderDetailID": 2}, {"label": "moved"})
        tx.delete("dbo", "documents", {"id": GUIDS[0]})
        tx.insert("dbo", "tags", {"tag": "EPSILON", "label": "tag EPSILON"})
        tx.update("dbo", "days", {"day": dt.date(2024, 2, 29)}, {"label": "leap day"})
    run_stream(spark, config)
    for (schema, table), _key in TABLES.items():
        replayed = replay(config, f"server1.testDB.{schema}.{table}")
        assert Counter(row["label"] for row in replayed.values()) == labels(model, schema, table)

    data = json.dumps({"data-collections": [rf"testDB\.{s}\.{t}" for s, t in TABLES], "type": "incremental"})
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "debezium_signal", {"id": "all-four", "type": "execute-snapshot", "data": data})
    bounded = config_of(model, workdir, **{**settings, "cdckit.stream.max.batches": "3"})
    for _run in range(12):  # a few chunks a run: the stream restarts between them, from its offsets
        run_stream(spark, bounded)
        if all(reads(config, s, t, "incremental") == labels(model, s, t) for s, t in TABLES):
            break
    for (schema, table), _key in TABLES.items():
        assert reads(config, schema, table, "incremental") == labels(model, schema, table)  # every row, once
