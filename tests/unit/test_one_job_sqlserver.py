"""One job per checkpoint against the SQL Server model: the checkpoint's application lock (sp_getapplock, owner
Session) and owner file. A second ``cdckit stream`` on the checkpoint is refused before Spark starts, naming the
running job; the lock goes when its session ends, also when its process is killed."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlserver_testdb import model_database, model_properties

from cdckit.config import Config, validate
from cdckit.pipelines import dispatch, sqlserver
from cdckit.pipelines.ownership import OWNER_FILE, JobAlreadyRunning
from cdckit_lab.sqlserver_model import ModelColumn


def _config(tmp_path: Path) -> Config:
    model = model_database(tmp_path / "sqlserver.sqlite", {"customers": (
        [ModelColumn("id", "int", nullable=False), ModelColumn("email", "varchar", max_length=255)], ["id"])})
    return validate({
        "connector.class": "io.debezium.connector.sqlserver.SqlServerConnector", "topic.prefix": "server1",
        "cdckit.output.path": str(tmp_path / "out"), "cdckit.checkpoint.location": str(tmp_path / "checkpoint"),
        **model_properties(model, password="not-a-real-secret")})


def test_a_second_stream_on_the_checkpoint_is_refused_by_the_application_lock(tmp_path: Path) -> None:
    config = _config(tmp_path)
    job = dispatch.claim_job(config, "stream")
    try:
        with pytest.raises(JobAlreadyRunning, match=r"is in use by cdckit stream on .* pid \d+, running since .* "
                                                    r"which holds its application lock cdckit:\w+ in testDB"):
            sqlserver.lock_source(config, "stream")  # another session of this process: refused as well
        config_file = tmp_path / "connector.json"
        config_file.write_text(json.dumps({"name": "second", "config": config.as_properties(include_secrets=True)}))
        second = subprocess.run([sys.executable, "-m", "cdckit", "stream", str(config_file)], capture_output=True,
                                text=True, timeout=120)
        said = " ".join(second.stdout.split())
        assert second.returncode == 2, second.stdout + second.stderr
        assert said.startswith("cdckit: error: checkpoint") and "is in use by cdckit stream on" in said, said
        assert f"{socket.gethostname()} pid {os.getpid()}" in said, said
        assert "SparkSession" not in second.stderr and "Using Spark" not in second.stderr  # refused before Spark
    finally:
        job.release(outcome="finished")
    owner = json.loads((tmp_path / "checkpoint" / OWNER_FILE).read_text())
    assert owner["running"] is False and owner["outcome"] == "finished"
    sqlserver.lock_source(config, "stream").close()  # free again


def test_the_lock_of_a_killed_job_is_free(tmp_path: Path) -> None:
    config = _config(tmp_path)
    code = ("import os, sys; from cdckit.config import validate; from cdckit.pipelines import sqlserver; "
            "import json; config = validate(json.loads(sys.argv[1])); "
            "lock = sqlserver.lock_source(config, 'stream'); os.kill(os.getpid(), 9)")
    killed = subprocess.run([sys.executable, "-c", code, json.dumps(config.as_properties(include_secrets=True))],
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    sqlserver.lock_source(config, "stream").close()


def test_a_lost_application_lock_is_taken_again_or_said_taken(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path)
    lock = sqlserver.lock_source(config, "stream")
    try:
        lock.keep()  # alive: nothing said
        assert not caplog.records
        lock.conn.close()  # the server ended the session: its application locks went with it
        with caplog.at_level(logging.WARNING, "cdckit.sqlserver"):
            lock.keep()
        assert [r.getMessage() for r in caplog.records] == [
            f"the connection holding the checkpoint's {lock.identity} was lost; the lock is held again"]
        caplog.clear()
        lock.conn.close()
        other = sqlserver.lock_source(config, "stream")  # another job took the lock meanwhile
        try:
            with caplog.at_level(logging.WARNING, "cdckit.sqlserver"):
                lock.keep()
            [record] = caplog.records
            assert record.levelno == logging.ERROR
            assert record.getMessage() == (f"the connection holding the checkpoint's {lock.identity} was lost, and "
                                           f"another session has the lock now: two jobs may be writing the checkpoint")
        finally:
            other.close()
    finally:
        lock.close()
