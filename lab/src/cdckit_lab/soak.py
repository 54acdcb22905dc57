"""The kill -9 soak: a stream process killed at random points while writes go on, restarted each time, then
drained; every change must be there, none twice.

    python -m cdckit_lab.soak --runs 20 [--seed 7] [--sink files|delta] [--report soak.json]

A writer commits transactions (inserts, updates, deletes) into an embedded PostgreSQL the whole time. Each run
starts ``cdckit stream`` (processing-time trigger, small batches) as its own process group and SIGKILLs the group
after a random time (start-up included, so kills land while starting, reading, writing and committing). At the
end the writer stops and one available-now run drains the slot. The events in the files sink, replayed per key,
must equal the table; a change (key, position, op) written twice counts as a duplicate (the files sink rewrites
a replayed batch, so there should be none).

With ``--sink delta`` the events are the Delta change table's rows, read with delta-rs (the ``deltalake``
package, which shares no code with the writer), and the Delta state table must equal the source table as well.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2

from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit.spark.sinks import read_records
from cdckit_lab.embedded_postgres import EmbeddedPostgres

TOPIC = "soak.public.ledger"


def _payload(document: Any) -> Any:
    return document["payload"] if isinstance(document, dict) and "payload" in document else document


def _writer(dsn: str, stop: threading.Event, counter: list[int]) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = False
    rng = random.Random(1)
    next_id = 1000
    try:
        while not stop.is_set():
            with conn.cursor() as cur:
                for _ in range(rng.randint(1, 5)):
                    next_id += 1
                    cur.execute("INSERT INTO public.ledger VALUES (%s, %s)", (next_id, next_id))
                    if next_id % 3 == 0:
                        cur.execute("UPDATE public.ledger SET amount = amount + 1 WHERE id = %s", (next_id - 2,))
                    if next_id % 7 == 0:
                        cur.execute("DELETE FROM public.ledger WHERE id = %s", (next_id - 5,))
            conn.commit()
            counter[0] += 1
            time.sleep(0.01)
    finally:
        conn.close()


def _stream(config_file: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with log.open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "cdckit", "stream", str(config_file)], env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _batch_files(base: Path, sink: str = "files") -> int:
    """How many stream batches the sink holds: the files sink's batch files, or for Delta the batches Spark
    recorded as done (a table's commits also come from the snapshot, whose kill restarts the snapshot)."""
    if sink == "delta":
        return len([p for p in (base / "checkpoint" / "stream" / "commits").glob("*") if p.name.isdigit()])
    return len(list((base / "out" / TOPIC).glob("stream-*.jsonl")))


def _changes(base: Path, sink: str) -> Iterator[tuple[Any, tuple[Any, ...], str, dict[str, Any] | None]]:
    """Each change as (key, position, op, row after it), in the order the sink keeps them."""
    if sink == "delta":
        from deltalake import DeltaTable

        rows = DeltaTable(str(base / "delta" / "changes" / TOPIC)).to_pyarrow_table().to_pylist()
        for row in sorted(rows, key=lambda r: (r["__commit_lsn"], r["__lsn"], r["__serial"])):
            position = (row["__commit_lsn"], row["__lsn"], row["__serial"])
            yield row["id"], position, row["__op"], {"id": row["id"], "amount": row["amount"]}
        return
    for record in read_records(str(base / "out"), TOPIC):
        value = _payload(record["value"])
        if value is None:
            continue
        yield _payload(record["key"])["id"], (value["source"]["lsn"],), value["op"], value["after"]


def _state_table(base: Path) -> dict[int, dict[str, Any]]:
    from deltalake import DeltaTable

    rows = DeltaTable(str(base / "delta" / "state" / TOPIC)).to_pyarrow_table().to_pylist()
    return {r["id"]: {"id": r["id"], "amount": r["amount"]} for r in rows}


def run_soak(runs: int, seed: int, base: Path, kill_after: tuple[float, float] = (0.0, 3.0),
             sink: str = "files") -> dict[str, Any]:
    """Every fourth run is killed while starting (1-6 s in); the others once the process has written a new batch
    and then ``kill_after`` seconds more, so kills land while batches are read, written and committed."""
    rng = random.Random(seed)
    pg = EmbeddedPostgres(base / "pg").start()
    try:
        dsn = pg.dsn("postgres")
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)")
            cur.execute("INSERT INTO public.ledger SELECT g, g FROM generate_series(1, 1000) g")
        conn.commit()
        conn.close()
        properties = {"name": "soak", "connector.class": POSTGRES_CONNECTOR, **pg.connector_properties("postgres"),
                      "topic.prefix": "soak", "table.include.list": "public\\.ledger", "slot.name": "soak",
                      "publication.name": "soak", "publication.autocreate.mode": "filtered",
                      "max.batch.size": "50", "cdckit.trigger": "processing-time",
                      "cdckit.trigger.interval": "200 milliseconds", "cdckit.output.path": str(base / "out"),
                      "cdckit.checkpoint.location": str(base / "checkpoint")}
        if sink == "delta":
            properties.update({"cdckit.sink": "delta", "cdckit.delta.path": str(base / "delta")})
        config_file = base / "connector.json"
        config_file.write_text(json.dumps({"name": "soak", "config": properties}))
        stop = threading.Event()
        transactions = [0]
        writer = threading.Thread(target=_writer, args=(dsn, stop, transactions))
        writer.start()
        kills = []
        try:
            for run in range(runs):
                before = _batch_files(base, sink)
                started = time.monotonic()
                process = _stream(config_file, base / "stream.log")
                if run % 4 == 3:
                    phase = "starting"
                    time.sleep(rng.uniform(1.0, 6.0))
                else:
                    phase = "streaming"
                    deadline = started + 180
                    while _batch_files(base, sink) <= before and time.monotonic() < deadline and process.poll() is None:
                        time.sleep(0.05)
                    time.sleep(rng.uniform(*kill_after))
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                kills.append({"run": run + 1, "phase": phase, "killed_after_s": round(time.monotonic() - started, 2),
                              "new_batch_files": _batch_files(base, sink) - before})
        finally:
            stop.set()
            writer.join()
        drain = {**properties, "cdckit.trigger": "available-now", "max.batch.size": "5000"}
        config_file.write_text(json.dumps({"name": "soak", "config": drain}))
        final = _stream(config_file, base / "stream.log")
        final.wait(timeout=600)
        state: dict[int, dict[str, Any]] = {}
        seen: dict[tuple[Any, ...], int] = {}
        events = 0
        seen_ops: list[tuple[Any, str]] = []
        for key, position, op, after in _changes(base, sink):
            events += 1
            seen_ops.append((key, op))
            identity = (key, position, op)
            seen[identity] = seen.get(identity, 0) + 1
            if op == "d":
                state.pop(key, None)
            else:
                state[key] = after  # type: ignore[assignment]
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute("SELECT id, amount FROM public.ledger")
            source = {i: {"id": i, "amount": a} for i, a in cur.fetchall()}
        conn.close()
        ops = Counter(op for _, op in seen_ops)
        missing = sorted(set(source) - set(state))
        extra = sorted(set(state) - set(source))
        differing = sorted(k for k in set(source) & set(state) if source[k] != state[k])
        result: dict[str, Any] = {}
        if sink == "delta":
            kept = _state_table(base)
            result["state_table_equals_source"] = kept == source
            result["state_table_rows"] = len(kept)
        return {**result, "sink": sink, "runs": runs, "seed": seed, "kills": kills,
                "kills_while_streaming": sum(1 for k in kills if k["phase"] == "streaming" and k["new_batch_files"]),
                "transactions": transactions[0], "events": events, "events_by_op": dict(sorted(ops.items())),
                "rows": len(source), "missing": len(missing), "extra": len(extra), "differing": len(differing),
                "duplicates": sum(n - 1 for n in seen.values() if n > 1), "drain_exit": final.returncode,
                "first_problems": (missing + extra + differing)[:10]}
    finally:
        pg.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sink", choices=("files", "delta"), default="files")
    parser.add_argument("--report", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="cdckit-soak-"))
    started = time.monotonic()
    result = run_soak(args.runs, args.seed, base, sink=args.sink)
    result["seconds"] = round(time.monotonic() - started)
    text = json.dumps(result, indent=1)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    ok = not (result["missing"] or result["extra"] or result["differing"] or result["duplicates"]) \
        and result.get("state_table_equals_source", True)
    return 0 if ok and result["drain_exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
