"""The SQL Server container as the docker suite sees it: connections, the repository's DBA scripts, waiting
for the capture job, cdckit properties for the server, and reading the files sink back.

Nothing here imports pyodbc at module level: the conftest decides whether the suite can run before anything
needs the ODBC driver.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdckit.config import Config, validate
from cdckit.config.properties import SQLSERVER_CONNECTOR
from cdckit.dialect.sqlserver.connection import connection_string
from readback import payload as payload
from readback import records as records
from readback import replay as replay

REPOSITORY = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPOSITORY / "containers" / "lab" / "compose.yml"
DBA_SCRIPTS = REPOSITORY / "sql" / "sqlserver"
DATABASE = "testDB"
TOPIC_PREFIX = "it"
# The same default as containers/lab/compose.yml; both read MSSQL_SA_PASSWORD first. Test-only.
DEFAULT_SA_PASSWORD = "Cdckit_Test_Only_2022"
# A CDC-enabled table no test captures: a row written to it and seen in its change table proves the capture
# job has read the log past every earlier commit (it reads the log in order).
SENTINEL = "cdckit_sentinel"
PREFERRED_DRIVERS = ("ODBC Driver 18 for SQL Server", "ODBC Driver 17 for SQL Server")

_names = itertools.count(1)


def sa_password() -> str:
    return os.environ.get("MSSQL_SA_PASSWORD") or DEFAULT_SA_PASSWORD


def sqlserver_drivers(drivers: Iterable[str]) -> list[str]:
    return [driver for driver in drivers if "SQL Server" in driver]


def choose_driver(drivers: Iterable[str]) -> str:
    """CDCKIT_TEST_ODBC_DRIVER if set, else Microsoft's driver 18, 17, else any driver naming SQL Server."""
    found = sqlserver_drivers(drivers)
    wanted = os.environ.get("CDCKIT_TEST_ODBC_DRIVER")
    if wanted:
        return wanted
    for preferred in PREFERRED_DRIVERS:
        if preferred in found:
            return preferred
    return found[0]


def unique_name(base: str) -> str:
    """A table name no other test of this run uses (all tests share one database)."""
    return f"{base}_{next(_names)}"


# -- the DBA scripts -----------------------------------------------------------------------------------------
def split_batches(text: str) -> list[str]:
    """T-SQL batches of a script: ``GO`` is sqlcmd's separator, not T-SQL, so it is split on here."""
    batches = re.split(r"(?im)^[ \t]*GO[ \t]*(?:--[^\n]*)?$", text)
    return [batch.strip() for batch in batches if batch.strip()]


def tsql_literal(value: str | None) -> str:
    return "NULL" if value is None else "N'" + value.replace("'", "''") + "'"


def render_script(path: Path, values: Mapping[str, str | None]) -> list[str] | None:
    """The script's batches with each ``SET @name = ...`` (or ``DECLARE @name type = ...``) of the EDIT HERE
    block given ``values``; None when the script is missing or does not declare one of them (not finished yet),
    so the caller runs the equivalent statements itself."""
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    for name, value in values.items():
        pattern = re.compile(
            rf"(?im)^([ \t]*(?:SET[ \t]+@{name}|DECLARE[ \t]+@{name}[ \t]+[\w()]+(?:[ \t]+AS)?)\b[ \t]*=[ \t]*)"
            r"(?:N?'(?:[^']|'')*'|NULL)")
        literal = tsql_literal(value)

        def substitute(match: re.Match[str], literal: str = literal) -> str:
            return match.group(1) + literal

        text, count = pattern.subn(substitute, text, count=1)
        if count != 1:
            return None
    return split_batches(text)


