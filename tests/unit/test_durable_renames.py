"""A file renamed into place survives a power cut only once its folder is synced, and a new folder once its parent
is: the files sink's files (``TopicFiles.commit``, before the batch is reported written and the source's position
moves past it), cdckit's own documents (``write_private``) and the folders made for them (``private_folder``).

Each ``os.fsync`` of a folder and each ``os.replace`` is recorded in order; a folder is told apart from a file by
``os.fstat``."""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from cdckit.fsutil import private_folder, sync_folder, write_private
from cdckit.spark.rows import EVENT_COLUMNS, event_arrow_schema
from cdckit.spark.sinks.jsonl import TopicFiles

Events = list[tuple[str, Path]]


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Events:
    """("sync", folder) for each folder synced, ("rename", final path) for each file renamed into place."""
    recorded: Events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            recorded.append(("sync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(source: str | Path, target: str | Path) -> None:
        real_replace(source, target)
        recorded.append(("rename", Path(target)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return recorded


def _synced(events: Events) -> Counter[Path]:
    return Counter(path for kind, path in events if kind == "sync")


def _rows(topics: list[str]) -> pa.RecordBatch:
    rows = [{"topic": topic, "key": json.dumps({"id": n}), "value": json.dumps({"v": n}), "headers": None,
             "table": "public.t", "op": "c", "commit_lsn": 1, "lsn": n, "serial": 0, "source_ts_ms": 0,
             "value_binary": None} for n, topic in enumerate(topics)]
    return pa.RecordBatch.from_pylist([{name: row[name] for name in EVENT_COLUMNS} for row in rows],
                                      schema=event_arrow_schema())


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd") or not hasattr(os, "O_DIRECTORY"),
                                reason="a folder's descriptor is named through /proc/self/fd (Linux)")


@pytest.mark.parametrize("direct", ["true", "false"])
def test_a_commit_syncs_each_files_folder_once_after_its_rename(tmp_path: Path, events: Events,
                                                                direct: str) -> None:
    tmp_path = tmp_path.resolve()
    output = tmp_path / "out"
    batches = [_rows(["p.a", "p.b", "p.a"]), _rows(["p.b", "p.a"])]
    assert TopicFiles(str(output), "stream-000000000001-00000", direct=direct).write_all(batches) == {
        "p.a": 3, "p.b": 2}
    # the new folders' entries: the output's in its parent, the topics' in the output, each parent synced once, by
    # the commit
    assert _synced(events) == {tmp_path: 1, output: 1, output / "p.a": 1, output / "p.b": 1}
    for topic in ("p.a", "p.b"):
        final = output / topic / "stream-000000000001-00000.jsonl"
        renamed = events.index(("rename", final))
        assert events.index(("sync", output / topic)) > renamed  # after the rename, before commit returns
    assert [kind for kind, _ in events[-2:]] == ["sync", "sync"]  # both renames, then both folders

    events.clear()  # the next batch: the folders exist, only the files' folders are synced, once each
    TopicFiles(str(output), "stream-000000000002-00000", direct=direct).write_all(batches)
    assert _synced(events) == {output / "p.a": 1, output / "p.b": 1}
    assert [kind for kind, _ in events] == ["rename", "rename", "sync", "sync"]


def test_a_commit_of_many_topics_syncs_every_folder_once_after_every_rename(tmp_path: Path, events: Events) -> None:
    # a snapshot task of many small tables: its files and folders are synced several at a time
    tmp_path = tmp_path.resolve()
    output = tmp_path / "out"
    topics = [f"p.t{i:02d}" for i in range(40)]
    assert TopicFiles(str(output), "snapshot-00000").write_all([_rows(topics + topics[:5])]) == {
        **{topic: 1 for topic in topics}, **{topic: 2 for topic in topics[:5]}}
    assert _synced(events) == {tmp_path: 1, output: 1, **{output / topic: 1 for topic in topics}}
    last_rename = max(i for i, (kind, _) in enumerate(events) if kind == "rename")
    assert all(kind == "sync" for kind, _ in events[last_rename + 1:]) and len(events) == last_rename + 1 + 42
    assert sorted(path.name for kind, path in events if kind == "rename") == ["snapshot-00000.jsonl"] * 40


def test_a_failed_folder_sync_fails_the_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from cdckit.errors import SinkWriteError

    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    private_folder(tmp_path / "out" / "p.a")
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(SinkWriteError, match="Input/output error"):
        TopicFiles(str(tmp_path / "out"), "stream-1").write_all([_rows(["p.a"])])


def test_a_folder_that_cannot_be_synced_is_left_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def fsync(fd: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")  # as some network and FUSE file systems answer

    monkeypatch.setattr(os, "fsync", fsync)
    sync_folder(tmp_path)


def test_a_document_is_renamed_then_its_folder_synced(tmp_path: Path, events: Events) -> None:
    tmp_path = tmp_path.resolve()
    document = tmp_path / "state" / "offsets" / "1.json"
    write_private(document, b"{}")
    assert events == [("sync", tmp_path), ("sync", tmp_path / "state"),  # the new folders' parents
                      ("rename", document), ("sync", document.parent)]
    events.clear()
    write_private(document, b"{}")
    assert events == [("rename", document), ("sync", document.parent)]


def test_a_folder_made_is_synced_in_its_parent_once(tmp_path: Path, events: Events) -> None:
    tmp_path = tmp_path.resolve()
    private_folder(tmp_path / "a" / "b")
    assert events == [("sync", tmp_path), ("sync", tmp_path / "a")]
    events.clear()
    private_folder(tmp_path / "a" / "b")  # there already: nothing to sync
    assert events == []
