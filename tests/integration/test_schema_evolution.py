"""Schema changes while the PostgreSQL stream runs: every event is formatted with the structure it was written
with; each change is recorded in the schema history and announced on the schema change topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config, payload, records

from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _fields(record: dict[str, Any]) -> list[tuple[str, str]]:
    after = record["value"]["schema"]["fields"][1]["fields"]
    return [(f["field"], f["type"]) for f in after]


def test_add_rename_drop_and_retype_columns_while_streaming(postgres: Any, spark: Any, database: str,
                                                           workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.items (id integer PRIMARY KEY, a text)")
    config = make_config(postgres, database, workdir, **{"include.schema.changes": "true"})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.items VALUES (1, 'x')",
            "ALTER TABLE public.items ADD COLUMN b integer",
            "INSERT INTO public.items VALUES (2, 'y', 5)")
    run_stream(spark, config)
    # a restart in between: the history carries over
    execute(dsn, "ALTER TABLE public.items RENAME COLUMN a TO a2", "INSERT INTO public.items VALUES (3, 'z', 6)",
            "ALTER TABLE public.items DROP COLUMN b", "INSERT INTO public.items VALUES (4, 'w')",
            "ALTER TABLE public.items ALTER COLUMN id TYPE bigint", "INSERT INTO public.items VALUES (5, 'v')")
    run_stream(spark, config)
    found = [r for r in records(config, "it.public.items") if r["value"] is not None]
    assert [payload(r["value"])["after"] for r in found] == [
        {"id": 1, "a": "x"}, {"id": 2, "a": "y", "b": 5}, {"id": 3, "a2": "z", "b": 6}, {"id": 4, "a2": "w"},
        {"id": 5, "a2": "v"}]
    assert [_fields(r) for r in found] == [
        [("id", "int32"), ("a", "string")], [("id", "int32"), ("a", "string"), ("b", "int32")],
        [("id", "int32"), ("a2", "string"), ("b", "int32")], [("id", "int32"), ("a2", "string")],
        [("id", "int64"), ("a2", "string")]]
    changes = [payload(r["value"])["tableChanges"][0] for r in records(config, "it")]
    assert [c["type"] for c in changes] == ["CREATE", "ALTER", "ALTER", "ALTER", "ALTER"]
    assert [[col["name"] for col in c["table"]["columns"]] for c in changes[1:]] == [
        ["id", "a", "b"], ["id", "a2", "b"], ["id", "a2"], ["id", "a2"]]
    assert changes[-1]["table"]["columns"][0]["typeName"] == "int8"
    history = (workdir / "checkpoint" / "schema-history.json").read_text()
    assert history.count('"columns"') == 5
