"""The checkpoint's owner file (``cdckit.pipelines.ownership``): a job writes it, and reads it back at least
``SETTLE_SECONDS`` later, so that of two jobs started on one checkpoint at the same moment only one runs. The CLI
starts Spark between the two steps, so that the wait costs nothing there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdckit.config import Config, validate
from cdckit.pipelines import ownership
from cdckit.pipelines.ownership import OWNER_FILE, Claim, JobAlreadyRunning, claim


def _config(tmp_path: Path) -> Config:
    return validate({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                     "database.hostname": "db.example.com", "database.user": "u",
                     "database.password": "not-a-real-secret", "database.dbname": "shop",
                     "topic.prefix": "shop", "cdckit.output.path": str(tmp_path / "out"),
                     "cdckit.checkpoint.location": str(tmp_path / "checkpoint")})


def _no_source_lock(config: Config, command: str) -> None:
    return None  # two jobs on one checkpoint with different slots: only the owner file tells them apart


@pytest.fixture()
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    asked: list[float] = []
    monkeypatch.setattr(ownership.time, "sleep", asked.append)
    return asked


def test_a_job_whose_owner_file_another_job_wrote_while_it_settled_is_refused(tmp_path: Path,
                                                                             sleeps: list[float]) -> None:
    config = _config(tmp_path)
    first, second = Claim(config, "stream", None), Claim(config, "stream", None)
    # both read the checkpoint before either wrote: neither saw the other
    first.begin()
    second.document["heartbeat_ms"] = ownership.now_ms()
    second.store.write_json(OWNER_FILE, second.document)  # the second writes last
    second._written = ownership.time.monotonic()
    with pytest.raises(JobAlreadyRunning, match=r"checkpoint .* is in use by cdckit stream on .* pid \d+"):
        first.confirm()
    first.abandon()
    second.confirm()  # the file is its own: it runs
    try:
        assert json.loads((tmp_path / "checkpoint" / OWNER_FILE).read_text())["token"] == second.token
    finally:
        second.release()


def test_the_settling_time_overlaps_what_runs_between_begin_and_confirm(tmp_path: Path, sleeps: list[float],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path)
    clock = [1000.0]
    monkeypatch.setattr(ownership.time, "monotonic", lambda: clock[0])
    job = claim(config, "stream", _no_source_lock, confirm=False)  # what the CLI does before it starts Spark
    try:
        assert sleeps == [], "the read-back waits for confirm"
        clock[0] += 4.0  # Spark started meanwhile
        again = claim(config, "stream", _no_source_lock)  # the job's run confirms the claim it finds
        assert again is job and sleeps == [], "Spark's start took longer than the settling time: no wait"
    finally:
        job.release()


def test_a_claim_confirmed_at_once_waits_the_settling_time(tmp_path: Path, sleeps: list[float]) -> None:
    job = claim(_config(tmp_path), "stream", _no_source_lock)
    try:
        assert len(sleeps) == 1 and 0 < sleeps[0] <= ownership.SETTLE_SECONDS
    finally:
        job.release()


def test_a_refused_confirm_gives_the_claim_up(tmp_path: Path, sleeps: list[float]) -> None:
    config = _config(tmp_path)
    closed: list[Any] = []

    class Lock:
        identity = None

        def keep(self) -> None:
            pass

        def close(self) -> None:
            closed.append(self)

    job = claim(config, "stream", lambda config, command: Lock(), confirm=False)  # type: ignore[arg-type,return-value]
    intruder = Claim(config, "stream", None)
    intruder.document["heartbeat_ms"] = ownership.now_ms()
    intruder.store.write_json(OWNER_FILE, intruder.document)
    with pytest.raises(JobAlreadyRunning):
        claim(config, "stream", _no_source_lock)
    assert closed, "the source's lock is released"
    assert ownership.held(config) is None
    assert json.loads((tmp_path / "checkpoint" / OWNER_FILE).read_text())["token"] == intruder.token, \
        "the other job's owner file is left as it is"
    assert job._done.is_set(), "its heartbeat is stopped"
