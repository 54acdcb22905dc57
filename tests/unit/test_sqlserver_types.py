"""Unit tests for the SQL Server -> Debezium/Kafka Connect type mapping table."""

from __future__ import annotations

import base64
import json
import struct
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdckit import errors
from cdckit.config import validate
from cdckit.config.properties import SQLSERVER_CONNECTOR
from cdckit.dialect.sqlserver.catalog import CaptureInstance
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit.formats.debezium.sqlserver_types import (
    TYPE_REGISTRY,
    MappedField,
    SqlServerColumn,
    SqlServerMappingSettings,
    UnsupportedSqlServerTypeError,
    map_sqlserver_column,
)

NANOS_PER_DAY = 86_400 * 10**9


def mapped(type_name: str, settings: SqlServerMappingSettings | None = None, **kw: Any) -> MappedField:
    return map_sqlserver_column(SqlServerColumn(name="col", type_name=type_name, **kw),
                                settings or SqlServerMappingSettings())


def connect() -> SqlServerMappingSettings:
    return SqlServerMappingSettings(time_precision_mode="connect")


def decimals(mode: str) -> SqlServerMappingSettings:
    return SqlServerMappingSettings(decimal_handling_mode=mode)


def schema(type_: str, name: str | None = None, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"type": type_, "optional": True}
    if name:
        result.update(name=name, version=1)
    if parameters:
        result["parameters"] = parameters
    result["field"] = "col"
    return result


