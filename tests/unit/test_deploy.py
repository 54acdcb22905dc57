"""make deploy's boto3 steps against moto in server mode: artefacts uploaded, the job configuration written and
readable by the jobs, job runs started with the right arguments; a second deploy upgrades the running stream
instead of starting another, a stream found cancelled is started again, a snapshot is never run twice; prod asks
first; the dry run calls nothing; the job image and the lab are written as the kit promises.

moto answers every EMR Serverless call as the service does, but a job run it starts is SUCCESS at once: where a
scenario needs a run in another state (a stream that runs, a run cancelled by someone), the test sets it in the
moto server's own state, as the service would have moved it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdckit import versions
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
    # EMR Serverless creates an application CREATED (moto: STARTED); stopped is the same for these steps: updatable
    emr.stop_application(applicationId=application["applicationId"])
    return {"s3": s3, "emr-serverless": emr, "application_id": application["applicationId"]}


class Recorded:
    """The EMR Serverless client, with every call's name and arguments recorded in order."""

    def __init__(self, emr: Any) -> None:
        self.emr = emr
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.emr, name)
        if name in ("get_paginator", "get_job_run", "get_application", "list_job_runs"):
            return method

        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return method(**kwargs)

        return call

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def _set_state(application_id: str, name: str, state: str, details: str | None = None) -> str:
    """Move the newest run of ``name`` to ``state`` in the moto server's state, as EMR Serverless would."""
    from moto.emrserverless.models import emrserverless_backends

    runs = [run for run in emrserverless_backends["123456789012"]["eu-west-1"].job_runs[application_id]
            if run.name == name]
    runs[-1].state, runs[-1].state_details = state, details
    return str(runs[-1].id)


def _runs(aws: dict[str, Any]) -> list[tuple[str, str]]:
    listed = aws["emr-serverless"].list_job_runs(applicationId=aws["application_id"])["jobRuns"]
    return [(run["name"], run["state"]) for run in listed]


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
    assert any(line.startswith("job run") and line.endswith("succeeded") for line in said)

    # the jobs read their configuration from S3 (pyarrow's S3 filesystem), secrets still as references
    from cdckit.config.loader import read_config_file

    stored = read_config_file("s3://kit/artifacts/connector.json")
    assert stored["database.password"] == f"${{secret:{SECRET_ARN}:password}}"
    assert stored["cdckit.checkpoint.location"] == "s3://kit/checkpoints/cdckit-dev"


def test_the_stream_is_a_streaming_job_run_that_emr_restarts_and_the_snapshot_a_batch_run(
        aws: dict[str, Any], tmp_path: Path) -> None:
    emr = Recorded(aws["emr-serverless"])
    deploy(Deployment("dev", outputs_file=_outputs(tmp_path, aws["application_id"]), say=lambda _t: None),
           clients={**aws, "emr-serverless": emr})
    started = {kwargs["name"]: kwargs for name, kwargs in emr.calls if name == "start_job_run"}
    stream, snapshot = started["cdckit-dev-stream"], started["cdckit-dev-snapshot"]
    # a streaming run has no timeout (EMR cancels a batch run after 12 hours) and is restarted after a failure
    assert stream["mode"] == "STREAMING" and stream["executionTimeoutMinutes"] == 0
    assert stream["retryPolicy"] == {"maxFailedAttemptsPerHour": 5}
    assert snapshot["mode"] == "BATCH" and snapshot["executionTimeoutMinutes"] == 24 * 60
    assert emr.names() == ["start_application", "start_job_run", "start_job_run"]


