"""The source's row estimate of a table (the snapshot's ``EstimatedRows``, its progress bars, ``cdckit status``)
as PostgreSQL's planner makes it: also for a table no VACUUM or ANALYZE has seen yet, whose ``reltuples`` is -1
(PostgreSQL 14+) or 0."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, make_config

from cdckit.dialect.postgres.catalog import load_table
from cdckit.pipelines.postgres import _table_estimates

pytestmark = pytest.mark.postgres
ROWS = 20000


def test_a_table_never_analysed_has_an_estimate_near_its_rows(postgres: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.fresh (id integer PRIMARY KEY, note text, amount numeric(10, 2)) "
                 "WITH (autovacuum_enabled = false)",
            f"INSERT INTO public.fresh SELECT g, 'note ' || g, g / 100.0 FROM generate_series(1, {ROWS}) g",
            "CREATE TABLE public.empty (id integer PRIMARY KEY) WITH (autovacuum_enabled = false)")
    options = make_config(postgres, database, workdir).as_properties(include_secrets=True)
    with closing(psycopg2.connect(dsn)) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT reltuples FROM pg_class WHERE relname = 'fresh'")
            assert cur.fetchone()[0] <= 0  # never analysed: -1 (PostgreSQL 14+) or 0
        fresh = load_table(conn, "public", "fresh", options).estimated_rows
        assert ROWS / 2 <= fresh <= ROWS * 2, fresh
        assert load_table(conn, "public", "empty", options).estimated_rows == 0
        assert _table_estimates(conn, ["public.fresh", "public.empty"]) == {"public.fresh": fresh, "public.empty": 0}
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ANALYZE public.fresh")
        assert load_table(conn, "public", "fresh", options).estimated_rows == ROWS  # analysed: the planner's count
