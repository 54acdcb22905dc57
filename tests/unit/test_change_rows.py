"""Typed change rows: Connect schemas to column types, values, and which structure changes a table of them follows."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from cdckit.spark.change_rows import RowStructure, StructureError, arrow_type, value_converter, widen


def _decimal(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)}}


def _staged(*fields: tuple[str, dict[str, Any]], key: tuple[str, ...] = ("id",)) -> dict[str, Any]:
    return {"topic": "p.public.t", "table": "public.t", "position": [1, 1, 0], "key": list(key),
            "schema": {"type": "struct", "fields": [{"field": name, **schema} for name, schema in fields]}}


INT32 = {"type": "int32"}
INT64 = {"type": "int64"}
TEXT = {"type": "string"}


@pytest.mark.parametrize(("schema", "expected"), [
    (_decimal(10, 2), pa.decimal128(10, 2)),
    (_decimal(50, 2), pa.string()),
    ({"type": "int32", "name": "io.debezium.time.Date"}, pa.date32()),
    ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, pa.timestamp("us")),
    ({"type": "int64", "name": "io.debezium.time.NanoTimestamp"}, pa.timestamp("us")),
    ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, pa.timestamp("us", tz="UTC")),
    ({"type": "int64", "name": "io.debezium.time.MicroTime"}, pa.int64()),
    ({"type": "array", "items": INT32}, pa.list_(pa.int32())),
    ({"type": "map", "keys": TEXT, "values": TEXT}, pa.map_(pa.string(), pa.string())),
    ({"type": "struct", "name": "io.debezium.data.VariableScaleDecimal",
      "fields": [{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}]},
     pa.struct([pa.field("scale", pa.int32()), pa.field("value", pa.binary())])),
])
def test_column_types(schema: dict[str, Any], expected: pa.DataType) -> None:
    assert arrow_type(schema) == expected


def test_values_are_converted_to_their_column_types() -> None:
    unscaled = (-1250).to_bytes(2, "big", signed=True)
    assert value_converter(_decimal(10, 2))(base64.b64encode(unscaled).decode()) == Decimal("-12.50")
    assert value_converter({"type": "int64", "name": "io.debezium.time.Timestamp"})(1500) == 1_500_000
    assert value_converter({"type": "int64", "name": "io.debezium.time.NanoTimestamp"})(1_500_999) == 1500
    zoned = value_converter({"type": "string", "name": "io.debezium.time.ZonedTimestamp"})("2024-01-02T03:04:05Z")
    assert zoned == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert value_converter({"type": "bytes"})("AP8=") == b"\x00\xff"
    assert value_converter({"type": "map", "keys": INT32, "values": TEXT})([[1, "a"]]) == [(1, "a")]
    assert value_converter(_decimal(10, 2))(None) is None
    double = value_converter({"type": "double"})  # Jackson writes NaN and the infinities as strings
    assert (double(1.5), double("Infinity"), double("-Infinity")) == (1.5, float("inf"), float("-inf"))
    assert double("NaN") != double("NaN")


@pytest.mark.parametrize(("old", "new", "expected"), [
    (pa.int16(), pa.int64(), pa.int64()),
    (pa.int64(), pa.int32(), pa.int64()),
    (pa.float32(), pa.float64(), pa.float64()),
    (pa.decimal128(10, 2), pa.decimal128(12, 4), pa.decimal128(12, 4)),
    (pa.decimal128(10, 2), pa.decimal128(10, 4), pa.decimal128(12, 4)),
    (pa.decimal128(38, 0), pa.decimal128(38, 10), None),
    (pa.int32(), pa.string(), None),
    (pa.string(), pa.int32(), None),
    (pa.int64(), pa.float64(), None),
    (pa.date32(), pa.timestamp("us"), None),
])
def test_widening(old: pa.DataType, new: pa.DataType, expected: pa.DataType | None) -> None:
    assert widen(old, new) == expected


def test_added_columns_are_taken_in_and_dropped_ones_kept() -> None:
    table = RowStructure("p.public.t")
    table.evolve(_staged(("id", INT32), ("a", TEXT)), "table t", "Choices.")
    table.evolve(_staged(("id", INT64), ("b", _decimal(5, 1))), "table t", "Choices.")
    assert list(table.columns) == ["id", "a", "b"]
    assert table.columns["id"] == pa.int64() and table.key == ["id"] and table.table == "public.t"


def test_a_dropped_key_column_stops_with_the_choices() -> None:
    table = RowStructure("p.public.t")
    table.evolve(_staged(("id", INT32), ("a", TEXT)), "table public.t", "Choices: x.")
    with pytest.raises(StructureError) as failure:
        table.evolve(_staged(("a", TEXT), key=()), "table public.t", "Choices: x.")
    message = str(failure.value)
    assert "public.t" in message and "key column 'id' was dropped" in message and "Choices: x." in message
    assert list(table.columns) == ["id", "a"]


def test_a_narrowing_change_names_table_column_and_types() -> None:
    table = RowStructure("p.public.t")
    table.evolve(_staged(("id", INT32), ("price", _decimal(10, 2))), "table t", "")
    with pytest.raises(StructureError, match=r"table t: column 'price' changed from decimal\(10,2\) to string"):
        table.evolve(_staged(("id", INT32), ("price", TEXT)), "table t", "")
