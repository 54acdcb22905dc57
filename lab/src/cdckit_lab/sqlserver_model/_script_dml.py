"""INSERT, UPDATE and DELETE statements of a script, through one model transaction (the runner's, or one of their
own): each statement's rows go to the model together, as SQL Server logs one statement."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlglot import exp

from . import _sqlite as store
from ._computed import computed_names
from ._dml import ModelTransaction
from ._errors import ProgrammingError, server_error
from ._expressions import Scope, UnsupportedConstruct, parse_expression, truth, value

ScopeFor = Callable[[Mapping[str, Any] | None, store.TableInfo | None], Scope]  # the names a row's expressions see


def insert(transaction: ModelTransaction, info: store.TableInfo, tree: exp.Insert, scope_for: ScopeFor,
           identity_insert: set[str]) -> int:
    """INSERT ... VALUES or INSERT ... SELECT (from one table): each row with its defaults; returns the rows
    inserted."""
    target = tree.this
    names = [c.name for c in target.expressions] if isinstance(target, exp.Schema) else \
        [c.name for _, c in info.columns if c.name.casefold() not in computed_names(
            transaction.conn, info.db, info.object_id) and not c.identity]
    source = tree.expression
    _refuse_computed(transaction, info, names)
    defaults = _defaults(transaction, info)
    scope = scope_for(None, None)
    if isinstance(source, exp.Values):
        rows = [[value(v, scope) for v in row.expressions] for row in source.expressions]
    elif isinstance(source, exp.Select):
        rows = _selected(transaction, source, scope_for)
    else:
        raise UnsupportedConstruct("INSERT other than INSERT ... VALUES or INSERT ... SELECT")
    count = 0
    for values in rows:
        if len(values) != len(names):
            raise server_error(ProgrammingError, "21S01", 110, "There are fewer columns in the INSERT "
                               "statement than values specified in the VALUES clause.")
        given = dict(zip(names, values, strict=True))
        for column, expression in defaults.items():
            if column.casefold() not in {n.casefold() for n in given}:
                given[column] = value(parse_expression(expression), scope)
        _insert_row(transaction, info, given, identity_insert)
        count += 1
    return count

def _selected(transaction: ModelTransaction, select: exp.Select, scope_for: ScopeFor) -> list[list[Any]]:
    """The rows of ``SELECT list FROM one table [WHERE ...]``, read in the statement's transaction (so it sees the
    transaction's own earlier changes)."""
    source = select.args.get("from") or select.args.get("from_")
    refused = ("joins", "group", "having", "order", "limit", "distinct", "with", "with_")
    if source is None or not isinstance(source.this, exp.Table) or any(select.args.get(k) for k in refused):
        raise UnsupportedConstruct(f"INSERT ... SELECT other than from one table: {select.sql('tsql')}")
    parts = [p.name for p in source.this.parts]
    if len(parts) == 3 and parts[0].casefold() != transaction._db.casefold():
        raise UnsupportedConstruct(f"a table of another database ({'.'.join(parts)})")
    info = store.table_info(transaction.conn, transaction._db, parts[-2] if len(parts) > 1 else "dbo", parts[-1])
    where = select.args.get("where")
    found = []
    for _, row in store.table_rows(transaction.conn, info):
        scope = scope_for(row, info)
        if where is not None and truth(where.this, scope) is not True:
            continue
        values: list[Any] = []
        for item in select.expressions:
            if isinstance(item, exp.Star):
                values += [row[c.name] for _, c in info.columns]
            else:
                values.append(value(item.this if isinstance(item, exp.Alias) else item, scope))
        found.append(values)
    return found


