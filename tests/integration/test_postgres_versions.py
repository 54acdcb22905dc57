"""The SQL and replication commands whose form depends on the server's PostgreSQL version, run against the server
the ``postgres`` fixture starts (the embedded one, or CDCKIT_TEST_POSTGRES_BIN's: `make test-postgres15`). No
Spark: each test drives the dialect functions the jobs call."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import psycopg2
import psycopg2.extras
import pytest
from helpers import execute, fetch

from cdckit.dialect.postgres.catalog import check_server, discover_tables
from cdckit.dialect.postgres.connection import connect, connection_kwargs
from cdckit.dialect.postgres.decoder import ChangeDecoder
from cdckit.dialect.postgres.heartbeat import emit_heartbeat
from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.dialect.postgres.peek import peek_rows
from cdckit.dialect.postgres.pending import pending_changes
from cdckit.dialect.postgres.replication import (
    advance_slot,
    create_slot,
    create_slot_command,
    create_slot_exporting_snapshot,
    slot_status,
)
from cdckit.dialect.postgres.server_version import ServerVersion
from cdckit.dialect.postgres.snapshot import snapshot_xmin
from cdckit.events import ChangeEvent

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def options(postgres: Any, database: str) -> dict[str, str]:
    """A captured table public.ledger, its publication, and the properties that name them."""
    execute(postgres.dsn(database), "CREATE TABLE public.ledger (id integer PRIMARY KEY, amount integer NOT NULL)",
            "INSERT INTO public.ledger VALUES (1, 10)",
            f"CREATE PUBLICATION pub_{database} FOR TABLE public.ledger")
    return {**postgres.connector_properties(database), "slot.name": f"slot_{database}",
            "publication.name": f"pub_{database}", "table.include.list": "public.ledger"}


@pytest.fixture
def conn(options: dict[str, str]) -> Iterator[Any]:
    with closing(connect(options)) as connection:
        yield connection


def _decoded(conn: Any, options: dict[str, str], start: int, end: int) -> list[ChangeEvent]:
    tables = {table.name: table for table in discover_tables(conn, options)}
    decoder = ChangeDecoder(start, end, lambda relation: tables.get(relation.name), heartbeat_tag=options["slot.name"])
    return [event for lsn, data in peek_rows(conn, options, end) for event in decoder.feed(lsn, data)]


def test_the_server_is_supported_and_reports_its_version(postgres: Any, conn: Any) -> None:
    version = ServerVersion.of(conn)
    assert version.number == int(fetch(postgres.dsn("postgres"), "SHOW server_version_num")[0][0])
    assert check_server(conn, "test") == postgres.server_version
    assert postgres.server_version.startswith(str(version).split(".")[0])


@pytest.mark.parametrize("form", ["the server's own", "the one before PostgreSQL 15"])
def test_slot_exports_a_snapshot_another_connection_adopts(postgres: Any, database: str, options: dict[str, str],
                                                           conn: Any, form: str) -> None:
    """Both forms of CREATE_REPLICATION_SLOT: the one cdckit picks by version, and EXPORT_SNAPSHOT, which every
    version from 10 on accepts."""
    if form == "the server's own":
        exported = create_slot_exporting_snapshot(options)
        replication, snapshot_name, consistent_point = exported.connection, exported.snapshot_name, \
            exported.consistent_point
    else:
        replication = psycopg2.connect(connection_factory=psycopg2.extras.LogicalReplicationConnection,
                                       **connection_kwargs(options))
        with replication.cursor() as cur:
            cur.execute(create_slot_command(options["slot.name"], "pgoutput", ServerVersion(140000)))
            row = cur.fetchone()
        snapshot_name, consistent_point = str(row[2]), parse_lsn(str(row[1]))
    try:
        execute(postgres.dsn(database), "INSERT INTO public.ledger VALUES (2, 20)")
        with closing(connect(options)) as reader:
            reader.set_session(isolation_level="REPEATABLE READ", readonly=True)
            with reader.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
                cur.execute("SELECT id FROM public.ledger ORDER BY id")
                seen = [int(row[0]) for row in cur.fetchall()]
            xmin = snapshot_xmin(reader)
            reader.rollback()
    finally:
        replication.close()
    assert seen == [1], "the exported snapshot must not see the row inserted after the slot was created"
    assert xmin > 0
    status = slot_status(conn, options["slot.name"])
    assert status is not None
    assert (status.plugin, status.confirmed_flush_lsn, status.wal_status) == ("pgoutput", consistent_point,
                                                                             "reserved")


def test_advance_confirms_a_commit_end_and_later_reads_start_after_it(postgres: Any, database: str,
                                                                     options: dict[str, str], conn: Any) -> None:
    consistent_point = create_slot(conn, options)
    execute(postgres.dsn(database), "INSERT INTO public.ledger VALUES (2, 20)",
            "UPDATE public.ledger SET amount = 21 WHERE id = 2", "DELETE FROM public.ledger WHERE id = 1")
    first = pending_changes(conn, options, consistent_point, max_events=1, upto=None)
    assert (first.transactions, first.events) == (3, 1)
    assert first.end_lsn is not None

    assert advance_slot(conn, options["slot.name"], first.end_lsn, options["publication.name"])
    status = slot_status(conn, options["slot.name"])
    assert status is not None and status.confirmed_flush_lsn == first.end_lsn
    publication = options["publication.name"]
    assert not advance_slot(conn, options["slot.name"], first.end_lsn, publication), "confirming again changes nothing"
    assert not advance_slot(conn, options["slot.name"], consistent_point, publication), \
        "the slot never moves backwards"
    assert slot_status(conn, options["slot.name"]).confirmed_flush_lsn == first.end_lsn  # type: ignore[union-attr]

    rest = pending_changes(conn, options, first.end_lsn, max_events=100, upto=None)
    assert (rest.transactions, rest.events) == (2, 2)
    assert rest.end_lsn is not None
    events = [event for event in _decoded(conn, options, first.end_lsn, rest.end_lsn) if event.op != "txend"]
    assert [(event.op, event.after) for event in events] == [("u", {"id": "2", "amount": "21"}), ("d", None)]


def test_a_peek_from_a_later_start_leaves_out_only_the_changes_of_transactions_committed_before_it(
        postgres: Any, database: str, options: dict[str, str], conn: Any) -> None:
    """A batch's later partition peeks from the slot's position with ``start``: the server leaves out the row
    changes of the transactions committed before ``start``, and nothing a transaction in the range needs, though
    its changes were written before ``start`` (a transaction that began first and committed later)."""
    consistent_point = create_slot(conn, options)
    dsn = postgres.dsn(database)
    execute(dsn, "INSERT INTO public.ledger VALUES (2, 20)", "ALTER TABLE public.ledger ADD COLUMN note text")
    emit_heartbeat(conn, options["slot.name"])
    with closing(psycopg2.connect(dsn)) as late:  # begins (and writes) now, commits after the cut
        with late.cursor() as cur:
            cur.execute("UPDATE public.ledger SET amount = 11 WHERE id = 1")
        execute(dsn, "INSERT INTO public.ledger VALUES (3, 30, 'three')")
        cut = pending_changes(conn, options, consistent_point, max_events=100, upto=None).end_lsn
        late.commit()
    execute(dsn, "DELETE FROM public.ledger WHERE id = 2")
    end = pending_changes(conn, options, consistent_point, max_events=100, upto=None).end_lsn
    assert cut is not None and end is not None and cut < end

    everything = list(peek_rows(conn, options, end))
    later = list(peek_rows(conn, options, end, start=cut))
    left_out = [row for row in everything if row not in later]
    assert [row for row in everything if row not in left_out] == later, "the rest comes whole, in order"
    kinds = [chr(data[0]) for _, data in left_out]
    # the two inserts and, where pgoutput delivers messages, the heartbeat: all committed before the cut
    assert sorted(kinds) == sorted("II" + ("M" if ServerVersion.of(conn).delivers_logical_messages else ""))
    assert {chr(data[0]) for _, data in later} >= {"B", "C", "R", "U", "D"}

    tables = {table.name: table for table in discover_tables(conn, options)}

    def decoded(rows: list[tuple[int, bytes]]) -> list[ChangeEvent]:
        decoder = ChangeDecoder(cut, end, lambda relation: tables.get(relation.name), options["slot.name"])
        return [event for lsn, data in rows for event in decoder.feed(lsn, data)]

    assert decoded(later) == decoded(everything)
    assert [event.op for event in decoded(later) if event.op != "txend"] == ["u", "d"]


def test_heartbeat_moves_an_idle_slot_and_is_read_back_where_pgoutput_delivers_messages(
        postgres: Any, database: str, options: dict[str, str], conn: Any, caplog: pytest.LogCaptureFixture) -> None:
    consistent_point = create_slot(conn, options)
    with caplog.at_level(logging.WARNING, logger="cdckit"):
        emit_heartbeat(conn, options["slot.name"])
    pending = pending_changes(conn, options, consistent_point, max_events=100, upto=None)
    assert (pending.transactions, pending.events) == (1, 0)
    assert pending.end_lsn is not None
    beats = [event for event in _decoded(conn, options, consistent_point, pending.end_lsn) if event.op == "hb"]
    if ServerVersion.of(conn).delivers_logical_messages:
        assert len(beats) == 1
    else:
        assert beats == []
        assert "write no heartbeat records" in caplog.text
    assert advance_slot(conn, options["slot.name"], pending.end_lsn, options["publication.name"])
    assert pending_changes(conn, options, pending.end_lsn, max_events=100, upto=None).end_lsn is None


def test_generated_columns_are_read_by_the_snapshot_and_known_as_generated(
        postgres: Any, database: str, options: dict[str, str], conn: Any) -> None:
    # As Debezium: a snapshot reads them (SELECT *); pgoutput leaves them out of the stream's tuples.
    generated = ServerVersion.of(conn).has_generated_columns
    execute(postgres.dsn(database), "CREATE TABLE public.priced (id integer PRIMARY KEY, net numeric NOT NULL"
            + (", gross numeric GENERATED ALWAYS AS (net * 1.2) STORED)" if generated else ")"))
    table, = discover_tables(conn, {**options, "table.include.list": "public.priced"})
    assert [column.name for column in table.columns] == ["id", "net", "gross"][:3 if generated else 2]
    assert table.generated_columns == (("gross",) if generated else ())