def unb64(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big", signed=True)


def java_long(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


# ---- generic contract ----


@pytest.mark.parametrize("settings", [SqlServerMappingSettings(), SqlServerMappingSettings("connect", "string", "hex")])
def test_null_converts_to_none_for_every_registry_row_and_mode(settings: SqlServerMappingSettings) -> None:
    for type_name in TYPE_REGISTRY:
        assert mapped(type_name, settings, scale=7).convert(None) is None, type_name


def test_schema_key_order_matches_json_converter_and_not_null_column_is_required() -> None:
    field = mapped("decimal", precision=10, scale=2, optional=False)
    assert list(field.schema) == ["type", "optional", "name", "version", "parameters", "field"]
    assert json.dumps(field.schema) == (
        '{"type": "bytes", "optional": false, "name": "org.apache.kafka.connect.data.Decimal", "version": 1, '
        '"parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "col"}'
    )


@pytest.mark.parametrize("type_name", ["cursor", "table"])
def test_unmapped_type_raises_error_naming_column_type_and_exclude_list(type_name: str) -> None:
    with pytest.raises(UnsupportedSqlServerTypeError, match=rf"'col'.*'{type_name}'.*column\.exclude\.list"):
        mapped(type_name)


def test_unsupported_error_is_a_cdckit_unsupported_type_error_and_value_error() -> None:
    assert issubclass(UnsupportedSqlServerTypeError, errors.UnsupportedTypeError)
    assert issubclass(UnsupportedSqlServerTypeError, ValueError)


def test_unknown_mode_value_is_rejected_with_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="adaptive, adaptive_time_microseconds, connect"):
        mapped("date", SqlServerMappingSettings(time_precision_mode="isostring"))


def test_adaptive_time_microseconds_makes_every_time_micro_time_and_keeps_the_rest_adaptive() -> None:
    """Debezium 2.5.2's SQL Server connector takes the shared relational time.precision.mode, and its
    JdbcValueConverters turn every TIME into MicroTime in this mode; dates and timestamps stay adaptive."""
    config = validate({
        "connector.class": SQLSERVER_CONNECTOR, "database.hostname": "sqlserver.test", "database.user": "cdckit",
        "database.password": "not-a-real-secret", "database.names": "testDB", "topic.prefix": "server1",
        "time.precision.mode": "adaptive_time_microseconds"})
    columns = (SqlServerColumn("id", "int", 4, 10, 0, False), SqlServerColumn("starts", "time", 5, 16, 7),
               SqlServerColumn("ends", "time", 3, 8, 0), SqlServerColumn("day", "date", 3, 10, 0),
               SqlServerColumn("at", "datetime2", 8, 27, 7), SqlServerColumn("logged", "datetime", 8, 23, 3))
    shifts = CaptureInstance("testDB", "dbo", "shifts", "dbo_shifts", 1, 10, 20, columns, ("id",))
    table = TableFormat(shifts, format_settings(config.as_properties()))
    row = {"id": 1, "starts": time(8, 30, 0, 123456), "ends": time(17, 0), "day": date(2024, 5, 1),
           "at": datetime(2024, 5, 1, 8, 30, 0, 123456), "logged": datetime(2024, 5, 1, 8, 30, 0, 123000)}
    event = ChangeEvent("dbo", "shifts", "c", None, row, Position(5, 3, 0), 0, database="testDB")
    value = json.loads(table.value_json(event, 0))
    after_fields = {f["field"]: (f["type"], f.get("name")) for f in value["schema"]["fields"][1]["fields"]}
    assert after_fields == {"id": ("int32", None), "starts": ("int64", "io.debezium.time.MicroTime"),
                            "ends": ("int64", "io.debezium.time.MicroTime"), "day": ("int32", "io.debezium.time.Date"),
                            "at": ("int64", "io.debezium.time.NanoTimestamp"),
                            "logged": ("int64", "io.debezium.time.Timestamp")}
    midnight = datetime(2024, 5, 1)
    assert value["payload"]["after"] == {
        "id": 1, "starts": (8 * 3600 + 30 * 60) * 10**6 + 123456, "ends": 17 * 3600 * 10**6,
        "day": (date(2024, 5, 1) - date(1970, 1, 1)).days,
        "at": int((midnight - datetime(1970, 1, 1)).total_seconds() + 8 * 3600 + 30 * 60) * 10**9 + 123456000,
        "logged": int((midnight - datetime(1970, 1, 1)).total_seconds() + 8 * 3600 + 30 * 60) * 1000 + 123}


def test_type_name_is_matched_case_insensitively() -> None:
    assert mapped("DateTime2", scale=7).schema["name"] == "io.debezium.time.NanoTimestamp"


# ---- basic types (Table 10) ----


@pytest.mark.parametrize(("raw", "expected"), [(True, True), (False, False), (1, True), (0, False)])
def test_bit_maps_to_boolean(raw: Any, expected: bool) -> None:
    field = mapped("bit")
    assert field.schema == schema("boolean")
    assert field.convert(raw) is expected


@pytest.mark.parametrize(("type_name", "literal", "low", "high"), [
    ("tinyint", "int16", 0, 255),
    ("smallint", "int16", -32768, 32767),
    ("int", "int32", -(2**31), 2**31 - 1),
    ("bigint", "int64", -(2**63), 2**63 - 1),
])
def test_integer_types_map_to_connect_integers_and_keep_extremes(type_name: str, literal: str, low: int,
                                                                 high: int) -> None:
    field = mapped(type_name)
    assert field.schema == schema(literal)
    assert (field.convert(low), field.convert(high)) == (low, high)


def test_real_maps_to_float32_with_the_shortest_single_precision_digits() -> None:
    field = mapped("real")
    assert field.schema == schema("float")
    assert field.convert(4.322999954223633) == 4.323  # what pyodbc returns for real 4.323
    assert repr(field.convert(0.1)) == "0.1"
    assert field.convert(-3.4028234663852886e38) == -3.4028235e38


def test_float_maps_to_float64_unchanged() -> None:
    field = mapped("float")
    assert field.schema == schema("double")
    assert field.convert(3.323) == 3.323


@pytest.mark.parametrize("type_name", ["char", "varchar", "text", "nchar", "nvarchar", "ntext"])
def test_character_types_map_to_plain_string_keeping_padding(type_name: str) -> None:
    field = mapped(type_name)
    assert field.schema == schema("string")
    assert field.convert("c\u010d ") == "c\u010d "


def test_xml_maps_to_debezium_xml_string() -> None:
    field = mapped("xml")
    assert field.schema == schema("string", "io.debezium.data.Xml")
    assert field.convert("<a>b</a>") == "<a>b</a>"


def test_uniqueidentifier_maps_to_plain_string_in_upper_case() -> None:
    field = mapped("uniqueidentifier")
    assert field.schema == schema("string")
    value = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
    assert field.convert(value) == value.upper()
    assert field.convert(uuid.UUID(value)) == value.upper()


# ---- datetimeoffset ----


def test_datetimeoffset_maps_to_zoned_timestamp_keeping_the_offset_as_debezium_does() -> None:
    field = mapped("datetimeoffset", scale=7)
    assert field.schema == schema("string", "io.debezium.time.ZonedTimestamp")
    # the expectation of Debezium's AbstractSqlServerDatatypesTest
    assert field.convert("2018-07-13 12:23:45.4560000 +11:00") == "2018-07-13T12:23:45.456+11:00"


@pytest.mark.parametrize(("text", "expected"), [
    ("2019-01-01 12:34:56.1234567 +00:00", "2019-01-01T12:34:56.1234567Z"),
    ("2019-01-01 12:34:56.0000000 +00:00", "2019-01-01T12:34:56Z"),
    ("2019-01-01 12:34:56 -00:00", "2019-01-01T12:34:56Z"),
    ("2019-01-01T12:34:56.1200000Z", "2019-01-01T12:34:56.12Z"),
    ("2020-01-01 00:30:00.0000001 +14:00", "2020-01-01T00:30:00.0000001+14:00"),
    ("2019-12-31 23:30:00 -12:00", "2019-12-31T23:30:00-12:00"),
    ("0001-01-01 00:00:00 +14:00", "0001-01-01T00:00:00+14:00"),
    ("9999-12-31 23:59:59.9999999 -12:00", "9999-12-31T23:59:59.9999999-12:00"),
    ("2024-02-29 05:45:00.5 +05:45", "2024-02-29T05:45:00.5+05:45"),
])
def test_datetimeoffset_text_keeps_local_fields_and_offset_across_midnight(text: str, expected: str) -> None:
    assert mapped("datetimeoffset", scale=7).convert(text) == expected


def test_datetimeoffset_accepts_aware_datetime_and_rejects_naive() -> None:
    field = mapped("datetimeoffset", scale=7)
    aware = datetime(2020, 1, 1, 0, 30, 0, 120000, tzinfo=timezone(timedelta(hours=14)))
    assert field.convert(aware) == "2020-01-01T00:30:00.12+14:00"
    assert field.convert(datetime(2020, 1, 1, tzinfo=timezone.utc)) == "2020-01-01T00:00:00Z"
    with pytest.raises(ValueError, match="offset"):
        field.convert(datetime(2020, 1, 1))


def test_datetimeoffset_does_not_depend_on_time_precision_mode() -> None:
    field = mapped("datetimeoffset", connect(), scale=3)
    assert field.schema == schema("string", "io.debezium.time.ZonedTimestamp")
    assert field.convert("2018-07-13 12:23:45.456 +11:00") == "2018-07-13T12:23:45.456+11:00"


# ---- date ----


@pytest.mark.parametrize(("settings", "name"), [
    (SqlServerMappingSettings(), "io.debezium.time.Date"),
    (connect(), "org.apache.kafka.connect.data.Date"),
])
def test_date_maps_to_int32_days_since_epoch(settings: SqlServerMappingSettings, name: str) -> None:
    field = mapped("date", settings)
    assert field.schema == schema("int32", name)
    assert field.convert("2018-07-13") == 17_725
    assert field.convert(date(2018, 7, 13)) == 17_725


@pytest.mark.parametrize(("text", "days"), [("0001-01-01", -719_162), ("9999-12-31", 2_932_896),
                                            ("2024-02-29", 19_782), ("1969-12-31", -1)])
def test_date_edge_values(text: str, days: int) -> None:
    assert mapped("date").convert(text) == days


def test_date_rejects_a_day_that_does_not_exist() -> None:
    with pytest.raises(ValueError, match="2023-02-29"):
        mapped("date").convert("2023-02-29")


# ---- time ----


@pytest.mark.parametrize("scale", [0, 1, 2, 3])
def test_time_0_to_3_maps_to_int32_milliseconds(scale: int) -> None:
    field = mapped("time", scale=scale)
    assert field.schema == schema("int32", "io.debezium.time.Time")
    assert field.convert("10:23:45.68") == 37_425_680


@pytest.mark.parametrize("scale", [4, 5, 6])
def test_time_4_to_6_maps_to_int64_microseconds(scale: int) -> None:
    field = mapped("time", scale=scale)
    assert field.schema == schema("int64", "io.debezium.time.MicroTime")
    assert field.convert("10:23:45.6789") == 37_425_678_900


def test_time_7_maps_to_int64_nanoseconds_keeping_100ns_digits() -> None:
    field = mapped("time", scale=7)
    assert field.schema == schema("int64", "io.debezium.time.NanoTime")
    assert field.convert("23:59:59.9999999") == 86_399_999_999_900
    assert field.convert("00:00:00") == 0
    with pytest.raises(ValueError, match="cannot parse time"):
        field.convert("10:23")
    assert field.convert(time(23, 59, 59, 999999)) == 86_399_999_999_000


def test_time_in_connect_mode_maps_to_int32_milliseconds_truncating_sub_millisecond_digits() -> None:
    field = mapped("time", connect(), scale=7)
    assert field.schema == schema("int32", "org.apache.kafka.connect.data.Time")
    assert field.convert("23:59:59.9999999") == 86_399_999
    assert field.convert(time(10, 23, 45, 678900)) == 37_425_678


def test_time_rejects_out_of_range_fields() -> None:
    with pytest.raises(ValueError, match="24:00:00"):
        mapped("time", scale=7).convert("24:00:00")


# ---- datetime, smalldatetime, datetime2 ----


def test_datetime_maps_to_millisecond_timestamp() -> None:
    field = mapped("datetime", scale=3)
    assert field.schema == schema("int64", "io.debezium.time.Timestamp")
    assert field.convert("2018-07-13 13:23:45.780") == 1_531_488_225_780
    assert field.convert(datetime(2018, 7, 13, 13, 23, 45, 780000)) == 1_531_488_225_780


def test_smalldatetime_maps_to_millisecond_timestamp() -> None:
    field = mapped("smalldatetime")
    assert field.schema == schema("int64", "io.debezium.time.Timestamp")
    assert field.convert("2018-07-13 14:24:00") == 1_531_491_840_000


@pytest.mark.parametrize("type_name", ["datetime", "smalldatetime", "datetime2"])
def test_timestamps_in_connect_mode_map_to_connect_timestamp_milliseconds(type_name: str) -> None:
    field = mapped(type_name, connect(), scale=7)
    assert field.schema == schema("int64", "org.apache.kafka.connect.data.Timestamp")
    assert field.convert("2018-07-13 11:23:45.3400000") == 1_531_481_025_340


@pytest.mark.parametrize("scale", [0, 1, 2, 3])
def test_datetime2_0_to_3_maps_to_millisecond_timestamp(scale: int) -> None:
    field = mapped("datetime2", scale=scale)
    assert field.schema == schema("int64", "io.debezium.time.Timestamp")
    assert field.convert("2018-07-13 11:23:45.34") == 1_531_481_025_340


@pytest.mark.parametrize("scale", [4, 5, 6])
def test_datetime2_4_to_6_maps_to_microsecond_timestamp_as_if_utc(scale: int) -> None:
    field = mapped("datetime2", scale=scale)
    assert field.schema == schema("int64", "io.debezium.time.MicroTimestamp")
    assert field.convert("2018-06-20 15:13:16.945104") == 1_529_507_596_945_104  # the seed's example


def test_datetime2_7_maps_to_nanosecond_timestamp() -> None:
    field = mapped("datetime2", scale=7)
    assert field.schema == schema("int64", "io.debezium.time.NanoTimestamp")
    assert field.convert("2018-07-13 11:23:45.3400000") == 1_531_481_025_340_000_000
    assert field.convert("2018-07-13T11:23:45.3400001") == 1_531_481_025_340_000_100
    assert field.convert(datetime(2018, 7, 13, 11, 23, 45, 340000)) == 1_531_481_025_340_000_000


def test_datetime2_7_outside_the_int64_range_wraps_like_java_long_arithmetic() -> None:
    field = mapped("datetime2", scale=7)
    high = 2_932_896 * NANOS_PER_DAY + NANOS_PER_DAY - 100
    assert field.convert("9999-12-31 23:59:59.9999999") == java_long(high)
    assert field.convert("0001-01-01 00:00:00.0000000") == java_long(-719_162 * NANOS_PER_DAY)


def test_timestamp_edge_values_in_millis_and_micros() -> None:
    assert mapped("datetime2", scale=3).convert("0001-01-01 00:00:00") == -62_135_596_800_000
    assert mapped("datetime2", scale=6).convert("9999-12-31 23:59:59.999999") == 253_402_300_799_999_999
    assert mapped("datetime2", scale=3).convert("2024-02-29 00:00:00.001") == 1_709_164_800_001


def test_timestamps_before_the_epoch_round_toward_negative_infinity() -> None:
    assert mapped("datetime2", scale=6).convert("1969-12-31 23:59:59.999999") == -1
    assert mapped("datetime2", connect(), scale=7).convert("1969-12-31 23:59:59.9999999") == -1
    assert mapped("datetime2", scale=7).convert("1969-12-31 23:59:59.9999999") == -100


# ---- decimal, numeric, money, smallmoney ----


def test_decimal_precise_maps_to_connect_decimal_bytes_with_scale_and_precision() -> None:
    field = mapped("decimal", precision=6, scale=3)
    assert field.schema == schema("bytes", "org.apache.kafka.connect.data.Decimal",
                                  {"scale": "3", "connect.decimal.precision": "6"})
    assert field.convert(Decimal("1.123")) == "BGM="
    assert unb64(field.convert(Decimal("1.123"))) == 1123


def test_numeric_without_declared_precision_uses_sql_server_default_18_0() -> None:
    field = mapped("numeric")
    assert field.schema["parameters"] == {"scale": "0", "connect.decimal.precision": "18"}
    assert unb64(field.convert(Decimal("2"))) == 2


@pytest.mark.parametrize(("value", "encoded"), [(0, "AA=="), (-1, "/w=="), (-128, "gA=="), (-129, "/38="),
                                                (127, "fw=="), (128, "AIA=")])
def test_scale_0_decimals_use_minimal_twos_complement(value: int, encoded: str) -> None:
    assert mapped("numeric", precision=10, scale=0).convert(Decimal(value)) == encoded


def test_decimal_38_0_maximum_round_trips() -> None:
    field = mapped("decimal", precision=38, scale=0)
    assert unb64(field.convert(Decimal(10**38 - 1))) == 10**38 - 1
    assert unb64(field.convert(Decimal(-(10**38) + 1))) == -(10**38) + 1


@pytest.mark.parametrize(("type_name", "precision"), [("money", "19"), ("smallmoney", "10")])
def test_money_types_map_to_decimal_scale_4_with_fixed_precision(type_name: str, precision: str) -> None:
    field = mapped(type_name, precision=99, scale=9)
    assert field.schema == schema("bytes", "org.apache.kafka.connect.data.Decimal",
                                  {"scale": "4", "connect.decimal.precision": precision})
    assert unb64(field.convert(Decimal("6.323"))) == 63_230


def test_money_extremes_are_the_int64_unscaled_bounds() -> None:
    field = mapped("money")
    assert field.convert(Decimal("-922337203685477.5808")) == base64.b64encode(b"\x80" + b"\x00" * 7).decode()
    assert field.convert(Decimal("922337203685477.5807")) == base64.b64encode(b"\x7f" + b"\xff" * 7).decode()


@pytest.mark.parametrize("type_name", ["decimal", "numeric", "money", "smallmoney"])
def test_double_mode_maps_decimals_to_float64(type_name: str) -> None:
    field = mapped(type_name, decimals("double"), precision=10, scale=4)
    assert field.schema == schema("double")
    assert field.convert(Decimal("12.3400")) == 12.34
    assert field.convert(Decimal("-922337203685477.5808")) == -922337203685477.6


@pytest.mark.parametrize("type_name", ["decimal", "numeric", "money", "smallmoney"])
def test_string_mode_maps_decimals_to_plain_string_at_the_column_scale(type_name: str) -> None:
    field = mapped(type_name, decimals("string"), precision=10, scale=4)
    assert field.schema == schema("string")
    assert field.convert(Decimal("12.34")) == "12.3400"
    assert field.convert(Decimal("-0.0001")) == "-0.0001"


def test_string_mode_keeps_money_extremes_exactly() -> None:
    field = mapped("money", decimals("string"))
    assert field.convert(Decimal("-922337203685477.5808")) == "-922337203685477.5808"
    assert field.convert(Decimal("922337203685477.5807")) == "922337203685477.5807"


def test_string_mode_scale_0_has_no_decimal_point() -> None:
    assert mapped("decimal", decimals("string"), precision=38, scale=0).convert(Decimal(-(10**37))) == "-1" + "0" * 37


# ---- binary ----


@pytest.mark.parametrize("type_name", ["binary", "varbinary", "image", "timestamp", "rowversion"])
def test_binary_types_map_to_bytes_written_as_base64_by_default(type_name: str) -> None:
    field = mapped(type_name)
    assert field.schema == schema("bytes")
    assert field.convert(b"\x00\x00\x00\x00\x00\x00\x07\xd1") == "AAAAAAAAB9E="
    assert field.convert(b"") == ""


@pytest.mark.parametrize(("mode", "expected"), [("base64", "+/8="), ("base64-url-safe", "-_8="), ("hex", "fbff")])
def test_binary_handling_modes_map_to_encoded_strings(mode: str, expected: str) -> None:
    field = mapped("varbinary", SqlServerMappingSettings(binary_handling_mode=mode))
    assert field.schema == schema("string")
    assert field.convert(b"\xfb\xff") == expected
    assert field.convert(b"") == ""


def test_binary_accepts_bytearray_memoryview_and_0x_text() -> None:
    field = mapped("varbinary", SqlServerMappingSettings(binary_handling_mode="hex"))
    assert field.convert(bytearray(b"\x01")) == "01"
    assert field.convert(memoryview(b"\x02")) == "02"
    assert field.convert("0x0A0B") == "0a0b"


# ---- properties ----


@given(st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1), st.integers(min_value=0, max_value=38))
def test_decimal_bytes_round_trip_to_the_unscaled_value(unscaled: int, scale: int) -> None:
    exact = Decimal(f"{unscaled}E-{scale}")  # Decimal.scaleb would round to 28 digits
    encoded = mapped("decimal", precision=38, scale=scale).convert(exact)
    raw = base64.b64decode(encoded)
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    assert len(raw) == (unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()) // 8 + 1


