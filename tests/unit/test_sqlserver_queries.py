"""Every T-SQL statement cdckit sends to SQL Server parses as T-SQL, with identifiers quoted and values bound."""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp

from cdckit.dialect.sqlserver import queries

DB = queries.quote_name("test]DB")  # a name that needs escaping


def rendered() -> dict[str, str]:
    statements = {name: value.format(db=DB, change_table=queries.change_table("dbo_customers"))
                  for name, value in vars(queries).items() if name.isupper() and isinstance(value, str)}
    statements.update({f"SET_ISOLATION[{mode}]": sql for mode, sql in queries.SET_ISOLATION.items()})
    statements["changes_query"] = queries.changes_query(DB, "dbo_customers", ["id", "first name", "we]ird"])
    statements["select_rows(bounded)"] = queries.select_rows(DB, "dbo", "customers", ["id", "email"], ["id"],
                                                             True, True)
    statements["select_rows(unbounded)"] = queries.select_rows(DB, "dbo", "customers", ["id"], ["id"], False, False)
    statements["select_rows(additional-condition)"] = queries.select_rows(
        DB, "dbo", "customers", ["id", "color"], ["id"], True, True, queries.check_condition("color = 'blue'"))
    statements["key_bounds"] = queries.key_bounds(DB, "dbo", "customers", "id")
    statements["lock_table"] = queries.lock_table(DB, "dbo", "customers")
    statements["read_signals"] = queries.read_signals(DB, "dbo.debezium_signal")
    return statements


# sqlglot's T-SQL grammar knows SET TRANSACTION ISOLATION LEVEL with READ COMMITTED, REPEATABLE READ and
# SERIALIZABLE only; READ UNCOMMITTED and SNAPSHOT are valid T-SQL it rejects, checked against the grammar here.
_ISOLATION = re.compile(r"SET TRANSACTION ISOLATION LEVEL (READ UNCOMMITTED|READ COMMITTED|REPEATABLE READ|"
                        r"SNAPSHOT|SERIALIZABLE)")


@pytest.mark.parametrize(("name", "sql"), sorted(rendered().items()))
def test_statement_parses_as_tsql(name: str, sql: str) -> None:
    if name.startswith("SET_ISOLATION") and sql.endswith(("READ UNCOMMITTED", "SNAPSHOT")):
        assert _ISOLATION.fullmatch(sql)
        with pytest.raises(sqlglot.errors.ParseError, match="ISOLATION"):
            sqlglot.parse_one(sql, read="tsql")  # fails loudly once sqlglot learns them: then drop this branch
        return
    parsed = sqlglot.parse_one(sql, read="tsql")
    assert not isinstance(parsed, exp.Command), f"{name} was not understood as a statement: {sql}"
    constants = ("N'all update old'", "'ProductVersion'", "N'SQL Server Agent (%'")
    unquoted = sql
    for constant in constants:
        unquoted = unquoted.replace(constant, "")
    assert "additional-condition" in name or "'" not in unquoted, f"{name} must bind values, not inline them"


def test_identifiers_are_quoted_and_escaped() -> None:
    sql = queries.changes_query(DB, "dbo_customers", ["we]ird"])
    assert "[we]]ird]" in sql and "[test]]DB]" in sql
    assert queries.quote_name("a]b") == "[a]]b]"


def test_additional_condition_must_be_one_expression() -> None:
    assert queries.check_condition("color = 'blue' AND size > 3") == "color = 'blue' AND size > 3"
    for bad in ("1=1; DROP TABLE dbo.customers", "1=1 -- rest", "color = 'blue' /* x */", "(SELECT"):
        with pytest.raises(ValueError):
            queries.check_condition(bad)
