"""Folding change-table rows into events, as Debezium's SQL Server connector does."""

from __future__ import annotations

import datetime
import json
from contextlib import closing
from pathlib import Path

import pytest

from cdckit.config.properties import SQLSERVER_CONNECTOR
from cdckit.dialect.sqlserver.catalog import CaptureInstance, capture_instances
from cdckit.dialect.sqlserver.changes import check_readable, fold_changes, read_changes, require_max_lsn
from cdckit.dialect.sqlserver.connection import connect
from cdckit.errors import SourcePreconditionError
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.formats.debezium.sqlserver_types import SqlServerColumn
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

INSTANCE = CaptureInstance("testDB", "dbo", "customers", "dbo_customers", 1, 10, 20,
                           (SqlServerColumn("id", "int", 4, 10, 0, False),
                            SqlServerColumn("email", "varchar", 255, 0, 0, False)), ("id",))
WHEN = datetime.datetime(2019, 6, 5, 10, 11, 8, 470000)


def lsn(value: int) -> bytes:
    return value.to_bytes(10, "big")


def row(commit: int, seq: int, op: int, ident: int, email: str) -> tuple[object, ...]:
    return (lsn(commit), lsn(seq), op, b"\x03", ident, email, WHEN)


def test_insert_and_delete_are_single_events_with_serial_one() -> None:
    events = list(fold_changes(INSTANCE, [row(5, 3, 2, 1, "a"), row(7, 6, 1, 1, "a")]))
    assert [(e.op, e.extra["event_serial_no"]) for e in events] == [("c", 1), ("d", 1)]
    assert events[0].after == {"id": 1, "email": "a"} and events[1].before == {"id": 1, "email": "a"}
    assert (events[0].position.commit_lsn, events[0].position.lsn) == (5, 3)
    assert events[0].source_ts_ms == int(WHEN.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)


def test_update_pair_folds_into_one_update_with_serial_two() -> None:
    (update,) = fold_changes(INSTANCE, [row(9, 8, 3, 1, "old"), row(9, 8, 4, 1, "new")])
    assert update.op == "u" and update.extra["event_serial_no"] == 2
    assert update.before == {"id": 1, "email": "old"} and update.after == {"id": 1, "email": "new"}


def test_primary_key_update_becomes_delete_then_create_with_serials_one_and_two() -> None:
    delete, create = fold_changes(INSTANCE, [row(9, 8, 1, 1, "x"), row(9, 8, 2, 2, "x")])
    assert (delete.op, delete.extra["event_serial_no"], delete.before) == ("d", 1, {"id": 1, "email": "x"})
    assert (create.op, create.extra["event_serial_no"], create.after) == ("c", 2, {"id": 2, "email": "x"})
    assert delete.position.as_tuple() < create.position.as_tuple()


def test_delete_and_insert_under_different_lsns_stay_separate() -> None:
    events = list(fold_changes(INSTANCE, [row(9, 8, 1, 1, "x"), row(9, 9, 2, 2, "y")]))
    assert [(e.op, e.extra["event_serial_no"]) for e in events] == [("d", 1), ("c", 1)]


def test_update_old_row_without_new_row_is_reported() -> None:
    with pytest.raises(SourcePreconditionError, match="without its new row"):
        list(fold_changes(INSTANCE, [row(9, 8, 3, 1, "old"), row(10, 9, 2, 2, "x")]))


def test_commit_times_in_server_local_time_become_utc() -> None:
    (event,) = fold_changes(INSTANCE, [row(5, 3, 2, 1, "a")], utc_offset_minutes=120)
    assert event.source_ts_ms == int(WHEN.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000) - 7_200_000


def test_datetimeoffset_changes_are_read_and_keep_their_own_offset(tmp_path: Path) -> None:
    """pyodbc reads SQL type -155 only through an output converter: cdckit's connections register one, so a
    change table with datetimeoffset columns can be read, and the values become ZonedTimestamp texts."""
    server = SqlServerModel(tmp_path / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    server.create_table("testDB", "dbo", "meetings", [ModelColumn("id", "int", nullable=False),
                                                      ModelColumn("starts", "datetimeoffset", precision=30, scale=3),
                                                      ModelColumn("ends", "datetimeoffset")], ["id"])
    server.enable_table("testDB", "dbo", "meetings")
    starts = datetime.datetime(2018, 7, 13, 12, 23, 45, 456000, tzinfo=datetime.timezone(datetime.timedelta(hours=11)))
    ends = datetime.datetime(2018, 7, 13, 20, 0, 0, 123456,
                             tzinfo=datetime.timezone(-datetime.timedelta(hours=5, minutes=30)))
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "meetings", {"id": 1, "starts": starts, "ends": None})
    with server.transaction("testDB") as tx:
        tx.update("dbo", "meetings", {"id": 1}, {"ends": ends})
    options = {"connector.class": SQLSERVER_CONNECTOR, "database.hostname": "sqlserver.test",
               "database.names": "testDB", "topic.prefix": "server1",
               "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
               "cdckit.sqlserver.model.path": str(server.path)}
    with closing(connect(options, "testDB")) as conn:
        cursor = conn.cursor()
        (instance,) = capture_instances(cursor, "testDB", options)
        end = require_max_lsn(cursor, "testDB") or 0
        events = list(fold_changes(instance, read_changes(cursor, instance, check_readable(cursor, instance, 0), end)))
    table = TableFormat(instance, format_settings(options))
    insert, update = (json.loads(table.value_json(event, 0))["payload"] for event in events)
    assert insert["after"] == {"id": 1, "starts": "2018-07-13T12:23:45.456+11:00", "ends": None}
    assert update["before"] == insert["after"]
    assert update["after"] == {"id": 1, "starts": "2018-07-13T12:23:45.456+11:00",
                               "ends": "2018-07-13T20:00:00.123456-05:30"}
