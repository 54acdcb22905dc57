"""The job image's install steps run here as the Dockerfile runs them (the jars step fetches from Maven Central)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from cdckit import versions

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "containers" / "job" / "install.sh"


def _spark_home(tmp_path: Path, release: str) -> Path:
    """A base image's Spark folder as far as the install steps look at it: its RELEASE file."""
    home = tmp_path / "spark"
    home.mkdir()
    (home / "RELEASE").write_text(f"Spark {release} (git revision 0000000) built for Hadoop {versions.HADOOP_AWS}\n")
    return home


def _run(*args: str, spark_home: Path | None = None, emr_delta: Path | None = None, emr_sdk: Path | None = None
         ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "EMR_DELTA_LIB": str(emr_delta or "/nonexistent"), "EMR_AWS_SDK_LIB": str(emr_sdk or "/nonexistent")}
    env.pop("SPARK_HOME", None)
    if spark_home is not None:
        env["SPARK_HOME"] = str(spark_home)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600)


def _jars(tmp_path: Path, spark: str = versions.TARGET_SPARK, **options: Path) -> subprocess.CompletedProcess[str]:
    return _run("jars", str(tmp_path / "jars"), spark, versions.MSK_IAM_AUTH, versions.HADOOP_AWS,
                versions.AWS_SDK_V2, **options)


def test_jars_step_puts_the_images_kafka_connector_msk_iam_s3a_and_aws_sdk_jars_in_sparks_folder(tmp_path: Path
                                                                                               ) -> None:
    spark = versions.TARGET_SPARK
    result = _jars(tmp_path, spark_home=_spark_home(tmp_path, spark))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in (tmp_path / "jars").glob("*.jar"))
    connector, token_provider = versions.kafka_connector(spark)
    assert connector == spark
    artifact, delta = versions.DELTA_BUILDS["4.0"]
    for expected in (f"spark-sql-kafka-0-10_2.13-{connector}.jar",
                     f"spark-token-provider-kafka-0-10_2.13-{token_provider}.jar", "kafka-clients-",
                     f"aws-msk-iam-auth-{versions.MSK_IAM_AUTH}.jar", f"hadoop-aws-{versions.HADOOP_AWS}.jar",
                     f"{artifact}-{delta}.jar", f"delta-storage-{delta}.jar", "antlr4-runtime-",
                     *(f"{module}-{versions.AWS_SDK_V2}.jar" for module in ("s3", "s3-transfer-manager", "sts",
                                                                             "sso", "ssooidc", "auth"))):
        assert any(name.startswith(expected) for name in names), (expected, names)
    assert len([n for n in names if n.startswith(("spark-sql-kafka", "spark-token-provider"))]) == 2, names
    # Spark's own (a second copy would clash with it), and the SDK's bundle (558 MB), which the modules stand for
    assert not [n for n in names if n.startswith(("scala-library", "hadoop-client", "netty-transport-", "netty-codec-",
                                                  "httpclient-", "slf4j-", "bundle-"))], names


