"""A signal's ``additional-condition`` evaluated over a table's rows, as SQL Server evaluates the expressions cdckit
lets through (``cdckit.dialect.signals.check_condition``): columns, literals, comparisons, AND/OR/NOT, IN lists,
BETWEEN, LIKE and IS NULL, in three-valued logic.

Documented rules followed (Transact-SQL reference):
- comparison with NULL is UNKNOWN; AND/OR/NOT follow the three-valued truth tables ("NULL and UNKNOWN");
- a literal compared with a column is converted to the column's type, by data type precedence, and a conversion
  that fails is error 245 ("Conversion failed when converting the varchar value ... to data type int");
- LIKE: ``%`` any string, ``_`` one character, ``[...]`` a set; under the default collation (case-insensitive)
  letters match either case; trailing blanks of the value are significant for LIKE, not for ``=``.
- an unknown column is error 207, raised when the statement is compiled, even if no row is read.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from sqlglot import exp

from . import _sqlite as store
from ._errors import UnmodelledStatementError, invalid_column
from ._types import STRING_TYPES, ModelColumn, coerce, compare_key


def parse(condition: str, info: store.TableInfo) -> exp.Expression:
    """The condition's tree, its columns resolved against the table (error 207 for one it lacks)."""
    tree: exp.Expression = sqlglot.parse_one(f"SELECT 1 WHERE {condition}", read="tsql").args["where"].this
    for column in tree.find_all(exp.Column):
        if info.column(column.name) is None:
            raise invalid_column(column.name)
    return tree


def holds(tree: exp.Expression, info: store.TableInfo, row: dict[str, Any]) -> bool:
    """Whether a row satisfies the condition (UNKNOWN does not)."""
    return _truth(tree, info, row) is True


def _truth(node: exp.Expression, info: store.TableInfo, row: dict[str, Any]) -> bool | None:
    if isinstance(node, exp.Paren):
        return _truth(node.this, info, row)
    if isinstance(node, exp.And | exp.Or):
        left, right = _truth(node.left, info, row), _truth(node.right, info, row)
        if isinstance(node, exp.And):
            return False if False in (left, right) else (None if None in (left, right) else True)
        return True if True in (left, right) else (None if None in (left, right) else False)
    if isinstance(node, exp.Not):
        inner = _truth(node.this, info, row)
        return None if inner is None else not inner
    if isinstance(node, exp.Is):
        return _value(node.this, info, row)[0] is None
    if isinstance(node, exp.In):
        found = [_compare(node.this, "=", item, info, row) for item in node.expressions]
        return True if True in found else (None if None in found else False)
    if isinstance(node, exp.Between):
        low = _compare(node.this, ">=", node.args["low"], info, row)
        high = _compare(node.this, "<=", node.args["high"], info, row)
        return False if False in (low, high) else (None if None in (low, high) else True)
    if isinstance(node, exp.Like):
        value, _ = _value(node.this, info, row)
        pattern, _ = _value(node.expression, info, row)
        if value is None or pattern is None:
            return None
        return _like(str(pattern)).fullmatch(str(value)) is not None
    operators = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
    for kind, operator in operators.items():
        if isinstance(node, kind):
            return _compare(node.left, operator, node.right, info, row)
    raise UnmodelledStatementError("HY000", f"the SQL Server model does not evaluate {node.sql('tsql')} in a "
                                   f"condition")


def _value(node: exp.Expression, info: store.TableInfo, row: dict[str, Any]) -> tuple[Any, ModelColumn | None]:
    """A value and, for a column, the column (whose type a literal compared with it is converted to)."""
    if isinstance(node, exp.Column):
        column = info.column(node.name)
        assert column is not None
        return row[column.name], column
    if isinstance(node, exp.Null):
        return None, None
    if isinstance(node, exp.Boolean):
        return int(node.this), None
    if isinstance(node, exp.Neg):
        value, column = _value(node.this, info, row)
        return (None if value is None else -value), column
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this, None
        text = node.this
        return (int(text) if re.fullmatch(r"\d+", text) else float(text)), None
    raise UnmodelledStatementError("HY000", f"the SQL Server model does not evaluate {node.sql('tsql')} as a value")


def _compare(left: exp.Expression, operator: str, right: exp.Expression, info: store.TableInfo,
             row: dict[str, Any]) -> bool | None:
    a, a_column = _value(left, info, row)
    b, b_column = _value(right, info, row)
    # a literal takes the type of the column it is compared with (the column's type has the higher precedence
    # for the types these filters meet: numbers, dates and strings)
    if a_column is not None and b_column is None:
        b = _converted(a_column, b)
    elif b_column is not None and a_column is None:
        a = _converted(b_column, a)
    if a is None or b is None:
        return None
    a, b = compare_key(a), compare_key(b)
    return bool({"=": a == b, "<>": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[operator])


def _converted(column: ModelColumn, value: Any) -> Any:
    if value is None or column.type_name in STRING_TYPES:
        return value
    return coerce(column, value)


def _like(pattern: str) -> re.Pattern[str]:
    parts, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        elif char == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1:end]
            parts.append("[" + ("^" + re.escape(body[1:]) if body.startswith("^") else re.escape(body)) + "]")
            i = end
        else:
            parts.append(re.escape(char))
        i += 1
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)