def test_a_second_deploy_upgrades_the_running_stream_instead_of_starting_another(aws: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    outputs = _outputs(tmp_path, aws["application_id"])
    deploy(Deployment("dev", outputs_file=outputs, say=lambda _t: None), clients=aws)
    first = _set_state(aws["application_id"], "cdckit-dev-stream", "RUNNING")  # the stream runs on

    said: list[str] = []
    emr = Recorded(aws["emr-serverless"])
    result = deploy(Deployment("dev", outputs_file=outputs, say=said.append, poll_seconds=0.01),
                    clients={**aws, "emr-serverless": emr})
    # stopped cleanly (a grace period), the application stopped for Terraform, started again, the stream restarted
    assert emr.names() == ["cancel_job_run", "stop_application", "start_application", "start_job_run"]
    cancel = emr.calls[0][1]
    assert cancel["jobRunId"] == first and cancel["shutdownGracePeriodInSeconds"] == 120
    assert emr.calls[-1][1]["name"] == "cdckit-dev-stream" and result["stream_stopped"]
    assert _runs(aws) == [("cdckit-dev-snapshot", "SUCCESS"), ("cdckit-dev-stream", "CANCELLED"),
                          ("cdckit-dev-stream", "SUCCESS")]
    assert any("cdckit-dev-snapshot: a run succeeded already" in line for line in said)


def test_a_stream_found_cancelled_is_started_again_from_its_checkpoint(aws: dict[str, Any], tmp_path: Path) -> None:
    outputs = _outputs(tmp_path, aws["application_id"])
    deploy(Deployment("dev", outputs_file=outputs, say=lambda _t: None), clients=aws)
    cancelled = _set_state(aws["application_id"], "cdckit-dev-stream", "CANCELLED", "Job run timed out")

    said: list[str] = []
    emr = Recorded(aws["emr-serverless"])
    deploy(Deployment("dev", outputs_file=outputs, say=said.append), clients={**aws, "emr-serverless": emr})
    # no stream to stop, but the application the first deploy left started is stopped for Terraform's update; no
    # second snapshot
    assert emr.names() == ["stop_application", "start_application", "start_job_run"]
    assert f"cdckit-dev-stream: its last run {cancelled} ended CANCELLED (Job run timed out); starting it again " \
           f"from its checkpoint" in said
    assert [state for name, state in _runs(aws) if name == "cdckit-dev-stream"] == ["CANCELLED", "SUCCESS"]


def test_a_snapshot_still_running_is_waited_for_never_started_twice(aws: dict[str, Any], tmp_path: Path) -> None:
    outputs = _outputs(tmp_path, aws["application_id"])
    application = aws["application_id"]
    emr = aws["emr-serverless"]
    emr.start_job_run(**Deployment("dev").job_runs(
        {"application_id": application, "jobs_role_arn": "arn:aws:iam::123456789012:role/cdckit-dev-jobs",
         "log_group_name": "logs", "connector": {}},
        {"snapshot": "s3://kit/artifacts/jobs/snapshot.py", "stream": "s3://kit/artifacts/jobs/stream.py",
         "connector": "s3://kit/artifacts/connector.json"})[0])
    _set_state(application, "cdckit-dev-snapshot", "RUNNING")  # an earlier deploy's snapshot, still reading
    timer = threading.Timer(0.3, _set_state, (application, "cdckit-dev-snapshot", "SUCCESS"))
    timer.start()
    recorded = Recorded(emr)
    deploy(Deployment("dev", outputs_file=outputs, say=lambda _t: None, poll_seconds=0.05),
           clients={**aws, "emr-serverless": recorded})
    timer.join()
    assert [kwargs["name"] for name, kwargs in recorded.calls if name == "start_job_run"] == ["cdckit-dev-stream"]
    assert [name for name, _ in _runs(aws)] == ["cdckit-dev-snapshot", "cdckit-dev-stream"]


def test_a_failed_snapshot_run_stops_the_deployment_before_the_stream(aws: dict[str, Any], tmp_path: Path) -> None:
    class FailingSnapshot(Recorded):
        def __getattr__(self, name: str) -> Any:
            if name != "start_job_run":
                return super().__getattr__(name)

            def start(**run: Any) -> Any:
                started = self.emr.start_job_run(**run)
                self.calls.append((name, run))
                _set_state(run["applicationId"], run["name"], "FAILED", "Driver exited with 1")
                return started

            return start

    emr = FailingSnapshot(aws["emr-serverless"])
    deployment = Deployment("dev", outputs_file=_outputs(tmp_path, aws["application_id"]), say=lambda _t: None)
    with pytest.raises(DeployError, match=r"snapshot job run .* ended FAILED.*the stream job was not started"):
        deploy(deployment, clients={**aws, "emr-serverless": emr})
    assert [kwargs["name"] for name, kwargs in emr.calls if name == "start_job_run"] == ["cdckit-dev-snapshot"]


def test_prod_is_applied_only_once_a_person_typed_prod(aws: dict[str, Any], tmp_path: Path) -> None:
    outputs = _outputs(tmp_path, aws["application_id"])
    asked: list[str] = []
    for answer in ("yes", ""):
        emr = Recorded(aws["emr-serverless"])
        with pytest.raises(DeployError, match="prod: the plan for this plan was not confirmed; nothing was applied"):
            deploy(Deployment("prod", outputs_file=outputs, say=lambda _t: None,
                              ask=lambda question, a=answer: asked.append(question) or a),  # type: ignore[misc]
                   clients={**aws, "emr-serverless": emr})
        assert emr.calls == []
    assert asked[0] == "Apply this plan to prod? Type prod to go on: "
    # without a terminal (a pipeline), make deploy stops and says how to approve
    with pytest.raises(DeployError, match=r"there is no terminal to ask; nothing was applied.*AUTO_APPROVE=1"):
        deploy(Deployment("prod", outputs_file=outputs, say=lambda _t: None), clients=aws)
    emr = Recorded(aws["emr-serverless"])
    deploy(Deployment("prod", outputs_file=outputs, say=lambda _t: None, ask=lambda _q: "prod"),
           clients={**aws, "emr-serverless": emr})
    assert "start_job_run" in emr.names()


def test_dry_run_prints_every_step_in_order_and_calls_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/cdckit-job:0.1.0"
    assert main(["deploy", "--env", "prod", "--dry-run", "--image", image]) == 0
    lines = [line.removeprefix("[dry-run] ") for line in capsys.readouterr().out.splitlines()]
    steps = [line.split(" ")[0] + (" " + line.split(" ")[2] if line.startswith("terraform") else
                                   " " + line.split(" ")[1] if line.startswith(("docker", "emr-serverless")) else "")
             for line in lines]
    # the repository first, the image pushed before a plan refers to it, a person asked before each prod apply,
    # the running stream stopped (with the application) before the apply that updates the application
    assert steps == ["terraform init", "terraform plan", "ask", "terraform apply", "pip", "docker pull",
                     "docker build", "docker login", "docker push", "terraform plan", "ask", "if", "terraform apply",
                     "upload", "upload", "upload", "upload", "write", "emr-serverless start_application",
                     "emr-serverless start_job_run", "emr-serverless start_job_run"]
    assert lines[1].endswith("plan -target=module.cdckit.module.registry -out=registry.tfplan")
    assert lines[3].endswith("apply registry.tfplan") and lines[12].endswith("apply cdckit.tfplan")
    assert lines[9].endswith(f"plan -var job_image_uri={image} -out=cdckit.tfplan")
    assert lines[11].startswith("if cdckit-prod-stream runs: emr-serverless cancel_job_run")
    assert lines[5].endswith("pin its digest in infra/terraform/envs/prod/job-image-base-emr.lock")
    build = next(line for line in lines if line.startswith("docker build "))
    assert "BASE_IMAGE=public.ecr.aws/emr-serverless/spark/emr-spark-8.0.0@sha256:" in build
    assert "RUN_AS_USER=hadoop" in build
    assert "--platform linux/amd64" in build  # an ARM laptop builds the image EMR's X86_64 workers run
    assert "cdckit-prod-snapshot on <application> (BATCH)" in lines[-2]
    assert "cdckit-prod-stream on <application> (STREAMING)" in lines[-1]


def _fake_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, answers: str = "") -> Path:
    """A command on PATH that records its calls in a log (returned) and answers with ``answers``, a shell ``case``
    body over its arguments."""
    log, folder = tmp_path / f"{name}.log", tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    command = folder / name
    command.write_text(f'#!/bin/sh\necho "$*" >> {log}\n{answers}\n')
    command.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return log