def test_the_aws_sdk_is_of_the_line_hadoop_aws_is_built_with(tmp_path: Path) -> None:
    # hadoop-project's pom (hadoop-aws's parent) names the SDK release S3A is qualified with: 2.24.6
    repository = tmp_path / "m2"
    artifact = f"org.apache.hadoop:hadoop-project:{versions.HADOOP_AWS}:pom"
    result = subprocess.run(["mvn", "-q", "-B", f"-Dmaven.repo.local={repository}", "dependency:get",
                             f"-Dartifact={artifact}", "-Dtransitive=false"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    pom = (repository / "org/apache/hadoop/hadoop-project" / versions.HADOOP_AWS
           / f"hadoop-project-{versions.HADOOP_AWS}.pom").read_text()
    built_with = re.search(r"<aws-java-sdk-v2.version>([^<]+)</aws-java-sdk-v2.version>", pom)
    assert built_with is not None
    assert versions.release(built_with.group(1))[:2] == versions.release(versions.AWS_SDK_V2)[:2], (
        f"hadoop-aws {versions.HADOOP_AWS} is built with the AWS SDK {built_with.group(1)}: set AWS_SDK_V2 in "
        f"cdckit/versions.py to a release of its line")


def test_jars_step_leaves_delta_and_the_aws_sdk_to_an_emr_image_that_carries_its_own(tmp_path: Path) -> None:
    emr_delta, emr_sdk = tmp_path / "aws-delta", tmp_path / "aws-java-sdk-v2"
    emr_delta.mkdir()
    (emr_delta / "delta-spark_2.13-4.0.0-amzn-0.jar").write_bytes(b"")
    emr_sdk.mkdir()
    (emr_sdk / "aws-sdk-java-bundle-2.31.1.jar").write_bytes(b"")
    spark = versions.TARGET_SPARK
    result = _jars(tmp_path, spark_home=_spark_home(tmp_path, spark), emr_delta=emr_delta, emr_sdk=emr_sdk)
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in (tmp_path / "jars").glob("*.jar"))
    assert any(n.startswith("spark-sql-kafka") for n in names) and not any("delta" in n for n in names), names
    assert any(n.startswith("hadoop-aws") for n in names) and not any(n.startswith("sts-") for n in names), names


def test_jars_step_refuses_a_spark_version_other_than_the_images(tmp_path: Path) -> None:
    result = _jars(tmp_path, "4.3.0", spark_home=_spark_home(tmp_path, "4.0.2"))
    assert result.returncode == 1
    assert "SPARK_VERSION is 4.3.0 but the base image runs Spark 4.0.2" in result.stderr
    assert not (tmp_path / "jars").exists()


def test_an_emr_7_base_image_spark_3_5_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    # EMR's Spark names itself <release>-amzn-<n>: the image check compares the release and lets it pass, the
    # range check refuses it
    result = _jars(tmp_path, "3.5.6", spark_home=_spark_home(tmp_path, "3.5.6-amzn-0"))
    assert result.returncode == 2 and "Spark 3.5.6 is outside cdckit's range" in result.stderr, result.stderr
    assert not (tmp_path / "jars").exists()


def test_the_jars_step_does_not_import_pyspark() -> None:
    # Spark's images keep PySpark under $SPARK_HOME/python, off the build's Python path
    code = "import sys, cdckit.artifacts; print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr


def test_an_unknown_step_is_refused() -> None:
    result = _run("everything")
    assert result.returncode == 2 and "unknown step everything" in result.stderr


# Two certificates as RDS's global bundle holds them (its real one holds one per region and key type)
RDS_BUNDLE = "".join(f"-----BEGIN CERTIFICATE-----\nMIIB{n}AAAA\n-----END CERTIFICATE-----\n" for n in (1, 2))


def _fake_commands(tmp_path: Path, *names: str) -> tuple[Path, Path]:
    """Stand-ins for the package tools that record how they were called (with ACCEPT_EULA) instead of installing;
    curl writes RDS's bundle where it is told to put it."""
    folder, log = tmp_path / "bin", tmp_path / "calls.log"
    folder.mkdir()
    (tmp_path / "rds-bundle.pem").write_text(RDS_BUNDLE)
    for name in names:
        command = folder / name
        script = f'#!/bin/sh\necho "${{ACCEPT_EULA:+ACCEPT_EULA=$ACCEPT_EULA }}{name} $*" >> {log}\n'
        if name == "curl":
            script += (f'case "$*" in *truststore.pki.rds.amazonaws.com*) '
                       f'eval "out=\\${{$#}}"; cp {tmp_path}/rds-bundle.pem "$out";; esac\n')
        command.write_text(script)
        command.chmod(0o755)
    return folder, log


def test_system_packages_on_amazon_linux_2023_take_microsofts_rhel_9_repository(tmp_path: Path) -> None:
    # EMR's images are Amazon Linux 2023: dnf, not apt; its /etc/os-release says ID="amzn" ID_LIKE="fedora"
    release = tmp_path / "os-release"
    release.write_text('NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"\n')
    fakes, log = _fake_commands(tmp_path, "dnf", "curl", "apt-get", "update-ca-trust")
    repos, anchors = tmp_path / "yum.repos.d", tmp_path / "anchors"
    anchors.mkdir()
    env = {**os.environ, "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}", "OS_RELEASE": str(release),
           "YUM_REPOS_DIR": str(repos), "CA_ANCHORS_DIR": str(anchors)}
    result = subprocess.run(["bash", str(SCRIPT), "system-packages", "18.5.1.1-1"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    bundle = anchors / "amazon-rds-global-bundle.pem"
    assert log.read_text().splitlines() == [
        "dnf install -y unixODBC",
        f"curl -fsSL https://packages.microsoft.com/config/rhel/9/prod.repo -o {repos}/mssql-release.repo",
        "ACCEPT_EULA=Y dnf install -y msodbcsql18-18.5.1.1-1",
        "dnf clean all",
        f"curl -fsSL https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem -o {bundle}",
        "update-ca-trust extract"]
    assert bundle.read_text() == RDS_BUNDLE  # p11-kit takes the bundle whole


def test_system_packages_on_debian_take_microsofts_repository_and_trust_rdss_authorities(tmp_path: Path) -> None:
    # Apache's Spark image is Ubuntu; Debian's update-ca-certificates takes one certificate per .crt file
    release = tmp_path / "os-release"
    release.write_text('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n')
    fakes, log = _fake_commands(tmp_path, "apt-get", "curl", "gpg", "update-ca-certificates", "dnf")
    sources, keyrings, anchors = (tmp_path / name for name in ("sources.list.d", "keyrings", "ca-certificates"))
    for folder in (sources, keyrings, anchors):
        folder.mkdir()
    env = {**os.environ, "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}", "OS_RELEASE": str(release),
           "APT_SOURCES_DIR": str(sources), "KEYRINGS_DIR": str(keyrings), "CA_ANCHORS_DIR": str(anchors)}
    result = subprocess.run(["bash", str(SCRIPT), "system-packages", "18.5.1.1-1"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = [call.rstrip() for call in log.read_text().splitlines()]
    assert "ACCEPT_EULA=Y apt-get install -y --no-install-recommends msodbcsql18=18.5.1.1-1" in calls
    assert calls[-1] == "update-ca-certificates" and not any(c.startswith("dnf") for c in calls)
    assert (sources / "mssql-release.list").read_text() == (
        f"deb [signed-by={keyrings}/microsoft-prod.gpg] https://packages.microsoft.com/ubuntu/22.04/prod jammy main\n")
    installed = sorted((anchors / "amazon-rds").iterdir())
    assert [p.name for p in installed] == ["amazon-rds-001.crt", "amazon-rds-002.crt"]
    assert "".join(p.read_text() for p in installed) == RDS_BUNDLE


def test_system_packages_refuse_a_system_without_an_install_path(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('ID="alpine"\nVERSION_ID="3.20"\n')
    fakes, log = _fake_commands(tmp_path, "dnf", "curl", "apt-get")
    env = {**os.environ, "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}", "OS_RELEASE": str(release)}
    result = subprocess.run(["bash", str(SCRIPT), "system-packages", "18.5.1.1-1"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 2
    assert "no install path for alpine" in result.stderr and not log.exists()


def test_the_images_install_steps_keep_build_tools_and_the_quality_stack_out() -> None:
    script = SCRIPT.read_text()
    # Maven comes and goes within the jars step; the run-time extras only
    assert "apt-get purge -y --auto-remove maven" in script and "dnf remove -y maven" in script
    assert '"${wheel}[sqlserver,aws]"' in script and "quality" not in script.split("python)", 1)[1].split(";;")[0]
    dockerfile = (ROOT / "containers" / "job" / "Dockerfile").read_text()
    assert "WORKDIR" not in dockerfile  # the base image's own, as AWS's image validation expects
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignored[1] == "*" and set(ignored[2:]) == {"!containers/job/install.sh", "!dist/*.whl", "!jobs/*.py"}
