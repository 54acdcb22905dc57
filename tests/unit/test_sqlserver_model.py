"""The SQL Server model, driven through its DB-API exactly as cdckit calls it (statements rendered from queries.py)."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import pickle
import struct
import sys
import types
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdckit.dialect.sqlserver import queries as q
from cdckit.dialect.sqlserver.catalog import capture_instances
from cdckit.dialect.sqlserver.connection import connect
from cdckit.dialect.sqlserver.snapshot import Chunk, read_chunk
from cdckit_lab import sqlserver_model as ssm
from cdckit_lab.sqlserver_model import ZERO_LSN, ModelColumn, SqlServerModel
from cdckit_lab.sqlserver_model._statements import parameter_markers, recognise

DB = q.quote_name("testDB")
CUSTOMERS = [
    ModelColumn("id", "int", nullable=False),
    ModelColumn("name", "nvarchar", max_length=200),
    ModelColumn("balance", "decimal", precision=10, scale=2),
    ModelColumn("active", "bit"),
    ModelColumn("created", "datetime2"),
]
NAMES = [c.name for c in CUSTOMERS]
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123456)


@pytest.fixture
def model(tmp_path: Path) -> SqlServerModel:
    server = SqlServerModel(tmp_path / "sqlserver.sqlite")
    server.create_database("testDB")
    server.create_table("testDB", "dbo", "customers", CUSTOMERS, ["id"])
    server.enable_cdc("testDB")
    assert server.enable_table("testDB", "dbo", "customers") == "dbo_customers"
    return server


@pytest.fixture
def conn(model: SqlServerModel) -> Iterator[ssm.Connection]:
    connection = ssm.connect(f"DRIVER={{ODBC Driver 18 for SQL Server}};MODEL={model.path};DATABASE=testDB")
    yield connection
    connection.close()


def one(conn: ssm.Connection, sql: str, *params: Any) -> Any:
    row = conn.cursor().execute(sql, *params).fetchone()
    return None if row is None else row[0]


def rows(conn: ssm.Connection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.cursor().execute(sql, *params).fetchall()]


def customer(i: int, name: str = "alice", balance: str = "10.50") -> dict[str, Any]:
    return {"id": i, "name": name, "balance": Decimal(balance), "active": True, "created": T0}


def changes(conn: ssm.Connection, low: bytes | None = None, high: bytes | None = None,
            instance: str = "dbo_customers", columns: list[str] = NAMES) -> list[tuple[Any, ...]]:
    low = low if low is not None else one(conn, q.MIN_LSN.format(db=DB), instance)
    high = high if high is not None else one(conn, q.MAX_LSN.format(db=DB))
    return rows(conn, q.changes_query(DB, instance, columns), low, high)


KEY_TYPES = ["int", "nvarchar(50)"]


def all_statements() -> list[str]:
    ct = q.change_table("dbo_customers")
    return [q.PRODUCT_VERSION, q.DATABASE_CDC_ENABLED, q.AGENT_RUNNING, q.MAX_LSN.format(db=DB),
            q.MIN_LSN.format(db=DB), q.INCREMENT_LSN.format(db=DB), q.CAPTURE_INSTANCES.format(db=DB),
            q.CAPTURED_COLUMNS.format(db=DB), q.PRIMARY_KEY_COLUMNS.format(db=DB), q.INDEX_COLUMNS.format(db=DB),
            q.DDL_HISTORY.format(db=DB), q.NTH_TRANSACTION_LSN.format(db=DB),
            q.CHANGE_COUNTS.format(db=DB, change_table=ct), q.changes_query(DB, "dbo_customers", NAMES),
            *[q.select_rows(DB, "dbo", "customers", NAMES, key, lo, hi, key_types=KEY_TYPES[:len(key)])
              for key in ([], ["id"], ["id", "name"]) for lo in (False, True) for hi in (False, True)],
            *[statement for key in (["id"], ["id", "name"]) for statement in (
                q.key_boundaries(DB, "dbo", "customers", key), q.last_key(DB, "dbo", "customers", key),
                q.next_boundary(DB, "dbo", "customers", key, KEY_TYPES[:len(key)], True),
                q.next_boundary(DB, "dbo", "customers", key, KEY_TYPES[:len(key)], False),
                q.keys_within(DB, "dbo", "customers", key, KEY_TYPES[:len(key)], 3, True, True))],
            q.row_count(DB, "dbo", "customers"), q.lock_table(DB, "dbo", "customers"),
            q.read_signals(DB, "dbo.signals"), *q.SET_ISOLATION.values()]


# ---- statement recognition ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("sql", all_statements())
def test_every_rendered_statement_parses_and_is_recognised(sql: str) -> None:
    parameter_markers(sql)
    name, _, _ = recognise(" ".join(sql.split()))
    assert name


def test_only_statements_sqlglot_wrongly_rejects_bypass_its_check() -> None:
    import sqlglot

    from cdckit_lab.sqlserver_model._statements import _SQLGLOT_GAPS

    assert set(q.SET_ISOLATION.values()) >= _SQLGLOT_GAPS
    for sql in _SQLGLOT_GAPS:  # valid T-SQL; when sqlglot learns it, drop the bypass
        with pytest.raises(sqlglot.errors.ParseError):
            sqlglot.parse_one(sql, read="tsql")


def test_identifiers_with_brackets_and_spaces_are_recognised(model: SqlServerModel, conn: ssm.Connection) -> None:
    model.create_table("testDB", "odd schema", "we]ird", [ModelColumn("k]ey", "int"), ModelColumn("v v", "int")],
                       ["k]ey"])
    with model.transaction("testDB") as tx:
        tx.insert("odd schema", "we]ird", {"k]ey": 1, "v v": 2})
    sql = q.select_rows(DB, "odd schema", "we]ird", ["k]ey", "v v"], ["k]ey"], True, False, key_types=["int"])
    assert rows(conn, sql, 0) == [(1, 2)]


def test_unmodelled_and_invalid_statements_fail_loudly(conn: ssm.Connection) -> None:
    with pytest.raises(ssm.UnmodelledStatementError, match="SELECT 1"):
        conn.cursor().execute("SELECT 1")
    with pytest.raises(ssm.UnmodelledStatementError, match="WITH \\(TABLOCKX\\)"):
        conn.cursor().execute(q.changes_query(DB, "dbo_customers", NAMES).replace("NOLOCK", "TABLOCKX"),
                              ZERO_LSN, ZERO_LSN)
    with pytest.raises(ssm.ProgrammingError, match="sqlglot"):
        conn.cursor().execute("SELEC is_cdc_enabled FROM sys.databases WHERE")
    with pytest.raises(ssm.ProgrammingError, match="2 parameter markers, but 1"):
        conn.cursor().execute(q.CAPTURED_COLUMNS.format(db=DB), 1)


# ---- server, database, agent --------------------------------------------------------------------------------------
def test_server_and_database_queries(model: SqlServerModel, conn: ssm.Connection) -> None:
    model.create_database("plainDB")
    assert one(conn, q.PRODUCT_VERSION) == "16.0.1000.6"
    assert one(conn, q.DATABASE_CDC_ENABLED, "testDB") is True
    assert one(conn, q.DATABASE_CDC_ENABLED, "plainDB") is False
    assert rows(conn, q.DATABASE_CDC_ENABLED, "nope") == []
    assert one(conn, q.AGENT_RUNNING) == 1
    with pytest.raises(ssm.ProgrammingError, match=r"Invalid object name 'plainDB\.cdc\.change_tables'"):
        one(conn, q.CAPTURE_INSTANCES.format(db="[plainDB]"))
    with pytest.raises(ssm.ProgrammingError, match=r"\(911\)"):
        one(conn, q.MAX_LSN.format(db="[missing]"))


def test_max_lsn_is_null_until_a_change_is_harvested_and_min_lsn_is_the_start_lsn(
        model: SqlServerModel, conn: ssm.Connection) -> None:
    assert one(conn, q.MAX_LSN.format(db=DB)) is None
    (instance,) = rows(conn, q.CAPTURE_INSTANCES.format(db=DB))
    assert instance[:3] == ("dbo", "customers", "dbo_customers")
    start_lsn = instance[3]
    assert isinstance(start_lsn, bytes) and len(start_lsn) == 10
    assert one(conn, q.MIN_LSN.format(db=DB), "dbo_customers") == start_lsn
    assert one(conn, q.MIN_LSN.format(db=DB), "no_such_instance") == ZERO_LSN
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
    assert tx.commit_lsn is not None and tx.commit_lsn > start_lsn
    assert one(conn, q.MAX_LSN.format(db=DB)) == tx.commit_lsn


def test_agent_stopped_keeps_changes_in_the_log_until_started(model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
    first = tx.commit_lsn
    model.stop_agent()
    assert model.agent_running is False
    assert one(conn, q.AGENT_RUNNING) == 0
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(2))
    with model.transaction("testDB") as tx2:
        tx2.delete("dbo", "customers", {"id": 1})
    assert one(conn, q.MAX_LSN.format(db=DB)) == first
    assert [r[2] for r in changes(conn)] == [2]
    model.start_agent()
    assert one(conn, q.AGENT_RUNNING) == 1
    assert one(conn, q.MAX_LSN.format(db=DB)) == tx2.commit_lsn
    assert [(r[0], r[2], r[4]) for r in changes(conn)] == [(first, 2, 1), (tx.commit_lsn, 2, 2),
                                                           (tx2.commit_lsn, 1, 1)]


# ---- change rows --------------------------------------------------------------------------------------------------
def test_insert_update_delete_in_commit_then_change_order(model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as t1:
        t1.insert("dbo", "customers", customer(1))
        t1.insert("dbo", "customers", customer(2, "bob"))
    with model.transaction("testDB") as t2:
        assert t2.update("dbo", "customers", {"id": 1}, {"name": "alicia", "balance": "11.25"}) == 1
        assert t2.delete("dbo", "customers", {"id": 2}) == 1
    result = changes(conn)
    assert [(r[2], r[4]) for r in result] == [(2, 1), (2, 2), (3, 1), (4, 1), (1, 2)]
    assert [r[0] for r in result] == [t1.commit_lsn] * 2 + [t2.commit_lsn] * 3
    assert t1.commit_lsn is not None and t2.commit_lsn is not None and t1.commit_lsn < t2.commit_lsn
    seqvals = [r[1] for r in result]
    assert seqvals[0] < seqvals[1] < t1.commit_lsn < seqvals[2] == seqvals[3] < seqvals[4] < t2.commit_lsn
    before, after = result[2], result[3]
    assert before[4:9] == (1, "alice", Decimal("10.50"), True, T0)
    assert after[4:9] == (1, "alicia", Decimal("11.25"), True, T0)
    assert result[4][4:6] == (2, "bob")
    mapping_time = result[0][9]
    assert isinstance(mapping_time, dt.datetime) and mapping_time == result[1][9]


def test_update_mask_bits(model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
        tx.update("dbo", "customers", {"id": 1}, {"name": "x"})
        tx.update("dbo", "customers", {"id": 1}, {"balance": 1, "active": False})
        tx.delete("dbo", "customers", {"id": 1})
    masks = [(r[2], r[3]) for r in changes(conn)]
    assert masks == [(2, b"\x1f"), (3, b"\x02"), (4, b"\x02"), (3, b"\x0c"), (4, b"\x0c"), (1, b"\x1f")]


def test_update_mask_spans_bytes_with_ordinal_one_in_the_last_byte(model: SqlServerModel,
                                                                   conn: ssm.Connection) -> None:
    wide = [ModelColumn(f"c{i}", "int") for i in range(1, 11)]
    model.create_table("testDB", "dbo", "wide", wide, ["c1"])
    model.enable_table("testDB", "dbo", "wide")
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "wide", {f"c{i}": i for i in range(1, 11)})
        tx.update("dbo", "wide", {"c1": 1}, {"c9": 90, "c2": 20})
    result = changes(conn, instance="dbo_wide", columns=[c.name for c in wide])
    assert [r[3] for r in result] == [b"\x03\xff", b"\x01\x02", b"\x01\x02"]


def test_primary_key_update_is_a_delete_and_an_insert_at_one_lsn(model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 1}, {"id": 2, "name": "b"})
    delete, insert = changes(conn)[1:]
    assert (delete[2], insert[2]) == (1, 2)
    assert delete[0] == insert[0] == tx.commit_lsn and delete[1] == insert[1]
    assert (delete[4], delete[5], insert[4], insert[5]) == (1, "alice", 2, "b")
    assert delete[3] == insert[3] == b"\x1f"
    assert rows(conn, q.select_rows(DB, "dbo", "customers", ["id", "name"], ["id"], False, False)) == [(2, "b")]


def test_change_counts_group_by_commit_lsn_without_update_before_rows(model: SqlServerModel,
                                                                      conn: ssm.Connection) -> None:
    with model.transaction("testDB") as t1:
        t1.insert("dbo", "customers", customer(1))
        t1.insert("dbo", "customers", customer(2))
    with model.transaction("testDB") as t2:
        t2.update("dbo", "customers", {"id": 1}, {"name": "z"})
    sql = q.CHANGE_COUNTS.format(db=DB, change_table=q.change_table("dbo_customers"))
    top = one(conn, q.MAX_LSN.format(db=DB))
    assert rows(conn, sql, 10, ZERO_LSN, top) == [(t1.commit_lsn, 2), (t2.commit_lsn, 1)]
    assert rows(conn, sql, 1, ZERO_LSN, top) == [(t1.commit_lsn, 2)]
    assert rows(conn, sql, 10, t1.commit_lsn, top) == [(t2.commit_lsn, 1)]
    with pytest.raises(ssm.ProgrammingError, match="Invalid object name"):
        rows(conn, q.CHANGE_COUNTS.format(db=DB, change_table=q.change_table("nope")), 1, ZERO_LSN, top)


def test_nth_transaction_lsn_skips_mapping_rows_without_a_transaction(model: SqlServerModel,
                                                                      conn: ssm.Connection) -> None:
    model.create_table("testDB", "dbo", "uncaptured", [ModelColumn("k", "int")], ["k"])
    commits = []
    for i in range(3):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "customers", customer(i))
        commits.append(tx.commit_lsn)
    with model.transaction("testDB") as other:
        other.insert("dbo", "uncaptured", {"k": 1})
    assert one(conn, q.MAX_LSN.format(db=DB)) == other.commit_lsn  # the capture job's "processed up to" row
    sql = q.NTH_TRANSACTION_LSN.format(db=DB)
    assert one(conn, sql, 2, ZERO_LSN) == commits[1]
    assert one(conn, sql, 10, commits[0]) == commits[2]
    assert one(conn, sql, 1, commits[2]) is None


# ---- LSN functions and the validity range -------------------------------------------------------------------------
def test_increment_lsn_carries(conn: ssm.Connection) -> None:
    sql = q.INCREMENT_LSN.format(db=DB)
    assert one(conn, sql, bytes.fromhex("000000250000000000ff")) == bytes.fromhex("00000025000000000100")
    assert one(conn, sql, bytes.fromhex("0000002500000000ffff")) == bytes.fromhex("00000025000000010000")
    assert one(conn, sql, None) is None
    with pytest.raises(ssm.ProgrammingError, match=r"\(257\)"):
        one(conn, sql, "0x00")


def test_change_table_reads_are_bounded_on_both_sides_and_name_missing_objects(model: SqlServerModel,
                                                                               conn: ssm.Connection) -> None:
    """A change table read directly (unlike fn_cdc_get_all_changes_) does not check the range against the instance's
    validity interval: a range outside it returns what the table holds there; a NULL bound returns nothing."""
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
    low = one(conn, q.MIN_LSN.format(db=DB), "dbo_customers")
    top = one(conn, q.MAX_LSN.format(db=DB))
    sql = q.changes_query(DB, "dbo_customers", NAMES)
    assert rows(conn, sql, bytes(9) + b"\x01", top) == rows(conn, sql, low, top)
    assert rows(conn, sql, top, low) == [] and rows(conn, sql, None, top) == []
    assert len(rows(conn, sql, low, top)) == 1
    assert rows(conn, sql, top, top)[0][0] == top  # both ends inclusive
    with pytest.raises(ssm.ProgrammingError, match=r"Invalid object name 'testDB\.cdc\.x_CT'"):
        rows(conn, q.changes_query(DB, "x", NAMES), low, top)
    with pytest.raises(ssm.ProgrammingError, match="Invalid column name 'nope'"):
        rows(conn, q.changes_query(DB, "dbo_customers", ["id", "nope"]), low, top)


def test_cleanup_raises_min_lsn_and_purges_rows(model: SqlServerModel, conn: ssm.Connection) -> None:
    commits = []
    for i in range(3):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "customers", customer(i))
        assert tx.commit_lsn is not None
        commits.append(tx.commit_lsn)
    old_min = one(conn, q.MIN_LSN.format(db=DB), "dbo_customers")
    model.cleanup("testDB", "dbo_customers", commits[1])
    assert one(conn, q.MIN_LSN.format(db=DB), "dbo_customers") == commits[1]
    assert [r[0] for r in changes(conn, low=old_min)] == commits[1:]  # the purged rows are gone
    assert [r[0] for r in changes(conn)] == commits[1:]
    assert one(conn, q.NTH_TRANSACTION_LSN.format(db=DB), 1, ZERO_LSN) == commits[1]
    with pytest.raises(ssm.ProgrammingError, match=r"\(22964\)"):
        model.cleanup("testDB", "dbo_customers", b"\xff" * 10)


# ---- capture instances and catalog --------------------------------------------------------------------------------
def test_catalog_of_a_capture_instance(model: SqlServerModel, conn: ssm.Connection) -> None:
    (_, _, _, _, change_object_id, source_object_id) = rows(conn, q.CAPTURE_INSTANCES.format(db=DB))[0]
    captured = conn.cursor().execute(q.CAPTURED_COLUMNS.format(db=DB), source_object_id, change_object_id).fetchall()
    assert [tuple(r) for r in captured] == [
        ("id", 1, "int", 4, 10, 0, False, False),
        ("name", 2, "nvarchar", 200, 0, 0, True, False),
        ("balance", 3, "decimal", 9, 10, 2, True, False),
        ("active", 4, "bit", 1, 1, 0, True, False),
        ("created", 5, "datetime2", 8, 27, 7, True, False),
    ]
    assert captured[1].column_type == "nvarchar" and captured[1].is_nullable is True
    assert rows(conn, q.PRIMARY_KEY_COLUMNS.format(db=DB), source_object_id) == [("id",)]
    assert rows(conn, q.INDEX_COLUMNS.format(db=DB), change_object_id) == [("id",)]
    assert rows(conn, q.DDL_HISTORY.format(db=DB), ZERO_LSN) == []


def test_two_capture_instances_schema_evolution_and_a_third_refused(model: SqlServerModel,
                                                                    conn: ssm.Connection) -> None:
    with model.transaction("testDB") as t1:
        t1.insert("dbo", "customers", customer(1))
    model.alter_table_add_column("testDB", "dbo", "customers", ModelColumn("email", "varchar", max_length=64))
    (ddl,) = rows(conn, q.DDL_HISTORY.format(db=DB), ZERO_LSN)
    assert ddl[2:4] == (False, "ALTER TABLE [dbo].[customers] ADD [email] varchar(64) NULL")
    assert rows(conn, q.DDL_HISTORY.format(db=DB), ddl[4]) == []
    model.enable_table("testDB", "dbo", "customers", "dbo_customers_v2", columns=["id", "email", "name"])
    with pytest.raises(ssm.ProgrammingError, match=r"\(22962\)"):
        model.enable_table("testDB", "dbo", "customers", "dbo_customers_v3")
    with model.transaction("testDB") as t2:
        t2.update("dbo", "customers", {"id": 1}, {"email": "a@example.com"})
    instances = rows(conn, q.CAPTURE_INSTANCES.format(db=DB))
    assert [r[2] for r in instances] == ["dbo_customers", "dbo_customers_v2"]
    assert instances[0][5] == instances[1][5] and instances[0][4] != instances[1][4]
    v2 = [tuple(r) for r in conn.cursor().execute(q.CAPTURED_COLUMNS.format(db=DB), instances[1][5],
                                                  instances[1][4])]
    assert [(r[0], r[1], r[2]) for r in v2] == [("id", 1, "int"), ("name", 2, "nvarchar"), ("email", 3, "varchar")]
    assert [(r[2], r[4]) for r in changes(conn)] == [(2, 1), (3, 1), (4, 1)]  # v1 does not capture email
    assert changes(conn)[2][3] == b"\x00"
    v2_changes = changes(conn, instance="dbo_customers_v2", columns=["id", "name", "email"])
    assert [(r[2], r[3], r[6]) for r in v2_changes] == [(3, b"\x04", None), (4, b"\x04", "a@example.com")]
    model.disable_table("testDB", "dbo_customers")
    assert [r[2] for r in rows(conn, q.CAPTURE_INSTANCES.format(db=DB))] == ["dbo_customers_v2"]
    assert one(conn, q.MIN_LSN.format(db=DB), "dbo_customers") == ZERO_LSN


def _change_table_columns(conn: ssm.Connection) -> list[tuple[Any, ...]]:
    """The change table's captured columns as sys.columns describes them: (name, type, max_length)."""
    (_, _, _, _, change_object_id, _) = rows(conn, q.CAPTURE_INSTANCES.format(db=DB))[0]
    return [r[:3] for r in rows(conn, q.TABLE_COLUMNS.format(db=DB), change_object_id) if not r[0].startswith("__$")]


