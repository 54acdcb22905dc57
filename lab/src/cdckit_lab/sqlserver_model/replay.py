"""Run cdckit over the model with a schema script and a changes script, and check the output replays to the tables.

    python -m cdckit_lab.sqlserver_model.replay --schema schema.sql [data.sql ...] --changes changes.sql \\
        [--work DIR] [--database NAME]

Creates a model database, runs the schema scripts, enables CDC with cdckit's own sql/sqlserver scripts
(01_enable_cdc_database.sql, then 03_enable_cdc_table.sql for every table), takes cdckit's snapshot with the files
sink, runs the changes script, streams, and replays the topics per key (``c``/``r``/``u`` upsert the after image,
``d`` deletes, tombstones are skipped, Debezium's ``__debezium_unavailable_value`` in an update keeps the value the
key had). The replay is compared with the final tables as cdckit's snapshot reads them from the model (a second
snapshot into ``<work>/final``), so both sides carry cdckit's value conversions. Computed columns are left out of
the comparison: change tables hold NULL for them (Microsoft's cdc.<capture_instance>_CT page), so streamed events
carry NULL where the snapshot read the value, as Debezium's do (docs/decisions/0036). Prints a short report and exits
1 on any difference, 2 when a script is refused or a job stops.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _sqlite as store
from ._admin import SqlServerModel
from ._computed import computed_names
from ._script import ScriptError, ScriptRunner, edit_variables

UNAVAILABLE = "__debezium_unavailable_value"
# the placeholder in a bytes column: its UTF-8 bytes, base64 in JSON (Debezium's unavailable.value.placeholder)
UNAVAILABLE_VALUES = {UNAVAILABLE, base64.b64encode(UNAVAILABLE.encode()).decode()}
SCRIPTS = Path(__file__).resolve().parents[4] / "sql" / "sqlserver"


@dataclass
class ReplayReport:
    tables: list[str] = field(default_factory=list)
    rows_snapshotted: int = 0
    changes_applied: int = 0
    records_streamed: int = 0
    computed_columns: list[str] = field(default_factory=list)
    not_modelled: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.differences

    def lines(self) -> list[str]:
        return [
            f"tables: {len(self.tables)}",
            f"rows snapshotted: {self.rows_snapshotted}",
            f"changes applied: {self.changes_applied}",
            f"records streamed: {self.records_streamed}",
            f"computed columns (NULL in change tables, not compared): {', '.join(self.computed_columns) or 'none'}",
            f"not modelled: {'; '.join(self.not_modelled) or 'nothing'}",
            "replay: equal" if self.equal else f"replay: {len(self.differences)} differences",
            *[f"  {difference}" for difference in self.differences[:50]],
        ]


def enable_cdc(runner: ScriptRunner, database: str, scripts: Path = SCRIPTS) -> list[tuple[str, str]]:
    """CDC on the database and on every user table, with the kit's scripts 01 and 03; returns (schema, table)."""
    runner.run(edit_variables((scripts / "01_enable_cdc_database.sql").read_text(encoding="utf-8"),
                              {"database": database}), "01_enable_cdc_database.sql")
    tables = user_tables(runner.model, database)
    template = (scripts / "03_enable_cdc_table.sql").read_text(encoding="utf-8")
    for schema, table in tables:
        runner.run(edit_variables(template, {"database": database, "schema": schema, "table": table,
                                             "capture_instance": None}), "03_enable_cdc_table.sql")
    return tables


def user_tables(model: SqlServerModel, database: str) -> list[tuple[str, str]]:
    conn = store.open_sqlite(model.path)
    try:
        return [(str(s), str(t)) for s, t in conn.execute(
            "SELECT s.name, t.name FROM tables t JOIN schemas s ON s.db = t.db AND s.schema_id = t.schema_id "
            "WHERE t.db = ? AND t.is_ms_shipped = 0 ORDER BY s.name, t.name", (database,))]
    finally:
        conn.close()


def _config(model: SqlServerModel, database: str, work: Path, name: str) -> Any:
    from cdckit.config import validate

    return validate({
        "connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
        "database.hostname": "model.invalid", "database.port": "1433", "database.user": "cdckit",
        "database.password": "replay-not-a-secret", "database.names": database, "topic.prefix": "replay",
        "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
        "cdckit.sqlserver.model.path": str(model.path),
        "cdckit.output.path": str(work / name), "cdckit.checkpoint.location": str(work / f"{name}-checkpoint"),
    })


