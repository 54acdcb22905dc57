"""PostgreSQL values at their edges, as Debezium 2.5.2's connector wrote them in the parity corpus
(``cdckit_lab.parity``): every expected value below is one Debezium wrote, in a snapshot (read through JDBC) or
in the stream (decoded from pgoutput)."""

from __future__ import annotations

import json
import logging
from typing import Any

import orjson
import pytest

from cdckit.dialect.postgres.catalog import select_tables
from cdckit.errors import UnsupportedValueError
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium import envelope
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat
from cdckit.formats.debezium.postgres_types import ColumnType, MappedField, MappingSettings, map_column

CONNECT = MappingSettings(time_precision_mode="connect")
STRING = MappingSettings(decimal_handling_mode="string", time_precision_mode="adaptive_time_microseconds",
                         interval_handling_mode="string")
DOUBLE = MappingSettings(decimal_handling_mode="double", time_precision_mode="connect")


def field(type_name: str, modifier: int = -1, settings: MappingSettings | None = None, **kw: Any) -> MappedField:
    found = map_column(ColumnType("col", type_name, 1, modifier, **kw), settings or MappingSettings())
    assert found is not None
    return found


def text(value: Any) -> str:
    return orjson.dumps(value).decode()


# ---- dates and timestamps ----


def test_date_infinities_differ_between_snapshot_and_stream() -> None:
    for settings in (MappingSettings(), CONNECT):
        date = field("date", settings=settings)
        assert (date.convert_read("infinity"), date.convert_read("-infinity")) == (-622191234, -625821272)
        assert (date.convert("infinity"), date.convert("-infinity")) == (-2147472692, -2147472691)


def test_date_arrays_take_the_snapshot_infinities_in_snapshot_and_stream() -> None:
    dates = field("_date")
    assert dates.convert("{2024-01-01,infinity,-infinity}") == [19723, -622191234, -625821272]
    assert dates.convert_read("{2024-01-01,infinity,-infinity}") == [19723, -622191234, -625821272]


def test_bc_date_snapshot_keeps_the_year_of_era_and_stream_counts_proleptic_days() -> None:
    date = field("date")
    assert date.convert_read("0044-03-15 BC") == -703383
    assert date.convert("0044-03-15 BC") == -735160
    assert date.convert("4713-01-01 BC") == -2440550
    assert date.convert_read("5874897-12-31") == date.convert("5874897-12-31") == 2145042905


def test_timestamp_infinity_is_pgjdbc_sentinel_in_the_schema_unit() -> None:
    assert field("timestamp").convert("infinity") == 9223372036825200000
    assert field("timestamp", 0).convert_read("infinity") == 9223372036825200
    assert field("timestamp", 3).convert("-infinity") == -9223372036832400
    assert field("timestamp", settings=CONNECT).convert("infinity") == 9223372036825200


def test_timestamp_micros_past_the_long_range_wrap_as_debezium_computes_them() -> None:
    assert field("timestamp").convert_read("294276-12-31 23:59:59.999999") == -9223372036853775810
    assert field("timestamp").convert("294276-12-31 23:59:59.999999") == -9223372036853775810
    assert field("timestamp", settings=CONNECT).convert("294276-12-31 23:59:59.999999") == 9224318015999999
    assert field("timestamp", 0).convert_read("294276-12-31 23:59:59") == 9224318015999000
    assert field("timestamp", 3).convert_read("2262-04-11 23:47:16.854") == 9223372036854


def test_timestamps_before_1582_are_julian_in_snapshots_and_proleptic_in_the_stream() -> None:
    micros, seconds, millis = field("timestamp"), field("timestamp", 0), field("timestamp", 3)
    assert micros.convert_read("1000-01-01 12:00:00") == -30609748800000000
    assert micros.convert("1000-01-01 12:00:00") == -30610180800000000
    assert seconds.convert_read("0001-01-01 00:00:00 BC") == -62167392000000
    assert seconds.convert("0001-01-01 00:00:00 BC") == -62167219200000
    assert millis.convert_read("1582-10-04 23:59:59.999") == -12219292800001
    assert millis.convert("1582-10-04 23:59:59.999") == -12220156800001
    assert micros.convert_read("1582-10-15 00:00:00") == micros.convert("1582-10-15 00:00:00") == -12219292800000000


