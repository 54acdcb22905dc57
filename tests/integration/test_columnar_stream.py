"""The PostgreSQL change reader's column-at-a-time path against its record-at-a-time reference, on a real slot:
inserts, updates, deletes (with their tombstones), primary-key updates, unchanged TOASTed values, two tables
interleaved in one transaction, a column added part-way, full old images and a heartbeat give the same records,
key and value texts byte for byte, in the same order, in either release's records (``cdckit.debezium.format``;
Debezium 3's source block carries each commit's own microseconds). Only the processing time (the envelope's
``ts_ms``, and Debezium 3's ``ts_us`` and ``ts_ns``) is taken once a run of changes instead of once a change. Plain
changes are decoded a column at a time."""

from __future__ import annotations

import json
import re
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg2
import pyarrow as pa
import pytest
from helpers import execute, fetch, make_config

from cdckit.dialect.postgres import decoder, peek, pgoutput
from cdckit.dialect.postgres.decoder import ChangeDecoder
from cdckit.dialect.postgres.lsn import parse_lsn
from cdckit.dialect.postgres.replication import create_slot_exporting_snapshot
from cdckit.pipelines.dispatch import prepare_source
from cdckit.spark.rows import arrow_batches
from cdckit.spark.sources.postgres_stream import PostgresChangeStreamReader
from cdckit.spark.sources.postgres_stream_partition import DecodedRange, LsnRange

pytestmark = [pytest.mark.postgres]
PROCESSING_TIME = re.compile(r'("op":"[cud]","ts_ms":)\d+(?:,"ts_us":\d+,"ts_ns":\d+)?')

CHANGES = [
    "INSERT INTO public.accounts SELECT g, 'owner ' || g, g * 1.5, "
    "(SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 100) i), now() "
    "FROM generate_series(1, 300) g",  # blobs of 3200 characters that do not compress: stored out of line
    "INSERT INTO public.notes SELECT g, E'note \"' || g || E'\"\\n', g % 2 = 0 FROM generate_series(1, 50) g",
    "UPDATE public.accounts SET balance = balance + 1 WHERE id % 3 = 0",  # the TOASTed blob is unchanged
    "BEGIN; UPDATE public.notes SET body = body || '!' WHERE id < 10; "
    "DELETE FROM public.accounts WHERE id > 290; UPDATE public.notes SET done = NOT done WHERE id < 5; COMMIT",
    "UPDATE public.accounts SET id = id + 1000 WHERE id = 5",  # a key change: a delete, its tombstone, a create
    "SELECT pg_logical_emit_message(true, 'cdckit.heartbeat', '{slot}')",
    "ALTER TABLE public.notes ADD COLUMN rating numeric(4,1)",
    "UPDATE public.notes SET rating = id / 3.0 WHERE id > 40",
    "DELETE FROM public.notes WHERE id = 50",
    "ALTER TABLE public.notes REPLICA IDENTITY FULL",  # old images in full: 'O' tuples
    "UPDATE public.notes SET done = true WHERE id BETWEEN 20 AND 22",
    "DELETE FROM public.notes WHERE id = 23",
]


def _records(batches: Any) -> list[tuple[Any, ...]]:
    rows = pa.Table.from_batches(list(batches)).to_pylist()
    return [(r["topic"], r["key"], r["value"] and PROCESSING_TIME.sub(r"\g<1>0", r["value"]), r["table"], r["op"],
             r["commit_lsn"], r["lsn"], r["serial"], 0 if r["op"].startswith("_") else r["source_ts_ms"], r["headers"],
             r["value_binary"]) for r in rows]  # a control row (a structure for the driver) is stamped when made


# How the peek's output is taken: runs of row changes looked at together (blocks of 1 MiB; blocks of a few hundred
# bytes, which cut runs and messages; every run however short), or each message on its own.
READING = {"runs": (1024 * 1024, decoder.MIN_RUN), "small-blocks": (300, 2), "every-run": (1024 * 1024, 1),
           "message-by-message": (1024 * 1024, 10**9)}


@pytest.mark.parametrize("release", ["2.5", "3.6"])
@pytest.mark.parametrize("reading", list(READING))
@pytest.mark.parametrize("settings", [{}, {"tombstones.on.delete": "false", "value.converter.schemas.enable": "false",
                                           "skipped.operations": "u"}], ids=["default", "no-tombstones-no-updates"])
