"""PostgreSQL columns and text values -> Qlik Replicate columns and typed values; change sequences."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdckit.events import UNAVAILABLE
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.formats.qlik import (
    QlikChange,
    QlikSettings,
    change_sequence,
    data_message,
    decode_avro,
    encode_data,
    metadata_message,
    qlik_column,
    qlik_row,
    qlik_table,
    qlik_value,
    stream_position,
    transaction_id,
)

UTC = datetime.timezone.utc


def col(type_name: str, modifier: int = -1, name: str = "c", optional: bool = True) -> ColumnType:
    return ColumnType(name=name, type_name=type_name, type_oid=0, modifier=modifier, optional=optional)


def numeric_mod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


@pytest.mark.parametrize(("column", "expected"), [
    (col("int2"), ("INT2", 0, 0, 0)),
    (col("int4"), ("INT4", 0, 0, 0)),
    (col("int8"), ("INT8", 0, 0, 0)),
    (col("float4"), ("REAL4", 0, 0, 0)),
    (col("float8"), ("REAL8", 0, 0, 0)),
    (col("bool"), ("BOOLEAN", 0, 0, 0)),
    (col("numeric", numeric_mod(10, 2)), ("NUMERIC", 0, 10, 2)),
    (col("numeric"), ("NUMERIC", 0, 28, 6)),
    (col("numeric", numeric_mod(40, 2)), ("STRING", 42, 0, 0)),
    (col("numeric", numeric_mod(5, -2)), ("NUMERIC", 0, 7, 0)),
    (col("varchar", 24), ("STRING", 20, 0, 0)),
    (col("varchar"), ("STRING", 8000, 0, 0)),
    (col("bpchar", 9), ("STRING", 5, 0, 0)),
    (col("text"), ("CLOB", 0, 0, 0)),
    (col("bytea"), ("BLOB", 0, 0, 0)),
    (col("date"), ("DATE", 0, 0, 0)),
    (col("time"), ("TIME", 0, 0, 3)),
    (col("timestamp", 3), ("DATETIME", 0, 0, 3)),
    (col("timestamptz"), ("DATETIME", 0, 0, 6)),
    (col("uuid"), ("STRING", 36, 0, 0)),
    (col("json"), ("NCLOB", 0, 0, 0)),
    (col("jsonb"), ("NCLOB", 0, 0, 0)),
    (col("interval"), ("STRING", 8000, 0, 0)),
    (col("_int4"), ("STRING", 8000, 0, 0)),
])
def test_postgres_type_maps_to_the_qlik_type_with_length_precision_and_scale(
    column: ColumnType, expected: tuple[str, int, int, int]
) -> None:
    mapped = qlik_column(column)
    assert (mapped.type, mapped.length, mapped.precision, mapped.scale) == expected


def test_qlik_table_numbers_primary_key_columns_in_key_order_and_keeps_nullability() -> None:
    table = qlik_table("public", "t", [col("int4", name="a", optional=False), col("text", name="b"),
                                       col("int8", name="c", optional=False)], key_columns=["c", "a"])
    assert [(c.name, c.primary_key_position, c.nullable) for c in table.columns] == [
        ("a", 2, False), ("b", 0, True), ("c", 1, False)]
    with pytest.raises(ValueError, match="not columns"):
        qlik_table("public", "t", [col("int4", name="a")], key_columns=["zz"])


@pytest.mark.parametrize(("column", "text", "expected"), [
    (col("int2"), "-32768", -32768),
    (col("int8"), "9223372036854775807", 9223372036854775807),
    (col("float8"), "1.5e-07", 1.5e-07),
    (col("float4"), "Infinity", float("inf")),
    (col("bool"), "t", True),
    (col("bool"), "f", False),
    (col("numeric", numeric_mod(10, 2)), "12.345", Decimal("12.35")),
    (col("numeric", numeric_mod(10, 2)), "-0.5", Decimal("-0.50")),
    (col("numeric"), "1.23456789", Decimal("1.234568")),
    (col("numeric"), "NaN", None),
    (col("numeric", numeric_mod(40, 2)), "123456789012345678901234567890123456789.12",
     "123456789012345678901234567890123456789.12"),
    (col("varchar", 24), "héllo", "héllo"),
    (col("text"), "long\ntext", "long\ntext"),
    (col("bytea"), "\\x00ab10", b"\x00\xab\x10"),
    (col("date"), "2024-02-29", datetime.date(2024, 2, 29)),
    (col("date"), "infinity", datetime.date.max),
    (col("time"), "13:13:16.945104", datetime.time(13, 13, 16, 945000)),
    (col("time"), "24:00:00", datetime.time(23, 59, 59, 999000)),
    (col("timestamp"), "2018-06-20 13:13:16.945104", datetime.datetime(2018, 6, 20, 13, 13, 16, 945104, UTC)),
    (col("timestamptz"), "2018-06-20 15:13:16.945104+02", datetime.datetime(2018, 6, 20, 13, 13, 16, 945104, UTC)),
    (col("timestamptz"), "-infinity", datetime.datetime.min.replace(tzinfo=UTC)),
    (col("uuid"), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    (col("jsonb"), '{"a": 1}', '{"a": 1}'),
    (col("interval"), "1 year 2 mons", "1 year 2 mons"),
    (col("int4"), None, None),
])
def test_postgres_text_converts_to_the_typed_qlik_value(column: ColumnType, text: str | None, expected: object) -> None:
    value = qlik_value(column, text)
    assert value == expected and type(value) is type(expected)


def test_values_python_cannot_hold_are_rejected_with_the_type_named() -> None:
    with pytest.raises(ValueError, match="DATE"):
        qlik_value(col("date"), "0044-03-15 BC")
    with pytest.raises(ValueError, match="DATETIME"):
        qlik_value(col("timestamp"), "10000-01-01 00:00:00")


def test_qlik_row_leaves_unavailable_toast_columns_out() -> None:
    columns = [col("int4", name="id"), col("text", name="body"), col("int4", name="n")]
    assert qlik_row(columns, {"id": "1", "body": UNAVAILABLE, "n": None}) == {"id": 1, "n": None}
    assert qlik_row(columns, None) is None
    with pytest.raises(ValueError, match="ghost"):
        qlik_row(columns, {"ghost": "1"})


def test_postgres_row_becomes_an_avro_message_that_decodes_to_the_converted_values() -> None:
    columns = [col("int4", name="id", optional=False), col("numeric", numeric_mod(12, 3), name="price"),
               col("timestamptz", name="at"), col("bytea", name="blob"), col("varchar", 14, name="code")]
    table = qlik_table("public", "items", columns, key_columns=["id"])
    row = qlik_row(columns, {"id": "5", "price": "9.5", "at": "2024-01-02 03:04:05.5+00", "blob": "\\x01",
                             "code": "AB"})
    settings = QlikSettings("srv", "task", "avro")
    message = data_message(table, QlikChange("INSERT", row, change_sequence=change_sequence(10, 8, 0)), settings)
    decoded = decode_avro(encode_data(table, message, settings), metadata_message(table, settings, "t")["dataSchema"])
    assert decoded["data"] == {"id": 5, "price": Decimal("9.500"), "blob": b"\x01", "code": "AB",
                               "at": datetime.datetime(2024, 1, 2, 3, 4, 5, 500000, UTC)}


# ---- headers ----------------------------------------------------------------------------------------------------


def test_change_sequence_is_45_zero_padded_digits_commit_lsn_lsn_serial() -> None:
    assert change_sequence(1000, 900, 1) == "00000000000000001000" "00000000000000000900" "00001"
    assert len(change_sequence(1000, 900, 1)) == 45
    assert change_sequence(2**64 - 1, 2**64 - 1, 0).isdigit()
    for bad in ((-1, 0, 0), (10**20, 0, 0), (0, 0, 10**5)):
        with pytest.raises(ValueError, match="does not fit"):
            change_sequence(*bad)


positions = st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 9))


@given(st.lists(positions, min_size=2, max_size=30))
def test_change_sequences_sort_like_position_tuples_across_tables(tuples: list[tuple[int, int, int]]) -> None:
    # A task-wide ordering: sequences of any tables, sorted as strings, come out in position order.
    by_sequence = sorted(tuples, key=lambda position: change_sequence(*position))
    assert by_sequence == sorted(tuples)


def test_stream_position_is_the_lsn_in_postgres_notation_and_transaction_id_is_32_hex_digits() -> None:
    assert stream_position(0x16B374D848) == "16/B374D848"
    assert stream_position(0) == "0/0"
    assert transaction_id(500) == "000000000000000000000000000001F4"
