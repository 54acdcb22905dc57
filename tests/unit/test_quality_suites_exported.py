"""The suites under quality/expectations are the ones cdckit runs (regenerate with `make quality-suites`)."""

from __future__ import annotations

import json
from pathlib import Path

from cdckit.quality.export import suite_documents

FOLDER = Path(__file__).resolve().parents[2] / "quality" / "expectations"


def test_exported_suites_match_the_code() -> None:
    documents = suite_documents()
    assert sorted(p.stem for p in FOLDER.glob("*.json")) == sorted(documents)
    for name, document in documents.items():
        stored = json.loads((FOLDER / f"{name}.json").read_text())
        assert stored == json.loads(json.dumps(document)), f"{name}.json is stale: run make quality-suites"


def test_every_expectation_says_what_it_checks() -> None:
    checks = [e["meta"]["check"] for d in suite_documents().values() for e in d["expectations"]]
    assert len(checks) == len(set(checks)) >= 30
