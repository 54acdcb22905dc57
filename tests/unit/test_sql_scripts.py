"""The DBA scripts in sql/sqlserver/: valid T-SQL (sqlglot), the promised procedures, guards, no passwords."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

SQL_DIR = Path(__file__).resolve().parents[2] / "sql" / "sqlserver"
SCRIPT_NAMES = [
    "01_enable_cdc_database.sql",
    "02_enable_cdc_database_rds.sql",
    "03_enable_cdc_table.sql",
    "04_tune_capture_job.sql",
    "05_cdckit_login_and_role.sql",
    "06_signal_table.sql",
    "07_verify.sql",
    "08_schema_change_new_capture_instance.sql",
]
PLACEHOLDER = "<REPLACE_WITH_STRONG_PASSWORD>"


def read(name: str) -> str:
    return (SQL_DIR / name).read_text(encoding="utf-8")


# -- lexing: comments out, strings kept (dynamic SQL counts), offsets preserved ------------------------------
def lex(text: str) -> tuple[str, str]:
    """(code, masked): comments blanked in both; string contents also blanked in ``masked``."""
    code, masked = list(text), list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            code[i:end] = masked[i:end] = " " * (end - i)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank = [c if c == "\n" else " " for c in text[i:end]]
            code[i:end] = masked[i:end] = blank
            i = end
        elif text[i] == "'":
            j = i + 1
            while j < n:
                if text[j] == "'" and text.startswith("''", j):
                    j += 2
                elif text[j] == "'":
                    break
                else:
                    j += 1
            masked[i + 1:j] = " " * (j - i - 1)
            i = j + 1
        else:
            i += 1
    return "".join(code), "".join(masked)


def split_batches(text: str) -> list[str]:
    """sqlcmd/SSMS batches: split on lines that are exactly GO (case-insensitive)."""
    batches: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip().upper() == "GO":
            batches.append([])
        else:
            batches[-1].append(line)
    return ["\n".join(lines) for lines in batches if "\n".join(lines).strip()]


# -- guards: which IF conditions enclose a position ------------------------------------------------------------
@dataclass
class _Frame:
    cond: str | None
    kind: str  # "block" (BEGIN...END), "single" (IF cond <one statement>;), "case"
    depth: int = 0


_TOKEN = re.compile(
    r"\(|\)|;|\b(IF|ELSE|BEGIN|END|CASE|TRY|CATCH|TRAN|TRANSACTION|EXEC|EXECUTE|PRINT|RAISERROR|SET|RETURN|"
    r"INSERT|UPDATE|DELETE|CREATE|ALTER|GRANT|DECLARE|SELECT|BREAK|CONTINUE|WHILE)\b",
    re.IGNORECASE,
)
_STATEMENTS = {"EXEC", "EXECUTE", "PRINT", "RAISERROR", "SET", "RETURN", "INSERT", "UPDATE", "DELETE", "CREATE",
               "ALTER", "GRANT", "DECLARE", "SELECT", "BREAK", "CONTINUE", "WHILE"}


def enclosing_conditions(text: str) -> tuple[str, list[tuple[int, list[str]]]]:
    """Code without comments, and after each keyword token the IF conditions in force (ELSE keeps its IF's)."""
    code, masked = lex(text)
    tokens = list(_TOKEN.finditer(masked))
    stack: list[_Frame] = []
    states: list[tuple[int, list[str]]] = []
    pending: tuple[int, int, str] | None = None  # (condition start, paren depth, inherited condition)
    else_cond: str | None = None
    last_closed: str | None = None
    depth = 0
    for k, tok in enumerate(tokens):
        word = tok.group(0).upper()
        following = tokens[k + 1].group(0).upper() if k + 1 < len(tokens) else ""
        if word == "(":
            depth += 1
        elif word == ")":
            depth -= 1
        elif word == ";":
            while stack and stack[-1].kind == "single" and stack[-1].depth == depth:
                last_closed = stack.pop().cond
        elif word == "IF":
            pending = (tok.end(), depth, else_cond or "")
            else_cond = None
        elif word == "ELSE" and depth == 0 and not (stack and stack[-1].kind == "case"):
            else_cond = last_closed or ""
        elif word == "CASE":
            stack.append(_Frame(None, "case", depth))
        elif word == "BEGIN":
            if following in {"TRAN", "TRANSACTION"}:
                pass
            elif following in {"TRY", "CATCH"}:
                stack.append(_Frame(None, "block"))
            elif pending is not None and pending[1] == depth:
                stack.append(_Frame(pending[2] + " " + code[pending[0]:tok.start()], "block"))
                pending = None
            elif else_cond is not None:
                stack.append(_Frame(else_cond, "block"))
                else_cond = None
            else:
                stack.append(_Frame(None, "block"))
        elif word == "END":
            while stack and stack[-1].kind == "single":
                stack.pop()
            if stack:
                last_closed = stack.pop().cond
        elif word in _STATEMENTS:
            if pending is not None and pending[1] == depth:
                stack.append(_Frame(pending[2] + " " + code[pending[0]:tok.start()], "single", depth))
                pending = None
            elif else_cond is not None:
                stack.append(_Frame(else_cond, "single", depth))
                else_cond = None
        states.append((tok.start(), [f.cond for f in stack if f.cond]))
    return code, states


# Statements that create or enable something, and what the IF guarding them must look at.
ENABLING = [
    (r"\bEXEC(?:UTE)?\s+sys\.sp_cdc_enable_db\b", r"is_cdc_enabled"),
    (r"\bEXEC(?:UTE)?\s+msdb\.dbo\.rds_cdc_enable_db\b", r"is_cdc_enabled"),
    (r"\bEXEC(?:UTE)?\s+sys\.sp_cdc_enable_table\b", r"is_tracked_by_cdc|cdc\.change_tables"),
    (r"\bEXEC(?:UTE)?\s+sys\.sp_cdc_disable_table\b", r"cdc\.change_tables"),
    (r"\bEXEC(?:UTE)?\s+sys\.sp_cdc_change_job\b", r"cdc_jobs"),
    (r"\bEXEC(?:UTE)?\s+sys\.sp_cdc_(?:stop|start)_job\b", r"cdc_jobs"),
    (r"\bCREATE\s+TABLE\b", r"OBJECT_ID"),
    (r"\bCREATE\s+LOGIN\b", r"server_principals|SUSER_ID"),
    (r"\bCREATE\s+USER\b", r"database_principals|DATABASE_PRINCIPAL_ID"),
    (r"\bCREATE\s+ROLE\b", r"database_principals|DATABASE_PRINCIPAL_ID"),
    (r"\bADD\s+MEMBER\b", r"database_role_members|IS_ROLEMEMBER"),
    (r"\bINSERT\s+INTO\s+dbo\.debezium_signal\b", r"debezium_signal"),
    (r"\bEXEC(?:UTE)?\s+sp_configure\s+N?'max text repl size'", r"max text repl size \(B\)"),
]


def unguarded(text: str) -> tuple[int, list[str]]:
    """(number of enabling statements, the ones not inside an IF that checks the matching catalog state)."""
    code, states = enclosing_conditions(text)
    found, problems = 0, []
    for statement, guard in ENABLING:
        for match in re.finditer(statement, code, re.IGNORECASE):
            found += 1
            conditions = next((conds for start, conds in reversed(states) if start <= match.start()), [])
            if not any(re.search(guard, cond, re.IGNORECASE) for cond in conditions):
                line = code.count("\n", 0, match.start()) + 1
                problems.append(f"line {line}: {match.group(0)!r} not guarded by an IF on /{guard}/")
    return found, problems


# -- tests -----------------------------------------------------------------------------------------------------
def test_all_scripts_and_readme_exist() -> None:
    present = sorted(p.name for p in SQL_DIR.glob("*.sql"))
    assert present == SCRIPT_NAMES
    readme = (SQL_DIR / "README.md").read_text(encoding="utf-8")
    for name in SCRIPT_NAMES:
        assert name in readme
    for permission in ("sysadmin", "db_owner", "master user", "VIEW SERVER STATE", "VIEW DATABASE STATE"):
        assert permission in readme


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_batch_parses_as_tsql(name: str) -> None:
    batches = split_batches(read(name))
    assert batches, "no batches"
    for number, batch in enumerate(batches, 1):
        expressions = sqlglot.parse(batch, read="tsql")  # raises ParseError on anything sqlglot cannot read
        parsed = [e for e in expressions if e is not None]
        assert parsed, f"batch {number} is empty"
        assert all(isinstance(e, exp.Expression) for e in parsed)
        # Some valid T-SQL (CREATE LOGIN, GRANT ... ON SCHEMA::, PRINT, TRY/CATCH) comes back as exp.Command;
        # that is accepted, but every batch must contain something sqlglot really understood.
        assert any(not isinstance(e, exp.Command) for e in parsed), f"batch {number}: only Command fallbacks"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_header_documents_the_script_and_its_variables(name: str) -> None:
    text = read(name)
    assert text.startswith("/*")
    header = text[: text.index("*/")]
    for section in ("What it does", "Requires", "Edit"):
        assert section in header, section
    if name != "07_verify.sql":
        assert "Idempotent" in header
    assert "EDIT HERE" in text
    required = {
        "01": ["@database"],
        "02": ["@database"],
        "03": ["@database", "@schema", "@table", "@role_name", "@capture_instance", "@filegroup_name"],
        "04": ["@database", "@pollinginterval", "@maxtrans", "@maxscans", "@retention_minutes"],
        "05": ["@database", "@login", "@password", "@user_name", "@role_name"],
        "06": ["@database", "@role_name", "@capture_instance", "@filegroup_name"],
        "07": ["@database"],
        "08": ["@database", "@schema", "@table", "@old_capture_instance", "@new_capture_instance", "@role_name"],
    }[name[:2]]
    code, _ = lex(text)
    first_if = re.search(r"^\s*IF\b", code, re.IGNORECASE | re.MULTILINE)
    top = code[: first_if.start()] if first_if else code
    for variable in required:
        assert re.search(rf"\bDECLARE\s+{variable}\b", top, re.IGNORECASE), f"{variable} not declared at the top"
        assert re.search(rf"\bSET\s+{variable}\s*=", top, re.IGNORECASE), f"{variable} not set at the top"


KEY_PATTERNS = {
    "01_enable_cdc_database.sql": [r"sys\.sp_cdc_enable_db", r"is_cdc_enabled\s*=\s*0", r"sysadmin",
                                   r"SQL Server Agent",
                                   # a captured value over 64 KB otherwise fails the application's statement (7139)
                                   r"SET @max_text_repl_size = -1;",
                                   r"EXEC sp_configure N'max text repl size', @max_text_repl_size;\s+RECONFIGURE;",
                                   r"7139"],
    "02_enable_cdc_database_rds.sql": [r"EXEC\s+msdb\.dbo\.rds_cdc_enable_db\s+@database", r"is_cdc_enabled\s*=\s*0",
                                       r"master user", r"parameter group", r"max text repl size \(B\)", r"7139"],
    "03_enable_cdc_table.sql": [r"EXEC\s+sys\.sp_cdc_enable_table", r"@source_schema\s*=", r"@source_name\s*=",
                                r"@role_name\s*=\s*@role_name", r"@capture_instance\s*=\s*@capture_instance",
                                r"@supports_net_changes\s*=\s*0", r"@filegroup_name\s*=\s*@filegroup_name",
                                r"is_tracked_by_cdc", r"cdc\.change_tables", r"TWO capture instances"],
    "04_tune_capture_job.sql": [r"EXEC\s+sys\.sp_cdc_change_job", r"@job_type\s*=\s*N'capture'",
                                r"@pollinginterval\s*=", r"@maxtrans\s*=", r"@maxscans\s*=",
                                r"@job_type\s*=\s*N'cleanup'", r"@retention\s*=", r"@maxtrans \* @maxscans",
                                r"EXEC\s+sys\.sp_cdc_stop_job", r"EXEC\s+sys\.sp_cdc_start_job",
                                r"msdb\.dbo\.cdc_jobs",
                                # RDS re-creates the jobs after a Multi-AZ failover from these, not from cdc_jobs
                                r"IF DB_ID\(N'rdsadmin'\) IS NOT NULL",
                                r"rds_set_configuration N'cdc_capture_pollinginterval', @pollinginterval",
                                r"rds_set_configuration N'cdc_capture_maxtrans', @maxtrans",
                                r"rds_set_configuration N'cdc_capture_maxscans', @maxscans",
                                r"rds_set_configuration N'cdc_cleanup_retention', @retention_minutes"],
    "05_cdckit_login_and_role.sql": [r"CREATE LOGIN", r"CHECK_POLICY\s*=\s*ON", r"CREATE USER", r"ADD MEMBER",
                                     r"GRANT SELECT ON SCHEMA::cdc", r"GRANT SELECT ON ", r"VIEW DATABASE STATE",
                                     r"VIEW SERVER STATE", r"sys\.dm_server_services", re.escape(PLACEHOLDER)],
    "06_signal_table.sql": [r"CREATE TABLE dbo\.debezium_signal\s*\(\s*id\s+varchar\(42\)\s+NOT NULL PRIMARY KEY,"
                            r"\s*type\s+varchar\(32\)\s+NOT NULL,\s*data\s+varchar\(2048\)\s+NULL\s*\)",
                            r"EXEC\s+sys\.sp_cdc_enable_table", r"@source_name\s*=\s*N'debezium_signal'",
                            r"@supports_net_changes\s*=\s*0", r"INSERT INTO dbo\.debezium_signal \(id, type, data\)",
                            r"'execute-snapshot'", r"'stop-snapshot'", r"data-collections", r"additional-condition",
                            r"\"type\": \"incremental\""],
    "07_verify.sql": [r"EXEC\s+sys\.sp_cdc_help_change_data_capture", r"is_cdc_enabled", r"is_tracked_by_cdc",
                      r"cdc\.change_tables", r"cdc\.captured_columns", r"start_lsn", r"sys\.fn_cdc_get_min_lsn\(",
                      r"sys\.fn_cdc_get_max_lsn\(\)", r"msdb\.dbo\.cdc_jobs", r"sys\.dm_server_services",
                      r"sys\.dm_cdc_log_scan_sessions", r"\blatency\b", r"Healthy"],
    "08_schema_change_new_capture_instance.sql": [r"EXEC\s+sys\.sp_cdc_enable_table",
                                                  r"@capture_instance\s*=\s*@new_capture_instance",
                                                  r"N'dbo_customers_v2'", r"@supports_net_changes\s*=\s*0",
                                                  r"EXEC\s+sys\.sp_cdc_disable_table",
                                                  r"@capture_instance\s*=\s*@old_capture_instance",
                                                  r"ALTER TABLE", r"gap", r"NULL <-> NOT NULL"],
}


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_script_contains_its_key_procedure(name: str) -> None:
    text = read(name)
    for pattern in KEY_PATTERNS[name]:
        assert re.search(pattern, text), pattern


def test_procedures_run_in_the_right_order() -> None:
    tune, _ = lex(read("04_tune_capture_job.sql"))
    assert tune.index("sys.sp_cdc_change_job") < tune.index("sys.sp_cdc_stop_job") < tune.index(
        "sys.sp_cdc_start_job")
    evolve, _ = lex(read("08_schema_change_new_capture_instance.sql"))
    assert evolve.index("sys.sp_cdc_enable_table") < evolve.index("sys.sp_cdc_disable_table")


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_net_changes_are_never_enabled_and_db_owner_never_granted(name: str) -> None:
    code, _ = lex(read(name))
    assert not re.search(r"@supports_net_changes\s*=\s*1", code)
    assert not re.search(r"ADD\s+MEMBER\b[^;]*db_owner|ALTER\s+ROLE\s+\[?db_owner|sp_addrolemember\s+N?'db_owner'",
                         code, re.IGNORECASE)


@pytest.mark.parametrize("name", [*SCRIPT_NAMES, "README.md"])
def test_no_real_password(name: str) -> None:
    text = read(name)
    literals = re.findall(r"password\s*=\s*N?'([^']+)'", text, re.IGNORECASE)  # PASSWORD = N'...'
    literals += re.findall(r"password\s*=\s*N?''([^']+)''", text, re.IGNORECASE)  # the same inside dynamic SQL
    assert all(value == PLACEHOLDER for value in literals), literals
    assert not re.search(r"p@ss|passw0rd|password1|changeme|s3cret|yourstrong|\s-P\s+\S", text, re.IGNORECASE)


def test_login_script_refuses_the_placeholder() -> None:
    code, _ = lex(read("05_cdckit_login_and_role.sql"))
    assert re.search(r"SET\s+@password\s*=\s*N'" + re.escape(PLACEHOLDER) + "'", code)
    refusal = code.index("@password LIKE N'<%>'")
    assert refusal < code.index("CREATE LOGIN")
    assert "RETURN;" in code[refusal:code.index("CREATE LOGIN")]


@pytest.mark.parametrize("name", [n for n in SCRIPT_NAMES if n != "07_verify.sql"])
def test_every_enabling_statement_is_guarded(name: str) -> None:
    found, problems = unguarded(read(name))
    assert found, "no enabling statement found: the check would be vacuous"
    assert not problems, problems


def test_verify_script_changes_nothing() -> None:
    code, _ = lex(read("07_verify.sql"))
    found, _ = unguarded(read("07_verify.sql"))
    assert found == 0
    assert not re.search(r"\b(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|GRANT)\b", code, re.IGNORECASE)


@pytest.mark.parametrize(("sql", "ok"), [
    ("EXEC sys.sp_cdc_enable_db;", False),
    ("IF @x = 1 BEGIN EXEC sys.sp_cdc_enable_db; END", False),
    ("IF EXISTS (SELECT 1 FROM sys.databases WHERE is_cdc_enabled = 0) BEGIN PRINT 'x'; END\n"
     "EXEC sys.sp_cdc_enable_db;", False),
    ("IF EXISTS (SELECT 1 FROM sys.databases WHERE is_cdc_enabled = 0) PRINT 'x';\nEXEC sys.sp_cdc_enable_db;", False),
    ("-- IF is_cdc_enabled = 0\nEXEC sys.sp_cdc_enable_db;", False),
    ("IF EXISTS (SELECT 1 FROM sys.databases WHERE is_cdc_enabled = 0) EXEC sys.sp_cdc_enable_db;", True),
    ("IF EXISTS (SELECT 1 FROM sys.databases WHERE is_cdc_enabled = 0)\nBEGIN\n"
     "    SELECT CASE WHEN 1 = 1 THEN 1 ELSE 0 END;\n    EXEC sys.sp_cdc_enable_db;\nEND", True),
    ("IF EXISTS (SELECT 1 FROM sys.databases WHERE is_cdc_enabled = 1) BEGIN PRINT 'done'; END\n"
     "ELSE BEGIN EXEC sys.sp_cdc_enable_db; END", True),
    ("IF OBJECT_ID(N'dbo.t') IS NULL BEGIN SET @s = N'CREATE LOGIN x'; END", False),
])
def test_guard_check_itself(sql: str, ok: bool) -> None:
    found, problems = unguarded(sql)
    assert found == 1
    assert (not problems) is ok, problems


def test_batches_split_on_go_lines_only() -> None:
    text = "SELECT 1;\nGO\nSELECT 'GO';\n  go  \nSELECT 2 AS going;\nGO"
    assert split_batches(text) == ["SELECT 1;", "SELECT 'GO';", "SELECT 2 AS going;"]
