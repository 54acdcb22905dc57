"""The Delta sink's suites run on a Spark that has a Delta Lake build (``cdckit.versions.DELTA_BUILDS``): ``make
test`` runs them in the virtualenv of the oldest supported Spark (EMR's, with the Delta release EMR ships)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))


@pytest.fixture(scope="session")
def spark() -> object:
    from cdckit.spark.session import get_spark

    return get_spark({"spark.sql.shuffle.partitions": "2"}, delta=True)
