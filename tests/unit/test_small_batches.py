"""The stream's hint that its micro-batches are too small for a backlog (``streaming.SmallBatches``)."""

from __future__ import annotations

import logging
import time

import pytest

from cdckit.pipelines.streaming import SmallBatches


def _hints(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "small micro-batches" in r.getMessage()]


def test_three_full_batches_in_a_row_are_named_once(caplog: pytest.LogCaptureFixture) -> None:
    hint = SmallBatches(2048)
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        for records in (2048, 2000, 1024, 2048, 2048, 2048):
            hint.batch(time.monotonic() - 1.0, records)
    [message] = _hints(caplog)
    assert "3 in a row were full at max.batch.size=2048" in message
    assert "remove max.batch.size" in message


def test_a_batch_under_half_starts_the_count_again(caplog: pytest.LogCaptureFixture) -> None:
    hint = SmallBatches(2048)
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        for records in (2048, 2048, 1023, 2048, 2048, 10, 2048):
            hint.batch(time.monotonic(), records)
    assert _hints(caplog) == []  # a stream that keeps up: its batches are not full one after another
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        hint.batch(time.monotonic(), 2048)
        hint.batch(time.monotonic(), 2048)
    assert len(_hints(caplog)) == 1


def test_batches_of_ten_thousand_and_more_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        for size in (SmallBatches.BELOW, 50_000):
            hint = SmallBatches(size)
            for _ in range(5):
                hint.batch(time.monotonic(), size)
    assert _hints(caplog) == []


def test_an_unset_max_batch_size_is_never_named(caplog: pytest.LogCaptureFixture) -> None:
    hint = SmallBatches(None)  # the bound adapts (batch_sizes): no setting to name
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        for _ in range(5):
            hint.batch(time.monotonic() - 1.0, 2048)
    assert _hints(caplog) == []
