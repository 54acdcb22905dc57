"""Column DEFAULTs in the field schemas, as Debezium 2.5.2's PostgreSQL connector writes them.

The expected texts are those Debezium 2.5.2 wrote for the parity corpus's ``t_defaults`` table (``cdckit_lab.parity``)
from the expressions PostgreSQL's ``pg_get_expr`` gives for its DEFAULTs.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat, dumps
from cdckit.formats.debezium.pg_defaults import default_text
from cdckit.formats.debezium.postgres_types import ColumnType, MappingSettings, map_column

PRECISE = MappingSettings()
MODES_A = MappingSettings(decimal_handling_mode="string", time_precision_mode="adaptive_time_microseconds",
                          binary_handling_mode="base64", interval_handling_mode="string", hstore_handling_mode="map")
MODES_B = MappingSettings(decimal_handling_mode="double", time_precision_mode="connect", binary_handling_mode="hex")
NO_DEFAULT = "<none>"


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


def default_of(type_name: str, expression: str, settings: MappingSettings = PRECISE, modifier: int = -1,
               **column: Any) -> str:
    """The field schema's "default" as JSON text (NO_DEFAULT when the schema has none)."""
    mapped = map_column(ColumnType("c", type_name, 1, modifier, default_expression=expression, **column), settings)
    return dumps(mapped.schema["default"]) if "default" in mapped.schema else NO_DEFAULT


# ---- the same in every mode -----------------------------------------------------------------------------------------

SAME_IN_EVERY_MODE = [
    ("int4", "7", -1, "7"),
    ("int2", "'-1'::integer", -1, "-1"),
    ("int8", "'9223372036854775807'::bigint", -1, "9223372036854775807"),
    ("int4", "'-5'::integer", -1, "-5"),
    ("float4", "1.5", -1, "1.5"),
    ("float4", "3.14159265358979", -1, "3.1415927"),  # parsed as a Java float
    ("float8", "0.1", -1, "0.1"),
    ("float8", "'1" + "0" * 300 + "'::numeric", -1, "1.0E300"),  # DEFAULT 1e300
    ("text", "'it''s'::text", -1, '"it"'),  # the first quoted run only
    ("varchar", "'v'::character varying", -1, '"v"'),
    ("bpchar", "'c'::bpchar", 6, '"c"'),  # not padded to the column's length
    ("text", "md5('x'::text)", -1, '""'),  # a function call: the type's placeholder
    ("text", "CURRENT_USER", -1, '"CURRENT_USER"'),  # no quote, no call: the expression itself
    ("text", "('a'::text || 'b'::text)", -1, '"a"'),
    ("bool", "true", -1, "true"),
    ("bool", "false", -1, "false"),
    ("bool", "(1 = 1)", -1, "false"),  # Boolean.parseBoolean of the expression
    ("uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid", -1, '"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"'),
    ("uuid", "gen_random_uuid()", -1, '"00000000-0000-0000-0000-000000000000"'),
    ("jsonb", "'{}'::jsonb", -1, '"{}"'),
    ("json", "json_build_object()", -1, '"{}"'),
    ("bit", "'101'::\"bit\"", 3, '"BQ=="'),
    ("bit", "'1'::\"bit\"", 1, "true"),
    ("varbit", "'0110'::\"bit\"", 8, '"Bg=="'),
    ("timestamptz", "'2000-01-01 00:00:00+00'::timestamp with time zone", -1, '"2000-01-01T00:00:00.000000Z"'),
    ("timestamptz", "'2000-01-01 00:00:00.123+00'::timestamp with time zone", 3, '"2000-01-01T00:00:00.123Z"'),
    ("timestamptz", "now()", -1, '"1970-01-01T00:00:00.000000Z"'),  # the epoch stands for a generated value
    ("int8", "nextval('t_defaults_seq_seq'::regclass)", -1, "0"),
    ("date", "CURRENT_DATE", -1, "0"),
    ("date", "'2000-01-01'::date", -1, "10957"),
    # No parser, or nothing Debezium can parse: no default.
    ("int4", "(1 + 2)", -1, NO_DEFAULT),
    ("bytea", "'\\x01'::bytea", -1, NO_DEFAULT),
    ("money", "1.25", -1, NO_DEFAULT),
    ("citext", "'x'::citext", -1, NO_DEFAULT),
    ("_int4", "'{1,2}'::integer[]", -1, NO_DEFAULT),
    ("timestamptz", "'infinity'::timestamp with time zone", -1, NO_DEFAULT),
]


@pytest.mark.parametrize("settings", [PRECISE, MODES_A, MODES_B], ids=["default", "modes-a", "modes-b"])
@pytest.mark.parametrize(("type_name", "expression", "modifier", "expected"), SAME_IN_EVERY_MODE)
def test_default_is_written_as_debezium_writes_it_in_every_mode(type_name: str, expression: str, modifier: int,
                                                                expected: str, settings: MappingSettings) -> None:
    assert default_of(type_name, expression, settings, modifier) == expected


# ---- by handling mode -----------------------------------------------------------------------------------------------

