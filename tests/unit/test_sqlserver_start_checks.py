"""``cdckit validate`` and a job's start against the SQL Server model: a login outside a capture instance's gating
role, CDC not enabled, the Agent stopped: each one line naming the fix, exit 2, before Spark starts. The model's
rules are cited in ``cdckit_lab.sqlserver_model`` (sys.fn_cdc_get_min_lsn's Remarks for the gating role)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlserver_testdb import model_database, model_properties

from cdckit.cli import main
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel


@pytest.fixture
def model(tmp_path: Path) -> SqlServerModel:
    server = model_database(tmp_path / "sqlserver.sqlite", {
        "customers": ([ModelColumn("id", "int", nullable=False), ModelColumn("note", "nvarchar", max_length=100)],
                      ["id"]),
        "audit": ([ModelColumn("at", "int", nullable=False)], [])})
    server.create_login("cdckit", "Lg-40-right")
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "note": "one"})
    return server


def _config(model: SqlServerModel, tmp_path: Path, **extra: str) -> Path:
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({"name": "mssql", "config": {
        "connector.class": "io.debezium.connector.sqlserver.SqlServerConnector", "topic.prefix": "mssql",
        "cdckit.output.path": str(tmp_path / "out"), "cdckit.checkpoint.location": str(tmp_path / "checkpoint"),
        **model_properties(model, password="Lg-40-right", **extra)}}))
    return path


def test_validate_checks_the_server_and_the_capture_instances(model: SqlServerModel, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(model, tmp_path)
    assert main(["validate", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("ok  source: SQL Server at sqlserver.test") for line in lines), lines
    assert "ok  tables: 2 captured (testDB.dbo.audit, testDB.dbo.customers), each one's changes readable" in lines
    assert lines[-1].startswith("valid: a job would start")
    # SQL Server's settings only: no PostgreSQL slot or publication
    assert not any(line.startswith(("slot.name=", "publication.", "plugin.name=")) for line in lines), lines


def test_a_login_outside_a_gating_role_stops_the_job_before_anything(model: SqlServerModel, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    model.set_capture_access("testDB", "dbo_customers", "cdckit", False)
    config = _config(model, tmp_path)
    assert main(["stream", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("cdckit: error: the login may not read the changes of table testDB.dbo.customers: capture "
                          "instance dbo_customers exists"), out
    assert "grant both (sql/sqlserver/05_cdckit_login_and_role.sql)" in out and len(out.splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "checkpoint").exists()
    assert main(["validate", str(config)]) == 2
    assert capsys.readouterr().out.splitlines()[-1].startswith("invalid: 1 problem above")


def test_cdc_not_enabled_and_a_stopped_agent_are_told_with_their_fix(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    server = SqlServerModel(tmp_path / "plain.sqlite")
    server.create_database("testDB")
    config = _config(server, tmp_path)
    assert main(["validate", str(config)]) == 2
    out = capsys.readouterr().out
    assert "FAIL source: CDC is not enabled on database 'testDB'; run sql/sqlserver/01_enable_cdc_database.sql" in out
    server.enable_cdc("testDB")
    server.create_table("testDB", "dbo", "t", [ModelColumn("id", "int", nullable=False)], ["id"])
    server.enable_table("testDB", "dbo", "t")
    server.stop_agent()  # nothing captured yet, so no maximum LSN: the stopped Agent is why, told before Spark
    assert main(["snapshot", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.strip() == ("cdckit: error: no maximum LSN is recorded in database 'testDB': the SQL Server Agent is "
                           "not running, so the CDC capture job is not reading the transaction log; start the SQL "
                           "Server Agent service"), out
    assert not (tmp_path / "out").exists() and not (tmp_path / "checkpoint").exists()
