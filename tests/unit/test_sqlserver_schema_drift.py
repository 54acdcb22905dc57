"""Which captured tables the schema-evolution job finds changed, against the SQL Server model: a dropped column
and a changed column type are read from what the capture instance recorded, not from the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdckit.dialect.sqlserver.schema_evolution import Rotation, plan_for
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel


@pytest.fixture
def model(tmp_path: Path) -> SqlServerModel:
    server = SqlServerModel(tmp_path / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    server.create_table("testDB", "dbo", "customers", [ModelColumn("id", "int", nullable=False),
                                                       ModelColumn("email", "varchar", max_length=255),
                                                       ModelColumn("tier", "int")], ["id"])
    server.enable_table("testDB", "dbo", "customers")
    return server


def _rotations(model: SqlServerModel) -> list[Rotation]:
    options = {"database.hostname": "sqlserver.test", "database.port": "1433", "database.user": "cdckit",
               "database.password": "not-a-real-secret", "database.names": "testDB",
               "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
               "cdckit.sqlserver.model.path": str(model.path)}
    return plan_for(options, {})


def test_an_unchanged_table_needs_no_rotation(model: SqlServerModel) -> None:
    assert _rotations(model) == []


def test_a_dropped_column_rotates_the_capture_instance(model: SqlServerModel) -> None:
    model.alter_table_drop_column("testDB", "dbo", "customers", "tier")
    (rotation,) = _rotations(model)
    assert (rotation.action, rotation.capture_instance) == ("create", "dbo_customers_v2")
    assert rotation.reason == "dbo.customers: columns dropped: tier"


@pytest.mark.parametrize("column", [ModelColumn("tier", "bigint"), ModelColumn("email", "varchar", max_length=500),
                                    ModelColumn("email", "nvarchar", max_length=510)])
def test_a_changed_column_type_rotates_the_capture_instance(model: SqlServerModel, column: ModelColumn) -> None:
    model.alter_table_alter_column("testDB", "dbo", "customers", column)
    (rotation,) = _rotations(model)
    assert rotation.reason == f"dbo.customers: columns changed: {column.name}"


def test_a_new_capture_instance_takes_the_new_structure(model: SqlServerModel) -> None:
    model.alter_table_drop_column("testDB", "dbo", "customers", "tier")
    model.alter_table_alter_column("testDB", "dbo", "customers", ModelColumn("email", "nvarchar", max_length=510))
    model.enable_table("testDB", "dbo", "customers", capture_instance="dbo_customers_v2")
    model.disable_table("testDB", "dbo_customers")
    assert _rotations(model) == []
