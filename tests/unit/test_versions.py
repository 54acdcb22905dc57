"""cdckit.versions is the one source of the Spark range and the deploy target; every file that repeats a version
agrees with it: pyproject.toml's PySpark range, the job image's base and build arguments, the EMR release label
in Terraform, the Spark operator's manifests and the README's table. Each failure names the file and the change."""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from cdckit import versions
from cdckit.deploy import Deployment
from cdckit.versions import kafka_connector, release, supported

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "containers" / "job" / "Dockerfile"
INSTALL_SH = ROOT / "containers" / "job" / "install.sh"
EMR_LABEL = re.compile(r"\bemr-(?:spark-)?\d+\.\d+(?:\.\d+)?\b")
SPARK_RANGE = f">={versions.OLDEST_SPARK},<{versions.SPARK_BELOW}"


def _newest_minor() -> str:
    major, minor = release(versions.SPARK_BELOW)[:2]
    return f"{major}.{minor - 1}.x"


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def _pyspark_requirements(requirements: list[str]) -> list[Requirement]:
    return [req for req in map(Requirement, requirements) if canonicalize_name(req.name) == "pyspark"]


def _dockerfile_arg(name: str) -> str | None:
    found = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    return found.group(1) if found else None


# -- cdckit.versions itself ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("4.0.2", (4, 0, 2)), ("4.0.2-amzn-0", (4, 0, 2)), ("4.1.0.dev0", (4, 1, 0)), ("4.4", (4, 4)),
])
def test_release_reads_the_numeric_part_of_a_version(text: str, expected: tuple[int, ...]) -> None:
    assert release(text) == expected


@pytest.mark.parametrize(("spark", "expected"), [
    ("4.0.2", True), ("4.0.2-amzn-0", True), ("4.1.1", True), ("4.3.0", True), ("4.3.9", True),
    ("4.0.1", False), ("3.5.6", False), ("4.4.0", False), ("5.0.0", False),
])
def test_supported_is_the_oldest_tested_release_up_to_the_first_untested_minor(spark: str, expected: bool) -> None:
    assert supported(spark) is expected


@pytest.mark.parametrize(("spark", "connector", "token_provider"), [
    ("4.0.2", "4.0.2", "4.0.0"),       # the release's own connector; 4.0.x token providers: only 4.0.0's
    ("4.0.2-amzn-0", "4.0.2", "4.0.0"),  # EMR's build of 4.0.2
    ("4.0.9", "4.0.4", "4.0.0"),       # a newer patch than any build: the newest of its line
    ("4.1.0", "4.1.0", "4.0.0"),       # no 4.1.0 token provider: the newest one not newer
    ("4.1.3", "4.1.3", "4.1.1"),
    ("4.2.1", "4.2.0", "4.2.0"),
    ("4.3.0", "4.2.0", "4.2.0"),       # no 4.3 build at all: the newest earlier one
])
def test_kafka_connector_takes_the_newest_build_not_newer_than_the_release(spark: str, connector: str,
                                                                          token_provider: str) -> None:
    assert kafka_connector(spark) == (connector, token_provider)


def test_kafka_connector_refuses_a_spark_older_than_every_build() -> None:
    with pytest.raises(ValueError, match=r"no Kafka connector build for Spark 3\.5\.6"):
        kafka_connector("3.5.6")


def test_every_supported_minor_has_a_connector_no_newer_than_itself() -> None:
    oldest, below = release(versions.OLDEST_SPARK), release(versions.SPARK_BELOW)
    for minor in range(oldest[1], below[1]):
        spark = f"{oldest[0]}.{minor}.{oldest[2] if minor == oldest[1] else 0}"
        connector, token_provider = kafka_connector(spark)
        assert release(token_provider) <= release(connector) <= release(spark), (spark, connector, token_provider)


def test_the_job_images_connector_is_its_sparks_own_build() -> None:
    connector, _ = kafka_connector(versions.TARGET_SPARK)
    assert connector == versions.TARGET_SPARK, (
        f"versions.KAFKA_CONNECTOR_BUILDS has no spark-sql-kafka-0-10 {versions.TARGET_SPARK}: the job image would "
        f"run connector {connector} on Spark {versions.TARGET_SPARK}; add the build or change TARGET_SPARK")
    assert supported(versions.TARGET_SPARK), "versions.TARGET_SPARK is outside OLDEST_SPARK..SPARK_BELOW"


def test_the_job_image_base_is_the_target_spark() -> None:
    assert versions.JOB_IMAGE_BASE.startswith(
        f"apache/spark:{versions.TARGET_SPARK}-scala{versions.SCALA}-java{versions.JAVA}-")


