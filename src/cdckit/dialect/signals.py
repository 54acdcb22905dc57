"""Debezium signals as both dialects read them from their signalling table (``signal.data.collection``).

A signal is a row ``(id, type, data)`` inserted into that table; ``data`` is a JSON object. What each dialect does
with ``execute-snapshot``, ``stop-snapshot``, ``pause-snapshot`` and ``resume-snapshot`` is in its own module.

Whoever may insert into the signalling table steers what the connector reads, so a signal reaches no further than
the tables the connector captures (README, "Who may write the signal table"):

- ``data-collections`` are matched with RE2 (``google-re2``), whose time is linear in the name's length: a pattern
  cannot stall the driver, as a backtracking engine's ``(.?){60}Z`` does. RE2 has no backreferences or lookaround;
  a pattern that uses them is refused.
- an ``additional-condition`` is parsed (sqlglot) and may use only the table's own captured columns, literals,
  comparisons, ``AND``/``OR``/``NOT``, ``IN`` lists, ``BETWEEN``, ``LIKE`` and ``IS NULL``: no function, no
  subquery, no other table. The chunk queries take the condition as cdckit writes it out again from the parse,
  never the signal's text.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("cdckit.signals")


@dataclass(frozen=True)
class Signal:
    id: str
    type: str
    data: dict[str, Any]

    def data_collections(self) -> tuple[str, ...]:
        """The ``data-collections`` the signal names (regular expressions over fully qualified names)."""
        value = self.data.get("data-collections") or ()
        if isinstance(value, str):
            value = (value,)
        return tuple(str(c) for c in value)

    def conditions(self) -> dict[str, str] | str | None:
        """The filter the signal adds to its snapshot's reads: Debezium 2's ``additional-conditions`` (a filter per
        data collection, as ``{data-collection: filter}``) or Debezium 1's ``additional-condition`` (one filter for
        every collection), or None."""
        many = self.data.get("additional-conditions")
        if isinstance(many, list):
            return {str(item.get("data-collection", "")): str(item.get("filter", ""))
                    for item in many if isinstance(item, Mapping) and item.get("filter")}
        one = self.data.get("additional-condition")
        return str(one) if one else None


def parse_signal(row: Mapping[str, object]) -> Signal | None:
    """A signal from its table's row, or None (logged) when its ``data`` is not a JSON object."""
    signal_id, kind, data = str(row.get("id") or ""), str(row.get("type") or ""), row.get("data")
    try:
        document = json.loads(str(data)) if data else {}
    except json.JSONDecodeError:
        log.error("signal %s has data that is not JSON; ignored: %r", signal_id, data)
        return None
    if not isinstance(document, dict):
        log.error("signal %s data must be a JSON object; ignored", signal_id)
        return None
    return Signal(signal_id, kind, document)


MAX_PATTERN_LENGTH = 1000  # characters of one data-collections pattern
_RE2_MEMORY = 8 << 20  # bytes RE2 may use for one compiled pattern


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    import re2

    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"a data-collections pattern is {len(pattern)} characters long; at most "
                         f"{MAX_PATTERN_LENGTH} are read")
    options = re2.Options()
    options.case_sensitive = False
    options.max_mem = _RE2_MEMORY
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        raise ValueError(f"data-collections pattern {_shown(pattern)} is not a regular expression cdckit reads "
                         f"({reason}; RE2 syntax: no backreferences or lookaround)") from None


def check_patterns(patterns: tuple[str, ...]) -> None:
    """Refuse (``ValueError``) a ``data-collections`` pattern that is too long or not RE2 syntax."""
    for pattern in patterns:
        _compiled(pattern)


def matches(patterns: tuple[str, ...], qualified_name: str) -> bool:
    """Whether a fully qualified name matches one of a signal's ``data-collections`` (anchored, any case; RE2, in
    time linear in the name). A pattern ``check_patterns`` refuses matches nothing."""
    for pattern in patterns:
        try:
            if _compiled(pattern).fullmatch(qualified_name) is not None:
                return True
        except ValueError:
            continue
    return False


