"""cdckit against Debezium 2.5.2 on the parity corpus (``cdckit.lab.parity_corpus``): every table shape and type
Debezium's PostgreSQL connector captures, snapshot and stream, compared record by record as text after masking
positions and clocks only.

``make test`` runs the default settings; ``make test-debezium-modes`` (CI's second comparison) runs the profiles
with the non-default handling modes, transaction metadata and schemas off (``CDCKIT_PARITY_PROFILES``).

Every difference is either none or one decision 0016 records, listed in ``RECORDED`` with its reason; a recorded
difference that no longer shows fails too, so the list stays true.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cdckit.lab.parity import compare, create_corpus
from cdckit.lab.parity_corpus import PROFILES

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

PROFILE_NAMES = [name.strip() for name in os.environ.get("CDCKIT_PARITY_PROFILES", "default").split(",")
                 if name.strip()]

# (profile or "*", topic suffix, the start of the difference's description) -> the reason decision 0016 gives
RECORDED: dict[tuple[str, str, str], str] = {}


def _recorded(profile: str, topic: str, what: str) -> str | None:
    for (where, suffix, start), reason in RECORDED.items():
        if where in ("*", profile) and topic.endswith(suffix) and what.startswith(start):
            return reason
    return None


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
    assert comparison.records > 100 and len(comparison.topics) >= 18
    unexpected, seen = [], set()
    for name, topic in comparison.topics.items():
        assert topic.debezium > 0, f"{name}: Debezium wrote nothing, so nothing was compared"
        for what, where in topic.differences:
            reason = _recorded(profile, name, what)
            if reason is None:
                unexpected.append(f"{name}: {what}\n      {where}")
            else:
                seen.add(reason)
        if topic.identical != topic.compared and not topic.differences:
            unexpected.append(f"{name}: {topic.compared - topic.identical} records differ")
    assert not unexpected, f"{comparison.summary()}; differences not in decision 0016:\n" + "\n".join(unexpected)
    stale = {reason for (where, _, _), reason in RECORDED.items() if where in ("*", profile)} - seen
    assert not stale, f"recorded in decision 0016 but no longer different: {stale}"