BY_MODE = [
    # numeric(5,2): Decimal bytes at the column's scale / a double / plain text at the column's scale
    ("numeric", "1.5", numeric_typmod(5, 2), ('"AJY="', "1.5", '"1.50"')),
    ("numeric", "'-1.5'::numeric", numeric_typmod(5, 2), ('"/2o="', "-1.5", '"-1.50"')),
    ("numeric", "42", numeric_typmod(6, 2), ('"EGg="', "42.0", '"42.00"')),
    # numeric without a modifier: a VariableScaleDecimal struct cannot be a default (KAFKA-12694)
    ("numeric", "2.25", -1, (NO_DEFAULT, "2.25", '"2.25"')),
    ("time", "'01:02:03'::time without time zone", -1, ("3723000000", "3723000", "3723000000")),
    ("time", "LOCALTIME", 3, ("0", "0", "0")),
    ("timestamp", "'2000-01-01 00:00:00'::timestamp without time zone", -1,
     ("946684800000000", "946684800000", "946684800000000")),
    ("timestamp", "CURRENT_TIMESTAMP", -1, ("0", "0", "0")),
    # pgjdbc's OffsetDateTime.MAX: MicroTimestamp overflows, the millisecond Timestamp fails
    ("timestamp", "'infinity'::timestamp without time zone", -1,
     ("-9223372036853775810", NO_DEFAULT, "-9223372036853775810")),
    ("interval", "'1 day'::interval", -1, ("86400000000", "86400000000", '"P0Y0M1DT0H0M0S"')),
    ("interval", "'1 year 2 mons 3 days 04:05:06.5'::interval", -1,
     ("37091106500000", "37091106500000", '"P1Y2M3DT4H5M6.5S"')),
]


@pytest.mark.parametrize(("type_name", "expression", "modifier", "expected"), BY_MODE)
def test_default_follows_the_handling_modes(type_name: str, expression: str, modifier: int,
                                            expected: tuple[str, str, str]) -> None:
    found = tuple(default_of(type_name, expression, settings, modifier) for settings in (PRECISE, MODES_B, MODES_A))
    assert found == expected


def test_enum_default_is_the_label_and_follows_the_parameters() -> None:
    mapped = map_column(ColumnType("m", "mood", 1, enum_values=("sad", "ok", "happy"),
                                   default_expression="'ok'::mood"), PRECISE)
    assert dumps(mapped.schema) == ('{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,'
                                    '"parameters":{"allowed":"sad,ok,happy"},"default":"ok","field":"m"}')


def test_enum_default_cast_to_another_name_gives_none() -> None:
    assert default_of("mood", "'ok'::other.mood", enum_values=("ok",)) == NO_DEFAULT


def test_not_null_column_keeps_its_default() -> None:
    mapped = map_column(ColumnType("nn", "int4", 23, optional=False, default_expression="3"), PRECISE)
    assert dumps(mapped.schema) == '{"type":"int32","optional":false,"default":3,"field":"nn"}'


def test_column_without_default_has_no_default_key() -> None:
    assert "default" not in map_column(ColumnType("c", "int4", 23), PRECISE).schema


# ---- the expression parser ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("type_name", "expression", "expected"), [
    ("int4", "NULL::integer", None),
    ("int2", "'40000'::integer", None),  # out of range for a Short
    ("int4", " 7 ", "7"),  # trimmed for numeric types
    ("text", "'a\nb'::text", None),  # Java's '.' does not cross a line end
    ("time", "'24:00:00'::time without time zone", "23:59:59.999999"),  # pgjdbc's LocalTime.MAX
    ("numeric", "'NaN'::numeric", None),
    ("interval", "now()", "00:00:00"),  # PGInterval("epoch") is a zero interval
    ("point", "'(1,2)'::point", None),
])
def test_default_text(type_name: str, expression: str, expected: str | None) -> None:
    assert default_text(type_name, expression) == expected


# ---- in messages ----------------------------------------------------------------------------------------------------

TABLE = TableInfo("public", "t", 1, (
    ColumnType("id", "int4", 23, optional=False, default_expression="42"),
    ColumnType("i", "int4", 23, default_expression="7"),
    ColumnType("nn", "int4", 23, optional=False, default_expression="3"),
    ColumnType("v", "text", 25),
), ("id",), "d")


def messages(**settings: Any) -> TableFormat:
    return TableFormat(TABLE, dataclasses.replace(FormatSettings(topic_prefix="p", database="db"), **settings))


def event(op: str, before: dict[str, object] | None, after: dict[str, object] | None) -> ChangeEvent:
    return ChangeEvent("public", "t", op, before, after, Position(commit_lsn=3, lsn=2, serial=0), source_ts_ms=1,
                       tx_id=7)


def test_key_field_carries_its_default() -> None:
    assert messages().key_schema["fields"] == [{"type": "int32", "optional": False, "default": 42, "field": "id"}]


def test_null_value_is_written_as_the_default() -> None:
    # JsonConverter's replace.null.with.default: a NULL of a column with a default is written as the default
    payload = json.loads(messages().value_json(event("c", None, {"id": "2", "i": None, "nn": "4", "v": None}), 0))
    assert payload["payload"]["after"] == {"id": 2, "i": 7, "nn": 4, "v": None}


def test_key_only_before_image_is_filled_with_defaults() -> None:
    payload = json.loads(messages(value_schemas_enable=False).value_json(event("d", {"id": "2"}, None), 0))
    assert payload["before"] == {"id": 2, "i": 7, "nn": 3, "v": None}
