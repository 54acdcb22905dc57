"""Folding change-table rows into events, as Debezium's SQL Server connector does."""

from __future__ import annotations

import datetime

import pytest

from cdckit.dialect.sqlserver.catalog import CaptureInstance
from cdckit.dialect.sqlserver.changes import fold_changes
from cdckit.errors import SourcePreconditionError
from cdckit.formats.debezium.sqlserver_types import SqlServerColumn

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
