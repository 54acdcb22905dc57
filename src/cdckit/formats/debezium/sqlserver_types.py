"""SQL Server column types -> Kafka Connect schemas and Debezium values (table-driven), as Debezium 2.0's
SqlServerValueConverters / JdbcValueConverters and Kafka Connect's JsonConverter produce them.

    map_sqlserver_column(SqlServerColumn, SqlServerMappingSettings) -> MappedField   (MappedField from postgres_types)

Adding a type = adding a row to TYPE_REGISTRY: a SqlServerTypeRow naming the SqlServerMappingSettings attribute that
selects the rule (or None) and one SqlServerTypeRule (schema builder + converter factory) per mode. Types without a row
(anything unknown) raise UnsupportedSqlServerTypeError.

Value inputs are what pyodbc returns (bool/int, float, Decimal, str, bytes, date, time, naive datetime, aware datetime
for datetimeoffset) or, for temporal types, the exact text of CONVERT(..., 121)/126 ('YYYY-MM-DD hh:mm:ss[.fffffff]',
'hh:mm:ss[.fffffff]', 'YYYY-MM-DD hh:mm:ss[.fffffff] +hh:mm', 'YYYY-MM-DD'), parsed with integer maths to 100 ns.
cdckit's connections read datetime, smalldatetime, datetime2, time and datetimeoffset as that text
(dialect/sqlserver/connection.py), so the 100 ns digit stays.

geometry, geography, hierarchyid and sql_variant, which pyodbc cannot fetch, are read through conversions in the
query (``queries.column_expression``, docs/decisions/0032): spatial values as the SRID (4 bytes, big-endian) and the
well-known binary in one varbinary, emitted as Debezium's ``io.debezium.data.geometry.Geometry`` / ``Geography``
structs {wkb, srid} (Debezium 2's shape); hierarchyid as its text ('/1/3/') and sql_variant as nvarchar text, both
strings.

Behaviour taken from Debezium rather than the seed's prose (see debezium/debezium SqlServerValueConverters,
ZonedTimestamp, NanoTimestamp and AbstractSqlServerDatatypesTest):
- datetimeoffset keeps the value's own offset: ZonedTimestamp formats the OffsetDateTime with ISO_OFFSET_DATE_TIME, so
  '2018-07-13 12:23:45.4560000 +11:00' -> '2018-07-13T12:23:45.456+11:00' ('Z' only for offset 0; fraction digits
  trimmed of trailing zeros, none when zero).
- time in connect mode is int32 (Kafka Connect's Time logical type is INT32; the seed's INT64 is a documentation slip).
- time.precision.mode=adaptive_time_microseconds, which the seed does not list, is accepted by the connector (the
  shared relational property) and is adaptive except that every time column is MicroTime, as JdbcValueConverters does.
- NanoTimestamp is epochDay * 86_400_000_000_000 + nanoOfDay in Java long arithmetic, which wraps outside
  1677-09-21..2262-04-11; the wrapped value is reproduced.
- real (FLOAT32) is returned as the Python float with the shortest decimal form that round-trips through float32,
  as Java's Float.toString prints it (pyodbc widens real to a double: 4.323 -> 4.322999954223633).
"""

from __future__ import annotations

import math
import re
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from cdckit import errors
from cdckit.formats.debezium import pg_values as pv
from cdckit.formats.debezium.postgres_types import MappedField, core_schema, finish_schema, select_rule

__all__ = [
    "TYPE_REGISTRY", "MappedField", "SqlServerColumn", "SqlServerMappingSettings", "SqlServerTypeRow",
    "SqlServerTypeRule", "UnsupportedSqlServerTypeError", "map_sqlserver_column", "shortest_float32"]

Schema = dict[str, Any]
Converter = Callable[[Any], Any]

NANOS_PER_SECOND = 1_000_000_000
NANOS_PER_DAY = 86_400 * NANOS_PER_SECOND
MONEY_PRECISION_SCALE = (19, 4)
SMALLMONEY_PRECISION_SCALE = (10, 4)
DEFAULT_DECIMAL_PRECISION = 18  # SQL Server's decimal/numeric without (p, s)


class UnsupportedSqlServerTypeError(errors.UnsupportedTypeError):
    """A SQL Server column type without a mapping row."""