def _insert_row(transaction: ModelTransaction, info: store.TableInfo, given: dict[str, Any],
                identity_insert: set[str]) -> None:
    identity = next((c for _, c in info.columns if c.identity), None)
    explicit = identity is not None and identity.name.casefold() in {n.casefold() for n in given}
    if not explicit or identity is None:
        transaction.insert(info.schema, info.name, given)
        return
    if f"{info.schema}.{info.name}".casefold() not in identity_insert:
        raise server_error(ProgrammingError, "23000", 544, f"Cannot insert explicit value for identity column "
                           f"in table '{info.name}' when IDENTITY_INSERT is set to OFF.")
    # IDENTITY_INSERT ON: the given value is the row's, and the table's next identity value moves past it
    wanted = int(next(v for n, v in given.items() if n.casefold() == identity.name.casefold()))
    conn = transaction.conn
    following = conn.execute("SELECT next_identity FROM tables WHERE db = ? AND object_id = ?",
                             (info.db, info.object_id)).fetchone()[0]
    conn.execute("UPDATE tables SET next_identity = ? WHERE db = ? AND object_id = ?",
                 (wanted, info.db, info.object_id))
    transaction.insert(info.schema, info.name,
                       {n: v for n, v in given.items() if n.casefold() != identity.name.casefold()})
    conn.execute("UPDATE tables SET next_identity = ? WHERE db = ? AND object_id = ?",
                 (max(following, wanted + 1), info.db, info.object_id))

def _defaults(transaction: ModelTransaction, info: store.TableInfo) -> dict[str, str]:
    prefix = f"default:{info.db.casefold()}:{info.object_id}:"
    found = {}
    for key, expression in transaction.conn.execute("SELECT k, v FROM server WHERE k LIKE ?", (prefix + "%",)):
        column = info.column(str(key)[len(prefix):])
        if column is not None:
            found[column.name] = str(expression)
    return found

def _refuse_computed(transaction: ModelTransaction, info: store.TableInfo, names: Sequence[str]) -> None:
    computed = computed_names(transaction.conn, info.db, info.object_id)
    for name in names:
        if name.casefold() in computed:
            raise server_error(ProgrammingError, "42000", 271, f'The column "{name}" cannot be modified '
                               "because it is either a computed column or is the result of a UNION operator.")

def _matching(transaction: ModelTransaction, info: store.TableInfo, tree: exp.Expression,
              scope_for: ScopeFor) -> list[dict[str, Any]]:
    if any(tree.args.get(k) for k in ("from", "from_", "joins", "limit", "tables", "order", "using")):
        raise UnsupportedConstruct("FROM, JOIN or TOP in UPDATE/DELETE")
    where = tree.args.get("where")
    rows = [row for _, row in store.table_rows(transaction.conn, info)]
    if where is None:
        return rows
    return [row for row in rows if truth(where.this, scope_for(row, info)) is True]

def _key(info: store.TableInfo, row: Mapping[str, Any]) -> dict[str, Any]:
    columns = info.primary_key or tuple(c.name for _, c in info.columns if row[c.name] is not None)
    return {c: row[c] for c in columns}

def update(transaction: ModelTransaction, info: store.TableInfo, tree: exp.Update, scope_for: ScopeFor) -> int:
    """UPDATE ... SET ... WHERE: every matching row, as one statement; returns the rows updated."""
    assignments = []
    for item in tree.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise UnsupportedConstruct(f"SET item {item.sql('tsql')}")
        assignments.append((item.this.name, item.expression))
    _refuse_computed(transaction, info, [name for name, _ in assignments])
    updates = []
    for row in _matching(transaction, info, tree, scope_for):
        scope = scope_for(row, info)  # every SET expression reads the row as it was before the statement
        updates.append((_key(info, row), {name: value(expression, scope) for name, expression in assignments}))
    return update_rows(transaction, info.schema, info.name, updates)

def delete(transaction: ModelTransaction, info: store.TableInfo, tree: exp.Delete, scope_for: ScopeFor) -> int:
    """DELETE ... WHERE: every matching row, as one statement; returns the rows deleted."""
    keys = [_key(info, row) for row in _matching(transaction, info, tree, scope_for)]
    return delete_rows(transaction, info.schema, info.name, keys)


def update_rows(transaction: ModelTransaction, schema: str, table: str,
                updates: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> int:
    """One UPDATE statement's rows, (key of the row, new values): logged as SQL Server logs one statement (a
    statement changing keys of several rows is a deferred update)."""
    return transaction.update_many(schema, table, updates) if updates else 0


def delete_rows(transaction: ModelTransaction, schema: str, table: str, keys: Sequence[Mapping[str, Any]]) -> int:
    """One DELETE statement's rows, by key."""
    return transaction.delete_many(schema, table, keys) if keys else 0
