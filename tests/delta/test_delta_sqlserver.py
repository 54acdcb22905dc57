"""The Delta sink with SQL Server capture, against the in-process model of SQL Server's CDC objects
(cdckit_lab.sqlserver_model; what it models is in its docstring)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_sqlserver_end_to_end import TOPIC, Writer, model, old_database, sqlserver_config, table_rows

from cdckit.pipelines.base import read_snapshot_state, write_snapshot_state
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

pytestmark = [pytest.mark.spark]
__all__ = ["model"]  # the fixture


def _state(spark: Any, delta: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = spark.read.format("delta").load(str(delta / "state" / TOPIC)).select("id", "email").collect()
    return {(r["id"],): {"id": r["id"], "email": r["email"]} for r in rows}


def test_chunked_snapshot_under_concurrent_writes_then_stream_leaves_the_state_table_equal_to_the_source(
        model: SqlServerModel, spark: Any, workdir: Path) -> None:
    for start in range(1, 3001, 500):
        with model.transaction("testDB") as tx:
            for i in range(start, start + 500):
                tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
    delta = workdir / "delta"
    config = sqlserver_config(model, workdir, **{"cdckit.snapshot.chunk.rows": "400", "max.batch.size": "1000",
                                                 "table.include.list": "dbo\\.customers", "cdckit.sink": "delta",
                                                 "cdckit.delta.path": str(delta)})
    writer = Writer(model)
    writer.start()
    try:
        snapshot = run_snapshot(spark, config)
    finally:
        writer.stop_event.set()
        writer.join()
    assert writer.transactions > 0 and snapshot.rows_per_topic[TOPIC] > 2500
    run_stream(spark, config)
    assert _state(spark, delta) == table_rows(model)


def _killed_before_completion(config: Any, workdir: Path, watermarks_recorded: bool) -> None:
    """What a kill leaves after the snapshot's Delta commits: the snapshot is still ``started``; without
    ``watermarks_recorded``, the kill came before the chunks' watermarks were recorded too."""
    state = read_snapshot_state(config)
    assert state is not None and state["status"] == "completed"
    write_snapshot_state(config, {"status": "started", "tables": state["tables"],
                                  "consistent_point": state["consistent_point"], "plan": state["plan"]})
    if not watermarks_recorded:
        for document in (workdir / "checkpoint" / "snapshot" / "chunks").glob("*.json"):
            document.unlink()


def _ids(spark: Any, delta: Path, kind: str, table: str = "customers") -> list[tuple[int, str]]:
    df = spark.read.format("delta").load(str(delta / kind / f"server1.testDB.dbo.{table}"))
    column = "__op" if kind == "changes" else "email"
    return sorted((r["id"], r[column]) for r in df.select("id", column).collect())


def test_a_snapshot_killed_after_its_delta_commits_leaves_each_row_once(model: SqlServerModel, spark: Any,
                                                                        workdir: Path) -> None:
    with model.transaction("testDB") as tx:
        for i in range(1, 301):
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
        for i in range(1, 21):
            tx.insert("dbo", "orders", {"id": i, "email": f"o{i}"})
    delta = workdir / "delta"
    config = sqlserver_config(model, workdir, **{"cdckit.snapshot.chunk.rows": "70", "cdckit.sink": "delta",
                                                 "cdckit.delta.path": str(delta)})
    run_snapshot(spark, config)

    # killed after the watermarks were recorded: nothing is read again
    _killed_before_completion(config, workdir, watermarks_recorded=True)
    again = run_snapshot(spark, config)
    assert again.status == "completed" and again.rows_per_topic == {}
    assert _ids(spark, delta, "changes") == [(i, "r") for i in range(1, 301)]

    # killed before: every chunk is read again, and its rows replace the first attempt's, also for a table
    # emptied in between, whose state table is emptied too
    _killed_before_completion(config, workdir, watermarks_recorded=False)
    with model.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 5}, {"email": "changed"})
        tx.delete("dbo", "customers", {"id": 6})
        for i in range(1, 21):
            tx.delete("dbo", "orders", {"id": i})
    resumed = run_snapshot(spark, config)
    assert resumed.rows_per_topic == {TOPIC: 299}
    assert _ids(spark, delta, "changes") == [(i, "r") for i in range(1, 301) if i != 6]
    assert _ids(spark, delta, "state") == sorted((k[0], v["email"]) for k, v in table_rows(model).items())
    assert _ids(spark, delta, "changes", "orders") == [] and _ids(spark, delta, "state", "orders") == []
    run_stream(spark, config)  # the changes the second attempt read are skipped by its watermarks
    assert _ids(spark, delta, "changes") == [(i, "r") for i in range(1, 301) if i != 6]