@given(st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)),
       st.integers(min_value=0, max_value=NANOS_PER_DAY // 100 - 1))
def test_datetime2_7_text_gives_nanos_since_epoch_as_integer_arithmetic(day: date, ticks: int) -> None:
    seconds, fraction = divmod(ticks, 10**7)
    clock = time(seconds // 3600, seconds // 60 % 60, seconds % 60)
    text = f"{day.isoformat()} {clock.isoformat()}.{fraction:07d}"
    exact = (day - date(1970, 1, 1)).days * NANOS_PER_DAY + ticks * 100
    assert mapped("datetime2", scale=7).convert(text) == java_long(exact)
    assert mapped("datetime2", connect(), scale=7).convert(text) == exact // 10**6
    assert mapped("time", scale=7).convert(text[11:]) == ticks * 100


# ---- types pyodbc cannot fetch, read through the query's conversions (docs/decisions/0032) ----


POINT_WKB = struct.pack("<BIdd", 1, 1, -122.35, 47.65)


@pytest.mark.parametrize(("type_name", "name"), [("geometry", "Geometry"), ("geography", "Geography")])
def test_spatial_types_map_to_debezium_geometry_structs_of_wkb_and_srid(type_name: str, name: str) -> None:
    field = mapped(type_name)
    assert field.schema == {"type": "struct", "fields": [{"type": "bytes", "optional": False, "field": "wkb"},
                                                         {"type": "int32", "optional": True, "field": "srid"}],
                            "optional": True, "name": f"io.debezium.data.geometry.{name}", "version": 1,
                            "doc": name, "field": "col"}
    # the query's CAST(c.STSrid AS binary(4)) + c.STAsBinary(): the SRID, big-endian, then the well-known binary
    assert field.convert((4326).to_bytes(4, "big") + POINT_WKB) == {
        "wkb": base64.b64encode(POINT_WKB).decode(), "srid": 4326}
    with pytest.raises(ValueError, match="no SRID"):
        field.convert(b"\x00\x00")


@pytest.mark.parametrize(("type_name", "text"), [("hierarchyid", "/1/3/"), ("sql_variant", "42")])
def test_hierarchyid_and_sql_variant_map_to_their_text(type_name: str, text: str) -> None:
    assert mapped(type_name).schema == schema("string")
    assert mapped(type_name).convert(text) == text


def test_the_connections_converters_give_sql_servers_text_with_seven_digits() -> None:
    from cdckit.dialect.sqlserver.connection import server_datetime, time_text, timestamp_text

    assert timestamp_text(struct.pack("<6hI", 2024, 1, 2, 3, 4, 5, 123_456_700)) == "2024-01-02 03:04:05.1234567"
    assert time_text(struct.pack("<3H2xI", 23, 59, 59, 999_999_900)) == "23:59:59.9999999"
    assert server_datetime("2024-01-02 03:04:05.1234567") == datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert server_datetime(datetime(2024, 1, 2)) == datetime(2024, 1, 2) and server_datetime(None) is None
    with pytest.raises(ValueError, match="cannot read the SQL Server datetime"):
        server_datetime("Jan  2 2024  3:04AM")


SHAPES = ["id", "shape", "place", "node", "tag", "version", "at", "clock", "zoned", "legacy", "minute"]


def _shapes_model(tmp_path: Any) -> Any:
    from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

    server = SqlServerModel(tmp_path / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    types = ["int", "geometry", "geography", "hierarchyid", "sql_variant", "timestamp", "datetime2", "time",
             "datetimeoffset", "datetime", "smalldatetime"]
    server.create_table("testDB", "dbo", "shapes", [ModelColumn(n, t, nullable=n != "id") for n, t in
                                                      zip(SHAPES, types, strict=True)], ["id"])
    server.enable_table("testDB", "dbo", "shapes")
    return server


def test_a_table_of_these_types_is_snapshotted_and_streamed_with_exact_values(tmp_path: Any) -> None:
    """Through cdckit's own reader against the SQL Server model: the snapshot's read and the stream's changes of a
    table with spatial, hierarchyid, sql_variant, rowversion and scale-7 temporal columns (the fetch stopped the table
    before), with the same values in both."""
    from cdckit.dialect.sqlserver.catalog import capture_instances
    from cdckit.dialect.sqlserver.changes import fold_changes, max_lsn, min_lsn, read_changes
    from cdckit.dialect.sqlserver.connection import connect
    from cdckit.dialect.sqlserver.snapshot import Chunk, read_chunk

    server = _shapes_model(tmp_path)
    row = {"id": 1, "shape": "POLYGON((0 0, 2 0, 2 2, 0 0))", "place": ("POINT(-122.35 47.65)", 4326),
           "node": "/1/3/", "tag": 42, "at": "2024-01-02 03:04:05.1234567", "clock": "23:59:59.9999999",
           "zoned": "2024-01-02 03:04:05.1234567 -05:30", "legacy": "2024-01-02 03:04:05.456",
           "minute": "2024-01-02 03:04:31"}
    with server.transaction("testDB") as tx:
        version = tx.insert("dbo", "shapes", row)["version"]
    options = {"cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
               "cdckit.sqlserver.model.path": str(server.path), "database.hostname": "h", "database.user": "u",
               "database.password": "p", "database.names": "testDB", "topic.prefix": "server1"}
    conn = connect(options, "testDB")
    cursor = conn.cursor()
    instance, = capture_instances(cursor, "testDB", options)
    table_format = TableFormat(instance, format_settings(options))
    snapshot, _low, _high = read_chunk(conn, instance, Chunk("testDB", "dbo", "shapes", 0, None, None),
                                       "repeatable_read")
    expected: dict[str, Any] = {
        "id": 1,
        "shape": {"wkb": base64.b64encode(struct.pack("<BIII8d", 1, 3, 1, 4, 0, 0, 2, 0, 2, 2, 0, 0)).decode(),
                  "srid": 0},
        "place": {"wkb": base64.b64encode(POINT_WKB).decode(), "srid": 4326},
        "node": "/1/3/", "tag": "42", "version": base64.b64encode(version).decode(),
        "at": (date(2024, 1, 2) - date(1970, 1, 1)).days * NANOS_PER_DAY + (3 * 3600 + 4 * 60 + 5) * 10**9
        + 123_456_700,  # NanoTimestamp: the 100 ns digit kept
        "clock": 86_399_999_999_900,  # NanoTime
        "zoned": "2024-01-02T03:04:05.1234567-05:30",
        "legacy": 1_704_164_645_457,  # datetime: the driver's milliseconds
        "minute": 1_704_164_700_000,  # smalldatetime: 03:04:31 rounds to 03:05
    }
    assert table_format.row_payload(snapshot[0], read=True) == expected
    with server.transaction("testDB") as tx:
        tx.update("dbo", "shapes", {"id": 1}, {"tag": "changed", "node": "/1/3/7/", "at": "2024-01-02 03:04:05.9"})
    with server.transaction("testDB") as tx:
        tx.delete("dbo", "shapes", {"id": 1})
    events = list(fold_changes(instance, read_changes(cursor, instance, min_lsn(cursor, "testDB", "dbo_shapes"),
                                                      max_lsn(cursor, "testDB") or 0)))
    assert [e.op for e in events] == ["c", "u", "d"]
    assert table_format.row_payload(events[0].after) == expected  # the stream's value of the insert = the snapshot's
    update = table_format.row_payload(events[1].after)
    assert update is not None and (update["tag"], update["node"]) == ("changed", "/1/3/7/")
    assert update["at"] == expected["at"] - 123_456_700 + 900_000_000  # .9000000
    assert update["version"] != expected["version"]  # a new rowversion
    before = table_format.row_payload(events[1].before) or {}
    lobs = ("shape", "place")  # large values, under the change tables' large-object rule for update-before rows
    assert {k: v for k, v in before.items() if k not in lobs} == {k: v for k, v in expected.items() if k not in lobs}
    assert table_format.row_payload(events[2].before) == {**expected, "tag": "changed", "node": "/1/3/7/",
                                                          "at": update["at"], "version": update["version"]}
    assert events[0].source_ts_ms > 0  # the commit time, read from the connection's text of a datetime
    conn.close()


def test_the_lake_sinks_change_rows_take_geometry_structs_and_nano_values() -> None:
    """The Delta and Iceberg sinks' typed rows (spark/change_rows) from these fields: the struct as a struct of
    binary and int32, NanoTimestamp as a timestamp in microseconds (the 100 ns digit cut there, as documented),
    NanoTime as its int64."""
    import pyarrow as pa

    from cdckit.spark.change_rows import arrow_type, value_converter

    shape = mapped("geography")
    point = {"wkb": base64.b64encode(POINT_WKB).decode(), "srid": 4326}
    assert arrow_type(shape.schema) == pa.struct([pa.field("wkb", pa.binary()), pa.field("srid", pa.int32())])
    converted = value_converter(shape.schema)(shape.convert((4326).to_bytes(4, "big") + POINT_WKB))
    assert converted == value_converter(shape.schema)(point) == {"wkb": POINT_WKB, "srid": 4326}
    assert pa.array([converted], type=arrow_type(shape.schema)).to_pylist() == [converted]
    at = mapped("datetime2", scale=7)
    micros = value_converter(at.schema)(at.convert("2024-01-02 03:04:05.1234567"))
    assert arrow_type(at.schema) == pa.timestamp("us")
    assert pa.array([micros], type=pa.timestamp("us")).to_pylist() == [datetime(2024, 1, 2, 3, 4, 5, 123456)]
    clock = mapped("time", scale=7)
    assert arrow_type(clock.schema) == pa.int64()
    assert value_converter(clock.schema)(clock.convert("23:59:59.9999999")) == 86_399_999_999_900