def test_drop_column_keeps_it_in_the_capture_instance_with_nulls(model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
    before = _change_table_columns(conn)
    model.alter_table_drop_column("testDB", "dbo", "customers", "balance")
    (_, _, _, _, _, source_object_id) = rows(conn, q.CAPTURE_INSTANCES.format(db=DB))[0]
    assert [r[0] for r in rows(conn, q.TABLE_COLUMNS.format(db=DB), source_object_id)] == [
        "id", "name", "active", "created"]
    assert _change_table_columns(conn) == before  # the change table keeps the column
    (ddl,) = rows(conn, q.DDL_HISTORY.format(db=DB), ZERO_LSN)
    assert ddl[2:4] == (False, "ALTER TABLE [dbo].[customers] DROP COLUMN [balance]")
    (_, _, _, _, change_object_id, _) = rows(conn, q.CAPTURE_INSTANCES.format(db=DB))[0]
    captured = rows(conn, q.CAPTURED_COLUMNS.format(db=DB), source_object_id, change_object_id)
    assert captured[2] == ("balance", 3, "decimal", 9, 10, 2, None, None)  # no longer in the table
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "name": "bob"})
    assert [r[6] for r in changes(conn)] == [Decimal("10.50"), None]  # later changes carry NULL in it
    with pytest.raises(ssm.ProgrammingError, match=r"\(5074\)"):
        model.alter_table_drop_column("testDB", "dbo", "customers", "id")
    with pytest.raises(ssm.ProgrammingError, match=r"\(4924\)"):
        model.alter_table_drop_column("testDB", "dbo", "customers", "balance")


