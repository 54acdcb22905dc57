"""cdckit's side of a comparison: its records for the same rows and changes, built by cdckit's envelope code from
what cdckit's snapshot and decoder read, with Debezium's positions and times."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from cdckit_lab.debezium.runtime import DebeziumServerError
from cdckit_lab.debezium.server import drop_slot, execute_sql


# -- comparing records with cdckit's ---------------------------------------------------------------------------
def _cdckit_options(dsn_properties: Mapping[str, str], topic_prefix: str, **extra: str) -> dict[str, str]:
    from cdckit.config.properties import POSTGRES_CONNECTOR

    return {"topic.prefix": topic_prefix, "connector.class": POSTGRES_CONNECTOR,
            **{key: str(value) for key, value in dsn_properties.items() if key.startswith("database.")}, **extra}


def cdckit_snapshot_texts(dsn_properties: Mapping[str, str], schema: str, table: str, key_ids: list[int], *,
                          lsn: int, tx_id: int | None, source_ts_ms: int, processed_ts_ms: int,
                          first_id: int | None = None, last_id: int | None = None, topic_prefix: str = "bench"
                          ) -> dict[int, tuple[str | None, str]]:
    """cdckit's key and value texts for snapshot reads of the rows ``key_ids``, built without Spark as its
    snapshot builds them (cdckit.spark.sources.postgres_snapshot): the row as PostgreSQL's text output on a cdckit
    connection, ``op`` r, ``source.lsn`` the snapshot's LSN and ``source.sequence`` ``[null, "<lsn>"]``,
    ``txId`` the snapshot transaction's, ``snapshot`` "first" for the table's first row (``first_id``), "last"
    for its last row (``last_id``, which wins for a table of one row) and "true" for the others. The LSN, txId
    and both ts_ms are given (a comparison passes Debezium's), so that the texts can be compared with
    Debezium's byte for byte."""
    from cdckit.dialect.postgres.catalog import load_table
    from cdckit.dialect.postgres.connection import connect
    from cdckit.events import ChangeEvent, Position
    from cdckit.formats.debezium.envelope import TableFormat, format_settings

    options = _cdckit_options(dsn_properties, topic_prefix)
    conn = connect(options)
    try:
        info = load_table(conn, schema, table, options)
        columns = [column.name for column in info.columns]
        with conn.cursor() as cur:
            selected = ", ".join(f'"{name}"' for name in columns)
            cur.execute(f'SELECT {selected} FROM "{schema}"."{table}" WHERE id = ANY(%s)', (key_ids,))
            rows = [dict(zip(columns, values, strict=True)) for values in cur.fetchall()]
        conn.rollback()
    finally:
        conn.close()
    table_format = TableFormat(info, format_settings(options))
    texts: dict[int, tuple[str | None, str]] = {}
    for row in rows:
        key_id = int(str(row["id"]))
        event = ChangeEvent(schema, table, "r", None, row, Position(lsn, lsn, 0), source_ts_ms, tx_id,
                            snapshot="last" if key_id == last_id else "first" if key_id == first_id else "true",
                            sequence=(None, lsn))
        texts[key_id] = (table_format.key_json(row), table_format.value_json(event, processed_ts_ms))
    missing = set(key_ids) - set(texts)
    if missing:
        raise DebeziumServerError(f"no rows with ids {sorted(missing)} in {schema}.{table}")
    return texts


def cdckit_envelope(dsn_properties: Mapping[str, str], schema: str, table: str, key_id: int,
                    topic_prefix: str = "bench", op: str = "r") -> dict[str, Any]:
    """cdckit's value message (schema and payload) for one snapshot row, LSN and txId left at 0 and None."""
    if op != "r":
        raise ValueError("cdckit_envelope builds snapshot reads; stream changes come from cdckit_stream_events")
    now = int(time.time() * 1000)
    (_, text), = cdckit_snapshot_texts(dsn_properties, schema, table, [key_id], lsn=0, tx_id=None,
                                       source_ts_ms=now, processed_ts_ms=now, topic_prefix=topic_prefix).values()
    message: dict[str, Any] = json.loads(text)
    return message


def create_comparison_slot(dsn_properties: Mapping[str, str], slot: str, tables: str) -> None:
    """A pgoutput slot and a publication ``FOR TABLE tables``, both named ``slot``, whose changes
    ``cdckit_stream_events`` decodes as cdckit's stream does (created before the changes to compare)."""
    execute_sql(dsn_properties, f'CREATE PUBLICATION "{slot}" FOR TABLE {tables}',
         f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")


def cdckit_stream_events(dsn_properties: Mapping[str, str], slot: str, schema: str, table: str,
                         max_changes: int, topic_prefix: str = "bench") -> list[tuple[Any, Any]]:
    """cdckit's change events (and the TableFormat that writes them) for the first transactions pending on the
    comparison ``slot``, decoded without Spark by cdckit's own ChangeDecoder from a peek of the slot (as
    cdckit.spark.sources.postgres_stream does, from the slot's confirmed_flush_lsn); whole transactions, until
    ``max_changes`` changes are reached."""
    from cdckit.dialect.postgres import pgoutput
    from cdckit.dialect.postgres.catalog import TableInfo, table_from_relation
    from cdckit.dialect.postgres.connection import connect
    from cdckit.dialect.postgres.decoder import ChangeDecoder
    from cdckit.dialect.postgres.lsn import parse_lsn
    from cdckit.dialect.postgres.peek import as_bytes
    from cdckit.dialect.postgres.pending import peek_options
    from cdckit.formats.debezium.envelope import TableFormat, format_settings

    options = _cdckit_options(dsn_properties, topic_prefix, **{"slot.name": slot, "publication.name": slot})
    settings = format_settings(options)
    conn = connect(options)
    formats: dict[tuple[str, str], Any] = {}
    try:
        def table_for(relation: pgoutput.Relation) -> TableInfo | None:
            if (relation.namespace, relation.name) != (schema, table):
                return None
            info = table_from_relation(conn, relation.namespace, relation.name, relation.relation_id,
                                       [(c.name, c.type_oid, c.type_modifier) for c in relation.columns], options)
            formats[(info.schema, info.name)] = TableFormat(info, settings)
            return info

        with conn.cursor() as cur:
            cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            found = cur.fetchone()
            if found is None:
                raise DebeziumServerError(f"no slot {slot}")
            decoder = ChangeDecoder(parse_lsn(str(found[0])), 2**64 - 1, table_for)
            cur.execute("SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, "
                        "VARIADIC %s)", (slot, max_changes, peek_options(options)))
            peeked = cur.fetchall()
        conn.rollback()
        events: list[tuple[Any, Any]] = []
        for lsn_text, data in peeked:
            for event in decoder.feed(parse_lsn(str(lsn_text)), as_bytes(data)):
                if event.op in ("c", "u", "d"):
                    events.append((event, formats[(event.schema, event.table)]))
        return events
    finally:
        conn.close()


def snapshot_positions(dsn_properties: Mapping[str, str], slot: str = "cdckit_snapshot_check") -> dict[str, Any]:
    """The position a snapshot reports, taken both ways at the same moment: cdckit's (``lsn`` the consistent
    point of a slot created with an exported snapshot, ``txId`` that snapshot's xmin, as cdckit.pipelines.postgres and
    cdckit.spark.sources.postgres_snapshot take them) and Debezium 2.5's (inside the transaction that adopted the
    exported snapshot, ``pg_current_wal_lsn()`` and ``txid_current()``, as its log's "Read xlogStart at ... from
    transaction ..." reports). The slot is dropped afterwards."""
    from cdckit.dialect.postgres.connection import connect
    from cdckit.dialect.postgres.lsn import parse_lsn
    from cdckit.dialect.postgres.replication import create_slot_exporting_snapshot

    options = _cdckit_options(dsn_properties, "bench", **{"slot.name": slot})
    exported = create_slot_exporting_snapshot(options)
    try:
        conn = connect(options)
        try:
            conn.set_session(isolation_level="REPEATABLE READ")
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (exported.snapshot_name,))
                cur.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text, pg_current_wal_lsn()::text, "
                            "txid_current()::text")
                xmin, current_lsn, current_txid = cur.fetchone()
            conn.rollback()
        finally:
            conn.close()
    finally:
        exported.release()
        drop_slot(dsn_properties, slot)
    return {"cdckit": {"lsn": exported.consistent_point, "txId": int(xmin)},
            "debezium_2_5": {"lsn": parse_lsn(str(current_lsn)), "txId": int(current_txid)}}
