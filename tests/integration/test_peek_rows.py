"""A peek's rows as COPY's binary format: read from its spool whole, whatever their size, and a broken output is
refused by name. The server's own output is checked against a plain SELECT of the same peek."""

from __future__ import annotations

import io
import struct
from contextlib import closing
from typing import Any

import pytest
from helpers import execute, fetch

from cdckit.dialect.postgres import peek
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.dialect.postgres.peek import copy_rows, peek_rows
from cdckit.errors import DecodingError

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)


def copy_output(rows: list[tuple[int, bytes]], extension: bytes = b"") -> bytes:
    """Rows of (int8, bytea) as PostgreSQL writes them in COPY's binary format."""
    head = HEADER[:-4] + struct.pack(">i", len(extension)) + extension
    return head + b"".join(struct.pack(">hiqi", 2, 8, lsn, len(data)) + data for lsn, data in rows) + TRAILER


@pytest.mark.parametrize("read_size", [1, 7, 18, 19, 64, 1024 * 1024])
def test_rows_come_back_whole_whatever_the_read_steps(monkeypatch: pytest.MonkeyPatch, read_size: int) -> None:
    monkeypatch.setattr(peek, "_READ_SIZE", read_size)
    rows = [(1, b"B" + bytes(20)), (2, b""), (3, bytes(range(256)) * 40), (2**40, b"C" * 3)]
    assert list(copy_rows(io.BytesIO(copy_output(rows, extension=b"ext!")))) == rows
    assert list(copy_rows(io.BytesIO(copy_output([])))) == []


@pytest.mark.parametrize(("output", "problem"), [
    (b"COPY\n", "does not start as PostgreSQL's binary format"),
    (HEADER, "ends without its trailer"),
    (copy_output([(1, b"abcdef")])[:-5], "ends inside a row"),
    (HEADER + struct.pack(">hiqi", 3, 8, 1, 1) + b"x" + TRAILER, "unexpected row"),
])
def test_a_broken_output_is_refused_by_name(output: bytes, problem: str) -> None:
    with pytest.raises(DecodingError, match=problem):
        list(copy_rows(io.BytesIO(output)))


@pytest.mark.postgres
def test_a_peek_larger_than_the_spools_memory_reads_every_message_from_its_file(
        postgres: Any, database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.notes (id integer PRIMARY KEY, body text)",
            "CREATE PUBLICATION peeks FOR TABLE public.notes",
            "SELECT pg_create_logical_replication_slot('peeks', 'pgoutput')",
            "INSERT INTO public.notes SELECT g, repeat(md5(g::text), 50) FROM generate_series(1, 300) g",
            "UPDATE public.notes SET body = 'short' WHERE id <= 100",
            "DELETE FROM public.notes WHERE id > 250")
    end = parse_lsn(fetch(dsn, "SELECT pg_current_wal_lsn()::text")[0][0])
    expected = [(parse_lsn(lsn), bytes(data)) for lsn, data in fetch(dsn, (
        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes('peeks', NULL, NULL, 'proto_version', "
        "'1', 'publication_names', 'peeks', 'messages', 'true')"))]
    assert len(expected) == 300 + 100 + 50 + 6 + 1  # the changes, a Begin and Commit each, the table's Relation
    monkeypatch.setattr(peek, "SPOOL_MEMORY", 4096)  # about 60 KB of messages: most go to the file
    options = {**postgres.connector_properties(database), "slot.name": "peeks", "publication.name": "peeks"}
    with closing(connect(options)) as conn:
        assert list(peek_rows(conn, options, end)) == expected
        assert list(peek_rows(conn, options, end)) == expected, "a peek does not move the slot"
