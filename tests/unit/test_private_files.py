"""The files cdckit writes itself on the driver (state, status and offset documents, and the folders it makes for
them) are its owner's only, are written through an exclusive temporary file of an unpredictable name, and follow
no symbolic link planted at a temporary or final path.

The finding this reproduces: these files were 0644 in 0755 folders, and ``<name>.tmp`` (a predictable name) was
opened without O_EXCL/O_NOFOLLOW: a link planted there had its target overwritten, and was then renamed into place."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdckit.fsutil import private_folder, write_private
from cdckit.observe.publish import STATUS_FILE, Observer
from cdckit.state import StateStore

PG = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "topic.prefix": "it"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(params=[0o022, 0o002, 0o000], ids=lambda umask: f"umask-{umask:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the checkpoint a planted link points at: it must never change."""
    path = tmp_path / "victim"
    path.write_text("precious")
    return path


def test_state_documents_are_0600_in_0700_folders_the_store_creates(tmp_path: Path, umask: int) -> None:
    store = StateStore(str(tmp_path / "checkpoint"))
    store.write_json("snapshot/chunks/0001.json", {"chunk": 1})
    store.write_json("stream/offsets.json", {"lsn": 7})
    store.write_json("snapshot/chunks/0001.json", {"chunk": 2})  # replaced: a new file, 0600 again
    for folder in ("checkpoint", "checkpoint/snapshot", "checkpoint/snapshot/chunks", "checkpoint/stream"):
        assert _mode(tmp_path / folder) == 0o700, folder
    for document in ("snapshot/chunks/0001.json", "stream/offsets.json"):
        assert _mode(tmp_path / "checkpoint" / document) == 0o600, document
    assert store.read_json("snapshot/chunks/0001.json") == {"chunk": 2}
    assert sorted(os.listdir(tmp_path / "checkpoint/snapshot/chunks")) == ["0001.json"]  # no temporary file left


def test_an_existing_folder_is_left_as_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "checkpoint"
    shared.mkdir(mode=0o750)
    os.chmod(shared, 0o750)  # e.g. the checkpoint location a deployment made for a group
    StateStore(str(shared)).write_json("status.json", {"running": True})
    assert _mode(shared) == 0o750
    assert _mode(shared / "status.json") == 0o600


def test_the_status_file_is_0600(tmp_path: Path) -> None:
    observer = Observer({**PG, "cdckit.checkpoint.location": str(tmp_path / "checkpoint")}, ["inventory"],
                        json_lines=False)
    observer.publish("idle")
    assert _mode(tmp_path / "checkpoint" / STATUS_FILE) == 0o600
    assert _mode(tmp_path / "checkpoint") == 0o700


def test_a_link_planted_at_the_old_temporary_name_or_the_final_name_is_not_followed(tmp_path: Path,
                                                                                      victim: Path) -> None:
    folder = tmp_path / "checkpoint" / "snapshot"
    folder.mkdir(parents=True)
    (folder / ".state.json.tmp").symlink_to(victim)  # the name the store used to write through
    (folder / "state.json").symlink_to(victim)
    StateStore(str(tmp_path / "checkpoint")).write_json("snapshot/state.json", {"status": "started"})
    assert victim.read_text() == "precious"
    assert not (folder / "state.json").is_symlink() and _mode(folder / "state.json") == 0o600
    assert json.loads((folder / "state.json").read_text()) == {"status": "started"}
    assert (folder / ".state.json.tmp").is_symlink()  # left alone, neither written through nor renamed


def test_a_link_planted_at_the_very_temporary_name_chosen_is_not_opened(tmp_path: Path, victim: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a link at the name the random generator picks first (here: made known) is skipped, not opened."""
    names = iter(["planted", "fresh", "other"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    (tmp_path / ".status.json.planted.tmp").symlink_to(victim)
    write_private(tmp_path / "status.json", b"{}")
    assert victim.read_text() == "precious"
    assert (tmp_path / "status.json").read_bytes() == b"{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".status.json.planted.tmp", "status.json", "victim"]


def test_a_failed_write_leaves_neither_a_temporary_file_nor_a_changed_document(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    write_private(tmp_path / "state.json", b"old")

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        write_private(tmp_path / "state.json", b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert (tmp_path / "state.json").read_bytes() == b"old"


def test_a_link_where_a_folder_is_made_is_refused_when_asked(tmp_path: Path, victim: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "superseded").symlink_to(elsewhere)
    with pytest.raises(FileExistsError, match="a symbolic link stands where cdckit makes a folder"):
        private_folder(tmp_path / "superseded", follow_link=False)
    assert private_folder(tmp_path / "superseded") == tmp_path / "superseded"  # the default: a linked folder is used
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        private_folder(tmp_path / "file")


def test_superseded_files_are_not_moved_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from cdckit.config import validate
    from cdckit.pipelines.postgres import set_aside_written_files

    config = validate({**PG, "database.hostname": "db", "database.user": "u", "database.password": "p",
                       "database.dbname": "shop", "cdckit.output.path": str(tmp_path / "out")})
    topic = tmp_path / "out" / "it.public.items"
    topic.mkdir(parents=True)
    (topic / "snapshot-00000.jsonl").write_text("{}\n")
    monkeypatch.setattr(time, "strftime", lambda *args: "20250101T000000Z")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (topic / "superseded-20250101T000000Z").symlink_to(elsewhere)
    with pytest.raises(FileExistsError):
        set_aside_written_files(config)
    assert list(elsewhere.iterdir()) == [] and (topic / "snapshot-00000.jsonl").exists()
    (topic / "superseded-20250101T000000Z").unlink()
    set_aside_written_files(config)
    assert (topic / "superseded-20250101T000000Z" / "snapshot-00000.jsonl").exists()
    assert _mode(topic / "superseded-20250101T000000Z") == 0o700
