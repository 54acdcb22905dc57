"""T-SQL scripts run against the SQL Server model (cdckit_lab.sqlserver_model's ScriptRunner): DDL as a DBA writes
it, DML over several rows, transactions, cdckit's own sql/sqlserver scripts, and one-line refusals."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdckit_lab.sqlserver_model import SqlServerModel, replay
from cdckit_lab.sqlserver_model import _sqlite as store
from cdckit_lab.sqlserver_model._script import ScriptError, ScriptRunner, edit_variables
from cdckit_lab.sqlserver_model.replay import enable_cdc

T0 = dt.datetime(2025, 3, 4, 5, 6, 7)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sqlserver"
SQL = Path(__file__).resolve().parents[2] / "sql" / "sqlserver"

SCHEMA = """
CREATE SCHEMA shop;
GO
CREATE TYPE [dbo].[Name] FROM nvarchar(50) NULL;
CREATE TYPE [Flag] FROM bit NOT NULL;
GO
CREATE FUNCTION [dbo].[ufnLeadingZeros](@Value int)
RETURNS varchar(8)
WITH SCHEMABINDING
AS
BEGIN
    DECLARE @ReturnValue varchar(8);
    SET @ReturnValue = CONVERT(varchar(8), @Value);
    SET @ReturnValue = REPLICATE('0', 8 - DATALENGTH(@ReturnValue)) + @ReturnValue;
    RETURN (@ReturnValue);
END;
GO
CREATE TABLE [shop].[customer] (
    [id] int IDENTITY (1, 1) NOT FOR REPLICATION NOT NULL,
    [name] [Name] NOT NULL,
    [vip] [Flag],
    [created] datetime NOT NULL CONSTRAINT [DF_created] DEFAULT (GETDATE()),
    [account] AS ISNULL('AW' + [dbo].[ufnLeadingZeros]([id]), ''),
    CONSTRAINT [PK_customer] PRIMARY KEY CLUSTERED ([id] ASC)
) ON [PRIMARY];
CREATE TABLE [shop].[line] ([order_id] int NOT NULL, [line_no] smallint NOT NULL, [qty] smallint NOT NULL,
    [price] money NOT NULL, [total] AS ISNULL([price] * [qty], 0.0), [a] int NULL, [b] int NULL);
