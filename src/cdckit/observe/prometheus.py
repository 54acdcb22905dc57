"""The driver's Prometheus endpoint (``cdckit.metrics.port``), with the standard client library's exposition.

Debezium's values carry the names the Prometheus JMX exporter gives Debezium's MBeans with the rules Debezium's
monitoring examples ship (``debezium_metrics_<Attribute>`` with the labels ``plugin``, ``name``, ``task``,
``context`` and ``database``, and ``table`` for ``RowsScanned``), so dashboards and alerts written for Debezium read
cdckit as they are. cdckit's own values are ``cdckit_*``; the last event, transaction and position, which are
strings, are the labels of ``cdckit_last_event_info``.
"""

from __future__ import annotations

import io
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any, ClassVar

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import Collector

from cdckit.errors import CdcKitError, first_line
from cdckit.observe.metrics import STREAMING, ConnectorMetrics

OWN = {"SlotRetainedWalBytes": ("cdckit_slot_retained_wal_bytes", "WAL the replication slot keeps (bytes)"),
       "CaptureJobLatencySeconds": ("cdckit_capture_job_latency_seconds",
                                    "SQL Server capture job: seconds from a commit to its change rows"),
       "CleanupMarginSeconds": ("cdckit_cleanup_margin_seconds",
                                "SQL Server: seconds of changes between the cleanup job's low-water mark and the "
                                "stream's position (0: the next cleanup may remove changes not yet read)")}
LABELS = ("plugin", "name", "task", "context", "database")
log = logging.getLogger("cdckit.metrics")


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


class _DeadlineReader(io.RawIOBase):
    """A connection's reading side whose every read ends by one deadline: a request sent a byte at a time does not
    hold its thread longer than the timeout."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request was not received in time")
        self.sock.settimeout(remaining)
        return self.sock.recv_into(buffer)


class _Handler(MetricsHandler):
    """``/metrics`` (prometheus_client's handler) with one deadline for the whole request, and ``timeout`` again for
    the answer to be taken. One request per connection (HTTP/1.0)."""

    timeout: ClassVar[float | None] = 10.0  # set by Endpoint; never None here

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + (self.timeout or 10.0)))

    def do_GET(self) -> None:
        self.connection.settimeout(self.timeout)  # sendall's timeout bounds the whole answer
        super().do_GET()


class BoundedServer(ThreadingHTTPServer):
    """An HTTP server that serves at most ``max_connections`` connections at once, each on its own daemon thread
    for at most about twice ``timeout`` seconds; a connection beyond that is closed as soon as it is accepted, on the
    accepting thread. The driver's threads therefore grow by ``max_connections`` at most, whatever clients do."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64  # a burst of connections waits in the kernel to be accepted (and closed if over the cap)

    def __init__(self, address: tuple[str, int], handler: type[_Handler], max_connections: int,
                 family: socket.AddressFamily = socket.AF_INET) -> None:
        self.address_family = family
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # every slot is taken: this connection gets no thread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or stalled is no error of the job's; another failure is logged on one line."""
        failure = sys.exc_info()[1]
        if failure is not None and not isinstance(failure, OSError):
            log.warning("serving /metrics failed: %s: %s", type(failure).__name__, first_line(failure))


class Endpoint:
    """``/metrics`` on the driver's ``host`` and ``port`` while the job runs (``cdckit.metrics.host``: the loopback
    by default), serving ``max_connections`` clients at once that each have ``timeout_s`` to send their request."""

    def __init__(self, metrics: ConnectorMetrics, port: int, host: str = "127.0.0.1", timeout_s: float = 10.0,
                 max_connections: int = 8) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(DebeziumCollector(metrics))
        handler = type("CdcKitMetricsHandler", (_Handler,), {"registry": self.registry, "timeout": timeout_s})
        try:
            family, address = _bind_address(host, port)
            self.server = BoundedServer(address, handler, max_connections, family)
        except OSError as exc:
            raise CdcKitError(f"cdckit.metrics.host={host}, cdckit.metrics.port={port}: the driver cannot serve "
                              f"metrics there ({exc.strerror or exc}); choose a free port and an address of this "
                              f"machine, or port 0 for none") from None
        self.thread = threading.Thread(target=self.server.serve_forever, name="cdckit-metrics", daemon=True)
        self.thread.start()
        self.host = host
        self.port = int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def _bind_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[str, int]]:
    """The address family and address to bind ``host`` (an address or a name of this machine) and ``port``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    return family, (str(address[0]), int(address[1]))