def _shown(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# What a filter may be made of (sqlglot's expression types): the table's columns, literals, and these operators
_ALLOWED = ("And", "Or", "Not", "Paren", "EQ", "NEQ", "GT", "GTE", "LT", "LTE", "In", "Between", "Like", "ILike",
            "Is", "Null", "Boolean", "Literal", "Neg", "Column", "Identifier")
_ALLOWED_TEXT = ("the table's own columns, literals, comparisons, AND, OR, NOT, IN lists, BETWEEN, LIKE and "
                 "IS NULL")


def _where(condition: str, dialect: str) -> Any:
    """The condition's parse: one boolean expression, made only of what ``_ALLOWED`` names (``ValueError``)."""
    import sqlglot
    from sqlglot import exp

    shown = _shown(condition)
    try:
        statements = sqlglot.parse(f"SELECT 1 WHERE {condition}", read=dialect)
    except sqlglot.errors.SqlglotError:
        raise ValueError(f"additional-condition {shown} is not a boolean expression of {dialect}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Select) or statements[0].args.get("where") is None:
        raise ValueError(f"additional-condition {shown} must be a single boolean expression")
    select = statements[0]
    if any(node.comments for node in select.walk()):
        raise ValueError(f"additional-condition {shown} holds a comment; give the condition alone")
    if set(select.args) - {"expressions", "where"} and any(
            value for key, value in select.args.items() if key not in ("expressions", "where")):
        raise ValueError(f"additional-condition {shown} must be a single boolean expression")
    where = select.args["where"].this
    for node in where.walk():
        kind = type(node).__name__
        if kind not in _ALLOWED:
            what = "a subquery" if isinstance(node, exp.Subquery | exp.Select) else (
                f"the function {node.sql(dialect=dialect)[:60]}" if isinstance(node, exp.Func) else
                f"{kind} ({node.sql(dialect=dialect)[:60]})")
            raise ValueError(f"additional-condition {shown} uses {what}; a filter may use only {_ALLOWED_TEXT}")
        if isinstance(node, exp.Column) and (node.table or node.args.get("db") or node.args.get("catalog")
                                             or not isinstance(node.this, exp.Identifier)):
            raise ValueError(f"additional-condition {shown} names {node.sql(dialect=dialect)[:60]}; name the "
                             f"table's own columns alone, without a table or schema")
        if isinstance(node, exp.In) and (node.args.get("query") or node.args.get("unnest") or node.args.get("field")
                                         or not all(isinstance(e, exp.Literal | exp.Null | exp.Boolean | exp.Neg)
                                                    for e in node.expressions)):
            raise ValueError(f"additional-condition {shown}: IN takes a list of literals only")
    if isinstance(where, exp.Column | exp.Literal | exp.Null | exp.Identifier):
        raise ValueError(f"additional-condition {shown} is not a condition (a comparison, IN, BETWEEN, LIKE or "
                         f"IS NULL)")
    return where


def check_condition(condition: str, dialect: str) -> str:
    """An ``additional-condition`` as cdckit puts it in its chunk queries: parsed as one boolean expression of
    ``dialect`` (sqlglot's name: ``tsql``, ``postgres``), made only of the table's columns, literals, comparisons,
    ``AND``/``OR``/``NOT``, ``IN`` lists, ``BETWEEN``, ``LIKE`` and ``IS NULL``, and written out again from the
    parse. Anything else is refused with ``ValueError``."""
    return str(_where(condition, dialect).sql(dialect=dialect, comments=False))


def condition_columns(condition: str, dialect: str) -> set[str]:
    """The columns a checked condition names, as the database resolves them: PostgreSQL folds unquoted names to
    lower case; SQL Server compares names without case (its default collation), so both sides are folded there."""
    from sqlglot import exp

    names = set()
    for column in _where(condition, dialect).find_all(exp.Column):
        identifier = column.this
        name = str(identifier.this)
        if dialect == "tsql":
            name = name.casefold()
        elif not identifier.quoted:
            name = name.lower()
        names.add(name)
    return names


def check_columns(condition: str, dialect: str, columns: Iterable[str]) -> None:
    """Refuse (``ValueError``) a condition that names a column the table does not capture (``column.exclude.list``
    leaves some out): a filter must not reveal what the connector hides."""
    known = {c.casefold() for c in columns} if dialect == "tsql" else set(columns)
    unknown = sorted(condition_columns(condition, dialect) - known)
    if unknown:
        raise ValueError(f"additional-condition {_shown(condition)} names {', '.join(unknown)}, which the "
                         f"connector does not capture from the table; a filter may use only the captured columns")
