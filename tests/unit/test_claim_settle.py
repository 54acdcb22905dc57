"""The checkpoint's owner file (``cdckit.pipelines.ownership``): a job writes it, and reads it back at least
``SETTLE_SECONDS`` later, so that of two jobs started on one checkpoint at the same moment only one runs. The CLI
starts Spark between the two steps, so that the wait costs nothing there. A checkpoint on a file system of the
machine's own is locked by the kernel instead (a POSIX lock of ``cdckit.owner.lock``): no wait at all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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


@pytest.fixture()
def shared_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint other machines reach as well (S3, NFS, EFS): no local lock, the owner file alone."""
    monkeypatch.setattr(ownership, "local_lock", lambda location: None)


@pytest.mark.usefixtures("shared_checkpoint")
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


@pytest.mark.usefixtures("shared_checkpoint")
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


@pytest.mark.usefixtures("shared_checkpoint")
def test_a_claim_confirmed_at_once_waits_the_settling_time(tmp_path: Path, sleeps: list[float]) -> None:
    job = claim(_config(tmp_path), "stream", _no_source_lock)
    try:
        assert len(sleeps) == 1 and 0 < sleeps[0] <= ownership.SETTLE_SECONDS
    finally:
        job.release()


@pytest.mark.usefixtures("shared_checkpoint")
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


HOLDER = """
import sys, time
from cdckit.config import validate
from cdckit.pipelines.ownership import claim
config = validate({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                   "database.hostname": "db.example.com", "database.user": "u", "database.password": "x",
                   "database.dbname": "shop", "topic.prefix": "shop", "cdckit.output.path": sys.argv[1] + "/out",
                   "cdckit.checkpoint.location": sys.argv[1] + "/checkpoint"})
claim(config, "stream", lambda config, command: None)
print("held", flush=True)
time.sleep(120)
"""


def test_a_local_checkpoint_is_locked_by_the_kernel_without_settling(tmp_path: Path, sleeps: list[float],
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    if ownership.local_lock(str(tmp_path / "probe")) is None:
        pytest.skip("the test folder is not on a file system of this machine's own (ext4, XFS, Btrfs, tmpfs)")
    config = _config(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        sleeps.clear()  # (time.sleep itself is replaced: the subprocess module's waits land here too)
        with pytest.raises(JobAlreadyRunning, match=rf"is in use by cdckit stream on .* pid {holder.pid}"):
            claim(config, "stream", _no_source_lock)
        assert sleeps == [], "refused at once: the other process holds the lock"
        holder.send_signal(signal.SIGKILL)  # killed: its owner file's heartbeat is still fresh
        holder.wait(30)
        owner = json.loads((tmp_path / "checkpoint" / OWNER_FILE).read_text())
        assert ownership.fresh(owner) and owner["pid"] == holder.pid
        sleeps.clear()
        with caplog.at_level("WARNING", logger="cdckit"):
            job = claim(config, "stream", _no_source_lock)
        try:
            assert sleeps == [], "a local lock needs no settling"
            assert "the checkpoint's lock it held is free" in caplog.text, "taken over at once, with a log line"
            assert json.loads((tmp_path / "checkpoint" / OWNER_FILE).read_text())["token"] == job.token
        finally:
            job.release()
    finally:
        holder.kill()
        holder.wait(30)


def test_a_job_that_locked_and_has_not_written_its_owner_file_yet_is_named_as_starting(tmp_path: Path) -> None:
    if ownership.local_lock(str(tmp_path / "probe")) is None:
        pytest.skip("the test folder is not on a file system of this machine's own (ext4, XFS, Btrfs, tmpfs)")
    (tmp_path / "checkpoint").mkdir()
    locker = ("import fcntl, os, sys, time\n"
              "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
              "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
              "print('locked', flush=True)\n"
              "time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", locker, str(tmp_path / "checkpoint" / ownership.LOCK_FILE)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(JobAlreadyRunning, match=r"in use by another cdckit job on this machine \(it holds "
                                                    r"cdckit.owner.lock, and is starting\)"):
            claim(_config(tmp_path), "stream", _no_source_lock)
    finally:
        holder.kill()
        holder.wait(30)
