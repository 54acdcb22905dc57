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
                                                             True, True, key_types=["int"])
    key, types = ["order id", "line]no", "guid"], ["int", "smallint", "uniqueidentifier"]
    statements["select_rows(composite key)"] = queries.select_rows(DB, "dbo", "lines", ["qty"], key, True, True,
                                                                   key_types=types)
    statements["key_boundaries"] = queries.key_boundaries(DB, "dbo", "lines", key)
    statements["last_key"] = queries.last_key(DB, "dbo", "lines", key)
    statements["next_boundary"] = queries.next_boundary(DB, "dbo", "lines", key, types, True)
    statements["next_boundary(first)"] = queries.next_boundary(DB, "dbo", "lines", key, types, False)
    statements["keys_within"] = queries.keys_within(DB, "dbo", "lines", key, types, 3, True, True)
    statements["row_count"] = queries.row_count(DB, "dbo", "lines")
    statements["select_rows(unbounded)"] = queries.select_rows(DB, "dbo", "customers", ["id"], ["id"], False, False)
    statements["select_rows(additional-condition)"] = queries.select_rows(
        DB, "dbo", "customers", ["id", "color"], ["id"], True, True, queries.check_condition("color = 'blue'"),
        key_types=["int"])
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


def test_a_keyset_is_the_row_comparison_in_and_or_form_with_every_value_cast_to_its_column_type() -> None:
    """(a, b) > (?, ?) and (a, b) <= (?, ?), as Debezium's AbstractChunkQueryBuilder writes them, with a leading range
    on the first column the server can seek on."""
    assert queries.keyset(["a"], ["int"], ">") == "[a] > CAST(? AS int)"
    assert queries.keyset(["a", "b"], ["int", "nvarchar(20)"], ">") == (
        "([a] >= CAST(? AS int) AND ([a] > CAST(? AS int) OR ([a] = CAST(? AS int) AND "
        "[b] > CAST(? AS nvarchar(20)))))")
    assert queries.keyset(["a", "b"], ["date", "uniqueidentifier"], "<=", "[v].") == (
        "([v].[a] <= CAST(? AS date) AND ([v].[a] < CAST(? AS date) OR ([v].[a] = CAST(? AS date) AND "
        "[v].[b] <= CAST(? AS uniqueidentifier))))")
    assert queries.keyset_parameters([1, "x"]) == [1, 1, 1, "x"]
    assert queries.keyset_parameters([1, 2, 3]) == [1, 1, 1, 2, 1, 2, 3]
    with pytest.raises(ValueError, match="needs as many types"):
        queries.keyset(["a", "b"], ["int"], ">")


@pytest.mark.parametrize(("declared", "cast"), [
    (("nvarchar", 100, 0, 0), "nvarchar(50)"), (("varchar", 30, 0, 0), "varchar(30)"),
    (("nchar", 20, 0, 0), "nchar(10)"), (("decimal", 9, 18, 2), "decimal(18, 2)"),
    (("datetime2", 8, 27, 7), "datetime2(7)"), (("time", 5, 16, 3), "time(3)"), (("binary", 16, 0, 0), "binary(16)"),
    (("timestamp", 8, 0, 0), "binary(8)"), (("sysname", 256, 0, 0), "nvarchar(128)"),
    (("uniqueidentifier", 16, 0, 0), "uniqueidentifier"), (("datetime", 8, 23, 3), "datetime"),
    (("real", 4, 24, 0), "real"),
])
def test_type_declarations_for_the_keysets_casts(declared: tuple[str, int, int, int], cast: str) -> None:
    assert queries.type_declaration(*declared) == cast
