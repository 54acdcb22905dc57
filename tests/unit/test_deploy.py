"""make deploy's boto3 steps against moto in server mode: artefacts uploaded, the job configuration written and
readable by the jobs, job runs started with the right arguments; the dry run calls nothing; the job image and
the lab are written as the kit promises."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdckit.deploy import DeployError, Deployment, deploy, main

ROOT = Path(__file__).resolve().parents[2]
SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cdckit/source"


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    pytest.importorskip("moto")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import boto3

    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"),
                        ("AWS_REGION", "eu-west-1"), ("AWS_DEFAULT_REGION", "eu-west-1"),
                        ("AWS_ENDPOINT_URL_S3", moto_endpoint)):
        monkeypatch.setenv(name, value)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    emr = boto3.client("emr-serverless", endpoint_url=moto_endpoint)
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):  # the server lives for the module
        s3.create_bucket(Bucket="kit", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    # moto validates the label against the releases it knows, which end before emr-spark-8.0.0; these steps do
    # not depend on it
    application = emr.create_application(name="cdckit-dev", releaseLabel="emr-7.9.0", type="SPARK")
    return {"s3": s3, "emr-serverless": emr, "application_id": application["applicationId"]}


def _outputs(tmp_path: Path, application_id: str) -> Path:
    connector = {"name": "cdckit-dev", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                 "database.hostname": "orders.internal", "database.port": "5432", "database.dbname": "orders",
                 "database.user": f"${{secret:{SECRET_ARN}:username}}",
                 "database.password": f"${{secret:{SECRET_ARN}:password}}",
                 "topic.prefix": "orders", "cdckit.checkpoint.location": "s3://kit/checkpoints/cdckit-dev"}
    outputs = {"artifacts_uri": {"value": "s3://kit/artifacts"}, "application_id": {"value": application_id},
               "jobs_role_arn": {"value": "arn:aws:iam::123456789012:role/cdckit-dev-jobs"},
               "log_group_name": {"value": "/cdckit/cdckit-dev/jobs"}, "connector": {"value": connector}}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return path


def test_deploy_uploads_artefacts_writes_the_configuration_and_starts_the_jobs(aws: dict[str, Any],
                                                                               tmp_path: Path) -> None:
    said: list[str] = []
    deployment = Deployment("dev", outputs_file=_outputs(tmp_path, aws["application_id"]), say=said.append)
    result = deploy(deployment, clients=aws)
    keys = sorted(o["Key"] for o in aws["s3"].list_objects_v2(Bucket="kit")["Contents"])
    assert [k for k in keys if not k.endswith(".whl")] == [
        "artifacts/connector.json", "artifacts/jobs/schema_evolution.py", "artifacts/jobs/snapshot.py",
        "artifacts/jobs/stream.py"]
    assert any(re.fullmatch(r"artifacts/cdckit-[\d.]+-py3-none-any\.whl", k) for k in keys)
    uploaded = aws["s3"].get_object(Bucket="kit", Key="artifacts/jobs/stream.py")["Body"].read()
    assert uploaded == (ROOT / "jobs" / "stream.py").read_bytes()

    runs = aws["emr-serverless"].list_job_runs(applicationId=aws["application_id"])["jobRuns"]
    assert sorted(r["name"] for r in runs) == ["cdckit-dev-snapshot", "cdckit-dev-stream"]
    assert len(result["job_run_ids"]) == 2
    for run in runs:
        detail = aws["emr-serverless"].get_job_run(applicationId=aws["application_id"], jobRunId=run["id"])["jobRun"]
        job = run["name"].rsplit("-", 1)[1]
        assert detail["executionRole"] == "arn:aws:iam::123456789012:role/cdckit-dev-jobs"
        assert detail["jobDriver"]["sparkSubmit"]["entryPoint"] == f"s3://kit/artifacts/jobs/{job}.py"
        assert detail["jobDriver"]["sparkSubmit"]["entryPointArguments"] == ["s3://kit/artifacts/connector.json"]
    assert any(line.startswith("snapshot job run") and line.endswith("succeeded") for line in said)

    # the jobs read their configuration from S3 (pyarrow's S3 filesystem), secrets still as references
    from cdckit.config.loader import read_config_file

    stored = read_config_file("s3://kit/artifacts/connector.json")
    assert stored["database.password"] == f"${{secret:{SECRET_ARN}:password}}"
    assert stored["cdckit.checkpoint.location"] == "s3://kit/checkpoints/cdckit-dev"


def test_a_failed_snapshot_run_stops_the_deployment_before_the_stream(aws: dict[str, Any], tmp_path: Path) -> None:
    class FailingRuns:
        def __init__(self, emr: Any) -> None:
            self.emr = emr
            self.started: list[str] = []

        def start_job_run(self, **run: Any) -> dict[str, str]:
            self.started.append(run["name"])
            return dict(self.emr.start_job_run(**run))

        def get_job_run(self, **_: Any) -> dict[str, Any]:
            return {"jobRun": {"state": "FAILED"}}

    runs = FailingRuns(aws["emr-serverless"])
    deployment = Deployment("dev", outputs_file=_outputs(tmp_path, aws["application_id"]), say=lambda _t: None)
    with pytest.raises(DeployError, match=r"snapshot job run .* ended FAILED.*the stream job was not started"):
        deploy(deployment, clients={"s3": aws["s3"], "emr-serverless": runs})
    assert runs.started == ["cdckit-dev-snapshot"]


def test_dry_run_prints_every_step_and_calls_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--env", "prod", "--dry-run", "--image", "registry.example/cdckit-job:0.1.0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("[dry-run] ") for line in lines)
    steps = [line.removeprefix("[dry-run] ").split(" ")[0] for line in lines]
    assert steps == ["terraform", "terraform", "terraform", "pip", "docker", "docker", "upload", "upload", "upload",
                     "upload", "write", "emr-serverless", "emr-serverless"]
    build = next(line for line in lines if " docker build " in f" {line.removeprefix('[dry-run] ')}")
    assert "BASE_IMAGE=public.ecr.aws/emr-serverless/spark/emr-spark-8.0.0:" in build and "RUN_AS_USER=hadoop" in build
    assert "envs/prod init" in lines[0] and lines[2].endswith("apply cdckit.tfplan")


def test_kubernetes_runtime_writes_one_spark_application_per_job(capsys: pytest.CaptureFixture[str]) -> None:
    deployment = Deployment("dev", runtime="eks", dry_run=True)
    manifests = deployment.spark_applications({"namespace": "cdckit", "service_account": "cdckit-jobs"},
                                              {"connector": "s3://kit/artifacts/connector.json"}, "cdckit-job:0.1.0")
    assert [m["metadata"]["name"] for m in manifests] == ["cdckit-dev-snapshot", "cdckit-dev-stream"]
    stream = manifests[1]["spec"]
    assert stream["mainApplicationFile"] == "local:///opt/cdckit/jobs/stream.py"
    assert stream["arguments"] == ["s3://kit/artifacts/connector.json"]
    assert stream["driver"]["serviceAccount"] == "cdckit-jobs" and stream["image"] == "cdckit-job:0.1.0"
    assert stream["restartPolicy"]["type"] == "OnFailure" and manifests[0]["spec"]["restartPolicy"]["type"] == "Never"


def test_a_connector_writing_to_delta_gets_delta_in_both_runtimes() -> None:
    deployment = Deployment("dev", runtime="emr", dry_run=True)
    outputs = {"connector": {"cdckit.sink": "delta", "cdckit.delta.path": "s3://kit/delta"},
               "application_id": "app", "jobs_role_arn": "arn", "log_group_name": "logs", "namespace": "cdckit"}
    uris = {"snapshot": "s3://kit/snapshot.py", "stream": "s3://kit/stream.py", "connector": "s3://kit/c.json"}
    parameters = deployment.job_runs(outputs, uris)[1]["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    assert "--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in parameters
    assert "--conf spark.jars=/usr/share/aws/delta/lib/delta-spark.jar,/usr/share/aws/delta/lib/delta-storage.jar" \
        in parameters
    spec = deployment.spark_applications(outputs, uris, "cdckit-job:0.1.0")[1]["spec"]
    assert spec["sparkConf"] == {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                                 "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}
    kafka = {**outputs, "connector": {"cdckit.sink": "kafka"}}
    assert "delta" not in deployment.job_runs(kafka, uris)[0]["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    assert "sparkConf" not in deployment.spark_applications(kafka, uris, "i")[0]["spec"]


def test_unknown_environment_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--env", "staging"]) == 2
    assert "no environment 'staging'" in capsys.readouterr().err


def test_job_image_is_pinned_non_root_and_installs_through_the_tested_script() -> None:
    dockerfile = (ROOT / "containers" / "job" / "Dockerfile").read_text()
    images = re.findall(r"^(?:ARG BASE_IMAGE=|FROM )(\S+)", dockerfile, re.MULTILINE)
    assert images and all(":" in image and not image.endswith(":latest") for image in images if "$" not in image)
    assert re.search(r"^USER \$\{RUN_AS_USER\}$", dockerfile, re.MULTILINE)
    assert "ARG RUN_AS_USER=185" in dockerfile
    for step in ("system-packages", "python", "jars"):
        assert f"install.sh {step}" in dockerfile
    for argument in ("SPARK_VERSION", "MSK_IAM_AUTH_VERSION", "HADOOP_AWS_VERSION", "ODBC_DRIVER_VERSION"):
        assert f"ARG {argument}=" in dockerfile
    compose = (ROOT / "containers" / "lab" / "compose.yml").read_text()
    tags = re.findall(r"image: (\S+)", compose)
    assert tags and not any(t.endswith((":latest", "-latest}")) or ":" not in t for t in tags)
    assert "profiles: [\"lab\"]" in compose and "service_healthy" in compose
