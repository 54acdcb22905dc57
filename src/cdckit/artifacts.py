"""Java artefacts from Maven Central, fetched once into a cache folder with the machine's Maven.

Maven runs with ``--strict-checksums``: a jar or pom whose checksum does not match the one Maven Central publishes
beside it (or that has none) fails the fetch, where Maven's default policy only warns. The checksums are Maven
Central's own, fetched with the artefact, not ones pinned here.

Example::

    jars = fetch("kafka-broker-4.1.1", [("org.apache.kafka", "kafka_2.13", "4.1.1", ())])
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from cdckit import versions
from cdckit.errors import CdcKitError

Artifact = tuple[str, str, str, Sequence[tuple[str, str]]]  # group, artifact, version, exclusions


def cache_root() -> Path:
    return Path(os.environ.get("CDCKIT_CACHE", Path.home() / ".cache" / "cdckit"))


def _pom(name: str, artifacts: Sequence[Artifact]) -> str:
    dependencies = []
    for group, artifact, version, exclusions in artifacts:
        excluded = "".join(f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
                           for g, a in exclusions)
        dependencies.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                            f"<version>{version}</version><exclusions>{excluded}</exclusions></dependency>")
    return (f'<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>dev.cdckit.cache</groupId><artifactId>{name}</artifactId><version>1</version>"
            f"<packaging>pom</packaging><dependencies>{''.join(dependencies)}</dependencies></project>")


def _plain(output: str) -> list[str]:
    """Maven's output lines without its colours, ``[ERROR]`` marks and ``-> [Help 1]`` pointers."""
    lines = (re.sub(r"\x1b\[[0-9;]*m", "", line) for line in output.splitlines())
    return [re.sub(r"^\[(?:ERROR|WARNING)\]\s*|\s*-> \[Help \d+\]$", "", line).strip() for line in lines]


