"""A whole run (snapshot, then stream) as a user starts it, with the database password from the environment and a
column hashed with a salt (``column.mask.hash.SHA-256.with.salt.<salt>``, the salt in the setting's name): neither
the password nor the salt appears in any of its outputs: console, log, events, checkpoint and state, Spark's event
log (what the Spark UI and history server show, plans included)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
PASSWORD = "Scan-Secret-91c2e"
SALT = "Sel-4f9c2e7b"


def test_no_output_of_a_run_holds_the_password_or_the_salt(postgres: Any, database: str, workdir: Path,
                                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'scan_user') THEN "
                 f"CREATE ROLE scan_user LOGIN SUPERUSER REPLICATION PASSWORD '{PASSWORD}'; END IF; END $$",
            "CREATE TABLE public.items (id int PRIMARY KEY, name text)", "INSERT INTO public.items VALUES (1, 'a')")
    properties = make_config(postgres, database, workdir).as_properties(include_secrets=True)
    properties.update({"database.user": "scan_user", "database.password": "${env:CDCKIT_SCAN_PASSWORD}",
                       f"column.mask.hash.SHA-256.with.salt.{SALT}": "public.items.name"})
    # the configuration, the run's input, holds the salt in a setting's name: it lies outside the folder scanned
    config_file = tmp_path_factory.mktemp("input") / "connector.json"
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
            content = path.read_bytes()
            assert PASSWORD.encode() not in content, f"{path} holds the password"
            assert SALT.encode() not in content, f"{path} holds the salt"
            scanned += 1
    assert PASSWORD not in run.stdout + run.stderr
    assert SALT not in run.stdout + run.stderr
    event_log = "".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    assert "physicalPlanDescription" in event_log and "*********(redacted)" in event_log  # plans, redaction on
    assert scanned >= 5
    # the setting did its work: the snapshot's row carries the hash of its name, not the name
    (line,) = [json.loads(text) for path in (workdir / "out").rglob("snapshot-*.jsonl")
               for text in path.read_text().splitlines()]
    name = line["value"]["payload"]["after"]["name"]
    assert name != "a" and re.fullmatch(r"[0-9a-f]{64}", name)