@dataclass(frozen=True)
class SqlServerColumn:
    name: str
    type_name: str  # sys.types name, e.g. "int", "datetime2", "timestamp" (= rowversion)
    max_length: int = -1  # sys.columns.max_length in bytes (-1 = MAX)
    precision: int = 0  # sys.columns.precision
    scale: int = 0  # sys.columns.scale (fractional-second digits for time/datetime2/datetimeoffset)
    optional: bool = True


@dataclass(frozen=True)
class SqlServerMappingSettings:
    time_precision_mode: str = "adaptive"  # adaptive | adaptive_time_microseconds | connect
    decimal_handling_mode: str = "precise"  # precise | double | string
    binary_handling_mode: str = "bytes"  # bytes | base64 | base64-url-safe | hex


@dataclass(frozen=True)
class SqlServerTypeRule:
    schema: Callable[[SqlServerColumn], Schema]  # core schema: no "optional", no "field"
    convert: Callable[[SqlServerColumn], Converter]  # converter for a non-NULL value


@dataclass(frozen=True)
class SqlServerTypeRow:
    mode: str | None  # SqlServerMappingSettings attribute choosing among rules; None -> the single rule under "*"
    rules: Mapping[str, SqlServerTypeRule]


def _rule(type_: str, convert: Converter, name: str | None = None) -> SqlServerTypeRule:
    return SqlServerTypeRule(lambda _column: core_schema(type_, name), lambda _column: convert)


def _one(type_: str, convert: Converter, name: str | None = None) -> SqlServerTypeRow:
    return SqlServerTypeRow(None, {"*": _rule(type_, convert, name)})


def _reject(value: Any, what: str) -> ValueError:
    return ValueError(f"cannot convert {type(value).__name__} value {value!r} to {what}")


# ---- scalars --------------------------------------------------------------------------------------------------------


def _boolean(value: Any) -> bool:
    if isinstance(value, str):
        return pv.parse_bool(value)
    if isinstance(value, (bool, int)):
        return bool(value)
    raise _reject(value, "boolean")


def _integer(value: Any) -> int:
    if isinstance(value, (int, str)):
        return int(value)
    raise _reject(value, "integer")


def _single(value: float) -> float:
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def shortest_float32(value: Any) -> float:
    """The shortest decimal that reads back as the same float32, as a Python float."""
    single = _single(float(value))
    if not math.isfinite(single):
        return single
    for digits in range(1, 10):
        candidate = float(f"{single:.{digits}g}")
        if _single(candidate) == single:
            return candidate
    return single


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _reject(value, "string")
    return value


def _guid(value: Any) -> str:
    if isinstance(value, uuid.UUID):
        return str(value).upper()
    return _text(value).upper()  # SQL Server (and mssql-jdbc) print uniqueidentifier in upper case


# ---- decimal / money ------------------------------------------------------------------------------------------------


def _to_decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int) and not isinstance(value, bool):
        result = Decimal(value)
    elif isinstance(value, str):
        result = Decimal(value.strip())
    elif isinstance(value, float):
        result = Decimal(repr(value))
    else:
        raise _reject(value, "decimal")
    if not result.is_finite():
        raise ValueError(f"decimal value {value!r} is not finite")
    return result


def _decimal_row(fixed: tuple[int, int] | None) -> SqlServerTypeRow:
    """decimal/numeric (precision and scale from the column) or money/smallmoney (fixed precision and scale)."""

    def precision_scale(column: SqlServerColumn) -> tuple[int, int]:
        return fixed or (column.precision or DEFAULT_DECIMAL_PRECISION, column.scale)

    def precise_schema(column: SqlServerColumn) -> Schema:
        precision, scale = precision_scale(column)
        params = {"scale": str(scale), "connect.decimal.precision": str(precision)}
        return core_schema("bytes", "org.apache.kafka.connect.data.Decimal", params)

    def precise(column: SqlServerColumn) -> Converter:
        scale = precision_scale(column)[1]
        return lambda value: pv.b64(pv.twos_complement(pv.unscaled(_to_decimal(value), scale)))

    def plain(column: SqlServerColumn) -> Converter:  # BigDecimal.toPlainString() at the column's scale
        scale = precision_scale(column)[1]
        return lambda value: pv.plain_decimal(pv.unscaled(_to_decimal(value), scale), scale, strip=False)

    return SqlServerTypeRow("decimal_handling_mode", {
        "precise": SqlServerTypeRule(precise_schema, precise),
        "double": _rule("double", lambda value: float(_to_decimal(value))),
        "string": SqlServerTypeRule(lambda _column: core_schema("string"), plain),
    })


