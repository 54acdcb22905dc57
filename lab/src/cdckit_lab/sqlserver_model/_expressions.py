"""T-SQL scalar expressions evaluated by the model: the values of ``SET``, ``INSERT ... VALUES``, ``UPDATE ... SET``,
``DEFAULT`` constraints and computed columns, and the truth of ``WHERE`` and ``IF`` conditions.

Documented rules followed (Transact-SQL reference):
- NULL: an operator or function given NULL returns NULL (``+``, ``CONCAT`` excepted: it treats NULL as ''), and a
  comparison with NULL is UNKNOWN; AND/OR/NOT follow the three-valued truth tables ("NULL and UNKNOWN");
- ``+`` concatenates when both sides are strings; a string meeting a number is converted to the number's type, as
  the number has the higher data type precedence ("Data type precedence"); ``/`` of two integers truncates;
- ``ISNULL``/``COALESCE``, ``CASE``, ``CAST``/``CONVERT`` (the value converted as the column type would store it, with
  the model's conversion errors), ``LEN`` (trailing blanks not counted), ``DATALENGTH`` (bytes; two per character of
  an n-type string), ``LEFT``, ``RIGHT``, ``SUBSTRING``, ``REPLACE``, ``REPLICATE`` (cut at 8000 bytes unless of a max
  type), ``UPPER``, ``LOWER``, ``LTRIM``, ``RTRIM``, ``TRIM``, ``CONCAT``, ``ABS``, ``DATEADD``, ``GETDATE()``,
  ``SYSDATETIME()``, ``NEWID()``;
- string comparison follows the default collation as the rest of the model approximates it (case-insensitive,
  trailing blanks ignored); LIKE as ``_conditions`` evaluates it.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp

from ._conditions import _like
from ._errors import DataError, invalid_column, server_error
from ._types import ModelColumn, coerce, compare_key, normalise_column


class UnsupportedConstruct(Exception):
    """A construct the model does not evaluate; its text names it."""


@dataclass
class Scope:
    """What names resolve to: a row's columns, variables (``@name``, case-insensitive), scalar functions
    (``schema.name`` folded, for user-defined functions) and catalog functions the caller provides (``DB_ID``...)."""

    row: Mapping[str, Any] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    functions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    rows: Callable[[exp.Select, Scope], list[dict[str, Any]]] | None = None  # a subquery's rows (catalog views)
    now: Callable[[], dt.datetime] = dt.datetime.now
    types: Mapping[str, str] = field(default_factory=dict)  # column or "@variable" (folded) -> sys.types name

    def column(self, name: str) -> Any:
        folded = name.casefold()
        for key, value in self.row.items():
            if key.casefold() == folded:
                return value
        raise invalid_column(name)


_STATIC_METHOD = re.compile(r"\b(geography|geometry|hierarchyid)\s*::\s*(\w+)\s*\(", re.IGNORECASE)


def _static_methods(text: str) -> str:
    """``geography::Point(...)`` as a call sqlglot reads (``geography__Point(...)``)."""
    return _STATIC_METHOD.sub(lambda m: f"{m[1]}__{m[2]}(", text)


def parse_statement(text: str) -> exp.Expression:
    """One DML statement, its static type methods (``geography::Point``) readable."""
    return sqlglot.parse_one(_static_methods(text), read="tsql")


def parse_expression(text: str) -> exp.Expression:
    """One scalar expression or condition in T-SQL."""
    select = sqlglot.parse_one(f"SELECT {_static_methods(text)}", read="tsql")
    expressions = select.expressions
    if len(expressions) != 1:
        raise UnsupportedConstruct(f"expression {text!r}")
    node: exp.Expression = expressions[0]
    return node.this if isinstance(node, exp.Alias) else node


def parse_condition(text: str) -> exp.Expression:
    where = sqlglot.parse_one(f"SELECT 1 WHERE {_static_methods(text)}", read="tsql").args["where"]
    node: exp.Expression = where.this
    return node


def column_of_type(data_type: exp.DataType | str, *, cast: bool = True) -> ModelColumn:
    """The ModelColumn a T-SQL type describes: a CAST/CONVERT target, or declared text (``nvarchar(23)``,
    ``[decimal](8, 2)``, ``varchar(max)``; ``cast`` False: a missing length is 1, as in a declaration)."""
    text = data_type.sql("tsql") if isinstance(data_type, exp.DataType) else data_type
    match = re.fullmatch(r"\s*\[?([\w ]+?)\]?\s*(?:\(([^)]*)\))?\s*", text)
    if match is None:
        raise UnsupportedConstruct(f"type {text}")
    name = match.group(1).lower()
    arguments = [a.strip() for a in match.group(2).split(",")] if match.group(2) else []
    return column_for({"integer": "int"}.get(name, name), arguments, cast=cast)


def column_for(type_name: str, arguments: list[str], *, cast: bool = False, name: str = "") -> ModelColumn:
    """The ModelColumn of a type name and its arguments (``"nvarchar", ["60"]``); ``cast``: as CAST/CONVERT reads
    a missing length (30 characters), else as a column declaration does (1)."""
    type_name = {"double": "float", "character varying": "varchar", "rowversion": "timestamp"}.get(
        type_name, type_name)
    length, precision, scale = -1, 0, 0
    if type_name in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        if arguments and arguments[0].lower() != "max":
            length = int(arguments[0]) * (2 if type_name in ("nchar", "nvarchar") else 1)
        elif not arguments:
            length = (30 if cast and type_name in ("varchar", "nvarchar", "varbinary") else 1) * (
                2 if type_name in ("nchar", "nvarchar") else 1)
    elif type_name in ("decimal", "numeric") and arguments:
        precision, scale = int(arguments[0]), int(arguments[1]) if len(arguments) > 1 else 0
    elif type_name in ("datetime2", "time", "datetimeoffset") and arguments:
        scale = int(arguments[0])
        precision = {"time": 8, "datetime2": 19, "datetimeoffset": 26}[type_name] + (scale + 1 if scale else 0)
    elif type_name == "float" and arguments:
        precision = int(arguments[0])
    try:
        return normalise_column(ModelColumn(name, type_name, length, precision, scale))
    except NotImplementedError as error:
        raise UnsupportedConstruct(f"type {type_name} (the model does not know it yet)") from error


def _to_number(value: Any, other: Any) -> Any:
    """A string meeting a number in arithmetic: converted to the number's type (error 245 if it is not one)."""
    if not isinstance(value, str):
        return value
    try:
        if isinstance(other, bool | int):
            return int(value.strip())
        if isinstance(other, float):
            return float(value)
        return Decimal(value.strip())
    except (ValueError, ArithmeticError) as error:
        raise server_error(DataError, "22018", 245, f"Conversion failed when converting the varchar value "
                           f"'{value}' to data type int.") from error


