"""Unit tests for the PostgreSQL -> Debezium/Kafka Connect type mapping table."""

from __future__ import annotations

import base64
import json
import math
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdckit.errors import UnsupportedValueError
from cdckit.formats.debezium.postgres_types import (
    TYPE_REGISTRY,
    ColumnType,
    MappedField,
    MappingSettings,
    UnsupportedTypeError,
    map_column,
)

EPOCH = datetime(1970, 1, 1)
INF_TS = 9223372036825200000
NEG_INF_TS = -9223372036832400000


def mapped(type_name: str, modifier: int = -1, settings: MappingSettings | None = None, **kw: Any) -> MappedField:
    column = ColumnType(name="col", type_name=type_name, type_oid=1, modifier=modifier, **kw)
    field = map_column(column, settings or MappingSettings())
    assert field is not None, f"{type_name} is left out"
    return field


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


def unb64(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big", signed=True)


def schema(
    type_: str, name: str | None = None, parameters: dict[str, str] | None = None, optional: bool = True
) -> dict[str, Any]:
    result: dict[str, Any] = {"type": type_, "optional": optional}
    if name:
        result.update(name=name, version=1)
    if parameters:
        result["parameters"] = parameters
    result["field"] = "col"
    return result


# ---- generic contract ----


def test_null_text_converts_to_none_for_every_registry_row() -> None:
    for type_name in TYPE_REGISTRY:
        assert mapped(type_name).convert(None) is None, type_name


def test_schema_key_order_matches_json_converter() -> None:
    field = mapped("numeric", numeric_typmod(10, 2), optional=False)
    assert list(field.schema) == ["type", "optional", "name", "version", "parameters", "field"]
    assert field.schema["optional"] is False
    assert json.dumps(mapped("_int4").schema) == (
        '{"type": "array", "items": {"type": "int32", "optional": true}, "optional": true, "field": "col"}'
    )


@pytest.mark.parametrize("type_name", ["tsvector", "tsquery", "box", "circle", "line", "lseg", "path", "polygon",
                                       "pg_lsn", "unknowntype"])
def test_types_debezium_has_no_converter_for_are_left_out(type_name: str) -> None:
    column = ColumnType(name="col", type_name=type_name, type_oid=1)
    assert map_column(column, MappingSettings()) is None


def test_unknown_handling_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="decimal_handling_mode"):
        mapped("numeric", settings=MappingSettings(decimal_handling_mode="exact"))


# ---- bool / integers / floats ----


def test_bool_emits_boolean() -> None:
    field = mapped("bool")
    assert field.schema == schema("boolean")
    assert (field.convert("t"), field.convert("f")) == (True, False)


@pytest.mark.parametrize(
    ("type_name", "connect_type", "text", "value"),
    [
        ("int2", "int16", "-32768", -32768),
        ("int4", "int32", "2147483647", 2147483647),
        ("int8", "int64", "-9223372036854775808", -9223372036854775808),
        ("oid", "int64", "4294967295", 4294967295),
    ],
)
def test_integer_types_emit_connect_integers(type_name: str, connect_type: str, text: str, value: int) -> None:
    field = mapped(type_name)
    assert field.schema == schema(connect_type)
    assert field.convert(text) == value
    assert field.convert("0") == 0


def json_text(value: Any) -> str:
    """A converted value as it appears in the message text."""
    return orjson.dumps(value).decode()


@pytest.mark.parametrize(("type_name", "connect_type"), [("float4", "float"), ("float8", "double")])
def test_floats_are_written_as_java_writes_them_including_nan_and_infinities(type_name: str,
                                                                            connect_type: str) -> None:
    # Jackson (Kafka Connect's JsonConverter) writes Float/Double.toString and NaN/Infinity as strings
    field = mapped(type_name)
    assert field.schema == schema(connect_type)
    written = {text: json_text(field.convert(text)) for text in (
        "1.5", "-0.25", "100", "-0", "0.001", "0.0001", "1e-05", "9999999", "10000000", "1e+300",
        "3.4028235e+38", "-1.25e-07", "NaN", "Infinity", "-Infinity")}
    assert written == {
        "1.5": "1.5", "-0.25": "-0.25", "100": "100.0", "-0": "-0.0", "0.001": "0.001", "0.0001": "1.0E-4",
        "1e-05": "1.0E-5", "9999999": "9999999.0", "10000000": "1.0E7", "1e+300": "1.0E300",
        "3.4028235e+38": "3.4028235E38", "-1.25e-07": "-1.25E-7", "NaN": '"NaN"', "Infinity": '"Infinity"',
        "-Infinity": '"-Infinity"'}
    assert all(math.isclose(float(json.loads(text)), float(value)) for value, text in written.items()
               if value[-1].isdigit())