# -- the server ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SqlServerLab:
    """One SQL Server container: sa connections to it and cdckit properties pointing at it."""

    host: str
    port: int
    password: str
    driver: str
    database: str = DATABASE

    # connections ---------------------------------------------------------------------------------------------
    def server_properties(self) -> dict[str, str]:
        return {
            "connector.class": SQLSERVER_CONNECTOR,
            "database.hostname": self.host,
            "database.port": str(self.port),
            "database.user": "sa",
            "database.password": self.password,
            "database.names": self.database,
            "database.encrypt": "true",
            "database.trustServerCertificate": "true",  # the container's certificate is self-signed
            "database.driver": self.driver,
        }

    def connect(self, database: str | None = None, autocommit: bool = True) -> Any:
        import pyodbc

        text = connection_string(self.server_properties(), database or self.database)
        return pyodbc.connect(text, autocommit=autocommit, timeout=15)

    def responds(self) -> bool:
        """True once the server accepts an sa login and answers a query (wait_until_responsive's check)."""
        try:
            conn = self.connect("master")
        except Exception:
            return False
        try:
            return bool(conn.cursor().execute("SELECT 1").fetchone()[0] == 1)
        except Exception:
            return False
        finally:
            conn.close()

    def execute(self, *statements: str | tuple[str, Sequence[Any]], database: str | None = None) -> None:
        """Run each statement (or ``(statement, parameters)``) in its own autocommitted batch; every result set
        and message is drained so an error raised late in a batch is not lost."""
        conn = self.connect(database)
        try:
            cursor = conn.cursor()
            for statement in statements:
                text, parameters = (statement, ()) if isinstance(statement, str) else statement
                cursor.execute(text, *parameters)
                while cursor.nextset():
                    pass
        finally:
            conn.close()

    def fetch(self, query: str, *parameters: Any, database: str | None = None) -> list[tuple[Any, ...]]:
        conn = self.connect(database)
        try:
            return [tuple(row) for row in conn.cursor().execute(query, *parameters).fetchall()]
        finally:
            conn.close()

    def transaction(self, *statements: str, database: str | None = None) -> None:
        """All statements in ONE transaction (one commit LSN)."""
        conn = self.connect(database, autocommit=False)
        try:
            cursor = conn.cursor()
            for statement in statements:
                cursor.execute(statement)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    # CDC set-up with the repository's DBA scripts -----------------------------------------------------------
    def run_script(self, name: str, values: Mapping[str, str | None], database: str) -> bool:
        batches = render_script(DBA_SCRIPTS / name, values)
        if batches is None:
            return False
        self.execute(*batches, database=database)
        return True

    def enable_cdc_database(self, database: str | None = None) -> None:
        database = database or self.database
        if not self.run_script("01_enable_cdc_database.sql", {"database": database}, "master"):
            self.execute((f"IF (SELECT is_cdc_enabled FROM sys.databases WHERE name = ?) = 0 "
                          f"EXEC [{database}].sys.sp_executesql N'EXEC sys.sp_cdc_enable_db'", (database,)),
                         database="master")
        enabled = self.fetch("SELECT is_cdc_enabled FROM sys.databases WHERE name = ?", database, database="master")
        assert enabled == [(True,)], f"CDC is not enabled on {database} after 01_enable_cdc_database.sql"

    def enable_cdc_table(self, table: str, schema: str = "dbo", database: str | None = None) -> str:
        """Enable CDC for a table with 03_enable_cdc_table.sql; returns the capture instance."""
        database = database or self.database
        instance = f"{schema}_{table}"
        values: dict[str, str | None] = {
            "database": database, "schema": schema, "table": table, "role_name": "cdc_reader",
            "capture_instance": instance, "filegroup_name": None, "index_name": None,
            "captured_column_list": None,
        }
        if not self.run_script("03_enable_cdc_table.sql", values, database):
            self.execute(("EXEC sys.sp_cdc_enable_table @source_schema = ?, @source_name = ?, "
                          "@role_name = N'cdc_reader', @capture_instance = ?, @supports_net_changes = 0",
                          (schema, table, instance)), database=database)
        tracked = self.fetch("SELECT is_tracked_by_cdc FROM sys.tables WHERE object_id = OBJECT_ID(?)",
                             f"[{schema}].[{table}]", database=database)
        assert tracked == [(True,)], f"CDC is not enabled on {schema}.{table} after 03_enable_cdc_table.sql"
        return instance

    def create_table(self, base: str, columns: str, *statements: str, database: str | None = None) -> str:
        """Create ``dbo.<base>_<n>`` with ``columns``, run ``statements`` (``{table}`` is replaced by the
        table's name) and enable CDC for it; returns the table's name."""
        table = unique_name(base)
        self.execute(f"CREATE TABLE dbo.{table} ({columns})",
                     *(statement.format(table=table) for statement in statements), database=database)
        self.enable_cdc_table(table, database=database)
        return table

    def prepare(self) -> None:
        """testDB with CDC on, snapshot isolation allowed, the sentinel table, a capture job polling every
        second (its default is 5 s)."""
        self.execute(f"IF DB_ID(N'{self.database}') IS NULL CREATE DATABASE [{self.database}]", database="master")
        self.execute(f"ALTER DATABASE [{self.database}] SET ALLOW_SNAPSHOT_ISOLATION ON", database="master")
        self.enable_cdc_database()
        if not self.fetch("SELECT 1 FROM sys.tables WHERE name = ?", SENTINEL):
            self.execute(f"CREATE TABLE dbo.{SENTINEL} (token uniqueidentifier PRIMARY KEY)")
            self.enable_cdc_table(SENTINEL)
        self.execute("EXEC sys.sp_cdc_change_job @job_type = N'capture', @pollinginterval = 1")
        self._restart_capture_job()
        self.wait_for_capture(timeout=180)

    def _restart_capture_job(self) -> None:
        """Restart the capture job so it picks up the new polling interval. Best effort: the Agent refuses to
        stop a job that is not running or to start one still stopping, and the default interval works too."""
        with contextlib.suppress(Exception):  # not running yet
            self.execute("EXEC sys.sp_cdc_stop_job @job_type = N'capture'")
        deadline = time.monotonic() + 30
        while True:
            try:
                self.execute("EXEC sys.sp_cdc_start_job @job_type = N'capture'")
                return
            except Exception:
                if time.monotonic() > deadline:
                    return  # still running: wait_for_capture shows whether capture works
                time.sleep(1)

    def wait_for_capture(self, timeout: float = 90) -> None:
        """Wait until the capture job has copied every change committed so far into the change tables."""
        token = str(uuid.uuid4())
        self.execute((f"INSERT INTO dbo.{SENTINEL} (token) VALUES (?)", (token,)))
        deadline = time.monotonic() + timeout
        query = f"SELECT COUNT(*) FROM cdc.[dbo_{SENTINEL}_CT] WHERE token = ?"
        while self.fetch(query, token)[0][0] == 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"the CDC capture job did not reach a commit within {timeout} s: is the SQL "
                                     f"Server Agent running (MSSQL_AGENT_ENABLED=true)?")
            time.sleep(0.25)

    def max_lsn(self) -> bytes | None:
        value = self.fetch("SELECT sys.fn_cdc_get_max_lsn()")[0][0]
        return bytes(value) if value is not None else None

    def agent_running(self) -> bool | None:
        """What sys.dm_server_services says of the SQL Server Agent (None: no row for it, or no such view)."""
        try:
            rows = self.fetch("SELECT status FROM sys.dm_server_services "
                              "WHERE servicename LIKE N'SQL Server Agent (%'", database="master")
        except Exception:
            return None
        return None if not rows else rows[0][0] == 4

    # cdckit ----------------------------------------------------------------------------------------------
    def properties(self, workdir: Path, tables: Sequence[str], **overrides: str) -> dict[str, str]:
        """cdckit properties for this server capturing ``dbo.<table>`` for each of ``tables``; an override's
        ``__`` stands for ``.`` (so ``max__batch__size="10"`` works as a keyword)."""
        properties = {
            **self.server_properties(),
            "topic.prefix": TOPIC_PREFIX,
            "table.include.list": ",".join(rf"dbo\.{table}" for table in tables),
            "cdckit.output.path": str(workdir / "out"),
            "cdckit.checkpoint.location": str(workdir / "checkpoint"),
        }
        properties.update({key.replace("__", "."): value for key, value in overrides.items()})
        return properties

    def config(self, workdir: Path, tables: Sequence[str], **overrides: str) -> Config:
        return validate(self.properties(workdir, tables, **overrides))