# ---- binary ---------------------------------------------------------------------------------------------------------


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str) and value[:2].lower() == "0x":  # CONVERT(varchar, ..., 1) style
        return bytes.fromhex(value[2:])
    raise _reject(value, "bytes")


def _binary_rule(mode: str) -> SqlServerTypeRule:
    encode = pv.BINARY_ENCODERS[mode]
    return _rule("bytes" if mode == "bytes" else "string", lambda value: encode(_to_bytes(value)))


_BINARY_ROW = SqlServerTypeRow("binary_handling_mode", {mode: _binary_rule(mode) for mode in pv.BINARY_ENCODERS})


# ---- spatial ----------------------------------------------------------------------------------------------------


def _spatial_schema(name: str, doc: str) -> Schema:
    fields = [finish_schema(core_schema("bytes"), False, "wkb"), finish_schema(core_schema("int32"), True, "srid")]
    return {**core_schema("struct", name, fields=fields), "doc": doc}


def _spatial(value: Any) -> dict[str, Any]:
    """The query's ``CAST(c.STSrid AS binary(4)) + c.STAsBinary()``: SRID (big-endian int32), then the WKB."""
    data = _to_bytes(value)
    if len(data) < 5:
        raise ValueError(f"spatial value {data!r} holds no SRID and well-known binary")
    return {"wkb": pv.b64(data[4:]), "srid": int.from_bytes(data[:4], "big", signed=True)}


def _spatial_row(name: str, doc: str) -> SqlServerTypeRow:
    schema = _spatial_schema(name, doc)
    return SqlServerTypeRow(None, {"*": SqlServerTypeRule(lambda _column: dict(schema), lambda _column: _spatial)})

# ---- temporal parsing (integer nanoseconds) -------------------------------------------------------------------------

_DATE_TEXT = r"(\d{4})-(\d{2})-(\d{2})"
_TIME_TEXT = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
_DATE_RE = re.compile(_DATE_TEXT)
_TIME_RE = re.compile(_TIME_TEXT)
_DATETIME_RE = re.compile(_DATE_TEXT + "[ T]" + _TIME_TEXT)
_DATETIMEOFFSET_RE = re.compile(_DATE_TEXT + "[ T]" + _TIME_TEXT + r"\s*(?:Z|([+-])(\d{2}):(\d{2}))")


def _match(pattern: re.Pattern[str], text: str, what: str) -> re.Match[str]:
    match = pattern.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"cannot parse {what} value {text!r}")
    return match


def _days(year: int, month: int, day: int) -> int:
    days = pv.days_from_civil(year, month, day)
    if not 1 <= month <= 12 or not 1 <= day <= 31 or pv.civil_from_days(days) != (year, month, day):
        raise ValueError(f"invalid date {year:04d}-{month:02d}-{day:02d}")
    return days


def _clock_nanos(hour: int, minute: int, second: int, nanos: int) -> int:
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"invalid time {hour:02d}:{minute:02d}:{second:02d}")
    return ((hour * 60 + minute) * 60 + second) * NANOS_PER_SECOND + nanos


def _fraction_nanos(fraction: str | None) -> int:
    return int((fraction or "").ljust(9, "0"))


def _date_days(value: Any) -> int:
    """date / 'YYYY-MM-DD' -> days since 1970-01-01."""
    if isinstance(value, date):  # a datetime counts by its date part
        return _days(value.year, value.month, value.day)
    if isinstance(value, str):
        year, month, day = _match(_DATE_RE, value, "date").groups()
        return _days(int(year), int(month), int(day))
    raise _reject(value, "date")


def _time_nanos(value: Any) -> int:
    """time / 'hh:mm:ss[.fffffff]' -> nanoseconds past midnight."""
    if isinstance(value, time):
        return _clock_nanos(value.hour, value.minute, value.second, value.microsecond * 1000)
    if isinstance(value, str):
        hour, minute, second, fraction = _match(_TIME_RE, value, "time").groups()
        return _clock_nanos(int(hour), int(minute), int(second), _fraction_nanos(fraction))
    raise _reject(value, "time")


