"""SQL Server guards that must hold in every mode: changes purged by the cleanup job before cdckit read them,
schema drift of a captured table, and several databases sharing one stream. Against the in-process model of SQL Server
(cdckit_lab.sqlserver_model); the twins of these scenarios run against SQL Server 2022 in
tests/docker/test_sqlserver_scenarios.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import payload, records, replay
from test_sqlserver_end_to_end import TOPIC, _cli, _instances, model, sqlserver_config, table_rows

from cdckit.config import Config
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

pytestmark = [pytest.mark.spark]
__all__ = ["model"]  # the fixture, shared with the end-to-end suite
ONE_BATCH = {"cdckit.trigger": "processing-time", "cdckit.trigger.interval": "200 milliseconds",
             "cdckit.stream.max.batches": "1"}


def _first_batch_while_writing(model: SqlServerModel, spark: Any, config: Config) -> None:
    """Run the stream until one batch is committed, writing meanwhile: with snapshot.mode=never a stream starts
    at the max LSN it finds, so only changes committed after it started make a batch."""
    stop = threading.Event()

    def write() -> None:
        next_id = 1000
        while not stop.is_set():
            with model.transaction("testDB") as tx:
                tx.insert("dbo", "customers", {"id": next_id, "email": "while-starting"})
            next_id += 1
            stop.wait(0.2)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        assert run_stream(spark, config).batches == 1
    finally:
        stop.set()
        writer.join()


def _purge_three_inserts(model: SqlServerModel, capture_instance: str) -> None:
    """Three transactions, then the cleanup job removes all but the last from the change table."""
    lsns = []
    for i in range(3):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "customers", {"id": i, "email": f"purged{i}"})
        lsns.append(tx.commit_lsn)
    model.cleanup("testDB", capture_instance, lsns[-1])


def test_purged_changes_stop_a_stream_that_took_no_snapshot(model: SqlServerModel, spark: Any, workdir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    never = {"snapshot.mode": "never", "table.include.list": "dbo\\.customers"}
    _first_batch_while_writing(model, spark, sqlserver_config(model, workdir, **never, **ONE_BATCH))
    _purge_three_inserts(model, "dbo_customers")
    status, output = _cli(capsys, sqlserver_config(model, workdir, **never), workdir, "stream")
    assert status == 2, output
    assert "were removed by the CDC cleanup job" in output and "testDB.dbo.customers" in output
    assert "Traceback" not in output


def test_purged_changes_resnapshot_a_table_of_a_stream_that_took_no_snapshot(model: SqlServerModel, spark: Any,
                                                                             workdir: Path) -> None:
    never = {"snapshot.mode": "never", "table.include.list": "dbo\\.customers",
             "cdckit.sqlserver.purged.changes": "resnapshot"}
    _first_batch_while_writing(model, spark, sqlserver_config(model, workdir, **never, **ONE_BATCH))
    _purge_three_inserts(model, "dbo_customers")
    config = sqlserver_config(model, workdir, **never)
    run_stream(spark, config)
    reads = [payload(r["value"]) for r in records(config, TOPIC) if payload(r["value"])["op"] == "r"]
    assert {0, 1, 2} <= {r["after"]["id"] for r in reads}
    assert {r["source"]["snapshot"] for r in reads} == {"incremental"}
    assert replay(config, TOPIC) == table_rows(model)


def test_purged_changes_of_a_capture_instance_created_after_the_snapshot_stop_the_stream(
        model: SqlServerModel, spark: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    model.alter_table_add_column("testDB", "dbo", "customers", ModelColumn("tier", "int"))
    model.enable_table("testDB", "dbo", "customers", capture_instance="dbo_customers_v2")
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 100, "email": "read-from-v2", "tier": 1})
    run_stream(spark, config)  # reads across the switch to the new instance
    model.disable_table("testDB", "dbo_customers")  # the rotation's last step: the old instance goes
    _purge_three_inserts(model, "dbo_customers_v2")
    status, output = _cli(capsys, config, workdir, "stream")
    assert status == 2, output
    assert "were removed by the CDC cleanup job" in output and "dbo_customers_v2" in output
    assert [payload(r["value"])["after"]["id"] for r in records(config, TOPIC)] == [100]


def test_a_busy_database_does_not_hold_back_another(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    model.create_database("salesDB")
    model.enable_cdc("salesDB")
    model.create_table("salesDB", "dbo", "invoices", [ModelColumn("id", "int", nullable=False),
                                                      ModelColumn("email", "varchar", max_length=255)], ["id"])
    model.enable_table("salesDB", "dbo", "invoices")
    both = {"database.names": "testDB,salesDB", "table.include.list": "dbo\\.customers,dbo\\.invoices",
            "max.batch.size": "10"}
    config = sqlserver_config(model, workdir, **both)
    run_snapshot(spark, config)
    for i in range(40):
        with model.transaction("testDB") as tx:
            tx.insert("dbo", "customers", {"id": i, "email": f"busy{i}"})
    with model.transaction("salesDB") as tx:
        tx.insert("dbo", "invoices", {"id": 7, "email": "quiet"})
    run_stream(spark, sqlserver_config(model, workdir, **both, **ONE_BATCH))
    invoices = "server1.salesDB.dbo.invoices"
    assert [payload(r["value"])["after"]["id"] for r in records(config, invoices)] == [7]
    assert 1 <= len(records(config, TOPIC)) <= 10, "the batch stays within max.batch.size"
    run_stream(spark, config)
    assert replay(config, TOPIC) == table_rows(model)
    commits = [payload(r["value"])["source"]["commit_lsn"] for r in records(config, TOPIC)]
    assert commits == sorted(commits) and len(commits) == 40


def _alter_columns(config: Config) -> list[list[tuple[str, str]]]:
    """(name, typeName) of each ALTER schema change record's columns, in order."""
    return [[(c["name"], c["typeName"]) for c in change["table"]["columns"]]
            for change in (payload(r["value"])["tableChanges"][0] for r in records(config, "server1"))
            if change["type"] == "ALTER"]


