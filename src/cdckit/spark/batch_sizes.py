"""How many changes the next micro-batch may take when the configuration sets no ``max.batch.size``
(docs/decisions/0038-micro-batches-that-adapt.md).

A micro-batch costs Spark a fixed time whatever its size (planning it, its offset and commit logs, launching its
tasks: about 0.1 to 0.2 s), so batches of Debezium's 2,048 changes cap a catch-up at about 10,000 changes a
second, while a caught-up stream wants small batches, which reach the sink soonest. The rule:

- the first batch, and every batch after one that took every change there was (the stream is caught up), may
  take ``FIRST`` changes (Debezium's default ``max.batch.size``);
- after a batch that left changes behind (a backlog), the next may take ``GROWTH`` times as many, but no more
  than the batches seen so far say takes ``TARGET_SECONDS``, and never more than ``MOST``: the bound memory and
  the server's counting peek are measured at (the benchmarks' 200,000). "Seen so far": each full batch's changes
  and the time from its planning to the next one's (it ran in between), the run's first batch left out (its time
  carries the run's one-off costs). From two batches whose sizes differ at least ``FIT_SPREAD`` times, a fixed
  time and a time per change are fitted; otherwise the last batch's own rate, which counts its fixed time as if
  it were per change and so errs small: it may hold the bound but shrinks it only when that batch ran past the
  target.
  Until a batch is measured the bound keeps growing.

A ``max.batch.size`` the configuration sets is a fixed bound instead, as Debezium documents it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

FIRST = 2048
MOST = 200_000
GROWTH = 16
TARGET_SECONDS = 2.0
# two batches' times are fitted to a fixed time and a time per change only where their sizes differ this many times:
# closer sizes make the fit follow their noise (16,000 and 16,384 changes in 0.27 and 0.37 s fit 250 µs a change)
FIT_SPREAD = 2.0


class BatchSizes:
    """The bound of the next micro-batch: fixed (``fixed``, a ``max.batch.size`` given) or adapted to the backlog."""

    def __init__(self, fixed: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.fixed = fixed
        self.size = fixed or FIRST
        self._clock = clock
        # the batch planned last: when, how many changes, whether it left changes behind, and whether it was the
        # run's first (whose time carries the run's one-off costs: Python workers starting, code compiled)
        self._last: tuple[float, int, bool, bool] | None = None
        # the last full batches' (changes, seconds), the latest last
        self._seen: list[tuple[int, float]] = []

    @property
    def adaptive(self) -> bool:
        return self.fixed is None

    def planned(self, changes: int, left_behind: bool) -> int:
        """A batch of ``changes`` was planned under ``size``; ``left_behind``: changes were pending after it.
        Returns the next batch's bound (kept in ``size``)."""
        now = self._clock()
        before, self._last = self._last, (now, changes, left_behind, self._last is None)
        if self.fixed is not None:
            return self.size
        if not left_behind:
            self.size, self._seen = FIRST, []
            return self.size
        if before is not None and before[2] and before[1] > 0 and now > before[0] and not before[3]:
            # the batch before this one was full too, and not the run's first: it ran between the two plans
            # (of a size seen before, it takes that one's place: the fit needs two sizes)
            self._seen = [*[seen for seen in self._seen if seen[0] != before[1]][-1:], (before[1], now - before[0])]
        if not self._seen:  # no batch measured yet: keep growing (the memory bound holds whatever the size)
            self.size = min(MOST, self.size * GROWTH)
            return self.size
        fitted = self._fitted()
        bound = self._within_target(fitted)
        if fitted is None and self._seen[-1][1] <= TARGET_SECONDS:
            bound = max(bound, self.size)  # a rate errs small: it holds the bound rather than shrink it
        self.size = max(FIRST, min(MOST, self.size * GROWTH, bound))
        return self.size

    def _fitted(self) -> tuple[float, float] | None:
        """A fixed time and a time per change fitted to the last two batches seen, where their sizes differ
        ``FIT_SPREAD`` times or more and the larger took longer; else None."""
        if len(self._seen) != 2:
            return None
        (low_changes, low_seconds), (high_changes, high_seconds) = sorted(self._seen)
        if high_changes < FIT_SPREAD * low_changes or high_seconds <= low_seconds:
            return None
        per_change = (high_seconds - low_seconds) / (high_changes - low_changes)
        return max(0.0, low_seconds - per_change * low_changes), per_change

    def _within_target(self, fitted: tuple[float, float] | None) -> int:
        """The most changes the batches seen (at least one) say a batch takes in ``TARGET_SECONDS``: from the fit
        (``_fitted``) where there is one, else from the last batch's rate."""
        if fitted is not None and fitted[0] < TARGET_SECONDS:
            fixed, per_change = fitted
            return int((TARGET_SECONDS - fixed) / per_change)
        changes, seconds = self._seen[-1]
        return int(changes * TARGET_SECONDS / seconds)

    def idle(self) -> None:
        """Nothing was pending: the next batch starts small."""
        self.planned(0, False)
