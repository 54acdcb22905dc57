"""T-SQL scripts run against the model: a DBA's schema script, a changes script, and cdckit's own sql/sqlserver ones.

``ScriptRunner(model, database).run(text, name)`` splits the text into batches on ``GO`` lines and runs each
statement: schemas, alias types, tables (columns, IDENTITY, DEFAULT, PRIMARY KEY, UNIQUE, computed columns), ALTER
TABLE ... ADD CONSTRAINT ... PRIMARY KEY / UNIQUE, CREATE UNIQUE INDEX, scalar functions of DECLARE/SET/RETURN, INSERT
... VALUES, INSERT ... SELECT (from one table), UPDATE ... SET ... WHERE, DELETE ... WHERE (expressions and conditions
as ``_expressions`` evaluates them), BEGIN TRAN / COMMIT / ROLLBACK (one model transaction; a statement outside one is
its own), SET IDENTITY_INSERT, variables (DECLARE, SET), IF / ELSE, BEGIN ... END, TRY / CATCH, PRINT, RAISERROR,
RETURN, and EXEC of sp_executesql, sys.sp_cdc_enable_db, sys.sp_cdc_enable_table, sys.sp_cdc_disable_table and
sp_configure 'max text repl size'. Conditions, SELECT assignments (``SELECT @v = ... FROM ...``) and scalar subqueries
may read catalog functions and views and table variables (``_script_catalog``).

Statements that change nothing the model holds (GRANT, CREATE ROLE/USER/LOGIN, other indexes, FOREIGN KEY and CHECK
constraints, SQL Agent job settings, session SET options, result-set SELECTs) are accepted and listed in the report's
``not_modelled``. Anything else stops the run with :class:`ScriptError`, one line naming the script, the line, the
statement and the construct.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from . import _sqlite as store
from ._admin import SqlServerModel
from ._computed import add_computed, add_function, ensure_tables, functions
from ._dml import ModelTransaction
from ._errors import Error, ProgrammingError, server_error
from ._expressions import (
    Scope,
    UnsupportedConstruct,
    check,
    parse_condition,
    parse_expression,
    parse_statement,
    truth,
    value,
)
from ._script_catalog import JOB_DEFAULTS, TABLE_VARIABLE, Catalog, job_key, server_message
from ._script_ddl import create_function, create_table, create_type, object_name, parenthesised, split_items
from ._script_dml import delete, insert, update
from ._tsql import Block, If, Node, ScriptSyntaxError, Statement, TryCatch, batches, parse_batch
from ._tsql import tokens as tsql_tokens
from ._types import ModelColumn

_SESSION_OPTIONS = {"NOCOUNT", "ANSI_NULLS", "QUOTED_IDENTIFIER", "ANSI_PADDING", "ANSI_WARNINGS", "ARITHABORT",
                    "CONCAT_NULL_YIELDS_NULL", "NUMERIC_ROUNDABORT", "XACT_ABORT", "DATEFORMAT", "LANGUAGE",
                    "TRANSACTION", "LOCK_TIMEOUT", "DEADLOCK_PRIORITY", "STATISTICS", "ANSI_NULL_DFLT_ON"}
_ACCEPTED_PROCEDURES = {"sp_cdc_start_job", "sp_cdc_stop_job", "sp_addrolemember", "sp_addextendedproperty",
                        "rds_set_configuration", "sp_cdc_help_change_data_capture", "sp_cdc_help_jobs"}


class ScriptError(Exception):
    """A statement the model refused or failed: one line naming the script, line, statement and reason."""


class _Return(Exception):
    pass


@dataclass
class ScriptReport:
    statements: int = 0
    rows_changed: int = 0
    tables_created: list[str] = field(default_factory=list)
    not_modelled: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        if what not in self.not_modelled:
            self.not_modelled.append(what)


class ScriptRunner:
    """Runs T-SQL scripts against one model database (``USE`` switches it)."""

    def __init__(self, model: SqlServerModel, database: str) -> None:
        self.model, self.database = model, database
        self.report = ScriptReport()
        self._transaction: ModelTransaction | None = None
        self._identity_insert: set[str] = set()
        self._variables: dict[str, Any] = {}
        self._types: dict[str, ModelColumn] = {}
        self._table_variables: dict[str, list[dict[str, Any]]] = {}
        self._caught: Error | None = None

    # -- running ------------------------------------------------------------------------------------------------
    def run_file(self, path: str | Path) -> ScriptReport:
        return self.run(Path(path).read_text(encoding="utf-8-sig"), Path(path).name)

    def run(self, text: str, name: str = "<script>") -> ScriptReport:
        """Run every batch of ``text``; the report accumulates over the runner's scripts."""
        for first_line, batch in batches(text):
            try:
                self._batch(batch, first_line)
            except ScriptSyntaxError as error:
                self._abandon()
                raise ScriptError(f"{name}: {error}") from None
            except _Failure as failure:
                self._abandon()
                raise ScriptError(f"{name}, line {failure.line}: {failure.head}: {failure.reason}") from None
        return self.report

    def _abandon(self) -> None:
        if self._transaction is not None:
            transaction, self._transaction = self._transaction, None
            transaction.__exit__(RuntimeError, RuntimeError("script failed"), None)

    def _batch(self, text: str, first_line: int) -> None:
        self._variables, self._types, self._table_variables = {}, {}, {}  # variables live for one batch
        with suppress(_Return):
            self._node(parse_batch(text, first_line))

    def _node(self, node: Node) -> None:
        if isinstance(node, Block):
            for item in node.body:
                self._node(item)
        elif isinstance(node, If):
            if self._guarded(node.condition, lambda: truth(parse_condition(node.condition.text), self._scope())):
                self._node(node.then)
            elif node.otherwise is not None:
                self._node(node.otherwise)
        elif isinstance(node, TryCatch):
            try:
                self._node(node.attempt)
            except _Failure as failure:
                if failure.error is None:
                    raise
                self._caught = failure.error
                self._node(node.handler)
                self._caught = None
        else:
            self._guarded(node, lambda: self._statement(node))

    def _guarded(self, statement: Statement, action: Any) -> Any:
        try:
            return action()
        except (_Return, _Failure):
            raise
        except Error as error:
            raise _Failure(statement, server_message(error), error) from None
        except UnsupportedConstruct as error:
            raise _Failure(statement, f"{error} is not supported by the model") from None
        except sqlglot.errors.ParseError as error:
            raise _Failure(statement, f"sqlglot cannot parse it ({str(error).splitlines()[0]})") from None
        except (ValueError, KeyError, IndexError, StopIteration, TypeError, ArithmeticError) as error:
            raise _Failure(statement, f"not understood ({type(error).__name__}: {error})") from None

    # -- statements ---------------------------------------------------------------------------------------------
    def _statement(self, statement: Statement) -> None:
        self.report.statements += 1
        words = statement.words
        head = words[0]
        if head == "CREATE":
            self._create(statement, words)
        elif head == "ALTER" and words[1] == "TABLE":
            self._alter_table(statement)
        elif head in ("INSERT", "UPDATE", "DELETE"):
            self._dml(statement, head)
        elif head == "BEGIN":
            if self._transaction is not None:
                raise UnsupportedConstruct("a nested BEGIN TRAN")
            self._transaction = self.model.transaction(self.database).__enter__()
        elif head == "COMMIT":
            self._end_transaction(commit=True)
        elif head == "ROLLBACK":
            self._end_transaction(commit=False)
        elif head == "DECLARE":
            self._declare(statement)
        elif head == "SET":
            self._set(statement, words)
        elif head == "PRINT":
            self.report.messages.append(str(self._value(statement.text[len("PRINT"):])))
        elif head == "RAISERROR":
            self._raiserror(statement)
        elif head == "RETURN":
            raise _Return()
        elif head in ("EXEC", "EXECUTE"):
            self._exec(statement)
        elif head == "USE":
            self.database = store_database(self.model, statement.tokens[1].text)
        elif head == "SELECT":
            self._select(statement)
        elif head in ("GRANT", "DENY", "REVOKE"):
            self.report.note(f"{head} (permissions)")
        elif head == "ALTER" and words[1] in ("ROLE", "AUTHORIZATION", "USER", "LOGIN"):
            self.report.note(f"ALTER {words[1]}")
        elif head == "RECONFIGURE":
            pass  # sp_configure's value is applied when set
        else:
            raise UnsupportedConstruct(f"statement {head}")

    def _create(self, statement: Statement, words: list[str]) -> None:
        kind = words[1]
        if self._transaction is not None:
            raise UnsupportedConstruct("DDL inside BEGIN TRAN")
        if kind == "SCHEMA":
            with store.write_transaction(self.model.path) as conn:
                from ._cdc import schema_id_of
                schema_id_of(conn, store.database_name(conn, self.database), statement.tokens[2].text)
        elif kind == "TYPE":
            alias, column = create_type(statement)
            with store.write_transaction(self.model.path) as conn:
                conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES (?, ?)",
                             (f"alias_type:{self.database.casefold()}:{alias.casefold()}", json.dumps(
                                 [column.type_name, column.max_length, column.precision, column.scale,
                                  column.nullable])))
        elif kind == "TABLE":
            self._create_table(statement)
        elif kind == "FUNCTION":
            name, definition = create_function(statement)
            with store.write_transaction(self.model.path) as conn:
                add_function(conn, store.database_name(conn, self.database), name, definition)
        elif kind == "DATABASE":
            self.model.create_database(statement.tokens[2].text)
        elif kind == "UNIQUE" and "INDEX" in words[2:4]:
            self._create_unique_index(statement)
        elif kind in ("INDEX", "CLUSTERED", "NONCLUSTERED", "PRIMARY", "XML", "SPATIAL", "FULLTEXT"):
            self.report.note("indexes" if kind != "FULLTEXT" else "full-text indexes")
        elif kind in ("ROLE", "USER", "LOGIN", "VIEW", "PROCEDURE", "PROC", "SYNONYM", "STATISTICS"):
            self.report.note(f"CREATE {kind}")
        else:
            raise UnsupportedConstruct(f"CREATE {kind}")

    def _aliases(self) -> dict[str, ModelColumn]:
        prefix = f"alias_type:{self.database.casefold()}:"
        conn = store.open_sqlite(self.model.path)
        try:
            rows = conn.execute("SELECT k, v FROM server WHERE k LIKE ?", (prefix + "%",)).fetchall()
        finally:
            conn.close()
        found = {}
        for key, text in rows:
            type_name, length, precision, scale, nullable = json.loads(text)
            found[str(key)[len(prefix):]] = ModelColumn("", type_name, length, precision, scale, nullable)
        return found

    def _function_type(self, name: str) -> ModelColumn | None:
        from ._expressions import column_of_type

        conn = store.open_sqlite(self.model.path)
        try:
            ensure_tables(conn)
            row = conn.execute("SELECT definition FROM scalar_functions WHERE db = ? AND name = ?",
                               (self.database, name)).fetchone()
        finally:
            conn.close()
        return None if row is None else column_of_type(json.loads(row[0])["returns"], cast=False)

    def _create_table(self, statement: Statement) -> None:
        definition = create_table(statement, self._aliases(), self._function_type)
        for note in definition.not_modelled:
            self.report.note(note)
        object_id = self.model.create_table(self.database, definition.schema, definition.name, definition.columns,
                                            definition.primary_key, definition.unique)
        with store.write_transaction(self.model.path) as conn:
            db = store.database_name(conn, self.database)
            for column, expression in definition.computed.items():
                add_computed(conn, db, object_id, column, expression)
            for column, expression in definition.defaults.items():
                conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES (?, ?)",
                             (f"default:{db.casefold()}:{object_id}:{column.casefold()}", expression))
            if definition.identity_seed != 1:
                conn.execute("UPDATE tables SET next_identity = ? WHERE db = ? AND object_id = ?",
                             (definition.identity_seed, db, object_id))
        self.report.tables_created.append(f"{definition.schema}.{definition.name}")

    def _alter_table(self, statement: Statement) -> None:
        items = statement.tokens
        parts, at = object_name(items, 2)
        schema, table = self._table_parts(parts)
        words = [t.upper for t in items]
        if words[at:at + 2] in (["WITH", "CHECK"], ["WITH", "NOCHECK"]):
            at += 2
        if words[at] != "ADD":
            raise UnsupportedConstruct(f"ALTER TABLE {words[at]}")
        at += 1
        if words[at] == "CONSTRAINT":
            at += 2
        kind = words[at]
        if kind in ("PRIMARY", "UNIQUE"):
            start = next(i for i in range(at, len(items)) if items[i].text == "(")
            inside, _ = parenthesised(items, start)
            self._add_key(schema, table, [item[0].text for item in split_items(inside)],
                          items[at - 1].text if words[at - 2] == "CONSTRAINT" else None, primary=kind == "PRIMARY")
        elif kind in ("FOREIGN", "CHECK", "DEFAULT"):
            self.report.note(f"{kind} constraints")
        else:
            raise UnsupportedConstruct(f"ALTER TABLE ... ADD {items[at].text}")

    def _create_unique_index(self, statement: Statement) -> None:
        """CREATE UNIQUE [CLUSTERED | NONCLUSTERED] INDEX name ON table (columns) [WHERE ...]: a unique key (a
        filtered index is not modelled)."""
        items, words = statement.tokens, statement.words
        at = words.index("INDEX") + 1
        name = items[at].text
        parts, at = object_name(items, words.index("ON", at) + 1)
        inside, end = parenthesised(items, at)
        if "WHERE" in words[end:]:
            raise UnsupportedConstruct("a filtered unique index")
        schema, table = self._table_parts(parts)
        self._add_key(schema, table, [item[0].text for item in split_items(inside)], name, primary=False)

    def _add_key(self, schema: str, table: str, columns: Sequence[str], name: str | None, primary: bool) -> None:
        """ALTER TABLE ... ADD PRIMARY KEY / UNIQUE, or CREATE UNIQUE INDEX: the key's index and its columns."""
        with store.write_transaction(self.model.path) as conn:
            info = store.table_info(conn, store.database_name(conn, self.database), schema, table)
            if primary and info.primary_key:
                raise server_error(ProgrammingError, "42000", 1779, f"Table '{table}' already has a primary key "
                                   "defined on it.")
            ids = {c.name.casefold(): i for i, c in info.columns}
            index_id = 1 if primary else 2 + conn.execute(
                "SELECT COUNT(*) FROM indexes WHERE db = ? AND object_id = ? AND index_id > 1",
                (info.db, info.object_id)).fetchone()[0]
            default_name = f"PK__{table[:8]}__{info.object_id:016X}" if primary else \
                f"UQ__{table[:8]}__{info.object_id + index_id:016X}"
            conn.execute("INSERT INTO indexes VALUES (?, ?, ?, ?, ?)",
                         (info.db, info.object_id, index_id, name or default_name, int(primary)))
            for ordinal, column in enumerate(columns, start=1):
                if column.casefold() not in ids:
                    raise server_error(ProgrammingError, "42000", 1911, f"Column name '{column}' does not exist "
                                       "in the target table or view.")
                conn.execute("INSERT INTO index_columns VALUES (?, ?, ?, ?, ?)",
                             (info.db, info.object_id, index_id, ordinal, ids[column.casefold()]))
                if primary:
                    conn.execute("UPDATE columns SET is_nullable = 0 WHERE db = ? AND object_id = ? AND column_id = ?",
                                 (info.db, info.object_id, ids[column.casefold()]))

    # -- variables, control ------------------------------------------------------------------------------------
    def _scope(self, row: Mapping[str, Any] | None = None, info: store.TableInfo | None = None) -> Scope:
        conn = store.open_sqlite(self.model.path)
        try:
            known = functions(conn, self.database)
        finally:
            conn.close()
        catalog = Catalog(self.model, self.database, self._caught, self._table_variables)
        types = {f"@{name}": column.type_name for name, column in self._types.items()}
        types.update({c.name.casefold(): c.type_name for _, c in (info.columns if info else ())})
        return Scope(row=row or {}, variables=self._variables, functions={**known, **catalog.functions()},
                     rows=catalog.rows, now=self.model.clock, types=types)

    def _with_table_variables(self, text: str) -> str:
        """The text with each table variable ``@t`` written as the table ``[__table_variable_t]``."""
        for name in self._table_variables:
            text = re.sub(rf"@{re.escape(name)}\b", f"[{TABLE_VARIABLE}{name}]", text, flags=re.IGNORECASE)
        return text

    def _value(self, text: str) -> Any:
        return value(parse_expression(text), self._scope())

    def _declare(self, statement: Statement) -> None:
        for item in split_items(statement.tokens[1:]):
            name = item[0].text.casefold().lstrip("@")
            if len(item) > 1 and item[1].upper == "TABLE":
                self._table_variables[name] = []
                continue
            at = 2 if len(item) > 1 and item[1].upper == "AS" else 1
            equals = next((i for i, t in enumerate(item) if t.text == "="), len(item))
            declared = statement.text[item[at].start - statement.tokens[0].start:
                                      item[equals - 1].end - statement.tokens[0].start]
            from ._expressions import column_of_type
            self._types[name] = column_of_type(declared, cast=False)
            self._variables[name] = None
            if equals < len(item):
                text = statement.text[item[equals + 1].start - statement.tokens[0].start:
                                      item[-1].end - statement.tokens[0].start]
                self._assign(name, self._value(text))

    def _assign(self, name: str, result: Any) -> None:
        from ._expressions import convert

        if name not in self._types:
            raise server_error(ProgrammingError, "42000", 137, f'Must declare the scalar variable "@{name}".')
        self._variables[name] = convert(result, self._types[name])

    def _set(self, statement: Statement, words: list[str]) -> None:
        tokens = statement.tokens
        if tokens[1].kind == "var":
            if tokens[2].text != "=":
                raise UnsupportedConstruct(f"SET {tokens[1].text} {tokens[2].text}")
            text = statement.text[tokens[3].start - tokens[0].start:]
            self._assign(tokens[1].text.casefold().lstrip("@"), self._value(text))
        elif words[1] == "IDENTITY_INSERT":
            parts, at = object_name(tokens, 2)
            schema, table = self._table_parts(parts)
            key = f"{schema}.{table}".casefold()
            if words[at] == "ON":
                self._identity_insert.add(key)
            else:
                self._identity_insert.discard(key)
        elif words[1] in _SESSION_OPTIONS:
            self.report.note(f"SET {words[1]}")
        else:
            raise UnsupportedConstruct(f"SET {tokens[1].text}")

    def _select(self, statement: Statement) -> None:
        """``SELECT @v = expression, ... [FROM view WHERE ...]`` assigns (once per row, the last row's value
        staying); any other SELECT is a result set the model does not return."""
        tree = parse_statement(self._with_table_variables(statement.text))
        items = tree.expressions if isinstance(tree, exp.Select) else []
        if not items or not all(isinstance(i, exp.EQ) and isinstance(i.this, exp.Parameter) for i in items):
            self.report.note("SELECT result sets (not returned)")
            return
        scope = self._scope()
        has_source = tree.args.get("from") or tree.args.get("from_")
        for row in (scope.rows(tree, scope) if has_source and scope.rows and isinstance(tree, exp.Select) else [{}]):
            for item in items:
                self._assign(item.this.name.casefold(), value(item.expression, self._scope(row)))

    def _insert_table_variable(self, name: str, tree: exp.Insert) -> None:
        target = tree.this
        if not isinstance(target, exp.Schema) or not isinstance(tree.expression, exp.Values):
            raise UnsupportedConstruct("INSERT into a table variable other than (columns) VALUES")
        names = [c.name for c in target.expressions]
        scope = self._scope()
        for row in tree.expression.expressions:
            self._table_variables[name].append(dict(zip(names, (value(v, scope) for v in row.expressions),
                                                        strict=True)))

    def _change_job(self, database: str, named: Mapping[str, Any]) -> None:
        """sys.sp_cdc_change_job: the settings are kept (msdb.dbo.cdc_jobs shows them); the model's capture job
        runs at commit whatever they say."""
        job_type = str(named.get("job_type", "capture")).lower()
        if job_type not in JOB_DEFAULTS:
            raise server_error(ProgrammingError, "42000", 22992, f"The specified @job_type '{job_type}' is not "
                               "valid. Specify 'capture' or 'cleanup'.")
        settings = {k: int(v) for k, v in named.items() if k in JOB_DEFAULTS[job_type] and v is not None}
        with store.write_transaction(self.model.path) as conn:
            key = job_key(database, job_type)
            found = conn.execute("SELECT v FROM server WHERE k = ?", (key,)).fetchone()
            merged = {**(json.loads(found[0]) if found else {}), **settings}
            conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES (?, ?)", (key, json.dumps(merged)))
        self.report.note("SQL Server Agent job settings (kept; the model's capture job runs at commit)")

    def _raiserror(self, statement: Statement) -> None:
        inside, _ = parenthesised(statement.tokens, 1)
        base = statement.tokens[0].start
        arguments = [self._value(statement.text[p[0].start - base:p[-1].end - base]) for p in split_items(inside)]
        message, severity = str(arguments[0]), int(arguments[1])
        for argument in arguments[3:]:
            message = re.sub(r"%[sdi]", str(argument).replace("\\", "\\\\"), message, count=1)
        if severity <= 10:
            self.report.messages.append(message)
            return
        raise server_error(ProgrammingError, "42000", 50000, message)

    # -- EXEC ---------------------------------------------------------------------------------------------------
    def _exec(self, statement: Statement) -> None:
        tokens, base = statement.tokens, statement.tokens[0].start
        at = 1
        if tokens[at].kind == "var" and len(tokens) > at + 1 and tokens[at + 1].text == "=":
            raise UnsupportedConstruct("EXEC @return_status = ...")
        if tokens[at].kind == "var":
            procedure = str(self._variables.get(tokens[at].text.casefold().lstrip("@")) or "")
            parts, _ = object_name(tsql_tokens(procedure), 0)
            at += 1
        elif tokens[at].kind == "string" or tokens[at].text == "(":
            raise UnsupportedConstruct("EXEC of a string")
        else:
            parts, at = object_name(tokens, at)
        named: dict[str, Any] = {}
        positional: list[Any] = []
        for item in split_items(tokens[at:]):
            if item[-1].upper == "OUTPUT":
                raise UnsupportedConstruct("OUTPUT parameters")
            if item[0].kind == "var" and len(item) > 2 and item[1].text == "=":
                named[item[0].text.casefold().lstrip("@")] = self._value(
                    statement.text[item[2].start - base:item[-1].end - base])
            else:
                positional.append(self._value(statement.text[item[0].start - base:item[-1].end - base]))
        database = parts[0] if len(parts) == 3 else self.database
        self._procedure(parts[-1].casefold(), database, named, positional)

    def _procedure(self, name: str, database: str, named: dict[str, Any], positional: list[Any]) -> None:
        if name == "sp_executesql":
            text = named.get("stmt", positional[0] if positional else None)
            if len(positional) > 1 or set(named) - {"stmt"}:
                raise UnsupportedConstruct("sp_executesql with parameters")
            saved = (self.database, self._variables, self._types, self._table_variables)
            # the model has no master or msdb: their statements (logins, server permissions) run where the script is
            if database.casefold() not in ("master", "msdb"):
                self.database = store_database(self.model, database)
            try:
                self._batch(str(text or ""), 1)
            finally:
                self.database, self._variables, self._types, self._table_variables = saved
        elif name == "sp_cdc_enable_db":
            self.model.enable_cdc(database)
        elif name == "sp_cdc_enable_table":
            self._enable_table(database, named)
        elif name == "sp_cdc_disable_table":
            self.model.disable_table(database, str(named["capture_instance"]))
        elif name == "sp_configure":
            option = str(positional[0] if positional else named.get("configname", "")).lower()
            setting = positional[1] if len(positional) > 1 else named.get("configvalue")
            if option == "max text repl size" and setting is not None:
                with store.write_transaction(self.model.path) as conn:
                    conn.execute("INSERT OR REPLACE INTO server (k, v) VALUES ('max text repl size', ?)",
                                 (int(setting),))
            else:
                self.report.note(f"sp_configure '{option}'")
        elif name == "sp_cdc_change_job":
            self._change_job(database, named)
        elif name in _ACCEPTED_PROCEDURES:
            self.report.note(f"EXEC {name}")
        else:
            raise UnsupportedConstruct(f"procedure {name}")

    def _enable_table(self, database: str, named: Mapping[str, Any]) -> None:
        if named.get("role_name") is not None:
            self.report.note("gating roles (@role_name)")
        for option in ("filegroup_name", "index_name"):
            if named.get(option) is not None:
                self.report.note(f"@{option} of sys.sp_cdc_enable_table")
        if named.get("supports_net_changes"):
            raise UnsupportedConstruct("@supports_net_changes = 1 (net changes)")
        columns = named.get("captured_column_list")
        self.model.enable_table(database, str(named["source_schema"]), str(named["source_name"]),
                                named.get("capture_instance"),
                                None if columns is None else [c.strip(" []") for c in str(columns).split(",")])

    # -- DML ----------------------------------------------------------------------------------------------------
    def _end_transaction(self, commit: bool) -> None:
        if self._transaction is None:
            raise server_error(ProgrammingError, "25000", 3902, "The COMMIT TRANSACTION request has no "
                               "corresponding BEGIN TRANSACTION.")
        transaction, self._transaction = self._transaction, None
        if commit:
            transaction.__exit__(None, None, None)
        else:
            transaction.__exit__(RuntimeError, RuntimeError("ROLLBACK"), None)

    @contextmanager
    def _open(self) -> Iterator[ModelTransaction]:
        if self._transaction is not None:
            yield self._transaction
            return
        with self.model.transaction(self.database) as transaction:
            yield transaction

    def _table_parts(self, parts: Sequence[str]) -> tuple[str, str]:
        if len(parts) == 3 and parts[0].casefold() != self.database.casefold():
            raise UnsupportedConstruct(f"a table of another database ({'.'.join(parts)})")
        return (parts[-2] if len(parts) > 1 else "dbo"), parts[-1]

    def _dml(self, statement: Statement, head: str) -> None:
        tree = parse_statement(self._with_table_variables(statement.text))
        table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        if not isinstance(table, exp.Table) or any(tree.args.get(k) for k in ("with", "with_", "returning")):
            raise UnsupportedConstruct(f"{head} of this form")
        if table.name.startswith(TABLE_VARIABLE) and isinstance(tree, exp.Insert):
            self._insert_table_variable(table.name[len(TABLE_VARIABLE):], tree)
            return
        schema, name = self._table_parts([p.name for p in table.parts])
        checked = tree.expression if isinstance(tree, exp.Insert) and isinstance(tree.expression, exp.Select) \
            else tree  # INSERT ... SELECT: its select list and condition
        for part in ("expressions", "expression", "where"):
            for node in checked.args.get(part) or [] if part == "expressions" else [checked.args.get(part)]:
                if isinstance(node, exp.Expression):
                    check(node)
        with self._open() as transaction:
            info = store.table_info(transaction.conn, transaction._db, schema, name)
            if isinstance(tree, exp.Insert):
                self.report.rows_changed += insert(transaction, info, tree, self._scope, self._identity_insert)
            elif isinstance(tree, exp.Update):
                self.report.rows_changed += update(transaction, info, tree, self._scope)
            elif isinstance(tree, exp.Delete):
                self.report.rows_changed += delete(transaction, info, tree, self._scope)
            else:
                raise UnsupportedConstruct(f"{head} of this form")