def test_the_schema_evolution_job_rotates_after_a_column_was_dropped(
        model: SqlServerModel, spark: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model.create_table("testDB", "dbo", "accounts", [ModelColumn("id", "int", nullable=False),
                                                     ModelColumn("email", "varchar", max_length=255),
                                                     ModelColumn("note", "varchar", max_length=40)], ["id"])
    model.enable_table("testDB", "dbo", "accounts")
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.accounts"})
    run_snapshot(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "accounts", {"id": 1, "email": "one", "note": "kept"})
    model.alter_table_drop_column("testDB", "dbo", "accounts", "note")
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "accounts", {"id": 2, "email": "two"})
    status, planned = _cli(capsys, config, workdir, "schema-evolution --plan")
    assert status == 0 and "columns dropped: note" in planned, planned
    status, output = _cli(capsys, config, workdir, "schema-evolution")
    assert status == 0 and "created capture instance dbo_accounts_v2" in output, output
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "accounts", {"id": 3, "email": "three"})
    run_stream(spark, config)
    assert [payload(r["value"])["after"] for r in records(config, "server1.testDB.dbo.accounts")] == [
        {"id": 1, "email": "one", "note": "kept"}, {"id": 2, "email": "two", "note": None},
        {"id": 3, "email": "three"}]
    assert _alter_columns(config) == [[("id", "int"), ("email", "varchar")]]


def test_the_stream_rotates_after_a_column_type_changed(model: SqlServerModel, spark: Any, workdir: Path) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers",
                                                 "cdckit.sqlserver.schema.evolution": "stream"})
    run_snapshot(spark, config)
    model.alter_table_alter_column("testDB", "dbo", "customers", ModelColumn("email", "nvarchar", max_length=1000))
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "before-the-rotation"})
    run_stream(spark, config)  # plans a batch: the rotation happens before it is read
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "email": "after-the-rotation"})
    run_stream(spark, config)
    run_stream(spark, config)  # the old instance is dropped once the stream has passed the switch
    assert _instances(model) == ["dbo_customers_v2"]
    assert [payload(r["value"])["after"]["id"] for r in records(config, TOPIC)] == [1, 2]
    assert _alter_columns(config) == [[("id", "int"), ("email", "nvarchar")]]


def test_never_keeps_its_start_when_the_first_run_commits_no_batch(model: SqlServerModel, spark: Any,
                                                                    workdir: Path) -> None:
    """snapshot.mode=never: a first run with nothing to read commits no batch; what is committed before the
    second run is still read by it."""
    config = sqlserver_config(model, workdir, **{"snapshot.mode": "never", "table.include.list": "dbo\\.customers"})
    assert run_stream(spark, config).events == 0
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 500, "email": "between runs"})
    assert run_stream(spark, config).events == 1
    assert [payload(r["value"])["after"]["id"] for r in records(config, TOPIC)] == [500]


