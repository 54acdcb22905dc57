"""PostgreSQL / YugabyteDB column types -> Kafka Connect schemas and Debezium values (table-driven).

INTERFACE CONTRACT (implemented below):

    @dataclass(frozen=True)
    class ColumnType:                 # what the postgres dialect knows of a column
        name: str                     # column name
        type_name: str                # pg_type.typname of the column's base type (domains already resolved),
                                      # e.g. "int4", "numeric", "varchar", "timestamptz", "_int4" for int4[]
        type_oid: int                 # OID of that base type
        modifier: int = -1            # atttypmod as PostgreSQL reports it (-1 = none)
        optional: bool = True         # not attnotnull
        enum_values: tuple[str, ...] | None = None   # labels when the type is an enum
        default_expression: str | None = None        # pg_get_expr of the column's DEFAULT, as Debezium reads it
                                                     # (None for a domain type: Debezium reads none there)

    @dataclass(frozen=True)
    class MappingSettings:
        time_precision_mode: str = "adaptive"       # adaptive | adaptive_time_microseconds | connect
        decimal_handling_mode: str = "precise"      # precise | double | string
        binary_handling_mode: str = "bytes"         # bytes | base64 | base64-url-safe | hex
        interval_handling_mode: str = "numeric"     # numeric | string
        hstore_handling_mode: str = "json"          # json | map

    @dataclass(frozen=True)
    class MappedField:
        schema: dict          # Kafka Connect JSON schema of the field, as JsonConverter writes it inside a struct's
                              # "fields": {"type":..., "optional":..., ["name":..., "version":..., "parameters":...],
                              # ["default":...], "field": <column name>}
        convert_value: Callable[[str], Any]    # PostgreSQL *text output* of a value (as pgoutput sends it and
                                               # as psycopg2 returns it uncast) -> the JSON-ready value
                                               # JsonConverter would write
        def convert(value: str | None) -> Any  # the same, None staying None

    def map_column(column: ColumnType, settings: MappingSettings) -> MappedField
    class UnsupportedTypeError(...)   # raised for a type with no mapping row

Adding a type = adding a row to TYPE_REGISTRY: a TypeRow naming the MappingSettings attribute that selects the
rule (or None) and one TypeRule (schema builder + converter factory) per mode. Array types ("_" + element typname)
reuse the element's row. Text formats assumed: DateStyle ISO, IntervalStyle postgres, bytea_output hex,
lc_monetary C.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import partial
from typing import Any, TypeVar

import orjson

from cdckit import errors
from cdckit.formats.debezium import pg_values as pv
from cdckit.formats.debezium.pg_defaults import default_text

__all__ = [
    "TYPE_REGISTRY", "ColumnType", "MappedField", "MappingSettings", "TypeRow", "TypeRule", "UnsupportedTypeError",
    "map_column",
]

Schema = dict[str, Any]
RuleT = TypeVar("RuleT")
TextConverter = Callable[[str], Any]


class UnsupportedTypeError(errors.UnsupportedTypeError):
    """A column type (or value shape) without a mapping row."""


@dataclass(frozen=True)
class ColumnType:
    name: str
    type_name: str
    type_oid: int
    modifier: int = -1
    optional: bool = True
    enum_values: tuple[str, ...] | None = None
    default_expression: str | None = None


@dataclass(frozen=True)
class MappingSettings:
    time_precision_mode: str = "adaptive"
    decimal_handling_mode: str = "precise"
    binary_handling_mode: str = "bytes"
    interval_handling_mode: str = "numeric"
    hstore_handling_mode: str = "json"


@dataclass(frozen=True)
class MappedField:
    schema: dict[str, Any]
    convert_value: Callable[[Any], Any]  # the converter of a non-NULL value (as pgoutput sends it: the stream)
    # The converter of a value of a snapshot, where Debezium's differs: it reads snapshots through JDBC, and
    # pgjdbc's objects differ from its stream decoder's for some values (date infinities, money, name).
    read_value: Callable[[Any], Any] | None = None

    def convert(self, value: Any) -> Any:
        """Any value, NULL (None) included."""
        return None if value is None else self.convert_value(value)

    def convert_read(self, value: Any) -> Any:
        """Any value of a snapshot row, NULL (None) included."""
        return None if value is None else (self.read_value or self.convert_value)(value)


@dataclass(frozen=True)
class TypeRule:
    schema: Callable[[ColumnType], Schema]  # core schema: no "optional", no "field"
    convert: Callable[[ColumnType], TextConverter]  # converter for non-NULL text
    read: Callable[[ColumnType], TextConverter] | None = None  # snapshot (JDBC) converter, where it differs

    def read_converter(self, column: ColumnType) -> TextConverter:
        return (self.read or self.convert)(column)


@dataclass(frozen=True)
class TypeRow:
    mode: str | None  # MappingSettings attribute choosing among rules; None -> the single rule under "*"
    rules: Mapping[str, TypeRule]


# JsonConverter.asJsonSchema writes keys in this order; "field" is appended by the enclosing struct.
_KEY_ORDER = ("type", "items", "keys", "values", "fields", "optional", "name", "version", "doc", "parameters",
              "default", "field")
UNBOUNDED_VARBIT_LENGTH = 2147483647  # what pgjdbc reports as the length of varbit without a modifier


def core_schema(type_: str, name: str | None = None, parameters: dict[str, str] | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": type_, **extra}
    if name is not None:
        schema["name"] = name
        schema["version"] = 1
    if parameters is not None:
        schema["parameters"] = parameters
    return schema


def select_rule(mode: str | None, rules: Mapping[str, RuleT], settings: object) -> RuleT:
    """The rule a type row's mode setting (e.g. ``decimal_handling_mode``) picks; the only rule when it has none."""
    if mode is None:
        return rules["*"]
    chosen = str(getattr(settings, mode))
    if chosen not in rules:
        raise ValueError(f"unknown {mode} {chosen!r}; expected one of {', '.join(rules)}")
    return rules[chosen]


