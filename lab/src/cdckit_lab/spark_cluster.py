"""A Spark standalone cluster on 127.0.0.1, started from the installed PySpark distribution: a master and workers,
each worker with its own work folder, home and temporary folder, so its executors are separate JVMs and Python
workers that share nothing with the driver but what a real cluster's nodes share.

Example::

    with StandaloneCluster(Path(".cdckit-cluster"), workers=2) as cluster:
        subprocess.run(cluster.spark_submit("jobs/stream.py", "connector.json"), check=True)

``python -m cdckit_lab.spark_cluster FOLDER`` runs one until interrupted and prints its master URL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from cdckit_lab.embedded_postgres import free_port

EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def spark_home() -> Path:
    """The installed PySpark package: a Spark distribution (bin/, jars/) in itself."""
    import pyspark

    return Path(next(iter(pyspark.__path__)))


class StandaloneCluster:
    """A standalone master and ``workers`` workers of ``cores`` cores and ``memory`` each."""

    def __init__(self, base_dir: Path, workers: int = 2, cores: int = 1, memory: str = "2g") -> None:
        self.base_dir = base_dir.resolve()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._processes: list[subprocess.Popen[bytes]] = []

    def _env(self, name: str) -> dict[str, str]:
        """A node's environment: its own home, temporary and local folders."""
        node = self.base_dir / name
        for folder in ("home", "tmp", "local", "work"):
            (node / folder).mkdir(parents=True, exist_ok=True)
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(node / "logs"), "SPARK_LOCAL_DIRS": str(node / "local"),
                "SPARK_WORKER_DIR": str(node / "work"), "HOME": str(node / "home"), "TMPDIR": str(node / "tmp"),
                "SPARK_DAEMON_MEMORY": "512m"}

    def _start(self, name: str, *args: str) -> None:
        env = self._env(name)
        log = (self.base_dir / name / f"{name}.log").open("wb")
        self._processes.append(subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args], env=env, stdout=log, stderr=subprocess.STDOUT,
            cwd=str(self.base_dir / name), start_new_session=True))

    def start(self, timeout_s: float = 60.0) -> None:
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(free_port()))
        self._wait_for(self.base_dir / "master" / "master.log", "I have been elected leader", timeout_s)
        for i in range(self.workers):
            name = f"worker-{i}"
            self._start(name, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                        "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port()),
                        "--work-dir", str(self.base_dir / name / "work"))
        for i in range(self.workers):
            self._wait_for(self.base_dir / f"worker-{i}" / f"worker-{i}.log", "Successfully registered with master",
                           timeout_s)

    def _wait_for(self, log: Path, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if log.exists() and text in log.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self._processes):
                break
            time.sleep(0.2)
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        self.stop()
        raise RuntimeError(f"the Spark standalone cluster did not start ({text!r} not in {log}):\n{tail}")

    def spark_submit(self, script: str | Path, *arguments: str, conf: dict[str, str] | None = None,
                     jars: Sequence[Path] = ()) -> list[str]:
        """The spark-submit command line of a Python job on this cluster (client deploy mode: Spark's standalone
        master does not run Python drivers itself)."""
        settings = {"spark.executor.cores": str(self.cores), "spark.executor.memory": "1g",
                    "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                    "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
                    **(conf or {})}
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url,
                   "--deploy-mode", "client"]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        if jars:
            command += ["--jars", ",".join(str(jar) for jar in jars)]
        return [*command, str(script), *arguments]

    def executor_pids(self) -> dict[tuple[str, str], int]:
        """The executors running on this cluster's workers now: (application id, executor id) -> process id."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = [part.decode() for part in (entry / "cmdline").read_bytes().split(b"\0")]
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if EXECUTOR_MAIN in command and cwd.startswith(str(self.base_dir)):
                found[(command[command.index("--app-id") + 1], command[command.index("--executor-id") + 1])] = \
                    int(entry.name)
        return found

    def kill_executor(self, application: str, executor: str) -> int:
        """Kill an application's executor with SIGKILL (as a lost node); returns its process id."""
        pid = self.executor_pids().get((application, executor))
        if pid is None:
            raise RuntimeError(f"executor {executor} of {application} is not running on the cluster")
        os.kill(pid, signal.SIGKILL)
        return pid

    def executor_logs(self) -> str:
        """Every executor's stderr, for a failure's explanation."""
        parts = []
        for log in sorted(self.base_dir.glob("worker-*/work/*/*/stderr")):
            parts.append(f"== {log.relative_to(self.base_dir)}\n{log.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m cdckit_lab.spark_cluster",
                                     description="run a Spark standalone cluster on 127.0.0.1 until interrupted")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with StandaloneCluster(args.folder, workers=args.workers) as cluster:
        print(f"master {cluster.master_url}; workers' folders under {args.folder}; Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