def test_alter_column_type_reaches_the_change_table_when_the_capture_job_reads_it(
        model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1, name="a" * 20))
    model.stop_agent()
    model.alter_table_alter_column("testDB", "dbo", "customers", ModelColumn("name", "nvarchar", max_length=600))
    assert ("name", "nvarchar", 200) in _change_table_columns(conn)  # the capture job has not read it yet
    model.start_agent()
    assert ("name", "nvarchar", 600) in _change_table_columns(conn)
    (ddl,) = rows(conn, q.DDL_HISTORY.format(db=DB), ZERO_LSN)
    assert ddl[2:4] == (True, "ALTER TABLE [dbo].[customers] ALTER COLUMN [name] nvarchar(300) NULL")
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(2, name="b" * 300))
    assert [r[5] for r in changes(conn)] == ["a" * 20, "b" * 300]
    with pytest.raises(ssm.DataError, match=r"\(2628\)"):  # a value that does not fit fails the statement
        model.alter_table_alter_column("testDB", "dbo", "customers", ModelColumn("name", "nvarchar", max_length=20))
    assert ("name", "nvarchar", 600) in _change_table_columns(conn)


# ---- table reads ----------------------------------------------------------------------------------------------------
def test_select_rows_key_ranges_and_bounds(model: SqlServerModel, conn: ssm.Connection) -> None:
    count = q.row_count(DB, "dbo", "customers")
    assert rows(conn, count) == [(0,)]
    assert rows(conn, q.last_key(DB, "dbo", "customers", ["id"])) == []
    with model.transaction("testDB") as tx:
        for i in (5, 1, 9, 3):
            tx.insert("dbo", "customers", customer(i, f"n{i}"))
    assert rows(conn, count) == [(4,)]
    assert rows(conn, q.last_key(DB, "dbo", "customers", ["id"])) == [(9,)]
    assert rows(conn, q.key_boundaries(DB, "dbo", "customers", ["id"]), 5, 2) == [(3,), (9,)]
    assert rows(conn, q.key_boundaries(DB, "dbo", "customers", ["id"]), 1, 2) == [(3,)]

    def ids(lower: bool, upper: bool, *params: Any) -> list[int]:
        sql = q.select_rows(DB, "dbo", "customers", ["id", "name"], ["id"], lower, upper, key_types=["int"])
        return [r[0] for r in rows(conn, sql, *params)]

    assert ids(False, False) == [1, 3, 5, 9]
    assert ids(True, False, 3) == [5, 9]  # after the lower boundary key
    assert ids(False, True, 5) == [1, 3, 5]  # up to and including the upper one
    assert ids(True, True, 3, 9) == [5, 9]
    unordered = q.select_rows(DB, "dbo", "customers", ["name"], [], False, False)
    assert rows(conn, unordered) == [("n5",), ("n1",), ("n9",), ("n3",)]
    with pytest.raises(ssm.ProgrammingError, match=r"Invalid object name 'testDB\.dbo\.nope'"):
        rows(conn, q.select_rows(DB, "dbo", "nope", ["id"], ["id"], False, False))
    with pytest.raises(ssm.ProgrammingError, match="Invalid column name 'zzz'"):
        rows(conn, q.select_rows(DB, "dbo", "customers", ["zzz"], ["id"], False, False))


