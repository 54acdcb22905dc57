"""How many changes the next micro-batch may take when the configuration sets no ``max.batch.size``
(docs/decisions/0038-micro-batches-that-adapt.md).

A micro-batch costs Spark a fixed time whatever its size (planning it, its offset and commit logs, launching its
tasks: about 0.1 to 0.2 s), so batches of Debezium's 2,048 changes cap a catch-up at about 10,000 changes a
second, while a caught-up stream wants small batches, which reach the sink soonest. The rule:

- the first batch, and every batch after one that took every change there was (the stream is caught up), may
  take ``FIRST`` changes (Debezium's default ``max.batch.size``);
- after a batch that left changes behind (a backlog), the next may take ``GROWTH`` times as many, but no more
  than the batches seen so far say takes ``TARGET_SECONDS`` (a fixed time and a time per change fitted to the last
  two full batches' times, from one's planning to the next's; from one batch, its own rate, which may hold the
  bound but not shrink it unless that batch ran past the target; the run's first batch, which carries the run's
  one-off costs, is not measured, and until a batch is the bound grows once), and never more than
  ``MOST``: the bound memory and the server's counting peek are measured at (the benchmarks' 200,000). A batch
  that ran slower than the target makes the next one smaller.

A ``max.batch.size`` the configuration sets is a fixed bound instead, as Debezium documents it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

FIRST = 2048
MOST = 200_000
GROWTH = 8
TARGET_SECONDS = 2.0


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
        if not self._seen:  # no batch measured yet: grow once from the first bound, then wait for one
            self.size = min(MOST, self.size * GROWTH) if self.size == FIRST else self.size
            return self.size
        bound = self._within_target()
        if len(self._seen) == 1 and self._seen[0][1] <= TARGET_SECONDS:
            bound = max(bound, self.size)  # one batch's rate errs small: it holds the bound rather than shrink it
        self.size = max(FIRST, min(MOST, self.size * GROWTH, bound))
        return self.size

    def _within_target(self) -> int:
        """The most changes the batches seen say a batch takes in ``TARGET_SECONDS`` (none seen: no bound)."""
        if not self._seen:
            return MOST
        changes, seconds = self._seen[-1]
        if len(self._seen) == 2:
            (low_changes, low_seconds), (high_changes, high_seconds) = sorted(self._seen)
            if high_changes > low_changes and high_seconds > low_seconds:
                per_change = (high_seconds - low_seconds) / (high_changes - low_changes)
                fixed = max(0.0, low_seconds - per_change * low_changes)
                if fixed < TARGET_SECONDS:
                    return int((TARGET_SECONDS - fixed) / per_change)
        return int(changes * TARGET_SECONDS / seconds)

    def idle(self) -> None:
        """Nothing was pending: the next batch starts small."""
        self.planned(0, False)
