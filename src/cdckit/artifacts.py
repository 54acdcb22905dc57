"""Java artefacts from Maven Central, fetched once into a cache folder with the machine's Maven.

Example::

    jars = fetch("kafka-broker-4.1.1", [("org.apache.kafka", "kafka_2.13", "4.1.1", ())])
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

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
        result = subprocess.run([mvn, "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={lib}",
                                 "-DincludeScope=runtime"], cwd=folder, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-8:])
            raise CdcKitError(f"fetching {name} from Maven Central failed:\n{tail}")
        done.touch()
    jars = sorted(lib.glob("*.jar"))
    if keep is not None:
        jars = [jar for jar in jars if jar.name.startswith(tuple(keep))]
    return jars


# Spark's Kafka connector. PySpark 4.3.0's own build of it is not on Maven Central (nor is the 4.2 token
# provider), so cdckit uses the 4.2.0 connector with the 4.0.0 token provider, the newest builds there; both
# speak the DataSource V2 API Spark 4.3 keeps (checked by the Kafka tests).
SPARK_KAFKA_VERSION = "4.2.0"
SPARK_TOKEN_PROVIDER_VERSION = "4.0.0"


def spark_kafka_jars() -> list[Path]:
    return fetch(f"spark-kafka-{SPARK_KAFKA_VERSION}", [
        ("org.apache.spark", "spark-sql-kafka-0-10_2.13", SPARK_KAFKA_VERSION,
         (("org.apache.spark", "spark-token-provider-kafka-0-10_2.13"),)),
        ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", SPARK_TOKEN_PROVIDER_VERSION,
         (("org.apache.kafka", "kafka-clients"),)),
    ], keep=("spark-sql-kafka", "spark-token-provider", "kafka-clients", "commons-pool2"))


def job_image_jars(kafka: str = SPARK_KAFKA_VERSION, msk_iam_auth: str = "2.3.2",
                   hadoop_aws: str = "3.4.1") -> list[Path]:
    """The jars the job image adds to Spark: the Kafka connector, MSK IAM authentication and S3A
    (``aws-msk-iam-auth`` and ``hadoop-aws`` without their dependencies: the AWS SDK they need is part of EMR's
    images; on Apache's image add the SDK bundle matching hadoop-aws)."""
    jars = spark_kafka_jars() if kafka == SPARK_KAFKA_VERSION else fetch(f"spark-kafka-{kafka}", [
        ("org.apache.spark", "spark-sql-kafka-0-10_2.13", kafka, ())],
        keep=("spark-sql-kafka", "spark-token-provider", "kafka-clients", "commons-pool2"))
    jars += fetch(f"job-image-aws-{msk_iam_auth}-{hadoop_aws}", [
        ("software.amazon.msk", "aws-msk-iam-auth", msk_iam_auth, (("*", "*"),)),
        ("org.apache.hadoop", "hadoop-aws", hadoop_aws, (("*", "*"),)),
    ], keep=("aws-msk-iam-auth", "hadoop-aws"))
    return jars


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m cdckit.artifacts", description="copy jars for the job image")
    parser.add_argument("what", choices=("spark-jars",))
    parser.add_argument("target", type=Path, help="folder to copy the jars into (Spark's jars folder)")
    parser.add_argument("--kafka", default=SPARK_KAFKA_VERSION)
    parser.add_argument("--msk-iam-auth", default="2.3.2")
    parser.add_argument("--hadoop-aws", default="3.4.1")
    args = parser.parse_args(argv)
    args.target.mkdir(parents=True, exist_ok=True)
    for jar in job_image_jars(args.kafka, args.msk_iam_auth, args.hadoop_aws):
        shutil.copy2(jar, args.target / jar.name)
        print(jar.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