def test_string_keys_use_a_case_insensitive_order(model: SqlServerModel, conn: ssm.Connection) -> None:
    model.create_table("testDB", "dbo", "tags", [ModelColumn("tag", "nvarchar", max_length=40)], ["tag"])
    with model.transaction("testDB") as tx:
        for tag in ("beta", "Alpha", "gamma"):
            tx.insert("dbo", "tags", {"tag": tag})
    sql = q.select_rows(DB, "dbo", "tags", ["tag"], ["tag"], True, False, key_types=["nvarchar(20)"])
    assert rows(conn, sql, "b") == [("beta",), ("gamma",)]
    assert rows(conn, q.key_boundaries(DB, "dbo", "tags", ["tag"]), 3, 1) == [("Alpha",), ("beta",), ("gamma",)]
    with pytest.raises(ssm.IntegrityError, match=r"\(2627\)"), model.transaction("testDB") as tx:
        tx.insert("dbo", "tags", {"tag": "ALPHA"})


def test_signals_isolation_and_table_lock(model: SqlServerModel, conn: ssm.Connection) -> None:
    model.create_table("testDB", "dbo", "signals", [ModelColumn("id", "varchar", max_length=42),
                                                    ModelColumn("type", "varchar", max_length=32),
                                                    ModelColumn("data", "varchar", max_length=2048)])
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "signals", {"id": "s1", "type": "execute-snapshot", "data": "{}"})
    assert rows(conn, q.read_signals(DB, "signals")) == [("s1", "execute-snapshot", "{}")]
    model.record_statements = True
    assert conn.isolation_level == "READ COMMITTED"
    for mode, sql in q.SET_ISOLATION.items():
        cursor = conn.cursor().execute(sql)
        assert cursor.description is None
        assert conn.isolation_level == sql.rsplit("LEVEL ", 1)[1]
        with pytest.raises(ssm.ProgrammingError, match="not a query"):
            cursor.fetchone()
        assert mode
    cursor = conn.cursor().execute(q.lock_table(DB, "dbo", "customers"))
    assert [d[0] for d in cursor.description or ()] == NAMES and cursor.fetchall() == []
    assert conn.session.locked_tables == ["testDB.dbo.customers"]
    conn.commit()
    assert conn.session.locked_tables == []
    log = model.statement_log()
    assert [entry[0] for entry in log] == ["SET_ISOLATION"] * 5 + ["lock_table"]
    assert log[-1][3] == "REPEATABLE READ"


