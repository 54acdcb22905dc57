"""A corpus of bad configurations and inputs, each run through the command line as a user would: one clear
message naming the problem, exit status 2, no traceback (unless --debug), no secret, nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config

from cdckit.cli import main

pytestmark = [pytest.mark.postgres]
SECRET = "pw-Corpus-7f3a"
SQLSERVER = {"connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
             "database.hostname": "sqlserver.invalid", "database.user": "cdckit", "topic.prefix": "s"}

# name -> (changes to a valid PostgreSQL configuration (None removes a key), what the message must say)
CONFIG_CASES: dict[str, tuple[dict[str, str | None], str]] = {
    "unknown key": ({"database.hostnme": "x"}, "unknown property database.hostnme; did you mean database.hostname?"),
    "not a number": ({"max.batch.size": "lots"}, "max.batch.size='lots' is not a whole number"),
    "not a boolean": ({"tombstones.on.delete": "maybe"}, "tombstones.on.delete='maybe' is not a boolean"),
    "unknown choice": ({"decimal.handling.mode": "exact"}, "decimal.handling.mode='exact' is not one of"),
    "below minimum": ({"cdckit.snapshot.chunk.rows": "0"}, "cdckit.snapshot.chunk.rows=0 is below the minimum 1"),
    "include and exclude": ({"table.exclude.list": "public\\.b"},
                            "table.include.list and table.exclude.list are mutually exclusive"),
    "bad regular expression": ({"table.include.list": "public.(orders"}, "is not a valid regular expression"),
    "missing host": ({"database.hostname": None}, "database.hostname is required"),
    "missing topic prefix": ({"topic.prefix": None}, "topic.prefix is required"),
    "missing database": ({"database.dbname": None}, "database.dbname is required"),
    "bad slot name": ({"slot.name": "Bad-Slot"}, "slot.name='Bad-Slot' may only contain lower-case letters"),
    "unknown skipped operation": ({"skipped.operations": "x"}, "skipped.operations entry 'x' is not one of"),
    "environment variable not set": ({"database.password": "${env:CDCKIT_CORPUS_UNSET}"},
                                     "refers to environment variable CDCKIT_CORPUS_UNSET, which is not set"),
    "kafka without servers": ({"cdckit.sink": "kafka"}, "kafka.bootstrap.servers is required for cdckit.sink=kafka"),
    "event hubs without namespace": ({"cdckit.sink": "eventhubs"}, "cdckit.eventhubs.namespace is required"),
    "delta with qlik": ({"cdckit.sink": "delta", "cdckit.message.format": "qlik"},
                        "cdckit.sink=delta writes change rows from Debezium envelopes"),
    "the former lake sink": ({"cdckit.sink": "lake"}, "were replaced by cdckit.sink=delta"),
    "unknown connector": ({"connector.class": "io.debezium.connector.mysql.MySqlConnector"},
                          "connector.class='io.debezium.connector.mysql.MySqlConnector' is not one of"),
    "bad message key columns": ({"message.key.columns": "public.orders"}, "message.key.columns"),
    "bad sink": ({"cdckit.sink": "s3"}, "cdckit.sink='s3' is not one of"),
    "bad trigger": ({"cdckit.trigger": "once"}, "cdckit.trigger='once' is not one of"),
    "override not a select": ({"snapshot.select.statement.overrides.public.orders": "DELETE FROM public.orders"},
                              "SELECT"),
}
# name -> (a raw configuration, what the message must say)
RAW_CASES: dict[str, tuple[dict[str, str], str]] = {
    "sql server without databases": ({**SQLSERVER, "database.password": SECRET},
                                     "database.names is required for SQL Server"),
}


def _valid(postgres: Any, database: str, workdir: Path) -> dict[str, str]:
    properties = make_config(postgres, database, workdir).as_properties(include_secrets=True)
    return {**properties, "database.password": SECRET, "table.include.list": "public\\.orders"}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, " ".join((captured.out + captured.err).split())


def _check(status: int, output: str, expected: str, workdir: Path) -> None:
    assert status == 2, output
    assert expected in output, output
    assert "Traceback" not in output and SECRET not in output
    assert output.count("cdckit: error:") == 1
    assert not (workdir / "out").exists() and not (workdir / "checkpoint" / "stream").exists()


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_configuration(case: str, postgres: Any, database: str, workdir: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    changes, expected = CONFIG_CASES[case]
    properties: dict[str, Any] = _valid(postgres, database, workdir)
    for key, value in changes.items():
        if value is None:
            properties.pop(key, None)
        else:
            properties[key] = value
    path = workdir / "connector.json"
    path.write_text(json.dumps({"name": "corpus", "config": properties}))
    _check(*_run(capsys, "snapshot", str(path)), expected, workdir)


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_bad_raw_configuration(case: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    properties, expected = RAW_CASES[case]
    path = workdir / "connector.json"
    path.write_text(json.dumps(properties))
    _check(*_run(capsys, "snapshot", str(path)), expected, workdir)


FILE_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "file missing": (lambda w: w / "nope.json", "does not exist; pass the path of a connector JSON"),
    "invalid json": (lambda w: _text(w / "c.json", '{"config": {"a": 1,}}'), "is not valid JSON (line 1"),
    "json not an object": (lambda w: _text(w / "c.json", "[1, 2]"), "must hold a JSON object"),
    "config not an object": (lambda w: _text(w / "c.json", '{"name": "x", "config": [1]}'),
                             '"config" must be a JSON object of properties'),
}


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_bad_configuration_file(case: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, expected = FILE_CASES[case]
    _check(*_run(capsys, "stream", str(make(workdir))), expected, workdir)


SOURCE_CASES: dict[str, tuple[list[str], dict[str, str], str]] = {
    # name -> (SQL run first, configuration changes, what the message must say)
    "table does not exist": ([], {"table.include.list": "public\\.nothing_here"},
                             "no table in database"),
    "partitioned table not published via its root": (
        ["CREATE TABLE public.orders (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)",
         "CREATE PUBLICATION not_via_root FOR TABLE public.orders"],
        {"publication.name": "not_via_root", "publication.autocreate.mode": "disabled"},
        "publish_via_partition_root = true"),
    "wrong password": ([], {"database.password": SECRET + "-wrong"}, "password authentication failed"),
    "database missing": ([], {"database.dbname": "no_such_db"}, "no_such_db"),
}


@pytest.mark.parametrize("case", sorted(SOURCE_CASES))
def test_bad_source(case: str, postgres: Any, database: str, workdir: Path,
                    capsys: pytest.CaptureFixture[str]) -> None:
    statements, changes, expected = SOURCE_CASES[case]
    if statements:
        execute(postgres.dsn(database), *statements)
    properties = {**_valid(postgres, database, workdir), **changes}
    if case != "wrong password":
        properties["database.password"] = postgres.connector_properties(database)["database.password"]
    path = workdir / "connector.json"
    path.write_text(json.dumps(properties))
    status, output = _run(capsys, "snapshot", str(path))
    _check(status, output, expected, workdir)


def test_debug_shows_the_traceback(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, output = _run(capsys, "--debug", "stream", str(workdir / "nope.json"))
    assert status == 2 and "Traceback" in output and "does not exist" in output


def test_the_corpus_is_large_enough() -> None:
    assert len(CONFIG_CASES) + len(RAW_CASES) + len(FILE_CASES) + len(SOURCE_CASES) >= 30
