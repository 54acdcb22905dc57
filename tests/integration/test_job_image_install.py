"""The job image's install steps run here as the Dockerfile runs them (the jars step fetches from Maven Central)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "containers" / "job" / "install.sh"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600)


def test_jars_step_puts_kafka_msk_iam_and_s3a_jars_in_sparks_folder(tmp_path: Path) -> None:
    result = _run("jars", str(tmp_path / "jars"), "4.2.0", "2.3.2", "3.4.1")
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in (tmp_path / "jars").glob("*.jar"))
    for expected in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-", "aws-msk-iam-auth-2.3.2.jar",
                     "hadoop-aws-3.4.1.jar", "spark-token-provider-kafka-0-10_2.13-"):
        assert any(name.startswith(expected) for name in names), (expected, names)


def test_an_unknown_step_is_refused() -> None:
    result = _run("everything")
    assert result.returncode == 2 and "unknown step everything" in result.stderr
