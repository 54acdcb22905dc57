"""The Delta sink's suites run on a Spark that has a Delta Lake build (``cdckit.versions.DELTA_BUILDS``): ``make
test`` runs them in the virtualenv of the oldest supported Spark (EMR's, with the Delta release EMR ships)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))


# S3A for the tables-on-S3 test (an S3 API served by moto): hadoop-aws of Spark 4.0's Hadoop, with the AWS SDK
# modules it uses instead of the 558 MB SDK bundle its pom asks for; Spark has the rest (Netty, HTTP client, logging).
S3A_SDK = "2.24.8"
SPARK_HAS = ("netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-resolver", "netty-transport",
             "commons-", "httpc", "slf4j", "wildfly")


def _s3a_jars() -> list[Path]:
    from cdckit import versions
    from cdckit.artifacts import fetch

    jars = fetch(f"s3a-hadoop-aws-{versions.HADOOP_AWS}-sdk-{S3A_SDK}", [
        ("org.apache.hadoop", "hadoop-aws", versions.HADOOP_AWS,
         (("software.amazon.awssdk", "bundle"), ("org.apache.hadoop", "*"))),
        ("software.amazon.awssdk", "s3", S3A_SDK, ()),
        ("software.amazon.awssdk", "s3-transfer-manager", S3A_SDK, ()),
        ("software.amazon.awssdk", "sts", S3A_SDK, ())])
    return [jar for jar in jars if not jar.name.startswith(SPARK_HAS)]


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

    jars = ",".join(str(jar) for jar in delta_jars() + _s3a_jars())
    return get_spark({"spark.sql.shuffle.partitions": "2", "spark.jars": jars,
                      "spark.hadoop.fs.s3a.endpoint": s3_endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                      "spark.hadoop.fs.s3a.access.key": "test", "spark.hadoop.fs.s3a.secret.key": "test",
                      "spark.hadoop.fs.s3a.endpoint.region": "us-east-1"}, delta=True)