# ---- numeric / money ----


def test_numeric_precise_emits_connect_decimal_bytes() -> None:
    field = mapped("numeric", numeric_typmod(10, 2))
    assert field.schema == schema(
        "bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2", "connect.decimal.precision": "10"}
    )
    assert field.convert("1234.50") == "AeI6"  # 123450 = 0x01E23A
    assert unb64(field.convert("-1.00")) == -100
    assert base64.b64decode(field.convert("-1.28")) == b"\x80"  # minimal two's complement
    assert base64.b64decode(field.convert("1.28")) == b"\x00\x80"
    assert base64.b64decode(field.convert("0.00")) == b"\x00"


def test_numeric_precise_handles_precision_38_limits() -> None:
    field = mapped("numeric", numeric_typmod(38, 0))
    big = "9" * 38
    assert unb64(field.convert(big)) == int(big)
    assert unb64(field.convert("-" + big)) == -int(big)
    scaled = mapped("numeric", numeric_typmod(38, 38))
    assert unb64(scaled.convert("0." + "9" * 38)) == int(big)


@pytest.mark.parametrize(("text", "unscaled"), [
    ("1.5", 150), ("1.005", 101), ("-1.005", -101), ("+1.25", 125), (" 1.25 ", 125), ("12", 1200), ("1e2", 10000),
])
def test_numeric_precise_text_not_at_the_column_scale_is_rescaled_exactly(text: str, unscaled: int) -> None:
    # PostgreSQL prints numeric(p, s) with s fraction digits (the fast path); any other spelling is rescaled
    # through Decimal, rounding half up.
    assert unb64(mapped("numeric", numeric_typmod(10, 2)).convert(text)) == unscaled


def test_numeric_precise_negative_scale_is_read_as_unsigned_like_pgjdbc() -> None:
    # Debezium 2.5.2 on numeric(5,-2): scale "2046", values widened to it.
    field = mapped("numeric", numeric_typmod(5, -2))
    assert field.schema["parameters"] == {"scale": "2046", "connect.decimal.precision": "5"}
    assert unb64(field.convert("12300")) == 12300 * 10**2046


def test_numeric_precise_nan_and_infinity_stop_with_the_remedy() -> None:
    for typmod in (numeric_typmod(10, 2), -1):
        field = mapped("numeric", typmod)
        for special in ("NaN", "Infinity", "-Infinity"):
            with pytest.raises(UnsupportedValueError, match=r"'col'.*decimal\.handling\.mode=string or double"):
                field.convert(special)


def test_numeric_without_typmod_precise_emits_variable_scale_decimal_struct() -> None:
    field = mapped("numeric")
    assert field.schema == {
        "type": "struct",
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "version": 1,
        "doc": "Variable scaled decimal",
        "field": "col",
    }
    assert field.convert("1234.5") == {"scale": 1, "value": base64.b64encode(b"\x30\x39").decode()}
    assert field.convert("1.50") == {"scale": 1, "value": "Dw=="}  # trailing zeros stripped like Debezium
    assert field.convert("100") == {"scale": 0, "value": "ZA=="}
    assert field.convert("0.000") == {"scale": 0, "value": "AA=="}
    result = field.convert("-0.001")
    assert result["scale"] == 3 and unb64(result["value"]) == -1


