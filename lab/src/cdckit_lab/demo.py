"""``cdckit demo``: an embedded PostgreSQL, a snapshot, some changes, the stream, and what came out.

The ``cdckit`` command finds it through the ``cdckit.commands`` entry point this distribution registers
(``COMMAND``)."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cdckit.config import Config, validate
from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit.pipelines.dispatch import job_observer, run_snapshot, run_stream
from cdckit.spark.session import get_spark
from cdckit.spark.sinks import read_records
from cdckit_lab.embedded_postgres import EmbeddedPostgres
from cdckit_lab.inventory import CHANGES_SQL, apply_changes, create_inventory

DEMO_DB = "shop"
EXIT_QUALITY_FAILED = 1  # as ``cdckit quality``


class DemoCommand:
    """``cdckit demo`` (the ``cdckit.commands`` entry point)."""

    help = "run the embedded end-to-end demo"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--workdir", type=Path, default=Path(".cdckit-demo"), help="where the demo keeps its files")
        parser.add_argument("--quality-report", type=Path, help="also run the quality suites (with reconciliation) on "
                            "the demo's output and write their report to this folder")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        result = run_demo(args.workdir, console, quality_report=args.quality_report)
        quality_report = result.get("quality")
        return EXIT_QUALITY_FAILED if quality_report is not None and not quality_report.success else 0


COMMAND = DemoCommand()


def demo_config(pg: EmbeddedPostgres, workdir: Path) -> Config:
    return validate({
        "name": "cdckit-demo",
        "connector.class": POSTGRES_CONNECTOR,
        **pg.connector_properties(DEMO_DB),
        "topic.prefix": "dbserver1",
        "table.include.list": "inventory\\..*",
        "slot.name": "cdckit_demo",
        "publication.name": "cdckit_demo",
        "publication.autocreate.mode": "filtered",
        "cdckit.output.path": str(workdir / "output"),
        "cdckit.checkpoint.location": str(workdir / "checkpoint"),
    })


def run_demo(workdir: Path, console: Console | None = None, quality_report: Path | None = None) -> dict[str, Any]:
    console = console or Console()
    started = time.monotonic()
    workdir = workdir.resolve()
    for stale in ("output", "checkpoint", "postgres"):
        shutil.rmtree(workdir / stale, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    console.rule("[bold]cdckit demo")
    pg = EmbeddedPostgres(workdir / "postgres")
    with console.status("starting an embedded PostgreSQL (wal_level=logical)"):
        pg.start()
    try:
        console.print(f"PostgreSQL on {pg.host}:{pg.port}, database [bold]{DEMO_DB}[/]")
        pg.create_database(DEMO_DB)
        create_inventory(pg.dsn(DEMO_DB))
        console.print("created inventory.customers, inventory.products, inventory.orders (orders -> customers, "
                      "products)")
        config = demo_config(pg, workdir)
        if quality_report is not None:
            from cdckit.quality.report import preload

            preload()  # Great Expectations imported while Spark starts
        with console.status("starting Spark"):
            spark = get_spark()
        reports: list[dict[str, Any]] = []  # the metrics documents the job publishes (instead of its JSON lines)
        observer = job_observer(config, reports.append)
        with console.status("snapshot: slot with exported snapshot, tables read in parallel"):
            try:
                snapshot = run_snapshot(spark, config, observer=observer)
            finally:
                observer.close()
        console.print(f"snapshot: {snapshot.rows} rows from {len(snapshot.tables)} tables in {snapshot.seconds:.1f}s, "
                      f"slot [bold]{snapshot.slot_name}[/] consistent point {snapshot.consistent_point}")
        applied = apply_changes(pg.dsn(DEMO_DB))
        console.print(f"applied {applied} transactions: inserts, updates (one changes a primary key), deletes")
        for statement in CHANGES_SQL:
            console.print(f"  [dim]{statement}[/]")
        with console.status("stream: reading the slot until caught up (trigger available-now)"):
            stream = run_stream(spark, config, on_metrics=reports.append)
        console.print(f"stream: {stream.events} records in {stream.batches} micro-batch(es), last offset "
                      f"{stream.last_offset}, slot confirmed_flush_lsn {stream.confirmed_flush_lsn}")
        _print_metrics(console, reports[-1] if reports else {})
        _print_topics(console, snapshot.rows_per_topic, stream.events_per_topic)
        examples = _examples(config.str("cdckit.output.path"), sorted(set(snapshot.rows_per_topic)
                                                                      | set(stream.events_per_topic)))
        for kind, record in examples.items():
            console.rule(f"one {kind} record (topic {record['topic']}; value schema omitted here, kept in the files)")
            shown = {"key": _payload(record["key"]), "value": _payload(record["value"])}
            console.print_json(json.dumps(shown))
        result: dict[str, Any] = {"snapshot": snapshot, "stream": stream, "examples": examples}
        if quality_report is not None:
            result["quality"] = _quality(spark, config, quality_report, console)
        elapsed = time.monotonic() - started
        console.rule()
        console.print(f"events are in {config.str('cdckit.output.path')}/<topic>/*.jsonl; finished in {elapsed:.1f}s")
        return {**result, "seconds": elapsed}
    finally:
        with console.status("stopping PostgreSQL"):
            pg.stop()


def _print_metrics(console: Console, document: dict[str, Any]) -> None:
    """Debezium's streaming metrics as the job last published them (``cdckit.metrics.port`` serves them live)."""
    for database, values in (document.get("streaming") or {}).items():
        console.print(f"metrics ({database}): MilliSecondsBehindSource {values['MilliSecondsBehindSource']}, "
                      f"TotalNumberOfEventsSeen {values['TotalNumberOfEventsSeen']} (create "
                      f"{values['TotalNumberOfCreateEventsSeen']}, update {values['TotalNumberOfUpdateEventsSeen']}, "
                      f"delete {values['TotalNumberOfDeleteEventsSeen']}), NumberOfCommittedTransactions "
                      f"{values['NumberOfCommittedTransactions']}, slot retained WAL "
                      f"{values.get('SlotRetainedWalBytes', 'unknown')} bytes; `cdckit status` shows them too",
                      highlight=False)


