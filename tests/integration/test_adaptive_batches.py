"""With no ``max.batch.size``, the stream's micro-batches adapt (decision 0038): a backlog is read in batches that
grow past Debezium's 2,048 changes, a stream that has caught up takes small batches again, and a
``max.batch.size`` the configuration sets bounds every batch."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, replay

from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.pipelines.stopping import STOP
from cdckit.spark.batch_sizes import FIRST

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOPIC = "it.public.ledger"
TRANSACTION_ROWS = 1000


def _ledger(dsn: str) -> None:
    execute(dsn, "CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)")


def _insert(dsn: str, transactions: int, first: int = 0) -> None:
    """``transactions`` transactions of TRANSACTION_ROWS inserted rows each."""
    execute(dsn, *(f"INSERT INTO public.ledger SELECT g, g FROM generate_series({first + t * TRANSACTION_ROWS}, "
                   f"{first + (t + 1) * TRANSACTION_ROWS - 1}) g" for t in range(transactions)))


def _per_batch(out: Path) -> dict[int, int]:
    """The changes each micro-batch wrote, by batch id (the files sink names its files after the batch)."""
    counts: Counter[int] = Counter()
    for path in (out / TOPIC).glob("stream-*.jsonl"):
        match = re.match(r"stream-(\d+)-", path.name)
        assert match, path.name
        with path.open("rb") as handle:
            counts[int(match.group(1))] += sum(1 for _ in handle)
    return dict(sorted(counts.items()))


def _source(dsn: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(i,): {"id": i, "amount": a} for i, a in fetch(dsn, "SELECT id, amount FROM public.ledger")}


def test_a_backlog_is_read_in_batches_that_grow_and_a_given_bound_holds(postgres: Any, spark: Any, database: str,
                                                                        workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    config = make_config(postgres, database, workdir)
    assert config["max.batch.size"] is None
    run_snapshot(spark, config)
    _insert(dsn, 60)  # 60,000 changes
    report = run_stream(spark, config)
    sizes = list(_per_batch(workdir / "out").values())
    assert sum(sizes) == 60 * TRANSACTION_ROWS
    assert sizes[0] <= FIRST, f"the first batch takes Debezium's 2,048 changes at most: {sizes}"
    # the second batch may take GROWTH times the first; later ones as many as the rate seen allows in 2 s
    assert max(sizes) > 4 * FIRST, f"the batches grow through the backlog: {sizes}"
    assert len(sizes) <= 10, f"60,000 changes take a few batches, not 30: {sizes}"
    assert report.batches == len(sizes)
    assert replay(config, TOPIC) == _source(dsn)

    fixed = make_config(postgres, database, workdir, **{"max.batch.size": "5000"})
    before = set(_per_batch(workdir / "out"))
    _insert(dsn, 20, first=100_000)
    run_stream(spark, fixed)
    given = [count for batch, count in _per_batch(workdir / "out").items() if batch not in before]
    assert given and all(count <= 5000 for count in given), f"max.batch.size=5000 bounds every batch: {given}"
    assert sum(given) == 20 * TRANSACTION_ROWS
    assert replay(config, TOPIC) == _source(dsn)


def test_a_stream_that_caught_up_takes_small_batches_again(postgres: Any, spark: Any, database: str,
                                                           workdir: Path) -> None:
    dsn = postgres.dsn(database)
    _ledger(dsn)
    out = workdir / "out"
    # at the default interval: triggers back to back, each waiting in the source for a change (decision 0041)
    config = make_config(postgres, database, workdir, **{"cdckit.trigger": "processing-time"})
    run_snapshot(spark, config)
    _insert(dsn, 40)  # a backlog of 40,000 changes when the stream starts
    caught_up_at: list[int] = []

    def until(changes: int) -> None:
        deadline = time.monotonic() + 120
        while sum(_per_batch(out).values()) < changes and time.monotonic() < deadline:
            time.sleep(0.1)

    def burst_once_caught_up() -> None:
        try:
            until(40 * TRANSACTION_ROWS)
            time.sleep(1.5)  # several idle triggers: the stream is caught up
            caught_up_at.append(max(_per_batch(out), default=-1))
            _insert(dsn, 6, first=100_000)  # 6,000 changes committed at once
            until(46 * TRANSACTION_ROWS)
        finally:
            STOP.event.set()  # the query stops once the batch under way is committed

    writer = threading.Thread(target=burst_once_caught_up, daemon=True)
    writer.start()
    try:
        run_stream(spark, config)
    finally:
        STOP.event.clear()
        writer.join()
    sizes = _per_batch(out)
    assert caught_up_at, "the backlog was not caught up"
    backlog = [count for batch, count in sizes.items() if batch <= caught_up_at[0]]
    burst = [count for batch, count in sizes.items() if batch > caught_up_at[0]]
    assert sum(backlog) == 40 * TRANSACTION_ROWS and max(backlog) > 4 * FIRST, f"the backlog's batches grew: {backlog}"
    assert sum(burst) == 6 * TRANSACTION_ROWS, burst
    assert burst[0] <= FIRST, f"once caught up, the stream's next batch is small again: {burst}"
    assert replay(config, TOPIC) == _source(dsn)
