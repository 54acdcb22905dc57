"""SQL Server's errors as a user meets them, on SQL Server 2022 in a container: a login without a user in the
database (error 4060) told from a wrong password (18456), a login outside a capture instance's gating role told from
CDC disabled, and a captured value over 'max text repl size' failing the writer's own statement (7139) until the
option is raised as sql/sqlserver/01_enable_cdc_database.sql raises it (docs/decisions/0034). The same scenarios run
against the model in tests/unit/test_sqlserver_errors.py and tests/integration/test_sqlserver_guards.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlserver_docker import SqlServerLab, payload, records, topic, unique_name

from cdckit.dialect.sqlserver.catalog import capture_instances
from cdckit.dialect.sqlserver.changes import CaptureAccessError, check_readable
from cdckit.dialect.sqlserver.connection import connect
from cdckit.errors import CdcKitError, SourceConnectionError
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.docker, pytest.mark.spark]


def _password() -> str:
    """A password SQL Server's policy (CHECK_POLICY = ON) takes: upper, lower, digits and a symbol."""
    return f"Cdk!{uuid.uuid4().hex[:12]}Z9"


@pytest.fixture
def login(sqlserver: SqlServerLab) -> Iterator[tuple[str, str]]:
    """A login of its own, with no user in any database yet; dropped (with its users) afterwards."""
    name, password = unique_name("cdckit_login"), _password()
    sqlserver.execute(f"CREATE LOGIN [{name}] WITH PASSWORD = N'{password}', CHECK_POLICY = ON",
                      database="master")
    try:
        yield name, password
    finally:
        sqlserver.execute(f"IF DATABASE_PRINCIPAL_ID(N'{name}') IS NOT NULL DROP USER [{name}]")
        sqlserver.execute(f"DROP LOGIN [{name}]", database="master")


def _options(sqlserver: SqlServerLab, workdir: Path, tables: list[str], user: str, password: str) -> dict[str, str]:
    return sqlserver.properties(workdir, tables, database__user=user, database__password=password)


def test_a_login_without_a_user_in_the_database_is_told_so_not_to_fix_its_password(
        sqlserver: SqlServerLab, workdir: Path, login: tuple[str, str]) -> None:
    name, password = login
    with pytest.raises(SourceConnectionError) as closed:
        connect(_options(sqlserver, workdir, [], name, password), sqlserver.database)
    message = str(closed.value)
    assert f"login '{name}'" in message and f"cannot open database '{sqlserver.database}' (SQL Server error 4060)" \
        in message
    assert "database.password" not in message
    with pytest.raises(SourceConnectionError) as refused:
        connect(_options(sqlserver, workdir, [], name, password + "x"), sqlserver.database)
    assert f"refused login '{name}' (SQL Server error 18456" in str(refused.value)
    assert "database.user and database.password" in str(refused.value)


def test_a_login_outside_the_gating_role_is_told_so_not_that_cdc_was_disabled(
        sqlserver: SqlServerLab, spark: Any, workdir: Path, login: tuple[str, str]) -> None:
    name, password = login
    table = sqlserver.create_table("gated", "id int PRIMARY KEY, note nvarchar(40) NULL",
                                   "INSERT INTO dbo.{table} VALUES (1, N'one')")
    # what 05_cdckit_login_and_role.sql grants, except membership of the gating role (cdc_reader)
    sqlserver.execute(f"CREATE USER [{name}] FOR LOGIN [{name}]", f"GRANT SELECT ON dbo.[{table}] TO [{name}]",
                      f"GRANT SELECT ON SCHEMA::cdc TO [{name}]", f"GRANT VIEW DATABASE STATE TO [{name}]")
    sqlserver.wait_for_capture()
    options = _options(sqlserver, workdir, [table], name, password)
    with connect(options, sqlserver.database) as conn:
        cursor = conn.cursor()
        instance = next(i for i in capture_instances(cursor, sqlserver.database, options) if i.name == table)
        assert cursor.execute("SELECT sys.fn_cdc_get_min_lsn(?)", instance.capture_instance).fetchval() == bytes(10)
        with pytest.raises(CaptureAccessError, match="gating role"):
            check_readable(cursor, instance, instance.start_lsn)
    config = sqlserver.config(workdir, [table], database__user=name, database__password=password)
    run_snapshot(spark, config)
    sqlserver.execute(f"INSERT INTO dbo.{table} VALUES (2, N'two')")
    sqlserver.wait_for_capture()
    with pytest.raises(CdcKitError, match=f"the login may not read the changes of table {sqlserver.database}"):
        run_stream(spark, config)
    sqlserver.execute(f"ALTER ROLE cdc_reader ADD MEMBER [{name}]")
    run_stream(spark, config)
    assert [payload(r["value"])["after"]["id"] for r in records(config, topic(table))
            if payload(r["value"])["op"] == "c"] == [2]


def test_a_captured_value_over_max_text_repl_size_fails_the_writers_statement(sqlserver: SqlServerLab, spark: Any,
                                                                              workdir: Path) -> None:
    import pyodbc

    table = sqlserver.create_table("large", "id int PRIMARY KEY, body nvarchar(max) NULL")
    configure = "EXEC sp_configure N'max text repl size', {}; RECONFIGURE;"
    sqlserver.execute(configure.format(65536), database="master")  # SQL Server's default
    try:
        with pytest.raises(pyodbc.Error, match=r"Length of LOB data \(70000\) to be replicated exceeds configured "
                                               r"maximum 65536.*\(7139\)"):
            sqlserver.execute((f"INSERT INTO dbo.{table} VALUES (1, ?)", ("x" * 35000,)))
    finally:
        sqlserver.execute(configure.format(-1), database="master")  # what 01_enable_cdc_database.sql sets
    sqlserver.execute((f"INSERT INTO dbo.{table} VALUES (1, ?)", ("x" * 35000,)))
    sqlserver.wait_for_capture()
    config = sqlserver.config(workdir, [table], snapshot__mode="no_data")
    run_snapshot(spark, config)
    sqlserver.execute((f"UPDATE dbo.{table} SET body = ? WHERE id = 1", ("y" * 50000,)))
    sqlserver.wait_for_capture()
    run_stream(spark, config)
    (update,) = [payload(r["value"]) for r in records(config, topic(table)) if payload(r["value"])["op"] == "u"]
    assert update["after"]["body"] == "y" * 50000
