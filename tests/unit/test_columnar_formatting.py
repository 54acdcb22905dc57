"""Snapshot reads and streamed changes formatted a column at a time (``ColumnarReads``, ``ColumnarChanges``)
against the reference, a row at a time (``TableFormat.key_json`` / ``value_json``): the same bytes for generated
rows of every kind of column, plain values and the ones the kernels leave to the reference (escapes, BC dates,
infinities, pre-1582 timestamps, NaN), nulls, defaults and unchanged TOASTed values, under each handling mode and
with schemas on and off, in either release's records (``cdckit.debezium.format``: Debezium 2.5.2's and 3.6.0's)."""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pgoutput import tuple_data

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.errors import UnsupportedValueError
from cdckit.events import UNAVAILABLE, ChangeEvent, Position
from cdckit.formats.debezium.columnar import CannotFormat, ColumnarChanges, ColumnarReads, read_event, supports
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.formats.debezium.source import FORMATS
from cdckit.spark.rows import arrow_batches, event_rows

LSN, TS_MS, TX_ID, NOW_MS = 23_456_789, 1_700_000_000_123, 771, 1_700_000_000_999
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20)
PLAIN_TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FF, exclude_characters='"\\'),
                     max_size=20)


def _timestamptz(moment: dt.datetime) -> str:
    text = moment.isoformat(sep=" ", timespec="seconds")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return text + "+00"


DATES = st.one_of(st.dates().map(lambda d: d.isoformat()),
                  st.sampled_from(["infinity", "-infinity", "0044-03-15 BC", "10000-01-01", "1582-10-04"]))
TIMESTAMPTZ = st.one_of(st.datetimes(min_value=dt.datetime(1, 1, 1)).map(_timestamptz),
                        st.sampled_from(["infinity", "-infinity", "0044-03-15 10:00:00+00 BC",
                                         "1500-01-01 00:00:00.5+00", "2024-03-05 10:20:05.12+00"]))
# numeric(12,2) as PostgreSQL prints it, the special values, and longer ones a wider column would hold
NUMERIC_12_2 = st.one_of(st.decimals(min_value=Decimal("-9999999999.99"), max_value=Decimal("9999999999.99"),
                                     places=2, allow_nan=False).map(lambda d: f"{d:.2f}"),
                         st.sampled_from(["NaN", "0.00", "-0.01", "127.99", "-128.00", "1.28"]))
NUMERIC_30_4 = st.decimals(min_value=Decimal("-1e25"), max_value=Decimal("1e25"), places=4,
                           allow_nan=False).map(lambda d: f"{d:.4f}")
NUMERIC_ANY = st.decimals(allow_nan=False, allow_infinity=False, places=3,
                          min_value=Decimal("-1e12"), max_value=Decimal("1e12")).map(str)