def test_timestamptz_before_1582_is_julian_in_snapshots() -> None:
    plain, three = field("timestamptz"), field("timestamptz", 3)
    assert plain.convert_read("1000-01-01 00:00:00+00") == "1000-01-06T00:00:00.000000Z"
    assert plain.convert("1000-01-01 00:00:00+00") == "1000-01-01T00:00:00.000000Z"
    assert three.convert_read("0044-03-15 00:00:00+00 BC") == "-0043-03-13T00:00:00.000Z"
    assert three.convert("0044-03-15 00:00:00+00 BC") == "-0043-03-15T00:00:00.000Z"
    assert plain.convert("4713-01-01 00:00:00+00 BC") == "-4712-01-01T00:00:00.000000Z"


# ---- intervals ----


@pytest.mark.parametrize(("value", "micros", "iso"), [
    ("1 year 2 mons 3 days 04:05:06.5", 37091106500000, "P1Y2M3DT4H5M6.5S"),
    ("-178000000 years", -9223372036854775808, "P-178000000Y0M0DT0H0M0S"),
    ("178000000 years", 9223372036854775807, "P178000000Y0M0DT0H0M0S"),
    ("2147483647 days 596523:00:59.999999", 9223372036854775807, "P0Y0M2147483647DT596523H0M59.999999S"),
    ("-2147483648 days -596523:00:00", -9223372036854775808, "P0Y0M-2147483648DT-596523H0M0S"),
    ("-1 years -2 mons +3 days -04:05:06", -36572706000000, "P-1Y-2M3DT-4H-5M-6S"),
    ("-00:00:00.001", -1000, "P0Y0M0DT0H0M-0.001S"),
    ("23:59:59.999", 86399999000, "P0Y0M0DT23H59M59.999S"),
    ("-1 days", -86400000000, "P0Y0M-1DT0H0M0S"),
    ("1 year 11 mons", 60485400000000, "P1Y11M0DT0H0M0S"),
    ("00:00:00.1", 100000, "P0Y0M0DT0H0M0.1S"),
    ("00:00:00", 0, "P0Y0M0DT0H0M0S"),
])
def test_interval_is_pgjdbc_pginterval_through_micro_duration_or_interval(value: str, micros: int, iso: str) -> None:
    assert field("interval").convert(value) == micros
    assert field("interval", settings=STRING).convert(value) == iso


def test_interval_with_hours_beyond_a_java_int_stops_as_debezium_does() -> None:
    with pytest.raises(UnsupportedValueError, match=r"'col'.*Java int"):
        field("interval").convert("2562047788:00:54.775807")


# ---- numeric and money ----


def test_numeric_string_mode_widens_to_the_column_scale_and_names_special_values() -> None:
    negative_scale = field("numeric", ((5 << 16) | (-2 & 0x7FF)) + 4, STRING)
    assert negative_scale.convert("12300") == "12300." + "0" * 2046
    assert field("numeric", ((5 << 16) | 2) + 4, STRING).convert("NaN") == "NAN"
    variable = field("numeric", settings=STRING)
    assert [variable.convert(v) for v in ("NaN", "Infinity", "-Infinity")] == [
        "NAN", "POSITIVE_INFINITY", "NEGATIVE_INFINITY"]
    assert field("_numeric", ((5 << 16) | 2) + 4, STRING).convert("{1.50,2}") == ["1.50", "2.00"]


def test_numeric_arrays_holding_nan_or_an_infinity_are_null() -> None:
    for settings in (STRING, DOUBLE):
        assert field("_numeric", settings=settings).convert("{1.5,NaN}") is None
        assert field("_numeric", settings=settings).convert("{Infinity,-Infinity}") is None


def test_money_in_snapshots_goes_through_a_double() -> None:
    precise, string, double = field("money"), field("money", settings=STRING), field("money", settings=DOUBLE)
    assert precise.convert_read("-$92,233,720,368,547,758.08") == "/3////////9A"
    assert precise.convert_read("$92,233,720,368,547,758.07") == "AIAAAAAAAADA"
    assert string.convert_read("-$92,233,720,368,547,758.08") == "-9.223372036854776E16"
    assert string.convert_read("$0.00") == "0.0"
    assert text(double.convert_read("$1,000,000.00")) == "1000000.0"
    assert string.convert("$1,000,000.00") == "1000000.00"  # the stream decodes money exactly
    assert string.convert("-$0.50") == "-0.50"