def finish_schema(core: Schema, optional: bool, field: str | None = None, default: Any = None) -> Schema:
    merged = {**core, "optional": optional}
    if field is not None:
        merged["field"] = field
    if default is not None:
        merged["default"] = default
    return {key: merged[key] for key in _KEY_ORDER if key in merged}


def _fixed(type_: str, name: str | None = None) -> Callable[[ColumnType], Schema]:
    return lambda _column: core_schema(type_, name)


def _always(convert: TextConverter) -> Callable[[ColumnType], TextConverter]:
    return lambda _column: convert


def _one(schema: Callable[[ColumnType], Schema], convert: TextConverter, read: TextConverter | None = None
         ) -> TypeRow:
    return TypeRow(None, {"*": TypeRule(schema, _always(convert), None if read is None else _always(read))})


def _json_float(text: str, bits: int = 64) -> Any:
    """A float for the envelope as Jackson writes a Java float (``bits`` 32) or double: the number in Java's
    notation (a raw JSON fragment: '1.0E300', '100.0'), NaN and the infinities as the strings "NaN", "Infinity",
    "-Infinity"."""
    java = pv.java_float_text(text, bits)
    return java if java in ("NaN", "Infinity", "-Infinity") else orjson.Fragment(java.encode())


def _json_float32(text: str) -> Any:
    return _json_float(text, 32)


def _double_of(text: str) -> Any:
    """A value converted to a Java double first (decimal.handling.mode=double), then written as Java writes it."""
    return _json_float(repr(float(text.strip())))


def _java_double_text(value: float) -> str:
    """Double.toString(value)."""
    return pv.java_float_text(repr(value))


def _identity(text: str) -> str:
    return text


# ---- modifiers (atttypmod) ------------------------------------------------------------------------------------------


def numeric_typmod(column: ColumnType) -> tuple[int, int] | None:
    """(precision, scale) of numeric(p, s); scale may be negative (PostgreSQL 15+)."""
    if column.modifier < 4:
        return None
    packed = column.modifier - 4
    scale = packed & 0x7FF
    return (packed >> 16) & 0xFFFF, scale - 0x800 if scale & 0x400 else scale


def debezium_numeric_typmod(column: ColumnType) -> tuple[int, int] | None:
    """(precision, scale) as pgjdbc reports them to Debezium: the scale is the typmod's low 16 bits, unsigned, so
    numeric(5,-2) has scale 2046 (and its values are written at that scale)."""
    if column.modifier < 4:
        return None
    packed = column.modifier - 4
    return (packed >> 16) & 0xFFFF, packed & 0xFFFF


