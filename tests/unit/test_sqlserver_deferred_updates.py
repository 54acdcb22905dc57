"""A transaction's changes in SQL Server's order: deferred updates, primary-key moves and ``__$command_id``.

The scenarios are those of Debezium's ``SqlServerDataQueryModeIT`` (debezium/debezium, dbz#2012, "Redesign direct
mode around __$command_id"): a table ``orders`` with a UNIQUE index on ``order_ref``, ten seed rows, then a deferred
update (``UPDATE orders SET order_ref = order_ref + '_v2' WHERE id BETWEEN 1 AND 5``, logged as five deletes and five
inserts), a plain update of three rows and a primary-key move of two rows, alone or in one transaction, on one table
or two. Each is read from the SQL Server model with cdckit's reader, and the events, replayed per key as a consumer
does, must give the table's final rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cdckit.config.properties import SQLSERVER_CONNECTOR
from cdckit.dialect.sqlserver import changes as changes_module
from cdckit.dialect.sqlserver.catalog import capture_instances
from cdckit.dialect.sqlserver.changes import check_readable, fold_changes, read_changes, require_max_lsn
from cdckit.dialect.sqlserver.connection import connect
from cdckit.events import ChangeEvent
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

ORDERS = [ModelColumn("id", "int", nullable=False), ModelColumn("order_ref", "varchar", 50, nullable=False),
          ModelColumn("status", "varchar", 20, nullable=False)]
SHIPMENTS = [ModelColumn("id", "int", nullable=False), ModelColumn("tracking_ref", "varchar", 50, nullable=False),
             ModelColumn("carrier", "varchar", 20, nullable=False)]


def _options(server: SqlServerModel) -> dict[str, str]:
    return {"connector.class": SQLSERVER_CONNECTOR, "database.hostname": "sqlserver.test",
            "database.names": "testDB", "topic.prefix": "server1",
            "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
            "cdckit.sqlserver.model.path": str(server.path)}


@pytest.fixture()
def server(tmp_path: Path) -> SqlServerModel:
    model = SqlServerModel(tmp_path / "sqlserver.sqlite")
    model.create_database("testDB")
    model.enable_cdc("testDB")
    return model


def _create(server: SqlServerModel, table: str, columns: list[ModelColumn], unique: str, prefix: str,
            rows: int, third: str) -> None:
    server.create_table("testDB", "dbo", table, columns, ["id"], unique=[(unique,)])
    server.enable_table("testDB", "dbo", table)
    with server.transaction("testDB") as tx:
        for i in range(1, rows + 1):
            tx.insert("dbo", table, {"id": i, unique: f"{prefix}{i}", columns[2].name: third})


def _deferred(tx: Any, table: str = "orders", column: str = "order_ref", prefix: str = "REF-") -> None:
    tx.update_many("dbo", table, [({"id": i}, {column: f"{prefix}{i}_v2"}) for i in range(1, 6)])


def _plain(tx: Any) -> None:
    tx.update_many("dbo", "orders", [({"id": i}, {"status": "PROCESSED"}) for i in range(6, 9)])


def _key_move(tx: Any) -> None:
    tx.update_many("dbo", "orders", [({"id": i}, {"id": i + 100}) for i in (9, 10)])


def _events(server: SqlServerModel, after: int = 0) -> Iterator[ChangeEvent]:
    options = _options(server)
    with closing(connect(options, "testDB")) as conn:
        cursor = conn.cursor()
        end = require_max_lsn(cursor, "testDB") or 0
        for instance in capture_instances(cursor, "testDB", options):
            yield from fold_changes(instance, read_changes(cursor, instance, check_readable(cursor, instance, after),
                                                           end))


def _max_lsn(server: SqlServerModel) -> int:
    options = _options(server)
    with closing(connect(options, "testDB")) as conn:
        return require_max_lsn(conn.cursor(), "testDB") or 0


def _replay(events: list[ChangeEvent], table: str) -> dict[int, dict[str, Any]]:
    """What a consumer keeps per key, applying the events in the order they come: creates, reads and updates put
    the after image, deletes remove the key."""
    rows: dict[int, dict[str, Any]] = {}
    for event in sorted((e for e in events if e.table == table), key=lambda e: e.position.as_tuple()):
        if event.op == "d":
            assert event.before is not None
            rows.pop(int(str(event.before["id"])), None)
        else:
            assert event.after is not None
            rows[int(str(event.after["id"]))] = dict(event.after)
    return rows


def _table(server: SqlServerModel, table: str) -> dict[int, dict[str, Any]]:
    with closing(server.connect(database="testDB")) as conn:
        sql = f"SELECT [id], [order_ref], [status] FROM [testDB].[dbo].[{table}] ORDER BY [id]"
        if table == "shipments":
            sql = sql.replace("[order_ref], [status]", "[tracking_ref], [carrier]")
        cursor = conn.cursor()
        cursor.execute(sql)
        names = [d[0] for d in cursor.description]
        return {int(r[0]): dict(zip(names, r, strict=True)) for r in cursor.fetchall()}


def test_a_deferred_update_is_read_as_each_keys_delete_then_its_insert_and_replays_to_the_table(
        server: SqlServerModel) -> None:
    """Debezium's shouldNotLoseDeferredUpdateAtAnyFetchBoundary: the five deletes come before the five inserts (the
    model logs each insert with a LOWER seqval than its delete, as KB 3030352 describes), so a consumer replaying
    per key keeps every row; ordered by seqval, it would delete all five."""
    _create(server, "orders", ORDERS, "order_ref", "REF-", 10, "NEW")
    start = _max_lsn(server)
    with server.transaction("testDB") as tx:
        _deferred(tx)
    events = list(_events(server, start))
    assert [e.op for e in events] == ["d"] * 5 + ["c"] * 5
    deletes = {e.before["id"]: e for e in events if e.op == "d" and e.before}
    creates = {e.after["id"]: e for e in events if e.op == "c" and e.after}
    for i in range(1, 6):
        assert deletes[i].before == {"id": i, "order_ref": f"REF-{i}", "status": "NEW"}
        assert creates[i].after == {"id": i, "order_ref": f"REF-{i}_v2", "status": "NEW"}
        assert (deletes[i].extra["event_serial_no"], creates[i].extra["event_serial_no"]) == (1, 1)
        # SQL Server logged the insert below its delete: the event keeps that seqval as source.change_lsn
        assert int(str(creates[i].extra.get("change_lsn", creates[i].position.lsn))) < deletes[i].position.lsn
    positions = [e.position.as_tuple() for e in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    replayed = _replay(list(_events(server)), "orders")
    assert replayed == _table(server, "orders") and len(replayed) == 10


def test_the_change_lsn_of_an_insert_logged_below_its_delete_is_its_own_seqval(server: SqlServerModel) -> None:
    _create(server, "orders", ORDERS, "order_ref", "REF-", 10, "NEW")
    start = _max_lsn(server)
    with server.transaction("testDB") as tx:
        _deferred(tx)
    options = _options(server)
    with closing(connect(options, "testDB")) as conn:
        (instance,) = capture_instances(conn.cursor(), "testDB", options)
    table = TableFormat(instance, format_settings(options))
    events = list(_events(server, start))
    sources = [json.loads(table.value_json(e, 0))["payload"]["source"] for e in events]
    change_lsns = [s["change_lsn"] for s in sources]
    assert len(set(change_lsns)) == 10  # ten changes, ten seqvals
    assert change_lsns[5:] == sorted(change_lsns[5:]) and max(change_lsns[5:]) < min(change_lsns[:5])
    assert {s["commit_lsn"] for s in sources} == {sources[0]["commit_lsn"]}


def test_every_change_of_a_transaction_with_all_three_shapes_is_delivered(server: SqlServerModel) -> None:
    """Debezium's shouldDeliverEveryChangeInBothQueryModes (direct mode): a deferred update, a plain update and a
    primary-key move in one transaction give 7 deletes, 7 creates and 3 updates; the plain updates carry
    event_serial_no 2, a moved key's delete and create 1 each (separate commands, separate positions)."""
    _create(server, "orders", ORDERS, "order_ref", "REF-", 10, "NEW")
    start = _max_lsn(server)
    with server.transaction("testDB") as tx:
        _deferred(tx)
        _plain(tx)
        _key_move(tx)
    events = list(_events(server, start))
    by_op = {op: [e for e in events if e.op == op] for op in "cud"}
    assert (len(by_op["d"]), len(by_op["c"]), len(by_op["u"])) == (7, 7, 3)
    for update in by_op["u"]:
        assert update.before and update.after and update.before["status"] == "NEW"
        assert update.after["status"] == "PROCESSED" and update.extra["event_serial_no"] == 2
    moved = {e.after["id"]: e for e in by_op["c"] if e.after and e.after["id"] > 100}
    assert sorted(moved) == [109, 110] and all(e.extra["event_serial_no"] == 1 for e in moved.values())
    gone = [e for e in by_op["d"] if e.before and e.before["id"] in (9, 10)]
    assert len(gone) == 2 and all(e.extra["event_serial_no"] == 1 for e in gone)
    assert all(g.position.as_tuple() < moved[g.before["id"] + 100].position.as_tuple() for g in gone if g.before)
    assert _replay(list(_events(server)), "orders") == _table(server, "orders")


