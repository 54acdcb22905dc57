"""Jars fetched at run time (cdckit.artifacts.fetch): Maven is told to fail on a checksum it cannot match, where its
default policy only warns. A fake ``mvn`` on PATH records what cdckit asks of it and answers as Maven does."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cdckit.artifacts import fetch
from cdckit.errors import CdcKitError

# Maven's own line when a download does not match the .sha1 published beside it (Maven 3.8.7, -q -B)
MISMATCH = ("\x1b[0m[ERROR] Failed to execute goal on project x: Could not resolve dependencies for project "
            "dev.cdckit.cache:x:pom:1: Could not transfer artifact org.example:lib:jar:1.0 from/to central "
            "(https://repo.maven.apache.org/maven2): Checksum validation failed, expected 1111 but is 2222 -> [Help 1]")

FAKE_MVN = """#!/usr/bin/env python3
import json, os, pathlib, sys
pathlib.Path(os.environ["FAKE_MVN_ARGS"]).write_text(json.dumps(sys.argv[1:]))
if os.environ.get("FAKE_MVN_FAIL"):
    print(os.environ["FAKE_MVN_FAIL"])
    print("[ERROR] ")
    sys.exit(1)
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory="))
pathlib.Path(out).mkdir(parents=True, exist_ok=True)
(pathlib.Path(out) / "lib-1.0.jar").write_bytes(b"PK")
"""


@pytest.fixture
def mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake mvn first on PATH; returns the file where it writes its arguments."""
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "mvn"
    program.write_text(FAKE_MVN)
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CDCKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_MVN_ARGS", str(tmp_path / "args.json"))
    monkeypatch.delenv("FAKE_MVN_FAIL", raising=False)
    return tmp_path / "args.json"


def test_maven_fetches_with_strict_checksums(mvn: Path) -> None:
    jars = fetch("example", [("org.example", "lib", "1.0", ())])
    assert [jar.name for jar in jars] == ["lib-1.0.jar"]
    arguments = json.loads(mvn.read_text())
    assert "--strict-checksums" in arguments
    assert arguments.index("--strict-checksums") < arguments.index("dependency:copy-dependencies")


def test_a_checksum_mismatch_fails_the_fetch_in_one_line_and_leaves_no_jar(mvn: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MVN_FAIL", MISMATCH)
    with pytest.raises(CdcKitError) as refused:
        fetch("example", [("org.example", "lib", "1.0", ())])
    message = str(refused.value)
    assert "\n" not in message and "\x1b" not in message and "[Help" not in message
    assert message.startswith("fetching example from Maven Central failed: a download does not match the checksum "
                              "published beside it, or has none, so nothing of it is used (Failed to execute goal")
    assert "Checksum validation failed, expected 1111 but is 2222)" in message
    assert not (Path(os.environ["CDCKIT_CACHE"]) / "example" / ".complete").exists()  # fetched again next time
