"""Computed columns and the scalar user-defined functions they may call.

A computed column (``name AS (expression)``, CREATE TABLE) is stored with its table's row, its value computed from
the row's other columns on every insert and update (the model keeps the value, as a PERSISTED column does; a
non-persisted one reads the same). Its change-table value is always NULL: Microsoft's cdc.<capture_instance>_CT page,
"Large Object Data Types": "Computed columns that are included in a capture instance always have a value of NULL."

A scalar function (``CREATE FUNCTION s.f(@p type, ...) RETURNS type AS BEGIN ... END``) is kept when its body is
DECLARE, SET and RETURN statements, which is what the computed columns of ordinary schemas call (AdventureWorks'
``dbo.ufnLeadingZeros``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from . import _sqlite as store
from ._expressions import Scope, UnsupportedConstruct, column_of_type, convert, parse_expression, value

_TABLES = """
CREATE TABLE IF NOT EXISTS computed_columns (db TEXT COLLATE NOCASE, object_id INTEGER, name TEXT COLLATE NOCASE,
    expression TEXT);
CREATE TABLE IF NOT EXISTS scalar_functions (db TEXT COLLATE NOCASE, name TEXT COLLATE NOCASE, definition TEXT);
"""


def ensure_tables(conn: sqlite3.Connection) -> None:
    for statement in _TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def add_computed(conn: sqlite3.Connection, db: str, object_id: int, name: str, expression: str) -> None:
    ensure_tables(conn)
    conn.execute("INSERT INTO computed_columns VALUES (?, ?, ?, ?)", (db, object_id, name, expression))


def add_function(conn: sqlite3.Connection, db: str, name: str, definition: Mapping[str, Any]) -> None:
    """``definition``: {"parameters": [[name, type]], "returns": type, "body": [["declare", var, type] |
    ["set", var, expression] | ["return", expression]]} (names without @, types as T-SQL declares them)."""
    ensure_tables(conn)
    conn.execute("INSERT INTO scalar_functions VALUES (?, ?, ?)", (db, name, json.dumps(definition)))


def computed_names(conn: sqlite3.Connection, db: str, object_id: int) -> set[str]:
    """The case-folded names of a table's computed columns."""
    if not _has_tables(conn):
        return set()
    return {str(r[0]).casefold() for r in conn.execute(
        "SELECT name FROM computed_columns WHERE db = ? AND object_id = ?", (db, object_id))}


def _has_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'computed_columns'").fetchone() is not None


def functions(conn: sqlite3.Connection, db: str) -> dict[str, Callable[..., Any]]:
    """The database's scalar functions as Python callables, by ``schema.name``."""
    if not _has_tables(conn):
        return {}
    found: dict[str, Callable[..., Any]] = {}
    for name, text in conn.execute("SELECT name, definition FROM scalar_functions WHERE db = ?", (db,)):
        found[str(name)] = _callable(str(name), json.loads(text), found)
    return found


def _callable(name: str, definition: Mapping[str, Any], known: Mapping[str, Callable[..., Any]]) -> Callable[..., Any]:
    def call(*arguments: Any) -> Any:
        parameters = definition["parameters"]
        if len(arguments) != len(parameters):
            raise UnsupportedConstruct(f"call of {name} with {len(arguments)} arguments ({len(parameters)} declared)")
        variables: dict[str, Any] = {}
        types: dict[str, str] = {}
        scope_types: dict[str, str] = {}
        for (parameter, declared), argument in zip(parameters, arguments, strict=True):
            variables[parameter.casefold()] = convert(argument, column_of_type(declared, cast=False))
            types[parameter.casefold()] = declared
            scope_types[f"@{parameter.casefold()}"] = column_of_type(declared, cast=False).type_name
        scope = Scope(variables=variables, functions=known, types=scope_types)
        for step in definition["body"]:
            if step[0] == "declare":
                variables[step[1].casefold()], types[step[1].casefold()] = None, step[2]
                scope_types[f"@{step[1].casefold()}"] = column_of_type(step[2], cast=False).type_name
            elif step[0] == "set":
                result = value(parse_expression(step[2]), scope)
                target = column_of_type(types[step[1].casefold()], cast=False)
                variables[step[1].casefold()] = convert(result, target)
            else:
                returned = column_of_type(definition["returns"], cast=False)
                return convert(value(parse_expression(step[1]), scope), returned)
        return None

    return call


def with_computed(conn: sqlite3.Connection, info: store.TableInfo, row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with its computed columns' values computed from its other columns (converted to the column type,
    which is the expression's type as the model records it)."""
    result = dict(row)
    if not _has_tables(conn):
        return result
    definitions = conn.execute("SELECT name, expression FROM computed_columns WHERE db = ? AND object_id = ?",
                               (info.db, info.object_id)).fetchall()
    if not definitions:
        return result
    scope = Scope(row=result, functions=functions(conn, info.db),
                  types={c.name.casefold(): c.type_name for _, c in info.columns})
    for name, expression in definitions:
        column = info.column(str(name))
        if column is None:
            continue
        result[column.name] = convert(value(parse_expression(str(expression)), scope), column)
    return result
