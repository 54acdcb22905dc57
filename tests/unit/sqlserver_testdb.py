"""A SQL Server model database for the unit tests: ``testDB`` with CDC enabled and its tables captured, and the
connector properties that reach it through the model's connection factory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

DATABASE = "testDB"


def model_database(path: Path, tables: Mapping[str, tuple[Sequence[ModelColumn], Sequence[str]]]) -> SqlServerModel:
    """A model server at ``path`` with ``testDB``, CDC enabled on it, and each of ``tables`` (name: columns, key
    columns) created in ``dbo`` and captured."""
    server = SqlServerModel(path)
    server.create_database(DATABASE)
    server.enable_cdc(DATABASE)
    for name, (columns, key) in tables.items():
        server.create_table(DATABASE, "dbo", name, list(columns), list(key))
        server.enable_table(DATABASE, "dbo", name)
    return server


def model_properties(model: SqlServerModel, user: str = "cdckit", password: str = "right",
                     **extra: str) -> dict[str, str]:
    """The connection properties of the model's ``testDB``; ``extra`` adds others (``a__b`` for ``a.b``)."""
    return {"database.hostname": "sqlserver.test", "database.port": "1433", "database.user": user,
            "database.password": password, "database.names": DATABASE,
            "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
            "cdckit.sqlserver.model.path": str(model.path),
            **{key.replace("__", "."): value for key, value in extra.items()}}