class _Failure(Exception):
    def __init__(self, statement: Statement, reason: str, error: Error | None = None) -> None:
        super().__init__(reason)
        head = " ".join(statement.text.split())
        self.head = head if len(head) <= 80 else head[:77] + "..."
        self.line, self.reason, self.error = statement.line, reason, error


def store_database(model: SqlServerModel, name: str) -> str:
    conn = store.open_sqlite(model.path)
    try:
        return store.database_name(conn, name)
    finally:
        conn.close()


def edit_variables(text: str, values: Mapping[str, Any]) -> str:
    """A script of sql/sqlserver with its ``EDIT HERE`` variables set: the first ``SET @name = ...;`` of each name
    rewritten with the value (None: NULL; strings as N'...' literals)."""
    for name, setting in values.items():
        literal = "NULL" if setting is None else str(setting) if isinstance(setting, int) else \
            "N'" + str(setting).replace("'", "''") + "'"
        pattern = re.compile(rf"^(\s*SET\s+@{re.escape(name)}\s*=\s*)[^;\n]*;", re.IGNORECASE | re.MULTILINE)
        text, count = pattern.subn(lambda m, v=literal: m.group(1) + v + ";", text, count=1)  # type: ignore[misc]
        if not count:
            raise ValueError(f"the script sets no variable @{name}")
    return text
