"""sql/postgres run with psql against a real PostgreSQL (twice: idempotent), then cdckit captures as the
least-privileged role they create."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, payload, records

from cdckit.config import validate
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.embedded_postgres import _bin_dir

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
SCRIPTS = Path(__file__).resolve().parents[2] / "sql" / "postgres"


def _psql(dsn: str, script: str, **variables: str) -> None:
    command = [str(_bin_dir() / "psql"), dsn, "-X", "-q", "-f", str(SCRIPTS / script)]
    for name, value in variables.items():
        command += ["-v", f"{name}={value}"]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
    assert result.returncode == 0, result.stderr


def test_capture_works_with_only_what_the_scripts_grant(postgres: Any, spark: Any, database: str,
                                                        workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id int PRIMARY KEY, item text)",
            "INSERT INTO public.orders VALUES (1, 'a')")
    for _ in range(2):
        _psql(dsn, "01_cdckit_role.sql", cdckit_user="cdckit_min", cdckit_password="Min-Priv-3",
              dbname=database, schema="public")
        _psql(dsn, "02_publication.sql", publication=f"pub_min_{database}", tables="public.orders")
    assert fetch(dsn, "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication FROM pg_roles "
                      "WHERE rolname = 'cdckit_min'") == [(False, False, False, True)]
    assert fetch(dsn, f"SELECT has_database_privilege('cdckit_min', '{database}', 'CREATE'), "
                      "has_table_privilege('cdckit_min', 'public.orders', 'INSERT')") == [(False, False)]
    config = make_config(postgres, database, workdir, **{
        "database.user": "cdckit_min", "database.password": "Min-Priv-3", "publication.autocreate.mode": "disabled",
        "publication.name": f"pub_min_{database}", "slot.name": f"slot_min_{database}"})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.orders VALUES (2, 'b')", "UPDATE public.orders SET item = 'c' WHERE id = 1")
    run_stream(spark, config)
    ops = [payload(r["value"])["op"] for r in records(config, "it.public.orders") if r["value"] is not None]
    assert ops == ["r", "c", "u"]

    # an ad hoc incremental snapshot, with the signalling table the third script creates and publishes
    for _ in range(2):
        _psql(dsn, "03_signal_table.sql", schema="public", table="debezium_signal",
              publication=f"pub_min_{database}", cdckit_user="cdckit_min")
    assert fetch(dsn, f"SELECT count(*) FROM pg_publication_tables WHERE pubname = 'pub_min_{database}' "
                      "AND tablename = 'debezium_signal'") == [(1,)]
    signalled = validate({**config.as_properties(include_secrets=True),
                          "signal.data.collection": "public.debezium_signal"})
    execute(dsn, "INSERT INTO public.debezium_signal VALUES ('s1', 'execute-snapshot', "
                 "'{\"data-collections\": [\"public.orders\"]}')")
    run_stream(spark, signalled)
    reads = [payload(r["value"]) for r in records(config, "it.public.orders")[3:] if r["value"] is not None]
    assert [(r["op"], r["source"]["snapshot"], r["after"]["id"]) for r in reads] == [
        ("r", "incremental", 1), ("r", "incremental", 2)]