# -- the files that repeat a version -------------------------------------------------------------------------------

def test_pyproject_takes_pyspark_only_in_the_spark_and_dev_extras_with_the_supported_range() -> None:
    project = _pyproject()["project"]
    assert not _pyspark_requirements(project["dependencies"]), (
        "pyproject.toml: [project] dependencies name pyspark; PySpark is the runtime's own, move it to the "
        "[spark] extra")
    for extra in ("spark", "dev"):
        found = _pyspark_requirements(project["optional-dependencies"][extra])
        assert len(found) == 1 and found[0].specifier == SpecifierSet(SPARK_RANGE), (
            f"pyproject.toml: the [{extra}] extra must hold pyspark[sql]{SPARK_RANGE} (cdckit/versions.py's "
            f"OLDEST_SPARK and SPARK_BELOW), not {[str(r) for r in found]}")


def test_the_job_images_extras_pull_no_pyspark() -> None:
    """The image installs cdckit over its own PySpark: none of the extras it takes may require pyspark, directly
    or through a dependency (checked against the dependencies' metadata in this virtualenv)."""
    found = re.search(r'"\$\{wheel\}\[([a-z,]+)\]"', INSTALL_SH.read_text())
    assert found, "containers/job/install.sh: the python step no longer installs \"${wheel}[<extras>]\""
    extras = found.group(1).split(",")
    project = _pyproject()["project"]
    pending = [(Requirement(r), "cdckit") for r in project["dependencies"]]
    for extra in extras:
        pending += [(Requirement(r), f"cdckit[{extra}]") for r in project["optional-dependencies"][extra]]
    seen: set[str] = set()
    while pending:
        requirement, via = pending.pop()
        name = canonicalize_name(requirement.name)
        assert name != "pyspark", (
            f"{via} requires {requirement}: the job image (containers/job/install.sh installs "
            f"cdckit[{found.group(1)}]) would get a second PySpark; drop that requirement or that extra from the image")
        if name in seen:
            continue
        seen.add(name)
        try:
            transitive = requires(name) or []
        except PackageNotFoundError:
            continue
        for text in transitive:
            dependency = Requirement(text)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e})
                                                for e in [*requirement.extras, ""]):
                pending.append((dependency, f"{via} -> {requirement.name}"))


@pytest.mark.parametrize(("argument", "expected"), [
    ("BASE_IMAGE", versions.JOB_IMAGE_BASE), ("SPARK_VERSION", versions.TARGET_SPARK),
    ("MSK_IAM_AUTH_VERSION", versions.MSK_IAM_AUTH), ("HADOOP_AWS_VERSION", versions.HADOOP_AWS),
    ("AWS_SDK_VERSION", versions.AWS_SDK_V2),
])
def test_the_job_image_build_arguments_default_to_versions(argument: str, expected: str) -> None:
    assert _dockerfile_arg(argument) == expected, (
        f"containers/job/Dockerfile: set ARG {argument}={expected} (cdckit/versions.py), not "
        f"{_dockerfile_arg(argument)}")


def test_the_job_images_emr_example_uses_the_target_release() -> None:
    labels = set(EMR_LABEL.findall(DOCKERFILE.read_text()))
    assert labels == {versions.EMR_RELEASE_LABEL}, (
        f"containers/job/Dockerfile: the EMR build example names {sorted(labels)}; use "
        f"{versions.EMR_RELEASE_LABEL}'s image (cdckit/versions.py's EMR_RELEASE_LABEL)")


def test_the_spark_operators_manifests_say_the_target_spark() -> None:
    deployment = Deployment("dev", runtime="eks", dry_run=True)
    manifests = deployment.spark_applications({}, {"connector": "s3://kit/artifacts/connector.json"},
                                              "cdckit-job:0.1.0")
    assert manifests
    for manifest in manifests:
        assert manifest["spec"]["sparkVersion"] == versions.TARGET_SPARK, (
            f"cdckit/deploy.py: {manifest['metadata']['name']} says sparkVersion "
            f"{manifest['spec']['sparkVersion']}; take versions.TARGET_SPARK ({versions.TARGET_SPARK})")


def test_the_spark_operators_chart_is_the_one_whose_crd_the_manifests_are_checked_against() -> None:
    hcl2 = pytest.importorskip("hcl2")
    options = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
    with (ROOT / "infra" / "terraform" / "modules" / "spark-eks" / "variables.tf").open() as handle:
        variables = {name.strip('"'): body for block in hcl2.load(handle, serialization_options=options)["variable"]
                     for name, body in block.items()}
    assert variables["chart_version"]["default"] == versions.SPARK_OPERATOR_CHART
    fixture = (ROOT / "tests" / "fixtures" / "spark-operator" / "README.md").read_text()
    chart = versions.SPARK_OPERATOR_CHART
    assert f"version {chart} " in fixture and f"tag v{chart}," in fixture


