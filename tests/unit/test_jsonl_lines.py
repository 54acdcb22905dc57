"""The files sink's lines built a batch at a time with Arrow (``record_lines``) against the reference built a record at
a time in Python (``record_line``): the same bytes for any record, and each topic's lines in row order."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdckit.spark.rows import EVENT_COLUMNS, event_arrow_schema
from cdckit.spark.sinks.jsonl import lines_by_topic, record_line, record_lines

# Any text, including escapes, control characters and characters outside the Basic Multilingual Plane.
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40)
JSON_TEXT = st.one_of(st.none(), TEXT.map(lambda text: json.dumps({"payload": text}, ensure_ascii=False)))
HEADERS = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"key": TEXT, "value": st.one_of(st.none(), st.binary(max_size=12))}), max_size=3))


@st.composite
def records(draw: Any) -> dict[str, Any]:
    binary = draw(st.one_of(st.none(), st.binary(max_size=30)))
    return {"topic": draw(st.sampled_from(["shop.public.orders", "shop.\"odd\\topic\u00e9", "\U0001f600.t", ""])),
            "key": draw(JSON_TEXT), "value": None if binary is not None else draw(JSON_TEXT),
            "headers": draw(HEADERS), "table": "public.orders", "op": draw(st.sampled_from(["c", "u", "d", "r"])),
            "commit_lsn": 1, "lsn": draw(st.integers(0, 2**62)), "serial": 0, "source_ts_ms": 0,
            "value_binary": binary}


def _batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{name: row[name] for name in EVENT_COLUMNS} for row in rows],
                                      schema=event_arrow_schema())


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), max_size=25))
def test_a_batch_of_lines_is_byte_for_byte_the_reference_line_of_each_record(rows: list[dict[str, Any]]) -> None:
    assert record_lines(_batch(rows)).to_pylist() == [record_line(row) + "\n" for row in rows]


def _large(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its texts as ``large_string`` (as lines too large for ``string`` offsets are joined)."""
    return pa.RecordBatch.from_arrays(
        [column.cast(pa.large_string()) if column.type == pa.string() else column for column in batch.columns],
        names=batch.schema.names)


@settings(max_examples=100, deadline=None)
@given(st.lists(records(), max_size=25))
def test_large_string_columns_give_the_same_lines(rows: list[dict[str, Any]]) -> None:
    assert record_lines(_large(_batch(rows))).to_pylist() == [record_line(row) + "\n" for row in rows]
    written = {topic: bytes(lines) for topic, lines, _ in lines_by_topic(_large(_batch(rows)).slice(1))}
    assert written == {topic: bytes(lines) for topic, lines, _ in lines_by_topic(_batch(rows).slice(1))}


@settings(max_examples=200, deadline=None)
@given(st.lists(records(), max_size=25))
def test_each_topics_lines_come_in_row_order(rows: list[dict[str, Any]]) -> None:
    written = {topic: (bytes(lines), count) for topic, lines, count in lines_by_topic(_batch(rows))}
    expected: dict[str, list[str]] = {}
    for row in rows:
        expected.setdefault(row["topic"], []).append(record_line(row) + "\n")
    assert written == {topic: ("".join(lines).encode(), len(lines)) for topic, lines in expected.items()}


def test_a_slice_of_a_batch_writes_only_its_own_rows() -> None:
    rows = [{"topic": "t", "key": None, "value": f'{{"n":{n}}}', "headers": [], "table": "s.t", "op": "c",
             "commit_lsn": n, "lsn": n, "serial": 0, "source_ts_ms": 0, "value_binary": None} for n in range(6)]
    [(topic, lines, count)] = list(lines_by_topic(_batch(rows).slice(2, 3)))
    assert (topic, count) == ("t", 3)
    assert bytes(lines).decode().splitlines() == [record_line(row) for row in rows[2:5]]


def _files_lines(tmp_path: Any, batches: list[pa.RecordBatch]) -> dict[str, bytes]:
    from cdckit.spark.sinks.jsonl import TopicFiles

    counts = TopicFiles(str(tmp_path), "stream-000000000001-00000").write_all(batches)
    return {topic: (tmp_path / topic / "stream-000000000001-00000.jsonl").read_bytes() for topic in counts}