# -- reading what cdckit wrote -------------------------------------------------------------------------------
def topic(table: str, database: str = DATABASE, schema: str = "dbo") -> str:
    """Debezium's SQL Server topic: ``<topic.prefix>.<database>.<schema>.<table>``."""
    return f"{TOPIC_PREFIX}.{database}.{schema}.{table}"


def position(value: Mapping[str, Any]) -> tuple[int, str, str, int]:
    """An event's place in the stream: snapshot first, then (commit_lsn, change_lsn, event_serial_no). The LSN
    strings are fixed-width hexadecimal, so they compare as the LSNs do."""
    source = value["source"]
    streamed = source["snapshot"] in (False, "false")
    return (1 if streamed else 0, source["commit_lsn"] or "", source["change_lsn"] or "",
            source["event_serial_no"] or 0)


def positions_by_key(config: Config, name: str) -> dict[tuple[Any, ...], list[tuple[int, str, str, int]]]:
    """Per key, the positions of its data events in file order."""
    seen: dict[tuple[Any, ...], list[tuple[int, str, str, int]]] = {}
    for record in records(config, name):
        value = payload(record["value"])
        if value is not None:
            seen.setdefault(tuple(payload(record["key"]).values()), []).append(position(value))
    return seen


def stream_positions(config: Config, name: str) -> list[tuple[str, str, int, str]]:
    """(commit_lsn, change_lsn, event_serial_no, op) of every streamed data event, in file order."""
    found = []
    for record in records(config, name):
        value = payload(record["value"])
        if value is not None and value["op"] != "r":
            source = value["source"]
            found.append((source["commit_lsn"], source["change_lsn"], source["event_serial_no"], value["op"]))
    return found