ALTER TABLE [shop].[line] WITH CHECK ADD CONSTRAINT [PK_line] PRIMARY KEY CLUSTERED ([order_id], [line_no]);
ALTER TABLE [shop].[line] ADD CONSTRAINT [FK_line] FOREIGN KEY ([order_id]) REFERENCES [shop].[customer] ([id]);
GO
"""


@pytest.fixture
def model(tmp_path: Path) -> SqlServerModel:
    server = SqlServerModel(tmp_path / "sqlserver.sqlite", clock=lambda: T0)
    server.create_database("testDB")
    return server


@pytest.fixture
def runner(model: SqlServerModel) -> ScriptRunner:
    script = ScriptRunner(model, "testDB")
    script.run(SCHEMA, "schema.sql")
    return script


def rows(model: SqlServerModel, table: str) -> list[dict[str, Any]]:
    conn = store.open_sqlite(model.path)
    try:
        return [row for _, row in store.table_rows(conn, store.table_info(conn, "testDB", "shop", table))]
    finally:
        conn.close()


def change_rows(model: SqlServerModel, table: str) -> list[tuple[bytes, int, dict[str, Any]]]:
    conn = store.open_sqlite(model.path)
    try:
        instance = store.instances(conn, "testDB", name=f"shop_{table}")[0]
        return [(bytes(lsn), operation, json.loads(data)) for lsn, operation, data in conn.execute(
            "SELECT start_lsn, operation, data FROM change_rows WHERE db = ? AND object_id = ? ORDER BY seqval, "
            "operation", ("testDB", instance.object_id))]
    finally:
        conn.close()


def test_alias_types_are_their_base_types_with_their_nullability(runner: ScriptRunner, model: SqlServerModel) -> None:
    conn = store.open_sqlite(model.path)
    info = store.table_info(conn, "testDB", "shop", "customer")
    conn.close()
    columns = {c.name: c for _, c in info.columns}
    assert (columns["name"].type_name, columns["name"].max_length, columns["name"].nullable) == ("nvarchar", 100,
                                                                                                 False)
    assert (columns["vip"].type_name, columns["vip"].nullable) == ("bit", False)
    assert columns["id"].identity and info.primary_key == ("id",)
    assert store.table_info(store.open_sqlite(model.path), "testDB", "shop", "line").primary_key == (
        "order_id", "line_no")
    assert "FOREIGN constraints" in runner.report.not_modelled


def test_defaults_identity_and_computed_columns_fill_inserted_rows(runner: ScriptRunner,
                                                                   model: SqlServerModel) -> None:
    runner.run("INSERT INTO shop.customer (name, vip) VALUES (N'Ann', 1), (N'Bob', 0);\n"
               "SET IDENTITY_INSERT shop.customer ON;\n"
               "INSERT INTO shop.customer (id, name, vip) VALUES (40, N'Cy', 0);\n"
               "SET IDENTITY_INSERT shop.customer OFF;\n"
               "INSERT INTO shop.customer (name, vip) VALUES (N'Di', 1);")
    assert [(r["id"], r["name"], r["account"], r["created"]) for r in rows(model, "customer")] == [
        (1, "Ann", "AW00000001", T0), (2, "Bob", "AW00000002", T0), (40, "Cy", "AW00000040", T0),
        (41, "Di", "AW00000041", T0)]


def test_computed_columns_are_null_in_change_tables(runner: ScriptRunner, model: SqlServerModel) -> None:
    runner.run(edit_variables((SQL / "01_enable_cdc_database.sql").read_text(), {"database": "testDB"}))
    model.enable_table("testDB", "shop", "line")
    runner.run("INSERT INTO shop.line (order_id, line_no, qty, price) VALUES (1, 1, 2, 2.50);\n"
               "UPDATE shop.line SET qty = qty + 1 WHERE order_id = 1;")
    assert rows(model, "line")[0]["total"] == Decimal("7.500000")
    assert [(operation, data["qty"], data["total"]) for _, operation, data in change_rows(model, "line")] == [
        (2, 2, None), (3, 2, None), (4, 3, None)]


def test_update_expressions_read_the_row_before_the_statement(runner: ScriptRunner, model: SqlServerModel) -> None:
    runner.run("INSERT INTO shop.line (order_id, line_no, qty, price, a, b) VALUES (1, 1, 1, 1, 10, 20), "
               "(1, 2, 5, 1, NULL, 7), (2, 1, 9, 1, 3, 4);\n"
               "UPDATE shop.line SET a = b, b = a, qty = CASE WHEN qty > 4 THEN qty * 2 ELSE -qty END "
               "WHERE order_id = 1 AND (a IS NULL OR a < b);")
    assert [(r["line_no"], r["a"], r["b"], r["qty"]) for r in rows(model, "line")] == [
        (1, 20, 10, -1), (2, 7, None, 10), (1, 3, 4, 9)]


def test_an_update_of_several_keys_is_one_deferred_update(runner: ScriptRunner, model: SqlServerModel) -> None:
    enable_cdc(runner, "testDB")
    runner.run("INSERT INTO shop.line (order_id, line_no, qty, price) VALUES (1, 1, 1, 1), (1, 2, 2, 1);\n"
               "UPDATE shop.line SET line_no = line_no + 1 WHERE order_id = 1;")
    assert sorted((r["line_no"], r["qty"]) for r in rows(model, "line")) == [(2, 1), (3, 2)]
    streamed = [(operation, data["line_no"]) for _, operation, data in change_rows(model, "line")]
    assert sorted(streamed[2:]) == [(1, 1), (1, 2), (2, 2), (2, 3)]  # deletes and inserts, no update pair


def test_a_transaction_is_one_commit_and_a_rollback_leaves_nothing(runner: ScriptRunner,
                                                                  model: SqlServerModel) -> None:
    enable_cdc(runner, "testDB")
    runner.run("BEGIN TRAN;\nINSERT INTO shop.line (order_id, line_no, qty, price) VALUES (1, 1, 1, 1);\n"
               "UPDATE shop.line SET order_id = order_id + 100 WHERE order_id = 1;\nCOMMIT;\nGO\n"
               "BEGIN TRANSACTION;\nDELETE FROM shop.line WHERE order_id > 0;\nROLLBACK TRANSACTION;")
    changes = change_rows(model, "line")
    assert [(operation, data["order_id"]) for _, operation, data in changes] == [(2, 1), (1, 1), (2, 101)]
    assert len({lsn for lsn, _, _ in changes}) == 1
    assert [r["order_id"] for r in rows(model, "line")] == [101]


def test_the_kits_scripts_enable_cdc_and_list_what_the_model_does_not_model(runner: ScriptRunner,
                                                                           model: SqlServerModel) -> None:
    assert enable_cdc(runner, "testDB") == [("shop", "customer"), ("shop", "line")]
    conn = store.open_sqlite(model.path)
    assert [i.capture_instance for i in store.instances(conn, "testDB")] == ["shop_customer", "shop_line"]
    conn.close()
    assert "CDC enabled on table [shop].[line]." in runner.report.messages
    assert "gating roles (@role_name)" in runner.report.not_modelled
    runner.run(edit_variables((SQL / "03_enable_cdc_table.sql").read_text(),
                              {"database": "testDB", "schema": "shop", "table": "line"}))
    assert runner.report.messages[-1].startswith("Table [shop].[line] already has a capture instance")
    with pytest.raises(ScriptError, match=r"^03\.sql, line \d+: RAISERROR.*: Table \[dbo\]\.\[customers\] does "
                                          r"not exist in this database\. Edit @schema / @table\. \(50000\)$"):
        runner.run((SQL / "03_enable_cdc_table.sql").read_text(), "03.sql")


def test_try_catch_sees_the_error_number(runner: ScriptRunner) -> None:
    runner.run("DECLARE @n int;\nBEGIN TRY\n  INSERT INTO shop.customer (id, name) VALUES (1, N'x');\nEND TRY\n"
               "BEGIN CATCH\n  SET @n = ERROR_NUMBER();\n  PRINT N'caught ' + CONVERT(nvarchar(10), @n);\n"
               "END CATCH")
    assert runner.report.messages[-1] == "caught 544"


@pytest.mark.parametrize(("script", "reason"), [
    ("MERGE INTO shop.line USING shop.line AS s ON 1 = 1 WHEN MATCHED THEN DELETE;", "statement MERGE"),
    ("UPDATE shop.line SET qty = 1 FROM shop.line JOIN shop.customer ON 1 = 1;", "FROM, JOIN or TOP"),
    ("CREATE TABLE shop.place (id int PRIMARY KEY, spot json NULL);", "type json"),
    ("CREATE TRIGGER shop.t ON shop.line AFTER INSERT AS BEGIN SET NOCOUNT ON; END", "CREATE TRIGGER"),
    ("UPDATE shop.customer SET account = 'x';", "cannot be modified because it is either a computed column"),
    ("UPDATE shop.line SET qty = SOUNDEX(price);", "SOUNDEX"),
])
def test_what_the_model_cannot_run_stops_the_script_in_one_line(runner: ScriptRunner, script: str,
                                                                reason: str) -> None:
    with pytest.raises(ScriptError) as raised:
        runner.run(f"PRINT 'first';\nGO\n{script}\n", "changes.sql")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("changes.sql, line 3: ") and reason in message


def test_the_fixture_scripts_run(model: SqlServerModel) -> None:
    runner = ScriptRunner(model, "testDB")
    runner.run_file(FIXTURES / "schema.sql")
    enable_cdc(runner, "testDB")
    runner.run_file(FIXTURES / "changes.sql")
    assert runner.report.rows_changed == 9 + 16
    assert len(rows(model, "customer")[0]["notes"]) == 10_000


def test_every_kit_script_runs_and_lists_what_the_model_does_not_model(model: SqlServerModel) -> None:
    runner = ScriptRunner(model, "testDB")
    runner.run("CREATE TABLE dbo.customers (id int PRIMARY KEY, country char(2) NULL);")
    enable_cdc(runner, "testDB")
    runner.run(edit_variables((SQL / "04_tune_capture_job.sql").read_text(), {"maxtrans": 1000}))
    assert runner.report.messages[-3:] == ["Capture job settings changed.", "Capture job restarted.",
                                           "Cleanup job retention changed."]
    runner.run(edit_variables((SQL / "04_tune_capture_job.sql").read_text(), {"maxtrans": 1000}))
    assert runner.report.messages[-2:] == ["Capture job already has these settings; nothing to do.",
                                           "Cleanup job retention already set (or no cleanup job); nothing to do."]
    runner.run(edit_variables((SQL / "05_cdckit_login_and_role.sql").read_text(),
                              {"password": "An0ther-Strong-Passw0rd"}))
    for name in ("06_signal_table.sql", "07_verify.sql", "08_schema_change_new_capture_instance.sql"):
        runner.run((SQL / name).read_text(), name)
    runner.run(edit_variables((SQL / "08_schema_change_new_capture_instance.sql").read_text(),
                              {"step": 2, "cdckit_switched": 1}))
    conn = store.open_sqlite(model.path)
    assert [i.capture_instance for i in store.instances(conn, "testDB")] == ["dbo_debezium_signal",
                                                                            "dbo_customers_v2"]
    conn.close()
    assert {"CREATE LOGIN", "CREATE USER", "CREATE ROLE", "ALTER ROLE", "GRANT (permissions)",
            "SQL Server Agent job settings (kept; the model's capture job runs at commit)"} <= set(
        runner.report.not_modelled)
    with pytest.raises(ScriptError, match="Set @password to a real strong password"):
        runner.run((SQL / "05_cdckit_login_and_role.sql").read_text(), "05")


def test_the_replay_entry_point_names_a_refused_script_and_exits_2(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "schema.sql"
    schema.write_text("CREATE TABLE dbo.places (id int PRIMARY KEY);\nGO\nCREATE TRIGGER dbo.t ON dbo.places "
                      "AFTER INSERT AS BEGIN SET NOCOUNT ON; END\n", encoding="utf-8")
    code = replay.main(["--schema", str(schema), "--changes", str(schema), "--work", str(tmp_path / "work")])
    assert code == 2
    assert capsys.readouterr().err == ("refused: schema.sql, line 3: CREATE TRIGGER dbo.t ON dbo.places AFTER "
                                       "INSERT AS BEGIN SET NOCOUNT ON; END: CREATE TRIGGER is not supported by "
                                       "the model\n")


def test_unique_constraints_and_indexes_are_keys_of_the_model(runner: ScriptRunner, model: SqlServerModel) -> None:
    runner.run("CREATE TABLE shop.sku (id int PRIMARY KEY, code varchar(10) NOT NULL UNIQUE, ean char(13) NULL,\n"
               "    alias varchar(10) NULL, CONSTRAINT UQ_sku_ean UNIQUE NONCLUSTERED (ean));\n"
               "CREATE UNIQUE NONCLUSTERED INDEX IX_sku_alias ON shop.sku (alias ASC);\n"
               "INSERT INTO shop.sku (id, code, ean, alias) VALUES (1, 'A', '1', 'x'), (2, 'B', '2', 'y');")
    conn = store.open_sqlite(model.path)
    assert store.table_info(conn, "testDB", "shop", "sku").unique == (("code",), ("ean",), ("alias",))
    conn.close()
    with pytest.raises(ScriptError, match=r"Violation of UNIQUE KEY constraint .* duplicate key value is \(A\)"):
        runner.run("UPDATE shop.sku SET code = 'A' WHERE id = 2;")
    runner.run("UPDATE shop.sku SET code = CASE code WHEN 'A' THEN 'B' ELSE 'A' END;")  # the two rows swap codes
    assert [(r["id"], r["code"]) for r in rows(model, "sku")] == [(1, "B"), (2, "A")]


def test_insert_select_reads_the_rows_its_transaction_wrote(runner: ScriptRunner, model: SqlServerModel) -> None:
    runner.run("BEGIN TRAN;\n"
               "INSERT INTO shop.line (order_id, line_no, qty, price) VALUES (1, 1, 2, 1.5), (2, 1, 1, 9);\n"
               "INSERT INTO shop.line (order_id, line_no, qty, price)\n"
               "    SELECT order_id + 10, line_no, qty * 2, price FROM shop.line WHERE order_id = 1;\nCOMMIT;")
    assert [(r["order_id"], r["qty"], r["total"]) for r in rows(model, "line")] == [
        (1, 2, Decimal("3.000000")), (2, 1, Decimal("9.000000")), (11, 4, Decimal("6.000000"))]
    with pytest.raises(ScriptError, match=r"INSERT \.\.\. SELECT other than from one table"):
        runner.run("INSERT INTO shop.line (order_id, line_no, qty, price) SELECT order_id, line_no, qty, price "
                   "FROM shop.line GROUP BY order_id, line_no, qty, price;")


def test_replicate_of_a_non_max_string_stops_at_8000_bytes(runner: ScriptRunner) -> None:
    runner.run("DECLARE @n nvarchar(max), @v varchar(max), @m nvarchar(max);\n"
               "SET @n = REPLICATE(N'ab', 3000);\nSET @v = REPLICATE('ab', 5000);\n"
               "SET @m = REPLICATE(CONVERT(nvarchar(max), N'ab'), 3000);\n"
               "PRINT CONVERT(nvarchar(10), LEN(@n)) + N' ' + CONVERT(nvarchar(10), LEN(@v)) + N' '"
               " + CONVERT(nvarchar(10), LEN(@m));")
    assert runner.report.messages[-1] == "4000 8000 6000"


def test_defaults_written_without_parentheses_and_an_inline_primary_key(model: SqlServerModel) -> None:
    """``DEFAULT newid() PRIMARY KEY``, ``DEFAULT sysdatetime()`` and ``DEFAULT -1``: what SSMS's scripts put in
    parentheses, a DBA often writes bare."""
    runner = ScriptRunner(model, "testDB")
    runner.run("CREATE TABLE dbo.item (item_id uniqueidentifier NOT NULL DEFAULT newid() PRIMARY KEY, "
               "qty int NOT NULL DEFAULT -1, added datetime2(7) NOT NULL DEFAULT sysdatetime(), sku nvarchar(20))")
    runner.run("INSERT INTO dbo.item (sku) VALUES (N'a'), (N'b')")
    with model.connect(database="testDB") as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT [item_id], [qty], [added], [sku] FROM [testDB].[dbo].[item] ORDER BY [item_id]")
        rows = [tuple(r) for r in cursor.fetchall()]
    assert len({r[0] for r in rows}) == 2 and all(len(r[0]) == 36 for r in rows)
    assert [r[1] for r in rows] == [-1, -1] and all(r[2] is not None for r in rows)
    assert sorted(r[3] for r in rows) == ["a", "b"]