def test_numeric_double_mode_emits_double() -> None:
    settings = MappingSettings(decimal_handling_mode="double")
    for typmod in (numeric_typmod(10, 2), -1):
        field = mapped("numeric", typmod, settings)
        assert field.schema == schema("double")
        assert json_text(field.convert("-12.25")) == "-12.25"
        assert json_text(field.convert("12345678.900")) == "1.23456789E7"
        assert json_text(field.convert("NaN")) == '"NaN"'


def test_numeric_string_mode_emits_plain_text() -> None:
    field = mapped("numeric", numeric_typmod(38, 10), MappingSettings(decimal_handling_mode="string"))
    assert field.schema == schema("string")
    assert field.convert("-0.0000000001") == "-0.0000000001"
    assert field.convert("NaN") == "NAN"


def test_decimal_alias_maps_like_numeric() -> None:
    assert mapped("decimal", numeric_typmod(5, 1)).convert("1.5") == mapped("numeric", numeric_typmod(5, 1)).convert(
        "1.5"
    )


def test_money_precise_emits_decimal_scale_2() -> None:
    field = mapped("money")
    assert field.schema == schema("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"})
    assert unb64(field.convert("$1,234.56")) == 123456
    assert unb64(field.convert("-$1.00")) == -100
    assert unb64(field.convert("$0.00")) == 0


def test_money_double_mode_emits_double() -> None:
    field = mapped("money", settings=MappingSettings(decimal_handling_mode="double"))
    assert field.schema == schema("double")
    assert json_text(field.convert("-$1,234.56")) == "-1234.56"


def test_money_string_mode_emits_plain_decimal_with_two_digits() -> None:
    field = mapped("money", settings=MappingSettings(decimal_handling_mode="string"))
    assert field.schema == schema("string")
    assert field.convert("$92,233,720,368,547,758.07") == "92233720368547758.07"
    assert field.convert("-$1.00") == "-1.00"


# ---- strings and string-like ----


@pytest.mark.parametrize(
    "type_name", ["char", "bpchar", "varchar", "text", "citext", "inet", "cidr", "macaddr", "macaddr8"]
)
def test_character_and_network_types_emit_plain_string(type_name: str) -> None:
    field = mapped(type_name)
    assert field.schema == schema("string")
    assert field.convert("ab  ") == "ab  "
    assert field.convert("") == ""


@pytest.mark.parametrize(
    ("type_name", "logical"),
    [
        ("uuid", "io.debezium.data.Uuid"),
        ("json", "io.debezium.data.Json"),
        ("jsonb", "io.debezium.data.Json"),
        ("xml", "io.debezium.data.Xml"),
    ],
)
def test_named_string_types_pass_text_through(type_name: str, logical: str) -> None:
    field = mapped(type_name)
    assert field.schema == schema("string", logical)
    assert field.convert('{"a": [1, 2]}') == '{"a": [1, 2]}'


def test_enum_emits_debezium_enum_with_allowed_values() -> None:
    field = mapped("mood", enum_values=("sad", "ok", "happy"))
    assert field.schema == schema("string", "io.debezium.data.Enum", {"allowed": "sad,ok,happy"})
    assert field.convert("ok") == "ok"


# ---- bytea / bits ----


@pytest.mark.parametrize(
    ("mode", "connect_type", "expected"),
    [
        ("bytes", "bytes", "Cgv/+w=="),
        ("base64", "string", "Cgv/+w=="),
        ("base64-url-safe", "string", "Cgv_-w=="),
        ("hex", "string", "0a0bfffb"),
    ],
)
def test_bytea_binary_handling_modes(mode: str, connect_type: str, expected: str) -> None:
    field = mapped("bytea", settings=MappingSettings(binary_handling_mode=mode))
    assert field.schema == schema(connect_type)
    assert field.convert("\\x0a0bfffb") == expected
    assert field.convert("\\x") == ""


def test_bytea_escape_output_format_is_understood() -> None:
    assert mapped("bytea", settings=MappingSettings(binary_handling_mode="hex")).convert("a\\\\\\000") == "615c00"


def test_bit_1_emits_boolean() -> None:
    field = mapped("bit", 1)
    assert field.schema == schema("boolean")
    assert (field.convert("1"), field.convert("0")) == (True, False)