def _local_nanos(value: Any) -> int:
    """Naive datetime / 'YYYY-MM-DD hh:mm:ss[.fffffff]' read as UTC -> nanoseconds since the epoch."""
    if isinstance(value, datetime):  # wall-clock fields only, as if UTC
        clock = _clock_nanos(value.hour, value.minute, value.second, value.microsecond * 1000)
        return _days(value.year, value.month, value.day) * NANOS_PER_DAY + clock
    if isinstance(value, str):
        g = _match(_DATETIME_RE, value, "datetime").groups()
        clock = _clock_nanos(int(g[3]), int(g[4]), int(g[5]), _fraction_nanos(g[6]))
        return _days(int(g[0]), int(g[1]), int(g[2])) * NANOS_PER_DAY + clock
    raise _reject(value, "datetime")


def _java_long(value: int) -> int:
    """Two's-complement wrap to 64 bits, as Java long arithmetic overflows."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def _offset_id(seconds: int) -> str:
    """java.time.ZoneOffset.getId(): 'Z', '+14:00', '-12:00', '+05:30:15'."""
    if seconds == 0:
        return "Z"
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def _iso_local(year: int, month: int, day: int, clock_nanos: int) -> str:
    """ISO_LOCAL_DATE_TIME: seconds always printed, fraction trimmed of trailing zeros (none when zero)."""
    seconds, nanos = divmod(clock_nanos, NANOS_PER_SECOND)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    fraction = "" if nanos == 0 else "." + f"{nanos:09d}".rstrip("0")
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{fraction}"


def _zoned_timestamp(value: Any) -> str:
    """Aware datetime / 'YYYY-MM-DD hh:mm:ss[.fffffff] +hh:mm' -> ZonedTimestamp text at the value's own offset."""
    if isinstance(value, datetime):
        offset = value.utcoffset()
        if offset is None:
            raise ValueError(f"datetimeoffset value {value!r} has no time zone offset")
        _days(value.year, value.month, value.day)
        clock = _clock_nanos(value.hour, value.minute, value.second, value.microsecond * 1000)
        return _iso_local(value.year, value.month, value.day, clock) + _offset_id(offset // timedelta(seconds=1))
    if isinstance(value, str):
        g = _match(_DATETIMEOFFSET_RE, value, "datetimeoffset").groups()
        year, month, day = int(g[0]), int(g[1]), int(g[2])
        _days(year, month, day)
        clock = _clock_nanos(int(g[3]), int(g[4]), int(g[5]), _fraction_nanos(g[6]))
        seconds = 0 if g[7] is None else (int(g[8]) * 3600 + int(g[9]) * 60) * (-1 if g[7] == "-" else 1)
        return _iso_local(year, month, day, clock) + _offset_id(seconds)
    raise _reject(value, "datetimeoffset")


# ---- temporal rules -------------------------------------------------------------------------------------------------

_TIME_MILLIS = _rule("int32", lambda value: _time_nanos(value) // 1_000_000, "io.debezium.time.Time")
_MICRO_TIME = _rule("int64", lambda value: _time_nanos(value) // 1000, "io.debezium.time.MicroTime")
_NANO_TIME = _rule("int64", _time_nanos, "io.debezium.time.NanoTime")
_TIMESTAMP_MILLIS = _rule("int64", lambda value: _local_nanos(value) // 1_000_000, "io.debezium.time.Timestamp")
_MICRO_TIMESTAMP = _rule("int64", lambda value: _local_nanos(value) // 1000, "io.debezium.time.MicroTimestamp")
_NANO_TIMESTAMP = _rule("int64", lambda value: _java_long(_local_nanos(value)), "io.debezium.time.NanoTimestamp")
_CONNECT_TIMESTAMP = _rule("int64", lambda value: _local_nanos(value) // 1_000_000,
                           "org.apache.kafka.connect.data.Timestamp")


def _by_scale(millis: SqlServerTypeRule, micros: SqlServerTypeRule, nanos: SqlServerTypeRule) -> SqlServerTypeRule:
    """adaptive: the column's fractional-second digits choose the unit (0-3 ms, 4-6 us, 7 ns)."""

    def pick(column: SqlServerColumn) -> SqlServerTypeRule:
        return millis if column.scale <= 3 else micros if column.scale <= 6 else nanos

    return SqlServerTypeRule(lambda c: pick(c).schema(c), lambda c: pick(c).convert(c))


def _temporal(adaptive: SqlServerTypeRule, connect: SqlServerTypeRule,
              micro_time: SqlServerTypeRule | None = None) -> SqlServerTypeRow:
    """adaptive_time_microseconds is adaptive except for time (``micro_time``): Debezium's JdbcValueConverters."""
    return SqlServerTypeRow("time_precision_mode", {"adaptive": adaptive,
                                                    "adaptive_time_microseconds": micro_time or adaptive,
                                                    "connect": connect})


_TIMESTAMP_ROW = _temporal(_TIMESTAMP_MILLIS, _CONNECT_TIMESTAMP)  # datetime (scale 3), smalldatetime (scale 0)
_STRING_ROW = _one("string", _text)

TYPE_REGISTRY: dict[str, SqlServerTypeRow] = {
    "bit": _one("boolean", _boolean),
    "tinyint": _one("int16", _integer),  # unsigned 0..255, so INT16
    "smallint": _one("int16", _integer),
    "int": _one("int32", _integer),
    "bigint": _one("int64", _integer),
    "real": _one("float", shortest_float32),  # JsonConverter's FLOAT32
    "float": _one("double", float),  # JsonConverter's FLOAT64
    "decimal": _decimal_row(None),
    "numeric": _decimal_row(None),
    "money": _decimal_row(MONEY_PRECISION_SCALE),
    "smallmoney": _decimal_row(SMALLMONEY_PRECISION_SCALE),
    **{name: _STRING_ROW for name in ("char", "varchar", "text", "nchar", "nvarchar", "ntext", "sysname")},
    "xml": _one("string", _text, "io.debezium.data.Xml"),
    "uniqueidentifier": _one("string", _guid),
    "date": _temporal(_rule("int32", _date_days, "io.debezium.time.Date"),
                      _rule("int32", _date_days, "org.apache.kafka.connect.data.Date")),
    "time": _temporal(_by_scale(_TIME_MILLIS, _MICRO_TIME, _NANO_TIME),
                      _rule("int32", lambda value: _time_nanos(value) // 1_000_000,
                            "org.apache.kafka.connect.data.Time"),
                      _MICRO_TIME),
    "datetime": _TIMESTAMP_ROW,
    "smalldatetime": _TIMESTAMP_ROW,
    "datetime2": _temporal(_by_scale(_TIMESTAMP_MILLIS, _MICRO_TIMESTAMP, _NANO_TIMESTAMP), _CONNECT_TIMESTAMP),
    "datetimeoffset": _one("string", _zoned_timestamp, "io.debezium.time.ZonedTimestamp"),
    **{name: _BINARY_ROW for name in ("binary", "varbinary", "image", "timestamp", "rowversion")},
    "geometry": _spatial_row("io.debezium.data.geometry.Geometry", "Geometry"),
    "geography": _spatial_row("io.debezium.data.geometry.Geography", "Geography"),
    "hierarchyid": _STRING_ROW,  # its text, hierarchyid::ToString()
    "sql_variant": _STRING_ROW,  # CAST(... AS nvarchar(4000))
}

# ---- resolution -----------------------------------------------------------------------------------------------------


def _unsupported(column: SqlServerColumn) -> UnsupportedSqlServerTypeError:
    return UnsupportedSqlServerTypeError(
        f"column '{column.name}': SQL Server type '{column.type_name}' is not supported yet; "
        "exclude the column with column.exclude.list"
    )


def _rule_for(column: SqlServerColumn, settings: SqlServerMappingSettings) -> SqlServerTypeRule:
    row = TYPE_REGISTRY.get(column.type_name.strip().lower())
    if row is None:
        raise _unsupported(column)
    return select_rule(row.mode, row.rules, settings)


def map_sqlserver_column(column: SqlServerColumn, settings: SqlServerMappingSettings) -> MappedField:
    """Kafka Connect field schema and value converter for one column (UnsupportedSqlServerTypeError if unmapped)."""
    rule = _rule_for(column, settings)
    return MappedField(schema=finish_schema(rule.schema(column), column.optional, column.name),
                       convert_value=rule.convert(column))
