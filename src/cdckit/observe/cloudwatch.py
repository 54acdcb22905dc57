"""Debezium's metrics to Amazon CloudWatch (``cdckit.metrics.cloudwatch.namespace``), through boto3, from the driver.

Each committed batch, and each trigger that finds nothing new, sends every numeric value with the dimensions
``Connector`` (``topic.prefix``), ``Context`` (streaming or snapshot) and ``Database`` (and ``Table`` for
``RowsScanned``), plus ``custom.metric.tags``. Credentials and region are boto3's (the instance or pod role on AWS).
A failed call is logged once and retried with the next values: the stream does not stop for its metrics.
"""

from __future__ import annotations

import logging
from typing import Any

from cdckit.observe.metrics import ConnectorMetrics

log = logging.getLogger("cdckit.metrics")
PER_CALL = 500  # PutMetricData takes up to 1,000 values a call


def unit(name: str) -> str:
    if name.startswith("MilliSeconds"):
        return "Milliseconds"
    if name.endswith("Seconds"):
        return "Seconds"
    if name.endswith("Bytes"):
        return "Bytes"
    if name in ("Connected", "SnapshotRunning", "SnapshotCompleted", "SnapshotAborted"):
        return "None"
    return "Count"


class CloudWatchPublisher:
    def __init__(self, metrics: ConnectorMetrics, namespace: str, client: Any = None) -> None:
        if client is None:
            import boto3

            client = boto3.client("cloudwatch")
        self.metrics = metrics
        self.namespace = namespace
        self.client = client
        self._failing = False

    def data(self) -> list[dict[str, Any]]:
        metrics = self.metrics
        out = []
        for sample in metrics.samples():
            dimensions = [{"Name": "Connector", "Value": metrics.name}, {"Name": "Context", "Value": sample.context},
                          {"Name": "Database", "Value": sample.database or "-"}]
            dimensions += [{"Name": key.capitalize(), "Value": value} for key, value in sample.labels]
            dimensions += [{"Name": key, "Value": value} for key, value in sorted(metrics.tags.items())]
            out.append({"MetricName": sample.name, "Dimensions": dimensions, "Value": sample.value,
                        "Unit": unit(sample.name)})
        return out

    def publish(self) -> None:
        data = self.data()
        try:
            for start in range(0, len(data), PER_CALL):
                self.client.put_metric_data(Namespace=self.namespace, MetricData=data[start:start + PER_CALL])
        except Exception as exc:  # any failure of the call: the stream goes on
            if not self._failing:
                log.warning("sending metrics to CloudWatch namespace %s failed (%s); the stream goes on and "
                            "tries again with the next values", self.namespace, type(exc).__name__)
            self._failing = True
            return
        if self._failing:
            log.info("sending metrics to CloudWatch namespace %s works again", self.namespace)
        self._failing = False