# ---- other types ----


def test_point_is_a_debezium_point_struct_with_wkb() -> None:
    point = field("point")
    assert point.schema == {
        "type": "struct",
        "fields": [{"type": "double", "optional": False, "field": "x"},
                   {"type": "double", "optional": False, "field": "y"},
                   {"type": "bytes", "optional": True, "field": "wkb"},
                   {"type": "int32", "optional": True, "field": "srid"}],
        "optional": True, "name": "io.debezium.data.geometry.Point", "version": 1, "doc": "Geometry (POINT)",
        "field": "col"}
    assert text(point.convert("(1.5,2.5)")) == '{"x":1.5,"y":2.5,"wkb":"AQEAAAAAAAAAAAD4PwAAAAAAAARA","srid":null}'
    assert text(point.convert("(-0.1,10000000000)")) == (
        '{"x":-0.1,"y":1.0E10,"wkb":"AQEAAACamZmZmZm5vwAAACBfoAJC","srid":null}')


def test_ltree_and_ltree_arrays_are_named_strings() -> None:
    assert field("ltree").schema["name"] == "io.debezium.data.Ltree"
    assert field("ltree").convert("top.science.astronomy") == "top.science.astronomy"
    ltrees = field("_ltree")
    assert ltrees.schema["items"] == {"type": "string", "optional": True, "name": "io.debezium.data.Ltree",
                                      "version": 1}
    assert ltrees.convert("{a.b,c}") == ["a.b", "c"]


def test_name_is_a_string_in_snapshots_and_null_in_the_stream() -> None:
    name = field("name")
    assert name.schema == {"type": "string", "optional": True, "field": "col"}
    assert name.convert_read("a name") == "a name"
    assert name.convert("inserted") is None


def test_enum_arrays_have_required_items() -> None:
    moods = field("_mood", enum_values=("sad", "ok", "happy"))
    assert moods.schema["items"] == {"type": "string", "optional": False, "name": "io.debezium.data.Enum",
                                     "version": 1, "parameters": {"allowed": "sad,ok,happy"}}
    assert moods.convert("{sad,happy}") == ["sad", "happy"]


def test_bit_arrays_have_one_bit_value_schema_and_null_values() -> None:
    bits = field("_bit", 3)
    assert bits.schema == {"type": "bytes", "optional": True, "name": "io.debezium.data.Bits", "version": 1,
                           "parameters": {"length": "3"}, "field": "col"}
    assert bits.convert("{101,010}") is None
    assert bits.convert("{}") is None


def test_time_arrays_are_micro_time_and_null_where_the_element_is_not() -> None:
    assert field("_time").convert("{12:00:00}") == [43200000000]
    connect = field("_time", settings=CONNECT)
    assert connect.schema["items"]["name"] == "io.debezium.time.MicroTime"
    assert connect.convert("{12:00:00}") is None
    assert connect.convert("{}") == []


# ---- the table's events ----


class _Table:
    schema, name, key_columns = "public", "t_geometry", ("id",)
    columns = (ColumnType("id", "int4", 23, optional=False), ColumnType("pt", "point", 600),
               ColumnType("bx", "box", 603), ColumnType("d", "date", 1082))

    def emitted_columns(self) -> tuple[ColumnType, ...]:
        return self.columns


def _event(op: str, after: dict[str, Any]) -> ChangeEvent:
    return ChangeEvent("public", "t_geometry", op, None, after, Position(1, 1, 0), 0, 1)