def _time_precision(column: ColumnType) -> int:
    return column.modifier if column.modifier >= 0 else 6


def _bit_length(column: ColumnType) -> int:
    if column.modifier >= 0:
        return column.modifier
    return 1 if column.type_name == "bit" else UNBOUNDED_VARBIT_LENGTH


# ---- numeric / money ------------------------------------------------------------------------------------------------


def _decimal_bytes(value: Decimal, scale: int) -> str:
    return pv.b64(pv.twos_complement(pv.unscaled(value, scale)))


def _numeric_precise_schema(column: ColumnType) -> Schema:
    typmod = debezium_numeric_typmod(column)
    if typmod is None:
        fields = [finish_schema(core_schema("int32"), False, "scale"),
                  finish_schema(core_schema("bytes"), False, "value")]
        return {**core_schema("struct", "io.debezium.data.VariableScaleDecimal", fields=fields),
                "doc": "Variable scaled decimal"}
    precision, scale = typmod
    params = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    return core_schema("bytes", "org.apache.kafka.connect.data.Decimal", params)


_SPECIAL_NUMERIC = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}


def _special_in_precise_mode(column: ColumnType, text: str) -> errors.UnsupportedValueError:
    return errors.UnsupportedValueError(
        f"column '{column.name}' holds numeric {text}, which decimal.handling.mode=precise cannot represent "
        "(Debezium 2.5.2 stops on it too: 'Got a special value (NaN/Infinity) for Decimal type'); set "
        "decimal.handling.mode=string or double to capture it")


def _numeric_precise_convert(column: ColumnType) -> TextConverter:
    typmod = debezium_numeric_typmod(column)

    def convert(text: str) -> Any:
        if typmod is not None:
            # PostgreSQL prints numeric(p, s) with exactly s fraction digits: the digits are the unscaled value.
            whole, dot, fraction = text.partition(".")
            if len(fraction) == typmod[1] and (dot or not fraction) and whole[-1:].isdigit():
                try:
                    return pv.b64(pv.twos_complement(int(whole + fraction)))
                except ValueError:
                    pass  # not plain digits: the exact path decides
        value = Decimal(text.strip())
        if not value.is_finite():  # NaN / +-Infinity have no Decimal representation
            raise _special_in_precise_mode(column, text.strip())
        if typmod is not None:
            return _decimal_bytes(value, typmod[1])
        scale, unscaled = pv.variable_scale(value)
        return {"scale": scale, "value": pv.b64(pv.twos_complement(unscaled))}

    return convert


def _numeric_string_convert(column: ColumnType) -> TextConverter:
    """BigDecimal.toPlainString() after Debezium widened the value to the column's scale; NaN and the
    infinities by SpecialValueDecimal's names ("NAN", "POSITIVE_INFINITY", "NEGATIVE_INFINITY")."""
    typmod = debezium_numeric_typmod(column)
    scale = typmod[1] if typmod is not None else 0

    def convert(text: str) -> str:
        stripped = text.strip()
        if stripped in _SPECIAL_NUMERIC:
            return _SPECIAL_NUMERIC[stripped]
        fraction = stripped.partition(".")[2]
        if len(fraction) < scale:
            return stripped + ("" if fraction else ".") + "0" * (scale - len(fraction))
        return stripped

    return convert


def _money_precise(text: str) -> str:
    return _decimal_bytes(pv.parse_money(text), 2)


def _money_string(text: str) -> str:
    return pv.plain_decimal(pv.unscaled(pv.parse_money(text), 2), 2, strip=False)


# A snapshot reads money through pgjdbc's PGmoney, a double; the stream decodes it exactly.
def _money_read_double(text: str) -> Any:
    return _json_float(_java_double_text(float(pv.parse_money(text))))


def _money_read_precise(text: str) -> str:
    return _decimal_bytes(Decimal(_java_double_text(float(pv.parse_money(text)))), 2)


def _money_read_string(text: str) -> str:
    return _java_double_text(float(pv.parse_money(text)))