def _fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digest: str) -> Path:
    """A docker command that records its calls and, asked for an image's digests, answers ``digest``."""
    return _fake_command(tmp_path, monkeypatch, "docker",
                         f'case "$1 $2" in "image inspect") echo \'["{digest}"]\';; esac')


def test_the_base_image_is_pinned_by_digest_once_and_built_on_from_then_on(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    digest = "public.ecr.aws/emr-serverless/spark/emr-spark-8.0.0@sha256:" + "ab" * 32
    log = _fake_docker(tmp_path, monkeypatch, digest)
    (tmp_path / "infra/terraform/envs/dev").mkdir(parents=True)
    deployment = Deployment("dev", root=tmp_path, say=lambda _: None)
    deployment.image("registry.example/cdckit-job:1")
    lock = tmp_path / "infra/terraform/envs/dev/job-image-base-emr.lock"
    assert lock.read_text().splitlines()[-1] == digest
    calls = log.read_text().splitlines()
    assert calls[0] == f"pull --platform linux/amd64 {versions.EMR_SERVERLESS_IMAGE_BASE}"
    assert calls[2].startswith("build ") and f"BASE_IMAGE={digest}" in calls[2]
    # the next build (a new release, another machine with the file committed) takes the pinned digest, unpulled
    log.unlink()
    deployment.image("registry.example/cdckit-job:2")
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["build", "push"] and f"BASE_IMAGE={digest}" in calls[0]


def test_a_lock_file_that_names_no_digest_is_refused_before_building(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake_docker(tmp_path, monkeypatch, "unused")
    (tmp_path / "infra/terraform/envs/dev").mkdir(parents=True)
    (tmp_path / "infra/terraform/envs/dev/job-image-base-eks.lock").write_text("apache/spark:latest\n")
    with pytest.raises(DeployError, match="should hold one line, <image>@sha256:"):
        Deployment("dev", runtime="eks", root=tmp_path, say=lambda _: None).image("registry.example/job:1")
    assert not log.exists()


@pytest.mark.parametrize(("snapshot_state", "applied"), [
    ("", ["cdckit-dev-snapshot", "cdckit-dev-stream"]),  # the first deploy
    ("COMPLETED", ["cdckit-dev-stream"]),  # a later one: a changed spec would take the snapshot again
    ("RUNNING", ["cdckit-dev-stream"]),  # a changed spec would kill it part-way
    ("FAILED", ["cdckit-dev-snapshot", "cdckit-dev-stream"]),  # resumed, as on EMR
])
def test_a_redeploy_on_kubernetes_leaves_a_taken_snapshot_alone_and_applies_the_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_state: str, applied: list[str]) -> None:
    log = _fake_command(tmp_path, monkeypatch, "kubectl",
                        f'case "$1 $3" in "get cdckit-dev-snapshot") printf "{snapshot_state}";; esac')
    (tmp_path / "infra/terraform/envs/dev").mkdir(parents=True)
    deployment = Deployment("dev", runtime="eks", root=tmp_path, say=lambda _: None)
    deployment.submit_eks(deployment.spark_applications({"namespace": "cdckit"}, {"connector": "s3://kit/c.json"},
                                                        "job:2"))
    calls = log.read_text().splitlines()
    assert calls[0].startswith("get sparkapplication cdckit-dev-snapshot --namespace cdckit")
    assert [Path(c.split()[-1]).stem for c in calls if c.startswith("apply")] == applied


def test_kubernetes_runtime_writes_one_spark_application_per_job(capsys: pytest.CaptureFixture[str]) -> None:
    deployment = Deployment("dev", runtime="eks", dry_run=True)
    manifests = deployment.spark_applications({"namespace": "cdckit", "service_account": "cdckit-jobs"},
                                              {"connector": "s3://kit/artifacts/connector.json"}, "cdckit-job:0.1.0")
    assert [m["metadata"]["name"] for m in manifests] == ["cdckit-dev-snapshot", "cdckit-dev-stream"]
    stream = manifests[1]["spec"]
    assert stream["mainApplicationFile"] == "local:///opt/cdckit/jobs/stream.py"
    assert stream["arguments"] == ["s3://kit/artifacts/connector.json"]
    assert stream["driver"]["serviceAccount"] == "cdckit-jobs" and stream["image"] == "cdckit-job:0.1.0"
    assert stream["executor"]["serviceAccount"] == "cdckit-jobs"  # executors read and write S3 too
    # the operator retries OnFailure only while onFailureRetries lasts (none: never); a stream runs for months
    assert stream["restartPolicy"]["type"] == "Always" and manifests[0]["spec"]["restartPolicy"]["type"] == "Never"
    assert stream["sparkConf"]["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"


def test_spark_applications_are_valid_against_the_operators_crd() -> None:
    """The manifests against the SparkApplication CRD of the operator's chart (2.5.2), as the API server checks
    them; a manifest with a field the CRD does not know, or a wrong type, is refused the same way."""
    import jsonschema
    import yaml

    crd = yaml.safe_load((ROOT / "tests" / "fixtures" / "spark-operator" /
                          "sparkoperator.k8s.io_sparkapplications.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    deployment = Deployment("prod", runtime="eks", dry_run=True)
    for connector in ({"cdckit.sink": "kafka"}, {"cdckit.sink": "delta", "cdckit.delta.path": "s3://kit/delta"}):
        for manifest in deployment.spark_applications({"namespace": "cdckit", "connector": connector},
                                                      {"connector": "s3://kit/artifacts/connector.json"},
                                                      "123456789012.dkr.ecr.eu-west-1.amazonaws.com/cdckit/job:1"):
            jsonschema.validate(manifest, schema)
    broken = deployment.spark_applications({}, {"connector": "s3://c"}, "i")[1]
    broken["spec"]["restartPolicy"]["type"] = "Forever"
    with pytest.raises(jsonschema.ValidationError, match="'Forever' is not one of"):
        jsonschema.validate(broken, schema)
    misspelt = deployment.spark_applications({}, {"connector": "s3://c"}, "i")[1]
    misspelt["spec"]["driver"]["serviceAcount"] = "cdckit-jobs"
    with pytest.raises(jsonschema.ValidationError, match="'serviceAcount' was unexpected"):
        jsonschema.validate(misspelt, schema)


def _strict(schema: Any) -> Any:
    """The CRD's schema as ``kubectl apply`` checks it (strict field validation, kubectl's default since Kubernetes
    1.27): a field the schema does not name is refused, except under x-kubernetes-preserve-unknown-fields."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [_strict(item) for item in schema]
    return schema


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
    assert {key: spec["sparkConf"][key] for key in ("spark.sql.extensions", "spark.sql.catalog.spark_catalog")} == {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}
    kafka = {**outputs, "connector": {"cdckit.sink": "kafka"}}
    assert "delta" not in deployment.job_runs(kafka, uris)[0]["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    assert not [key for key in deployment.spark_applications(kafka, uris, "i")[0]["spec"]["sparkConf"]
                if "delta" in key.lower() or key == "spark.sql.extensions"]


def test_unknown_environment_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--env", "staging"]) == 2
    assert "no environment 'staging'" in capsys.readouterr().err


def test_plan_without_the_state_backends_settings_says_which_file_to_write(capsys: pytest.CaptureFixture[str]
                                                                            ) -> None:
    assert not (ROOT / "infra" / "terraform" / "envs" / "dev" / "backend.hcl").exists()
    assert main(["plan", "--env", "dev"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "envs/dev/backend.hcl is missing: copy backend.hcl.example" in error


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