def _quality(spark: Any, config: Config, folder: Path, console: Console) -> Any:
    """The quality suites on the demo's output, reconciled with the still running source."""
    from cdckit.quality import check_records
    from cdckit.quality.records import read_files
    from cdckit.quality.report import print_quality

    console.rule("quality: envelopes, type mappings, reconciliation with the source tables")
    with console.status("running the Great Expectations suites"):
        report = check_records(read_files(spark, config.str("cdckit.output.path")),
                               config.as_properties(include_secrets=True), folder, reconcile=True)
    print_quality(console, report, folder)
    return report


def _payload(document: Any) -> Any:
    if isinstance(document, dict) and "payload" in document and "schema" in document:
        return document["payload"]
    return document


def _print_topics(console: Console, snapshot: dict[str, int], stream: dict[str, int]) -> None:
    table = Table(title="records per topic")
    table.add_column("topic")
    table.add_column("snapshot", justify="right")
    table.add_column("stream", justify="right")
    for topic in sorted(set(snapshot) | set(stream)):
        table.add_row(topic, str(snapshot.get(topic, 0)), str(stream.get(topic, 0)))
    console.print(table)


def _examples(output: str, topics: list[str]) -> dict[str, dict[str, Any]]:
    """The first record of each kind: read (r), create (c), update (u), delete (d), tombstone."""
    wanted = {"r": "read (snapshot)", "c": "create", "u": "update", "d": "delete", None: "tombstone"}
    found: dict[str, dict[str, Any]] = {}
    for topic in topics:
        for record in read_records(output, topic):
            value = record["value"]
            op = _payload(value)["op"] if value is not None else None
            if op in wanted and wanted[op] not in found:
                found[wanted[op]] = record
    return {label: found[label] for label in wanted.values() if label in found}