# (column, values it may hold)
COLUMNS: list[tuple[ColumnType, st.SearchStrategy[Any]]] = [
    (ColumnType("id", "int8", 20, optional=False), st.integers(-2**63, 2**63 - 1).map(str)),
    (ColumnType("small", "int2", 21), st.integers(-2**15, 2**15 - 1).map(str)),
    (ColumnType("n", "int4", 23, default_expression="42"), st.integers(-2**31, 2**31 - 1).map(str)),
    (ColumnType("flag", "bool", 16), st.sampled_from(["t", "f"])),
    (ColumnType("name", "text", 25), st.one_of(TEXT, PLAIN_TEXT)),
    (ColumnType("code", "varchar", 1043, modifier=14, default_expression="'it''s'::character varying"),
     st.one_of(TEXT, PLAIN_TEXT)),
    (ColumnType("padded", "bpchar", 1042, modifier=9), PLAIN_TEXT.map(lambda t: t[:5].ljust(5))),
    (ColumnType("ref", "uuid", 2950), st.uuids().map(str)),
    (ColumnType("doc", "jsonb", 3802), TEXT.map(lambda t: '{"a": ' + repr(len(t)) + "}")),
    (ColumnType("born", "date", 1082), DATES),
    (ColumnType("at", "timestamptz", 1184), TIMESTAMPTZ),
    (ColumnType("at3", "timestamptz", 1184, modifier=3), st.datetimes(min_value=dt.datetime(1583, 1, 1)).map(
        lambda m: _timestamptz(m.replace(microsecond=m.microsecond // 1000 * 1000)))),
    (ColumnType("at0", "timestamptz", 1184, modifier=0), st.datetimes(min_value=dt.datetime(1583, 1, 1)).map(
        lambda m: _timestamptz(m.replace(microsecond=0)))),
    (ColumnType("price", "numeric", 1700, modifier=(12 << 16 | 2) + 4), NUMERIC_12_2),
    (ColumnType("big", "numeric", 1700, modifier=(30 << 16 | 4) + 4), NUMERIC_30_4),
    (ColumnType("whole", "numeric", 1700, modifier=(18 << 16) + 4), st.integers(-10**17, 10**17).map(str)),
    (ColumnType("amount", "numeric", 1700), NUMERIC_ANY),
    (ColumnType("ratio", "float8", 701), st.floats(allow_nan=False, allow_infinity=False).map(repr)),
    (ColumnType("ts", "timestamp", 1114), st.datetimes().map(lambda m: str(m))),
]
TABLE = TableInfo("inventory", "mixed \"t\"", 16385, tuple(c for c, _ in COLUMNS), ("id", "ref"), "d")
MODES = [
    {},
    {"decimal.handling.mode": "string", "time.precision.mode": "connect"},
    {"decimal.handling.mode": "double", "time.precision.mode": "adaptive_time_microseconds"},
    {"key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false"},
    {"column.mask.with.4.chars": "inventory.mixed \"t\".name", "column.truncate.to.3.chars": ".*code",
     "field.name.adjustment.mode": "avro"},
]


@st.composite
def rows(draw: Any) -> list[dict[str, str | None]]:
    count = draw(st.integers(1, 12))
    found = []
    for _ in range(count):
        row: dict[str, str | None] = {}
        for column, values in COLUMNS:
            row[column.name] = draw(values if not column.optional else st.one_of(st.none(), values))
        found.append(row)
    return found


def _reference(table_format: TableFormat, block: list[dict[str, str | None]], markers: list[str]
               ) -> tuple[list[str | None], list[str]]:
    keys, values = [], []
    for row, marker in zip(block, markers, strict=True):
        event = ChangeEvent(TABLE.schema, TABLE.name, "r", None, row, Position(LSN, LSN, 0), TS_MS, TX_ID,
                            snapshot=marker, sequence=(None, LSN))
        keys.append(table_format.key_json(row, read=True))
        values.append(table_format.value_json(event, NOW_MS))
    return keys, values


def _columnar(table_format: TableFormat, block: list[dict[str, str | None]], markers: list[str]
              ) -> tuple[list[str | None] | None, list[str]]:
    columns = {c.name: pa.array([row[c.name] for row in block], type=pa.string()) for c, _ in COLUMNS}
    reads = ColumnarReads(table_format, table_format.settings.topic_prefix)
    keys, values = reads.texts(columns, pa.array(markers, type=pa.string()),
                               lambda marker: read_event(TABLE.schema, TABLE.name, LSN, TS_MS, TX_ID, marker), NOW_MS)
    return (None if keys is None else keys.to_pylist()), values.to_pylist()


def _format(mode: dict[str, str], release: str = "2.5") -> TableFormat:
    return TableFormat(TABLE, format_settings({"topic.prefix": "shop", "database.dbname": "db",
                                               "cdckit.debezium.format": release, **mode}))


# Every comparison runs for each release cdckit writes (decision 0028)
by_release = pytest.mark.parametrize("release", FORMATS)


@by_release
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: ",".join(f"{k}={v}" for k, v in mode.items()) or "default")
def test_columnar_reads_are_byte_for_byte_the_reference(mode: dict[str, str], release: str) -> None:
    table_format = _format(mode, release)
    assert supports(table_format)

    @settings(max_examples=60, deadline=None)
    @given(rows(), st.sampled_from(["true", "first", "last", "first_in_data_collection"]))
    def check(block: list[dict[str, str | None]], marker: str) -> None:
        markers = [marker] + ["true"] * (len(block) - 1)
        assert _columnar(table_format, block, markers) == _reference(table_format, block, markers)

    check()


@by_release
def test_plain_values_take_the_kernels_and_match(release: str) -> None:
    """Every value plain: no column but the generic ones goes through the reference."""
    table_format = _format({}, release)
    block = [{"id": "1", "small": "-3", "n": None, "flag": "t", "name": "caf\u00e9", "code": None, "padded": "ab   ",
              "ref": str(uuid.UUID(int=7)), "doc": '{"a": 1}', "born": "2024-02-29", "at": "2024-03-05 10:20:05.12+00",
              "at3": "1999-12-31 23:59:59.5+00", "at0": "2000-01-01 00:00:00+00", "price": "-128.00",
              "big": "123.4500", "whole": "99999999999999999", "amount": "1.5", "ratio": "0.1",
              "ts": "2024-01-01 00:00:00"}]
    assert _columnar(table_format, block, ["true"]) == _reference(table_format, block, ["true"])
    kinds = {converter.field.name: converter.kind for converter in ColumnarReads(table_format, "shop").values}
    assert kinds == {"id": "integer", "small": "integer", "n": "integer", "flag": "boolean", "name": "string",
                     "code": "string", "padded": "string", "ref": "string", "doc": "string", "born": "date",
                     "at": "timestamptz", "at3": "timestamptz", "at0": "timestamptz", "price": "decimal",
                     "big": "decimal", "whole": "decimal", "amount": "generic", "ratio": "generic", "ts": "generic"}


@by_release
def test_a_nan_in_precise_mode_is_null_as_in_the_reference(release: str) -> None:
    table_format = _format({}, release)
    block = [{c.name: None for c, _ in COLUMNS} | {"id": "1", "ref": str(uuid.UUID(int=1)), "price": "NaN"}]
    keys, values = _columnar(table_format, block, ["true"])
    assert (keys, values) == _reference(table_format, block, ["true"])
    assert '"price":null' in values[0]


# The special values of numbers and times, a column of each kind: numeric with and without a typmod (PostgreSQL
# keeps only NaN in the first, 14 and later hold the infinities in the second), floats, dates and timestamps.
SPECIAL_COLUMNS = (ColumnType("id", "int4", 23, optional=False), ColumnType("v", "numeric", 1700,
                   modifier=(10 << 16 | 2) + 4), ColumnType("n", "numeric", 1700), ColumnType("f", "float8", 701),
                   ColumnType("r", "float4", 700), ColumnType("d", "date", 1082), ColumnType("ts", "timestamp", 1114),
                   ColumnType("tz", "timestamptz", 1184), ColumnType("tz0", "timestamptz", 1184, modifier=0))
SPECIAL_TABLE = TableInfo("public", "readings", 16390, SPECIAL_COLUMNS, ("id",), "d")
SPECIAL_ROWS: list[dict[str, str | None]] = [
    {"id": "1", "v": "1.50", "n": "1.5", "f": "1.5", "r": "1.5", "d": "2024-03-05", "ts": "2024-03-05 10:20:05",
     "tz": "2024-03-05 10:20:05+00", "tz0": "2024-03-05 10:20:05+00"},
    {"id": "2", "v": "NaN", "n": "NaN", "f": "NaN", "r": "NaN", "d": "infinity", "ts": "infinity", "tz": "infinity",
     "tz0": "infinity"},
    {"id": "3", "v": "NaN", "n": "Infinity", "f": "Infinity", "r": "Infinity", "d": "-infinity", "ts": "-infinity",
     "tz": "-infinity", "tz0": "-infinity"},
    {"id": "4", "v": None, "n": "-Infinity", "f": "-Infinity", "r": "-Infinity", "d": None, "ts": None, "tz": None,
     "tz0": None},
]
SPECIAL_MODES = [*MODES[:3], {"decimal.handling.mode": "double", "time.precision.mode": "connect"}]
# Each mode's v of rows 2-3 (NaN) and n of rows 2-4 (NaN, Infinity, -Infinity), as the reference writes them
# (checked against Debezium 2.5.2 by the parity corpus, table t_numeric_read): a snapshot in precise mode writes null
# with an error logged once per column (Debezium's snapshot logs "Failed to properly convert data value"); the
# stream stops on them.
SPECIAL_NUMERICS = {
    "precise": [None, None, None, None, None],
    "string": ["NAN", "NAN", "NAN", "POSITIVE_INFINITY", "NEGATIVE_INFINITY"],
    "double": ["NaN", "NaN", "NaN", "Infinity", "-Infinity"],
}


def _special_format(mode: dict[str, str], release: str) -> TableFormat:
    return TableFormat(SPECIAL_TABLE, format_settings({"topic.prefix": "shop", "database.dbname": "db",
                                                       "cdckit.debezium.format": release, **mode}))


@by_release
@pytest.mark.parametrize("mode", SPECIAL_MODES,
                         ids=lambda mode: ",".join(f"{k}={v}" for k, v in mode.items()) or "default")
def test_special_values_read_and_streamed_as_in_the_reference(mode: dict[str, str], release: str) -> None:
    """NaN and the infinities of numerics and floats, and infinite dates and timestamps: the same texts from the
    columns as from the reference, for reads and for streamed changes (or the same error)."""
    table_format = _special_format(mode, release)
    markers = ["first"] + ["true"] * (len(SPECIAL_ROWS) - 2) + ["last"]
    reference_keys, reference_values = [], []
    for row, marker in zip(SPECIAL_ROWS, markers, strict=True):
        event = ChangeEvent("public", "readings", "r", None, row, Position(LSN, LSN, 0), TS_MS, TX_ID,
                            snapshot=marker, sequence=(None, LSN))
        reference_keys.append(table_format.key_json(row, read=True))
        reference_values.append(table_format.value_json(event, NOW_MS))
    columns = {c.name: pa.array([row[c.name] for row in SPECIAL_ROWS], type=pa.string()) for c in SPECIAL_COLUMNS}
    keys, values = ColumnarReads(table_format, "shop").texts(
        columns, pa.array(markers, type=pa.string()),
        lambda marker: read_event("public", "readings", LSN, TS_MS, TX_ID, marker), NOW_MS)
    assert keys is not None
    assert (keys.to_pylist(), values.to_pylist()) == (reference_keys, reference_values)
    payloads = [json.loads(value)["payload"]["after"] for value in values.to_pylist()]
    numerics = [payload["v"] for payload in payloads[1:3]] + [payload["n"] for payload in payloads[1:]]
    assert numerics == SPECIAL_NUMERICS[mode.get("decimal.handling.mode", "precise")]
    assert [payload["f"] for payload in payloads[1:]] == ["NaN", "Infinity", "-Infinity"]

    events = [ChangeEvent("public", "readings", "c", None, row, Position(900 + i, 800 + i, 0), TS_MS, TX_ID,
                          sequence=(None, 800 + i), extra={"source_ts_us": TS_MS * 1000 + 456})
              for i, row in enumerate(SPECIAL_ROWS)]
    changes = ColumnarChanges(table_format, "shop")
    try:
        expected = [table_format.value_json(event, NOW_MS) for event in events]
    except UnsupportedValueError as error:  # NaN in precise mode stops the stream, with the same message
        assert "decimal.handling.mode" not in mode
        with pytest.raises(UnsupportedValueError, match=re.escape(str(error))):
            changes.texts(events, NOW_MS)
        return
    assert changes.texts(events, NOW_MS)[1].to_pylist() == expected


@by_release
def test_yboutput_and_sql_server_keep_the_reference(release: str) -> None:
    assert not supports(_format({"plugin.name": "yboutput"}, release))
    assert not supports(TableFormat(TABLE, format_settings({
        "topic.prefix": "shop", "connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
        "cdckit.debezium.format": release})))


KEYS = ("id", "ref")


@st.composite
def images(draw: Any, key_only: bool = False) -> dict[str, Any]:
    """A row as pgoutput delivers it: text values, nulls, and (not in keys) values the change did not carry."""
    row: dict[str, Any] = {}
    for column, values in COLUMNS:
        if key_only and column.name not in KEYS:
            continue
        choices = [values] if not column.optional else [st.none(), values]
        if column.name not in KEYS:
            choices.append(st.just(UNAVAILABLE))
        row[column.name] = draw(st.one_of(*choices))
    return row


@st.composite
def changes(draw: Any) -> list[ChangeEvent]:
    events = []
    for index in range(draw(st.integers(1, 10))):
        op = draw(st.sampled_from(["c", "u", "d"]))
        before = None if op == "c" else draw(st.one_of(st.none(), images(), images(key_only=True)))
        if op == "d" and before is None:
            before = draw(images(key_only=True))
        after = None if op == "d" else draw(images())
        last_commit = draw(st.one_of(st.none(), st.integers(0, 2**40)))
        # the commit's own microseconds, as pgoutput's Begin gives them (each change its own), or none: a source
        # time known to the millisecond only
        micros = draw(st.one_of(st.none(), st.integers(0, 2**51)))
        ts_ms = draw(st.integers(0, 2**41)) if micros is None else micros // 1000
        events.append(ChangeEvent(TABLE.schema, TABLE.name, op, before, after, Position(900 + index, 800 + index, 0),
                                  ts_ms, draw(st.one_of(st.none(), st.integers(0, 2**32))),
                                  sequence=(last_commit, 800 + index),
                                  extra={} if micros is None else {"source_ts_us": micros}))
    return events


@by_release
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: ",".join(f"{k}={v}" for k, v in mode.items()) or "default")
def test_columnar_changes_are_byte_for_byte_the_reference(mode: dict[str, str], release: str) -> None:
    table_format = _format(mode, release)
    columnar = ColumnarChanges(table_format, "shop")

    @settings(max_examples=60, deadline=None)
    @given(changes())
    def check(events: list[ChangeEvent]) -> None:
        key_rows = [(e.after if e.op in ("c", "u") else e.before) or {} for e in events]
        try:
            expected = ([table_format.key_json(row) for row in key_rows],
                        [table_format.value_json(event, NOW_MS) for event in events])
        except UnsupportedValueError as error:  # NaN in precise mode stops the stream, with the same message
            with pytest.raises(UnsupportedValueError, match=re.escape(str(error))):
                columnar.texts(events, NOW_MS)
            return
        keys, values = columnar.texts(events, NOW_MS)
        assert keys is not None
        assert (keys.to_pylist(), values.to_pylist()) == expected

    check()


@by_release
def test_a_key_the_change_did_not_carry_is_left_to_the_reference(release: str) -> None:
    table_format = _format({}, release)
    row = {c.name: None for c, _ in COLUMNS} | {"id": "1", "ref": UNAVAILABLE}
    event = ChangeEvent(TABLE.schema, TABLE.name, "c", None, row, Position(2, 1, 0), 0, 5, sequence=(None, 1))
    with pytest.raises(CannotFormat):
        ColumnarChanges(table_format, "shop").texts([event], NOW_MS)


# The change reader's plain path (``DecodedRange._formatted_plain``): pgoutput's messages decoded a column at a time
# and formatted by ``ColumnarChanges``, against the events ``feed`` makes of the same messages, a record at a time.
ACCOUNTS = TableInfo("public", "accounts", 16390, (
    ColumnType("id", "int4", 23, optional=False), ColumnType("owner", "text", 25),
    ColumnType("balance", "numeric", 1700, modifier=(12 << 16 | 2) + 4), ColumnType("opened", "timestamptz", 1184)),
    ("id",), "d")
PG_EPOCH_US = 946_684_800_000_000


def _transaction(final_lsn: int, unix_us: int, xid: int, at: int, changes: list[bytes]) -> list[tuple[int, bytes]]:
    """A transaction's messages from LSN ``at`` on: its Begin, its changes, its Commit at ``final_lsn``."""
    begin = b"B" + struct.pack(">qqi", final_lsn, unix_us - PG_EPOCH_US, xid)
    commit = b"C" + struct.pack(">bqqq", 0, final_lsn, final_lsn + 8, unix_us - PG_EPOCH_US)
    return [(at, begin), *((at + 1 + i, change) for i, change in enumerate(changes)), (final_lsn, commit)]


@by_release
def test_the_stream_readers_plain_changes_are_the_reference(release: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three transactions in one run of plain changes (inserts, an update with an unchanged TOASTed value, a
    delete), two committed in the same millisecond: the same records as the events give, each change with its own
    commit's microseconds (Debezium 3's source ``ts_us``), formatted a column at a time."""
    from cdckit.dialect.postgres.decoder import ChangeDecoder
    from cdckit.spark import rows
    from cdckit.spark.sources import postgres_stream_partition
    from cdckit.spark.sources.postgres_stream_partition import DecodedRange, LsnRange

    monkeypatch.setattr(rows, "now_ms", lambda: NOW_MS)
    monkeypatch.setattr(postgres_stream_partition, "now_ms", lambda: NOW_MS)
    relid = struct.pack(">i", ACCOUNTS.oid)
    relation = b"R" + relid + b"public\x00accounts\x00d" + struct.pack(">h", 4) + b"".join(
        struct.pack(">b", flags) + name.encode() + b"\x00" + struct.pack(">ii", oid, typmod)
        for flags, name, oid, typmod in [(1, "id", 23, -1), (0, "owner", 25, -1),
                                         (0, "balance", 1700, (12 << 16 | 2) + 4), (0, "opened", 1184, -1)])

    def insert(id_: int, owner: str | None, balance: str) -> bytes:
        return b"I" + relid + b"N" + tuple_data(id_, owner, balance, "2024-03-05 10:20:05.25+00")

    messages = [
        *_transaction(1000, 1_700_000_000_123_456, 501, 100,
                      [relation, *(insert(i, f'owner "{i}"' if i % 2 else f"owner {i}", f"{i}.50") for i in range(6))]),
        *_transaction(2000, 1_700_000_001_000_001, 502, 1010, [
            b"U" + relid + b"N" + tuple_data(3, UNAVAILABLE, "-7.25", None),
            b"D" + relid + b"K" + tuple_data(4, None, None, None), insert(10, None, "0.00")]),
        *_transaction(3000, 1_700_000_001_000_999, 503, 2010, [insert(11, "late", "12345678.90")]),
    ]
    options = {"topic.prefix": "shop", "database.dbname": "db", "cdckit.debezium.format": release}
    decoded = DecodedRange(options, LsnRange(0, 10_000), "")
    assert decoded.columnar
    table_format = TableFormat(ACCOUNTS, decoded.settings)
    decoded.tables[(ACCOUNTS.schema, ACCOUNTS.name)] = (ACCOUNTS, table_format)
    decoder = decoded.decoder = ChangeDecoder(0, 10_000, lambda _relation: ACCOUNTS)
    for lsn, data in messages:
        if not decoder.take_plain(lsn, data, decoded.formatted_ops):
            assert not list(decoder.feed(lsn, data))  # the Relation message
    plain = decoder.plain_changes()
    assert plain is not None and len(plain) == 10 and len(plain.begins) == 3
    events = list(decoder.events_of(plain))

    def no_events(_plain: object) -> None:
        raise AssertionError("the plain changes were made into events")

    monkeypatch.setattr(decoder, "events_of", no_events)
    formatted = pa.Table.from_batches(list(decoded._formatted_plain(plain))).to_pylist()
    reference = pa.Table.from_batches(list(arrow_batches(
        row for event in events for row in event_rows(event, table_format, tombstones=True)))).to_pylist()
    assert formatted == reference
    sources = [json.loads(row["value"])["payload"]["source"] for row in formatted if row["value"]]
    assert [source["ts_ms"] for source in sources] == [1_700_000_000_123] * 6 + [1_700_000_001_000] * 4
    if release == "3.6":
        assert [source["ts_us"] for source in sources] == \
            [1_700_000_000_123_456] * 6 + [1_700_000_001_000_001] * 3 + [1_700_000_001_000_999]
        assert all(source["ts_ns"] == source["ts_us"] * 1000 for source in sources)
