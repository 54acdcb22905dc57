"""The ``cdckit`` command: demo, snapshot, stream, schema-evolution, quality, validate, properties.

Examples::

    cdckit demo
    cdckit snapshot connector.json --set snapshot.fetch.size=5000
    cdckit stream connector.properties --set cdckit.trigger=processing-time
    cdckit quality connector.json --input cdckit-output --report quality-report
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rich.console import Console

from cdckit.config import Config, load_config
from cdckit.config.properties import PROPERTIES
from cdckit.config.secrets import redact, redact_logs
from cdckit.errors import CdcKitError, wrapped_message

if TYPE_CHECKING:
    from cdckit.pipelines.streaming import SnapshotReport

EXIT_USER_ERROR = 2
EXIT_QUALITY_FAILED = 1
COMMAND_GROUP = "cdckit.commands"
OFF_TERMINAL_WIDTH = 120


class MissingCommand(CdcKitError):
    """A command of a distribution that is not installed."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdckit", description="Change data capture as Spark jobs, "
                                     "emitting Debezium-compatible change events.")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error too")
    parser.add_argument("--verbose", action="store_true", help="show everything: Spark's warnings (also those "
                        "known to be harmless), cdckit's debug log and a JSON line of the metrics per batch "
                        "(cdckit.metrics.log=true)")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("snapshot", "take the initial snapshot"),
                       ("stream", "stream changes (snapshotting first when snapshot.mode asks)"),
                       ("schema-evolution", "SQL Server: rotate capture instances of tables whose structure "
                                            "changed"),
                       ("validate", "check a configuration, the source, the sink and the checkpoint as a job "
                                    "would before it starts, and print the settings with secrets hidden"),
                       ("status", "show a job's position, lag, last batch, snapshot progress and the source's "
                                  "health (slot or capture job), from its checkpoint and the source")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("config", type=_config_location, nargs="?",
                         help="connector JSON or .properties file (a path or an s3:// URI)")
        sub.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override one property (repeatable)")
        if name == "status":
            sub.add_argument("--json", action="store_true", help="print the status as one JSON document")
        if name == "validate":
            sub.add_argument("--offline", action="store_true", help="check the configuration and the local paths "
                             "only: connect to nothing (no source, Kafka or S3)")
        if name == "schema-evolution":
            sub.add_argument("--plan", action="store_true", help="print the T-SQL for a DBA instead of running it")
    quality = commands.add_parser("quality", help="check emitted records with the data-quality suites")
    quality.add_argument("config", type=_config_location, nargs="?",
                         help="the connector configuration the records were produced with (handling modes; the "
                              "source for reconciliation)")
    quality.add_argument("--input", required=True, help="a files-sink folder, or a Kafka topic pattern (Java "
                         "regular expression; kafka.bootstrap.servers from the configuration or --set)")
    quality.add_argument("--report", type=Path, default=Path("quality-report"), help="report folder (Data Docs, "
                         "summary.md, summary.json)")
    quality.add_argument("--no-reconcile", action="store_true", help="skip the comparison with the source tables")
    quality.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override one property (repeatable)")
    commands.add_parser("properties", help="list every property with its default")
    for name, command in plugin_commands().items():
        if name not in commands.choices:
            command.add_arguments(commands.add_parser(name, help=command.help))
    if "demo" not in commands.choices:
        commands.add_parser("demo", help="run the embedded end-to-end demo (needs cdckit's lab: pip install ./lab)",
                            add_help=False)
    return parser


class Command(Protocol):
    """A ``cdckit`` subcommand another distribution provides (entry point group ``cdckit.commands``), as cdckit's
    lab provides ``cdckit demo``."""

    help: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, console: Console) -> int: ...


@functools.cache
def plugin_commands() -> dict[str, Command]:
    """The subcommands installed distributions register under the ``cdckit.commands`` entry point group."""
    found: dict[str, Command] = {}
    for entry in entry_points(group=COMMAND_GROUP):
        found.setdefault(entry.name, entry.load())
    return found