def replayed(output: Path, topic: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A topic's records applied per key, as a consumer rebuilds the table."""
    from cdckit.spark.sinks import read_records

    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in read_records(str(output), topic):
        key = tuple(_payload(record["key"]).values())
        event = _payload(record["value"])
        if event is None:
            continue
        if event["op"] == "d":
            state.pop(key, None)
            continue
        after = dict(event["after"])
        previous = state.get(key, {})
        for column, found in after.items():
            if isinstance(found, str) and found in UNAVAILABLE_VALUES:
                after[column] = previous.get(column)
        state[key] = after
    return state


def _payload(document: Any) -> Any:
    return document["payload"] if isinstance(document, dict) and "payload" in document else document


def run(schema_scripts: Sequence[Path], changes_script: Path, work: Path, *, database: str = "testDB",
        spark: Any = None) -> ReplayReport:
    """The whole check; raises ScriptError when a script is refused, and what the jobs raise when they stop."""
    from cdckit.pipelines.dispatch import run_snapshot, run_stream
    from cdckit.pipelines.sqlserver import plan_schema_evolution

    work.mkdir(parents=True, exist_ok=True)
    path = work / "sqlserver.sqlite"
    if path.exists():
        raise ValueError(f"{path} exists: give an empty --work folder")
    model = SqlServerModel(path)
    model.create_database(database)
    runner = ScriptRunner(model, database)
    for script in schema_scripts:
        runner.run_file(script)
    tables = enable_cdc(runner, database)
    if spark is None:
        from cdckit.spark.session import get_spark

        spark = get_spark({"spark.sql.shuffle.partitions": "2"})
    report = ReplayReport(tables=[f"{s}.{t}" for s, t in tables])
    config = _config(model, database, work, "out")
    snapshot = run_snapshot(spark, config)
    tables_prefix = f"replay.{database}."  # the tables' topics, not the schema-change topic
    report.rows_snapshotted = sum(n for topic, n in snapshot.rows_per_topic.items() if topic.startswith(tables_prefix))
    report.differences += [f"schema drift right after CDC was enabled: {rotation.reason}"
                           for rotation in plan_schema_evolution(config)]
    report.differences += [f"{t}: not in cdckit's snapshot" for t in sorted(set(report.tables) - {
        ".".join(name.split(".")[-2:]) for name in snapshot.tables})]
    applied = runner.report.rows_changed
    runner.run_file(changes_script)
    report.changes_applied = runner.report.rows_changed - applied
    streamed = run_stream(spark, config).events_per_topic
    report.records_streamed = sum(n for topic, n in streamed.items() if topic.startswith(tables_prefix))
    run_snapshot(spark, _config(model, database, work, "final"))
    report.not_modelled = list(runner.report.not_modelled)
    _compare(model, database, tables, work, report)
    return report


def _compare(model: SqlServerModel, database: str, tables: Sequence[tuple[str, str]], work: Path,
             report: ReplayReport) -> None:
    conn = store.open_sqlite(model.path)
    try:
        computed = {}
        for schema, table in tables:
            info = store.table_info(conn, database, schema, table)
            folded = computed_names(conn, database, info.object_id)
            computed[(schema, table)] = [c.name for _, c in info.columns if c.name.casefold() in folded]
    finally:
        conn.close()
    report.computed_columns = [f"{s}.{t}.{c}" for (s, t), names in computed.items() for c in names]
    report.differences += differences(work / "out", work / "final", f"replay.{database}", computed)


def differences(streamed_output: Path, final_output: Path, prefix: str,
                computed: Mapping[tuple[str, str], Sequence[str]]) -> list[str]:
    """Per table (``(schema, table)`` -> its computed columns, left out), what the replay of ``streamed_output``
    has that the snapshot in ``final_output`` has not, and the reverse (``prefix``: ``<topic.prefix>.<db>``)."""
    found = []
    for (schema, table), skipped_names in computed.items():
        topic = f"{prefix}.{schema}.{table}"
        skipped = {c.casefold() for c in skipped_names}

        def kept(row: dict[str, Any], skipped: set[str] = skipped) -> dict[str, Any]:
            return {k: v for k, v in row.items() if k.casefold() not in skipped}

        streamed = {k: kept(v) for k, v in replayed(streamed_output, topic).items()}
        final = {k: kept(v) for k, v in replayed(final_output, topic).items()}
        for key in sorted(set(streamed) | set(final), key=repr):
            if key not in final:
                found.append(f"{schema}.{table} {key}: replayed, but not in the table")
            elif key not in streamed:
                found.append(f"{schema}.{table} {key}: in the table, missing from the replay")
            elif streamed[key] != final[key]:
                columns = sorted(c for c in final[key] if streamed[key].get(c) != final[key][c])
                found.append(f"{schema}.{table} {key}: {', '.join(columns)} differ (replay "
                             f"{[streamed[key].get(c) for c in columns]}, table {[final[key][c] for c in columns]})")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdckit_lab.sqlserver_model.replay", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--schema", nargs="+", type=Path, required=True, help="schema (and data) scripts, in order")
    parser.add_argument("--changes", type=Path, required=True, help="the changes script")
    parser.add_argument("--work", type=Path, default=Path("replay-work"), help="an empty folder for the model, "
                        "the output and the checkpoints (default ./replay-work)")
    parser.add_argument("--database", default="testDB")
    arguments = parser.parse_args(argv)
    from cdckit.errors import CdcKitError

    try:
        report = run(arguments.schema, arguments.changes, arguments.work, database=arguments.database)
    except (ScriptError, ValueError, OSError) as error:
        print(f"refused: {error}", file=sys.stderr)
        return 2
    except CdcKitError as error:
        print(f"stopped: {error}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0 if report.equal else 1


if __name__ == "__main__":
    sys.exit(main())