def test_deferred_updates_of_two_tables_in_one_transaction_each_replay_to_their_table(
        server: SqlServerModel) -> None:
    """Debezium's shouldOrderChangesFromTwoTablesByCommandId."""
    _create(server, "orders", ORDERS, "order_ref", "REF-", 10, "NEW")
    _create(server, "shipments", SHIPMENTS, "tracking_ref", "TRK-", 5, "ACME")
    start = _max_lsn(server)
    with server.transaction("testDB") as tx:
        _deferred(tx)
        _deferred(tx, "shipments", "tracking_ref", "TRK-")
    events = list(_events(server, start))
    assert len(events) == 20
    for table in ("orders", "shipments"):
        mine = [e.op for e in events if e.table == table]
        assert mine == ["d"] * 5 + ["c"] * 5
    everything = list(_events(server))
    assert _replay(everything, "orders") == _table(server, "orders")
    assert _replay(everything, "shipments") == _table(server, "shipments")


def test_a_one_row_key_update_is_a_delete_then_a_create(server: SqlServerModel) -> None:
    """A statement moving one key: delete and insert at one seqval, the insert one command later; with command ids
    they are two events with serial 1 each (Debezium's direct mode), the create placed after the delete."""
    _create(server, "orders", ORDERS, "order_ref", "REF-", 2, "NEW")
    start = _max_lsn(server)
    with server.transaction("testDB") as tx:
        tx.update("dbo", "orders", {"id": 1}, {"id": 50})
    delete, create = _events(server, start)
    assert (delete.op, create.op) == ("d", "c")
    assert (delete.extra["event_serial_no"], create.extra["event_serial_no"]) == (1, 1)
    assert delete.position.as_tuple() < create.position.as_tuple()
    assert create.extra["change_lsn"] == delete.position.lsn  # one seqval: the create's place is just after it
    assert _replay(list(_events(server)), "orders") == _table(server, "orders")