# ---- values and the DB-API surface --------------------------------------------------------------------------------
def test_values_come_back_as_pyodbc_returns_them(model: SqlServerModel, conn: ssm.Connection) -> None:
    columns = [ModelColumn("k", "bigint"), ModelColumn("c", "char", max_length=4), ModelColumn("b", "binary",
               max_length=3), ModelColumn("u", "uniqueidentifier"), ModelColumn("d", "date"),
               ModelColumn("t", "time", precision=11, scale=2), ModelColumn("dt", "datetime"),
               ModelColumn("sdt", "smalldatetime"), ModelColumn("f", "float"), ModelColumn("r", "real"),
               ModelColumn("m", "money"), ModelColumn("x", "nvarchar"), ModelColumn("o", "datetimeoffset")]
    model.create_table("testDB", "dbo", "types", columns, ["k"])
    value = dt.datetime(2024, 1, 2, 3, 4, 5, 2000)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "types", {"k": 2**40, "c": "ab", "b": b"\x01", "u": "6f9619ff-8b86-d011-b42d-00c04fc964ff",
                                   "d": dt.date(2024, 1, 2), "t": dt.time(1, 2, 3, 456789), "dt": value,
                                   "sdt": dt.datetime(2024, 1, 2, 3, 4, 31), "f": 0.1, "r": 0.1, "m": "1.23456",
                                   "x": "ü" * 5000, "o": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)})
    names = [c.name for c in columns]
    sql = q.select_rows(DB, "dbo", "types", names[:-1], ["k"], False, False)
    cursor = conn.cursor().execute(sql)
    (row,) = cursor.fetchall()
    assert tuple(row) == (2**40, "ab  ", b"\x01\x00\x00", "6F9619FF-8B86-D011-B42D-00C04FC964FF",
                          dt.date(2024, 1, 2), dt.time(1, 2, 3, 460000), dt.datetime(2024, 1, 2, 3, 4, 5, 3000),
                          dt.datetime(2024, 1, 2, 3, 5), 0.1, pytest.approx(0.1), Decimal("1.2346"), "ü" * 5000)
    assert row.r != 0.1  # stored as float32
    description = {d[0]: d for d in cursor.description or ()}
    assert description["b"][1] is bytearray and description["k"][1] is int and description["m"][1] is Decimal
    assert description["x"][3] == 0 and description["c"][3] == 4
    with pytest.raises(ssm.ProgrammingError, match="-155"):
        conn.cursor().execute(q.select_rows(DB, "dbo", "types", ["o"], ["k"], False, False)).fetchall()
    conn.add_output_converter(-155, lambda raw: len(raw))
    assert one(conn, q.select_rows(DB, "dbo", "types", ["o"], ["k"], False, False)) == 20


def test_datetimeoffset_fetch_fails_as_pyodbc_does_without_an_output_converter(model: SqlServerModel,
                                                                              conn: ssm.Connection) -> None:
    """pyodbc has no reader for SQL_SS_TIMESTAMPOFFSET (-155): the execute succeeds, fetching a row fails whatever
    the value (NULL too); an output converter receives SQL_SS_TIMESTAMPOFFSET_STRUCT bytes, and NULL stays None."""
    model.create_table("testDB", "dbo", "moments", [ModelColumn("k", "int", nullable=False),
                                                    ModelColumn("at", "datetimeoffset")], ["k"])
    at = dt.datetime(2018, 7, 13, 12, 23, 45, 456000, tzinfo=dt.timezone(-dt.timedelta(hours=5, minutes=30)))
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "moments", {"k": 1, "at": None})
        tx.insert("dbo", "moments", {"k": 2, "at": at})
    sql = q.select_rows(DB, "dbo", "moments", ["k", "at"], ["k"], False, False)
    cursor = conn.cursor().execute(sql)
    assert {d[0]: d[1] for d in cursor.description or ()}["at"] is bytearray
    with pytest.raises(ssm.ProgrammingError) as error:
        cursor.fetchone()
    assert error.value.args == ("ODBC SQL type -155 is not yet supported.  column-index=1  type=-155", "HY106")
    received: list[bytes] = []
    conn.add_output_converter(-155, lambda raw: received.append(raw) or "converted")
    cursor = conn.cursor().execute(sql)
    assert {d[0]: d[1] for d in cursor.description or ()}["at"] is str
    assert [tuple(r) for r in cursor.fetchall()] == [(1, None), (2, "converted")]
    assert [struct.unpack("<6hI2h", raw) for raw in received] == [(2018, 7, 13, 12, 23, 45, 456_000_000, -5, -30)]