def _arith(node: exp.Expression, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if isinstance(node, exp.Add) and isinstance(a, str) and isinstance(b, str):
        return a + b
    if isinstance(node, exp.Add) and isinstance(a, bytes) and isinstance(b, bytes):
        return a + b
    if isinstance(node, exp.Add) and isinstance(a, dt.datetime) and isinstance(b, int | float | Decimal):
        return a + dt.timedelta(days=float(b))
    a, b = _to_number(a, b), _to_number(b, a)
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
    elif isinstance(a, Decimal) or isinstance(b, Decimal):
        a, b = Decimal(a), Decimal(b)
    if isinstance(node, exp.Add):
        return a + b
    if isinstance(node, exp.Sub):
        return a - b
    if isinstance(node, exp.Mul):
        return a * b
    if b == 0:
        raise server_error(DataError, "22012", 8134, "Divide by zero error encountered.")
    if isinstance(node, exp.Mod):
        return a - b * int(a / b)
    if isinstance(a, int) and isinstance(b, int):
        return int(a / b)  # integer division truncates towards zero
    return a / b


_COMPARISONS: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.EQ: lambda a, b: a == b, exp.NEQ: lambda a, b: a != b, exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b, exp.LT: lambda a, b: a < b, exp.LTE: lambda a, b: a <= b,
}