def test_columnar_stream_records_equal_the_record_by_record_reference(postgres: Any, database: str, workdir: Path,
                                                                      settings: dict[str, str], reading: str,
                                                                      release: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    read_size, min_run = READING[reading]
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.accounts (id int PRIMARY KEY, owner text, balance numeric(12,2), blob text, "
                 "opened timestamptz)",
            "CREATE TABLE public.notes (id int PRIMARY KEY, body varchar(100), done boolean)")
    config = make_config(postgres, database, workdir, **{"table.include.list": r"public\.(accounts|notes)",
                                                         "cdckit.debezium.format": release, **settings})
    options, _tables = prepare_source(config)
    exported = create_slot_exporting_snapshot(options)
    exported.release()
    execute(dsn, *(change.replace("{slot}", options["slot.name"]) for change in CHANGES))
    end = parse_lsn(fetch(dsn, "SELECT pg_current_wal_lsn()::text")[0][0])
    reader = PostgresChangeStreamReader({**config.as_properties(include_secrets=True), "heartbeat.interval.ms": "1"})
    partition = LsnRange(exported.consistent_point, end)

    decoded_one_by_one = 0
    decode = pgoutput.decode_message
    taken_one_by_one = 0
    take_plain = ChangeDecoder.take_plain

    def counted(data: bytes) -> Any:
        nonlocal decoded_one_by_one
        decoded_one_by_one += 1
        return decode(data)

    def taken(decoder: ChangeDecoder, *args: Any) -> bool:
        nonlocal taken_one_by_one
        taken_one_by_one += 1
        return take_plain(decoder, *args)

    monkeypatch.setattr(pgoutput, "decode_message", counted)
    monkeypatch.setattr(ChangeDecoder, "take_plain", taken)
    monkeypatch.setattr(peek, "_READ_SIZE", read_size)
    monkeypatch.setattr(decoder, "MIN_RUN", min_run)
    assert DecodedRange(reader.options, partition, reader.slot_name).columnar  # either release, no fallback
    columnar = _records(reader.read(partition))
    # plain changes (inserts, updates without an old image, deletes) are decoded a column at a time
    assert decoded_one_by_one < len(columnar) / 4
    # and, but for short runs, taken from the peek's output together
    if reading in ("runs", "every-run"):
        assert taken_one_by_one < len(columnar) / 4
    elif reading == "message-by-message":
        assert taken_one_by_one > len(columnar)
    monkeypatch.undo()
    # the partition's last row is what it read, for the driver's metrics (cdckit.observe)
    stats_row = columnar.pop()
    assert stats_row[4] == "_stats"
    stats = json.loads(stats_row[2])
    reference = _records(arrow_batches(reader.rows(partition)))
    assert columnar == reference
    data = [record for record in reference if record[4] in ("c", "u", "d")]
    assert stats["ops"] == dict(Counter(record[4] for record in data))
    # skipped updates are counted as filtered (a key change is a delete and a create, which are not skipped)
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                    "'publication_names', %s) WHERE get_byte(data, 0) = 85 AND get_byte(data, 5) <> 75",
                    (options["slot.name"], options["publication.name"]))
        skipped_updates = cur.fetchone()[0]
    assert stats["filtered"] == (skipped_updates if settings else 0)
    assert stats["transactions"] == len({record[5] for record in data})
    assert stats["last"]["position"] == list(max(record[5:8] for record in data))
    ops = [record[4] for record in columnar]
    assert set(ops) == {"_schema", "c", "d", "hb"} | ({"u", "tombstone"} if not settings else set())
    assert len(columnar) > 350
    assert any("__debezium_unavailable_value" in (record[2] or "") for record in columnar)
    if release == "3.6":  # each change's source time is its commit's own, to the microsecond (pgoutput's Begin)
        documents = [json.loads(record[2]) for record in data if record[2]]
        sources = [document.get("payload", document)["source"] for document in documents]
        assert all(source["ts_us"] // 1000 == source["ts_ms"] and source["ts_ns"] == source["ts_us"] * 1000
                   for source in sources)
        assert any(source["ts_us"] % 1000 for source in sources)
        transactions = {source["txId"] for source in sources}
        assert len(transactions) > 5 and len({(s["txId"], s["ts_us"]) for s in sources}) == len(transactions)
