"""What a signal may ask for, checked before it reaches a query or a regular expression engine: reproductions from a
security review, each refused with a reason, and what Debezium's documented filters need, still accepted."""

from __future__ import annotations

import time

import pytest

from cdckit.dialect.incremental import Progress
from cdckit.dialect.signals import Signal, check_columns, check_condition, check_patterns, condition_columns, matches


@pytest.mark.parametrize(("condition", "dialect", "reason"), [
    # a secret of a table the connector does not capture
    ("id = CAST((SELECT apikey FROM app.secrets_not_captured LIMIT 1) AS int)", "postgres", "function CAST"),
    ("id IN (SELECT id FROM app.other)", "postgres", "IN takes a list of literals only"),
    ("EXISTS (SELECT 1 FROM app.other)", "postgres", "uses"),
    # functions in the snapshot's transaction: replication slots moved or dropped
    ("pg_replication_slot_advance('cdckit', pg_current_wal_lsn()) IS NOT NULL", "postgres",
     "function PG_REPLICATION_SLOT_ADVANCE"),
    ("pg_drop_replication_slot('theirs') IS NULL", "postgres", "function PG_DROP_REPLICATION_SLOT"),
    ("pg_sleep(3600) IS NULL", "postgres", "function"),
    # T-SQL's reach into other servers and files
    ("EXISTS (SELECT * FROM OPENQUERY(linked, 'SELECT 1'))", "tsql", "uses"),
    ("id IN (SELECT a FROM OPENROWSET(BULK 'c:/x', SINGLE_CLOB) AS f)", "tsql", "not a boolean expression of tsql"),
    # other tables, statements, comments
    ("secrets.apikey = 'x'", "postgres", "without a table or schema"),
    ("id = 1; DROP TABLE public.items", "postgres", "single boolean expression"),
    ("id = 1 UNION SELECT 1", "postgres", "single boolean expression"),
    ("id = 1 -- and the rest", "postgres", "comment"),
    ("color = 'blue' /* x */", "tsql", "comment"),
    ("'a' || note = 'ab'", "postgres", "DPipe"),
    ("qty", "postgres", "not a condition"),
    ("(SELECT", "postgres", "not a boolean expression"),
])
def test_a_filter_that_reaches_beyond_its_table_is_refused(condition: str, dialect: str, reason: str) -> None:
    with pytest.raises(ValueError, match="additional-condition") as refused:
        check_condition(condition, dialect)
    assert reason in str(refused.value)


@pytest.mark.parametrize(("condition", "dialect", "written"), [
    # Debezium's documented examples, and the operators the filter may use
    ("color='blue'", "postgres", "color = 'blue'"),
    ("color='blue' AND brand='MyBrand'", "tsql", "color = 'blue' AND brand = 'MyBrand'"),
    ("qty BETWEEN 1 AND 5 OR name LIKE 'a%' OR note IS NULL", "postgres",
     "qty BETWEEN 1 AND 5 OR name LIKE 'a%' OR note IS NULL"),
    ("NOT (id IN (1, 2, -3)) AND \"Mixed\" <> 2.5", "postgres", "NOT (id IN (1, 2, -3)) AND \"Mixed\" <> 2.5"),
    ("created >= '2024-01-01' AND flag = TRUE", "tsql", "created >= '2024-01-01' AND flag = 1"),
])
def test_the_filters_debezium_documents_are_accepted_and_written_out_again(condition: str, dialect: str,
                                                                            written: str) -> None:
    assert check_condition(condition, dialect) == written


def test_a_filter_on_a_column_the_connector_hides_is_refused() -> None:
    # column.exclude.list left `salary` out of the emitted columns: a filter must not reveal it row by row
    with pytest.raises(ValueError, match="names salary, which the connector does not capture"):
        check_columns("salary > 100000", "postgres", ["id", "name"])
    check_columns("name = 'x'", "postgres", ["id", "name"])
    # PostgreSQL folds unquoted names; SQL Server compares without case
    assert condition_columns('Name = \'x\' AND "Mixed" = 1', "postgres") == {"name", "Mixed"}
    check_columns("NAME = 'x'", "tsql", ["Id", "name"])


@pytest.mark.timeout(20)
def test_a_backtracking_pattern_is_answered_in_linear_time() -> None:
    # (.?){60}Z takes hours in a backtracking engine on a 60-character name; RE2 answers at once
    started = time.monotonic()
    assert not matches(("(.?){60}Z",), "public." + "a" * 60)
    assert not matches(("(a|aa)*b",), "a" * 5000)
    assert time.monotonic() - started < 5
    assert matches(("public\\.ITE.*",), "public.items")  # anchored, any case, as before


def test_a_pattern_re2_cannot_read_or_too_long_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match="no backreferences or lookaround"):
        check_patterns(("(a)\\1",))
    with pytest.raises(ValueError, match="at most 1000"):
        check_patterns(("a" * 1001,))
    # the signal is dropped, whatever else it asks
    signal = Signal("s1", "execute-snapshot", {"data-collections": ["public.items", "(?=x)items"]})
    assert Progress().after([signal], [("public", "items")]) == Progress()


def test_a_signal_with_a_hostile_filter_requests_nothing() -> None:
    signal = Signal("s2", "execute-snapshot", {
        "data-collections": ["public.items"],
        "additional-conditions": [{"data-collection": "public.items",
                                   "filter": "id = CAST((SELECT apikey FROM app.s LIMIT 1) AS int)"}]})
    assert not Progress().after([signal], [("public", "items")]).active
    fine = Signal("s3", "execute-snapshot", {
        "data-collections": ["public.items"],
        "additional-conditions": [{"data-collection": "public.items", "filter": "qty < 50 -- "[:-4]}]})
    progress = Progress().after([fine], [("public", "items")])
    assert progress.pending[0].condition == "qty < 50"