def test_bit_n_emits_little_endian_bits() -> None:
    field = mapped("bit", 16)
    assert field.schema == schema("bytes", "io.debezium.data.Bits", {"length": "16"})
    assert base64.b64decode(field.convert("0000000100000010")) == b"\x02\x01"
    assert base64.b64decode(field.convert("101")) == b"\x05"
    assert field.convert("0000000000000000") == ""


def test_unbounded_varbit_emits_bits_with_max_length() -> None:
    field = mapped("varbit")
    assert field.schema["parameters"] == {"length": "2147483647"}
    assert base64.b64decode(field.convert("111111111")) == b"\xff\x01"


# ---- date / time / timestamp ----


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("1970-01-01", 0),
        ("0001-01-01", -719162),
        ("9999-12-31", 2932896),
        ("2024-02-29", 19782),
        ("1969-12-31", -1),
        ("0001-12-31 BC", -719163),
        ("0044-03-15 BC", (date(1, 3, 15) - date(1970, 1, 1)).days - 44 * 365 - 11),
    ],
)
def test_date_adaptive_emits_debezium_date_days(text: str, days: int) -> None:
    field = mapped("date")
    assert field.schema == schema("int32", "io.debezium.time.Date")
    assert field.convert(text) == days


def test_date_connect_mode_emits_connect_date() -> None:
    field = mapped("date", settings=MappingSettings(time_precision_mode="connect"))
    assert field.schema == schema("int32", "org.apache.kafka.connect.data.Date")
    assert field.convert("2024-02-29") == 19782


@pytest.mark.parametrize("text", ["2023-02-29", "2023-13-01", "2023-00-10", "2024-W09-4", "2024-1-010"])
def test_date_rejects_invalid_calendar_day(text: str) -> None:
    with pytest.raises(ValueError):
        mapped("date").convert(text)


def test_time_adaptive_low_precision_emits_millis() -> None:
    field = mapped("time", 3)
    assert field.schema == schema("int32", "io.debezium.time.Time")
    assert field.convert("13:13:16.945") == 47596945
    assert field.convert("24:00:00") == 86400000


def test_time_adaptive_default_precision_emits_micro_time() -> None:
    field = mapped("time")
    assert field.schema == schema("int64", "io.debezium.time.MicroTime")
    assert field.convert("13:13:16.945104") == 47596945104
    assert field.convert("00:00:00") == 0
    assert field.convert("24:00:00") == 86400000000


def test_time_adaptive_time_microseconds_always_emits_micro_time() -> None:
    field = mapped("time", 0, MappingSettings(time_precision_mode="adaptive_time_microseconds"))
    assert field.schema == schema("int64", "io.debezium.time.MicroTime")
    assert field.convert("00:00:01") == 1000000


def test_time_connect_mode_emits_connect_time_millis() -> None:
    field = mapped("time", 6, MappingSettings(time_precision_mode="connect"))
    assert field.schema == schema("int32", "org.apache.kafka.connect.data.Time")
    assert field.convert("13:13:16.945999") == 47596945


def test_timestamp_adaptive_low_precision_emits_millis() -> None:
    field = mapped("timestamp", 3)
    assert field.schema == schema("int64", "io.debezium.time.Timestamp")
    assert field.convert("2018-06-20 13:13:16.945") == 1529500396945
    assert field.convert("1969-12-31 23:59:59.999") == -1


def test_timestamp_adaptive_default_precision_emits_micro_timestamp() -> None:
    field = mapped("timestamp")
    assert field.schema == schema("int64", "io.debezium.time.MicroTimestamp")
    assert field.convert("2018-06-20 13:13:16.945104") == 1529500396945104
    assert field.convert("0001-01-01 00:00:00") == -62135596800000000
    assert field.convert("9999-12-31 23:59:59.999999") == 253402300799999999
    assert field.convert("2024-02-29 12:00:00") == 1709208000000000