def test_columns_without_a_converter_are_left_out_with_one_warning(caplog: pytest.LogCaptureFixture,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envelope, "_DROPPED_WARNED", set())  # once per process: other tests may have warned
    with caplog.at_level(logging.WARNING):
        fmt = TableFormat(_Table(), FormatSettings(topic_prefix="parity", database="db"))
        TableFormat(_Table(), FormatSettings(topic_prefix="parity", database="db"))
    assert [f["field"] for f in fmt.value_schema["fields"][0]["fields"]] == ["id", "pt", "d"]
    warnings = [r.getMessage() for r in caplog.records if "public.t_geometry.bx" in r.getMessage()]
    assert warnings == ["No converter found for column public.t_geometry.bx of type box. The column will not be "
                        "part of change events for that table."]
    after = json.loads(fmt.value_json(_event("c", {"id": 1, "pt": "(3,4)", "bx": "(1,1),(0,0)", "d": None}), 0))
    assert after["payload"]["after"] == {"id": 1, "pt": {"x": 3.0, "y": 4.0, "wkb": "AQEAAAAAAAAAAAAIQAAAAAAAABBA",
                                                         "srid": None}, "d": None}


def test_snapshot_rows_take_the_jdbc_converters() -> None:
    fmt = TableFormat(_Table(), FormatSettings(topic_prefix="parity", database="db"))
    row = {"id": 1, "pt": None, "bx": None, "d": "infinity"}
    assert json.loads(fmt.value_json(_event("r", row), 0))["payload"]["after"]["d"] == -622191234
    assert json.loads(fmt.value_json(_event("u", row), 0))["payload"]["after"]["d"] == -2147472692


def test_numeric_nan_in_precise_mode_stops_naming_table_column_and_remedy() -> None:
    class Numbers(_Table):
        columns = (ColumnType("id", "int4", 23, optional=False), ColumnType("n", "numeric", 1700))

    fmt = TableFormat(Numbers(), FormatSettings(topic_prefix="parity", database="db"))
    with pytest.raises(UnsupportedValueError, match=r"table public\.t_geometry: column 'n' holds numeric NaN.*"
                                                    r"decimal\.handling\.mode=string or double"):
        fmt.value_json(_event("c", {"id": 1, "n": "NaN"}), 0)
    assert '"n":null' in fmt.value_json(_event("r", {"id": 1, "n": "NaN"}), 0)  # a snapshot's: null


# ---- floats: Java writes two significant digits at least ----


@pytest.mark.parametrize(("type_name", "postgres_text", "debezium"), [
    ("float4", "1e-45", "1.4E-45"),   # Float.MIN_VALUE, as Debezium wrote it in the corpus
    ("float4", "3e-45", "2.8E-45"),
    ("float8", "5e-324", "4.9E-324"),  # Double.MIN_VALUE
    ("float4", "1e-05", "1.0E-5"),    # one digit where two add nothing
    ("float8", "0.1", "0.1"),
    ("float8", "100", "100.0"),
])
def test_floats_take_javas_two_digit_nearest_form(type_name: str, postgres_text: str, debezium: str) -> None:
    assert text(field(type_name).convert(postgres_text)) == debezium


# ---- which tables, in which order ----


def test_tables_come_in_debeziums_snapshot_order_include_list_entry_by_entry() -> None:
    candidates = [("public", name) for name in ("b_2", "a", "b_1", "zz", "c")]
    assert select_tables(candidates, {"table.include.list": r"public\.zz,public\.b_.*,public\.a"}) == [
        ("public", "zz"), ("public", "b_1"), ("public", "b_2"), ("public", "a")]
    assert select_tables(candidates, {}) == [("public", n) for n in ("a", "b_1", "b_2", "c", "zz")]
    assert select_tables(candidates, {"table.include.list": r"public\..*,public\.a"})[0] == ("public", "a")


def test_numeric_nan_is_null_with_an_error_in_a_snapshot_and_stops_the_stream(
        caplog: pytest.LogCaptureFixture) -> None:
    # Debezium 2.5.2 in precise mode: its snapshot writes null (logging "Failed to properly convert data value"),
    # its stream stops with "Got a special value (NaN/Infinity) for Decimal type".
    numeric = field("numeric")
    with caplog.at_level(logging.ERROR):
        assert [numeric.convert_read(t) for t in ("NaN", "Infinity", "-Infinity", "1.5")] == [
            None, None, None, {"scale": 1, "value": "Dw=="}]
    assert len(caplog.records) == 1 and "decimal.handling.mode=string or double" in caplog.text
    with pytest.raises(UnsupportedValueError, match="numeric NaN"):
        numeric.convert("NaN")
