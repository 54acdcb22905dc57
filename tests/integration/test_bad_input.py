"""Bad input gets one clear message naming the problem and the fix: no traceback, no secret, exit status 2."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config

from cdckit.cli import main
from cdckit.dialect.postgres.catalog import discover_tables
from cdckit.dialect.postgres.connection import connect
from cdckit.errors import SourcePreconditionError
from cdckit.formats.debezium import envelope
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.pipelines.dispatch import prepare_source
from cdckit_lab.embedded_postgres import EmbeddedPostgres

pytestmark = [pytest.mark.postgres]


def _write_config(workdir: Path, properties: dict[str, str]) -> Path:
    path = workdir / "connector.json"
    path.write_text(json.dumps({"name": "bad", "config": properties}))
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, " ".join((captured.out + captured.err).split())


def _properties(postgres: Any, database: str, workdir: Path, **overrides: str) -> dict[str, str]:
    return make_config(postgres, database, workdir, **overrides).as_properties(include_secrets=True)


def test_table_without_primary_key_is_captured_with_a_null_key_and_a_replica_identity_warning(
        postgres: Any, database: str, workdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    # As Debezium: captured, events without a key. While it is in a publication, PostgreSQL refuses UPDATE and
    # DELETE on such a table unless its replica identity is FULL, so the user is told how to fix that.
    execute(postgres.dsn(database), "CREATE TABLE public.events (happened_at timestamptz, what text)",
            "CREATE TABLE public.audited (happened_at timestamptz, what text)",
            "ALTER TABLE public.audited REPLICA IDENTITY FULL")
    options = _properties(postgres, database, workdir)
    with closing(connect(options)) as conn, caplog.at_level(logging.INFO, logger="cdckit"):
        tables = {table.name: table for table in discover_tables(conn, options)}
    assert tables["events"].key_columns == tables["audited"].key_columns == ()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "public.events has no primary key and REPLICA IDENTITY DEFAULT" in warnings[0]
    assert "ALTER TABLE public.events REPLICA IDENTITY FULL" in warnings[0]
    keyed = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "audited" in r.getMessage()]
    assert keyed == ["table public.audited has no primary key: its events have a null key (name key columns "
                     "with message.key.columns)"]
    assert TableFormat(tables["events"], format_settings(options)).key_json({"what": "x"}) is None


@pytest.mark.spark
def test_a_snapshot_warns_of_a_table_without_a_key_once(postgres: Any, database: str, workdir: Path) -> None:
    """The job's driver tells; the Spark worker planning the snapshot reads the same catalog and says nothing."""
    execute(postgres.dsn(database), "CREATE TABLE public.events (happened_at timestamptz, what text)",
            "INSERT INTO public.events VALUES (now(), 'x')")
    config = _write_config(workdir, _properties(postgres, database, workdir))
    done = subprocess.run([sys.executable, "-m", "cdckit", "snapshot", str(config)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "snapshot completed: 1 rows" in done.stdout
    assert done.stderr.count("public.events has no primary key") == 1, done.stderr


def test_missing_table_is_named(postgres: Any, database: str, workdir: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    execute(postgres.dsn(database), "CREATE TABLE public.present (id integer PRIMARY KEY)")
    properties = _properties(postgres, database, workdir, **{"table.include.list": "public.present,public.absent"})
    status, output = _run(capsys, "stream", str(_write_config(workdir, properties)))
    assert status == 2
    assert "table.include.list entry 'public.absent' matches no table" in output


def test_wrong_password_is_reported_without_the_password(postgres: Any, database: str, workdir: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    properties = _properties(postgres, database, workdir, **{"database.password": "not-the-password-42"})
    status, output = _run(capsys, "snapshot", str(_write_config(workdir, properties)))
    assert status == 2
    assert "refused user 'postgres': password authentication failed" in output
    assert "check database.user and database.password" in output
    assert "not-the-password-42" not in output


def test_unreachable_server_names_host_and_port(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cdckit_lab.embedded_postgres import free_port

    port = free_port()
    properties = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                  "database.hostname": "127.0.0.1", "database.port": str(port), "database.user": "u",
                  "database.password": "p", "database.dbname": "d", "topic.prefix": "x"}
    status, output = _run(capsys, "snapshot", str(_write_config(workdir, properties)))
    assert status == 2
    assert f"cannot reach a database server at 127.0.0.1:{port}" in output
    assert "check database.hostname and database.port" in output


def test_wal_level_not_logical_says_how_to_enable_it(tmp_path: Path, workdir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    server = EmbeddedPostgres(tmp_path / "replica-level", wal_level="replica").start()
    try:
        execute(server.dsn("postgres"), "CREATE TABLE public.t (id integer PRIMARY KEY)")
        status, output = _run(capsys, "snapshot",
                              str(_write_config(workdir, _properties(server, "postgres", workdir))))
    finally:
        server.destroy()
    assert status == 2
    assert "wal_level is 'replica'" in output
    assert "ALTER SYSTEM SET wal_level = logical" in output


def test_unknown_and_invalid_properties_are_reported_together(workdir: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    properties = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                  "database.hostnme": "db", "database.port": "five", "database.user": "u",
                  "database.password": "hunter2-secret", "database.dbname": "d", "snapshot.mode": "sometimes"}
    status, output = _run(capsys, "validate", str(_write_config(workdir, properties)))
    assert status == 2
    assert "unknown property database.hostnme; did you mean database.hostname?" in output
    assert "database.port='five' is not a whole number" in output
    assert "snapshot.mode='sometimes' is not one of: initial, initial_only, never, no_data" in output
    assert "database.hostname is required" in output and "topic.prefix is required" in output
    assert "5 problems" in output
    assert "hunter2-secret" not in output


@pytest.mark.spark
def test_column_of_a_type_debezium_drops_is_left_out_with_its_warning(
        postgres: Any, spark: Any, database: str, workdir: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # ``spark``: the suite's session (with the Kafka connector) is made first, and the CLI's run reuses it.
    monkeypatch.setattr(envelope, "_DROPPED_WARNED", set())  # warned once per process
    execute(postgres.dsn(database), "CREATE TABLE public.docs (id integer PRIMARY KEY, body tsvector)",
            "INSERT INTO public.docs VALUES (1, 'a fat cat')")
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        status, _ = _run(capsys, "snapshot", str(_write_config(workdir, _properties(postgres, database, workdir))))
    assert status == 0
    assert ("No converter found for column public.docs.body of type tsvector. The column will not be part of "
            "change events for that table.") in caplog.text
    value = json.loads((workdir / "out" / "it.public.docs" / "snapshot-00000.jsonl").read_text())["value"]
    assert value["payload"]["after"] == {"id": 1}


@pytest.mark.spark
def test_failure_inside_a_spark_task_is_reported_as_one_clear_line(postgres: Any, spark: Any, database: str,
                                                                   workdir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.places (id integer PRIMARY KEY)")
    config_file = _write_config(workdir, _properties(postgres, database, workdir))
    assert _run(capsys, "snapshot", str(config_file))[0] == 0
    # A value Debezium's default decimal mode cannot write arrives while streaming: the executor decoding it must
    # fail loudly, as Debezium stops on it, and say what to do.
    execute(dsn, "ALTER TABLE public.places ADD COLUMN amount numeric", "INSERT INTO public.places VALUES (1, 'NaN')")
    status, output = _run(capsys, "stream", str(config_file))
    assert status == 2
    assert "amount" in output and "NaN" in output and "decimal.handling.mode" in output
    assert "Traceback" not in output and "JVM stacktrace" not in output


@pytest.mark.spark
def test_spark_redacts_every_kind_of_secret_option(spark: Any) -> None:
    """Spark shows data source and Kafka sink options in plans, the UI and event logs after redacting them."""
    jvm = spark.sparkContext._jvm
    pairs = [("database.password", "pw-1"), ("kafka.sasl.jaas.config", "jaas-2"),
             ("cdckit.eventhubs.connection.string", "eh-3"), ("kafka.ssl.truststore.password", "ts-4"),
             ("database.hostname", "db.example.com")]
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(
        [jvm.scala.Tuple2(key, value) for key, value in pairs]).toSeq()
    redacted = jvm.org.apache.spark.util.Utils.redact(spark.sparkContext._jsc.sc().conf(), seq)
    shown = dict((redacted.apply(i)._1(), redacted.apply(i)._2()) for i in range(redacted.size()))
    assert shown["database.hostname"] == "db.example.com"
    assert all(shown[key] != value for key, value in pairs if key != "database.hostname")


def test_partitioned_table_in_a_publication_not_via_its_root_is_refused_with_both_fixes(
        postgres: Any, database: str, workdir: Path) -> None:
    execute(postgres.dsn(database),
            "CREATE TABLE public.metrics (id integer, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)",
            "CREATE TABLE public.metrics_2024 PARTITION OF public.metrics FOR VALUES FROM ('2024-01-01') TO "
            "('2025-01-01')", f"CREATE PUBLICATION pub_{database} FOR TABLE public.metrics")
    config = make_config(postgres, database, workdir, **{"table.include.list": "public.metrics",
                                                          "publication.autocreate.mode": "disabled"})
    with pytest.raises(SourcePreconditionError) as refused:
        prepare_source(config)
    message = str(refused.value)
    assert "public.metrics is a partitioned table" in message
    assert f"ALTER PUBLICATION pub_{database} SET (publish_via_partition_root = true)" in message
    assert "capture the partitions instead" in message
    # With the publication cdckit sets (filtered), the root is published via itself and captured.
    filtered = make_config(postgres, database, workdir, **{"table.include.list": "public.metrics"})
    _, tables = prepare_source(filtered)
    assert [(t.name, t.partitioned) for t in tables] == [("metrics", True)]
    assert fetch(postgres.dsn(database), f"SELECT pubviaroot FROM pg_publication WHERE pubname = 'pub_{database}'"
                 ) == [(True,)]
