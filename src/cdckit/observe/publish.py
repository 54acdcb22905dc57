"""Where a job's metrics go: the Prometheus endpoint, CloudWatch, a JSON line per batch in the job log (where
``cdckit.metrics.log`` asks for it), and the status file ``cdckit status`` reads (``<checkpoint>/status.json``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cdckit.config.loader import metric_tags
from cdckit.formats.debezium.envelope import format_settings
from cdckit.observe.metrics import ConnectorMetrics
from cdckit.state import StateStore

STATUS_FILE = "status.json"
# The least time between two sends: CloudWatch keeps a value a minute (standard resolution) and charges per call;
# the status file may be an S3 object. The job's end and the snapshot's start and end are always sent.
CLOUDWATCH_EVERY_S = 10.0
STATUS_EVERY_S = 1.0
Health = Callable[[ConnectorMetrics], Mapping[str, Mapping[str, float | None]]]
log = logging.getLogger("cdckit.metrics")


class Observer:
    """One job's metrics (``metrics``) and their publishers, built from the connector's settings."""

    def __init__(self, options: Mapping[str, str], databases: Iterable[str], health: Health | None = None,
                 json_lines: bool = True) -> None:
        settings = format_settings(options)
        self.metrics = ConnectorMetrics(settings.connector, settings.topic_prefix, databases,
                                        tags=metric_tags(options.get("custom.metric.tags", "")))
        self.health = health
        self.json_lines = json_lines
        self.status = StateStore(options.get("cdckit.checkpoint.location", "cdckit-checkpoint"))
        self.endpoint: Any = None
        self.cloudwatch: Any = None
        self.listeners: list[Callable[[dict[str, Any]], None]] = []  # e.g. the terminal's live view
        self.snapshot_rows: Callable[[], dict[str, int]] | None = None  # a running snapshot's rows per topic
        # called with a snapshot's report once it completed (cdckit stream prints its summary)
        self.snapshot_listeners: list[Callable[[Any], None]] = []
        self._lock = threading.Lock()
        self._polled = -1e9
        self._sent = {"cloudwatch": -1e9, "status": -1e9}
        port = int(options.get("cdckit.metrics.port", "0") or "0")
        if port:
            from cdckit.observe.prometheus import Endpoint

            self.endpoint = Endpoint(
                self.metrics, port, host=options.get("cdckit.metrics.host", "") or "127.0.0.1",
                timeout_s=int(options.get("cdckit.metrics.timeout.ms", "") or "10000") / 1000,
                max_connections=int(options.get("cdckit.metrics.max.connections", "") or "8"))
        namespace = options.get("cdckit.metrics.cloudwatch.namespace", "")
        if namespace:
            from cdckit.observe.cloudwatch import CloudWatchPublisher

            self.cloudwatch = CloudWatchPublisher(self.metrics, namespace)

    def poll_health(self, every_s: float = 0.0) -> None:
        """Read the source's health now, or (``every_s``) only if it was read longer ago than that."""
        if self.health is None or time.monotonic() - self._polled < every_s:
            return
        self._polled = time.monotonic()
        try:
            for database, values in self.health(self.metrics).items():
                self.metrics.source_health(database, values)
        except Exception as exc:  # the source's health is for the metrics only: the stream goes on
            log.warning("reading the source's health for the metrics failed: %s", type(exc).__name__)

    def publish(self, event: str, running: bool = True) -> dict[str, Any]:
        """After a committed batch (``batch``), a trigger that found nothing new (``idle``), a snapshot's start,
        progress or end (``snapshot``, ``progress``), or the job's end (``stopped``): a JSON line (batches and
        snapshots), the values to CloudWatch (at most every ``CLOUDWATCH_EVERY_S``), the status file (at most every
        ``STATUS_EVERY_S``), and the listeners (every time)."""
        with self._lock:
            document = self.metrics.document()
            document.update({"event": event, "running": running, "host": socket.gethostname(), "pid": os.getpid()})
            if self.endpoint is not None:
                document["metrics_port"] = self.endpoint.port
            if self.json_lines and event in ("batch", "snapshot"):
                # the message alone on its line (stderr, the job log), for log pipelines to parse
                with contextlib.suppress(OSError, ValueError):  # a closed stderr does not stop the job
                    print(json.dumps({"cdckit.metrics": document}, sort_keys=True), file=sys.stderr, flush=True)
            now = time.monotonic()
            final = event in ("stopped", "snapshot")
            if self.cloudwatch is not None and (final or now - self._sent["cloudwatch"] >= CLOUDWATCH_EVERY_S):
                self._sent["cloudwatch"] = now
                self.cloudwatch.publish()
            if final or now - self._sent["status"] >= STATUS_EVERY_S:
                self._sent["status"] = now
                try:
                    self.status.write_json(STATUS_FILE, document)
                except Exception as exc:  # the status file is for cdckit status: the stream goes on without it
                    log.warning("writing %s failed: %s", STATUS_FILE, getattr(exc, "strerror", None) or exc)
            for listener in self.listeners:
                try:
                    listener(document)
                except Exception as exc:  # a view of the metrics never stops the job
                    log.warning("showing the metrics failed: %s", exc)
            return document

    def close(self) -> None:
        try:
            self.poll_health()
            self.publish("stopped", running=False)
        finally:
            if self.endpoint is not None:
                self.endpoint.close()
            close = getattr(self.health, "close", None)
            if close is not None:
                close()