def test_admin_errors_carry_sql_server_numbers(model: SqlServerModel) -> None:
    model.create_table("testDB", "dbo", "ident", [ModelColumn("id", "int", identity=True),
                                                  ModelColumn("s", "varchar", max_length=3, nullable=False)], ["id"])
    with model.transaction("testDB") as tx:
        assert tx.insert("dbo", "ident", {"s": "a"})["id"] == 1
        assert tx.insert("dbo", "ident", {"s": "b"})["id"] == 2
    cases: list[tuple[dict[str, Any], int]] = [({"s": "toolong"}, 2628), ({"s": None}, 515), ({"id": 5, "s": "x"}, 544)]
    for row, number in cases:
        with pytest.raises(ssm.Error) as error, model.transaction("testDB") as tx:
            tx.insert("dbo", "ident", row)
        assert error.value.number == number
    with pytest.raises(ssm.IntegrityError, match=r"\(2627\)"), model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
        tx.insert("dbo", "customers", customer(1))
    model.create_database("plainDB")
    model.create_table("plainDB", "dbo", "t", [ModelColumn("k", "int")], ["k"])
    with pytest.raises(ssm.ProgrammingError, match=r"\(22901\)"):
        model.enable_table("plainDB", "dbo", "t")
    with pytest.raises(ssm.ProgrammingError, match=r"\(22926\)"):
        model.enable_table("testDB", "dbo", "customers")


def test_a_failed_transaction_leaves_no_trace(model: SqlServerModel, conn: ssm.Connection) -> None:
    with pytest.raises(RuntimeError), model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
        raise RuntimeError("boom")
    assert one(conn, q.MAX_LSN.format(db=DB)) is None
    assert rows(conn, q.row_count(DB, "dbo", "customers")) == [(0,)]


def test_cursor_and_connection_surface(model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        for i in range(5):
            tx.insert("dbo", "customers", customer(i))
    cursor = conn.cursor()
    sql = q.select_rows(DB, "dbo", "customers", ["id"], ["id"], True, True, key_types=["int"])
    assert cursor.execute(sql, (0, 3)) is cursor and cursor.rowcount == -1
    assert [r[0] for r in cursor.fetchmany(2)] == [1, 2]
    assert [r.id for r in cursor] == [3]
    assert cursor.fetchone() is None
    assert cursor.execute(q.AGENT_RUNNING).fetchval() == 1
    assert cursor.description == (("is_running", int, None, 10, 10, 0, False),)
    row = cursor.execute(q.AGENT_RUNNING).fetchone()
    assert row is not None and row.is_running == 1 and pickle.loads(pickle.dumps(row)) == (1,)
    cursor.close()
    with pytest.raises(ssm.ProgrammingError, match="closed cursor"):
        cursor.execute(q.AGENT_RUNNING)
    assert conn.autocommit is False
    conn.commit()
    conn.rollback()
    with ssm.connect(f"MODEL={model.path}", autocommit=True) as other:
        assert other.autocommit is True and one(other, q.PRODUCT_VERSION) == "16.0.1000.6"
    other.close()
    with pytest.raises(ssm.ProgrammingError, match="closed connection"):
        other.cursor()
    with pytest.raises(ssm.ProgrammingError, match=r"\(4060\)"):
        ssm.connect(f"MODEL={model.path};DATABASE=nope")
    with pytest.raises(ssm.InterfaceError, match="MODEL"):
        ssm.connect("DRIVER={ODBC Driver 18 for SQL Server};SERVER=localhost")
    factory = pickle.loads(pickle.dumps(ssm.connect_factory(model.path)))
    assert one(factory("DATABASE=testDB;UID=sa;PWD={p;w}}d}"), q.DATABASE_CDC_ENABLED, "testDB") is True


# ---- more than one process ----------------------------------------------------------------------------------------
def _read_in_child(connection_string: str) -> list[tuple[Any, ...]]:
    from cdckit_lab.sqlserver_model import connect

    with connect(connection_string) as conn:
        low = conn.cursor().execute(q.MIN_LSN.format(db=DB), "dbo_customers").fetchval()
        high = conn.cursor().execute(q.MAX_LSN.format(db=DB)).fetchval()
        result = conn.cursor().execute(q.changes_query(DB, "dbo_customers", NAMES), low, high).fetchall()
        return [tuple(r) for r in result]


def _write_in_child(path: str, start: int) -> list[bytes]:
    from cdckit_lab.sqlserver_model import SqlServerModel

    server = SqlServerModel(path)
    commits = []
    for i in range(start, start + 5):
        with server.transaction("testDB") as tx:
            tx.insert("dbo", "customers", {"id": i, "name": f"p{i}"})
        assert tx.commit_lsn is not None
        commits.append(tx.commit_lsn)
    return commits


def test_a_second_process_sees_the_same_server(model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", customer(1))
        tx.update("dbo", "customers", {"id": 1}, {"active": False})
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        read = pool.apply(_read_in_child, (f"MODEL={model.path};DATABASE=testDB",))
        assert read == changes(conn)
        assert [r[2] for r in read] == [2, 3, 4]
        written = pool.starmap(_write_in_child, [(str(model.path), 100), (str(model.path), 200)])
    commits = sorted(lsn for batch in written for lsn in batch)
    assert len(set(commits)) == 10
    assert [r[0] for r in changes(conn)][3:] == commits
    assert one(conn, q.MAX_LSN.format(db=DB)) == commits[-1]


def test_capture_instances_follow_the_schema_lists_as_debezium(model: SqlServerModel, conn: ssm.Connection) -> None:
    model.create_table("testDB", "sales", "orders", CUSTOMERS, ["id"])
    assert model.enable_table("testDB", "sales", "orders") == "sales_orders"

    def captured(**options: str) -> list[str]:
        return sorted(i.qualified_name for i in capture_instances(conn.cursor(), "testDB", options))

    assert captured() == ["dbo.customers", "sales.orders"]
    assert captured(**{"schema.include.list": "sales"}) == ["sales.orders"]
    assert captured(**{"schema.exclude.list": "sal.*"}) == ["dbo.customers"]
    assert captured(**{"schema.include.list": "s"}) == []  # anchored, as Debezium's lists are
    assert captured(**{"schema.include.list": "dbo,sales", "table.exclude.list": r"dbo\.customers"}) == [
        "sales.orders"]


class _Recording:
    """The model's connection, noting the size of every fetchmany (what the driver is asked per round trip)."""

    def __init__(self, inner: Any, sizes: list[int]) -> None:
        self.inner, self.sizes = inner, sizes

    def cursor(self) -> Any:
        cursor, sizes = self.inner.cursor(), self.sizes

        class Cursor:
            def __getattr__(self, name: str) -> Any:
                return getattr(cursor, name)

            def fetchmany(self, size: int) -> Any:
                sizes.append(size)
                return cursor.fetchmany(size)

        return Cursor()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_snapshot_reads_fetch_snapshot_fetch_size_rows_per_round_trip(model: SqlServerModel,
                                                                      conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        for i in range(5):
            tx.insert("dbo", "customers", customer(i))
    instance, = capture_instances(conn.cursor(), "testDB", {})
    sizes: list[int] = []
    rows, _low, _high = read_chunk(_Recording(conn, sizes), instance, Chunk("testDB", "dbo", "customers", 0, None,
                                                                             None), "repeatable_read", 2)
    assert len(rows) == 5 and sizes == [2, 2, 2, 2]  # 2 + 2 + 1, then the empty fetch that ends it


def test_the_login_timeout_is_database_connect_timeout_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    # pyodbc's connect (no SQL Server here): what cdckit asks of it
    seen: dict[str, Any] = {}
    monkeypatch.setitem(sys.modules, "pyodbc", types.SimpleNamespace(
        connect=lambda text, **kwargs: seen.update(kwargs) or types.SimpleNamespace(autocommit=False)))
    connect({"database.hostname": "db", "database.user": "u", "database.password": "p",
             "database.names": "testDB", "database.connect.timeout.ms": "4500"})
    assert seen == {"timeout": 4}


def test_capture_job_latency_and_cleanup_margin_as_the_metrics_read_them(tmp_path: Path) -> None:
    from cdckit.dialect.sqlserver.catalog import lsn_int
    from cdckit.dialect.sqlserver.changes import capture_health

    now = [dt.datetime(2026, 11, 26, 12, 0, 0)]
    server = SqlServerModel(tmp_path / "sqlserver.sqlite", clock=lambda: now[0])
    server.create_database("testDB")
    server.create_table("testDB", "dbo", "customers", CUSTOMERS, ["id"])
    server.enable_cdc("testDB")
    server.enable_table("testDB", "dbo", "customers")
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "name": "a"})
    first = tx.commit_lsn
    server.stop_agent()
    now[0] += dt.timedelta(seconds=5)
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "name": "b"})
    second = tx.commit_lsn
    now[0] += dt.timedelta(seconds=60)
    server.start_agent()  # the capture job scans what waited in the log: 60 s after its commit
    assert first is not None and second is not None
    conn = connect({"cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
                    "cdckit.sqlserver.model.path": str(server.path), "database.hostname": "h",
                    "database.user": "u", "database.password": "p"}, "testDB")
    cursor = conn.cursor()
    health = capture_health(cursor, "testDB", ["dbo_customers"], lsn_int(second))
    assert health == {"CaptureJobLatencySeconds": 60.0, "CleanupMarginSeconds": 5.0}
    server.cleanup("testDB", "dbo_customers", second)  # the low-water mark reaches the stream's position
    assert capture_health(cursor, "testDB", ["dbo_customers"], lsn_int(second))["CleanupMarginSeconds"] == 0.0
    assert capture_health(cursor, "testDB", ["dbo_customers"], None)["CleanupMarginSeconds"] is None
    conn.close()


