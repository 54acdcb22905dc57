"""The `cdckit` command without Spark: `cdckit properties`, and what `cdckit snapshot` asks of the pipeline."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cdckit.cli import main
from cdckit.config.properties import PROPERTIES


def _listing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per property
    assert main(["properties"]) == 0
    return capsys.readouterr().out.splitlines()


def test_every_property_is_listed_with_its_text_whole(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _listing(capsys, monkeypatch)
    assert len(lines) == len(PROPERTIES)
    for line, prop in zip(lines, PROPERTIES, strict=True):
        assert line.startswith(prop.name) and line.endswith(f": {prop.doc}"), line
    assert "slot.name (default debezium): logical replication slot ([a-z0-9_])" in lines


def test_defaults_are_shown_as_a_configuration_file_writes_them(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _listing(capsys, monkeypatch)
    assert any(line.startswith("tombstones.on.delete (default true):") for line in lines)
    assert any(line.startswith("skipped.operations (default t):") for line in lines)
    assert any(line.startswith("slot.drop.on.stop (default false):") for line in lines)


@pytest.mark.parametrize(("mode", "reads_rows"), [("initial", True), ("no_data", False), ("schema_only", False)])
def test_the_snapshot_command_reads_rows_only_when_snapshot_mode_asks_for_data(
        mode: str, reads_rows: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import cdckit.pipelines.dispatch
    import cdckit.spark.session
    from cdckit.pipelines.streaming import SnapshotReport

    asked: list[bool] = []

    def run_snapshot(spark: Any, config: Any, *, data: bool = True) -> SnapshotReport:
        asked.append(data)
        return SnapshotReport("completed", "debezium", "0/0", [])

    monkeypatch.setattr(cdckit.pipelines.dispatch, "require_ready", lambda config: [])  # no source to check
    monkeypatch.setattr(cdckit.pipelines.dispatch, "claim_job", lambda config, command, confirm=True: None)
    monkeypatch.setattr(cdckit.pipelines.dispatch, "run_snapshot", run_snapshot)
    monkeypatch.setattr(cdckit.spark.session, "get_spark", lambda **kwargs: None)
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                                "database.hostname": "db.example.com", "database.user": "u",
                                "database.password": "p", "database.dbname": "shop", "topic.prefix": "t",
                                "snapshot.mode": mode}))
    assert main(["snapshot", str(path)]) == 0
    assert asked == [reads_rows]


def test_the_snapshot_command_refuses_snapshot_mode_never(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                                "database.hostname": "db.example.com", "database.user": "u",
                                "database.password": "p", "database.dbname": "shop", "topic.prefix": "t",
                                "snapshot.mode": "never"}))
    assert main(["snapshot", str(path)]) == 2  # before any connection is tried
    captured = capsys.readouterr()
    assert "snapshot.mode=never" in captured.out + captured.err and "cdckit stream" in captured.out + captured.err


def test_quality_refuses_a_configuration_whose_transforms_change_the_records(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                                "database.hostname": "db.example.com", "database.user": "u",
                                "database.password": "p", "database.dbname": "shop", "topic.prefix": "t",
                                "transforms": "unwrap",
                                "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}))
    (tmp_path / "out").mkdir()
    assert main(["quality", str(path), "--input", str(tmp_path / "out"), "--report", str(tmp_path / "r")]) == 2
    captured = capsys.readouterr()
    assert "transforms (unwrap) change them" in captured.out + captured.err


def test_demo_is_the_labs_command_found_through_its_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    from cdckit.cli import build_parser, plugin_commands
    from cdckit_lab.demo import COMMAND

    assert plugin_commands()["demo"] is COMMAND
    args = build_parser().parse_args(["demo", "--workdir", "w", "--quality-report", "q"])
    assert (str(args.workdir), str(args.quality_report)) == ("w", "q")


def test_demo_without_the_lab_says_how_to_get_it(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import cdckit.cli

    monkeypatch.setattr(cdckit.cli, "plugin_commands", dict)  # an installation without cdckit's lab
    assert main(["demo", "--workdir", "w"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("cdckit: error: cdckit demo comes with cdckit's lab")
    assert "pip install ./lab" in out and "make demo" in out
