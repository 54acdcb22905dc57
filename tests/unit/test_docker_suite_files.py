"""The docker suite's files: the compose file pytest-docker starts is the lab's, which exists."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCKER_CONFTEST = Path(__file__).resolve().parents[1] / "docker" / "conftest.py"


def test_the_docker_suite_starts_the_lab_compose_file() -> None:
    spec = importlib.util.spec_from_file_location("cdckit_docker_conftest", DOCKER_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compose = Path(module.COMPOSE_FILE)
    assert compose.is_file(), f"tests/docker/conftest.py names {compose}, which does not exist"
    assert compose.parent.name == "lab" and "mssql/server" in compose.read_text()