def test_timestamp_bc_dates_use_proleptic_gregorian() -> None:
    field = mapped("timestamp")
    # 1 BC is astronomical year 0, one leap year before 0001-01-01
    assert field.convert("0001-12-31 00:00:00 BC") == -62135596800000000 - 86400000000
    assert field.convert("0044-03-15 12:00:00 BC") == -63517780800000000


def test_timestamp_infinity_emits_pgjdbc_sentinels_in_every_mode() -> None:
    for settings in (MappingSettings(), MappingSettings(time_precision_mode="connect")):
        for modifier in (-1, 3):
            field = mapped("timestamp", modifier, settings)
            millis = modifier == 3 or settings.time_precision_mode == "connect"
            assert field.convert("infinity") == (INF_TS // 1000 if millis else INF_TS)
            assert field.convert("-infinity") == (NEG_INF_TS // 1000 if millis else NEG_INF_TS)


def test_timestamp_connect_mode_emits_connect_timestamp_millis_floored() -> None:
    field = mapped("timestamp", settings=MappingSettings(time_precision_mode="connect"))
    assert field.schema == schema("int64", "org.apache.kafka.connect.data.Timestamp")
    assert field.convert("2018-06-20 13:13:16.945104") == 1529500396945
    assert field.convert("1969-12-31 23:59:59.999999") == -1


def test_timestamptz_emits_utc_zoned_timestamp_with_six_fraction_digits() -> None:
    # Debezium 2.5.2's PostgreSQL connector pads the fraction to the column's precision (6 for plain timestamptz)
    field = mapped("timestamptz")
    assert field.schema == schema("string", "io.debezium.time.ZonedTimestamp")
    assert field.convert("2018-06-20 15:13:16.945104+02") == "2018-06-20T13:13:16.945104Z"
    assert field.convert("2018-06-20 13:13:16.5-05:30") == "2018-06-20T18:43:16.500000Z"
    assert field.convert("2018-06-20 13:13:00+00") == "2018-06-20T13:13:00.000000Z"
    assert field.convert("2024-03-05 10:20:05.12+00") == "2024-03-05T10:20:05.120000Z"
    assert field.convert("2024-02-29 23:30:00-01") == "2024-03-01T00:30:00.000000Z"
    assert field.convert("0001-01-01 00:00:00+00") == "0001-01-01T00:00:00.000000Z"
    assert field.convert("0044-03-15 12:00:00+00 BC") == "-0043-03-15T12:00:00.000000Z"
    assert field.convert("1900-01-01 00:00:00+05:53:28") == "1899-12-31T18:06:32.000000Z"
    assert field.convert("9999-12-31 23:59:59.999999-01") == "+10000-01-01T00:59:59.999999Z"


@pytest.mark.parametrize(("precision", "text", "expected"), [
    (3, "2024-03-05 10:20:05.12+00", "2024-03-05T10:20:05.120Z"),
    (3, "2024-03-05 12:20:05.1+02", "2024-03-05T10:20:05.100Z"),
    (0, "2024-03-05 10:20:05+00", "2024-03-05T10:20:05Z"),
    (0, "2024-03-05 12:20:05+02", "2024-03-05T10:20:05Z"),
    (1, "2024-03-05 10:20:05+00", "2024-03-05T10:20:05.0Z"),
])
def test_timestamptz_fraction_has_the_declared_precision(precision: int, text: str, expected: str) -> None:
    assert mapped("timestamptz", precision).convert(text) == expected


def test_timestamptz_infinity_passes_through() -> None:
    field = mapped("timestamptz")
    assert (field.convert("infinity"), field.convert("-infinity")) == ("infinity", "-infinity")


def test_timetz_emits_utc_zoned_time() -> None:
    field = mapped("timetz")
    assert field.schema == schema("string", "io.debezium.time.ZonedTime")
    assert field.convert("12:15:30.123+02") == "10:15:30.123Z"
    assert field.convert("00:15:30+02") == "22:15:30Z"
    assert field.convert("23:00:00.000001-03") == "02:00:00.000001Z"


# ---- interval ----


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1 year 2 mons 3 days 04:05:06.78", (14 * 2629800 + 3 * 86400 + 14706) * 10**6 + 780000),
        ("-1 days +02:00:00", -86400 * 10**6 + 7200 * 10**6),
        ("00:00:00", 0),
        ("1 mon", 2629800 * 10**6),
        ("-00:00:00.000001", -1),
        ("-1 years -2 mons", -14 * 2629800 * 10**6),
        ("100:00:00", 360000 * 10**6),
    ],
)
def test_interval_numeric_emits_micro_duration(text: str, micros: int) -> None:
    field = mapped("interval")
    assert field.schema == schema("int64", "io.debezium.time.MicroDuration")
    assert field.convert(text) == micros


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("1 year 2 mons 3 days 04:05:06.78", "P1Y2M3DT4H5M6.78S"),
        ("-1 days +02:00:00", "P0Y0M-1DT2H0M0S"),
        ("00:00:00", "P0Y0M0DT0H0M0S"),
        ("-1 years -2 mons -00:30:01.5", "P-1Y-2M0DT0H-30M-1.5S"),
    ],
)
def test_interval_string_emits_iso_8601(text: str, iso: str) -> None:
    field = mapped("interval", settings=MappingSettings(interval_handling_mode="string"))
    assert field.schema == schema("string", "io.debezium.time.Interval")
    assert field.convert(text) == iso


