"""CREATE TABLE, CREATE TYPE and CREATE FUNCTION statements read from their tokens, for the script runner.

A column of an alias type (``CREATE TYPE dbo.Name FROM nvarchar(50) NULL``) is created with the alias's base type
and, unless the column says otherwise, its nullability (Microsoft's CREATE TYPE page: an alias type is based on a
system type; "NULL | NOT NULL specifies whether the type can hold a null value"). The model records the base type
in ``sys.columns``/``sys.types`` and in the change table (whose columns "have the same data type ... as their
corresponding source columns", cdc.<capture_instance>_CT); a real server's ``sys.columns.user_type_id`` names the
alias type itself, which the model does not keep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from sqlglot import exp

from ._expressions import UnsupportedConstruct, column_for, column_of_type, parse_expression
from ._tsql import Statement, Token
from ._types import ModelColumn

_NUMERIC_ORDER = ["bit", "tinyint", "smallint", "int", "bigint", "smallmoney", "money", "decimal", "numeric", "real",
                  "float"]


@dataclass
class TableDefinition:
    schema: str
    name: str
    columns: list[ModelColumn] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)
    unique: list[list[str]] = field(default_factory=list)  # the columns of each UNIQUE constraint
    computed: dict[str, str] = field(default_factory=dict)  # column -> expression text
    defaults: dict[str, str] = field(default_factory=dict)  # column -> expression text
    identity_seed: int = 1
    not_modelled: list[str] = field(default_factory=list)


def object_name(items: list[Token], at: int, default_schema: str = "dbo") -> tuple[list[str], int]:
    """A dotted name (``[db].[schema].[table]``) starting at ``at``: its parts and the index after it."""
    parts = [items[at].text]
    at += 1
    while at + 1 < len(items) and items[at].text == "." and items[at].kind == "punct":
        parts.append(items[at + 1].text)
        at += 2
    return parts, at


def split_items(items: list[Token]) -> list[list[Token]]:
    """The comma-separated items of a parenthesised list (``items`` without its outer parentheses)."""
    found: list[list[Token]] = [[]]
    depth = 0
    for token in items:
        if token.kind == "punct" and token.text == "(":
            depth += 1
        elif token.kind == "punct" and token.text == ")":
            depth -= 1
        if depth == 0 and token.kind == "punct" and token.text == ",":
            found.append([])
        else:
            found[-1].append(token)
    return [item for item in found if item]


def parenthesised(items: list[Token], at: int) -> tuple[list[Token], int]:
    """The tokens inside the parentheses opening at ``at``, and the index after the closing one."""
    if at >= len(items) or items[at].text != "(":
        raise UnsupportedConstruct(f"'(' expected at {' '.join(t.text for t in items[at:at + 3]) or 'the end'}")
    depth = 0
    for index in range(at, len(items)):
        if items[index].kind == "punct" and items[index].text == "(":
            depth += 1
        elif items[index].kind == "punct" and items[index].text == ")":
            depth -= 1
            if depth == 0:
                return items[at + 1:index], index + 1
    raise UnsupportedConstruct("unbalanced parentheses")


def source_text(text: str, items: list[Token], base: int) -> str:
    """The text the tokens span (``base``: the statement's start offset in its batch)."""
    return text[items[0].start - base:items[-1].end - base] if items else ""


def key_columns(items: list[Token]) -> list[str]:
    """``(a ASC, b DESC)``: the column names."""
    return [item[0].text for item in split_items(items)]


def declared_type(items: list[Token], at: int, aliases: Mapping[str, ModelColumn], name: str
                  ) -> tuple[ModelColumn, bool, int]:
    """A column's type at ``at``: the column, whether an alias type set the nullability, the index after it."""
    parts, at = object_name(items, at)
    arguments: list[str] = []
    if at < len(items) and items[at].text == "(":
        inside, at = parenthesised(items, at)
        arguments = [" ".join(t.text for t in part) for part in split_items(inside)]
    alias = aliases.get(parts[-1].casefold())
    if alias is not None and (len(parts) == 1 or parts[0].casefold() in ("dbo", "sys") or alias):
        return replace(alias, name=name), True, at
    type_name = parts[-1].lower()
    if type_name == "xml":
        arguments = []  # xml(CONTENT schema_collection): the schema collection is not modelled
    return column_for(type_name, arguments, name=name), False, at


def create_table(statement: Statement, aliases: Mapping[str, ModelColumn],
                 function_type: Callable[[str], ModelColumn | None]) -> TableDefinition:
    items = statement.tokens
    base = items[0].start
    parts, at = object_name(items, 2)
    definition = TableDefinition(parts[-2] if len(parts) > 1 else "dbo", parts[-1])
    body, at = parenthesised(items, at)
    if at < len(items):
        definition.not_modelled.append("table storage options (ON filegroup, TEXTIMAGE_ON, WITH)")
    computed_nodes: dict[str, exp.Expression] = {}
    for item in split_items(body):
        words = [t.upper for t in item]
        index = 0
        if words[0] == "CONSTRAINT":
            index = 2
        if words[index] == "PRIMARY":
            inside, _ = parenthesised(item, next(i for i, t in enumerate(item) if t.text == "("))
            definition.primary_key = key_columns(inside)
        elif words[index] == "UNIQUE":
            inside, _ = parenthesised(item, next(i for i, t in enumerate(item) if t.text == "("))
            definition.unique.append(key_columns(inside))
        elif words[index] in ("CHECK", "FOREIGN", "INDEX", "PERIOD"):
            definition.not_modelled.append(f"{words[index]} constraints")
        elif len(item) > 1 and words[1] == "AS":
            expression = source_text(statement.text, item[2:], base)
            for suffix in (" PERSISTED NOT NULL", " PERSISTED"):
                if expression.upper().endswith(suffix):
                    expression = expression[:-len(suffix)]
            definition.computed[item[0].text] = expression
            computed_nodes[item[0].text] = parse_expression(expression)
            definition.columns.append(ModelColumn(item[0].text, "int"))  # typed below, from its expression
        else:
            definition.columns.append(_column(item, statement.text, base, aliases, definition))
    known = {c.name.casefold(): c for c in definition.columns if c.name not in definition.computed}
    definition.columns = [
        replace(inferred_type(computed_nodes[c.name], known, function_type), name=c.name, nullable=True)
        if c.name in computed_nodes else c for c in definition.columns]
    return definition


def _column(item: list[Token], text: str, base: int, aliases: Mapping[str, ModelColumn],
            definition: TableDefinition) -> ModelColumn:
    name = item[0].text
    column, alias_nullability, at = declared_type(item, 1, aliases, name)
    nullable = column.nullable if alias_nullability else True
    identity = False
    words = [t.upper for t in item]
    while at < len(item):
        word = words[at]
        if word == "IDENTITY":
            identity, nullable = True, False
            at += 1
            if at < len(item) and item[at].text == "(":
                inside, at = parenthesised(item, at)
                definition.identity_seed = int(inside[0].text)
        elif word == "NOT" and at + 1 < len(item) and words[at + 1] == "NULL":
            nullable, at = False, at + 2
        elif word == "NOT" and words[at + 1:at + 3] == ["FOR", "REPLICATION"]:
            at += 3
        elif word == "NULL":
            nullable, at = True, at + 1
        elif word == "CONSTRAINT":
            at += 2
        elif word == "DEFAULT":
            at += 1
            if item[at].text == "(":
                inside, at = parenthesised(item, at)
            else:  # DEFAULT 0, DEFAULT -1, DEFAULT N'x', DEFAULT newid(), DEFAULT sysdatetime()
                start = at
                at += 2 if item[at].text in ("-", "+") and at + 1 < len(item) else 1
                if at < len(item) and item[at].text == "(":
                    at = parenthesised(item, at)[1]
                inside = item[start:at]
            definition.defaults[name] = source_text(text, inside, base)
        elif word == "PRIMARY":
            definition.primary_key = [name]
            at += 2
        elif word in ("CLUSTERED", "NONCLUSTERED", "ROWGUIDCOL", "SPARSE", "PERSISTED"):
            at += 1
        elif word == "COLLATE":
            definition.not_modelled.append("collations")
            at += 2
        elif word == "UNIQUE":
            definition.unique.append([name])
            at += 1
        elif word in ("CHECK", "REFERENCES", "FOREIGN"):
            definition.not_modelled.append(f"{word} constraints")
            at += 1
            while at < len(item) and words[at] not in ("NOT", "NULL", "CONSTRAINT", "DEFAULT", "PRIMARY"):
                at = parenthesised(item, at)[1] if item[at].text == "(" else at + 1
        else:
            raise UnsupportedConstruct(f"column attribute {item[at].text} of column {name}")
    return ModelColumn(name, column.type_name, column.max_length, column.precision, column.scale, nullable, identity)


def inferred_type(node: exp.Expression, columns: Mapping[str, ModelColumn],
                  function_type: Callable[[str], ModelColumn | None]) -> ModelColumn:
    """A computed column's type from its expression: CAST/CONVERT's type, ISNULL's first argument, a column's own
    type, a function's declared return type; arithmetic takes the operand of the highest precedence (a decimal
    literal makes it ``decimal(38, 6)``), concatenation an ``nvarchar``/``varchar`` as long as its parts. This
    is an approximation of SQL Server's result types (its precision and scale arithmetic is not modelled)."""
    if isinstance(node, exp.Paren | exp.Coalesce):
        return inferred_type(node.this, columns, function_type)
    if isinstance(node, exp.Cast):
        return column_of_type(node.to)
    if isinstance(node, exp.Convert):
        return column_of_type(node.this)
    if isinstance(node, exp.Column):
        found = columns.get(node.name.casefold())
        if found is None:
            raise UnsupportedConstruct(f"computed column over unknown column {node.name}")
        return found
    if isinstance(node, exp.National):
        return column_for("nvarchar", [str(max(len(node.name), 1))])
    if isinstance(node, exp.Literal):
        if node.is_string:
            return column_for("varchar", [str(max(len(node.this), 1))])
        return column_for("decimal", ["38", "6"]) if "." in node.this else column_for("int", [])
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Anonymous) and node.this.name.casefold() in \
            columns and columns[node.this.name.casefold()].type_name == "hierarchyid":
        method = node.expression.name.casefold()
        if method == "getlevel":
            return column_for("smallint", [])
        if method == "tostring":
            return column_for("nvarchar", ["4000"])
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Anonymous):
        found = function_type(f"{node.this.name}.{node.expression.name}")
        if found is None:
            raise UnsupportedConstruct(f"computed column calling {node.sql('tsql')}")
        return found
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod | exp.DPipe):
        left = inferred_type(node.left, columns, function_type)
        right = inferred_type(node.right, columns, function_type)
        strings = ("char", "varchar", "nchar", "nvarchar")
        if left.type_name in strings and right.type_name in strings:
            national = "n" if left.type_name.startswith("n") or right.type_name.startswith("n") else ""
            characters = sum(c.max_length // (2 if c.type_name.startswith("n") else 1) for c in (left, right))
            return column_for(f"{national}varchar", [str(min(characters, 4000 if national else 8000))])
        ranks = [_NUMERIC_ORDER.index(c.type_name) if c.type_name in _NUMERIC_ORDER else -1 for c in (left, right)]
        higher = left if ranks[0] >= ranks[1] else right
        if higher.type_name in ("decimal", "numeric") and {left.type_name, right.type_name} - {"decimal", "numeric"}:
            return column_for("decimal", ["38", "6"])
        return higher
    if isinstance(node, exp.Upper | exp.Lower | exp.Trim | exp.Replace | exp.Substring | exp.Left | exp.Right
                  | exp.Repeat | exp.Abs):
        return inferred_type(node.this, columns, function_type)
    if isinstance(node, exp.Length):
        return column_for("int", [])
    if isinstance(node, exp.Case):
        return inferred_type(node.args["ifs"][0].args["true"], columns, function_type)
    if isinstance(node, exp.CurrentTimestamp):
        return column_for("datetime", [])
    raise UnsupportedConstruct(f"computed column expression {node.sql('tsql')}")


def create_type(statement: Statement) -> tuple[str, ModelColumn]:
    """``CREATE TYPE [schema.]name FROM base [(n)] [NULL | NOT NULL]``: the alias name and its base column."""
    items = statement.tokens
    parts, at = object_name(items, 2)
    if at >= len(items) or items[at].upper != "FROM":
        raise UnsupportedConstruct("CREATE TYPE other than an alias type (FROM base_type)")
    column, _, at = declared_type(items, at + 1, {}, "")
    words = [t.upper for t in items[at:]]
    return parts[-1], replace(column, nullable=words[:2] != ["NOT", "NULL"])


def create_function(statement: Statement) -> tuple[str, dict[str, object]]:
    """``CREATE FUNCTION s.f(@p type, ...) RETURNS type [WITH ...] AS BEGIN <DECLARE/SET/RETURN> END``."""
    items = statement.tokens
    parts, at = object_name(items, 2)
    inside, at = parenthesised(items, at)
    parameters = []
    for item in split_items(inside):
        parameters.append([item[0].text.lstrip("@"), " ".join(t.text for t in item[1:])])
    if items[at].upper != "RETURNS":
        raise UnsupportedConstruct("CREATE FUNCTION other than a scalar function")
    returns_at = at + 1
    at = returns_at + 1
    if at < len(items) and items[at].text == "(":
        at = parenthesised(items, at)[1]
    returns = statement.text[items[returns_at].start - items[0].start:items[at - 1].end - items[0].start]
    while at < len(items) and items[at].upper != "BEGIN":
        at += 1
    body: list[list[str]] = []
    last = max(i for i, t in enumerate(items) if t.upper == "END")
    steps = _statements(items[at + 1:last])
    for step in steps:
        head = step[0].upper
        text = statement.text[step[0].start - items[0].start:step[-1].end - items[0].start]
        if head == "DECLARE":
            body.append(["declare", step[1].text.lstrip("@"), " ".join(t.text for t in step[2:])])
        elif head == "SET":
            body.append(["set", step[1].text.lstrip("@"),
                         text[step[3].start - step[0].start:]])
        elif head == "RETURN":
            body.append(["return", text[step[1].start - step[0].start:]])
        else:
            raise UnsupportedConstruct(f"{head} in the body of function {parts[-1]} (DECLARE, SET, RETURN only)")
    return ".".join(parts[-2:]) if len(parts) > 1 else f"dbo.{parts[0]}", {
        "parameters": parameters, "returns": returns, "body": body}


def _statements(items: list[Token]) -> list[list[Token]]:
    found: list[list[Token]] = [[]]
    for token in items:
        if token.kind == "punct" and token.text == ";":
            found.append([])
        else:
            found[-1].append(token)
    return [s for s in found if s]
