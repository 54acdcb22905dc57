"""Debezium's metrics as the driver keeps and publishes them: the partitions' stats rows, the Prometheus exposition
and endpoint, CloudWatch (against moto), the status file."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import moto
import orjson
import pyarrow as pa
import pytest
from prometheus_client import generate_latest

from cdckit.config import load_config
from cdckit.config.loader import metric_tags
from cdckit.errors import CdcKitError, ConfigurationError
from cdckit.events import Position
from cdckit.observe.cloudwatch import CloudWatchPublisher
from cdckit.observe.metrics import ConnectorMetrics, stats_document
from cdckit.observe.prometheus import DebeziumCollector, Endpoint
from cdckit.observe.publish import STATUS_FILE, Observer
from cdckit.spark.rows import STATS, arrow_batches, record, with_stats


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _stats(database: str, ops: dict[str, int], transactions: int, position: list[int], ts_ms: int,
           filtered: int = 0) -> dict[str, Any]:
    return stats_document(database, ops, transactions, filtered, {
        "table": "public.orders", "topic": "it.public.orders", "op": "u", "position": position,
        "source_ts_ms": ts_ms, "transaction": str(position[0]), "source": {"lsn": position[1], "txId": 7}})


def test_a_batch_adds_its_partitions_up_and_the_lag_runs_from_the_last_event_to_the_commit() -> None:
    clock = Clock()
    metrics = ConnectorMetrics("postgresql", "it", ["inventory"], clock=clock)
    assert metrics.document()["streaming"]["inventory"]["MilliSecondsBehindSource"] == -1
    metrics.batch_committed(0, [_stats("inventory", {"c": 5, "u": 2, "tombstone": 1}, 3, [300, 290, 0], 999_000_000),
                                _stats("inventory", {"d": 1, "c": 1}, 1, [100, 90, 0], 998_000_000, filtered=4)], 9)
    values = metrics.document()["streaming"]["inventory"]
    assert (values["TotalNumberOfEventsSeen"], values["TotalNumberOfCreateEventsSeen"],
            values["TotalNumberOfUpdateEventsSeen"], values["TotalNumberOfDeleteEventsSeen"]) == (9, 6, 2, 1)
    assert values["NumberOfCommittedTransactions"] == 4 and values["NumberOfEventsFiltered"] == 4
    # the last event is the one with the greatest position, whichever partition held it
    assert values["LastEvent"] == "u public.orders at 300,290,0" and values["LastTransactionId"] == "300"
    assert values["SourceEventPosition"] == {"lsn": "290", "txId": "7"}
    assert values["MilliSecondsBehindSource"] == 1_000_000_000 - 999_000_000
    clock.now += 5
    assert metrics.document()["streaming"]["inventory"]["MilliSecondsSinceLastEvent"] == 5000
    metrics.caught_up()
    assert metrics.document()["streaming"]["inventory"]["MilliSecondsBehindSource"] == 0
    metrics.batch_committed(1, [_stats("inventory", {"c": 1}, 1, [400, 400, 0], 1_000_004_000)], 1)
    assert metrics.document()["streaming"]["inventory"]["TotalNumberOfEventsSeen"] == 10
    assert metrics.document()["streaming"]["inventory"]["MilliSecondsBehindSource"] == 1000
    metrics.progress({"batchId": 0, "durationMs": {"triggerExecution": 900}})  # an earlier batch's: ignored
    metrics.progress({"batchId": 1, "durationMs": {"triggerExecution": 500}})
    assert metrics.document()["batch"] == {"id": 1, "committed_ms": 1_000_005_000, "records": 1, "duration_ms": 500,
                                           "records_per_second": 2.0}


def test_snapshot_metrics_count_tables_rows_and_the_end() -> None:
    clock = Clock()
    metrics = ConnectorMetrics("sqlserver", "server1", ["testDB"], clock=clock)
    metrics.snapshot_started({"testDB": ["dbo.customers", "dbo.orders"]})
    snapshot = metrics.document()["snapshot"]["testDB"]
    assert snapshot["SnapshotRunning"] and snapshot["RemainingTableCount"] == 2 and snapshot["TotalTableCount"] == 2
    metrics.snapshot_rows("testDB", "dbo.customers", 300, done=True)
    clock.now += 12
    assert metrics.document()["snapshot"]["testDB"]["RemainingTableCount"] == 1
    metrics.snapshot_ended(completed=True)
    snapshot = metrics.document()["snapshot"]["testDB"]
    assert (snapshot["SnapshotCompleted"], snapshot["SnapshotAborted"], snapshot["SnapshotRunning"]) == \
        (True, False, False)
    assert snapshot["RowsScanned"] == {"dbo.customers": 300, "dbo.orders": 0}
    assert snapshot["SnapshotDurationInSeconds"] == 12 and snapshot["RemainingTableCount"] == 0


def test_prometheus_names_are_those_debeziums_jmx_exporter_rules_give() -> None:
    metrics = ConnectorMetrics("postgresql", "it", ["inventory"], tags={"team": "data"})
    metrics.batch_committed(3, [_stats("inventory", {"c": 2}, 1, [10, 10, 0], 1)], 2)
    metrics.source_health("inventory", {"SlotRetainedWalBytes": 4096})
    metrics.snapshot_started({"inventory": ["public.orders"]})
    text = generate_latest(_registry(metrics)).decode()
    assert ('debezium_metrics_TotalNumberOfCreateEventsSeen{context="streaming",database="inventory",name="it",'
            'plugin="postgres",task="0",team="data"} 2.0') in text
    assert 'debezium_metrics_RowsScanned{context="snapshot",database="inventory",name="it",plugin="postgres",' \
           'table="public.orders",task="0",team="data"} 0.0' in text
    assert 'cdckit_slot_retained_wal_bytes{context="streaming",database="inventory",name="it",plugin="postgres",' \
           'task="0",team="data"} 4096.0' in text
    assert 'cdckit_last_event_info{database="inventory",last_event="u public.orders at 10,10,0"' in text
    assert 'cdckit_batch_id{name="it"} 3.0' in text


def _registry(metrics: ConnectorMetrics) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DebeziumCollector(metrics))
    return registry


def test_the_endpoint_serves_metrics_and_a_taken_port_is_refused_clearly() -> None:
    metrics = ConnectorMetrics("sqlserver", "server1", ["testDB"])
    endpoint = Endpoint(metrics, _free_port())
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=10) as response:
            body = response.read().decode()
        assert 'debezium_metrics_Connected{context="streaming",database="testDB",name="server1",' \
               'plugin="sql_server",task="0"} 0.0' in body
        with pytest.raises(CdcKitError, match=rf"cdckit.metrics.port={endpoint.port}: .* choose a free port"):
            Endpoint(metrics, endpoint.port)
    finally:
        endpoint.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_cloudwatch_gets_every_value_with_its_dimensions() -> None:
    metrics = ConnectorMetrics("postgresql", "it", ["inventory"])
    metrics.batch_committed(0, [_stats("inventory", {"c": 3, "d": 1}, 2, [10, 10, 0], 1)], 4)
    with moto.mock_aws():
        client = boto3.client("cloudwatch", region_name="eu-west-1")
        CloudWatchPublisher(metrics, "cdckit", client).publish()
        listed = client.list_metrics(Namespace="cdckit", MetricName="TotalNumberOfDeleteEventsSeen")["Metrics"]
        assert len(listed) == 1
        assert {d["Name"]: d["Value"] for d in listed[0]["Dimensions"]} == \
            {"Connector": "it", "Context": "streaming", "Database": "inventory"}
        names = {m["MetricName"] for m in client.list_metrics(Namespace="cdckit")["Metrics"]}
        assert {"MilliSecondsBehindSource", "TotalNumberOfEventsSeen", "NumberOfCommittedTransactions",
                "Connected"} <= names


def test_a_failing_cloudwatch_does_not_stop_the_job(caplog: pytest.LogCaptureFixture) -> None:
    class Refusing:
        def put_metric_data(self, **_: Any) -> None:
            raise RuntimeError("throttled")

    publisher = CloudWatchPublisher(ConnectorMetrics("postgresql", "it", ["inventory"]), "cdckit", Refusing())
    publisher.publish()
    publisher.publish()
    assert [r.message for r in caplog.records].count(
        "sending metrics to CloudWatch namespace cdckit failed (RuntimeError); the stream goes on and tries again "
        "with the next values") == 1


def test_the_observer_writes_the_status_file_and_a_json_line_per_batch(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    observer = Observer({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                         "topic.prefix": "it", "cdckit.checkpoint.location": str(tmp_path)}, ["inventory"])
    observer.metrics.batch_committed(0, [_stats("inventory", {"c": 1}, 1, [10, 10, 0], 1)], 1)
    observer.publish("batch")
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["cdckit.metrics"]["streaming"]["inventory"]["TotalNumberOfCreateEventsSeen"] == 1
    status = json.loads((tmp_path / STATUS_FILE).read_text())
    assert status["running"] and status["event"] == "batch"
    observer.close()
    assert not json.loads((tmp_path / STATUS_FILE).read_text())["running"]


def test_custom_metric_tags_are_checked() -> None:
    assert metric_tags("team=data, env=prod") == {"team": "data", "env": "prod"}
    with pytest.raises(ConfigurationError, match=r"custom\.metric\.tags entry 'team' is not key=value"):
        load_config(None, ["connector.class=io.debezium.connector.postgresql.PostgresConnector",
                           "database.hostname=db", "database.user=u", "database.dbname=d", "topic.prefix=it",
                           "custom.metric.tags=team"])


def test_a_partitions_stats_row_counts_ops_transactions_and_names_the_last_event() -> None:
    def change(op: str, commit: int, lsn: int, tx: int) -> tuple[object, ...]:
        value = orjson.dumps({"schema": {}, "payload": {"op": op, "source": {"txId": tx, "lsn": lsn}}}).decode()
        return record("it.public.t", "{}", value, op=op, position=Position(commit, lsn), ts_ms=commit * 10,
                      table="public.t")

    first = [change("c", 10, 1, 100), change("u", 10, 2, 100), change("d", 20, 3, 101)]
    second = [change("c", 20, 4, 101), record("it.public.t", "{}", None, op="tombstone",
                                              position=Position(20, 4, 1), ts_ms=1), change("c", 30, 5, 102)]
    batches = list(with_stats([*arrow_batches(first), *arrow_batches(second)], "inventory", lambda: 2))
    data = pa.Table.from_batches(batches[:-1])
    assert data.num_rows == 6  # the data passes unchanged
    stats_row = batches[-1].to_pylist()[0]
    assert stats_row["op"] == STATS
    stats = json.loads(stats_row["value"])
    assert stats["ops"] == {"c": 3, "u": 1, "d": 1} and stats["transactions"] == 3 and stats["filtered"] == 2
    assert stats["last"]["position"] == [30, 5, 0] and stats["last"]["transaction"] == "102"
    assert stats["last"]["source"] == {"txId": 102, "lsn": 5}


def _every_value() -> ConnectorMetrics:
    metrics = ConnectorMetrics("postgresql", "it", ["inventory"])
    metrics.batch_committed(0, [_stats("inventory", {"c": 1}, 1, [10, 10, 0], 1)], 1)
    metrics.progress({"batchId": 0, "durationMs": {"triggerExecution": 5}})
    metrics.source_health("inventory", {"SlotRetainedWalBytes": 1, "CaptureJobLatencySeconds": 2,
                                        "CleanupMarginSeconds": 3})
    metrics.snapshot_started({"inventory": ["public.orders"]})
    return metrics


def test_the_grafana_dashboard_queries_only_metrics_the_endpoint_serves() -> None:
    import re

    served = {line.split("{")[0].split(" ")[0] for line in generate_latest(_registry(_every_value())).decode()
              .splitlines() if line and not line.startswith("#")}
    dashboard = json.loads((Path(__file__).parents[2] / "dashboards" / "grafana-cdckit.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\b((?:debezium_metrics|cdckit)_[A-Za-z_]+)\{", target["expr"])}
    assert len(queried) >= 10 and queried <= served, queried - served


def test_the_cloudwatch_dashboard_charts_only_metrics_cdckit_sends() -> None:
    import re

    template = (Path(__file__).parents[2] / "infra" / "terraform" / "modules" / "monitoring" /
                "dashboard.json.tftpl").read_text()
    body = json.loads(template.replace("${namespace}", "cdckit").replace("${connector}", "it")
                      .replace("${region}", "eu-west-1"))
    sent = {d["MetricName"] for d in CloudWatchPublisher(_every_value(), "cdckit", object()).data()}
    charted = {name for widget in body["widgets"] for row in widget["properties"]["metrics"] for item in row
               for name in re.findall(r'MetricName="(\w+)"', item["expression"])}
    assert len(charted) >= 10 and charted <= sent, charted - sent


def test_the_terminal_view_shows_lag_rates_and_counts_per_database() -> None:
    from rich.console import Console

    from cdckit.observe.live import LiveView

    console = Console(record=True, width=200, force_terminal=False)
    view = LiveView(console)
    metrics = _every_value()
    console.print(view.render({**metrics.document(), "event": "batch"}))
    metrics.batch_committed(1, [_stats("inventory", {"c": 250}, 5, [20, 20, 0], 1)], 250)
    console.print(view.render({**metrics.document(), "event": "batch"}))
    text = console.export_text()
    assert "cdckit it: batch" in text and "inventory" in text and "251" in text and "251 / 0 / 0" in text
    assert "slot 0.0 MiB" in text and "last batch 1: 250 records" in text
    assert "snapshot of inventory: running, 0 of 1 tables" in text and "public.orders" in text and "0 rows" in text


def test_a_failing_view_or_status_file_does_not_stop_the_job(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "checkpoint").write_text("a file where the checkpoint folder belongs")
    observer = Observer({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                         "topic.prefix": "it", "cdckit.checkpoint.location": str(tmp_path / "checkpoint")},
                        ["inventory"], json_lines=False)

    def broken(_: dict[str, Any]) -> None:
        raise RuntimeError("terminal gone")

    observer.listeners.append(broken)
    document = observer.publish("batch")
    assert document["event"] == "batch"
    assert any("writing status.json failed" in r.message for r in caplog.records)
    assert any("showing the metrics failed: terminal gone" in r.message for r in caplog.records)
