"""cdckit's records against Debezium's own: the same table and changes captured by Debezium 2.5.2's PostgreSQL
connector (the release whose format cdckit reproduces, run from Maven Central through its embedded engine and
Kafka Connect's JsonConverter into the real broker) and by cdckit, compared as text.

Only what two captures cannot share is masked: the positions (``lsn``, ``txId``, ``sequence``) and the clock
(``ts_ms``). Everything else (schemas, field order, value encodings, escapes, snapshot markers) must be the same
bytes. Edge rows cover timestamptz fractions ending in zeros, NULLs, numeric limits, far dates, text JSON must
escape and a character beyond U+FFFF.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, make_config

from cdckit.pipelines.dispatch import run_snapshot, run_stream
from cdckit_lab.debezium import EDGE_ROWS, FORMAT_VERSION, EndOffsets, ensure_topic, read_records, run_debezium

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# Its own topic prefix: the suite's other tests read the shared broker's "it." topics.
PREFIX = "dbzcompat"
TOPIC = f"{PREFIX}.public.orders"
WIDE_TOPIC = f"{PREFIX}.public.wide"
TABLE = ("CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL, "
         "placed_at timestamptz NOT NULL, due date, paid boolean, ref uuid, note text)")
FILL = ("INSERT INTO public.orders SELECT g, 'customer-' || g, g / 100.0, TIMESTAMPTZ '2024-01-01 00:00:00+00' + "
        "g * interval '1.25 second', DATE '2024-01-01' + g, g % 2 = 0, md5(g::text)::uuid, md5(g::text) "
        "FROM generate_series(8, 40) g")
# Most PostgreSQL types cdckit maps, at ordinary and awkward values (shortest floats, NaN, infinities, empty bit
# strings, arrays with NULLs, timestamps at declared precisions). Not here: timestamps before 1582, which
# Debezium's snapshot reads through java.sql.Timestamp's Julian calendar (two days off in year 1) while its
# stream, and cdckit, count proleptic Gregorian days; xml, which this PostgreSQL build lacks.
WIDE = ("CREATE TABLE public.wide (id integer PRIMARY KEY, c_int2 smallint, c_int8 bigint, c_f4 real, "
        "c_f8 double precision, c_num numeric, c_num0 numeric(10,0), c_money money, c_vc varchar(10), c_ch char(3), "
        "c_bytea bytea, c_json json, c_jsonb jsonb, c_time time, c_time3 time(3), c_timetz timetz, c_ts timestamp, "
        "c_ts3 timestamp(3), c_tstz0 timestamptz(0), c_tstz3 timestamptz(3), c_interval interval, c_bit bit(3), "
        "c_varbit varbit(8), c_bool boolean, c_inet inet, c_cidr cidr, c_mac macaddr, c_ia int4[], c_ta text[], "
        "c_date date, c_oid oid)")
WIDE_ROWS = (
    "(1, 1, 9223372036854775807, 1.5, 3.141592653589793, 12345.678900, 42, 12.34, 'abc', 'ab', '\\x0102ff', "
    "'{\"a\": 1, \"b\":[1,2]}', '{\"b\": 2, \"a\": 1}', '13:14:15.123456', '13:14:15.120', '13:14:15.5+02', "
    "'2024-01-02 03:04:05.5', '2024-01-02 03:04:05.12', '2024-01-02 03:04:05+00', '2024-01-02 03:04:05.1+00', "
    "'1 year 2 mons 3 days 04:05:06.5', B'101', B'1101', true, '192.168.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', "
    "'{1,2,NULL}', '{\"a b\",c}', DATE '2024-02-29', 12345)",
    "(2, -1, -1, -0.0, 1e300, 0.000001, -5, -1.00, '', '   ', '\\x', '[]', '{}', '00:00:00', '23:59:59.999', "
    "'00:00:00+00', '1900-01-01 00:00:00', '1970-01-01 00:00:00', '1970-01-01 00:00:00+00', "
    "'1969-12-31 23:59:59.999+00', '-1 days -00:00:01', B'000', B'', false, '::1', '::/0', 'ff:ff:ff:ff:ff:ff', "
    "'{}', '{}', DATE '1970-01-01', 0)",
    "(3, NULL, NULL, 'NaN', 'Infinity', 'NaN'" + ", NULL" * 25 + ")",
    "(4, 32767, 0, 3.4028235e38, 1e-5, 100, 9999999999, 0, 'x', 'xyz', '\\x00', 'null', '[1, 2.50, \"x\"]', "
    "'24:00:00', '00:00:00.001', '23:59:59-05', '2024-06-30 23:59:59.999999', '2024-06-30 23:59:59.999', "
    "'2024-06-30 23:59:59+00', '2024-06-30 23:59:59.999+00', '0', B'111', B'10000000', true, '10.1.2.3/24', "
    "'192.168.0.0/16', '00:00:00:00:00:00', '{5}', '{NULL}', DATE '0001-01-01', 4294967295)",
)
CHANGES = (
    "INSERT INTO public.orders VALUES (100, 'new 😀', 1.00, '2024-05-01 00:00:00.5+00', NULL, true, NULL, E'tab\\t')",
    "UPDATE public.orders SET note = 'changed', amount = amount + 1, placed_at = '2024-06-01 12:00:00+00' "
    "WHERE id = 2",
    "DELETE FROM public.orders WHERE id = 3",
)
_VOLATILE = re.compile(r'"(ts_ms|ts_us|ts_ns|txId|lsn)":\d+|"sequence":"(?:[^"\\]|\\.)*"')


def _masked(text: str | None) -> str | None:
    return None if text is None else _VOLATILE.sub(lambda m: f'"{m.group(1) or "sequence"}":0', text)


def _cdckit_texts(output: Path, topic: str = TOPIC) -> list[tuple[str | None, str | None]]:
    """(key, value) texts of the files sink's records of ``topic``, in file order, exactly as written."""
    decoder = json.JSONDecoder()
    texts = []
    folder = output / topic
    for path in sorted(folder.glob("snapshot-*.jsonl")) + sorted(folder.glob("stream-*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n")[:-1]:  # not splitlines(): U+2028 is text
            # '{"topic":<string>,"key":<key JSON>,"value":<value JSON>,"headers":[...]}', each part read whole
            _, end = decoder.raw_decode(line, len('{"topic":'))
            parts: list[str | None] = []
            for name in ("key", "value"):
                start = end + len(f',"{name}":')
                assert line[end:start] == f',"{name}":'
                _, end = decoder.raw_decode(line, start)
                parts.append(None if line[start:end] == "null" else line[start:end])
            texts.append((parts[0], parts[1]))
    return texts


def _where(theirs: str | None, ours: str | None) -> str:
    """Where two texts first differ, with some context on each side."""
    a, b = theirs or "null", ours or "null"
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"Debezium ...{a[max(0, at - 80):at + 60]}...\ncdckit   ...{b[max(0, at - 80):at + 60]}..."


def _op(value: str | None) -> str:
    return "tombstone" if value is None else json.loads(value)["payload"]["op"]


@pytest.mark.parametrize("release,debezium_format", [(FORMAT_VERSION, "2.5"), ("3.6.0.Final", "3.6")])
def test_records_are_byte_identical_to_debezium_but_positions_and_clocks(
        postgres: Any, spark: Any, kafka: Any, database: str, workdir: Path, release: str,
        debezium_format: str) -> None:
    """Debezium 2.5.2 (the default format) and Debezium 3.6.0 (``cdckit.debezium.format=3.6``), each run from
    Maven Central through its embedded engine, with Debezium Server's Kafka sink behaviour and JsonConverter: the
    texts Debezium Server writes (``CDCKIT_DEBEZIUM_RUNTIME=server`` runs Debezium Server 3.6.0 itself, which needs
    Java 21 or later)."""
    dsn = postgres.dsn(database)
    execute(dsn, TABLE, "INSERT INTO public.orders VALUES " + ", ".join(EDGE_ROWS), FILL,
            WIDE, "INSERT INTO public.wide VALUES " + ", ".join(WIDE_ROWS))
    rows = 40
    config = make_config(postgres, database, workdir, **{"topic.prefix": PREFIX,
                                                         "cdckit.debezium.format": debezium_format})
    assert run_snapshot(spark, config).rows == rows + len(WIDE_ROWS)  # cdckit's slot exists before the changes

    ensure_topic(kafka.bootstrap_servers, WIDE_TOPIC)  # the broker creates no topics; Debezium's sink neither
    offsets = EndOffsets(kafka.bootstrap_servers, WIDE_TOPIC)
    wide_offset = offsets.total()
    offsets.close()
    debezium = run_debezium(
        postgres.connector_properties(database), kafka.bootstrap_servers, workdir / "debezium",
        table_include="public.orders,public.wide", snapshot_mode="initial", expected_records=rows + 4, topic=TOPIC,
        topic_prefix=PREFIX, slot_name=f"dbz_{database}", publication_name=f"dbz_{database}",
        on_streaming=lambda: execute(dsn, *CHANGES), version=release, timeout_s=300,
        runtime=os.environ.get("CDCKIT_DEBEZIUM_RUNTIME", "embedded"))
    theirs = read_records(kafka.bootstrap_servers, TOPIC, offset=debezium["first_offset"], count=rows + 4)
    assert run_stream(spark, config).events >= 4
    ours = _cdckit_texts(Path(config.str("cdckit.output.path")))

    # Every type of the wide table, snapshot reads matched by key.
    wide_theirs = dict(read_records(kafka.bootstrap_servers, WIDE_TOPIC, offset=wide_offset, count=len(WIDE_ROWS)))
    wide_ours = dict(_cdckit_texts(Path(config.str("cdckit.output.path")), WIDE_TOPIC))
    assert set(wide_ours) == set(wide_theirs) and len(wide_ours) == len(WIDE_ROWS)
    for key, value in wide_theirs.items():
        assert _masked(wide_ours[key]) == _masked(value), _where(_masked(value), _masked(wide_ours[key]))

    # Snapshot reads, matched by key (both read the tables in name order and each in key order here, so the
    # markers line up too: orders is the first table, wide the last).
    snapshot_theirs = {key: value for key, value in theirs[:rows]}
    snapshot_ours = {key: value for key, value in ours[:rows]}
    assert set(snapshot_ours) == set(snapshot_theirs)
    differing = [key for key in snapshot_theirs if _masked(snapshot_ours[key]) != _masked(snapshot_theirs[key])]
    assert not differing, (f"{len(differing)} of {rows} snapshot records differ, first where: "
                           f"{_where(_masked(snapshot_theirs[differing[0]]), _masked(snapshot_ours[differing[0]]))}")
    markers = [json.loads(value)["payload"]["source"]["snapshot"] for _, value in ours[:rows] if value]
    assert (markers[0], markers[-1], set(markers[1:-1])) == ("first", "last_in_data_collection", {"true"})

    # The changes, in commit order: an insert, an update, a delete and its tombstone.
    assert [_op(value) for _, value in theirs[rows:]] == [_op(value) for _, value in ours[rows:]] == [
        "c", "u", "d", "tombstone"]
    for (their_key, their_value), (our_key, our_value) in zip(theirs[rows:], ours[rows:], strict=True):
        assert our_key == their_key
        assert _masked(our_value) == _masked(their_value), _where(_masked(their_value), _masked(our_value))
