"""The one place that names the Spark releases cdckit runs on and the runtime it is deployed to.

Everything else takes its versions from here or is checked against it by ``tests/unit/test_versions.py``: the
PySpark range in ``pyproject.toml``, the job image's base and jars (``containers/job/Dockerfile``), the EMR release
label (``infra/terraform``), the Spark operator's ``sparkVersion`` (``cdckit.deploy``) and the README's table.

Example::

    >>> from cdckit.versions import kafka_connector
    >>> kafka_connector("4.0.2")
    ('4.0.2', '4.0.0')
"""

from __future__ import annotations

# Spark releases cdckit supports: from the oldest one tested (EMR's) up to, not including, the first minor it has
# not been tested on. pyproject.toml's pyspark range says the same.
OLDEST_SPARK = "4.0.2"
SPARK_BELOW = "4.4"

# The runtime the kit deploys to: Amazon EMR's Spark 4 runtime (EMR on EC2, on EKS and Serverless). The job image
# and the Spark operator's manifests run the same Spark release.
EMR_RELEASE_LABEL = "emr-spark-8.0.0"
TARGET_SPARK = "4.0.2"  # emr-spark-8.0.0's Spark (with Delta 4.0.0, Python 3.11 to 3.13, Java 17)
SCALA = "2.13"
JAVA = "17"
JOB_IMAGE_BASE = f"apache/spark:{TARGET_SPARK}-scala{SCALA}-java{JAVA}-python3-ubuntu"
# EMR Serverless takes custom images built on its own image of the application's release (run as user hadoop).
# `make deploy` pins the digest a base's tag points at in the environment's job-image-base-<runtime>.lock the first
# time, and builds on that digest from then on.
EMR_SERVERLESS_IMAGE_BASE = f"public.ecr.aws/emr-serverless/spark/{EMR_RELEASE_LABEL}:latest"
# The Kubeflow Spark operator's Helm chart the Kubernetes path installs (infra/terraform/modules/spark-eks); its
# SparkApplication CRD is the one the manifests are validated against (tests/fixtures/spark-operator).
SPARK_OPERATOR_CHART = "2.5.2"
HADOOP_AWS = "3.4.1"  # the Hadoop release Spark 4.0's distribution is built with
# The AWS SDK v2 release of the modules S3A and MSK IAM authentication need, added to images that carry no SDK of
# their own (Apache's; EMR's have theirs): hadoop-aws 3.4.1 is built with the 2.24 line (hadoop-project's
# aws-java-sdk-v2.version, 2.24.6); aws-msk-iam-auth asks for 2.30 but runs on 2.24 (decision 0030).
AWS_SDK_V2 = "2.24.8"
MSK_IAM_AUTH = "2.3.2"

# Builds of Spark's Kafka connector on Maven Central, by artifact: the connector (spark-sql-kafka-0-10) is
# published for most releases; its token provider (spark-token-provider-kafka-0-10) for fewer. Each Spark release
# takes the newest build not newer than itself, the connector within its own minor line, the token provider too
# where one exists (same API within a line). Spark 4.3 has no connector build there yet: it takes 4.2.0's, whose
# DataSource V2 API 4.3 keeps (the Kafka tests run it).
KAFKA_CONNECTOR_BUILDS = ("4.0.0", "4.0.1", "4.0.2", "4.0.3", "4.0.4", "4.1.0", "4.1.1", "4.1.2", "4.1.3",
                          "4.2.0")
KAFKA_TOKEN_PROVIDER_BUILDS = ("4.0.0", "4.1.1", "4.2.0")

# Delta Lake (io.delta) builds by Spark minor: Delta reaches into Spark's internals, so each build runs only on the
# minor it was made for (Delta 4.4.0's build for Spark 4.2 fails on 4.3 at its first idempotent write). Spark 4.0 takes
# the Delta release EMR's Spark 4 runtime ships; Spark 4.1 and 4.2 take Delta 4.4.0's builds for them (decision
# 0042). Spark 4.3 has none on Maven Central: a Delta sink there is refused (decision 0025).
DELTA_BUILDS = {
    "4.0": ("delta-spark_2.13", "4.0.0"),  # emr-spark-8.0.0's Delta
    "4.1": ("delta-spark_4.1_2.13", "4.4.0"),
    "4.2": ("delta-spark_4.2_2.13", "4.4.0"),
}
# The Spark release the Delta sink's suites run on beside the oldest (EMR's, with Delta 4.0.0): the newest minor
# that has a Delta build (`make test-delta`); the default PySpark, 4.3, has none.
DELTA_NEWEST_SPARK = "4.2.1"

def release(version: str) -> tuple[int, ...]:
    """``"4.0.2"`` -> ``(4, 0, 2)``; suffixes such as ``.dev0`` or ``-amzn-0`` are dropped."""
    parts = []
    for piece in version.replace("-", ".").split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def supported(spark_version: str) -> bool:
    return release(OLDEST_SPARK) <= release(spark_version) < release(SPARK_BELOW)


def _newest_build(builds: tuple[str, ...], spark_version: str, same_minor: bool) -> str | None:
    wanted = release(spark_version)
    candidates = [b for b in builds if release(b) <= wanted and (not same_minor or release(b)[:2] == wanted[:2])]
    return max(candidates, key=release) if candidates else None


def kafka_connector(spark_version: str) -> tuple[str, str]:
    """The (spark-sql-kafka-0-10, spark-token-provider-kafka-0-10) builds for a Spark release."""
    connector = (_newest_build(KAFKA_CONNECTOR_BUILDS, spark_version, same_minor=True)
                 or _newest_build(KAFKA_CONNECTOR_BUILDS, spark_version, same_minor=False))
    if connector is None:
        raise ValueError(f"no Kafka connector build for Spark {spark_version}")
    token_provider = (_newest_build(KAFKA_TOKEN_PROVIDER_BUILDS, connector, same_minor=True)
                      or _newest_build(KAFKA_TOKEN_PROVIDER_BUILDS, connector, same_minor=False))
    assert token_provider is not None
    return connector, token_provider


def delta_build(spark_version: str) -> tuple[str, str] | None:
    """The (artifact, version) of Delta Lake cdckit runs on a Spark release, or None."""
    minor = ".".join(str(part) for part in release(spark_version)[:2])
    return DELTA_BUILDS.get(minor)