def test_interval_rejects_verbose_style() -> None:
    with pytest.raises(ValueError, match="IntervalStyle"):
        mapped("interval").convert("@ 1 hour ago")


# ---- hstore ----


def test_hstore_json_mode_emits_json_object_string() -> None:
    field = mapped("hstore")
    assert field.schema == schema("string", "io.debezium.data.Json")
    assert field.convert('"a"=>"1", "b"=>NULL, "q\\"k"=>"v\\\\"') == '{"a":"1","b":null,"q\\"k":"v\\\\"}'
    assert field.convert("") == "{}"


def test_hstore_map_mode_emits_map() -> None:
    field = mapped("hstore", settings=MappingSettings(hstore_handling_mode="map"))
    assert field.schema == {
        "type": "map",
        "keys": {"type": "string", "optional": False},
        "values": {"type": "string", "optional": True},
        "optional": True,
        "field": "col",
    }
    assert field.convert('"a"=>"1", "b"=>NULL, "c"=>"NULL"') == {"a": "1", "b": None, "c": "NULL"}


# ---- arrays ----


def test_int_array_emits_array_with_null_elements() -> None:
    field = mapped("_int4", optional=False)
    assert field.schema == {
        "type": "array",
        "items": {"type": "int32", "optional": True},
        "optional": False,
        "field": "col",
    }
    assert field.convert("{1,NULL,-3}") == [1, None, -3]
    assert field.convert("{}") == []


def test_text_array_handles_quotes_escapes_and_null_literal() -> None:
    field = mapped("_text")
    assert field.convert('{plain,"with space","NULL",NULL,"q\\"uote","back\\\\slash","a,b",""}') == [
        "plain",
        "with space",
        "NULL",
        None,
        'q"uote',
        "back\\slash",
        "a,b",
        "",
    ]


def test_numeric_array_uses_element_typmod() -> None:
    field = mapped("_numeric", numeric_typmod(5, 2))
    assert field.schema["items"] == {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "5"},
    }
    assert [None if v is None else unb64(v) for v in field.convert("{1.50,NULL,-2.00}")] == [150, None, -200]


def test_temporal_and_bytea_arrays_convert_elements() -> None:
    assert mapped("_timestamptz").convert('{"2018-06-20 15:13:16+02",NULL}') == ["2018-06-20T13:13:16.000000Z", None]
    assert mapped("_date").convert('{2024-02-29,"0044-03-15 BC"}')[0] == 19782
    assert mapped("_bytea").convert('{"\\\\x0a0b",NULL}') == ["Cgs=", None]


def test_array_with_explicit_lower_bound_is_accepted() -> None:
    assert mapped("_int4").convert("[0:1]={7,8}") == [7, 8]


