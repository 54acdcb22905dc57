"""Table names that try to leave the files sink's output folder, on a real PostgreSQL (a reviewer's finding).

Before topic names were sanitised as Debezium's ``TopicNamingStrategy`` sanitises them, a table
``app."../../../escaped"`` had its records written beside ``cdckit.output.path``; a table ``app."/../p.app.orders"``
put forged records into the real ``p.app.orders/`` folder, and once both topics' records of a stream batch landed in
one task, the two topics shared one file, the batch failed and failed again on every replay: the job was stuck.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, payload, records

from cdckit.errors import CdcKitError
from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.debezium import FORMAT_VERSION, read_records, run_debezium

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

ESCAPING = "../../../escaped"
FORGING = "/../p.app.orders"
# Debezium's names for them: every character outside [A-Za-z0-9._-] becomes "_"
ESCAPING_TOPIC = "p.app..._.._.._escaped"
FORGING_TOPIC = "p.app._.._p.app.orders"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _files_outside(root: Path, *inside: Path) -> list[Path]:
    """Every file under ``root`` that is in none of the ``inside`` folders."""
    return sorted(path for path in root.rglob("*") if path.is_file()
                  and not any(path.is_relative_to(folder) for folder in inside))


def test_table_names_cannot_write_outside_the_output_folder_nor_into_another_topic(
        postgres: Any, spark: Any, database: str, tmp_path: Path) -> None:
    dsn = postgres.dsn(database)
    workdir = tmp_path / "jobs" / "one"  # the output is tmp_path/jobs/one/out: room above it to escape to
    execute(dsn, "CREATE SCHEMA app",
            "CREATE TABLE app.orders (id int PRIMARY KEY, note text)",
            f"CREATE TABLE app.{_quoted(ESCAPING)} (id int PRIMARY KEY, note text)",
            f"CREATE TABLE app.{_quoted(FORGING)} (id int PRIMARY KEY, note text)",
            "INSERT INTO app.orders VALUES (1, 'real')",
            f"INSERT INTO app.{_quoted(ESCAPING)} VALUES (66, 'escaped')",
            f"INSERT INTO app.{_quoted(FORGING)} VALUES (666, 'forged')")
    # one stream partition: a batch's records of every table go through one task
    config = make_config(postgres, database, workdir, **{
        "topic.prefix": "p", "table.include.list": "app\\..*", "cdckit.trigger": "available-now",
        "cdckit.stream.partitions": "1"})
    output = workdir / "out"

    run_snapshot(spark, config)
    # one transaction touches the real table and both hostile ones: their records share one batch and one task
    execute(dsn, "BEGIN; INSERT INTO app.orders VALUES (2, 'real'); "
                 f"INSERT INTO app.{_quoted(FORGING)} VALUES (667, 'forged'); "
                 f"INSERT INTO app.{_quoted(ESCAPING)} VALUES (67, 'escaped'); "
                 f"UPDATE app.{_quoted(FORGING)} SET note = 'forged again'; COMMIT")
    streamed = run_stream(spark, config)  # the job goes on: before the fix, this batch failed on every run

    assert streamed.events_per_topic == {"p.app.orders": 1, FORGING_TOPIC: 3, ESCAPING_TOPIC: 1}
    assert _files_outside(tmp_path, output, workdir / "checkpoint") == []
    assert sorted(p.name for p in output.iterdir()) == sorted(["p.app.orders", ESCAPING_TOPIC, FORGING_TOPIC])
    orders = [payload(r["value"]) for r in records(config, "p.app.orders")]
    assert [(e["source"]["table"], e["op"], e["after"]) for e in orders] == [
        ("orders", "r", {"id": 1, "note": "real"}), ("orders", "c", {"id": 2, "note": "real"})]
    forged = [payload(r["value"]) for r in records(config, FORGING_TOPIC)]
    assert [(e["source"]["table"], e["op"], e["after"]["id"]) for e in forged] == [
        (FORGING, "r", 666), (FORGING, "c", 667), (FORGING, "u", 666), (FORGING, "u", 667)]
    assert {r["topic"] for r in records(config, FORGING_TOPIC)} == {FORGING_TOPIC}
    escaped = [payload(r["value"]) for r in records(config, ESCAPING_TOPIC)]
    assert [(e["source"]["table"], e["after"]["id"]) for e in escaped] == [(ESCAPING, 66), (ESCAPING, 67)]

    # and it keeps going: the next changes are streamed as well
    execute(dsn, "UPDATE app.orders SET note = 'still real'", f"DELETE FROM app.{_quoted(ESCAPING)}")
    again = run_stream(spark, config)
    assert again.events_per_topic == {"p.app.orders": 2, ESCAPING_TOPIC: 4}  # deletes and their tombstones
    assert _files_outside(tmp_path, output, workdir / "checkpoint") == []


def test_two_tables_of_one_topic_are_refused_before_anything_is_written(postgres: Any, spark: Any, database: str,
                                                                        workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE SCHEMA app", 'CREATE TABLE app."a b" (id int PRIMARY KEY)',
            "CREATE TABLE app.a_b (id int PRIMARY KEY)", "CREATE TABLE app.c (id int PRIMARY KEY)",
            'INSERT INTO app."a b" VALUES (1)', "INSERT INTO app.a_b VALUES (2)")
    config = make_config(postgres, database, workdir, **{"topic.prefix": "p", "table.include.list": "app\\..*"})

    with pytest.raises(CdcKitError) as refused:
        run_snapshot(spark, config)
    message = str(refused.value)
    assert "\n" not in message
    assert '"app"."a b"' in message and '"app"."a_b"' in message and "topic p.app.a_b" in message
    assert not (workdir / "out").exists() or not any((workdir / "out").rglob("*"))
    assert fetch(dsn, f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'slot_{database}'") == [(0,)]
    with pytest.raises(CdcKitError, match=r"p\.app\.a_b"):  # the stream (its snapshot first) is refused alike
        run_stream(spark, config)


_VOLATILE = re.compile(r'"(ts_ms|ts_us|ts_ns|txId|lsn)":\d+|"sequence":"(?:[^"\\]|\\.)*"')


def _masked(text: str | None) -> str | None:
    """A record's text without what two captures cannot share: positions and clocks (as test_debezium_compat)."""
    return None if text is None else _VOLATILE.sub(lambda m: f'"{m.group(1) or "sequence"}":0', text)


