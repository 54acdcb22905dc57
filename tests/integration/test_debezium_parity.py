"""cdckit against Debezium 2.5.2 on the parity corpus (``cdckit_lab.parity_corpus``): every table shape and type
Debezium's PostgreSQL connector captures, snapshot and stream, compared record by record as text after masking
positions and clocks only.

``make test`` runs the default settings; ``make test-debezium-modes`` (CI's second comparison) runs the profiles
with the non-default handling modes, transaction metadata, schemas off and single message transforms
(``CDCKIT_PARITY_PROFILES``).

No difference is allowed: one that cdckit should not (or cannot) remove is recorded in decision 0016 with its
reason and taken out of the corpus there, not excused here.

The quality suites (``cdckit.quality``) then check the same output of cdckit, which is Debezium's own shapes: they
must pass under every profile but those with transforms (whose records are not what the suites check).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit.quality import check_records
from cdckit.quality.records import read_files
from cdckit_lab.parity import compare, create_corpus, settings_for
from cdckit_lab.parity_corpus import PROFILES, TABLES

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

PROFILE_NAMES = [name.strip() for name in os.environ.get("CDCKIT_PARITY_PROFILES", "default").split(",")
                 if name.strip()]


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_every_record_is_debezium_2_5_2s_but_positions_and_clocks(
        profile: str, postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    assert profile in PROFILES, f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}"
    properties = postgres.connector_properties(database)
    create_corpus(properties)
    comparison = compare(spark, properties, workdir, profile, slot_suffix=database)
    print(comparison.report(examples=1))

    refused = {name: topic.refused for name, topic in comparison.topics.items() if topic.refused}
    assert not refused, f"cdckit refuses what Debezium captures: {refused}"
    assert comparison.records > 100 and len(comparison.topics) >= len(TABLES) - PROFILES[profile].merged
    differing = [f"{name}: {what}\n      {where}" for name, topic in comparison.topics.items()
                 for what, where in topic.differences]
    assert not differing, f"{comparison.summary()}; differences:\n" + "\n".join(differing)
    assert all(topic.debezium > 0 and topic.identical == topic.compared for topic in comparison.topics.values())
    _quality_of_cdckits_output(spark, workdir, profile)


def _quality_of_cdckits_output(spark: Any, workdir: Path, profile: str) -> None:
    """The quality suites on the records the comparison read (no source: it has changed since)."""
    settings = PROFILES[profile].settings
    if settings.get("transforms"):
        print(f"quality suites not run on {profile}: its transforms change the records they check")
        return
    options = {"connector.class": POSTGRES_CONNECTOR, **settings_for(PROFILES[profile], TABLES)}
    report = check_records(read_files(spark, str(workdir / "cdckit-out")), options)
    assert report.success, f"the quality suites fail cdckit's output of the corpus ({profile}):\n" + \
        report.to_markdown()