def test_enum_array_emits_required_enum_items() -> None:
    field = mapped("_mood", enum_values=("a", "b"))
    assert field.schema["items"] == {
        "type": "string",
        "optional": False,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "a,b"},
    }
    assert field.convert("{a,NULL,b}") == ["a", None, "b"]


def test_multi_dimensional_integer_array_is_one_null_per_outer_element() -> None:
    # Debezium 2.5.2: '{{1,2},{3,4}}' in an int4[] -> [null, null]; '{{5},{6}}' in an int8[] -> [null, null].
    assert mapped("_int4").convert("{{1,2},{3,4}}") == [None, None]
    assert mapped("_int8").convert("{{5},{6}}") == [None, None]


def test_multi_dimensional_text_array_value_raises_unsupported() -> None:
    with pytest.raises(UnsupportedTypeError, match=r"'col'.*multi-dimensional.*column\.exclude\.list"):
        mapped("_text").convert("{{a,b},{c,d}}")


@pytest.mark.parametrize("type_name", ["_money", "_interval", "_point", "_name", "_varbit", "_tsvector",
                                       "_unknowntype"])
def test_arrays_debezium_has_no_schema_for_are_left_out(type_name: str) -> None:
    column = ColumnType(name="col", type_name=type_name, type_oid=1)
    assert map_column(column, MappingSettings()) is None


# ---- property-based ----


@given(st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1), st.integers(min_value=0, max_value=38))
def test_property_decimal_unscaled_bytes_round_trip(unscaled: int, scale: int) -> None:
    digits = str(abs(unscaled)).rjust(scale + 1, "0")  # plain text, as PostgreSQL prints numeric(38, scale)
    text = ("-" if unscaled < 0 else "") + (digits[:-scale] + "." + digits[-scale:] if scale else digits)
    field = mapped("numeric", numeric_typmod(38, scale))
    raw = base64.b64decode(field.convert(text))
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    assert len(raw) == (unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()) // 8 + 1


@given(st.decimals(allow_nan=False, allow_infinity=False, places=6, min_value=-(10**20), max_value=10**20))
def test_property_variable_scale_decimal_round_trip(value: Decimal) -> None:
    result = mapped("numeric").convert(str(value))
    assert Decimal(unb64(result["value"])) == value.scaleb(result["scale"])


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)))
def test_property_timestamp_micros_match_datetime_arithmetic(moment: datetime) -> None:
    text = f"{moment.year:04d}-{moment:%m-%d %H:%M:%S.%f}"
    expected = (moment - EPOCH) // timedelta(microseconds=1)
    assert mapped("timestamp").convert(text) == expected
    assert mapped("timestamp", 3).convert(text) == expected // 1000


@given(
    st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)),
    st.integers(min_value=-15 * 60, max_value=15 * 60),
)
def test_property_timestamptz_matches_datetime_utc_conversion(moment: datetime, offset_minutes: int) -> None:
    sign = "-" if offset_minutes < 0 else "+"
    offset = f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"
    text = f"{moment.year:04d}-{moment:%m-%d %H:%M:%S.%f}{offset}"
    utc = moment - timedelta(minutes=offset_minutes)
    expected = f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}.{utc.microsecond:06d}Z"
    assert mapped("timestamptz").convert(text) == expected


@given(st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)))
def test_property_date_days_match_date_arithmetic(day: date) -> None:
    assert mapped("date").convert(f"{day.year:04d}-{day:%m-%d}") == (day - date(1970, 1, 1)).days


@pytest.mark.parametrize(
    ("type_name", "text"),
    [("int4range", "[1,10)"), ("int8range", "[5,)"), ("numrange", "(1.5,2.5]"),
     ("tsrange", '["2024-01-01 00:00:00","2024-02-01 00:00:00")'),
     ("tstzrange", '["2024-01-01 00:00:00+00",)'), ("daterange", "[2024-01-01,2024-02-01)")],
)
def test_range_types_are_strings_of_their_text_form(type_name: str, text: str) -> None:
    mapped = map_column(ColumnType("r", type_name, 0, -1, True), MappingSettings())
    assert mapped.schema == {"type": "string", "optional": True, "field": "r"}
    assert mapped.convert(text) == text
