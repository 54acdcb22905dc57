"""A whole run (snapshot, then stream) as a user starts it, with the database password from the environment:
the password appears in none of its outputs: console, log, events, checkpoint and state, Spark's event log
(what the Spark UI and history server show, plans included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
PASSWORD = "Scan-Secret-91c2e"


def test_no_output_of_a_run_holds_the_password(postgres: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'scan_user') THEN "
                 f"CREATE ROLE scan_user LOGIN SUPERUSER REPLICATION PASSWORD '{PASSWORD}'; END IF; END $$",
            "CREATE TABLE public.items (id int PRIMARY KEY, name text)", "INSERT INTO public.items VALUES (1, 'a')")
    properties = make_config(postgres, database, workdir).as_properties(include_secrets=True)
    properties.update({"database.user": "scan_user", "database.password": "${env:CDCKIT_SCAN_PASSWORD}"})
    config_file = workdir / "connector.json"
    config_file.write_text(json.dumps({"name": "scan", "config": properties}))
    events = workdir / "spark-events"
    events.mkdir()
    env = {**os.environ, "CDCKIT_SCAN_PASSWORD": PASSWORD,
           "PYSPARK_SUBMIT_ARGS": f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={events} "
                                  f"--conf spark.eventLog.compress=false "
                                  f"pyspark-shell"}
    run = subprocess.run([sys.executable, "-m", "cdckit", "stream", str(config_file)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stream stopped after" in run.stdout
    scanned = 0
    for path in workdir.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), f"{path} holds the password"
            scanned += 1
    assert PASSWORD not in run.stdout + run.stderr
    event_log = "".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    assert "physicalPlanDescription" in event_log and "*********(redacted)" in event_log  # plans, redaction on
    assert scanned >= 5
