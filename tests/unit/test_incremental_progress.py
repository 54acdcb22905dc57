"""The incremental snapshot's progress as signals move it, and the window snapshot's visibility (no database)."""

from __future__ import annotations

import logging

import pytest

from cdckit.dialect.incremental import Progress, TableRequest
from cdckit.dialect.postgres.incremental import Visibility, WindowChunk
from cdckit.dialect.signals import Signal

CAPTURED = [("public", "customers"), ("public", "items"), ("public", "orders"), ("sales", "items")]


def _signal(kind: str, **data: object) -> Signal:
    return Signal(f"{kind}-1", kind, {key.replace("_", "-"): value for key, value in data.items()})


def test_execute_snapshot_queues_the_captured_tables_its_expressions_match_once() -> None:
    progress = Progress().after([_signal("execute-snapshot", data_collections=[".*\\.items"], type="incremental")],
                                CAPTURED)
    assert [r.qualified_name for r in progress.pending] == ["public.items", "sales.items"]
    again = progress.after([_signal("execute-snapshot", data_collections=["public.items", "PUBLIC.ORDERS"])],
                           CAPTURED)
    assert [r.qualified_name for r in again.pending] == ["public.items", "sales.items", "public.orders"]
    assert again.runnable and not Progress().active


def test_conditions_apply_per_table_or_to_all_and_a_statement_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    per_table = Progress().after([_signal("execute-snapshot", data_collections=["public.items", "public.orders"],
                                          additional_conditions=[{"data-collection": "public.orders",
                                                                  "filter": "total > 10"}])], CAPTURED)
    assert [(r.table, r.condition) for r in per_table.pending] == [("items", None), ("orders", "total > 10")]
    for_all = Progress().after([_signal("execute-snapshot", data_collections=["public.items"],
                                        additional_condition="color = 'blue'")], CAPTURED)
    assert for_all.pending == (TableRequest("public", "items", "color = 'blue'"),)
    with caplog.at_level(logging.ERROR, logger="cdckit.signals"):
        refused = Progress().after([_signal("execute-snapshot", data_collections=["public.items"],
                                            additional_condition="1 = 1; DROP TABLE public.items")], CAPTURED)
    assert not refused.active
    assert "single boolean expression" in caplog.text


def test_signals_that_ask_for_nothing_cdckit_can_do_are_logged_and_change_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="cdckit.signals"):
        progress = Progress().after([
            _signal("execute-snapshot", data_collections=["public.missing"]),
            _signal("execute-snapshot", data_collections=["public.items"], type="blocking"),
            _signal("execute-snapshot"),
        ], CAPTURED)
    assert progress == Progress()
    assert "no captured table matches data-collections ['public.missing']" in caplog.text
    assert "blocking snapshot" in caplog.text and "names no data-collections" in caplog.text


def test_stop_pause_and_resume() -> None:
    running = Progress(pending=(TableRequest("public", "orders"), TableRequest("sales", "items")),
                       current=TableRequest("public", "items"), last=("400",), high=("1000",), chunks=3)
    stopped_current = running.after([_signal("stop-snapshot", data_collections=["public.items"])], CAPTURED)
    assert stopped_current.current is None and stopped_current.last is None and stopped_current.high is None
    assert [r.qualified_name for r in stopped_current.pending] == ["public.orders", "sales.items"]
    stopped_one = running.after([_signal("stop-snapshot", data_collections=["sales\\..*"])], CAPTURED)
    assert stopped_one.current == running.current and stopped_one.last == ("400",)
    assert [r.qualified_name for r in stopped_one.pending] == ["public.orders"]
    assert not running.after([_signal("stop-snapshot", type="incremental")], CAPTURED).active
    paused = running.after([_signal("pause-snapshot")], CAPTURED)
    assert paused.active and not paused.runnable
    assert paused.after([_signal("resume-snapshot")], CAPTURED) == running


def test_progress_and_chunks_travel_in_the_offset_as_json() -> None:
    progress = Progress(pending=(TableRequest("public", "orders", "total > 1"),),
                        current=TableRequest("public", "items"), last=("a", "2"), high=("z", "9"), chunks=7)
    document = progress.to_json()
    assert document is not None
    assert Progress.from_offset({"lsn": "0/1", "incremental": document}) == progress
    assert Progress().to_json() is None and Progress.from_offset({"lsn": "0/1"}) == Progress()
    assert Progress(paused=True).to_json() == {"pending": [], "current": None, "last": None, "high": None,
                                               "paused": True, "chunks": 0}
    chunk = WindowChunk(3, "public", "items", None, ("10",), "qty < 5")
    assert WindowChunk.from_json(chunk.to_json()) == chunk


def test_visibility_follows_the_snapshot_xmin_xmax_and_in_progress_list() -> None:
    snapshot = Visibility.parse("1000:1010:1002,1005")
    assert str(snapshot) == "1000:1010:1002,1005"
    assert snapshot.sees(999) and snapshot.sees(1001) and snapshot.sees(1009)
    assert not snapshot.sees(1002) and not snapshot.sees(1005)
    assert not snapshot.sees(1010) and not snapshot.sees(1500)
    # pg_current_snapshot gives 64-bit ids (epoch 1 here); decoding gives 32 bits
    epoch = 1 << 32
    wide = Visibility.parse(f"{epoch + 7}:{epoch + 9}:{epoch + 8}")
    assert wide.sees(7) and not wide.sees(8) and not wide.sees(9)
    # around the wraparound: xmax just past it, an xid from before it is seen, one after it is not
    wrapped = Visibility.parse(f"{epoch - 5}:{epoch + 3}:")
    assert wrapped.sees((1 << 32) - 3) and wrapped.sees(2) and not wrapped.sees(3)


def test_cdckit_status_says_where_the_incremental_snapshot_stands() -> None:
    from cdckit.pipelines.status import incremental_lines

    progress = Progress(pending=(TableRequest("public", "orders"),), current=TableRequest("public", "items"),
                        last=("400",), high=("900",), paused=True, chunks=4)
    window = {"snapshot": "1:2:", "chunks": [WindowChunk(3, "public", "items", ("200",), ("400",)).to_json()]}
    assert incremental_lines({"lsn": "0/1", "incremental": progress.to_json(), "window": window}) == [
        "incremental snapshot: paused, reading public.items, 4 chunks planned, next: public.orders",
        "the last batch read 1 incremental snapshot chunks"]
    by_database = {"databases": {}, "incremental": {"testDB": Progress(pending=(TableRequest("dbo", "c"),)).to_json()},
                   "window": {"testDB": [{"schema": "dbo", "table": "c", "index": 0}]}}
    assert incremental_lines(by_database) == [
        "incremental snapshot of testDB: between tables, 0 chunks planned, next: dbo.c",
        "the last batch read 1 incremental snapshot chunks"]
    assert incremental_lines({"lsn": "0/1"}) == []
