"""The Delta sink's suites run on a Spark that has a Delta Lake build (``cdckit.versions.DELTA_BUILDS``): ``make
test`` runs them in the virtualenv of the oldest supported Spark (EMR's, with the Delta release EMR ships)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))


def _image_jars() -> list[Path]:
    """What the Kubernetes job image adds to Spark for S3A and MSK IAM authentication (``install.sh jars`` on
    Apache's image): hadoop-aws, aws-msk-iam-auth and the AWS SDK modules they use; and Spark's Kafka connector,
    whose kafka-clients MSK IAM authentication plugs into."""
    from cdckit.artifacts import aws_jars, aws_sdk_jars, spark_kafka_jars

    return [*aws_jars(), *aws_sdk_jars(), *spark_kafka_jars()]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3 API (moto) for the whole session, named in the environment before Spark starts, so that Spark's Python
    workers, which cdckit's S3 staging runs in, inherit it; S3A is pointed at it too."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"),
                        ("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_S3", endpoint)):
        os.environ[name] = value
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def spark(s3_endpoint: str) -> object:
    from cdckit.artifacts import delta_jars
    from cdckit.spark.session import get_spark

    jars = ",".join(str(jar) for jar in delta_jars() + _image_jars())
    return get_spark({"spark.sql.shuffle.partitions": "2", "spark.jars": jars,
                      "spark.hadoop.fs.s3a.endpoint": s3_endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                      "spark.hadoop.fs.s3a.access.key": "test", "spark.hadoop.fs.s3a.secret.key": "test",
                      "spark.hadoop.fs.s3a.endpoint.region": "us-east-1"}, delta=True)
