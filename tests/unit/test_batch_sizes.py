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
    # growing before any batch is measured may overshoot the target (here 200,000 changes take 2.2 s): the first
    # fit brings it back, once, and then it holds
    assert all(bound >= 0.85 * max(bounds[:index + 1]) for index, bound in enumerate(bounds)), \
        "the bound does not fall back while the backlog lasts at a steady rate"
    assert len(set(bounds[4:-1])) == 1, bounds
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


def test_the_bound_keeps_growing_until_a_batch_is_measured() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    # the run's first batch carries its one-off costs (a new user's took 1.8 s for 2,000 changes): not measured
    sizes.planned(FIRST, True)
    clock.now += 1.8
    sizes.planned(FIRST * GROWTH, True)
    assert sizes.size == min(MOST, FIRST * GROWTH ** 2), "no batch measured yet: the bound grows again, not wait"


def test_two_batches_of_about_one_size_do_not_shrink_the_bound_by_their_noise() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    # measured on PostgreSQL: 16,000 and 16,384 changes in 0.27 and 0.37 s; fitted as a line, 250 µs a change
    # (about 8,000 changes in 2 s), where each batch's own rate says 90,000 or more
    for changes, seconds in ((2_000, 0.2), (16_000, 0.27), (16_384, 0.37), (118_000, 0.83)):
        sizes.planned(changes, True)
        clock.now += seconds
    assert sizes.size >= 118_000


def test_a_backlog_of_500000_changes_takes_a_few_batches() -> None:
    clock = Clock()
    sizes = BatchSizes(clock=clock)
    # the benchmarks' backlog on this kind of machine: about 0.25 s a batch and 7 µs a change
    bounds = _catch_up(sizes, clock, 500_000, 0.25, 7e-6)
    assert len(bounds) <= 6, bounds
    assert bounds[0] == FIRST