def test_change_tables_without_command_id_are_read_by_seqval_with_a_warning(
        server: SqlServerModel, caplog: pytest.LogCaptureFixture) -> None:
    """SQL Server 2012-2016 before the cumulative update of KB 3030352: the change table has no __$command_id. It is
    read in seqval order (nothing else is there), a warning says what can go wrong, and a one-row key update is a
    delete and a create with serials 1 and 2 (Debezium's numbering when both carry one change LSN)."""
    server.command_id_column = False
    _create(server, "orders", ORDERS, "order_ref", "REF-", 2, "NEW")
    start = _max_lsn(server)
    with server.transaction("testDB") as tx:
        tx.update("dbo", "orders", {"id": 1}, {"id": 50})
    changes_module._COMMAND_ID_WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="cdckit.sqlserver"):
        delete, create = _events(server, start)
    assert "has no __$command_id column" in caplog.text and "KB 3030352" in caplog.text
    assert (delete.op, delete.extra["event_serial_no"]) == ("d", 1)
    assert (create.op, create.extra["event_serial_no"]) == ("c", 2)
    assert delete.position.lsn == create.position.lsn and "change_lsn" not in create.extra


def test_a_failed_statement_changes_nothing_and_logs_nothing(server: SqlServerModel) -> None:
    """A key move onto an existing key fails with SQL Server's error 2627 as a whole statement: no row changed, no
    change logged, and the rest of the transaction commits."""
    _create(server, "orders", ORDERS, "order_ref", "REF-", 3, "NEW")
    start = _max_lsn(server)
    from cdckit_lab.sqlserver_model import IntegrityError

    with server.transaction("testDB") as tx:
        with pytest.raises(IntegrityError, match=r"\(2627\)|UNIQUE KEY|PRIMARY KEY") as error:
            tx.update_many("dbo", "orders", [({"id": 1}, {"order_ref": "REF-9"}), ({"id": 2}, {"order_ref": "REF-3"})])
        assert "REF-3" in str(error.value)
        tx.update("dbo", "orders", {"id": 3}, {"status": "DONE"})
    events = list(_events(server, start))
    assert [e.op for e in events] == ["u"]
    assert _table(server, "orders")[1]["order_ref"] == "REF-1"


def test_data_query_mode_direct_is_taken_and_function_is_refused_with_its_reason() -> None:
    from cdckit.config import validate
    from cdckit.errors import ConfigurationError as ConfigError

    base = {"connector.class": SQLSERVER_CONNECTOR, "database.hostname": "h", "database.user": "u",
            "database.password": "p", "database.names": "testDB", "topic.prefix": "server1"}
    assert validate({**base, "data.query.mode": "direct"}).str("data.query.mode") == "direct"
    assert validate(base).str("data.query.mode") == "direct"
    with pytest.raises(ConfigError, match=r"data\.query\.mode=function .* __\$command_id.* "
                                          r"set data\.query\.mode=direct"):
        validate({**base, "data.query.mode": "function"})
    with pytest.raises(ConfigError, match=r"data\.query\.mode"):
        validate({**base, "data.query.mode": "table"})
