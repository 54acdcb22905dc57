"""Debezium's own PostgreSQL connector (in Debezium Server), run beside cdckit on the same PostgreSQL and Kafka.

    .venv/bin/python -m cdckit_lab.debezium       # quick self-check: 50,000 rows, own PostgreSQL and broker
    DBZ_BENCH_ROWS=5000 DBZ_BENCH_KEEP=1 ...       # fewer rows; keep the temp folder (logs) afterwards
    DBZ_BENCH_VERSION=2.5.2.Final ...              # another Debezium release (default VERSION, 3.6.0.Final)

What is measured: how fast Debezium Server (the Debezium PostgreSQL connector in its standalone Quarkus runtime,
pgoutput, Kafka sink, JSON with schemas as Kafka Connect's JsonConverter writes it) puts change records into a
real Kafka topic:

- snapshot: ``snapshot.mode=initial`` on a table; one record per row;
- stream: ``snapshot.mode=no_data`` (``never`` before Debezium 2.6, ``snapshot_mode_for``) on a fresh slot; the
  changes are applied while the server streams (live), or before it starts (backlog, as bench/run.py's
  measure_stream times cdckit), one record per changed row.

How: the Debezium Server distribution is fetched once from Maven Central into the cdckit cache folder and run as
a subprocess with an application.properties written into a work folder (the only place the database password is
written; the server's log goes to a file there too). Records are counted on the broker: the topic's end offsets
summed over its partitions (less what the topic held before), polled every 50 ms with confluent-kafka, so a
record counts once Kafka has acknowledged it. ``seconds`` runs from the start of the server's process (JVM and
Quarkus start, connector start, slot creation included) to the poll that saw the expected count; ``startup_s``
is the time to the first record, so ``steady_records_per_s`` shows the rate without the start. Debezium's own
settings stay at their defaults (max.batch.size 2048, max.queue.size 8192, decimal.handling.mode precise,
time.precision.mode adaptive, the producer's defaults).

The broker of cdckit_lab.kafka_broker has auto.create.topics.enable=false and Debezium Server's Kafka sink does
not create topics, so ``run_debezium`` creates the topic first (``partitions``, replication factor 1).

Runtimes (``fetch_runtime``): a distribution is started as its run.sh starts it, from the work folder: 3.x's
run.sh puts config/lib on the classpath and Quarkus reads config/application.properties in the working folder;
2.x's run.sh puts conf/ on the classpath instead, so the properties go to conf/application.properties there.
Debezium Server 3.x needs Java 21 or newer (``required_java`` reads it from the jars' class files and
``find_java`` picks a JDK that fits); on Java 24+ it is started with ``--add-opens java.base/java.lang``, which
Quarkus's thread pool needs there. Maven Central, as reached here, has no ``debezium-server-dist`` 2.5.2.Final
(HTTP 404; its listing holds 3.0.0.Final and 3.6.0.Final only), so for such a release ``fetch_embedded`` has
Maven resolve ``debezium-embedded`` and ``debezium-connector-postgres`` of that release (needs ``mvn``; 67 jars,
31.5 MB, about 20 s the first time) and compiles ``CdckitDebeziumRunner``: Debezium's embedded engine, which Debezium
Server wraps, with Debezium Server's property names and its Kafka sink's behaviour (each batch sent, the
broker's acks awaited, then the records marked processed). The connector builds the records and JsonConverter
writes them in both, so the texts are the ones Debezium Server would write. 2.5.2 needs Java 11 and runs on the
default OpenJDK 17.

The self-check compares Debezium's records with cdckit's for the same changes, as parsed JSON
(``compare_envelopes``) and byte for byte (``text_differences``): the snapshot's first 20 records (``EDGE_ROWS``
first: timestamptz values ending in zero microseconds, NULLs, odd numerics and dates, text JSON must escape)
and its middle and last ones, built by cdckit's envelope code from the row as cdckit's snapshot reads it and
given Debezium's lsn, txId and ts_ms; then an insert, a delete (and its tombstone) and two update transactions,
decoded by cdckit's ChangeDecoder from a slot of its own, each record written with Debezium's record ts_ms.

Found against Debezium 2.5.2.Final, the release cdckit's format follows (decision 0002): what differed, what
cdckit changed to match it (the Envelope schema's version, timestamptz fraction widths, snapshot markers and
times, Jackson's escapes and float notation) and what still differs is in docs/decisions/0016;
tests/integration/test_debezium_compat.py checks it in CI.

Found against Debezium 3.6.0.Final, besides the above: ``ts_us``/``ts_ns`` in the envelope (after ``ts_ms``,
with ``transaction`` moved before ``op``) and in ``source`` (after ``sequence``), ``source.origin`` and
``origin_lsn``, ``source`` schema ``"version":1`` and Envelope ``"version":2``, ``snapshot`` allowing
"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental", ``source.version``
"3.6.0.Final", and its first streamed transaction's ``sequence`` ``[null,"<lsn>"]`` too. The column schemas and
the other values are the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cdckit_lab.debezium.cdckit_side import (
    cdckit_snapshot_texts,
    cdckit_stream_events,
    create_comparison_slot,
    snapshot_positions,
)
from cdckit_lab.debezium.compare import Tally, excerpt
from cdckit_lab.debezium.runtime import FORMAT_VERSION, VERSION, download_stats, fetch_runtime
from cdckit_lab.debezium.server import connect, create_slot, drop_slot, execute_sql, run_debezium
from cdckit_lab.debezium.topics import read_records


# -- quick self-check ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _lab(root: Path) -> Iterator[tuple[Any, Any]]:
    from cdckit_lab.embedded_postgres import EmbeddedPostgres
    from cdckit_lab.kafka_broker import KafkaBroker

    pg = EmbeddedPostgres(root / "pg", password=secrets.token_urlsafe(18)).start()  # never printed
    try:
        broker = KafkaBroker(root / "kafka").start()
        try:
            yield pg, broker
        finally:
            broker.stop()
    finally:
        pg.stop()


# Rows 1.. of the self-check's table, the first a snapshot reads: timestamptz values whose microseconds end in
# zeros (.120000, .000000, .100000), use all six digits or just one microsecond, lie before the epoch or were
# written with another offset; NULLs in every nullable column; numeric(12,2) zero, negative and at its maximum;
# dates far from the epoch; text that JSON must escape, and a character outside the Basic Multilingual Plane.
EDGE_ROWS = (
    "(1, 'edge-1', 12.30, '2024-03-05 10:20:05.120000+00', DATE '2024-03-05', true, "
    "'00000000-0000-0000-0000-000000000000', 'plain')",
    "(2, 'edge-2', 0.00, '2024-03-05 10:20:05.000000+00', NULL, NULL, NULL, NULL)",
    r"(3, 'edge-3', -1.50, '2024-03-05 10:20:05.100000+00', DATE '1969-12-31', false, "
    r"'ffffffff-ffff-ffff-ffff-ffffffffffff', E'quote \" backslash \\ tab \t newline \n cr \r ctl \x01 del \x7f')",
    "(4, 'edge-4', 9999999997.99, '2024-03-05 10:20:05.123456+00', DATE '0001-01-01', true, "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '')",
    "(5, 'edge-5', -0.01, '2024-03-05 10:20:05.000001+00', DATE '9999-12-31', false, NULL, "
    "'é ü 中文 😀 \u2028 </script>')",
    "(6, 'edge-6', 100.00, '1969-12-31 23:59:59.500000+00', DATE '1970-01-01', NULL, NULL, 'before the epoch')",
    "(7, 'edge-7', 0.10, '2024-03-05 12:20:05.12+02', DATE '2024-02-29', true, NULL, 'written at +02')",
)


def _show(label: str, result: Mapping[str, Any]) -> None:
    shown = {key: round(value, 2) if isinstance(value, float) else value for key, value in result.items()}
    print(f"{label}: {json.dumps(shown)}", flush=True)


def _source(value_text: str | None) -> dict[str, Any]:
    source: dict[str, Any] = json.loads(value_text or "{}")["payload"]["source"]
    return source


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import TABLE_DDL, TABLE_FILL

    rows = int(os.environ.get("DBZ_BENCH_ROWS", "50000"))
    version = os.environ.get("DBZ_BENCH_VERSION", VERSION)
    per_tx = 1000
    compare_rows = 20
    topic = "bench.public.orders"
    runtime = fetch_runtime(version)
    print(f"Debezium {version} ({'Debezium Server' if runtime.kind == 'server' else 'embedded engine'}) in "
          f"{runtime.home}; download {download_stats(version)}; cdckit writes Debezium {FORMAT_VERSION}'s format",
          flush=True)
    root = Path(tempfile.mkdtemp(prefix="cdckit-dbz-"))
    try:
        with _lab(root) as (pg, broker):
            db = pg.connector_properties("postgres")
            bootstrap = broker.bootstrap_servers
            execute_sql(db, "DROP TABLE IF EXISTS public.orders", TABLE_DDL.format(name="public.orders"),
                 f"INSERT INTO public.orders VALUES {', '.join(EDGE_ROWS)}",
                 TABLE_FILL.format(name="public.orders", start=len(EDGE_ROWS) + 1, end=rows),
                 "ANALYZE public.orders")

            def updates() -> None:
                for start in range(1, rows + 1, per_tx):
                    execute_sql(db, f"UPDATE public.orders SET note = 'changed', amount = amount + 1 WHERE id BETWEEN "
                             f"{start} AND {start + per_tx - 1}")

            snapshot = run_debezium(db, bootstrap, root / "snapshot", table_include="public\\.orders",
                                    snapshot_mode="initial", expected_records=rows, topic=topic,
                                    slot_name="dbz_bench_snapshot", publication_name="dbz_bench_snapshot",
                                    version=version)
            _show("snapshot", snapshot)
            records = read_records(bootstrap, topic, offset=0, count=compare_rows)
            key, value = records[0]
            print(f"first Debezium record: key {key}\n{excerpt(value or '{}')}")
            marks = {"first": 0, "second": 1, "middle": rows // 2, "last": rows - 1}
            sampled = {label: read_records(bootstrap, topic, offset=offset)[0] for label, offset in marks.items()}
            snapshot_tally = Tally()
            cdckit_marks: dict[str, str] = {}
            for label, (d_key, d_value) in [*((str(i), r) for i, r in enumerate(records)), *sampled.items()]:
                if label.isdigit() and int(label) in (0, 1):
                    continue  # the same records as "first" and "second"
                debezium_value = json.loads(d_value or "{}")
                source = debezium_value["payload"]["source"]
                key_id = int(debezium_value["payload"]["after"]["id"])
                (c_key, c_value), = cdckit_snapshot_texts(
                    db, "public", "orders", [key_id], lsn=source["lsn"], tx_id=source["txId"],
                    source_ts_ms=source["ts_ms"], processed_ts_ms=debezium_value["payload"]["ts_ms"],
                    first_id=1, last_id=rows).values()
                if label in marks:
                    cdckit_marks[label] = _source(c_value)["snapshot"]
                    if label == "first":
                        print(f"cdckit's envelope for the same row:\n{excerpt(c_value)}")
                        print(f"source of the first snapshot record: Debezium {json.dumps(source)}\n"
                              f"                                     cdckit   {json.dumps(_source(c_value))}\n"
                              f"  (cdckit given Debezium's lsn, txId and ts_ms, as its own snapshot has its own)")
                snapshot_tally.add((d_key, d_value), (c_key, c_value))
            print("source.snapshot by position (Debezium / cdckit): " + ", ".join(
                f"{label} {_source(sampled[label][1])['snapshot']!r} / {cdckit_marks[label]!r}" for label in marks))
            record_ts = {label: json.loads(text or "{}")["payload"]["ts_ms"] for label, (_, text) in sampled.items()}
            print("Debezium's source.ts_ms (and the record's ts_ms) by position: " + ", ".join(
                f"{label} {_source(sampled[label][1])['ts_ms']} ({record_ts[label]})" for label in marks)
                + "; cdckit's source.ts_ms is each row's read time (postgres_snapshot's now_ms())")
            snapshot_tally.show(f"snapshot: the first {compare_rows} records (ids 1-{len(EDGE_ROWS)} are the "
                                f"EDGE_ROWS) and the middle and last ones")
            print(f"a snapshot's source.lsn and txId, both ways at one moment: {json.dumps(snapshot_positions(db))}")

            def live_changes() -> None:  # an insert and a delete (and its tombstone), then the updates
                execute_sql(db, f"INSERT INTO public.orders VALUES ({rows + 1}, 'inserted', 1.05, "
                         f"'2024-03-05 10:20:05.120000+00', NULL, true, NULL, 'inserted')",
                     f"DELETE FROM public.orders WHERE id = {rows + 1}")
                updates()

            comparison_slot = "cdckit_compare"
            create_comparison_slot(db, comparison_slot, "public.orders")
            try:
                live = run_debezium(db, bootstrap, root / "stream-live", table_include="public\\.orders",
                                    snapshot_mode="no_data", expected_records=rows + 3, topic=topic,
                                    slot_name="dbz_bench_live", publication_name="dbz_bench_live",
                                    on_streaming=live_changes, version=version)
                _show("stream (an insert, a delete and updates applied while streaming)", live)
                stream_records = read_records(bootstrap, topic, offset=live["first_offset"], count=3 + 2 * per_tx)
                ours: dict[tuple[int, int, bool], tuple[Any, Any]] = {}
                for event, table_format in cdckit_stream_events(db, comparison_slot, "public", "orders",
                                                                2 + 2 * per_tx):
                    key_id = int(str((event.after if event.op in ("c", "u") else event.before or {})["id"]))
                    ours[(event.position.lsn, key_id, False)] = (event, table_format)
                    if event.op == "d":  # cdckit writes a tombstone after each delete (tombstones.on.delete)
                        ours[(event.position.lsn, key_id, True)] = (event, table_format)
            finally:
                drop_slot(db, comparison_slot, comparison_slot)
            stream_tally = Tally()
            shown_tx: list[Any] = []
            lsn = 0
            for d_key, d_value in stream_records:
                key_id = int(json.loads(d_key or "{}")["payload"]["id"])
                payload = json.loads(d_value)["payload"] if d_value is not None else None
                if payload is not None:
                    lsn = payload["source"]["lsn"]
                match = ours.get((lsn, key_id, payload is None))
                if match is None:
                    print(f"no cdckit record for Debezium's {'tombstone' if payload is None else payload['op']} "
                          f"at lsn {lsn}, id {key_id}")
                    continue
                event, table_format = match
                c_key = table_format.key_json(event.after if event.op in ("c", "u") else event.before or {})
                c_text = None if payload is None else table_format.value_json(event, payload["ts_ms"])
                if payload is not None and payload["op"] != "u":
                    print(f"{payload['op']} record: Debezium before {json.dumps(payload['before'])}, after "
                          f"{json.dumps(payload['after'])}\n{' ' * 11}cdckit   before "
                          f"{json.dumps(json.loads(c_text or '{}')['payload']['before'])}, after "
                          f"{json.dumps(json.loads(c_text or '{}')['payload']['after'])}")
                if payload is not None and payload["op"] == "u" and payload["source"]["txId"] not in shown_tx:
                    shown_tx.append(payload["source"]["txId"])
                    print(f"source of update transaction {len(shown_tx)}'s first record: Debezium "
                          f"{json.dumps(payload['source'])}\n{' ' * 43}cdckit   {json.dumps(_source(c_text))}")
                stream_tally.add((d_key, d_value), (c_key, c_text))
            stream_tally.show(f"stream: the first {len(stream_records)} records (insert, delete, tombstone, two "
                              f"update transactions), cdckit's decoded by its ChangeDecoder from a slot of its own")
            update = json.loads(stream_records[3][1] or "{}")
            print(f"first update record: op {update['payload']['op']}, before {update['payload']['before']}, "
                  f"after.note {update['payload']['after']['note']!r}, after.amount "
                  f"{update['payload']['after']['amount']!r}")

            # As bench/run.py's measure_stream times cdckit: slot first, changes next, then the capture alone.
            backlog_dir = root / "stream-backlog"
            create_slot(db, bootstrap, backlog_dir, table_include="public\\.orders", topic=topic,
                        slot_name="dbz_bench_backlog", publication_name="dbz_bench_backlog", version=version)
            updates()
            backlog = run_debezium(db, bootstrap, backlog_dir, table_include="public\\.orders",
                                   snapshot_mode="no_data", expected_records=rows, topic=topic,
                                   slot_name="dbz_bench_backlog", publication_name="dbz_bench_backlog",
                                   version=version)
            _show("stream (backlog of updates, server started after them)", backlog)
            (_, backlog_text), = read_records(bootstrap, topic, offset=backlog["first_offset"])
            print(f"source of the backlog's first record: Debezium {json.dumps(_source(backlog_text))}")
            conn = connect(db)
            with conn.cursor() as cur:
                cur.execute("SELECT slot_name FROM pg_replication_slots")
                print(f"slots left: {[row[0] for row in cur.fetchall()]}")
            conn.close()
    finally:
        if os.environ.get("DBZ_BENCH_KEEP"):
            print(f"kept {root} (the database password is in its */conf*/application.properties)")
        else:
            shutil.rmtree(root, ignore_errors=True)
