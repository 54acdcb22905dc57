"""SQL Server's errors as a user meets them, against the model: a login that cannot open its database told from a
wrong password, a login outside a capture instance's gating role told from CDC disabled, a NULL start_lsn, a server
that does not list its Agent, a quiet database whose cleanup left no maximum LSN, the 64 KB limit of captured large
values, and the snapshot's lock timeout (docs/decisions/0034). Their twins on SQL Server 2022 are in
tests/docker/test_sqlserver_scenarios.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from sqlserver_testdb import model_database, model_properties

from cdckit.dialect.sqlserver import queries as q
from cdckit.dialect.sqlserver.catalog import capture_instances
from cdckit.dialect.sqlserver.changes import (
    CaptureAccessError,
    CaptureDisabledError,
    agent_running,
    check_readable,
    require_max_lsn,
)
from cdckit.dialect.sqlserver.connection import connect
from cdckit.dialect.sqlserver.snapshot import Chunk, read_chunk
from cdckit.errors import SourceConnectionError, SourcePreconditionError
from cdckit_lab import sqlserver_model as ssm
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

DB = q.quote_name("testDB")


@pytest.fixture
def model(tmp_path: Path) -> SqlServerModel:
    return model_database(tmp_path / "sqlserver.sqlite", {"customers": (
        [ModelColumn("id", "int", nullable=False), ModelColumn("note", "nvarchar", max_length=-1),
         ModelColumn("photo", "varbinary", max_length=-1)], ["id"])})


def options(model: SqlServerModel, user: str = "cdckit", password: str = "right") -> dict[str, str]:
    return model_properties(model, user, password)


def customers(model: SqlServerModel, login: str = "cdckit") -> Any:
    with connect(options(model, login)) as conn:
        return next(i for i in capture_instances(conn.cursor(), "testDB", {}) if i.name == "customers")


# -- logins: error 4060 is not a wrong password -------------------------------------------------------------------
def test_the_model_answers_a_failed_login_with_sql_servers_numbers_and_texts(model: SqlServerModel) -> None:
    model.create_database("salesDB")
    model.create_login("cdckit", "right", databases=["testDB"])
    with pytest.raises(ssm.InterfaceError) as wrong:
        ssm.connect(f"MODEL={model.path};DATABASE=testDB;UID=cdckit;PWD=wrong")
    assert wrong.value.args == ("28000", "[28000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Login failed "
                                         "for user 'cdckit'. (18456) (SQLDriverConnect)")
    with pytest.raises(ssm.ProgrammingError) as closed:
        ssm.connect(f"MODEL={model.path};DATABASE=salesDB;UID=CDCKIT;PWD=right")
    assert closed.value.args == ("42000", '[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Cannot open '
                                          'database "salesDB" requested by the login. The login failed. (4060) '
                                          "(SQLDriverConnect)")
    assert ssm.connect(f"MODEL={model.path};DATABASE=testDB;UID=cdckit;PWD=right").database == "testDB"


def test_a_database_the_login_cannot_open_is_not_reported_as_a_wrong_password(model: SqlServerModel) -> None:
    model.create_database("salesDB")
    model.create_login("cdckit", "right", databases=["testDB"])
    with pytest.raises(SourceConnectionError) as closed:
        connect(options(model), "salesDB")
    message = str(closed.value)
    assert message.startswith("login 'cdckit' on sqlserver.test:1433 cannot open database 'salesDB' (SQL Server "
                              "error 4060)")
    assert "database.names" in message and "05_cdckit_login_and_role.sql" in message
    assert "password" not in message
    with pytest.raises(SourceConnectionError) as refused:
        connect(options(model, password="wrong"), "testDB")
    assert str(refused.value) == ("sqlserver.test:1433 refused login 'cdckit' (SQL Server error 18456: unknown "
                                  "login or wrong password): check database.user and database.password")


# -- fn_cdc_get_min_lsn's 0x00: gone, not allowed, or not established ---------------------------------------------
def test_a_login_outside_the_gating_role_is_told_so_not_that_cdc_was_disabled(model: SqlServerModel) -> None:
    model.create_login("cdckit", "right")
    instance = customers(model)
    model.set_capture_access("testDB", "dbo_customers", "cdckit", False)
    with connect(options(model), "testDB") as conn:
        assert conn.cursor().execute(q.MIN_LSN.format(db=DB), "dbo_customers").fetchval() == bytes(10)
        with pytest.raises(CaptureAccessError) as denied:
            check_readable(conn.cursor(), instance, instance.start_lsn)
    message = str(denied.value)
    assert message.startswith("the login may not read the changes of table testDB.dbo.customers: capture instance "
                              "dbo_customers exists")
    assert "gating role" in message and "SELECT on every captured column" in message and "disabled" not in message
    model.set_capture_access("testDB", "dbo_customers", "cdckit", True)
    model.disable_table("testDB", "dbo_customers")
    with connect(options(model), "testDB") as conn, pytest.raises(CaptureDisabledError, match="CDC was disabled"):
        check_readable(conn.cursor(), instance, instance.start_lsn)


def test_a_capture_instance_whose_start_lsn_is_null_is_read_from_its_beginning(model: SqlServerModel) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1})
    model.clear_start_lsn("testDB", "dbo_customers")
    instance = customers(model)
    assert instance.start_lsn == 0
    with connect(options(model), "testDB") as conn:
        assert conn.cursor().execute(q.MIN_LSN.format(db=DB), "dbo_customers").fetchval() == bytes(10)
        assert check_readable(conn.cursor(), instance, 41) == 42


def test_a_new_capture_instance_without_a_start_lsn_leaves_the_older_one_read(model: SqlServerModel) -> None:
    model.enable_table("testDB", "dbo", "customers", capture_instance="dbo_customers_v2")
    assert customers(model).capture_instance == "dbo_customers_v2"
    model.clear_start_lsn("testDB", "dbo_customers_v2")
    instance = customers(model)
    assert (instance.capture_instance, instance.previous) == ("dbo_customers", None)


# -- no Agent row, no maximum LSN --------------------------------------------------------------------------------
def test_a_server_that_lists_no_agent_goes_on_with_a_warning_where_there_is_no_max_lsn(
        model: SqlServerModel, caplog: pytest.LogCaptureFixture) -> None:
    model.agent_service_listed = False
    with connect(options(model), "testDB") as conn:
        cursor = conn.cursor()
        assert cursor.execute(q.AGENT_RUNNING).fetchall() == []
        assert agent_running(cursor) is None
        with caplog.at_level(logging.WARNING, "cdckit.sqlserver"):
            assert require_max_lsn(cursor, "testDB") is None
            assert require_max_lsn(cursor, "testDB") is None
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "no maximum LSN is recorded in database 'testDB'" in warning
    assert "sys.dm_server_services lists no SQL Server Agent" in warning and "going on" in warning


def test_a_quiet_database_whose_cleanup_left_no_mapping_row_goes_on(model: SqlServerModel,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1})
    model.purge_lsn_time_mapping("testDB")
    with connect(options(model), "testDB") as conn, caplog.at_level(logging.WARNING, "cdckit.sqlserver"):
        assert require_max_lsn(conn.cursor(), "testDB") is None
    assert "although the SQL Server Agent runs" in caplog.text and "cdc.lsn_time_mapping" in caplog.text
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2})
    with connect(options(model), "testDB") as conn:
        assert require_max_lsn(conn.cursor(), "testDB") == int.from_bytes(tx.commit_lsn or b"", "big")


def test_no_max_lsn_with_the_agent_stopped_still_stops_the_job(model: SqlServerModel) -> None:
    model.stop_agent()
    with connect(options(model), "testDB") as conn, \
            pytest.raises(SourcePreconditionError, match="the SQL Server Agent is not running"):
        require_max_lsn(conn.cursor(), "testDB")


# -- max text repl size: error 7139 ------------------------------------------------------------------------------
def test_a_captured_value_over_max_text_repl_size_fails_the_users_own_statement(model: SqlServerModel) -> None:
    assert model.max_text_repl_size == 65536
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "note": "x" * 32768, "photo": bytes(65536)})  # 65536 bytes each
    with pytest.raises(ssm.ProgrammingError) as refused, model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "note": "x" * 32769})
    assert refused.value.args[1].startswith("[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Length of "
                                            "LOB data (65538) to be replicated exceeds configured maximum 65536.")
    assert "(7139)" in refused.value.args[1]
    with pytest.raises(ssm.ProgrammingError, match=r"Length of LOB data \(70000\).*\(7139\)"), \
            model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 1}, {"photo": bytes(70000)})
    model.create_table("testDB", "dbo", "uncaptured", [ModelColumn("id", "int", nullable=False),
                                                       ModelColumn("note", "nvarchar", max_length=-1)], ["id"])
    with model.transaction("testDB") as tx:  # the limit is CDC's: a table no capture instance reads takes any size
        tx.insert("dbo", "uncaptured", {"id": 1, "note": "x" * 100_000})
    model.configure("max text repl size", -1)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "note": "x" * 100_000})
        tx.update("dbo", "customers", {"id": 1}, {"photo": bytes(70000)})
    assert model.max_text_repl_size == -1
    with pytest.raises(ssm.ProgrammingError, match="15123"):
        model.configure("max text size", -1)


# -- snapshot.lock.timeout.ms --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("isolation", "timeout"), [("repeatable_read", 10000), ("exclusive", 0),
                                                    ("snapshot", None), ("read_committed", None)])
def test_the_snapshot_waits_for_locks_only_as_long_as_it_is_told(model: SqlServerModel, isolation: str,
                                                                 timeout: int | None) -> None:
    instance = customers(model)
    with connect(options(model), "testDB") as conn:
        read_chunk(conn, instance, Chunk("testDB", "dbo", "customers", 0, None, None), isolation,
                   lock_timeout_ms=10000 if timeout is None else timeout)
        assert conn.lock_timeout == (-1 if timeout is None else timeout)
