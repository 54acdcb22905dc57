"""The snapshot's COPY reader (``read_chunk_columns``) against a query's rows (``read_chunk_blocks``) on a real
server: the same text of every value, in the same order, with NULL and the empty string kept apart, for text with
every character CSV quotes, a one-column table of NULLs, rows longer than the CSV reader's block, a chunk spooled to
disk, and any block size."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import pytest
from helpers import execute, make_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdckit.dialect.postgres import snapshot
from cdckit.dialect.postgres.catalog import load_table
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.snapshot import SnapshotChunk, read_chunk_blocks, read_chunk_columns

pytestmark = [pytest.mark.postgres]

AWKWARD = ["", None, ",", '"', '""', "a,b", 'say "hi"', "tab\there", "line\nbreak", "cr\rlf\r\n", "back\\slash",
           "\\N", "NULL", " padded ", "\n", "é ü 😀", "'quoted'", "{braces}", "x" * 5000]


@contextmanager
def exported(dsn: str) -> Iterator[str]:
    """An exported snapshot, held while the block runs."""
    with closing(psycopg2.connect(dsn)) as holder:
        holder.set_session(isolation_level="REPEATABLE READ")
        with holder.cursor() as cur:
            cur.execute("SELECT pg_export_snapshot()")
            yield cur.fetchone()[0]


def _read_both(options: dict[str, str], dsn: str, name: str, block_rows: int) -> tuple[list[tuple[Any, ...]], ...]:
    with closing(connect(options)) as conn:
        table = load_table(conn, "public", name, options)
    chunk = SnapshotChunk("public", name, 0, "all", None, None)
    with exported(dsn) as snapshot_name:
        blocks = list(read_chunk_columns(options, snapshot_name, table, chunk, block_rows))
        reference = [row for block in read_chunk_blocks(options, snapshot_name, table, chunk, 7) for row in block]
    assert all(0 < len(next(iter(block.values()))) <= block_rows for block in blocks)
    copied = [row for block in blocks for row in zip(*[column.to_pylist() for column in block.values()], strict=True)]
    return copied, reference


def _options(postgres: Any, database: str, workdir: Path) -> dict[str, str]:
    return make_config(postgres, database, workdir).as_properties(include_secrets=True)


@pytest.mark.parametrize("block_rows", [1, 4, 10_000])
def test_copy_gives_the_text_a_query_gives(postgres: Any, database: str, workdir: Path, block_rows: int) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.awkward (id int PRIMARY KEY, body text, tags text[], doc jsonb, amount numeric, "
                 "at timestamptz)")
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        for i, value in enumerate(AWKWARD):
            cur.execute("INSERT INTO public.awkward VALUES (%s, %s, %s, %s, %s, now())",
                        (i, value, None if value is None else [value, "b"],
                         None if value is None else psycopg2.extras.Json({"v": value}), i / 3 if i % 2 else None))
        conn.commit()
    copied, reference = _read_both(_options(postgres, database, workdir), postgres.dsn(database), "awkward", block_rows)
    assert len(copied) == len(AWKWARD)
    assert copied == reference
    bodies = {row[0]: row[1] for row in copied}
    assert bodies["0"] == "" and bodies["1"] is None and bodies["9"] == "cr\rlf\r\n"


def test_a_one_column_table_of_nulls_keeps_every_row(postgres: Any, database: str, workdir: Path) -> None:
    # each NULL row of a one-column table is an empty line in the COPY output
    execute(postgres.dsn(database), "CREATE TABLE public.single (v text)",
            "INSERT INTO public.single VALUES (NULL), (''), (NULL), ('x'), (NULL)")
    copied, reference = _read_both(_options(postgres, database, workdir), postgres.dsn(database), "single", 2)
    assert copied == reference == [(None,), ("",), (None,), ("x",), (None,)]


def test_rows_longer_than_a_block_and_a_chunk_spooled_to_disk(postgres: Any, database: str, workdir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "CSV_BLOCK_BYTES", 4096)  # rows 2 and 40 are longer than a block
    monkeypatch.setattr(snapshot, "SPOOL_MEMORY", 10_000)  # and the chunk goes to a temporary file
    execute(postgres.dsn(database), "CREATE TABLE public.wide (id int PRIMARY KEY, body text)",
            "INSERT INTO public.wide SELECT g, CASE WHEN g IN (2, 40) THEN repeat(E'ab\\n,\"', 3000) ELSE 'r' || g END "
            "FROM generate_series(1, 60) g")
    copied, reference = _read_both(_options(postgres, database, workdir), postgres.dsn(database), "wide", 7)
    assert [row[0] for row in copied] == [str(g) for g in range(1, 61)]
    assert copied == reference
    assert len(copied[1][1]) == 15_000


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs",),
                                                                  blacklist_characters="\x00"), max_size=40)),
                       min_size=1, max_size=30))
def test_any_text_reads_the_same(postgres: Any, database: str, workdir: Path, values: list[str | None]) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "DROP TABLE IF EXISTS public.generated", "CREATE TABLE public.generated (id int, a text, b text)")
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        for i, value in enumerate(values):
            cur.execute("INSERT INTO public.generated VALUES (%s, %s, %s)", (i, value, value and value[::-1]))
        conn.commit()
    copied, reference = _read_both(_options(postgres, database, workdir), postgres.dsn(database), "generated", 3)
    assert copied == reference
    assert [row[1] for row in copied] == values


def test_a_table_past_1024_chunks_is_read_in_chunks_of_chunk_rows(postgres: Any, database: str,
                                                                 workdir: Path) -> None:
    """20,000 rows at 10 rows a chunk: 2,000 chunks of at most 10 rows (not 1,024 growing with the table), every
    row read once; without a key, page ranges of one page (the least a page range holds)."""
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.keyed (id bigint PRIMARY KEY, v text)",
            "INSERT INTO public.keyed SELECT g, 'v' || g FROM generate_series(1, 20000) g",
            "CREATE TABLE public.heap (id bigint, v text)",
            "INSERT INTO public.heap SELECT g, 'v' || g FROM generate_series(1, 20000) g",
            "ANALYZE public.keyed", "ANALYZE public.heap")
    options = _options(postgres, database, workdir)
    with closing(connect(options)) as conn:
        tables = [load_table(conn, "public", name, options) for name in ("keyed", "heap")]
        chunks = snapshot.plan_chunks(conn, tables, 10)
    with exported(dsn) as snapshot_name, snapshot.under_snapshot(options, snapshot_name) as conn:
        for table in tables:
            planned = [c for c in chunks if c.table == table.name]
            sizes = [sum(len(block) for block in read_chunk_blocks(options, snapshot_name, table, chunk, 100, conn))
                     for chunk in planned]
            assert sum(sizes) == 20_000, table.name
            if table.name == "keyed":  # key ranges of 10 keys
                assert len(planned) == 2_000 and max(sizes) == 10
                assert all(c.rows <= 10 for c in planned)
            else:  # page ranges: a page holds more than 10 of these rows, so a page each
                assert len(planned) > 100 and all(c.upper - c.lower == 1 for c in planned[1:-1])  # type: ignore[operator]


def test_rows_over_4_mib_are_read_in_blocks_bounded_in_bytes(postgres: Any, database: str, workdir: Path) -> None:
    """A chunk of 30 MB with a few rows of 5 MiB: Arrow parses it in blocks of at most twice the longest row (not
    the whole chunk in one), each value the text a query gives."""
    big = 5 * 1024 * 1024
    execute(postgres.dsn(database), "CREATE TABLE public.huge (id int PRIMARY KEY, body text)",
            f"INSERT INTO public.huge SELECT g, CASE WHEN g % 1000 = 7 THEN repeat(md5(g::text), {big // 32}) "
            f"ELSE repeat('r', 500) || g END FROM generate_series(1, 4000) g")
    options = _options(postgres, database, workdir)
    with closing(connect(options)) as conn:
        table = load_table(conn, "public", "huge", options)
    chunk = SnapshotChunk("public", "huge", 0, "all", None, None)
    with exported(postgres.dsn(database)) as snapshot_name:
        blocks = list(read_chunk_columns(options, snapshot_name, table, chunk, 10_240))
        reference = [row for block in read_chunk_blocks(options, snapshot_name, table, chunk, 50) for row in block]
    sizes = [sum(column.nbytes for column in block.values()) for block in blocks]
    assert sum(sizes) > 20 * 1024 * 1024
    assert max(sizes) <= 2 * big + 64 * 1024, sizes
    copied = [row for block in blocks for row in zip(*[column.to_pylist() for column in block.values()], strict=True)]
    assert copied == reference
    assert [len(row[1]) for row in copied if row[0] in ("7", "1007", "2007", "3007")] == [big] * 4