def fetch(name: str, artifacts: Sequence[Artifact], keep: Sequence[str] | None = None) -> list[Path]:
    """The jars of ``artifacts`` and their runtime dependencies (only names starting with ``keep`` entries when
    given), downloaded into ``<cache>/<name>/lib`` the first time and reused afterwards."""
    folder = cache_root() / name
    lib = folder / "lib"
    done = folder / ".complete"
    if not done.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise CdcKitError(f"Maven (mvn) is needed once to fetch {name} from Maven Central; install it "
                              f"(Debian: apt-get install maven) or put the jars in {lib}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pom.xml").write_text(_pom(name, artifacts))
        shutil.rmtree(lib, ignore_errors=True)
        result = subprocess.run([mvn, "-q", "-B", "--strict-checksums", "dependency:copy-dependencies",
                                 f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
                                cwd=folder, capture_output=True, text=True)
        if result.returncode != 0:
            output = result.stdout + result.stderr
            mismatch = next((line for line in _plain(output) if "checksum" in line.lower()), None)
            if mismatch is not None:
                raise CdcKitError(f"fetching {name} from Maven Central failed: a download does not match the "
                                  f"checksum published beside it, or has none, so nothing of it is used ({mismatch}); "
                                  f"run again, and if it persists check the network path and Maven's mirror settings")
            tail = "\n".join(output.splitlines()[-8:])
            raise CdcKitError(f"fetching {name} from Maven Central failed:\n{tail}")
        done.touch()
    jars = sorted(lib.glob("*.jar"))
    if keep is not None:
        jars = [jar for jar in jars if jar.name.startswith(tuple(keep))]
    return jars


def spark_kafka_jars(spark_version: str | None = None) -> list[Path]:
    """Spark's Kafka connector for a Spark release (the running PySpark's by default): the builds
    ``versions.kafka_connector`` names, with kafka-clients as the connector's pom asks.

    The connector's pom asks for a token provider of its own version, which Maven Central may not have; that
    dependency is left out and the chosen token-provider build added instead.
    """
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    try:
        connector, token_provider = versions.kafka_connector(spark_version)
    except ValueError:
        raise CdcKitError(f"Spark {spark_version} has no Kafka connector build on Maven Central; cdckit supports "
                          f"Spark {versions.OLDEST_SPARK} to below {versions.SPARK_BELOW}") from None
    sql_kafka = f"spark-sql-kafka-0-10_{versions.SCALA}"
    token_provider_kafka = f"spark-token-provider-kafka-0-10_{versions.SCALA}"
    return fetch(f"spark-kafka-{connector}-token-provider-{token_provider}", [
        ("org.apache.spark", sql_kafka, connector, (("org.apache.spark", token_provider_kafka),)),
        ("org.apache.spark", token_provider_kafka, token_provider, (("org.apache.kafka", "kafka-clients"),)),
    ], keep=("spark-sql-kafka", "spark-token-provider", "kafka-clients", "commons-pool2"))


def delta_jars(spark_version: str | None = None) -> list[Path]:
    """Delta Lake's jars for a Spark release (the running PySpark's by default): delta-spark, delta-storage and
    the ANTLR runtime its SQL parser needs (Spark ships the rest)."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    build = versions.delta_build(spark_version)
    if build is None:
        tested = ", ".join(f"Spark {minor}.x with Delta {version}"
                           for minor, (_, version) in versions.DELTA_BUILDS.items())
        newest = versions.DELTA_NEWEST_SPARK
        raise CdcKitError(f"cdckit.sink=delta: cdckit runs Delta Lake on {tested}, not on Spark {spark_version}; run "
                          f"the job on such a Spark (locally: pip install 'pyspark[sql]=={newest}' in a virtualenv of "
                          f"its own, as `make test-delta` does in .venv-spark-{newest}), or start it with "
                          f"spark-submit and add the Delta Lake build made for your Spark minor yourself (--packages "
                          f"io.delta:...)")
    artifact, version = build
    # Delta 4.4's builds also need Delta Kernel (delta-kernel-*), which theirs load for catalog-managed tables
    return fetch(f"delta-{artifact}-{version}", [("io.delta", artifact, version, ())],
                 keep=("delta-spark", "delta-storage", "delta-kernel", "antlr4-runtime"))


def job_image_jars(spark_version: str = versions.TARGET_SPARK, msk_iam_auth: str = versions.MSK_IAM_AUTH,
                   hadoop_aws: str = versions.HADOOP_AWS, delta: bool = True, aws_sdk: str | None = None
                   ) -> list[Path]:
    """The jars the job image adds to its Spark release: the Kafka connector, MSK IAM authentication and S3A
    (``aws-msk-iam-auth`` and ``hadoop-aws`` without their dependencies), with ``delta`` Delta Lake's, and with
    ``aws_sdk`` the AWS SDK v2 modules of that release they need (EMR's images have their own SDK; Apache's none)."""
    jars = spark_kafka_jars(spark_version)
    if delta:
        jars += delta_jars(spark_version)
    jars += aws_jars(msk_iam_auth, hadoop_aws)
    if aws_sdk:
        jars += aws_sdk_jars(aws_sdk)
    return jars


def aws_jars(msk_iam_auth: str = versions.MSK_IAM_AUTH, hadoop_aws: str = versions.HADOOP_AWS) -> list[Path]:
    """MSK IAM authentication and S3A (``aws-msk-iam-auth`` and ``hadoop-aws``), without their dependencies."""
    return fetch(f"job-image-aws-{msk_iam_auth}-{hadoop_aws}", [
        ("software.amazon.msk", "aws-msk-iam-auth", msk_iam_auth, (("*", "*"),)),
        ("org.apache.hadoop", "hadoop-aws", hadoop_aws, (("*", "*"),)),
    ], keep=("aws-msk-iam-auth", "hadoop-aws"))


# What Spark's own jars folder has of the SDK modules' dependencies (Netty, Apache's HTTP client, logging)
SPARK_HAS = ("netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-resolver", "netty-transport",
             "commons-", "httpc", "slf4j", "wildfly")


def aws_sdk_jars(version: str = versions.AWS_SDK_V2) -> list[Path]:
    """The AWS SDK v2 modules S3A (``hadoop-aws``: S3, its transfer manager, STS) and MSK IAM authentication
    (``aws-msk-iam-auth``: STS, SSO) use, about 9 MB, instead of the SDK's 558 MB bundle that hadoop-aws's pom asks
    for; less what Spark ships."""
    jars = fetch(f"aws-sdk-{version}", [("software.amazon.awssdk", module, version, ())
                                        for module in ("s3", "s3-transfer-manager", "sts", "sso", "ssooidc")])
    return [jar for jar in jars if not jar.name.startswith(SPARK_HAS)]


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m cdckit.artifacts", description="copy jars for the job image")
    parser.add_argument("what", choices=("spark-jars",))
    parser.add_argument("target", type=Path, help="folder to copy the jars into (Spark's jars folder)")
    parser.add_argument("--spark", default=versions.TARGET_SPARK,
                        help="the image's Spark release (the Kafka connector is chosen for it)")
    parser.add_argument("--msk-iam-auth", default=versions.MSK_IAM_AUTH)
    parser.add_argument("--hadoop-aws", default=versions.HADOOP_AWS)
    parser.add_argument("--no-delta", action="store_true", help="leave Delta Lake out (the image has its own)")
    parser.add_argument("--aws-sdk", metavar="VERSION", help="add the AWS SDK v2 modules of this release, which "
                        "hadoop-aws and aws-msk-iam-auth need, to an image that has none (Apache's)")
    args = parser.parse_args(argv)
    if not versions.supported(args.spark):
        parser.error(f"Spark {args.spark} is outside cdckit's range: {versions.OLDEST_SPARK} to below "
                     f"{versions.SPARK_BELOW}")
    args.target.mkdir(parents=True, exist_ok=True)
    for jar in job_image_jars(args.spark, args.msk_iam_auth, args.hadoop_aws, delta=not args.no_delta,
                              aws_sdk=args.aws_sdk):
        shutil.copy2(jar, args.target / jar.name)
        print(jar.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
