"""The bound of the next micro-batch when ``max.batch.size`` is not set (``cdckit.spark.batch_sizes``, decision
0038): small while caught up, growing through a backlog toward batches of ``TARGET_SECONDS``, within ``MOST``."""

from __future__ import annotations

import pytest

from cdckit.spark.batch_sizes import FIRST, GROWTH, MOST, TARGET_SECONDS, BatchSizes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _catch_up(sizes: BatchSizes, clock: Clock, backlog: int, fixed_seconds: float, per_change: float) -> list[int]:
    """Plan batches through ``backlog`` changes, each taking a fixed time and a time per change; the bounds used."""
    bounds = []
    while backlog > 0:
        bound = sizes.size
        bounds.append(bound)
        taken = min(bound, backlog)
        backlog -= taken
        sizes.planned(taken, backlog > 0)
        clock.now += fixed_seconds + taken * per_change
    return bounds


def test_a_caught_up_stream_keeps_debeziums_batch_size() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    for changes in (10, 2048, 0, 700):
        assert sizes.size == FIRST == 2048
        sizes.planned(changes, False)  # it took every change there was
        clock.now += 0.2
    assert sizes.size == FIRST


def test_a_backlog_grows_the_batches_toward_the_target_time_and_no_further() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    # 0.2 s a batch and 10 µs a change: 2,000,000 changes
    bounds = _catch_up(sizes, clock, 2_000_000, 0.2, 10e-6)
    assert bounds[0] == FIRST
    assert bounds[1] == FIRST * GROWTH, "the second batch grows by GROWTH: the first's rate is not known yet"
    assert all(bound >= 0.99 * max(bounds[:index + 1]) for index, bound in enumerate(bounds)), \
        "the bound does not shrink while the backlog lasts at a steady rate"
    assert max(bounds) <= MOST
    steady = bounds[len(bounds) // 2:-1]
    for bound in steady:  # about TARGET_SECONDS a batch once grown (100,000 changes a second at that size)
        assert 0.5 * TARGET_SECONDS <= 0.2 + bound * 10e-6 <= 1.5 * TARGET_SECONDS
    assert len(bounds) < 2_000_000 / MOST + 6, "a few small batches, then large ones"


def test_the_memory_bound_caps_a_fast_stream() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    bounds = _catch_up(sizes, clock, 5_000_000, 0.05, 1e-6)  # a million changes a second would want 2 s batches
    assert max(bounds) == MOST


def test_a_slow_batch_makes_the_next_smaller() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    _catch_up(sizes, clock, 1_000_000, 0.2, 10e-6)
    sizes.planned(sizes.size, True)
    grown = sizes.size
    clock.now += 10 * TARGET_SECONDS  # the sink slowed down: this batch took five times the target
    sizes.planned(grown, True)
    assert FIRST <= sizes.size < grown / 2


def test_catching_up_goes_back_to_small_batches() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    _catch_up(sizes, clock, 1_000_000, 0.2, 10e-6)
    sizes.planned(1_000, True)
    assert sizes.size > FIRST
    sizes.planned(1_000, False)  # this batch took everything: the next one is small again
    assert sizes.size == FIRST
    sizes.planned(FIRST, True)
    sizes.idle()  # nothing pending at all
    assert sizes.size == FIRST


@pytest.mark.parametrize("given", [1, 2048, 50_000, 1_000_000])
def test_a_given_max_batch_size_is_the_bound_whatever_the_backlog(given: int) -> None:
    clock = Clock()
    sizes = BatchSizes(given, clock=clock)
    assert not sizes.adaptive
    bounds = _catch_up(sizes, clock, 3 * given + 1, 0.2, 10e-6)
    assert set(bounds) == {given}
