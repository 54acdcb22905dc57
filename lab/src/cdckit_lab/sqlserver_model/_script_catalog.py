"""What a script's conditions and SELECT assignments may read: catalog functions (DB_ID, DB_NAME, OBJECT_ID,
SCHEMA_ID, QUOTENAME, SERVERPROPERTY, IS_SRVROLEMEMBER, DATABASE_PRINCIPAL_ID, ERROR_NUMBER, ERROR_MESSAGE) and the
rows of catalog views and table variables (``FROM`` one of them, ``WHERE`` evaluated per row)."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from typing import Any

from sqlglot import exp

from . import _sqlite as store
from ._admin import SqlServerModel
from ._errors import Error
from ._expressions import Scope, UnsupportedConstruct, truth
from ._script_ddl import object_name
from ._statements import PRODUCT_VERSION
from ._tsql import tokens

TABLE_VARIABLE = "__table_variable_"  # a table variable @t reads as the table [__table_variable_t]
# sp_cdc_change_job's settings by job type, and the defaults msdb.dbo.cdc_jobs shows (sys.sp_cdc_add_job)
JOB_DEFAULTS = {"capture": {"continuous": 1, "pollinginterval": 5, "maxtrans": 500, "maxscans": 10, "retention": 0,
                            "threshold": 0},
                "cleanup": {"continuous": 0, "pollinginterval": 0, "maxtrans": 0, "maxscans": 0, "retention": 4320,
                            "threshold": 5000}}


def server_message(error: Error) -> str:
    """A model error's message without the driver's prefix and suffix."""
    text = str(error.args[1] if len(error.args) > 1 else error)
    text = re.sub(r"^\[\w+\] \[Microsoft\]\[ODBC Driver \d+ for SQL Server\]\[SQL Server\]", "", text)
    return re.sub(r" \(SQLExecDirectW\)$", "", text)


def job_key(database: str, job_type: str) -> str:
    return f"cdc_job:{database.casefold()}:{job_type.casefold()}"


class Catalog:
    """The catalog as one script statement sees it (``caught``: the error a CATCH block handles)."""

    def __init__(self, model: SqlServerModel, database: str, caught: Error | None,
                 table_variables: dict[str, list[dict[str, Any]]]) -> None:
        self.model, self.database, self.caught = model, database, caught
        self.table_variables = table_variables

    def _query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        conn = store.open_sqlite(self.model.path)
        try:
            cursor = conn.execute(sql, params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            conn.close()

    def object_id(self, name: Any, kind: Any = None) -> int | None:
        if name is None:
            return None
        parts, _ = object_name(tokens(str(name)), 0)
        if len(parts) == 3 and parts[0].casefold() != self.database.casefold():
            return None
        schema, table = (parts[-2] if len(parts) > 1 else "dbo"), parts[-1]
        found = self._query("SELECT t.object_id FROM tables t JOIN schemas s ON s.db = t.db AND s.schema_id = "
                            "t.schema_id WHERE t.db = ? AND s.name = ? AND t.name = ?", self.database, schema, table)
        return int(found[0]["object_id"]) if found else None

    def functions(self) -> dict[str, Any]:
        def db_id(name: Any = None) -> int | None:
            found = self._query("SELECT database_id FROM databases WHERE name = ?", name or self.database)
            return int(found[0]["database_id"]) if found else None

        def schema_id(name: Any) -> int | None:
            found = self._query("SELECT schema_id FROM schemas WHERE db = ? AND name = ?", self.database, name)
            return int(found[0]["schema_id"]) if found else None

        def quotename(text: Any, quote: Any = "[") -> str | None:
            if text is None:
                return None
            if quote in ("[", "]"):
                return "[" + str(text).replace("]", "]]") + "]"
            return str(quote) + str(text).replace(str(quote), str(quote) * 2) + str(quote)

        def serverproperty(name: Any) -> Any:
            properties = {"productversion": PRODUCT_VERSION, "edition": "Developer Edition (64-bit)",
                          "resourcelastupdatedatetime": dt.datetime(2022, 10, 8, 6, 31, 33)}
            return properties.get(str(name).casefold())

        caught = self.caught
        return {
            "db_id": db_id, "db_name": lambda *_: self.database, "object_id": self.object_id,
            "schema_id": schema_id, "quotename": quotename, "is_srvrolemember": lambda *_: 1,
            "is_member": lambda *_: 1, "serverproperty": serverproperty,
            "database_principal_id": lambda *_: None,  # principals are not modelled
            "error_number": lambda: None if caught is None else caught.number,
            "error_message": lambda: None if caught is None else server_message(caught),
        }

    def rows(self, select: exp.Select, scope: Scope) -> list[dict[str, Any]]:
        """The rows of ``select``'s one source that satisfy its WHERE (its select list is the caller's)."""
        source = select.args.get("from") or select.args.get("from_")
        if source is None or select.args.get("joins") or not isinstance(source.this, exp.Table):
            raise UnsupportedConstruct(f"a query other than one catalog view: {select.sql('tsql')}")
        where = select.args.get("where")
        return [row for row in self._view(source.this)
                if where is None or truth(where.this, replace(scope, row=row)) is True]

    def _view(self, table: exp.Table) -> list[dict[str, Any]]:
        db = self.database
        if table.name.startswith(TABLE_VARIABLE):
            return self.table_variables[table.name[len(TABLE_VARIABLE):]]
        view = f"{table.db}.{table.name}".casefold()
        if view == "sys.databases":
            return self._query("SELECT name, database_id, is_cdc_enabled FROM databases")
        if view == "sys.tables":
            return self._query("SELECT t.object_id, t.name, t.schema_id, t.is_ms_shipped, EXISTS (SELECT 1 FROM "
                               "change_tables c WHERE c.db = t.db AND c.source_object_id = t.object_id) AS "
                               "is_tracked_by_cdc FROM tables t WHERE t.db = ?", db)
        if view == "sys.schemas":
            return self._query("SELECT name, schema_id FROM schemas WHERE db = ?", db)
        if view == "sys.filegroups":
            return [{"name": "PRIMARY", "data_space_id": 1, "is_default": 1}]
        if view == "sys.configurations":
            size = self._query("SELECT v FROM server WHERE k = 'max text repl size'")
            setting = 65536 if not size or size[0]["v"] is None else int(size[0]["v"])
            return [{"name": "max text repl size (B)", "value": setting, "value_in_use": setting}]
        if view in ("sys.server_principals", "sys.database_principals", "sys.database_role_members",
                    "sys.database_permissions"):
            return []  # logins, users, roles and permissions are not modelled
        if view == "cdc.change_tables":
            return self._query("SELECT capture_instance, object_id, source_object_id, start_lsn, create_date FROM "
                               "change_tables WHERE db = ?", db)
        if view == "dbo.cdc_jobs" and (table.catalog or "").casefold() == "msdb":
            return self._jobs()
        raise UnsupportedConstruct(f"the catalog view {view}")

    def _jobs(self) -> list[dict[str, Any]]:
        found = self._query("SELECT database_id, is_cdc_enabled FROM databases WHERE name = ?", self.database)
        if not found or not found[0]["is_cdc_enabled"]:
            return []
        jobs = []
        for job_type, defaults in JOB_DEFAULTS.items():
            stored = self._query("SELECT v FROM server WHERE k = ?", job_key(self.database, job_type))
            settings = {**defaults, **(json.loads(stored[0]["v"]) if stored else {})}
            jobs.append({"database_id": found[0]["database_id"], "job_type": job_type, **settings})
        return jobs
