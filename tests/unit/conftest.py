"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def secretsmanager(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """AWS Secrets Manager as moto answers it in process, with cdckit's cache of secrets read emptied."""
    moto = pytest.importorskip("moto")
    import boto3

    from cdckit.config import loader

    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"),
                        ("AWS_DEFAULT_REGION", "eu-west-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(loader, "_SECRETS", {})
    with moto.mock_aws():
        yield boto3.client("secretsmanager")


@pytest.fixture(autouse=True)
def _no_max_lsn_warning_remembered() -> None:
    """SQL Server's warning of a database without a maximum LSN is given once per process: once per test here."""
    from cdckit.dialect.sqlserver import changes

    changes._NO_MAX_LSN_WARNED.clear()