def _comparable(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, str) and not isinstance(b, str):
        a = _converted_like(b, a)
    elif isinstance(b, str) and not isinstance(a, str):
        b = _converted_like(a, b)
    return compare_key(a), compare_key(b)


def _converted_like(model: Any, text: str) -> Any:
    """A string compared with a non-string: converted to that value's type (data type precedence)."""
    if isinstance(model, bool | int | float | Decimal):
        return _to_number(text, model)
    if isinstance(model, dt.datetime):
        return coerce(ModelColumn("", "datetime2", 8, 27, 7), text)
    if isinstance(model, dt.date):
        return coerce(ModelColumn("", "date", 3, 10, 0), text)
    return text


def truth(node: exp.Expression, scope: Scope) -> bool | None:
    """A condition in three-valued logic: True, False or None (UNKNOWN)."""
    if isinstance(node, exp.Paren):
        return truth(node.this, scope)
    if isinstance(node, exp.And):
        left = truth(node.left, scope)
        if left is False:
            return False
        right = truth(node.right, scope)
        return False if right is False else (None if None in (left, right) else True)
    if isinstance(node, exp.Or):
        left = truth(node.left, scope)
        if left is True:
            return True
        right = truth(node.right, scope)
        return True if right is True else (None if None in (left, right) else False)
    if isinstance(node, exp.Not):
        inner = truth(node.this, scope)
        return None if inner is None else not inner
    if isinstance(node, exp.Is):
        return value(node.this, scope) is None
    if isinstance(node, exp.Exists):
        if scope.rows is None:
            raise UnsupportedConstruct(f"EXISTS here: {node.sql('tsql')}")
        return bool(scope.rows(node.this, scope))
    if isinstance(node, exp.In):
        if node.args.get("query"):
            raise UnsupportedConstruct(f"IN (subquery): {node.sql('tsql')}")
        left = value(node.this, scope)
        found = [_compare(exp.EQ, left, value(item, scope)) for item in node.expressions]
        return True if True in found else (None if None in found else False)
    if isinstance(node, exp.Between):
        subject = value(node.this, scope)
        low = _compare(exp.GTE, subject, value(node.args["low"], scope))
        high = _compare(exp.LTE, subject, value(node.args["high"], scope))
        return False if False in (low, high) else (None if None in (low, high) else True)
    if isinstance(node, exp.Like):
        subject, pattern = value(node.this, scope), value(node.expression, scope)
        if subject is None or pattern is None:
            return None
        return _like(str(pattern)).fullmatch(str(subject)) is not None
    if type(node) in _COMPARISONS and isinstance(node, exp.Binary):
        return _compare(type(node), value(node.left, scope), value(node.right, scope))
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    raise UnsupportedConstruct(f"condition {node.sql('tsql')}")