# -- what the server says, told apart (docs/decisions/0034) --------------------------------------------------------
@pytest.mark.version_neutral
def test_a_snapshot_list_snapshots_its_tables_and_streams_the_others_from_the_snapshots_start(
        model: SqlServerModel, spark: Any, workdir: Path) -> None:
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "snapshotted"})
        tx.insert("dbo", "orders", {"id": 1, "email": "not snapshotted"})
    config = sqlserver_config(model, workdir, **{"snapshot.include.collection.list": "testDB\\.dbo\\.cust.*"})
    run_snapshot(spark, config)
    orders = "server1.testDB.dbo.orders"
    assert [payload(r["value"])["op"] for r in records(config, TOPIC)] == ["r"]
    assert records(config, orders) == []
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "orders", {"id": 2, "email": "streamed"})
    run_stream(spark, config)
    assert [(payload(r["value"])["op"], payload(r["value"])["after"]["id"]) for r in records(config, orders)] == [
        ("c", 2)]


@pytest.mark.version_neutral
def test_a_snapshot_list_entry_that_matches_no_captured_table_is_refused_before_anything_is_written(
        model: SqlServerModel, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers",
                                                 "snapshot.include.collection.list": "testDB\\.dbo\\.orders"})
    status, output = _cli(capsys, config, workdir, "snapshot")
    assert status == 2, output
    assert "snapshot.include.collection.list entry 'testDB\\.dbo\\.orders' matches none of the tables" in output
    assert not (workdir / "checkpoint").exists() and not (workdir / "out").exists()


@pytest.mark.version_neutral
def test_a_login_outside_the_gating_role_stops_the_stream_saying_so(model: SqlServerModel, spark: Any, workdir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    model.create_login("cdckit", "not-a-real-secret")
    model.set_capture_access("testDB", "dbo_customers", "cdckit", False)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 7, "email": "unread"})
    status, output = _cli(capsys, config, workdir, "stream")
    assert status == 2, output
    assert "the login may not read the changes of table testDB.dbo.customers" in output
    assert "gating role" in output and "CDC was disabled" not in output and "Traceback" not in output


@pytest.mark.version_neutral
def test_a_database_the_login_cannot_open_is_named_not_blamed_on_the_password(
        model: SqlServerModel, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model.create_database("salesDB")
    model.create_login("cdckit", "not-a-real-secret", databases=["salesDB"])
    status, output = _cli(capsys, sqlserver_config(model, workdir), workdir, "snapshot")
    assert status == 2, output
    assert "login 'cdckit' on sqlserver.test:1433 cannot open database 'testDB' (SQL Server error 4060)" in output
    assert "database.password" not in output


@pytest.mark.version_neutral
def test_no_max_lsn_where_the_agent_cannot_be_seen_is_a_warning_and_the_stream_goes_on(
        model: SqlServerModel, spark: Any, workdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    from cdckit.dialect.sqlserver import changes

    changes._NO_MAX_LSN_WARNED.clear()
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers"})
    run_snapshot(spark, config)
    model.agent_service_listed = False  # Azure SQL, Amazon RDS: sys.dm_server_services lists no Agent
    model.purge_lsn_time_mapping("testDB")  # a quiet database whose cleanup left no mapping row
    with caplog.at_level("WARNING", "cdckit.sqlserver"):
        assert run_stream(spark, config).events == 0
    assert "no maximum LSN is recorded in database 'testDB'" in caplog.text
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 8, "email": "after the quiet spell"})
    run_stream(spark, config)
    assert [payload(r["value"])["after"]["id"] for r in records(config, TOPIC)] == [8]


def test_a_stream_at_the_default_interval_takes_every_change_written_while_it_waits(model: SqlServerModel,
                                                                                     spark: Any, workdir: Path) -> None:
    """processing-time without cdckit.trigger.interval: triggers back to back, each that finds nothing waiting in
    the source up to poll.interval.ms (SQL Server looks once, when the wait ends; decision 0041). Two batches take
    the inserts written while the stream waits, and every one of them is in the topic once the run ends."""
    config = sqlserver_config(model, workdir, **{"snapshot.mode": "never", "table.include.list": "dbo\\.customers",
                                                 "cdckit.trigger": "processing-time", "poll.interval.ms": "300",
                                                 "cdckit.stream.max.batches": "2"})
    stop, written = threading.Event(), []

    def write() -> None:
        while not stop.is_set():
            with model.transaction("testDB") as tx:
                tx.insert("dbo", "customers", {"id": 2000 + len(written), "email": "while-waiting"})
            written.append(2000 + len(written))
            stop.wait(0.15)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        report = run_stream(spark, config)
    finally:
        stop.set()
        writer.join()
    ids = [payload(r["value"])["after"]["id"] for r in records(config, TOPIC)]
    assert report.batches == 2 and ids, report
    assert ids == sorted(ids) and set(ids) <= set(written), ids
    assert ids == written[written.index(ids[0]):written.index(ids[0]) + len(ids)], "no insert skipped between batches"
