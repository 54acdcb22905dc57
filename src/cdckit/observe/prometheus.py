"""The driver's Prometheus endpoint (``cdckit.metrics.port``), with the standard client library.

Debezium's values carry the names the Prometheus JMX exporter gives Debezium's MBeans with the rules Debezium's
monitoring examples ship (``debezium_metrics_<Attribute>`` with the labels ``plugin``, ``name``, ``task``,
``context`` and ``database``, and ``table`` for ``RowsScanned``), so dashboards and alerts written for Debezium read
cdckit as they are. cdckit's own values are ``cdckit_*``; the last event, transaction and position, which are
strings, are the labels of ``cdckit_last_event_info``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from cdckit.errors import CdcKitError
from cdckit.observe.metrics import STREAMING, ConnectorMetrics

OWN = {"SlotRetainedWalBytes": ("cdckit_slot_retained_wal_bytes", "WAL the replication slot keeps (bytes)"),
       "CaptureJobLatencySeconds": ("cdckit_capture_job_latency_seconds",
                                    "SQL Server capture job: seconds from a commit to its change rows"),
       "CleanupMarginSeconds": ("cdckit_cleanup_margin_seconds",
                                "SQL Server: seconds of changes between the cleanup job's low-water mark and the "
                                "stream's position (0: the next cleanup may remove changes not yet read)")}
LABELS = ("plugin", "name", "task", "context", "database")


class DebeziumCollector(Collector):
    """Reads a job's ``ConnectorMetrics`` at each scrape."""

    def __init__(self, metrics: ConnectorMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        metrics = self.metrics
        tags = sorted(metrics.tags.items())
        families: dict[str, GaugeMetricFamily] = {}
        for sample in metrics.samples():
            extra = [k for k, _ in sample.labels]
            name, documentation = OWN.get(sample.name,
                                          (f"debezium_metrics_{sample.name}", f"Debezium's {sample.name}"))
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    name, documentation, labels=[*LABELS, *extra, *(k for k, _ in tags)])
            family.add_metric([metrics.plugin, metrics.name, "0", sample.context, sample.database,
                               *(v for _, v in sample.labels), *(v for _, v in tags)], sample.value)
        yield from families.values()
        document = metrics.document()
        info = InfoMetricFamily("cdckit_last_event", "the last event a committed batch held",
                                labels=["name", "database"])
        for database, values in document[STREAMING].items():
            info.add_metric([metrics.name, database], {
                "last_event": str(values["LastEvent"]), "last_transaction_id": str(values["LastTransactionId"]),
                "source_event_position": ",".join(f"{k}={v}" for k, v in values["SourceEventPosition"].items())})
        yield info
        batch = document["batch"]
        if batch:
            for key, name, documentation in (
                    ("id", "cdckit_batch_id", "the last committed micro-batch"),
                    ("records", "cdckit_batch_records", "records the last micro-batch wrote"),
                    ("duration_ms", "cdckit_batch_duration_milliseconds", "the last micro-batch's duration"),
                    ("records_per_second", "cdckit_batch_records_per_second",
                     "records the last micro-batch wrote per second of its run")):
                if key in batch:
                    gauge = GaugeMetricFamily(name, documentation, labels=["name"])
                    gauge.add_metric([metrics.name], float(batch[key]))
                    yield gauge


class Endpoint:
    """``/metrics`` on the driver's ``port`` (all interfaces) while the job runs."""

    def __init__(self, metrics: ConnectorMetrics, port: int) -> None:
        from prometheus_client import start_http_server

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(DebeziumCollector(metrics))
        try:
            self.server, self.thread = start_http_server(port, addr="0.0.0.0", registry=self.registry)
        except OSError as exc:
            raise CdcKitError(f"cdckit.metrics.port={port}: the driver cannot serve metrics there ({exc.strerror}); "
                              f"choose a free port, or 0 for none") from None
        self.port = int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
