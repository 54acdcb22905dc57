"""The SQL Server 2022 docker suite: a real SQL Server (containers/lab/compose.yml) with its Agent
running the CDC capture job, started by pytest-docker, with CDC enabled by the repository's DBA scripts.

It runs only where everything it needs is there; otherwise the whole directory is reported as skipped, with
one reason, and nothing in it is imported or collected:

(a) a Docker engine that answers ``docker info``, and Docker Compose v2 (pytest-docker runs ``docker compose``);
(b) the pytest-docker plugin (``pip install cdckit[dev]``);
(c) pyodbc with an ODBC driver for SQL Server (``pyodbc.drivers()`` lists one containing "SQL Server").

The checks run once, when this file is imported. A skip raised while pytest loads the conftest of a command
line argument would abort pytest, so the skip is raised while collecting each test file instead: the files
are never imported, and ``-rs`` prints one line for the directory.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "containers" / "lab" / "compose.yml"


def _first_line(stderr: str, stdout: str) -> str:
    """The line worth showing of a failed command's output: docker prints its error first on stderr."""
    for text in (stderr, stdout):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[0]
    return "no output"


def _docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no Docker engine answers: the docker command is not installed"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine answers (`docker info`: {exc})"
    if info.returncode != 0:
        return f"no Docker engine answers (`docker info`: {_first_line(info.stderr, info.stdout)})"
    try:
        compose = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30,
                                 check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Docker Compose v2 is not available (`docker compose version`: {exc})"
    if compose.returncode != 0:
        return (f"Docker Compose v2 is not available (`docker compose version`: "
                f"{_first_line(compose.stderr, compose.stdout)})")
    return None


def _odbc_problem() -> str | None:
    try:
        import pyodbc
    except Exception as exc:  # ImportError, or the shared library unixODBC provides is missing
        return (f"pyodbc cannot be loaded ({exc}); install unixODBC, Microsoft ODBC Driver 18 for SQL Server "
                f"and cdckit[sqlserver]")
    if not any("SQL Server" in driver for driver in pyodbc.drivers()):
        return ("no ODBC driver for SQL Server is installed (pyodbc.drivers() lists none containing "
                "'SQL Server'); install Microsoft ODBC Driver 18 for SQL Server")
    return None


def _skip_reason() -> str | None:
    docker = _docker_problem()
    if docker:
        return docker
    if importlib.util.find_spec("pytest_docker") is None:
        return "pytest-docker is not installed (pip install cdckit[dev])"
    return _odbc_problem()


SKIP_REASON = _skip_reason()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "docker: needs a Docker engine (the SQL Server 2022 container)")


def _run_reason(config: pytest.Config) -> str | None:
    if SKIP_REASON:
        return SKIP_REASON
    if not config.pluginmanager.hasplugin("docker"):
        return "the pytest-docker plugin is installed but disabled (-p no:docker)"
    return None


class _SkippedFile(pytest.File):
    """Stands in for a test file of this directory when the suite cannot run: collecting it skips, and the
    file itself is never imported."""

    reason = ""

    def collect(self) -> Iterator[pytest.Item]:
        raise pytest.skip.Exception(self.reason)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    reason = _run_reason(parent.config)
    if reason is None:
        return None  # pytest's own Module
    skipped = _SkippedFile.from_parent(parent, path=module_path)
    skipped.reason = reason
    return skipped


# -- fixtures (used only when the suite runs) -----------------------------------------------------------------
@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    """pytest-docker's compose file: the SQL Server lab."""
    return str(COMPOSE_FILE)


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"cdckit-sqlserver-{os.getpid()}"


@pytest.fixture(scope="session")
def sqlserver(docker_services: Any, docker_ip: str) -> Iterator[Any]:
    """The running server with testDB CDC-enabled by sql/sqlserver/01_enable_cdc_database.sql; its
    ``config(workdir, tables, **overrides)`` builds cdckit properties for it, ``create_table`` creates a table
    and enables CDC for it with 03_enable_cdc_table.sql."""
    import pyodbc
    from sqlserver_docker import SqlServerLab, choose_driver, sa_password

    lab = SqlServerLab(docker_ip, int(docker_services.port_for("sqlserver", 1433)), sa_password(),
                       choose_driver(pyodbc.drivers()))
    docker_services.wait_until_responsive(check=lab.responds, timeout=300.0, pause=2.0)
    lab.prepare()
    yield lab


@pytest.fixture(scope="session")
def spark() -> Any:
    from cdckit.spark.session import get_spark

    return get_spark({"spark.sql.shuffle.partitions": "2"})


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
