"""The captured rows on disk are their owner's alone: the files sink's files, their folders, and Spark's checkpoint
(a local file system here) get cdckit.files.mode (0600, folders 0700, by default), and a link planted at a file's
temporary name is not written through."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import execute, make_config

from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit.spark.rows import EVENT_COLUMNS, event_arrow_schema
from cdckit.spark.sinks.jsonl import TopicFiles

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _modes(root: Path) -> tuple[set[int], set[int]]:
    files = {stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}
    folders = {stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")] if p.is_dir()}
    return files, folders


def test_outputs_and_checkpoints_get_the_files_mode(postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    # the group may read them here (640): the setting's own mode, not only the default's
    mode, file_mode, folder_mode = "640", 0o640, 0o750
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.items (id int PRIMARY KEY, secret text)",
            "INSERT INTO public.items VALUES (1, 'payroll')")
    config = make_config(postgres, database, workdir, **{"cdckit.files.mode": mode})
    previous = os.umask(0o022)  # a usual umask, which alone would make them world-readable
    try:
        run_snapshot(spark, config)
        execute(dsn, "INSERT INTO public.items VALUES (2, 'bonus')")
        run_stream(spark, config)
    finally:
        os.umask(previous)
    props = config.as_properties()
    output = Path(props["cdckit.output.path"])
    files, folders = _modes(output)
    assert files == {file_mode} and folders == {folder_mode}, (files, folders)
    checkpoint = Path(props["cdckit.checkpoint.location"])
    offsets = [p for p in checkpoint.rglob("*") if p.is_file() and p.parent.name in ("offsets", "commits")]
    assert offsets and {stat.S_IMODE(p.stat().st_mode) for p in offsets} == {file_mode}
    assert {stat.S_IMODE(p.stat().st_mode) for p in checkpoint.rglob("offsets")} == {folder_mode}


def test_a_link_planted_at_the_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    # a link leading outside the output is refused before anything is written (test_topic_names); one leading to
    # another file inside it is removed, not followed
    output = tmp_path / "out"
    victim = output / "p.public.other" / "stream-0.jsonl"
    victim.parent.mkdir(parents=True)
    victim.write_text("untouched")
    (output / "p.public.items").mkdir()
    (output / "p.public.items" / ".stream-1.jsonl.tmp").symlink_to(victim)
    row = dict.fromkeys(EVENT_COLUMNS)
    row.update({"topic": "p.public.items", "value": '{"a":1}', "op": "c"})
    TopicFiles(str(output), "stream-1").write_all([pa.RecordBatch.from_pylist([row], schema=event_arrow_schema())])
    assert victim.read_text() == "untouched"
    written = output / "p.public.items" / "stream-1.jsonl"
    assert written.read_text().strip() and stat.S_IMODE(written.stat().st_mode) == 0o600  # the default
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o755  # made before: kept as it was
    assert not written.is_symlink()
    fresh = output / "p.public.fresh"
    row["topic"] = "p.public.fresh"
    TopicFiles(str(output), "stream-2").write_all([pa.RecordBatch.from_pylist([row], schema=event_arrow_schema())])
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
