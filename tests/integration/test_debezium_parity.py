"""cdckit against Debezium 2.5.2 on the parity corpus (``cdckit_lab.parity_corpus``): every table shape and type
Debezium's PostgreSQL connector captures, snapshot and stream, compared record by record as text after masking
positions and clocks only.

``make test`` runs the default settings; ``make test-debezium-modes`` (CI's second comparison) runs the profiles
with the non-default handling modes, transaction metadata, schemas off and single message transforms
(``CDCKIT_PARITY_PROFILES``).

No difference is allowed: one that cdckit should not (or cannot) remove is recorded in decision 0016 with its
reason and taken out of the corpus there, not excused here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cdckit_lab.parity import compare, create_corpus
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