def test_files_handed_to_the_disk_while_written_hold_every_line_once(tmp_path: Any, monkeypatch: Any) -> None:
    import os

    from cdckit.spark.sinks import jsonl

    rows = [{"topic": f"shop.public.t{n % 2}", "key": json.dumps({"id": n}), "value": json.dumps({"v": "x" * 300}),
             "headers": None, "table": "public.t", "op": "c", "commit_lsn": 1, "lsn": n, "serial": 0,
             "source_ts_ms": 0, "value_binary": None} for n in range(400)]
    batches = [_batch(rows[start:start + 20]) for start in range(0, len(rows), 20)]
    expected = {topic: "".join(record_line(row) + "\n" for row in rows if row["topic"] == topic).encode()
                for topic in ("shop.public.t0", "shop.public.t1")}
    handed: list[tuple[int, int, int]] = []
    ranges: dict[int, list[tuple[int, int]]] = {}
    real = os.posix_fadvise

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        handed.append((fd, length, advice))
        ranges.setdefault(fd, []).append((offset, offset + length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(jsonl, "direct_writes_suit", lambda folder: False)  # a file system written through the cache
    monkeypatch.setattr(jsonl, "WRITE_BEHIND_BYTES", 4096)
    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    assert _files_lines(tmp_path / "behind", batches) == expected
    # each file (about 64 KB) was handed to the disk as it grew, not only synced at the end
    assert len(handed) >= 2 * 10 and {advice for _, _, advice in handed} == {os.POSIX_FADV_DONTNEED}
    assert len({fd for fd, _, _ in handed}) == 2
    for advised in ranges.values():  # each time the new pages and those handed the time before, not the whole file
        ends = [0, 0] + [end for _, end in advised]
        assert [start for start, _ in advised] == ends[:-2] and all(a < b for a, b in itertools.pairwise(ends[1:]))

    def refused(fd: int, offset: int, length: int, advice: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refused)  # a file system that refuses the advice
    assert _files_lines(tmp_path / "refused", batches) == expected
    monkeypatch.delattr(os, "posix_fadvise")  # a platform without it: written, synced and renamed all the same
    assert _files_lines(tmp_path / "plain", batches) == expected


def _rows_of_sizes(sizes: list[int]) -> list[dict[str, Any]]:
    return [{"topic": f"shop.public.t{n % 2}", "key": json.dumps({"id": n}), "value": json.dumps({"v": "é" * size}),
             "headers": None, "table": "public.t", "op": "c", "commit_lsn": 1, "lsn": n, "serial": 0,
             "source_ts_ms": 0, "value_binary": None} for n, size in enumerate(sizes)]


def _direct_writes_or_skip(folder: Any) -> None:
    import os

    from cdckit.spark.sinks.jsonl import direct_writes_suit

    folder.mkdir(parents=True, exist_ok=True)
    if not direct_writes_suit(folder):
        pytest.skip(f"{folder} is not on a local disk's file system (ext4, XFS, Btrfs), which direct writes need")
    fd = os.open(folder / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    os.close(fd)


def _direct_writes(monkeypatch: Any) -> list[tuple[int, int, bool]]:
    """Each ``os.pwrite`` as (offset, bytes, whether its file was opened with ``O_DIRECT``)."""
    import fcntl
    import os

    calls: list[tuple[int, int, bool]] = []
    real = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        calls.append((offset, len(memoryview(data)), bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    return calls


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3000), max_size=12), max_size=6))
def test_files_written_past_the_page_cache_hold_every_line_once(tmp_path_factory: Any, sizes: list[list[int]]
                                                                ) -> None:
    from cdckit.spark.sinks import jsonl

    folder = tmp_path_factory.mktemp("direct")
    _direct_writes_or_skip(folder)
    batches = [_batch(_rows_of_sizes(each)) for each in sizes]
    rows = [row for each in sizes for row in _rows_of_sizes(each)]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(jsonl, "DIRECT_STAGE_BYTES", 8192)  # lines that cross the aligned buffer's end
        calls = _direct_writes(monkeypatch)
        written = _files_lines(folder, batches)
    assert written == {topic: "".join(record_line(row) + "\n" for row in rows if row["topic"] == topic).encode()
                       for topic in {row["topic"] for row in rows}}
    # whole blocks written directly from the aligned buffer, at most a partial block at the end through the cache
    for offset, length, direct in calls:
        assert (direct and offset % 4096 == 0 and length % 4096 == 0 and 0 < length <= 8192) or (
            not direct and length < 4096)
    assert sum(length for _, length, direct in calls if direct) >= sum(map(len, written.values())) - 2 * 4096


def test_a_refused_direct_write_writes_the_rest_through_the_page_cache(tmp_path: Any, monkeypatch: Any) -> None:
    import errno
    import os

    from cdckit.spark.sinks import jsonl

    _direct_writes_or_skip(tmp_path)
    rows = _rows_of_sizes([2000] * 40)
    calls = _direct_writes(monkeypatch)
    spied = os.pwrite
    refused = []

    def refuse_direct(fd: int, data: Any, offset: int) -> int:
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT and not refused:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")  # as a file system that takes no direct write
        return spied(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", refuse_direct)
    monkeypatch.setattr(jsonl, "DIRECT_STAGE_BYTES", 16384)
    written = _files_lines(tmp_path, [_batch(rows[:20]), _batch(rows[20:])])
    assert written == {topic: "".join(record_line(row) + "\n" for row in rows if row["topic"] == topic).encode()
                       for topic in ("shop.public.t0", "shop.public.t1")}
    assert refused == [0]
    assert any(direct for _, _, direct in calls)  # the other topic's file went on writing directly


def test_files_on_other_file_systems_are_written_through_the_page_cache(tmp_path: Any) -> None:
    from pathlib import Path

    from cdckit.spark.sinks.jsonl import direct_writes_suit

    assert not direct_writes_suit(Path("/proc"))  # procfs: not a local disk's file system
    assert not direct_writes_suit(tmp_path / "missing")  # a folder statfs cannot find


def _written_directly(folder: Any, direct: str | None) -> bool:
    """Whether a task's files under ``folder`` were written past the page cache with ``cdckit.files.direct.writes``
    set to ``direct`` (None: unset); they hold their lines either way."""
    from cdckit.spark.sinks.jsonl import TopicFiles

    rows = _rows_of_sizes([3000] * 8)
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = _direct_writes(monkeypatch)
        TopicFiles(str(folder), "stream-1", direct=direct).write_all([_batch(rows)])
    assert {path.parent.name: path.read_bytes() for path in folder.glob("*/stream-1.jsonl")} == {
        topic: "".join(record_line(row) + "\n" for row in rows if row["topic"] == topic).encode()
        for topic in ("shop.public.t0", "shop.public.t1")}
    return any(direct for _, _, direct in calls)


def test_direct_writes_follow_the_setting(tmp_path: Any, monkeypatch: Any) -> None:
    from cdckit.spark.sinks import jsonl

    _direct_writes_or_skip(tmp_path)  # a local disk's file system, which auto writes directly
    assert _written_directly(tmp_path / "auto", "auto")
    assert _written_directly(tmp_path / "true", "true")
    assert not _written_directly(tmp_path / "false", "false")
    assert _written_directly(tmp_path / "unset", None) is (jsonl.direct_writes({}) != "false")
    monkeypatch.setattr(jsonl, "direct_writes_suit", lambda folder: False)  # as NFS, tmpfs or FUSE
    assert not _written_directly(tmp_path / "auto-elsewhere", "auto")
    assert _written_directly(tmp_path / "true-elsewhere", "true")


def test_true_where_the_file_system_refuses_direct_writes_writes_through_the_page_cache(tmp_path: Any,
                                                                                         monkeypatch: Any) -> None:
    import errno
    import os

    real = os.open

    def refusing(path: Any, flags: int, mode: int = 0o777) -> int:
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")  # as a file system without O_DIRECT
        return real(path, flags, mode)

    monkeypatch.setattr(os, "open", refusing)
    assert not _written_directly(tmp_path, "true")
    assert not list(tmp_path.glob("*/.*.tmp"))


def test_the_setting_is_auto_true_or_false() -> None:
    from cdckit.config import validate
    from cdckit.errors import ConfigurationError
    from cdckit.spark.sinks.jsonl import direct_writes

    base = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db",
            "database.user": "u", "database.password": "p", "database.dbname": "d", "topic.prefix": "t"}
    assert validate(base).str("cdckit.files.direct.writes") == direct_writes({})
    assert validate({**base, "cdckit.files.direct.writes": "false"}).str("cdckit.files.direct.writes") == "false"
    assert direct_writes({"cdckit.files.direct.writes": "true"}) == "true"
    with pytest.raises(ConfigurationError) as info:
        validate({**base, "cdckit.files.direct.writes": "always"})
    assert info.value.problems == ["cdckit.files.direct.writes='always' is not one of: auto, true, false"]