def _numeric_precise_read(column: ColumnType) -> TextConverter:
    """A snapshot's numeric in precise mode: NaN and the infinities are null, as Debezium 2.5.2's snapshot writes
    them (it logs "Failed to properly convert data value"; its stream stops on them instead)."""
    convert = _numeric_precise_convert(column)
    told = False  # said once per column and converter

    def read(text: str) -> Any:
        nonlocal told
        if text.strip() not in _SPECIAL_NUMERIC:
            return convert(text)
        if not told:
            told = True
            logger.error("Failed to properly convert data value for column '%s' of type numeric: %s has no Decimal "
                         "form; written as null, as Debezium 2.5.2's snapshot writes it (set "
                         "decimal.handling.mode=string or double to keep it)", column.name, text.strip())
        return None

    return read


_NUMERIC_ROW = TypeRow("decimal_handling_mode", {
    "precise": TypeRule(_numeric_precise_schema, _numeric_precise_convert, _numeric_precise_read),
    "double": TypeRule(_fixed("double"), _always(_double_of)),
    "string": TypeRule(_fixed("string"), _numeric_string_convert),
})
_MONEY_ROW = TypeRow("decimal_handling_mode", {
    "precise": TypeRule(lambda _c: core_schema("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}),
                        _always(_money_precise), _always(_money_read_precise)),
    "double": TypeRule(_fixed("double"), _always(lambda text: _double_of(str(pv.parse_money(text)))),
                       _always(_money_read_double)),
    "string": TypeRule(_fixed("string"), _always(_money_string), _always(_money_read_string)),
})

# ---- temporal -------------------------------------------------------------------------------------------------------


def _adaptive(millis: TypeRule, micros: TypeRule) -> TypeRule:
    def pick(column: ColumnType) -> TypeRule:
        return millis if _time_precision(column) <= 3 else micros

    return TypeRule(lambda c: pick(c).schema(c), lambda c: pick(c).convert(c), lambda c: pick(c).read_converter(c))


_DEBEZIUM_DATE = TypeRule(_fixed("int32", "io.debezium.time.Date"), _always(pv.date_days),
                          _always(pv.jdbc_date_days))
_TIME_MILLIS = TypeRule(_fixed("int32", "io.debezium.time.Time"), _always(pv.time_millis))
_MICRO_TIME = TypeRule(_fixed("int64", "io.debezium.time.MicroTime"), _always(pv.parse_time))
def _timestamp_rule(type_: str, name: str, to_unit: Callable[[int], int]) -> TypeRule:
    # A snapshot reads timestamps through java.sql.Timestamp: labels before 1582-10-15 are Julian dates.
    return TypeRule(_fixed(type_, name), _always(pv.timestamp_converter(to_unit)),
                    _always(pv.timestamp_converter(to_unit, jdbc=True)))


_TIMESTAMP_MILLIS = _timestamp_rule("int64", "io.debezium.time.Timestamp", pv.floor_millis)
_MICRO_TIMESTAMP = _timestamp_rule("int64", "io.debezium.time.MicroTimestamp", pv.epoch_micros)
_ADAPTIVE_TIMESTAMP = _adaptive(_TIMESTAMP_MILLIS, _MICRO_TIMESTAMP)

_DATE_ROW = TypeRow("time_precision_mode", {
    "adaptive": _DEBEZIUM_DATE,
    "adaptive_time_microseconds": _DEBEZIUM_DATE,
    "connect": TypeRule(_fixed("int32", "org.apache.kafka.connect.data.Date"), _always(pv.date_days),
                        _always(pv.jdbc_date_days)),
})
_TIME_ROW = TypeRow("time_precision_mode", {
    "adaptive": _adaptive(_TIME_MILLIS, _MICRO_TIME),
    "adaptive_time_microseconds": _MICRO_TIME,
    "connect": TypeRule(_fixed("int32", "org.apache.kafka.connect.data.Time"), _always(pv.time_millis)),
})
_TIMESTAMP_ROW = TypeRow("time_precision_mode", {
    "adaptive": _ADAPTIVE_TIMESTAMP,
    "adaptive_time_microseconds": _ADAPTIVE_TIMESTAMP,
    "connect": _timestamp_rule("int64", "org.apache.kafka.connect.data.Timestamp", pv.floor_millis),
})
def _interval_convert(convert: TextConverter) -> Callable[[ColumnType], TextConverter]:
    def for_column(column: ColumnType) -> TextConverter:
        def checked(text: str) -> Any:
            try:
                return convert(text)
            except OverflowError as error:  # a field beyond a Java int: Debezium 2.5.2 stops on it too
                raise errors.UnsupportedValueError(f"column '{column.name}': {error}") from None
        return checked
    return for_column


_INTERVAL_ROW = TypeRow("interval_handling_mode", {
    "numeric": TypeRule(_fixed("int64", "io.debezium.time.MicroDuration"), _interval_convert(pv.interval_micros)),
    "string": TypeRule(_fixed("string", "io.debezium.time.Interval"), _interval_convert(pv.interval_iso)),
})

# ---- binary, bits, hstore -------------------------------------------------------------------------------------------


def _bytea_rule(mode: str) -> TypeRule:
    encode = pv.BINARY_ENCODERS[mode]
    return TypeRule(_fixed("bytes" if mode == "bytes" else "string"),
                    _always(lambda text: encode(pv.parse_bytea(text))))


def _bits_schema(column: ColumnType) -> Schema:
    length = _bit_length(column)
    if length <= 1:
        return core_schema("boolean")
    return core_schema("bytes", "io.debezium.data.Bits", {"length": str(length)})


def _bits_convert(column: ColumnType) -> TextConverter:
    if _bit_length(column) <= 1:
        return lambda text: int(text, 2) != 0
    return lambda text: pv.b64(pv.bits_little_endian(text))


def _point(text: str) -> dict[str, Any]:
    """io.debezium.data.geometry.Point of PostgreSQL's '(x,y)': the coordinates as doubles and as WKB (little
    endian, type 1), no SRID."""
    x_text, _, y_text = text.strip().strip("()").partition(",")
    x, y = float(x_text), float(y_text)
    return {"x": _json_float(repr(x)), "y": _json_float(repr(y)),
            "wkb": pv.b64(struct.pack("<BIdd", 1, 1, x, y)), "srid": None}


_POINT_SCHEMA = {**core_schema("struct", "io.debezium.data.geometry.Point", fields=[
    finish_schema(core_schema("double"), False, "x"), finish_schema(core_schema("double"), False, "y"),
    finish_schema(core_schema("bytes"), True, "wkb"), finish_schema(core_schema("int32"), True, "srid")]),
    "doc": "Geometry (POINT)"}


def _stream_null(_text: str) -> None:
    """Debezium's stream decoder has no case for the type (``name``): its values are null there."""
    return None


def _hstore_json(text: str) -> str:
    return json.dumps(pv.parse_hstore(text), ensure_ascii=False, separators=(",", ":"))


_HSTORE_MAP = core_schema("map", keys={"type": "string", "optional": False},
                          values={"type": "string", "optional": True})
_STRING_ROW = _one(_fixed("string"), _identity)

TYPE_REGISTRY: dict[str, TypeRow] = {
    "bool": _one(_fixed("boolean"), pv.parse_bool),
    "int2": _one(_fixed("int16"), int),
    "int4": _one(_fixed("int32"), int),
    "int8": _one(_fixed("int64"), int),
    "oid": _one(_fixed("int64"), int),
    "float4": _one(_fixed("float"), _json_float32),
    "float8": _one(_fixed("double"), _json_float),
    "numeric": _NUMERIC_ROW,
    "decimal": _NUMERIC_ROW,
    "money": _MONEY_ROW,
    **{name: _STRING_ROW for name in ("char", "bpchar", "varchar", "text", "citext")},
    # Debezium's snapshot reads name as a string; its stream decoder knows no name type and writes null.
    "name": _one(_fixed("string"), _stream_null, _identity),
    "ltree": _one(_fixed("string", "io.debezium.data.Ltree"), _identity),
    "point": _one(lambda _c: dict(_POINT_SCHEMA), _point),
    **{name: _STRING_ROW for name in ("inet", "cidr", "macaddr", "macaddr8")},
    # Range types: their text form, e.g. '[1,10)' (seed 002's INT4RANGE ... DATERANGE rows).
    **{name: _STRING_ROW for name in ("int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange")},
    "bytea": TypeRow("binary_handling_mode", {mode: _bytea_rule(mode) for mode in pv.BINARY_ENCODERS}),
    "date": _DATE_ROW,
    "time": _TIME_ROW,
    "timestamp": _TIMESTAMP_ROW,
    # Debezium 2.5 writes the fraction at the column's precision (6 unless declared): '...05.120000Z'.
    "timestamptz": TypeRow(None, {"*": TypeRule(
        _fixed("string", "io.debezium.time.ZonedTimestamp"),
        lambda c: partial(pv.timestamptz_iso, precision=_time_precision(c)),
        lambda c: partial(pv.timestamptz_iso, precision=_time_precision(c), jdbc=True))}),
    "timetz": _one(_fixed("string", "io.debezium.time.ZonedTime"),
                   lambda text: pv.format_iso_utc_time(pv.parse_timetz(text))),
    "interval": _INTERVAL_ROW,
    "uuid": _one(_fixed("string", "io.debezium.data.Uuid"), _identity),
    "json": _one(_fixed("string", "io.debezium.data.Json"), _identity),
    "jsonb": _one(_fixed("string", "io.debezium.data.Json"), _identity),
    "xml": _one(_fixed("string", "io.debezium.data.Xml"), _identity),
    "bit": TypeRow(None, {"*": TypeRule(_bits_schema, _bits_convert)}),
    "varbit": TypeRow(None, {"*": TypeRule(_bits_schema, _bits_convert)}),
    "hstore": TypeRow("hstore_handling_mode", {
        "json": TypeRule(_fixed("string", "io.debezium.data.Json"), _always(_hstore_json)),
        "map": TypeRule(lambda _c: dict(_HSTORE_MAP), _always(pv.parse_hstore)),
    }),
}

# Element types Debezium has no array schema for (PostgresValueConverter returns null for these arrays, so the
# column is left out of events).
_NO_ARRAY_FORM = frozenset({"money", "name", "interval", "varbit", "xml", "point"})
# Elements whose converter rejects the Java array pgjdbc gives for an inner dimension: Debezium writes null for
# each element of the outer dimension ('{{1,2},{3,4}}' -> [null, null]).
_NULL_INNER_ARRAYS = frozenset({"int2", "int4", "int8"})
_SPECIAL_NUMERIC_TEXTS = frozenset({"NaN", "Infinity", "-Infinity"})

logger = logging.getLogger(__name__)

# ---- resolution -----------------------------------------------------------------------------------------------------


def _unsupported(column: ColumnType, detail: str = "") -> UnsupportedTypeError:
    return UnsupportedTypeError(
        f"column '{column.name}': PostgreSQL type '{column.type_name}' (oid {column.type_oid}){detail} "
        "is not supported yet; exclude the column with column.exclude.list"
    )


def _enum_rule(values: tuple[str, ...]) -> TypeRule:
    return TypeRule(lambda _c: core_schema("string", "io.debezium.data.Enum", {"allowed": ",".join(values)}),
                    _always(_identity))


def _scalar_rule(type_name: str, settings: MappingSettings) -> TypeRule | None:
    row = TYPE_REGISTRY.get(type_name)
    return None if row is None else select_rule(row.mode, row.rules, settings)


def _bit_array_rule(column: ColumnType) -> TypeRule:
    """Debezium gives bit[] the schema of one bit(n) value (Bits, or boolean for n <= 1) and its converter builds
    a list that schema refuses: every value is null."""
    bit_column = replace(column, type_name="bit")
    return TypeRule(lambda _c: _bits_schema(bit_column), _always(lambda _text: None))


def _array_element_rule(column: ColumnType, element_type: str, settings: MappingSettings
                        ) -> tuple[TypeRule, bool] | None:
    """The element rule and whether items are optional; None where Debezium has no array schema."""
    if column.enum_values is not None:
        return _enum_rule(column.enum_values), False  # Debezium builds enum array items without .optional()
    if element_type in _NO_ARRAY_FORM:
        return None
    if element_type == "time":
        # Items are always MicroTime; where the element converter gives anything else (connect, or adaptive
        # milliseconds), the schema refuses the list and Debezium writes null.
        micros = settings.time_precision_mode == "adaptive_time_microseconds" or (
            settings.time_precision_mode == "adaptive" and _time_precision(column) > 3)
        return TypeRule(_MICRO_TIME.schema, _always(pv.parse_time if micros else _refused_element)), True
    rule = _scalar_rule(element_type, settings)
    return None if rule is None else (rule, True)


class _RefusedElement(Exception):
    """An element Debezium's array schema refuses: the whole value is null."""


def _refused_element(_text: str) -> Any:
    raise _RefusedElement


def _array_rule(column: ColumnType, settings: MappingSettings) -> TypeRule | None:
    element_type = column.type_name[1:]
    if element_type == "bit":
        return _bit_array_rule(column)
    found = _array_element_rule(column, element_type, settings)
    if found is None:
        return None
    element, items_optional = found
    element_column = replace(column, name=f"{column.name}-element", type_name=element_type, optional=True)
    items = finish_schema(element.schema(element_column), items_optional)
    # Debezium reads every array, snapshot and stream, through pgjdbc's PgArray: elements take the JDBC path.
    convert_element = element.read_converter(element_column)
    numeric = element_type in ("numeric", "decimal")

    def convert(text: str) -> list[Any] | None:
        try:
            elements = pv.parse_array(text)
        except NotImplementedError:
            if element_type in _NULL_INNER_ARRAYS:
                return [None] * pv.array_outer_length(text)
            raise _unsupported(column, " with a multi-dimensional array value (Debezium 2.5.2 writes the "
                                       "inner arrays' Java text for most element types)") from None
        if numeric and any(item in _SPECIAL_NUMERIC_TEXTS for item in elements):
            # pgjdbc cannot read NaN or an infinity into a BigDecimal array; Debezium logs that and writes null.
            logger.error("numeric array column '%s' holds NaN or an infinity, which Debezium 2.5.2 writes as null",
                         column.name)
            return None
        try:
            return [None if item is None else convert_element(item) for item in elements]
        except _RefusedElement:
            return None

    return TypeRule(lambda _c: core_schema("array", items=items), _always(convert))


# A timestamp DEFAULT 'infinity' / '-infinity' reaches Debezium as pgjdbc's OffsetDateTime.MAX / MIN, not as the
# infinity values of the column's data: MicroTimestamp saturates the seconds (TimeUnit.toMicros) and adds the
# microseconds of MAX, overflowing; the millisecond schemas fail (Instant.toEpochMilli), so have no default.
_MICRO_TIMESTAMP_INFINITY_DEFAULTS = {"infinity": -9223372036853775810, "-infinity": -9223372036854775808}


def _default_value(column: ColumnType, core: Schema, convert: TextConverter) -> Any:
    """The field's default as Debezium converts the column's DEFAULT (None: none), with the column's own value
    converter, so every handling mode applies to it as to the column's values."""
    typmod = numeric_typmod(column) if column.type_name == "numeric" else None
    text = default_text(column.type_name, column.default_expression, enum=column.enum_values is not None,
                        scale=typmod[1] if typmod else None)
    if text is None or core["type"] == "struct":  # a Struct cannot be a default (KAFKA-12694): Debezium drops it
        return None
    if column.type_name == "timestamp" and text in _MICRO_TIMESTAMP_INFINITY_DEFAULTS:
        micro = core.get("name") == "io.debezium.time.MicroTimestamp"
        return _MICRO_TIMESTAMP_INFINITY_DEFAULTS[text] if micro else None
    try:
        return convert(text)
    except (ValueError, ArithmeticError):  # Debezium gives no default when its conversion fails
        return None


def map_column(column: ColumnType, settings: MappingSettings) -> MappedField | None:
    """Kafka Connect field schema and text-value converters for one column; None where Debezium 2.5.2 has no
    converter for the type (its connector leaves such a column out of events, with a warning)."""
    if column.type_name.startswith("_"):
        rule = _array_rule(column, settings)
    elif column.enum_values is not None:
        rule = _enum_rule(column.enum_values)
    else:
        rule = _scalar_rule(column.type_name, settings)
    if rule is None:
        return None
    core, convert = rule.schema(column), rule.convert(column)
    return MappedField(schema=finish_schema(core, column.optional, column.name, _default_value(column, core, convert)),
                       convert_value=convert, read_value=None if rule.read is None else rule.read(column))
