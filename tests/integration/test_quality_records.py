"""Reading a files-sink folder back for the quality suites: many files read by a few tasks in consumer order, and
a line that is not a JSON record (or a binary value) is one clear error naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdckit.cli import main
from cdckit.quality.records import read_files

pytestmark = [pytest.mark.spark, pytest.mark.version_neutral]


def _record(topic: str, key: int, number: int) -> str:
    return json.dumps({"topic": topic, "key": {"id": key}, "value": {"op": "u", "after": {"id": key, "n": number}}})


def test_many_record_files_are_read_by_a_few_tasks_in_consumer_order(spark: Any, workdir: Path) -> None:
    expected: dict[str, list[int]] = {}
    for topic in ("db.public.a", "db.public.b", "db.public.c"):
        folder = workdir / "out" / topic
        folder.mkdir(parents=True)
        number = 0
        # snapshot files come before stream files, whatever their names' order; lines in their order
        names = [f"snapshot-{i:05d}.jsonl" for i in range(4)] + [f"stream-{i:012d}-00000.jsonl" for i in range(8)]
        for name in names:
            lines = []
            for _ in range(25):
                lines.append(_record(topic, number % 7, number))
                expected.setdefault(topic, []).append(number)
                number += 1
            (folder / name).write_text("\n".join(lines) + "\n")
    records = read_files(spark, str(workdir / "out"))
    assert records.rdd.getNumPartitions() <= max(2, spark.sparkContext.defaultParallelism)  # not one per file
    rows = records.orderBy("topic", "part", "seq").select("topic", "value").toLocalIterator()
    seen: dict[str, list[int]] = {}
    for row in rows:
        seen.setdefault(row["topic"], []).append(json.loads(row["value"])["after"]["n"])
    assert seen == expected


@pytest.mark.parametrize(("line", "message"), [
    ('{"topic": "db.public.a", "key": {"id": 1}, "value": {"op": "c"', "line 3 is not JSON"),
    ('{"topic": "db.public.a", "key": null, "value": "AAE=", "valueEncoding": "base64"}', "holds binary (Avro)"),
])
def test_a_line_that_is_not_a_json_record_is_one_clear_error(spark: Any, workdir: Path, line: str, message: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = workdir / "out" / "db.public.a"
    folder.mkdir(parents=True)
    (folder / "stream-000000000000-00000.jsonl").write_text(
        "\n".join([_record("db.public.a", 1, 1), _record("db.public.a", 2, 2), line]) + "\n")
    status = main(["quality", "--input", str(workdir / "out"), "--report", str(workdir / "report")])
    output = capsys.readouterr().out
    assert status == 2
    errors = [text for text in output.splitlines() if text.startswith("cdckit: error:")]
    assert len(errors) == 1 and message in errors[0] and "stream-000000000000-00000.jsonl" in errors[0], output
    assert "Traceback" not in output
