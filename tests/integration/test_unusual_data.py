"""Unusual data: text that is not valid UTF-8 (a SQL_ASCII database) and very large values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest
from helpers import execute, make_config, payload, records

from cdckit.errors import CdcKitError
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_text_that_is_not_utf8_is_refused_naming_table_and_column(postgres: Any, spark: Any, workdir: Path) -> None:
    conn = psycopg2.connect(postgres.dsn("postgres"))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS latin_bytes")
        cur.execute("CREATE DATABASE latin_bytes ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    conn.close()
    dsn = postgres.dsn("latin_bytes")
    execute(dsn, "CREATE TABLE public.notes (id int PRIMARY KEY, body text)",
            "INSERT INTO public.notes VALUES (1, 'plain')")
    config = make_config(postgres, "latin_bytes", workdir)
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.notes VALUES (2, E'caf\\xe9')")  # byte 0xE9: Latin-1, not UTF-8
    with pytest.raises(CdcKitError) as failure:
        run_stream(spark, config)
    message = str(failure.value)
    assert "table public.notes, column 'body' holds bytes that are not UTF-8" in message
    assert "column.exclude.list" in message
    # nothing was skipped: with the column left out, the same change comes through
    relaxed = make_config(postgres, "latin_bytes", workdir, **{"column.exclude.list": "public\\.notes\\.body"})
    run_stream(spark, relaxed)
    ids = [payload(r["value"])["after"]["id"] for r in records(config, "it.public.notes") if r["value"]]
    assert ids == [1, 2]
    # the same in a snapshot: one clear line
    execute(dsn, "CREATE TABLE public.more (id int PRIMARY KEY, body text)",
            "INSERT INTO public.more VALUES (1, E'\\xff')")
    fresh = make_config(postgres, "latin_bytes", workdir / "fresh", **{
        "table.include.list": "public\\.more", "slot.name": "slot_more", "publication.name": "pub_more"})
    with pytest.raises(CdcKitError, match=r"table public\.more holds text that is not UTF-8"):
        run_snapshot(spark, fresh)


def test_very_large_values_stream_whole(postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.blobs (id int PRIMARY KEY, body text, data bytea)")
    config = make_config(postgres, database, workdir)
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.blobs SELECT 1, repeat('x', 20000000), decode(repeat('ab', 5000000), 'hex')")
    run_stream(spark, config)
    found = [payload(r["value"])["after"] for r in records(config, "it.public.blobs") if r["value"]]
    assert len(found) == 1 and len(found[0]["body"]) == 20_000_000
    assert len(found[0]["data"]) == 6_666_668  # base64 of 5,000,000 bytes