def _config_location(text: str) -> Path | str:
    """A configuration path, or an s3:// URI kept as text (a Path would fold its //)."""
    return text if text.startswith(("s3://", "s3a://")) else Path(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not (args.command == "demo" and "demo" not in plugin_commands()):  # the demo's own, refused below
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    redact_logs()  # the configuration's secrets never reach the log (cdckit.config.secrets)
    console = Console()
    if not console.is_terminal:  # a log file or a pipe: a line as long as it is, not cut at 80 columns; rules and
        # tables (the demo's) as wide as a usual terminal, unless COLUMNS says otherwise
        console = Console(soft_wrap=True, width=None if "COLUMNS" in os.environ else OFF_TERMINAL_WIDTH)
    try:
        return _dispatch(args, console)
    except CdcKitError as exc:
        if args.debug:
            console.print_exception()
        console.print(f"[red]cdckit: error:[/] {redact(str(exc))}", markup=True, highlight=False, soft_wrap=True)
        return EXIT_USER_ERROR
    except Exception as exc:  # a failure inside Spark carries cdckit's message in its text
        wrapped = explain_failure(exc)
        if wrapped is None:
            raise
        if args.debug:
            console.print_exception()
        console.print(f"[red]cdckit: error:[/] {redact(wrapped)}", markup=True, highlight=False, soft_wrap=True)
        return EXIT_USER_ERROR


def explain_failure(exc: BaseException) -> str | None:
    """The cdckit error message inside a Spark/Py4J exception, if there is one."""
    return wrapped_message(exc)


def _as_text(value: object) -> str:
    """A default as a configuration file writes it: ``true``, ``t,u``, ``2048``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _load(args: argparse.Namespace) -> Config:
    verbose = ["cdckit.metrics.log=true"] if args.verbose else []  # the JSON line of the metrics per batch
    return load_config(args.config, [*args.overrides, *verbose])


def snapshot_line(report: SnapshotReport) -> str:
    """A snapshot's summary, as ``cdckit snapshot`` and ``cdckit stream`` print it."""
    tables = f"{len(report.tables)} table{'' if len(report.tables) == 1 else 's'}"
    if report.status == "skipped":
        return f"snapshot already taken: {tables}, consistent point {report.consistent_point}"
    where = f"; slot {report.slot_name} at {report.consistent_point}" if report.slot_name else ""
    return f"snapshot {report.status}: {report.rows:,} rows from {tables} in {report.seconds:.1f}s{where}"


def _dispatch(args: argparse.Namespace, console: Console) -> int:
    if args.command == "properties":
        from rich.markup import escape

        for prop in PROPERTIES:
            default = "" if prop.default in (None, ()) else f" (default {_as_text(prop.default)})"
            console.print(f"[bold]{escape(prop.name)}[/]{escape(default)}: {escape(prop.doc)}", highlight=False)
        return 0
    plugins = plugin_commands()
    if args.command in plugins:
        return plugins[args.command].run(args, console)
    if args.command == "demo":
        raise MissingCommand("cdckit demo comes with cdckit's lab, which this installation does not have: from a "
                             "clone of the repository, run `make demo`, or `pip install ./lab` and then `cdckit demo`")
    if args.command == "quality":
        return _quality(args, console)
    config = _load(args)
    if args.command == "validate":
        return _validate(config, args.offline, console)
    if args.command == "schema-evolution":
        return _schema_evolution(config, args.plan, console)
    if args.command == "status":
        from cdckit.pipelines.dispatch import job_status
        from cdckit.pipelines.status import render

        status = job_status(config)
        if args.json:
            print(json.dumps(status, sort_keys=True, default=str))
        else:
            render(status, console)
        return 0
    if args.command == "snapshot" and config.str("snapshot.mode") == "never":
        from cdckit.errors import ConfigurationError

        raise ConfigurationError(["cdckit snapshot with snapshot.mode=never: that mode takes no snapshot at all; run "
                                  "`cdckit stream` to stream without one, or set snapshot.mode=initial (rows) or "
                                  "no_data (structures only) to take it"])
    from cdckit.pipelines.dispatch import require_ready, run_snapshot, run_stream
    from cdckit.spark.session import get_spark

    require_ready(config)  # fail fast, before starting Spark and before creating anything, when anything is missing
    from cdckit.pipelines.dispatch import claim_job, stopped_line

    # one job per slot and checkpoint: a second is refused before Spark starts (the owner file is read back once
    # Spark has started: the job's run confirms the claim)
    claim_job(config, args.command, confirm=False)
    sink = config.str("cdckit.sink")
    spark = get_spark(kafka=sink in ("kafka", "eventhubs"), delta=sink == "delta", quiet=not args.verbose)
    if args.command == "snapshot":
        # schema_only is Debezium's earlier name of no_data (the stream and SQL Server's snapshot read it so too)
        report = run_snapshot(spark, config, data=config.str("snapshot.mode") not in ("no_data", "schema_only"))
        if report.stopped_by:  # SIGTERM or SIGINT
            console.print(stopped_line(report), highlight=False, markup=False, soft_wrap=True)
            return 0
        _print_snapshot(console, report)
        return 0
    on_snapshot = functools.partial(_print_snapshot, console)  # as soon as it completed, before the batches
    if console.is_terminal:  # a live view of the metrics instead of a line per batch
        from cdckit.observe.live import LiveView

        with LiveView(console) as view:
            stream = run_stream(spark, config, on_metrics=view.update, on_snapshot=on_snapshot)
    else:
        from cdckit.observe.lines import BatchLines

        lines = BatchLines(lambda line: console.print(line, highlight=False, markup=False))
        stream = run_stream(spark, config, on_batch=lines.batch, on_metrics=lines.metrics, on_snapshot=on_snapshot)
    if stream.stopped_by:  # SIGTERM or SIGINT
        console.print(stopped_line(stream), highlight=False, markup=False, soft_wrap=True)
        return 0
    console.print(f"stream stopped after {stream.batches} batch(es), {stream.events:,} records; last offset "
                  f"{stream.last_offset}; slot confirmed_flush_lsn {stream.confirmed_flush_lsn}", highlight=False)
    return 0


def _print_snapshot(console: Console, report: SnapshotReport) -> None:
    console.print(snapshot_line(report), highlight=False, markup=False)
    if report.status != "skipped":
        for topic, count in report.rows_per_topic.items():
            console.print(f"  {topic}: {count:,}", highlight=False, markup=False)


def _quality(args: argparse.Namespace, console: Console) -> int:
    from cdckit.quality import check_no_transforms, check_records
    from cdckit.quality.records import QualityInputError, read_files, read_kafka
    from cdckit.quality.report import preload, print_quality
    from cdckit.spark.session import get_spark

    if args.config is not None:
        config = _load(args)
        options = config.as_properties(include_secrets=True)
        reconcile = not args.no_reconcile
    else:
        options = {}
        for item in args.overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise QualityInputError(f"--set {item!r} is not KEY=VALUE")
            options[key.strip()] = value.strip()
        reconcile = False
    check_no_transforms(options)
    from_files = Path(args.input).is_dir()
    if not from_files and not options.get("kafka.bootstrap.servers"):
        raise QualityInputError(f"--input {args.input!r} is not a folder; as a Kafka topic pattern it needs "
                                f"kafka.bootstrap.servers (in the configuration or --set)")
    preload()
    spark = get_spark(kafka=not from_files, quiet=not args.verbose)
    records = read_files(spark, args.input) if from_files else read_kafka(spark, args.input, options)
    report = check_records(records, options, args.report, reconcile=reconcile)
    print_quality(console, report, args.report)
    return 0 if report.success else EXIT_QUALITY_FAILED


def _validate(config: Config, offline: bool, console: Console) -> int:
    """The chosen connector's settings (every secret hidden: the rule of cdckit.config.secrets), then what a job
    checks before it starts, each on one line, and a verdict; exit 2 when anything is missing."""
    from cdckit.config.properties import BY_NAME
    from cdckit.pipelines.dispatch import check

    dialect = "sqlserver" if config.is_sqlserver else "postgres"
    at_default = 0
    for key, value in sorted(config.redacted().items()):
        prop = BY_NAME.get(key)
        if prop is not None and prop.only and prop.only != dialect:
            continue  # another connector's setting, at its default (a set one is refused when loading)
        if prop is not None and not prop.required:
            default = prop.default_for(config.str("connector.class")) if prop.default_for else prop.default
            if _as_text(config[key]) == _as_text(default) or (default is None and config[key] in ("", None)):
                at_default += 1
                continue
        console.print(f"{key}={value}", highlight=False, markup=False)
    console.print(f"(and {at_default} settings at their defaults: `cdckit properties` lists them)", highlight=False)
    checks = check(config, offline=offline)
    for item in checks:
        mark = "ok " if item.ok else "[red]FAIL[/]"
        console.print(f"{mark} {item.what}: ", markup=True, highlight=False, end="")
        console.print(redact(item.detail), markup=False, highlight=False)
    failed = [item for item in checks if not item.ok]
    where = "offline: the source, Kafka and S3 not contacted" if offline else "the source, sink and checkpoint checked"
    if failed:
        console.print(f"[red]invalid:[/] {len(failed)} problem{'s' if len(failed) > 1 else ''} above ({where}); a job "
                      f"would stop before creating anything", markup=True, highlight=False)
        return EXIT_USER_ERROR
    console.print(f"valid: a job would start ({where})", highlight=False)
    return 0


def _schema_evolution(config: Config, plan_only: bool, console: Console) -> int:
    if not config.is_sqlserver:
        console.print("PostgreSQL and YugabyteDB need no capture-instance rotation: the stream reads each table's "
                      "structure from the replication stream.", highlight=False)
        return 0
    from cdckit.pipelines.sqlserver import apply_schema_evolution, plan_schema_evolution

    rotations = plan_schema_evolution(config)
    if not rotations:
        console.print("every captured table matches its capture instance; nothing to do", highlight=False)
        return 0
    if plan_only:
        for rotation in rotations:
            print(rotation.tsql())
        return 0
    apply_schema_evolution(config, rotations)
    for rotation in rotations:
        done = "created" if rotation.action == "create" else "dropped"
        console.print(f"{done} capture instance {rotation.capture_instance} ({rotation.reason})", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
