"""What a job checks before anything starts, and what ``cdckit validate`` tells a user, against embedded PostgreSQL:
a source that refuses the login, a table the user may not read, a publication the user may not create, an output
path that cannot be written, a keyless table the Delta sink cannot keep, a Kafka nobody answers at. Each is one line
naming the fix, exit 2, before Spark starts, and nothing is left behind: no slot, no publication, no folder. A job
that fails once it has created its slot drops it (and the publication it created) again."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import fetch, make_config

from cdckit.cli import main

pytestmark = pytest.mark.postgres

READER_PASSWORD = "Rd-77qpz-start"


def _setup(postgres: Any, database: str) -> str:
    dsn = postgres.dsn(database)
    postgres.execute(
        "CREATE TABLE public.customers (id serial PRIMARY KEY, email text NOT NULL);"
        "CREATE TABLE public.audit (at timestamptz NOT NULL DEFAULT now(), what text);"
        "INSERT INTO public.customers (email) SELECT 'u' || g || '@x.org' FROM generate_series(1, 50) g;"
        "INSERT INTO public.audit (what) SELECT 'w' || g FROM generate_series(1, 20) g;", dbname=database)
    return dsn


def _write_config(workdir: Path, properties: dict[str, str]) -> Path:
    path = workdir / "connector.json"
    path.write_text(json.dumps({"name": "checks", "config": properties}))
    return path


def _properties(postgres: Any, database: str, workdir: Path, **overrides: str) -> dict[str, str]:
    return make_config(postgres, database, workdir, **overrides).as_properties(include_secrets=True)


def _left_behind(postgres: Any, database: str, workdir: Path) -> dict[str, Any]:
    dsn = postgres.dsn(database)
    return {"slots": fetch(dsn, f"SELECT slot_name FROM pg_replication_slots WHERE database = '{database}'"),
            "publications": fetch(dsn, "SELECT pubname FROM pg_publication"),
            "folders": sorted(p.name for p in workdir.iterdir() if p.name != "connector.json")}


def _reader(postgres: Any, database: str, *grants: str) -> None:
    postgres.execute(f"DROP ROLE IF EXISTS reader_{database}; CREATE ROLE reader_{database} LOGIN REPLICATION "
                     f"PASSWORD '{READER_PASSWORD}'; " + "; ".join(grants), dbname=database)


def test_validate_connects_and_gives_a_verdict_with_only_the_connectors_settings(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _setup(postgres, database)
    config = _write_config(workdir, _properties(postgres, database, workdir))
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[-1].startswith("valid: a job would start")
    assert any(line.startswith("ok  source: PostgreSQL ") for line in lines), out
    assert any(line.startswith("ok  tables: 2 captured (public.audit, public.customers)") for line in lines), out
    assert any("publication 'pub_" in line and "will be created FOR TABLE" in line for line in lines), out
    assert any(line.startswith(f"ok  slot: 'slot_{database}' will be created") for line in lines), out
    assert "database.password=********" in lines and READER_PASSWORD not in out and "s3cret-pw" not in out
    # only the PostgreSQL connector's settings, and only those not at their defaults
    assert not any(line.startswith(("database.names=", "database.encrypt=", "data.query.mode=")) for line in lines)
    assert len([line for line in lines if "=" in line.split(" ")[0]]) < 20, out
    assert _left_behind(postgres, database, workdir) == {"slots": [], "publications": [], "folders": []}

    wrong = _write_config(workdir, _properties(postgres, database, workdir, database__password="Wrong-pw-981"))
    assert main(["validate", str(wrong)]) == 2
    out = capsys.readouterr().out
    assert "FAIL source: " in out and "password authentication failed" in out, out
    assert out.splitlines()[-1].startswith("invalid: 1 problem above"), out
    assert "Wrong-pw-981" not in out

    # --offline: nothing is contacted, so a wrong password (or an unreachable host) cannot be seen
    assert main(["validate", str(wrong), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "source:" not in out and out.splitlines()[-1].startswith("valid: a job would start (offline")


@pytest.mark.parametrize("command", ["snapshot", "stream"])
def test_a_table_the_user_may_not_read_and_a_publication_they_may_not_create_stop_the_job_before_anything(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    _setup(postgres, database)
    _reader(postgres, database, f"GRANT SELECT ON public.customers TO reader_{database}")
    config = _write_config(workdir, _properties(postgres, database, workdir, database__user=f"reader_{database}",
                                                database__password=READER_PASSWORD))
    started = time.monotonic()
    assert main([command, str(config)]) == 2
    seconds = time.monotonic() - started
    out = capsys.readouterr().out
    assert out.startswith("cdckit: error: 2 problems, found before anything started:"), out
    assert (f"user 'reader_{database}' may not SELECT public.audit, which the snapshot reads; grant it (GRANT USAGE "
            f"ON SCHEMA public TO reader_{database}; GRANT SELECT ON ALL TABLES IN SCHEMA public TO "
            f"reader_{database}) or leave it out with table.exclude.list") in out
    assert f"publication 'pub_{database}' does not exist and cannot be created" in out
    assert "Traceback" not in out and seconds < 10  # no Spark started
    assert _left_behind(postgres, database, workdir) == {"slots": [], "publications": [], "folders": []}


def test_an_output_path_that_cannot_be_written_stops_the_job_before_anything(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _setup(postgres, database)
    blocker = workdir / "a-file"
    blocker.write_text("not a folder")
    config = _write_config(workdir, _properties(postgres, database, workdir,
                                                cdckit__output__path=str(blocker / "out")))
    assert main(["stream", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.strip() == (f"cdckit: error: cdckit.output.path={blocker / 'out'}: {blocker} is a file, not a "
                           f"folder; choose a folder (it is created when missing)"), out
    assert _left_behind(postgres, database, workdir) == {"slots": [], "publications": [], "folders": ["a-file"]}


def test_the_delta_sink_refuses_a_keyless_table_before_spark_starts(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _setup(postgres, database)
    config = _write_config(workdir, _properties(postgres, database, workdir, cdckit__sink="delta",
                                                cdckit__delta__path=str(workdir / "delta")))
    started = time.monotonic()
    assert main(["snapshot", str(config)]) == 2
    out = capsys.readouterr().out
    assert "public.audit has no primary key, so cdckit.delta.mode=both cannot keep its current-state table" in out
    assert "message.key.columns (e.g. public.audit:<column>,<column>)" in out
    assert time.monotonic() - started < 10
    assert _left_behind(postgres, database, workdir) == {"slots": [], "publications": [], "folders": []}
    # with a key named for it, or only change tables, the same configuration is valid
    keyed = _write_config(workdir, _properties(postgres, database, workdir, cdckit__sink="delta",
                                               cdckit__delta__path=str(workdir / "delta"),
                                               message__key__columns="public.audit:at"))
    assert main(["validate", str(keyed)]) == 0
    capsys.readouterr()


def test_a_kafka_nobody_answers_at_stops_the_job_before_anything(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _setup(postgres, database)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = _write_config(workdir, _properties(postgres, database, workdir, cdckit__sink="kafka",
                                                kafka__bootstrap__servers=f"127.0.0.1:{port}"))
    assert main(["snapshot", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"cdckit: error: no Kafka broker answers at 127.0.0.1:{port} (127.0.0.1:{port}: "), out
    assert "check kafka.bootstrap.servers" in out
    assert _left_behind(postgres, database, workdir) == {"slots": [], "publications": [], "folders": []}


def test_a_table_whose_row_level_security_would_hide_rows_stops_the_job_before_anything(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _setup(postgres, database)
    _reader(postgres, database, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader_{database}",
            "ALTER TABLE public.audit ENABLE ROW LEVEL SECURITY",
            f"CREATE PUBLICATION pub_{database} FOR TABLE public.customers, public.audit")
    config = _write_config(workdir, _properties(postgres, database, workdir, database__user=f"reader_{database}",
                                                database__password=READER_PASSWORD,
                                                publication__autocreate__mode="disabled"))
    assert main(["snapshot", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.strip() == (f"cdckit: error: row-level security applies to user 'reader_{database}' on public.audit: "
                           f"its policies would hide rows from the snapshot, and their events would be missing; run "
                           f"ALTER ROLE reader_{database} BYPASSRLS as a superuser, or leave it out with "
                           f"table.exclude.list"), out
    assert _left_behind(postgres, database, workdir)["slots"] == []
    postgres.execute(f"ALTER ROLE reader_{database} BYPASSRLS", dbname=database)
    assert main(["validate", str(config)]) == 0
    capsys.readouterr()


@pytest.mark.slow
def test_a_snapshot_that_fails_after_creating_its_slot_drops_it_and_its_publication(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, spark: Any) -> None:
    """Every check passes, then a value stops the snapshot inside Spark (an interval of more hours than a Java int
    holds, on which Debezium 2.5.2 stops too): the slot the snapshot created and the publication the job created are
    dropped again, and the next run starts clean."""
    _setup(postgres, database)
    postgres.execute("CREATE TABLE public.readings (id int PRIMARY KEY, v interval);"
                     "INSERT INTO public.readings VALUES (1, '1 hour'), (2, '2147483648 hours')", dbname=database)
    properties = _properties(postgres, database, workdir)
    config = _write_config(workdir, properties)
    assert main(["validate", str(config)]) == 0
    capsys.readouterr()
    with caplog.at_level("WARNING", logger="cdckit"):
        assert main(["snapshot", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("cdckit: error: the snapshot stopped: table public.readings: column 'v': "), out
    assert len(out.strip().splitlines()) == 1, out
    dropped = [r.getMessage() for r in caplog.records if "dropped the" in r.getMessage()]
    assert dropped == [f"the job ended before it had anything to continue from: dropped the replication slot "
                       f"'slot_{database}' it created",
                       f"the job ended before it had anything to continue from: dropped the publication "
                       f"'pub_{database}' it created"], dropped
    left = _left_behind(postgres, database, workdir)
    assert left["slots"] == [] and left["publications"] == [], left
    # the value put right at the source, the next run takes the whole snapshot
    postgres.execute("UPDATE public.readings SET v = '2147483647 hours' WHERE id = 2", dbname=database)
    assert main(["snapshot", str(config)]) == 0
    assert "snapshot completed: 72 rows from 3 tables" in capsys.readouterr().out


def test_the_job_after_its_checks_takes_their_tables_instead_of_discovering_them_again(
        postgres: Any, database: str, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdckit.pipelines import dispatch
    from cdckit.pipelines import postgres as pipeline

    _setup(postgres, database)
    config = make_config(postgres, database, workdir)
    discovered: list[int] = []
    real = pipeline.discover_tables
    monkeypatch.setattr(pipeline, "discover_tables", lambda *a: discovered.append(1) or real(*a))
    dispatch.require_ready(config)
    assert len(discovered) == 1
    _, tables = pipeline.prepare_source(config)  # the job's start, right after its checks
    assert len(discovered) == 1 and sorted(t.qualified_name for t in tables) == ["public.audit", "public.customers"]
    pipeline.prepare_source(config)  # handed on once: a later start discovers them again
    assert len(discovered) == 2
    dispatch.check(config)  # `cdckit validate`'s checks hand nothing on
    pipeline.prepare_source(config)
    assert len(discovered) == 4
