"""One job per slot and checkpoint, and clean stops: a second ``cdckit stream`` on the slot or the checkpoint of a
running one is refused at once (exit 2, one line naming the running job) and the running one goes on unharmed;
SIGTERM stops the stream after its batch under way, acknowledges it, says so in one line and exits 0; ``cdckit
status`` says who runs or how the last job ended; a restart continues with nothing lost or repeated."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, fetch, make_config, payload, records, replay

from cdckit.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOPIC = "it.public.ledger"


def _source(dsn: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(i,): {"id": i, "amount": a} for i, a in fetch(dsn, "SELECT id, amount FROM public.ledger")}


def _write(dsn: str, first: int, count: int) -> None:
    statements = []
    for i in range(first, first + count):
        statements.append(f"INSERT INTO public.ledger VALUES ({i}, {i})")
        if i % 3 == 0:
            statements.append(f"UPDATE public.ledger SET amount = amount * 2 WHERE id = {i}")
        if i % 5 == 0:
            statements.append(f"DELETE FROM public.ledger WHERE id = {i}")
    execute(dsn, *statements)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    return code, " ".join(capsys.readouterr().out.split())  # the console wraps long lines


def _wait(condition: Any, what: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_second_job_refused_and_sigterm_stops_the_first_cleanly(postgres: Any, database: str, workdir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)")
    _write(dsn, 0, 20)
    config = make_config(postgres, database, workdir, **{"max.batch.size": "30"})
    properties = config.as_properties(include_secrets=True)
    properties.update({"cdckit.trigger": "processing-time", "cdckit.trigger.interval": "200 milliseconds"})
    config_file = workdir / "connector.json"
    config_file.write_text(json.dumps({"name": "first", "config": properties}))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    out, err = workdir / "first.out", workdir / "first.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        first = subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=env,
                                 stdout=stdout, stderr=stderr, start_new_session=True)
    topic = Path(config.str("cdckit.output.path")) / TOPIC
    try:
        _wait(lambda: list(topic.glob("snapshot-*.jsonl")) or first.poll() is not None, "no snapshot written")
        _write(dsn, 20, 40)
        _wait(lambda: replay(config, TOPIC) == _source(dsn) or first.poll() is not None, "the stream did not catch up")
        assert first.poll() is None, err.read_text()[-3000:]

        # the same slot and checkpoint; the same slot, another checkpoint; the same checkpoint, another slot
        host = socket.gethostname()
        started = time.monotonic()
        code, said = _cli(capsys, "stream", str(config_file), "--set", "cdckit.trigger=available-now")
        assert code == 2, said
        assert said.startswith("cdckit: error:") and "in use by" in said, said
        assert f"{host}" in said and f"{first.pid}" in said, said
        code, said = _cli(capsys, "stream", str(config_file), "--set",
                          f"cdckit.checkpoint.location={workdir / 'other-checkpoint'}")
        assert code == 2 and f"replication slot 'slot_{database}' is in use by" in said, said
        assert f"cdckit stream {host}:{first.pid}" in said, said
        code, said = _cli(capsys, "snapshot", str(config_file), "--set", f"slot.name=other_{database}")
        assert code == 2 and f"checkpoint {config.str('cdckit.checkpoint.location')} is in use by" in said, said
        assert f"cdckit stream on {host} pid {first.pid}, running since" in said, said
        assert time.monotonic() - started < 30, "refused at once, before Spark starts"
        assert not fetch(dsn, f"SELECT 1 FROM pg_replication_slots WHERE slot_name = 'other_{database}'")

        # the first goes on: all the changes that follow arrive
        _write(dsn, 60, 60)
        _wait(lambda: replay(config, TOPIC) == _source(dsn) or first.poll() is not None,
              "the first job stopped taking changes")
        assert first.poll() is None, err.read_text()[-3000:]
        code, said = _cli(capsys, "status", str(config_file))
        assert code == 0 and f"job: running on {host} pid {first.pid} (cdckit stream since" in said, said

        first.send_signal(signal.SIGTERM)  # the Python driver only, as `kill <pid>` or systemd's KillMode=mixed
        assert first.wait(90) == 0, err.read_text()[-3000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    lines = out.read_text().strip().splitlines()
    stopped = re.fullmatch(r"cdckit: stopped by SIGTERM after (\d+) batches, (\d+) records; slot confirmed at "
                           r"([0-9A-F]+/[0-9A-F]+)", lines[-1])
    assert stopped, lines[-5:]
    assert "Traceback" not in err.read_text(), err.read_text()[-3000:]
    assert fetch(dsn, f"SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots "
                      f"WHERE slot_name = 'slot_{database}'") == [(stopped.group(3), False)]
    code, said = _cli(capsys, "status", str(config_file))
    assert code == 0 and re.search(rf"job: not running \(stopped by SIGTERM at \S+ \S+ UTC, \d+ s ago; cdckit stream "
                                   rf"on {host} pid {first.pid}, started", said), said

    # a restart continues where the stopped job was: nothing lost, nothing twice
    _write(dsn, 120, 30)
    code, said = _cli(capsys, "stream", str(config_file), "--set", "cdckit.trigger=available-now")
    assert code == 0, said
    assert replay(config, TOPIC) == _source(dsn)
    positions = [(payload(r["value"])["source"]["lsn"], payload(r["value"])["source"]["txId"],
                  payload(r["value"])["op"]) for r in records(config, TOPIC)
                 if r["value"] is not None and payload(r["value"])["op"] != "r"]
    assert positions == sorted(set(positions)), "no change written twice, none out of order"
    code, said = _cli(capsys, "status", str(config_file))
    assert "job: not running (stopped at " in said and ": it had finished; cdckit stream" in said, said


def test_sigterm_during_the_snapshot_abandons_it_and_the_next_start_takes_it_again(
        postgres: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)",
            "INSERT INTO public.ledger SELECT i, i FROM generate_series(0, 199999) i")
    config = make_config(postgres, database, workdir)
    config_file = workdir / "connector.json"
    config_file.write_text(json.dumps({"name": "first", "config": config.as_properties(include_secrets=True)}))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    state = Path(config.str("cdckit.checkpoint.location")) / "snapshot" / "state.json"
    blocker = psycopg2.connect(dsn)  # once the slot is made, the snapshot's read of the table waits for this lock
    out, err = workdir / "first.out", workdir / "first.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        first = subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=env,
                                 stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (state.exists() and '"attempts": [\n  ' in state.read_text()) and first.poll() is None:
            assert time.monotonic() < deadline, "the snapshot did not start"
            time.sleep(0.01)
        with blocker.cursor() as cur:  # if the read is under way already, it is long enough to stop it in it
            cur.execute("SET lock_timeout = '200ms'")
            with contextlib.suppress(psycopg2.errors.LockNotAvailable):
                cur.execute("LOCK TABLE public.ledger IN ACCESS EXCLUSIVE MODE")
        time.sleep(2)
        assert first.poll() is None, err.read_text()[-3000:]
        first.send_signal(signal.SIGTERM)
        time.sleep(1)
        blocker.rollback()  # a task waiting in the server for a lock is not interrupted by Spark's cancelling
        assert first.wait(90) == 0, err.read_text()[-3000:]
    finally:
        blocker.rollback()
        blocker.close()
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert out.read_text().strip().splitlines()[-1] == ("cdckit: stopped by SIGTERM during the snapshot, which was "
                                                        "abandoned: the next start takes it again")
    assert json.loads(state.read_text())["status"] == "started"
    code, said = _cli(capsys, "status", str(config_file))
    assert code == 0 and "job: not running (stopped by SIGTERM at" in said, said

    _write(dsn, 200000, 10)
    code, said = _cli(capsys, "stream", str(config_file), "--set", "cdckit.trigger=available-now")
    assert code == 0, said
    assert replay(config, TOPIC) == _source(dsn)
