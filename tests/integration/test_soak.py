"""A few rounds of the kill -9 soak (python -m cdckit_lab.soak runs 20 or more): nothing lost, nothing twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdckit_lab.soak import run_soak

pytestmark = [pytest.mark.slow]


def test_stream_killed_three_times_under_writes_loses_and_doubles_nothing(tmp_path: Path) -> None:
    result = run_soak(runs=3, seed=11, base=tmp_path)
    assert result["drain_exit"] == 0
    assert result["kills_while_streaming"] == 3, result["kills"]
    assert result["transactions"] > 50 and result["events"] > result["transactions"]
    ops = result["events_by_op"]
    assert ops.get("c", 0) > 50 and ops.get("u", 0) > 10 and ops.get("d", 0) > 10, ops  # streamed, not snapshotted
    assert (result["missing"], result["extra"], result["differing"], result["duplicates"]) == (0, 0, 0, 0), result
