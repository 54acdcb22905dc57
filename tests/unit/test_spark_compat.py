"""What differs between Spark releases is handled in cdckit.spark.compat."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from cdckit.errors import CdcKitError
from cdckit.spark import compat
from cdckit.spark.rows import EVENT_COLUMNS, event_arrow_schema
from cdckit.state import StateStore


def test_an_unsupported_spark_is_refused_naming_the_supported_range_and_emrs_release(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspark, "__version__", "3.5.2")
    with pytest.raises(CdcKitError, match=r"4\.0\.2 to 4\.4 .*this is Spark 3\.5\.2.*emr-spark-8\.0\.0"):
        compat.check_spark()
    monkeypatch.setattr(pyspark, "__version__", "4.4.0")
    with pytest.raises(CdcKitError, match=r"this is Spark 4\.4\.0"):
        compat.check_spark()


def test_the_event_arrow_schema_is_the_one_pyspark_derives_from_the_event_schema() -> None:
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    types = {"topic": StringType(), "key": StringType(), "value": StringType(), "headers": ArrayType(header),
             "table": StringType(), "op": StringType(), "commit_lsn": DecimalType(25, 0), "lsn": DecimalType(25, 0),
             "serial": IntegerType(), "source_ts_ms": LongType(), "value_binary": BinaryType()}
    spark_schema = StructType([StructField(name, types[name]) for name in EVENT_COLUMNS])
    assert event_arrow_schema().equals(to_arrow_schema(spark_schema), check_metadata=True)


def test_committed_offset_is_the_last_batch_with_a_commit_entry(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path))
    options = {"cdckit.checkpoint.location": str(tmp_path)}
    assert compat.committed_offset(options) is None
    for batch, lsn in ((0, "0/10"), (1, "0/20"), (2, "0/30")):
        (tmp_path / "stream" / "offsets").mkdir(parents=True, exist_ok=True)
        (tmp_path / "stream" / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1}}\n{{"lsn":"{lsn}"}}')
    (tmp_path / "stream" / "commits").mkdir()
    for batch in (0, 1):  # batch 2 was planned but not committed: Spark replays it
        (tmp_path / "stream" / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (tmp_path / "stream" / "commits" / f".{batch}.crc").write_text("x")
    assert compat.committed_offset(options) == {"lsn": "0/20"}
    assert store.names("stream/commits")


def test_a_damaged_offset_log_is_reported_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "stream" / "offsets").mkdir(parents=True)
    (tmp_path / "stream" / "commits").mkdir()
    (tmp_path / "stream" / "commits" / "0").write_text("v1\n{}")
    with pytest.raises(CdcKitError, match=r"offset log entry 0 .* missing or not in Spark's format; restore"):
        compat.committed_offset({"cdckit.checkpoint.location": str(tmp_path)})


class _Reader(compat.SelfBoundedReader):
    """Batches of up to 2 positions out of 7, as a change reader bounds them."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__({"max.batch.size": "2", **options})
        self.target: int | None = None

    def initialOffset(self) -> dict[str, int]:
        self.started({"pos": 0})
        return {"pos": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = 5

    def next_offset(self, start: dict[str, int], limit: compat.ReadLimit) -> dict[str, int]:
        upto = 7 if self.target is None else self.target
        return {"pos": min(upto, start["pos"] + compat.read_limit_rows(limit, 1))}


def test_without_a_start_the_reader_bounds_batches_from_what_it_planned_last(tmp_path: Path) -> None:
    reader = _Reader({"cdckit.checkpoint.location": str(tmp_path)})
    assert [reader.latestOffset()["pos"] for _ in range(5)] == [2, 4, 6, 7, 7]
    reader.planned({"pos": 3})  # Spark replays a batch that ends at 3
    assert reader.latestOffset() == {"pos": 5}
    assert reader.latestOffset({"pos": 0}, compat.ReadMaxRows(1)) == {"pos": 1}  # Spark 4.2+: Spark's start


def test_catching_up_caps_the_reader_where_the_source_stood_when_it_started(tmp_path: Path) -> None:
    reader = _Reader({"cdckit.checkpoint.location": str(tmp_path), compat.CATCH_UP_OPTION: "true"})
    assert [reader.latestOffset()["pos"] for _ in range(4)] == [2, 4, 5, 5]


def test_the_reader_plans_no_more_batches_than_a_run_may_take(tmp_path: Path) -> None:
    reader = _Reader({"cdckit.checkpoint.location": str(tmp_path), compat.MAX_BATCHES_OPTION: "2"})
    reader.initialOffset()  # not a batch
    ends = [reader.latestOffset()["pos"] for _ in range(4)]
    assert ends == [2, 4, 4, 4], "the third batch is not planned, so it cannot start while the query stops"
    replaying = _Reader({"cdckit.checkpoint.location": str(tmp_path), compat.MAX_BATCHES_OPTION: "2"})
    (tmp_path / "stream" / "offsets").mkdir(parents=True)
    (tmp_path / "stream" / "commits").mkdir()
    (tmp_path / "stream" / "offsets" / "0").write_text('v1\n{}\n{"pos": 1}')
    (tmp_path / "stream" / "commits" / "0").write_text('v1\n{}')
    replaying.planned({"pos": 1})  # Spark 4.0 plans the last committed batch again as the query starts: no batch
    replaying.planned({"pos": 3})  # a batch left uncommitted by the run before, replayed: it counts
    replaying.planned({"pos": 3})  # Spark asks for its partitions again: still one batch
    start = {"pos": 3}
    ends = []
    for _ in range(3):  # Spark 4.2+ hands over the end of the batch it planned last as the start
        start = replaying.latestOffset(start, compat.ReadMaxRows(2))
        ends.append(start["pos"])
    assert ends == [5, 5, 5]
    unbounded = _Reader({"cdckit.checkpoint.location": str(tmp_path / "new"), compat.MAX_BATCHES_OPTION: "0"})
    assert [unbounded.latestOffset()["pos"] for _ in range(4)] == [2, 4, 6, 7]


class _Waiting(compat.SelfBoundedReader):
    """A source whose changes appear at given times of a clock the test moves (each sleep moves it)."""

    def __init__(self, options: dict[str, str], appear_at: float | None, step: float | None) -> None:
        super().__init__({"max.batch.size": "10", **options})
        self.now, self.appear_at, self.looks, self.sleeps = 0.0, appear_at, 0, []
        self.wait_step_s = step
        self._clock = lambda: self.now  # type: ignore[method-assign]
        self._sleep = self._advance  # type: ignore[method-assign]

    def _advance(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 3))
        self.now += seconds

    def initialOffset(self) -> dict[str, int]:
        return {"pos": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def next_offset(self, start: dict[str, int], limit: compat.ReadLimit) -> dict[str, int]:
        self.looks += 1
        pending = self.appear_at is not None and self.now >= self.appear_at
        return {"pos": start["pos"] + 3} if pending else start


def test_a_stream_waiting_for_changes_plans_the_batch_as_soon_as_a_look_finds_one(tmp_path: Path) -> None:
    options = {"cdckit.checkpoint.location": str(tmp_path), compat.WAIT_OPTION: "500"}
    reader = _Waiting(options, appear_at=0.06, step=0.025)
    assert reader.latestOffset({"pos": 0}, compat.ReadMaxRows(10)) == {"pos": 3}
    assert reader.now == pytest.approx(0.075), "found at the first look after the change, not at the wait's end"
    assert reader.looks == 4


def test_a_stream_waiting_for_changes_says_nothing_is_pending_when_the_wait_ends(tmp_path: Path) -> None:
    options = {"cdckit.checkpoint.location": str(tmp_path), compat.WAIT_OPTION: "500"}
    stepping = _Waiting(options, appear_at=None, step=0.025)
    assert stepping.latestOffset({"pos": 0}, compat.ReadMaxRows(10)) == {"pos": 0}
    assert stepping.now == pytest.approx(0.5) and stepping.looks == 21
    once = _Waiting(options, appear_at=None, step=None)  # a source looked at once, at the wait's end
    assert once.latestOffset({"pos": 0}, compat.ReadMaxRows(10)) == {"pos": 0}
    assert once.sleeps == [0.5] and once.looks == 2


def test_without_the_wait_option_or_while_catching_up_a_trigger_does_not_wait(tmp_path: Path) -> None:
    plain = _Waiting({"cdckit.checkpoint.location": str(tmp_path)}, appear_at=None, step=0.025)
    assert plain.latestOffset({"pos": 0}, compat.ReadMaxRows(10)) == {"pos": 0}
    assert plain.sleeps == [] and plain.looks == 1
    catching_up = _Waiting({"cdckit.checkpoint.location": str(tmp_path), compat.WAIT_OPTION: "500",
                            compat.CATCH_UP_OPTION: "true"}, appear_at=None, step=0.025)
    assert catching_up.latestOffset() == {"pos": 0}
    assert catching_up.sleeps == [], "available-now stops at the first trigger that finds nothing"