def test_terraform_runs_the_target_emr_release() -> None:
    hcl2 = pytest.importorskip("hcl2")
    options = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
    with (ROOT / "infra" / "terraform" / "modules" / "spark" / "variables.tf").open() as handle:
        variables = {name.strip('"'): body for block in hcl2.load(handle, serialization_options=options)["variable"]
                     for name, body in block.items()}
    assert variables["release_label"]["default"] == versions.EMR_RELEASE_LABEL, (
        f"infra/terraform/modules/spark/variables.tf: set release_label's default to "
        f"\"{versions.EMR_RELEASE_LABEL}\" (cdckit/versions.py), not \"{variables['release_label']['default']}\"")
    infra = ROOT / "infra" / "terraform"
    for path in sorted([*infra.rglob("*.tf"), *infra.rglob("*.tfvars.example")]):
        if ".terraform" in path.parts:
            continue
        labels = set(EMR_LABEL.findall(path.read_text()))
        assert labels <= {versions.EMR_RELEASE_LABEL}, (
            f"{path.relative_to(ROOT)} names the EMR release {sorted(labels)}; use {versions.EMR_RELEASE_LABEL}")


def test_the_readme_table_states_the_versions() -> None:
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Supported versions\n(.*?)^## ", readme, re.MULTILINE | re.DOTALL)
    assert section, "README.md has no \"## Supported versions\" section"
    rows = {cells[0]: " | ".join(cells[1:]) for cells in
            ([c.strip() for c in line.strip().strip("|").split("|")] for line in section.group(1).splitlines()
             if line.startswith("|"))}
    expected = {
        "Spark and PySpark": [f"{versions.OLDEST_SPARK} to {_newest_minor()}"],
        "Java": [versions.JAVA],
        "Amazon EMR": [f"`{versions.EMR_RELEASE_LABEL}`", f"Spark {versions.TARGET_SPARK}"],
        "Kubernetes": [f"`{versions.JOB_IMAGE_BASE}`"],
        "Delta Lake": [f"{version} on Spark {minor}" for minor, (_, version) in versions.DELTA_BUILDS.items()]
        + [f"Spark {versions.DELTA_NEWEST_SPARK}"],
    }
    for row, texts in expected.items():
        assert row in rows, f"README.md's \"Supported versions\" table lost its \"{row}\" row"
        for text in texts:
            assert text in rows[row], (
                f"README.md's \"Supported versions\" table, row \"{row}\": write {text} (cdckit/versions.py); it "
                f"says: {rows[row]}")
    labels = set(EMR_LABEL.findall(readme))
    assert labels == {versions.EMR_RELEASE_LABEL}, (
        f"README.md names the EMR releases {sorted(labels)}; the deploy target is {versions.EMR_RELEASE_LABEL}")
    for stated in re.findall(r"sparkVersion: ([\d.]+)", readme):
        assert stated == versions.TARGET_SPARK, f"README.md says sparkVersion: {stated}; write {versions.TARGET_SPARK}"


@pytest.mark.parametrize(("spark", "expected"), [
    ("4.0.2", ("delta-spark_2.13", "4.0.0")), ("4.0.2-amzn-0", ("delta-spark_2.13", "4.0.0")),
    ("4.0.9", ("delta-spark_2.13", "4.0.0")), ("4.1.1", ("delta-spark_4.1_2.13", "4.4.0")),
    ("4.2.0", ("delta-spark_4.2_2.13", "4.4.0")), ("4.2.1", ("delta-spark_4.2_2.13", "4.4.0")), ("4.3.0", None),
])
def test_delta_runs_on_the_spark_minor_its_build_was_made_for(spark: str, expected: tuple[str, str] | None) -> None:
    assert versions.delta_build(spark) == expected


def test_the_target_runtime_has_the_delta_release_emr_ships() -> None:
    assert versions.delta_build(versions.TARGET_SPARK) == ("delta-spark_2.13", "4.0.0")


def test_the_delta_suites_second_spark_has_a_delta_build_and_is_supported() -> None:
    assert versions.supported(versions.DELTA_NEWEST_SPARK)
    assert versions.delta_build(versions.DELTA_NEWEST_SPARK) is not None
    newest_minor_with_a_build = max(versions.DELTA_BUILDS, key=release)
    assert release(versions.DELTA_NEWEST_SPARK)[:2] == release(newest_minor_with_a_build), (
        "make test-delta runs the Delta suites on the newest Spark minor that has a Delta build")