def test_a_signals_condition_is_evaluated_in_three_valued_logic_and_compiled_against_the_table(
        model: SqlServerModel, conn: ssm.Connection) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "name": "Ann@example.com"})
        tx.insert("dbo", "customers", {"id": 2, "name": None})
        tx.insert("dbo", "customers", {"id": 3, "name": "bob@example.org"})
    db = q.quote_name("testDB")

    def ids(condition: str) -> list[int]:
        return [r[0] for r in rows(conn, q.select_rows(db, "dbo", "customers", ["id"], ["id"], False, False,
                                                       condition))]

    assert ids("name LIKE 'ann%'") == [1]  # the default collation: any case
    assert ids("NOT (name LIKE '%.org')") == [1]  # NOT UNKNOWN is UNKNOWN: the NULL row stays out
    assert ids("name IS NULL OR id IN (3, NULL)") == [2, 3]
    assert ids("id BETWEEN 2 AND 3 AND name = 'BOB@example.org  '") == [3]  # = ignores trailing blanks
    assert ids("id > '1'") == [2, 3]  # the literal takes the column's type
    with pytest.raises(ssm.DataError, match="245"):
        ids("id = 'many'")
    with pytest.raises(ssm.ProgrammingError, match="Invalid column name 'salary'"):
        rows(conn, q.try_condition(db, "dbo", "customers", "salary > 1"))
    assert rows(conn, q.try_condition(db, "dbo", "customers", "id = 1")) == []


# ---- types pyodbc cannot fetch, rowversion and the 100 ns digit (docs/decisions/0032) ------------------------------
SHAPES = [ModelColumn("id", "int", nullable=False), ModelColumn("shape", "geometry"), ModelColumn("place", "geography"),
          ModelColumn("node", "hierarchyid"), ModelColumn("tag", "sql_variant"), ModelColumn("version", "timestamp"),
          ModelColumn("at", "datetime2"), ModelColumn("clock", "time"), ModelColumn("zoned", "datetimeoffset"),
          ModelColumn("legacy", "datetime"), ModelColumn("minute", "smalldatetime")]
SHAPE_NAMES = [c.name for c in SHAPES]
SHAPE_TYPES = {c.name: c.type_name for c in SHAPES}
SHAPE_ROW = {"id": 1, "shape": "POLYGON((0 0, 2 0, 2 2, 0 0))", "place": ("POINT(-122.35 47.65)", 4326),
             "node": "/1/3/", "tag": 42, "at": "2024-01-02 03:04:05.1234567", "clock": "23:59:59.9999999",
             "zoned": "2024-01-02 03:04:05.1234567 -05:30", "legacy": "2024-01-02 03:04:05.456",
             "minute": "2024-01-02 03:04:31"}
POLYGON_WKB = struct.pack("<BIII8d", 1, 3, 1, 4, 0, 0, 2, 0, 2, 2, 0, 0)
POINT_WKB = struct.pack("<BIdd", 1, 1, -122.35, 47.65)


@pytest.fixture
def shapes(model: SqlServerModel) -> SqlServerModel:
    model.create_table("testDB", "dbo", "shapes", SHAPES, ["id"])
    model.enable_table("testDB", "dbo", "shapes")
    return model