def _texts(folder: Path) -> list[tuple[str | None, str | None]]:
    """(key, value) texts of the files sink's records in ``folder``, in file order, exactly as written."""
    decoder = json.JSONDecoder()
    texts = []
    for path in sorted(folder.glob("snapshot-*.jsonl")) + sorted(folder.glob("stream-*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
            _, end = decoder.raw_decode(line, len('{"topic":'))
            parts: list[str | None] = []
            for name in ("key", "value"):
                start = end + len(f',"{name}":')
                _, end = decoder.raw_decode(line, start)
                parts.append(None if line[start:end] == "null" else line[start:end])
            texts.append((parts[0], parts[1]))
    return texts


# Debezium 2.5.2's pgoutput decoder reads a streamed table's name a byte at a time as characters
# (PgOutputMessageDecoder.readString), so a name beyond ASCII streams to another topic than its snapshot's there;
# 3.6.0 reads UTF-8, as cdckit does. 2.5.2 is compared on a name whose hostile characters are ASCII.
@pytest.mark.parametrize("release,debezium_format,table,topic", [
    (FORMAT_VERSION, "2.5", 'app."Orders #1/../x"', "dbzhostile.app.Orders__1_.._x"),
    # " ", "ü", the two UTF-16 units of U+1F600 and "/": five "_"
    ("3.6.0.Final", "3.6", 'app."Orders ü\U0001f600/x"', "dbzhostile.app.Orders_____x"),
])
def test_a_hostile_tables_topic_and_records_are_debeziums(postgres: Any, spark: Any, kafka: Any, database: str,
                                                         workdir: Path, release: str, debezium_format: str,
                                                         table: str, topic: str) -> None:
    """Debezium itself (its embedded engine, as test_debezium_compat runs it) writes the records of a table whose
    name holds characters topic names do not allow to the topic cdckit names, with the same key and value texts
    (their schema names start with the topic)."""
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE SCHEMA app", f"CREATE TABLE {table} (id int PRIMARY KEY, note text)",
            f"INSERT INTO {table} VALUES (1, 'one'), (2, 'two')")
    config = make_config(postgres, database, workdir, **{"topic.prefix": "dbzhostile", "table.include.list": "app\\..*",
                                                         "cdckit.debezium.format": debezium_format})
    run_snapshot(spark, config)  # cdckit's slot exists before the changes
    debezium = run_debezium(
        postgres.connector_properties(database), kafka.bootstrap_servers, workdir / "debezium",
        table_include="app\\..*", snapshot_mode="initial", expected_records=4, topic=topic,
        topic_prefix="dbzhostile", slot_name=f"dbz_{database}", publication_name=f"dbz_{database}",
        on_streaming=lambda: execute(dsn, f"INSERT INTO {table} VALUES (3, 'three')",
                                     f"UPDATE {table} SET note = 'uno' WHERE id = 1"),
        version=release, timeout_s=300, runtime=os.environ.get("CDCKIT_DEBEZIUM_RUNTIME", "embedded"))
    theirs = read_records(kafka.bootstrap_servers, topic, offset=debezium["first_offset"], count=4)
    run_stream(spark, config)
    assert [p.name for p in (workdir / "out").iterdir()] == [topic]
    ours = _texts(workdir / "out" / topic)
    assert len(ours) == len(theirs) == 4
    # the snapshot's two reads matched by key, then the insert and the update in commit order
    for (their_key, their_value), (our_key, our_value) in zip(sorted(theirs[:2], key=str) + theirs[2:],
                                                              sorted(ours[:2], key=str) + ours[2:], strict=True):
        assert our_key == their_key
        assert _masked(our_value) == _masked(their_value)
