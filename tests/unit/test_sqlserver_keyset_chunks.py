"""SQL Server snapshots cut on any primary key: the server finds the chunk boundaries, orders and compares the keys
(composite keys, uniqueidentifier's byte groups, a case-insensitive collation, dates), and every row is read once."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdckit.dialect.incremental import Progress, TableRequest
from cdckit.dialect.sqlserver import queries as q
from cdckit.dialect.sqlserver.catalog import CaptureInstance, capture_instances
from cdckit.dialect.sqlserver.snapshot import (
    Chunk,
    ChunkFilter,
    ChunkWatermark,
    chunk_key,
    key_text,
    key_values,
    keys_inside,
    plan_chunks,
    read_chunk,
)
from cdckit.events import ChangeEvent, Position
from cdckit_lab import sqlserver_model as ssm
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

DB = q.quote_name("testDB")
# Text order and SQL Server's order differ: SQL Server compares the last six bytes first ("Comparing GUID and
# uniqueidentifier values": 2AAA... < 3AAA... < 1AAA... by their last group), and the third group byte-swapped.
GUIDS = ["3AAAAAAA-BBBB-CCCC-DDDD-2EEEEEEEEEEE", "2AAAAAAA-BBBB-CCCC-DDDD-1EEEEEEEEEEE",
         "1AAAAAAA-BBBB-CCCC-DDDD-3EEEEEEEEEEE", "00000000-0000-0100-0000-000000000000",
         "00000000-0000-0001-0000-000000000000", "FFFFFFFF-0000-0000-0000-000000000000"]
SERVER_ORDER = ["FFFFFFFF-0000-0000-0000-000000000000", "00000000-0000-0100-0000-000000000000",
                "00000000-0000-0001-0000-000000000000", "2AAAAAAA-BBBB-CCCC-DDDD-1EEEEEEEEEEE",
                "3AAAAAAA-BBBB-CCCC-DDDD-2EEEEEEEEEEE", "1AAAAAAA-BBBB-CCCC-DDDD-3EEEEEEEEEEE"]
TAGS = ["beta", "Alpha", "gamma", "ALPHAbet", "Delta", "delta2", "zeta", "Beta2", "aardvark"]
TAG_ORDER = ["aardvark", "Alpha", "ALPHAbet", "beta", "Beta2", "Delta", "delta2", "gamma", "zeta"]


@pytest.fixture
def model(tmp_path: Path) -> SqlServerModel:
    server = SqlServerModel(tmp_path / "sqlserver.sqlite")
    server.create_database("testDB")
    server.create_table("testDB", "Sales", "SalesOrderDetail", [
        ModelColumn("SalesOrderID", "int"), ModelColumn("SalesOrderDetailID", "int"),
        ModelColumn("OrderQty", "smallint")], ["SalesOrderID", "SalesOrderDetailID"])
    server.create_table("testDB", "dbo", "documents", [
        ModelColumn("id", "uniqueidentifier"), ModelColumn("title", "nvarchar", max_length=100)], ["id"])
    server.create_table("testDB", "dbo", "tags", [
        ModelColumn("tag", "nvarchar", max_length=80), ModelColumn("n", "int")], ["tag"])
    server.create_table("testDB", "dbo", "days", [
        ModelColumn("day", "date"), ModelColumn("at", "datetime"),
        ModelColumn("price", "decimal", precision=9, scale=2), ModelColumn("note", "nvarchar", max_length=40)],
        ["day", "at", "price"])
    server.enable_cdc("testDB")
    for schema, table in (("Sales", "SalesOrderDetail"), ("dbo", "documents"), ("dbo", "tags"), ("dbo", "days")):
        server.enable_table("testDB", schema, table)
    with server.transaction("testDB") as tx:
        for order in (43659, 43660, 43661, 43662):
            for line in range(1, 6 + order % 3):
                tx.insert("Sales", "SalesOrderDetail", {"SalesOrderID": order, "SalesOrderDetailID": line,
                                                        "OrderQty": line})
        for n, guid in enumerate(GUIDS):
            tx.insert("dbo", "documents", {"id": guid, "title": f"doc {n}"})
        for n, tag in enumerate(TAGS):
            tx.insert("dbo", "tags", {"tag": tag, "n": n})
        for n in range(12):
            tx.insert("dbo", "days", {"day": dt.date(2024, 2, 27) + dt.timedelta(days=n // 3),
                                      "at": dt.datetime(2024, 1, 1, 0, 0, 0, 3000) + dt.timedelta(hours=n % 2),
                                      "price": Decimal(n % 3) + Decimal("0.25"), "note": f"n{n}"})
    return server


@pytest.fixture
def conn(model: SqlServerModel) -> Iterator[ssm.Connection]:
    connection = ssm.connect(f"MODEL={model.path};DATABASE=testDB")
    yield connection
    connection.close()


def instance_of(conn: ssm.Connection, table: str) -> CaptureInstance:
    return next(i for i in capture_instances(conn.cursor(), "testDB", {}) if i.name == table)


def keys(instance: CaptureInstance, rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [tuple(row[k] for k in instance.key_columns) for row in rows]


def test_the_model_orders_uniqueidentifier_as_sql_server_does_not_as_text(conn: ssm.Connection) -> None:
    sql = q.select_rows(DB, "dbo", "documents", ["id"], ["id"], False, False)
    assert [r[0] for r in conn.cursor().execute(sql).fetchall()] == SERVER_ORDER
    assert sorted(GUIDS) != SERVER_ORDER
    after = q.select_rows(DB, "dbo", "documents", ["id"], ["id"], True, False, key_types=["uniqueidentifier"])
    assert [r[0] for r in conn.cursor().execute(after, SERVER_ORDER[3].lower()).fetchall()] == SERVER_ORDER[4:]


def test_the_model_orders_nvarchar_keys_case_insensitively(conn: ssm.Connection) -> None:
    sql = q.select_rows(DB, "dbo", "tags", ["tag"], ["tag"], True, True, key_types=["nvarchar(40)"])
    assert [r[0] for r in conn.cursor().execute(sql, "ALPHA", "DELTA").fetchall()] == ["ALPHAbet", "beta", "Beta2",
                                                                                     "Delta"]
    everything = q.select_rows(DB, "dbo", "tags", ["tag"], ["tag"], False, False)
    assert [r[0] for r in conn.cursor().execute(everything).fetchall()] == TAG_ORDER


def test_the_model_compares_composite_keys_as_their_row_comparison(conn: ssm.Connection) -> None:
    sql = q.select_rows(DB, "Sales", "SalesOrderDetail", ["SalesOrderID", "SalesOrderDetailID"],
                        ["SalesOrderID", "SalesOrderDetailID"], True, True, key_types=["int", "int"])
    lower, upper = q.keyset_parameters([43659, 3]), q.keyset_parameters([43660, 2])
    assert [tuple(r) for r in conn.cursor().execute(sql, *lower, *upper).fetchall()] == [
        (43659, 4), (43659, 5), (43660, 1), (43660, 2)]


@pytest.mark.parametrize(("table", "chunk_rows"), [("SalesOrderDetail", 4), ("documents", 2), ("tags", 3),
                                                   ("days", 5), ("tags", 100)])
def test_every_row_is_in_exactly_one_chunk_of_the_servers_plan(conn: ssm.Connection, table: str,
                                                               chunk_rows: int) -> None:
    instance = instance_of(conn, table)
    assert chunk_key(instance) == instance.key_columns
    plan = plan_chunks(conn.cursor(), instance, chunk_rows)
    count = conn.cursor().execute(q.row_count(DB, instance.schema, table)).fetchval()
    assert len(plan) == -(-count // chunk_rows)  # the rows shared out evenly, the last chunk open-ended
    assert plan[0].lower is None and plan[-1].upper is None
    assert all(a.upper == b.lower for a, b in itertools.pairwise(plan))  # a boundary closes one chunk, opens one
    stored = [Chunk(**json.loads(json.dumps(asdict(chunk)))) for chunk in plan]  # the plan as the snapshot keeps it
    assert stored == plan
    read = [keys(instance, read_chunk(conn, instance, chunk, "repeatable_read")[0]) for chunk in stored]
    everything = [tuple(r) for r in conn.cursor().execute(q.select_rows(
        DB, instance.schema, table, list(instance.key_columns), list(instance.key_columns), False, False)).fetchall()]
    assert [k for chunk in read for k in chunk] == everything  # in the server's order, each row once
    assert all(len(chunk) <= chunk_rows for chunk in read)


def test_boundary_keys_survive_json_and_bind_back_to_the_same_values(conn: ssm.Connection) -> None:
    days = instance_of(conn, "days")
    values = (dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 0, 0, 0, 3000), Decimal("2.25"))
    text = key_text(values)
    assert text == ("2024-02-29", "2024-01-01T00:00:00.003000", "2.25")
    assert tuple(key_values(days, days.key_columns, json.loads(json.dumps(text)))) == values
    documents = instance_of(conn, "documents")
    assert key_values(documents, ("id",), key_text([uuid.UUID(GUIDS[0])])) == [GUIDS[0]]
    assert key_text([b"\x00\xff", True, 1.5]) == ("00ff", "1", "1.5")
    # a plan or offset written when chunks were integer ranges: [lower, upper) becomes (lower - 1, upper - 1]
    assert Chunk(**{**asdict(Chunk("testDB", "dbo", "t", 0, None, None)), "lower": 100, "upper": 200}) == Chunk(
        "testDB", "dbo", "t", 0, ("99",), ("199",))


def test_the_server_says_which_keys_a_chunk_holds(conn: ssm.Connection) -> None:
    documents = instance_of(conn, "documents")
    inside = keys_inside(conn.cursor(), documents, key_text([SERVER_ORDER[1]]), key_text([SERVER_ORDER[3]]),
                         [(guid,) for guid in GUIDS])
    assert sorted(GUIDS[n] for n in inside) == sorted(SERVER_ORDER[2:4])
    tags = instance_of(conn, "tags")
    many = [(f"t{n:04d}",) for n in range(900)] + [("BETA",), ("alpha",)]  # more keys than one statement binds
    inside = keys_inside(conn.cursor(), tags, ("ALPHA",), ("beta",), many)
    assert [many[n] for n in sorted(inside)] == [("BETA",)]


def _event(instance: CaptureInstance, op: str, key: dict[str, object], lsn: int) -> ChangeEvent:
    image = {**key}
    return ChangeEvent(instance.schema, instance.name, op, image if op == "d" else None,
                       None if op == "d" else image, Position(lsn, lsn, 0), 0, database="testDB")


def test_streamed_changes_a_chunk_already_holds_are_skipped_by_the_servers_comparison(conn: ssm.Connection) -> None:
    documents = instance_of(conn, "documents")
    plan = plan_chunks(conn.cursor(), documents, 2)
    highs = [100, 200, 300]  # the chunks read one after the other
    skip = ChunkFilter([ChunkWatermark("testDB", "dbo", "documents", c.lower, c.upper, high, c.id)
                        for c, high in zip(plan, highs, strict=True)])
    block = [(_event(documents, "u", {"id": guid}, 150), documents) for guid in SERVER_ORDER]
    block.append((_event(documents, "d", {"id": SERVER_ORDER[5]}, 450), documents))  # after every chunk
    asked: list[int] = []

    def cursor() -> Any:
        asked.append(1)
        return conn.cursor()

    # at 150 only the first chunk had not been read yet; the others read the change
    assert skip.already_snapshotted(block, cursor) == [False, False, True, True, True, True, False]
    assert asked
    asked.clear()
    assert skip.already_snapshotted(block[-1:], cursor) == [False] and not asked  # no chunk to ask about


def test_an_incremental_snapshot_cuts_keyset_chunks_that_survive_a_restart(conn: ssm.Connection) -> None:
    from cdckit.spark.sources.sqlserver_stream import _next_chunks

    instances = [instance_of(conn, t) for t in ("SalesOrderDetail", "documents", "tags", "days")]
    progress = Progress(pending=tuple(TableRequest(i.schema, i.name) for i in instances))
    read: dict[str, list[tuple[object, ...]]] = {i.name: [] for i in instances}
    while progress.runnable:
        chunks, progress = _next_chunks(conn.cursor(), progress, instances, 3, 2)
        progress = Progress.from_offset(json.loads(json.dumps({"incremental": progress.to_json()})))  # a restart
        for window in json.loads(json.dumps(chunks)):
            instance = next(i for i in instances if i.name == window["table"])
            chunk = Chunk("testDB", window["schema"], window["table"], window["index"], window["lower"],
                          window["upper"])
            read[instance.name].extend(keys(instance, read_chunk(conn, instance, chunk, "repeatable_read")[0]))
    for instance in instances:
        everything = [tuple(r) for r in conn.cursor().execute(q.select_rows(
            DB, instance.schema, instance.name, list(instance.key_columns), list(instance.key_columns), False,
            False)).fetchall()]
        assert read[instance.name] == everything


def test_datetime_and_100_ns_datetime2_keys_read_as_text_bind_back_exactly(model: SqlServerModel) -> None:
    """cdckit's connection reads datetime and datetime2 as SQL Server's text (seven digits); a boundary of a datetime
    goes back as a datetime (a CAST of that text to datetime would fail), one of a datetime2(7) as its text."""
    from contextlib import closing

    from cdckit.dialect.sqlserver.connection import connect

    model.create_table("testDB", "dbo", "moments", [ModelColumn("at", "datetime2", precision=27, scale=7),
                                                     ModelColumn("logged", "datetime"), ModelColumn("n", "int")],
                       ["at", "logged"])
    model.enable_table("testDB", "dbo", "moments")
    base = dt.datetime(2024, 5, 1, 12, 0, 0)
    with model.transaction("testDB") as tx:
        for n in range(10):
            tx.insert("dbo", "moments", {"at": f"2024-05-01 12:00:00.{n:06d}5",
                                         "logged": base + dt.timedelta(milliseconds=3 * n), "n": n})
    options = {"connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
               "database.hostname": "sqlserver.test", "database.names": "testDB", "topic.prefix": "server1",
               "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
               "cdckit.sqlserver.model.path": str(model.path)}
    with closing(connect(options, "testDB")) as conn:
        moments = next(i for i in capture_instances(conn.cursor(), "testDB", options) if i.name == "moments")
        plan = plan_chunks(conn.cursor(), moments, 3)
        assert len(plan) == 4 and plan[1].lower is not None
        assert key_values(moments, moments.key_columns, plan[1].lower)[0] == plan[1].lower[0]  # 100 ns: as text
        assert isinstance(key_values(moments, moments.key_columns, plan[1].lower)[1], dt.datetime)
        read = [row["n"] for chunk in plan for row in read_chunk(conn, moments, chunk, "repeatable_read")[0]]
    assert read == list(range(10))


def test_tables_without_a_key_to_cut_on_are_read_as_one_chunk(model: SqlServerModel, conn: ssm.Connection) -> None:
    model.create_table("testDB", "dbo", "nodes", [ModelColumn("node", "hierarchyid"), ModelColumn("n", "int")],
                       ["node"])
    model.create_table("testDB", "dbo", "heap", [ModelColumn("n", "int")], [])
    for table in ("nodes", "heap"):
        model.enable_table("testDB", "dbo", table)
        instance = instance_of(conn, table)
        assert chunk_key(instance) is None
        assert plan_chunks(conn.cursor(), instance, 1) == [Chunk("testDB", "dbo", table, 0, None, None)]


def test_an_incremental_snapshot_planned_as_integer_ranges_goes_on_with_keysets(model: SqlServerModel,
                                                                               conn: ssm.Connection) -> None:
    """An offset written before keysets holds the table's plan (low, step, pieces) and the next chunk's index: the
    snapshot goes on from the first integer of that chunk's range, nothing read twice or skipped."""
    from cdckit.spark.sources.sqlserver_stream import _next_chunks

    model.create_table("testDB", "dbo", "numbers", [ModelColumn("id", "int"), ModelColumn("n", "int")], ["id"])
    model.enable_table("testDB", "dbo", "numbers")
    with model.transaction("testDB") as tx:
        for i in range(1, 61):
            tx.insert("dbo", "numbers", {"id": i, "n": i})
    numbers = instance_of(conn, "numbers")
    # chunks 0 and 1 of the plan (1, 10, 6), [.., 11) and [11, 21), were read: ids 1 to 20
    progress = Progress.from_offset({"incremental": {"pending": [], "current": {"schema": "dbo", "table": "numbers"},
                                                     "last": ["2"], "high": ["1", "10", "6"], "chunks": 2}})
    read: list[object] = []
    while progress.runnable:
        chunks, progress = _next_chunks(conn.cursor(), progress, [numbers], 25, 1)
        for window in chunks:
            chunk = Chunk("testDB", "dbo", "numbers", window["index"], window["lower"], window["upper"])
            read.extend(row["id"] for row in read_chunk(conn, numbers, chunk, "repeatable_read")[0])
    assert read == list(range(21, 61))
