"""T-SQL cdckit builds for hostile identifiers stays one statement naming exactly those identifiers (sqlglot)."""

from __future__ import annotations

import pytest

sqlglot = pytest.importorskip("sqlglot")
from sqlglot import exp  # noqa: E402

from cdckit.dialect.sqlserver import queries  # noqa: E402

HOSTILE = ["x]; DROP TABLE dbo.canary; --", "sé lect", "order", "a'b", "[br]ackets]", "semi;colon", "ünï/*code*/"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_identifiers_stay_identifiers(name: str) -> None:
    db = queries.quote_name("test" + name)
    statements = [
        queries.select_rows(db, name, name, [name, "id"], [name, "id"], True, True, key_types=["int", "int"]),
        queries.key_boundaries(db, name, name, [name, "id"]),
        queries.next_boundary(db, name, name, [name], ["int"], True),
        queries.keys_within(db, name, name, [name], ["int"], 2, True, True),
        queries.changes_query(db, "dbo_" + name, [name]),
        queries.lock_table(db, name, name),
    ]
    for sql in statements:
        parsed = sqlglot.parse(sql, read="tsql")
        assert len(parsed) == 1, sql
        assert not any(isinstance(node, exp.Drop) for node in parsed[0].walk()), sql
        names = {identifier.name for identifier in parsed[0].find_all(exp.Identifier)}
        assert name in names or "dbo_" + name + "_CT" in names, (name, names, sql)
