"""``cdckit properties``: every property, its default as a configuration file writes it, and its text whole."""

from __future__ import annotations

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
