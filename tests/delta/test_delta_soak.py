"""Two rounds of the kill -9 soak into Delta tables (``python -m cdckit_lab.soak --sink delta`` runs more): the
change table, read with delta-rs, holds every change once, and the state table equals the source table."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdckit_lab.soak import run_soak

pytestmark = [pytest.mark.slow]


def test_stream_into_delta_killed_twice_under_writes_loses_and_doubles_nothing(tmp_path: Path) -> None:
    # Two kills, each after a committed batch; tests/integration/test_soak.py kills the files sink's stream three
    # times. A cold JVM takes some 35 s to its first Delta commit here.
    result = run_soak(runs=2, seed=11, base=tmp_path, sink="delta")
    assert result["drain_exit"] == 0
    assert result["kills_while_streaming"] == 2, result["kills"]
    assert result["transactions"] > 50 and result["events"] > result["transactions"]
    ops = result["events_by_op"]
    assert ops.get("c", 0) > 50 and ops.get("u", 0) > 10 and ops.get("d", 0) > 10, ops  # streamed, not snapshotted
    assert (result["missing"], result["extra"], result["differing"], result["duplicates"]) == (0, 0, 0, 0), result
    assert result["state_table_equals_source"] and result["state_table_rows"] == result["rows"]