def _compare(kind: type[exp.Expression], a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    a, b = _comparable(a, b)
    return bool(_COMPARISONS[kind](a, b))


def _literal(node: exp.Literal) -> Any:
    if node.is_string:
        return node.this
    text = node.this
    if any(c in text for c in "eE"):
        return float(text)
    return Decimal(text) if "." in text else int(text)


def _text(value: Any) -> str:
    """A value converted to a character string, as CONVERT(nvarchar, ...) writes it (style 121 for dates)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="milliseconds")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)


def convert(value: Any, target: ModelColumn) -> Any:
    """CAST/CONVERT: NULL stays NULL; to a string type, the text of the value; else the model's conversion."""
    if value is None:
        return None
    if target.type_name in ("char", "varchar", "nchar", "nvarchar", "text", "ntext", "sysname", "xml"):
        text = _text(value)
        limit = target.max_length // 2 if target.type_name in ("nchar", "nvarchar") else target.max_length
        if target.max_length != -1 and len(text) > limit:
            if isinstance(value, int | Decimal | float):
                raise server_error(DataError, "22003", 8115, f"Arithmetic overflow error converting expression "
                                   f"to data type {target.type_name}.")
            text = text[:limit]  # CAST to a shorter string truncates silently
        return coerce(target, text)
    if target.type_name in ("binary", "varbinary", "image") and isinstance(value, str):
        value = value.encode("latin-1", errors="replace")
    return coerce(target, value)


def value(node: exp.Expression, scope: Scope) -> Any:
    """The value of a scalar expression (None for NULL)."""
    if isinstance(node, exp.Paren):
        return value(node.this, scope)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        return _literal(node)
    if isinstance(node, exp.National):
        return str(node.this)
    if isinstance(node, exp.HexString):
        return bytes.fromhex(str(node.this))
    if isinstance(node, exp.Boolean):
        return int(bool(node.this))
    if isinstance(node, exp.Column):
        return scope.column(node.name)  # one table in scope: a qualifier (alias.column) names it
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and scope.rows is not None:
        return _scalar_subquery(node.this, scope)
    if isinstance(node, exp.Parameter):
        name = node.name.casefold()
        if name not in scope.variables:
            raise server_error(DataError, "42000", 137, f'Must declare the scalar variable "@{node.name}".')
        return scope.variables[name]
    if isinstance(node, exp.Neg):
        inner = value(node.this, scope)
        return None if inner is None else -_to_number(inner, 0)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
        return _arith(node, value(node.left, scope), value(node.right, scope))
    if isinstance(node, exp.DPipe):
        return _arith(exp.Add(), value(node.left, scope), value(node.right, scope))
    if isinstance(node, exp.Coalesce):
        for item in (node.this, *node.expressions):
            found = value(item, scope)
            if found is not None:
                return found
        return None
    if isinstance(node, exp.Case):
        subject = value(node.this, scope) if node.this is not None else None
        for branch in node.args.get("ifs") or ():
            if node.this is not None:
                hit = _compare(exp.EQ, subject, value(branch.this, scope)) is True
            else:
                hit = truth(branch.this, scope) is True
            if hit:
                return value(branch.args["true"], scope)
        default = node.args.get("default")
        return None if default is None else value(default, scope)
    if isinstance(node, exp.Cast | exp.TryCast):
        return convert(value(node.this, scope), column_of_type(node.to))
    if isinstance(node, exp.Convert):
        target, found = column_of_type(node.this), value(node.expression, scope)
        style = node.args.get("style")
        if isinstance(found, bytes) and style is not None and target.type_name in ("char", "varchar", "nchar",
                                                                                  "nvarchar"):
            # binary to text: style 1 is 0x and hexadecimal digits, style 2 the digits alone
            found = ("0x" if int(value(style, scope)) == 1 else "") + found.hex().upper()
        return convert(found, target)
    if isinstance(node, exp.Predicate | exp.Connector | exp.Not):
        result = truth(node, scope)
        return None if result is None else int(result)
    return _function(node, scope)


def _scalar_subquery(select: exp.Select, scope: Scope) -> Any:
    """``(SELECT COUNT(*) FROM view WHERE ...)`` or ``(SELECT column FROM view WHERE ...)`` (its first row)."""
    assert scope.rows is not None
    found = scope.rows(select, scope)
    if len(select.expressions) != 1:
        raise UnsupportedConstruct(f"subquery {select.sql('tsql')}")
    item = select.expressions[0]
    if isinstance(item, exp.Count) and isinstance(item.this, exp.Star):
        return len(found)
    return value(item, replace(scope, row=found[0])) if found else None


def _args(node: exp.Expression, scope: Scope, *names: str) -> list[Any]:
    return [value(node.args[n], scope) if node.args.get(n) is not None else None for n in names]


def _function(node: exp.Expression, scope: Scope) -> Any:
    if isinstance(node, exp.CurrentTimestamp | exp.CurrentDatetime):
        return scope.now()
    if isinstance(node, exp.Uuid):
        return str(uuid.uuid4()).upper()
    if isinstance(node, exp.Upper | exp.Lower):
        (text,) = _args(node, scope, "this")
        return None if text is None else (text.upper() if isinstance(node, exp.Upper) else text.lower())
    if isinstance(node, exp.Length):
        inner = node.this.this if isinstance(node.this, exp.Cast) else node.this  # sqlglot wraps LEN's argument
        text = value(inner, scope)
        return None if text is None else len(_text(text).rstrip(" "))
    if isinstance(node, exp.Replace):
        text, old, new = _args(node, scope, "this", "expression", "replacement")
        return None if None in (text, old, new) else _replace_insensitive(text, old, new)
    if isinstance(node, exp.ObjectId):
        return _named_function(exp.Anonymous(this="OBJECT_ID", expressions=[
            e for e in (node.this, node.expression) if e is not None]), scope)
    if isinstance(node, exp.Substring):
        text, start, length = _args(node, scope, "this", "start", "length")
        if None in (text, start, length):
            return None
        begin = max(int(start), 1)
        return text[begin - 1:max(int(start) + int(length) - 1, 0)]
    if isinstance(node, exp.Left | exp.Right):
        text, count = _args(node, scope, "this", "expression")
        if text is None or count is None:
            return None
        return text[:int(count)] if isinstance(node, exp.Left) else (text[-int(count):] if int(count) else "")
    if isinstance(node, exp.Repeat):
        text, times = _args(node, scope, "this", "times")
        if text is None or times is None:
            return None
        limit = _replicate_limit(node.this)
        return text * max(int(times), 0) if limit is None else (text * max(int(times), 0))[:limit]
    if isinstance(node, exp.Trim):
        (text,) = _args(node, scope, "this")
        position = str(node.args.get("position") or "").upper()
        if text is None:
            return None
        return text.lstrip(" ") if position == "LEADING" else text.rstrip(" ") if position == "TRAILING" \
            else text.strip(" ")
    if isinstance(node, exp.Abs):
        (number,) = _args(node, scope, "this")
        return None if number is None else abs(number)
    if isinstance(node, exp.Concat):
        return "".join("" if v is None else _text(v) for v in (value(e, scope) for e in node.expressions))
    if isinstance(node, exp.DateAdd):
        moment, amount = _args(node, scope, "this", "expression")
        unit = str(node.args.get("unit") or "DAY").upper()
        if moment is None or amount is None:
            return None
        steps = {"DAY": "days", "HOUR": "hours", "MINUTE": "minutes", "SECOND": "seconds", "WEEK": "weeks"}
        if unit not in steps:
            raise UnsupportedConstruct(f"DATEADD unit {unit}")
        return moment + dt.timedelta(**{steps[unit]: int(amount)})
    if isinstance(node, exp.Anonymous | exp.Dot):
        return _named_function(node, scope)
    raise UnsupportedConstruct(f"expression {node.sql('tsql')}")


def _named_function(node: exp.Expression, scope: Scope) -> Any:
    if isinstance(node, exp.Dot):
        schema, call = node.this, node.expression
        if not isinstance(call, exp.Anonymous):
            raise UnsupportedConstruct(f"expression {node.sql('tsql')}")
        if call.name.casefold() in ("getlevel", "tostring") and any(
                schema.name.casefold() == key.casefold() for key in scope.row):
            path = scope.column(schema.name)  # a hierarchyid column: the model keeps its path text
            if path is None:
                return None
            return str(path).count("/") - 1 if call.name.casefold() == "getlevel" else str(path)
        name = f"{schema.name}.{call.name}".casefold()
    else:
        call, name = node, node.name.casefold()
    arguments = [value(a, scope) for a in call.expressions if isinstance(a, exp.Expression)]
    builtin = name.upper()
    if builtin == "DATALENGTH":
        (item,) = arguments
        if item is None:
            return None
        if isinstance(item, bytes):
            return len(item)
        return len(_text(item)) * (2 if _national(call.expressions[0], scope) else 1)
    if builtin in ("GEOGRAPHY__POINT", "GEOMETRY__POINT"):  # Point(latitude, longitude, srid) for geography
        first, second, srid = arguments
        x, y = (second, first) if builtin.startswith("GEOGRAPHY") else (first, second)
        return None if None in arguments else (f"POINT({float(x)!r} {float(y)!r})", int(srid))
    if builtin in ("GEOGRAPHY__STGEOMFROMTEXT", "GEOMETRY__STGEOMFROMTEXT", "GEOGRAPHY__STPOINTFROMTEXT",
                   "GEOMETRY__STPOINTFROMTEXT", "GEOGRAPHY__STLINEFROMTEXT", "GEOMETRY__STLINEFROMTEXT",
                   "GEOGRAPHY__STPOLYFROMTEXT", "GEOMETRY__STPOLYFROMTEXT"):
        text, srid = arguments
        return None if text is None or srid is None else (str(text), int(srid))
    if builtin == "HIERARCHYID__PARSE":
        (text,) = arguments
        return text
    if builtin in ("LTRIM", "RTRIM"):
        (text,) = arguments
        return None if text is None else (text.lstrip(" ") if builtin == "LTRIM" else text.rstrip(" "))
    if builtin == "REPLACE":
        text, old, new = arguments
        if None in (text, old, new):
            return None
        return _replace_insensitive(text, old, new)
    if builtin == "LEN":
        (text,) = arguments
        return None if text is None else len(_text(text).rstrip(" "))
    for key, function in scope.functions.items():
        if key.casefold() == name or key.casefold() == f"dbo.{name}":
            return function(*arguments)
    raise UnsupportedConstruct(f"function {node.sql('tsql')}")


def _replace_insensitive(text: str, old: str, new: str) -> str:
    if not old:
        return text
    out, i, folded, needle = [], 0, text.casefold(), old.casefold()
    while True:
        j = folded.find(needle, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        out.append(new)
        i = j + len(old)


def _replicate_limit(node: exp.Expression) -> int | None:
    """Characters REPLICATE keeps: "If string_expression isn't of type varchar(max) or nvarchar(max), REPLICATE
    truncates the return value at 8,000 bytes" (4000 characters of an n-string). Known for literals and CAST/CONVERT;
    None (no cut) for columns and variables, whose declared length the evaluator does not carry."""
    if isinstance(node, exp.National):
        return 4000
    if isinstance(node, exp.Literal) and node.is_string:
        return 8000
    if isinstance(node, exp.Cast | exp.Convert):
        target = column_of_type(node.to if isinstance(node, exp.Cast) else node.this)
        if target.max_length == -1:
            return None
        return 4000 if target.type_name in ("nchar", "nvarchar") else 8000
    return None


def _national(node: exp.Expression, scope: Scope) -> bool:
    """Whether a string expression is of an n-type (two bytes a character for DATALENGTH)."""
    national = ("nchar", "nvarchar", "ntext", "sysname", "xml")
    if isinstance(node, exp.National):
        return True
    if isinstance(node, exp.Parameter):
        return scope.types.get(f"@{node.name.casefold()}") in national
    if isinstance(node, exp.Column):
        return scope.types.get(node.name.casefold()) in national
    if isinstance(node, exp.Convert):
        return column_of_type(node.this).type_name in national
    if isinstance(node, exp.Cast):
        return column_of_type(node.to).type_name in national
    return False


_EVALUATED = (exp.Coalesce, exp.Case, exp.If, exp.Cast, exp.TryCast, exp.Convert, exp.CurrentTimestamp,
              exp.CurrentDatetime, exp.Uuid, exp.Upper, exp.Lower, exp.Length, exp.Replace, exp.ObjectId,
              exp.Substring, exp.Left, exp.Right, exp.Repeat, exp.Trim, exp.Abs, exp.Concat, exp.DateAdd,
              exp.Anonymous)


def check(node: exp.Expression) -> None:
    """Refuse, before any row is read, a function the evaluator does not know (as SQL Server compiles a statement
    before running it); user-defined and catalog functions are looked up when called."""
    for sub in node.walk():
        if isinstance(sub, exp.Func) and not isinstance(sub, (*_EVALUATED, exp.Predicate, exp.Connector, exp.Not)):
            raise UnsupportedConstruct(f"function {sub.sql('tsql')}")
        if isinstance(sub, exp.Select | exp.Subquery) and not isinstance(node, exp.Exists) and not any(
                isinstance(parent, exp.Exists) for parent in _parents(sub)):
            raise UnsupportedConstruct(f"subquery {sub.sql('tsql')}")


def _parents(node: exp.Expression) -> list[exp.Expression]:
    found = []
    while node.parent is not None:
        node = node.parent
        found.append(node)
    return found