@pytest.mark.parametrize(("column", "sql_type"), [("shape", -151), ("place", -151), ("node", -151), ("tag", -150)])
def test_clr_and_variant_columns_fail_the_fetch_as_pyodbc_does(shapes: SqlServerModel, conn: ssm.Connection,
                                                               column: str, sql_type: int) -> None:
    """pyodbc has no reader for SQL_SS_UDT (-151: geometry, geography, hierarchyid) or SQL_SS_VARIANT (-150): the
    execute succeeds, fetching a row fails, whatever the value (NULL too)."""
    with shapes.transaction("testDB") as tx:
        tx.insert("dbo", "shapes", {"id": 1})
    cursor = conn.cursor().execute(q.select_rows(DB, "dbo", "shapes", ["id", column], ["id"], False, False))
    with pytest.raises(ssm.ProgrammingError) as error:
        cursor.fetchall()
    assert error.value.args == (f"ODBC SQL type {sql_type} is not yet supported.  column-index=1  type={sql_type}",
                                "HY106")


def test_the_readers_conversions_return_srid_and_wkb_hierarchyid_text_and_variant_text(shapes: SqlServerModel,
                                                                                     conn: ssm.Connection) -> None:
    with shapes.transaction("testDB") as tx:
        tx.insert("dbo", "shapes", SHAPE_ROW)
        tx.insert("dbo", "shapes", {"id": 2, "tag": "text", "place": "POINT(1 2)"})
    names = ["id", "shape", "place", "node", "tag"]
    sql = q.select_rows(DB, "dbo", "shapes", names, ["id"], False, False, types=SHAPE_TYPES)
    assert "CAST([shape].STSrid AS binary(4)) + [shape].STAsBinary() AS [shape]" in sql
    assert rows(conn, sql) == [
        (1, bytes(4) + POLYGON_WKB, (4326).to_bytes(4, "big") + POINT_WKB, "/1/3/", "42"),
        (2, None, (4326).to_bytes(4, "big") + struct.pack("<BIdd", 1, 1, 1, 2), None, "text")]  # geography: 4326
    streamed = rows(conn, q.changes_query(DB, "dbo_shapes", names, types=SHAPE_TYPES),
                    *_lsn_range(conn, "dbo_shapes"))
    assert [r[4:9] for r in streamed] == rows(conn, sql)
    with pytest.raises(ssm.ProgrammingError, match=r"Cannot call methods on int\. \(258\)"):
        rows(conn, q.select_rows(DB, "dbo", "shapes", ["id"], ["id"], False, False, types={"id": "geometry"}))
    with pytest.raises(ssm.DataError, match="245"), shapes.transaction("testDB") as tx:
        tx.insert("dbo", "shapes", {"id": 3, "node": "1/2"})


def _lsn_range(conn: ssm.Connection, instance: str) -> tuple[bytes, bytes]:
    return one(conn, q.MIN_LSN.format(db=DB), instance), one(conn, q.MAX_LSN.format(db=DB))


def test_datetime2_time_and_datetimeoffset_keep_the_100_ns_digit_only_through_output_converters(
        shapes: SqlServerModel, conn: ssm.Connection) -> None:
    """pyodbc reads SQL_TYPE_TIMESTAMP (93) and SQL_SS_TIME2 (-154) as Python values, the nanosecond fraction divided
    by 1000; an output converter for the type receives the driver's struct. Microsoft's ODBC driver gives datetime
    in milliseconds (.457, not .456667)."""
    with shapes.transaction("testDB") as tx:
        tx.insert("dbo", "shapes", SHAPE_ROW)
    sql = q.select_rows(DB, "dbo", "shapes", ["at", "clock", "legacy", "minute"], ["id"], False, False)
    assert rows(conn, sql) == [(dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.time(23, 59, 59, 999999),
                                dt.datetime(2024, 1, 2, 3, 4, 5, 457000), dt.datetime(2024, 1, 2, 3, 5))]
    conn.add_output_converter(93, lambda raw: struct.unpack("<6hI", raw))
    conn.add_output_converter(-154, lambda raw: struct.unpack("<3H2xI", raw))
    conn.add_output_converter(-155, lambda raw: struct.unpack("<6hI2h", raw))
    assert rows(conn, sql) == [((2024, 1, 2, 3, 4, 5, 123456700), (23, 59, 59, 999999900),
                                (2024, 1, 2, 3, 4, 5, 457000000), (2024, 1, 2, 3, 5, 0, 0))]
    assert one(conn, q.select_rows(DB, "dbo", "shapes", ["zoned"], ["id"], False, False)) == (
        2024, 1, 2, 3, 4, 5, 123456700, -5, -30)
    # SQL Server rounds to the column's scale, half up, carrying into the seconds
    with shapes.transaction("testDB") as tx:
        tx.insert("dbo", "shapes", {"id": 2, "clock": "10:00:00.99999996"})
    assert rows(conn, q.select_rows(DB, "dbo", "shapes", ["clock"], ["id"], False, False))[1] == ((10, 0, 1, 0),)


def test_rowversion_is_a_new_8_byte_value_on_every_insert_and_update_and_binary_8_in_the_change_table(
        shapes: SqlServerModel, conn: ssm.Connection) -> None:
    with shapes.transaction("testDB") as tx:
        first = tx.insert("dbo", "shapes", {"id": 1})["version"]
        second = tx.insert("dbo", "shapes", {"id": 2})["version"]
    with shapes.transaction("testDB") as tx:
        tx.update("dbo", "shapes", {"id": 1}, {"tag": 7})
    (updated,), (kept,) = rows(conn, q.select_rows(DB, "dbo", "shapes", ["version"], ["id"], False, False))
    assert kept == second and len(updated) == 8 and updated > second > first
    assert int.from_bytes(first, "big") > 0
    streamed = rows(conn, q.changes_query(DB, "dbo_shapes", ["id", "version"]), *_lsn_range(conn, "dbo_shapes"))
    assert [(r[2], r[4], r[5]) for r in streamed] == [(2, 1, first), (2, 2, second), (3, 1, first), (4, 1, updated)]
    instance = next(i for i in capture_instances(conn.cursor(), "testDB", {}) if i.name == "shapes")
    version = next(c for c in instance.columns if c.name == "version")
    assert (version.type_name, version.max_length) == ("timestamp", 8)
    change_table = rows(conn, q.TABLE_COLUMNS.format(db=DB), instance.object_id)
    assert [r[1:3] for r in change_table if r[0] == "version"] == [("binary", 8)]
    with pytest.raises(ssm.ProgrammingError, match="272"), shapes.transaction("testDB") as tx:
        tx.update("dbo", "shapes", {"id": 1}, {"version": first})
    with pytest.raises(ssm.ProgrammingError, match="273"), shapes.transaction("testDB") as tx:
        tx.insert("dbo", "shapes", {"id": 3, "version": first})
