"""Hostile identifiers and values on a real PostgreSQL: quoted, bound, captured as they are, nothing else run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config, payload, records

from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_hostile_names_and_values_are_captured_and_never_executed(postgres: Any, spark: Any, database: str,
                                                                  workdir: Path) -> None:
    dsn = postgres.dsn(database)
    value = "'); DROP TABLE public.canary; --"
    execute(dsn, "CREATE TABLE public.canary (id int PRIMARY KEY)",
            'CREATE SCHEMA "Sales Ünï"',
            'CREATE TABLE "Sales Ünï"."order""s; DROP TABLE public.canary; --" ("select" int PRIMARY KEY, '
            '"we""ird col" text, "from" text)',
            f"INSERT INTO \"Sales Ünï\".\"order\"\"s; DROP TABLE public.canary; --\" VALUES (1, 'a', "
            f"'{value.replace(chr(39), chr(39) * 2)}')")
    config = make_config(postgres, database, workdir, **{"table.include.list": "Sales Ünï\\..*"})
    run_snapshot(spark, config)
    execute(dsn, 'UPDATE "Sales Ünï"."order""s; DROP TABLE public.canary; --" SET "we""ird col" = \'b\'',
            'DELETE FROM "Sales Ünï"."order""s; DROP TABLE public.canary; --"')
    run_stream(spark, config)
    assert fetch(dsn, "SELECT count(*) FROM public.canary") == [(0,)]  # still there
    topics = [p.name for p in (workdir / "out").iterdir()]
    assert len(topics) == 1
    found = [payload(r["value"]) for r in records(config, topics[0]) if r["value"] is not None]
    assert [e["op"] for e in found] == ["r", "u", "d"]
    assert found[0]["after"] == {"select": 1, "we\"ird col": "a", "from": value}
    assert found[1]["after"]["we\"ird col"] == "b"
    assert found[0]["source"]["schema"] == "Sales Ünï"
    assert found[0]["source"]["table"] == 'order"s; DROP TABLE public.canary; --'
