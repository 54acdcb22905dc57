"""What ``cdckit stream`` prints off a terminal: the snapshot's summary, one readable line per batch; and the JSON
metrics line on stderr only where ``cdckit.metrics.log`` (or ``--verbose``) asks for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdckit.cli import build_parser, snapshot_line
from cdckit.config import validate
from cdckit.observe.lines import BatchLines, batch_line
from cdckit.observe.metrics import ConnectorMetrics, stats_document
from cdckit.pipelines.dispatch import job_observer
from cdckit.pipelines.streaming import SnapshotReport

BASE = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db",
        "database.user": "u", "database.password": "Not-Shown-7d1", "database.dbname": "shop",
        "topic.prefix": "shopx"}


def _document(batch_id: int, records: int, write_ms: int, lag_ms: int) -> dict[str, object]:
    return {"batch": {"id": batch_id, "records": records, "write_ms": write_ms},
            "streaming": {"shop": {"MilliSecondsBehindSource": lag_ms}}}


def test_a_batch_line_has_its_records_per_topic_time_rate_and_lag() -> None:
    summary = {"shopx.public.customers": 204, "shopx.public.orders": 1000, "shopx.public.empty": 0}
    assert batch_line(3, summary, _document(3, 1204, 800, 1200)) == (
        "batch 3: 1,204 records (shopx.public.orders=1,000, shopx.public.customers=204) in 0.8 s, 1,505 rows/s, "
        "lag 1.2 s")
    many = {f"shopx.public.t{n}": n for n in range(1, 8)}
    assert batch_line(4, many, _document(4, 28, 1000, 0)) == (
        "batch 4: 28 records (shopx.public.t7=7, shopx.public.t6=6, shopx.public.t5=5, shopx.public.t4=4, 3 more "
        "topics) in 1.0 s, 28 rows/s, lag 0.0 s")
    assert batch_line(0, {}, _document(0, 0, 120, -1)) == "batch 0: 0 records in 0.1 s, lag -"
    assert batch_line(5, {"a": 1}, {}) == "batch 5: 1 record (a=1), lag -"  # no metrics (yet)
    assert batch_line(6, {"a": 1}, _document(6, 1, 3000, 18100)) == (
        "batch 6: 1 record (a=1) in 3.0 s, 0.3 rows/s, lag 18.1 s")


def test_batch_lines_use_the_metrics_published_just_before_the_batch_is_handed_over() -> None:
    printed: list[str] = []
    lines = BatchLines(printed.append)
    metrics = ConnectorMetrics("postgresql", "shopx", ["shop"])
    metrics.batch_committed(0, [stats_document("shop", {"c": 2}, 1, 0, None)], 2, write_ms=500)
    lines.metrics(metrics.document())
    lines.batch(0, {"shopx.public.orders": 2})
    assert printed == ["batch 0: 2 records (shopx.public.orders=2) in 0.5 s, 4.0 rows/s, lag -"]


def test_the_snapshot_line_is_the_one_cdckit_snapshot_prints() -> None:
    report = SnapshotReport("completed", "cdckit", "0/1A2B3C8", ["public.orders", "public.customers"],
                            {"shopx.public.orders": 6000, "shopx.public.customers": 737}, 4.23)
    assert snapshot_line(report) == ("snapshot completed: 6,737 rows from 2 tables in 4.2s; slot cdckit at "
                                     "0/1A2B3C8")
    assert snapshot_line(SnapshotReport("skipped", "cdckit", "0/1A2B3C8", ["public.orders"])) == (
        "snapshot already taken: 1 table, consistent point 0/1A2B3C8")


@pytest.mark.parametrize(("settings", "lines"), [({}, 0), ({"cdckit.metrics.log": "true"}, 1)])
def test_the_json_metrics_line_comes_only_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      settings: dict[str, str], lines: int) -> None:
    config = validate({**BASE, "cdckit.checkpoint.location": str(tmp_path), **settings})
    seen: list[dict[str, object]] = []
    observer = job_observer(config, seen.append)
    observer.metrics.batch_committed(0, [stats_document("shop", {"c": 1}, 1, 0, None)], 1, write_ms=10)
    observer.publish("batch")
    printed = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert len(printed) == lines and seen[-1]["event"] == "batch"  # the listener has it either way
    if printed:
        assert printed[0]["cdckit.metrics"]["batch"]["records"] == 1


def test_verbose_is_a_flag_of_every_command() -> None:
    args = build_parser().parse_args(["--verbose", "stream", "connector.json"])
    assert args.verbose and args.command == "stream"
    assert not build_parser().parse_args(["stream", "connector.json"]).verbose