def test_the_tables_gain_the_column_a_capture_instance_rotation_brings(model: SqlServerModel, spark: Any,
                                                                       workdir: Path) -> None:
    delta = workdir / "delta"
    config = sqlserver_config(model, workdir, **{"table.include.list": "dbo\\.customers",
                                                 "cdckit.sqlserver.schema.evolution": "stream",
                                                 "cdckit.sink": "delta", "cdckit.delta.path": str(delta)})
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 1, "email": "snapshot"})
    run_snapshot(spark, config)
    model.alter_table_add_column("testDB", "dbo", "customers", ModelColumn("tier", "int"))
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 2, "email": "old-structure", "tier": 1})
    run_stream(spark, config)
    with model.transaction("testDB") as tx:
        tx.insert("dbo", "customers", {"id": 3, "email": "new-structure", "tier": 3})
        tx.delete("dbo", "customers", {"id": 1})
    run_stream(spark, config)
    changes = spark.read.format("delta").load(str(delta / "changes" / TOPIC))
    rows = changes.orderBy("__commit_lsn", "__lsn", "__serial").collect()
    assert [(r["id"], r["email"], r["tier"], r["__op"]) for r in rows] == [
        (1, "snapshot", None, "r"), (2, "old-structure", None, "c"), (3, "new-structure", 3, "c"),
        (1, "snapshot", None, "d")]
    state = spark.read.format("delta").load(str(delta / "state" / TOPIC)).orderBy("id").collect()
    assert [(r["id"], r["email"], r["tier"]) for r in state] == [(2, "old-structure", None), (3, "new-structure", 3)]


def test_positions_past_64_bits_are_decimals_in_the_tables(spark: Any, workdir: Path) -> None:
    """A database whose LSNs pass 2**63 (VLF 0x0004B3E1): the changes table's __commit_lsn and __lsn are
    DECIMAL(25,0) holding the LSNs exactly, the snapshot resumed and the stream merge into the state table by them,
    and independent readers (deltalake) read them back."""
    server = old_database(workdir)
    with server.transaction("testDB") as tx:
        for i in range(1, 4):
            tx.insert("dbo", "customers", {"id": i, "email": f"e{i}"})
    delta = workdir / "delta"
    config = sqlserver_config(server, workdir, **{"cdckit.sink": "delta", "cdckit.delta.path": str(delta),
                                                  "cdckit.delta.mode": "both"})
    run_snapshot(spark, config)
    with server.transaction("testDB") as tx:
        tx.update_many("dbo", "customers", [({"id": i}, {"id": i + 1}) for i in (3, 2, 1)])
    with server.transaction("testDB") as tx:
        tx.update("dbo", "customers", {"id": 2}, {"email": "two"})
    run_stream(spark, config)
    assert _state(spark, delta) == table_rows(server)
    changes = spark.read.format("delta").load(str(delta / "changes" / TOPIC))
    assert changes.schema["__commit_lsn"].dataType.simpleString() == "decimal(25,0)"
    lsns = [int(r["__commit_lsn"]) for r in changes.select("__commit_lsn").collect()]
    assert min(lsns) >= 0x4B3E1 << 48 and len(lsns) == 3 + 6 + 1
    deltalake = pytest.importorskip("deltalake")
    table = deltalake.DeltaTable(str(delta / "changes" / TOPIC)).to_pyarrow_table()
    assert sorted(int(v) for v in table.column("__commit_lsn").to_pylist()) == sorted(lsns)
