"""Column types, value coercion and storage, and LSN arithmetic of the SQL Server model."""

from __future__ import annotations

import datetime as dt
import re
import struct
import uuid
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from ._errors import DataError, IntegrityError, server_error

LSN_BYTES = 10
ZERO_LSN = bytes(LSN_BYTES)


def lsn_to_int(lsn: bytes) -> int:
    return int.from_bytes(lsn, "big")


def int_to_lsn(value: int) -> bytes:
    return value.to_bytes(LSN_BYTES, "big")


def increment_lsn(lsn: bytes) -> bytes:
    """``sys.fn_cdc_increment_lsn``: +1 in the last byte with carry."""
    value = lsn_to_int(lsn) + 1
    if value >= 1 << (8 * LSN_BYTES):
        raise server_error(DataError, "22003", 8115, "Arithmetic overflow error converting expression to "
                           "data type binary.")
    return int_to_lsn(value)


def lsn_text(lsn: bytes) -> str:
    hexed = lsn.hex()
    return f"{hexed[:8]}:{hexed[8:16]}:{hexed[16:]}"


@dataclass(frozen=True)
class ModelColumn:
    """A source-table column as ``sys.columns`` describes it (``max_length`` in bytes, -1 = MAX).

    Defaults follow T-SQL: fixed-size types take their ``sys.types`` size/precision/scale; ``decimal`` without a
    precision is ``decimal(18, 0)``; ``time``/``datetime2``/``datetimeoffset`` with precision and scale both 0 are
    scale 7 (give the precision, e.g. ``precision=19`` for ``datetime2(0)``, to get scale 0).
    """

    name: str
    type_name: str
    max_length: int = -1
    precision: int = 0
    scale: int = 0
    nullable: bool = True
    identity: bool = False


# name -> (user_type_id, max_length, precision, scale, python type as pyodbc reports it in description)
TYPES: dict[str, tuple[int, int, int, int, type]] = {
    "bit": (104, 1, 1, 0, bool), "tinyint": (48, 1, 3, 0, int), "smallint": (52, 2, 5, 0, int),
    "int": (56, 4, 10, 0, int), "bigint": (127, 8, 19, 0, int),
    "decimal": (106, 17, 38, 38, Decimal), "numeric": (108, 17, 38, 38, Decimal),
    "money": (60, 8, 19, 4, Decimal), "smallmoney": (122, 4, 10, 4, Decimal),
    "float": (62, 8, 53, 0, float), "real": (59, 4, 24, 0, float),
    "date": (40, 3, 10, 0, dt.date), "time": (41, 5, 16, 7, dt.time), "datetime": (61, 8, 23, 3, dt.datetime),
    "datetime2": (42, 8, 27, 7, dt.datetime), "smalldatetime": (58, 4, 16, 0, dt.datetime),
    "datetimeoffset": (43, 10, 34, 7, str),
    "char": (175, 8000, 0, 0, str), "varchar": (167, 8000, 0, 0, str), "text": (35, 16, 0, 0, str),
    "nchar": (239, 8000, 0, 0, str), "nvarchar": (231, 8000, 0, 0, str), "ntext": (99, 16, 0, 0, str),
    "sysname": (256, 256, 0, 0, str), "xml": (241, -1, 0, 0, str),
    "binary": (173, 8000, 0, 0, bytearray), "varbinary": (165, 8000, 0, 0, bytearray),
    "image": (34, 16, 0, 0, bytearray), "uniqueidentifier": (36, 16, 0, 0, str),
    # rowversion is a synonym sys.types does not list: its columns are "timestamp"
    "timestamp": (189, 8, 0, 0, bytearray),
    # CLR types (ODBC SQL_SS_UDT, -151) and sql_variant (SQL_SS_VARIANT, -150), which pyodbc cannot fetch
    "hierarchyid": (128, 892, 0, 0, bytearray), "geometry": (129, -1, 0, 0, bytearray),
    "geography": (130, -1, 0, 0, bytearray), "sql_variant": (98, 8016, 0, 0, bytearray),
}
_INTEGER_RANGES = {"tinyint": (0, 255), "smallint": (-(2**15), 2**15 - 1), "int": (-(2**31), 2**31 - 1),
                   "bigint": (-(2**63), 2**63 - 1)}
_FIXED = {"bit", "tinyint", "smallint", "int", "bigint", "money", "smallmoney", "real", "date", "datetime",
          "smalldatetime", "uniqueidentifier", "text", "ntext", "image", "xml", "sysname", "timestamp", "hierarchyid",
          "geometry", "geography", "sql_variant"}
_SCALED_TIME = {"time": (8, (3, 4, 5)), "datetime2": (19, (6, 7, 8)), "datetimeoffset": (26, (8, 9, 10))}
STRING_TYPES = {"char", "varchar", "text", "nchar", "nvarchar", "ntext", "sysname", "xml"}
BINARY_TYPES = {"binary", "varbinary", "image"}
DATETIMEOFFSET_SQL_TYPE = -155  # SQL_SS_TIMESTAMPOFFSET, which pyodbc cannot read without an output converter
TIMESTAMP_SQL_TYPE = 93  # SQL_TYPE_TIMESTAMP: datetime, smalldatetime, datetime2
TIME2_SQL_TYPE = -154  # SQL_SS_TIME2: time
# the ODBC SQL type of each column type pyodbc reads in its own way or not at all
SQL_TYPES = {"datetime": TIMESTAMP_SQL_TYPE, "smalldatetime": TIMESTAMP_SQL_TYPE, "datetime2": TIMESTAMP_SQL_TYPE,
             "time": TIME2_SQL_TYPE, "datetimeoffset": DATETIMEOFFSET_SQL_TYPE, "geometry": -151, "geography": -151,
             "hierarchyid": -151, "sql_variant": -150}
SPATIAL_TYPES = {"geometry", "geography"}
_HIERARCHYID = re.compile(r"/(?:\d+(?:\.\d+)*/)*")
_FRACTION = re.compile(r"(.*?[T ]?\d{2}:\d{2}:\d{2})(?:\.(\d+))?(.*)")


class PreciseDatetime(dt.datetime):
    """A ``datetime2``/``datetimeoffset`` value whose fraction has a seventh digit: ``hundreds`` (0-9) counts the
    100 ns beyond ``microsecond``. Arithmetic and ``replace`` give plain values (the digit dropped)."""

    hundreds = 0


class PreciseTime(dt.time):
    """A ``time`` value with a seventh fraction digit (``hundreds``, as ``PreciseDatetime``)."""

    hundreds = 0


def hundreds_of(value: Any) -> int:
    """The 100 ns units beyond the microsecond of a stored time, datetime2 or datetimeoffset value."""
    return int(getattr(value, "hundreds", 0))


def _precise(value: Any, ticks: int) -> Any:
    """``value`` (its fraction ignored) with ``ticks`` 100-ns units of fraction (0 <= ticks < 10**7)."""
    micro, extra = divmod(ticks, 10)
    plain = value.replace(microsecond=micro)
    if not extra:
        return plain
    precise: PreciseTime | PreciseDatetime
    if isinstance(plain, dt.time):
        precise = PreciseTime(plain.hour, plain.minute, plain.second, micro, plain.tzinfo)
    else:
        precise = PreciseDatetime(plain.year, plain.month, plain.day, plain.hour, plain.minute, plain.second, micro,
                                  plain.tzinfo)
    precise.hundreds = extra
    return precise


def _parse_ticks(text: str, parse: Any) -> tuple[Any, int]:
    """An ISO/T-SQL literal with up to any number of fraction digits: (value without fraction, 100-ns ticks rounded
    half up to 7 digits, which may reach 10**7)."""
    match = _FRACTION.fullmatch(text.strip())
    if match is None:
        return parse(text), 0
    head, digits, tail = match.groups()
    digits = digits or ""
    ticks = int(digits[:7].ljust(7, "0")) + (1 if len(digits) > 7 and digits[7] >= "5" else 0)
    return parse(head + tail), ticks


def _scaled(value: Any, ticks: int, scale: int) -> Any:
    """A value rounded to ``scale`` fraction digits, as SQL Server rounds (half up; 23:59:59.99999995 -> next day)."""
    unit = 10 ** (7 - scale)
    ticks = (ticks + unit // 2) // unit * unit
    if ticks >= 10**7:
        if isinstance(value, dt.time):
            carried = (dt.datetime.combine(dt.date(2000, 1, 1), value.replace(microsecond=0))
                       + dt.timedelta(seconds=1)).time().replace(tzinfo=value.tzinfo)
        else:
            carried = value.replace(microsecond=0) + dt.timedelta(seconds=1)
        return _precise(carried, ticks - 10**7)
    return _precise(value, ticks)


def normalise_column(column: ModelColumn) -> ModelColumn:
    """Fill in ``sys.columns`` max_length / precision / scale as SQL Server reports them for the declared type."""
    name = column.type_name.lower()
    if name not in TYPES:
        raise NotImplementedError(f"the SQL Server model does not model type {column.type_name!r}")
    _, length, precision, scale, _ = TYPES[name]
    if name in _FIXED:
        return _replace(column, name, length, precision, scale)
    if name == "float":
        single = 0 < column.precision <= 24
        return _replace(column, name, 4 if single else 8, 24 if single else 53, 0)
    if name in ("decimal", "numeric"):
        precision = column.precision or 18
        length = 5 if precision <= 9 else 9 if precision <= 19 else 13 if precision <= 28 else 17
        return _replace(column, name, length, precision, column.scale)
    if name in _SCALED_TIME:
        scale = 7 if column.precision == 0 and column.scale == 0 else column.scale
        base, lengths = _SCALED_TIME[name]
        length = lengths[0] if scale <= 2 else lengths[1] if scale <= 4 else lengths[2]
        return _replace(column, name, length, base + (scale + 1 if scale else 0), scale)
    # char / varchar / nchar / nvarchar / binary / varbinary: the declared length in bytes (char(n) needs n)
    if column.max_length == -1 and name in ("char", "nchar", "binary"):
        return _replace(column, name, 2 if name == "nchar" else 1, 0, 0)
    return _replace(column, name, column.max_length, 0, 0)


def _replace(column: ModelColumn, name: str, length: int, precision: int, scale: int) -> ModelColumn:
    return ModelColumn(column.name, name, length, precision, scale, column.nullable, column.identity)


def type_declaration(column: ModelColumn) -> str:
    name = column.type_name
    if name in ("decimal", "numeric"):
        return f"{name}({column.precision}, {column.scale})"
    if name in _SCALED_TIME:
        return f"{name}({column.scale})"
    if name in ("char", "varchar", "binary", "varbinary", "nchar", "nvarchar"):
        if column.max_length == -1:
            return f"{name}(max)"
        return f"{name}({column.max_length // 2 if name.startswith('n') else column.max_length})"
    return name


# ---- values ---------------------------------------------------------------------------------------------------------
def _overflow(type_name: str) -> Exception:
    return server_error(DataError, "22003", 8115,
                        f"Arithmetic overflow error converting expression to data type {type_name}.")


def _conversion(value: Any, type_name: str) -> Exception:
    return server_error(DataError, "22018", 245,
                        f"Conversion failed when converting the value '{value}' to data type {type_name}.")


def _datetime_rounded(value: dt.datetime, column: ModelColumn) -> dt.datetime:
    if column.type_name == "datetime":
        # SQL Server keeps ticks of 1/300 s; Microsoft's ODBC driver returns them rounded to milliseconds (.007, not
        # .006666: FreeTDS/freetds issue 228, comparing it with ODBC Driver 17), which the model stores
        ticks = round(value.microsecond * 300 / 1_000_000)
        return value.replace(microsecond=0) + dt.timedelta(milliseconds=(ticks * 10 + 1) // 3)
    if column.type_name == "smalldatetime":
        return value.replace(second=0, microsecond=0) + dt.timedelta(minutes=1 if value.second >= 30 else 0)
    rounded: dt.datetime = _fraction_rounded(value, column.scale)
    return rounded


def _fraction_rounded(value: Any, scale: int) -> Any:
    if scale >= 6:
        return value
    unit = 10 ** (6 - scale)
    micro = round(value.microsecond / unit) * unit
    if micro == 1_000_000:
        if isinstance(value, dt.time):
            full = dt.datetime.combine(dt.date(2000, 1, 1), value.replace(microsecond=0)) + dt.timedelta(seconds=1)
            return full.time().replace(tzinfo=value.tzinfo)
        return value.replace(microsecond=0) + dt.timedelta(seconds=1)
    return value.replace(microsecond=micro)


def coerce(column: ModelColumn, value: Any, where: str = "") -> Any:
    """A Python value converted to the column's type as SQL Server would store it (None for NULL)."""
    if value is None:
        if not column.nullable and where:
            raise server_error(IntegrityError, "23000", 515, f"Cannot insert the value NULL into column "
                               f"'{column.name}', table '{where}'; column does not allow nulls. INSERT fails.")
        return None
    name = column.type_name
    try:
        if name in _INTEGER_RANGES:
            if isinstance(value, (float, Decimal)) and value != int(value):
                value = int(value)
            number = int(value)
            low, high = _INTEGER_RANGES[name]
            if not low <= number <= high:
                raise _overflow(name)
            return number
        if name == "bit":
            if isinstance(value, str):
                return value.strip().lower() not in ("0", "false")
            return bool(value)
        if name in ("decimal", "numeric", "money", "smallmoney"):
            exact = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
            quantized = exact.quantize(Decimal(1).scaleb(-column.scale), rounding=ROUND_HALF_UP)
            if len(quantized.as_tuple().digits) > column.precision and quantized != 0:
                raise _overflow(name)
            return quantized
        if name in ("float", "real"):
            real = float(value)
            return struct.unpack("<f", struct.pack("<f", real))[0] if column.precision == 24 else real
        if name in STRING_TYPES:
            text = value if isinstance(value, str) else str(value)
            limit = column.max_length // 2 if name in ("nchar", "nvarchar") else column.max_length
            if name in ("char", "varchar", "nchar", "nvarchar") and column.max_length != -1:
                if len(text) > limit:
                    raise server_error(DataError, "22001", 2628, f"String or binary data would be truncated "
                                       f"in table '{where}', column '{column.name}'. Truncated value: "
                                       f"'{text[:limit]}'.")
                if name in ("char", "nchar"):
                    text = text.ljust(limit)
            return text
        if name in BINARY_TYPES:
            data = bytes(value)
            if name in ("binary", "varbinary") and column.max_length != -1:
                if len(data) > column.max_length:
                    raise server_error(DataError, "22001", 2628, f"String or binary data would be truncated "
                                       f"in table '{where}', column '{column.name}'.")
                if name == "binary":
                    data = data.ljust(column.max_length, b"\0")
            return data
        if name == "uniqueidentifier":
            return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).upper()
        if name == "date":
            if isinstance(value, dt.datetime):
                return value.date()
            return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
        if name == "time":
            if isinstance(value, dt.time):
                clock, ticks = value, value.microsecond * 10 + hundreds_of(value)
            else:
                clock, ticks = _parse_ticks(str(value), dt.time.fromisoformat)
            return _scaled(clock.replace(tzinfo=None), ticks, column.scale)
        if name == "datetimeoffset":
            if isinstance(value, dt.datetime):
                aware, ticks = value, value.microsecond * 10 + hundreds_of(value)
            else:
                aware, ticks = _parse_ticks(str(value), dt.datetime.fromisoformat)
            if aware.tzinfo is None:
                aware = aware.replace(tzinfo=dt.timezone.utc)
            return _scaled(aware, ticks, column.scale)
        if name == "datetime2":
            if isinstance(value, dt.datetime):
                moment, ticks = value.replace(tzinfo=None), value.microsecond * 10 + hundreds_of(value)
            elif isinstance(value, dt.date):
                moment, ticks = dt.datetime.combine(value, dt.time()), 0
            else:
                moment, ticks = _parse_ticks(str(value), dt.datetime.fromisoformat)
            return _scaled(moment.replace(tzinfo=None), ticks, column.scale)
        if name == "timestamp":  # assigned by the server (``next_rowversion``), never by a statement
            return bytes(value)
        if name in SPATIAL_TYPES:
            return spatial_value(value, name)
        if name == "hierarchyid":
            text = str(value)
            if _HIERARCHYID.fullmatch(text) is None:
                raise ValueError(text)
            return text
        if name == "sql_variant":
            if isinstance(value, bool) or not isinstance(value, (int, str, Decimal)):
                raise NotImplementedError(f"the SQL Server model stores sql_variant values of int, nvarchar and "
                                          f"decimal only, not {type(value).__name__}")
            return str(value)  # stored as CAST(value AS nvarchar(4000)) reads it
        if isinstance(value, dt.datetime):
            moment = value.replace(tzinfo=None)
        elif isinstance(value, dt.date):
            moment = dt.datetime.combine(value, dt.time())
        else:
            moment = dt.datetime.fromisoformat(str(value))
        return _datetime_rounded(moment, column)
    except (ValueError, TypeError, InvalidOperation) as error:
        raise _conversion(value, name) from error


def encode(column: ModelColumn, value: Any) -> Any:
    """A coerced value as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (dt.date, dt.time)):
        if hundreds_of(value):  # the seventh fraction digit after the microseconds
            head, _, tail = _FRACTION.fullmatch(value.isoformat(timespec="microseconds")).groups()  # type: ignore
            return f"{head}.{getattr(value, 'microsecond', 0):06d}{hundreds_of(value)}{tail}"
        return value.isoformat()
    raise TypeError(f"cannot store {value!r} for column {column.name}")


def decode(column: ModelColumn, stored: Any) -> Any:
    """A JSON value back as the Python value pyodbc returns for the column's type."""
    if stored is None:
        return None
    name = column.type_name
    if name in ("decimal", "numeric", "money", "smallmoney"):
        return Decimal(stored)
    if name in BINARY_TYPES or name in SPATIAL_TYPES or name == "timestamp":
        return bytes.fromhex(stored)
    if name == "date":
        return dt.date.fromisoformat(stored)
    if name == "time":
        clock, ticks = _parse_ticks(stored, dt.time.fromisoformat)
        return _precise(clock, ticks)
    if name in ("datetime2", "datetimeoffset"):
        moment, ticks = _parse_ticks(stored, dt.datetime.fromisoformat)
        return _precise(moment, ticks)
    if name in ("datetime", "smalldatetime"):
        return dt.datetime.fromisoformat(stored)
    return stored


def sort_key(value: Any) -> tuple[Any, ...]:
    """SQL Server ordering: NULL first; strings by the default case-insensitive collation (approximated)."""
    if value is None:
        return (0,)
    if isinstance(value, str):
        return (1, value.rstrip(" ").casefold(), value)
    return (1, compare_key(value))


def compare_key(value: Any) -> Any:
    """The value as compared by ``=``, ``<``, ``>=``: strings case-insensitively, trailing blanks ignored; times to
    100 ns."""
    if isinstance(value, (dt.datetime, dt.time)):
        return (value.replace(microsecond=value.microsecond), hundreds_of(value))
    return value.rstrip(" ").casefold() if isinstance(value, str) else value


# SQL Server orders uniqueidentifier values by byte groups, not by their text: SqlGuid.CompareTo "uses SQL Server
# behavior" where "the last six bytes of a value are most significant" (Microsoft, "Comparing GUID and uniqueidentifier
# values"), then the bytes 8-9, 6-7, 4-5 and 0-3 of the value as stored (the first three groups of the text little-
# endian, uuid's bytes_le), the order of SqlGuid's x_rgiGuidOrder.
_GUID_ORDER = (10, 11, 12, 13, 14, 15, 8, 9, 6, 7, 4, 5, 0, 1, 2, 3)


def guid_order(value: Any) -> bytes:
    """A uniqueidentifier's bytes in the order SQL Server compares them."""
    stored = (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes_le
    return bytes(stored[i] for i in _GUID_ORDER)


def typed_compare_key(type_name: str, value: Any) -> Any:
    """``compare_key`` of a value of a column of ``type_name``: a uniqueidentifier by ``guid_order``."""
    if value is not None and type_name == "uniqueidentifier":
        return guid_order(value)
    return compare_key(value)


def typed_sort_key(type_name: str, value: Any) -> tuple[Any, ...]:
    """``sort_key`` of a value of a column of ``type_name``: a uniqueidentifier by ``guid_order``."""
    if value is not None and type_name == "uniqueidentifier":
        return (1, guid_order(value))
    return sort_key(value)


def datetimeoffset_struct(value: dt.datetime) -> bytes:
    """SQL_SS_TIMESTAMPOFFSET_STRUCT, the bytes a pyodbc output converter for -155 receives."""
    offset = value.utcoffset() or dt.timedelta()
    minutes = int(offset.total_seconds()) // 60
    hours, rest = divmod(abs(minutes), 60)
    sign = -1 if minutes < 0 else 1
    return struct.pack("<6hI2h", value.year, value.month, value.day, value.hour, value.minute, value.second,
                       value.microsecond * 1000 + hundreds_of(value) * 100, sign * hours, sign * rest)


def timestamp_struct(value: dt.datetime) -> bytes:
    """SQL_TIMESTAMP_STRUCT, the bytes a pyodbc output converter for 93 receives (``<6hI``: year, month, day, hour,
    minute, second, fraction in nanoseconds)."""
    return struct.pack("<6hI", value.year, value.month, value.day, value.hour, value.minute, value.second,
                       value.microsecond * 1000 + hundreds_of(value) * 100)


def time_struct(value: dt.time) -> bytes:
    """SQL_SS_TIME2_STRUCT, the bytes a pyodbc output converter for -154 receives (``<3H2xI``: hour, minute, second,
    two bytes of padding, fraction in nanoseconds)."""
    return struct.pack("<3H2xI", value.hour, value.minute, value.second,
                       value.microsecond * 1000 + hundreds_of(value) * 100)


def plain_time_value(value: Any) -> Any:
    """What pyodbc returns without an output converter: microseconds, the 100 ns digit cut (``fraction / 1000``)."""
    if isinstance(value, PreciseDatetime):
        return dt.datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                           value.microsecond, value.tzinfo)
    if isinstance(value, PreciseTime):
        return dt.time(value.hour, value.minute, value.second, value.microsecond)
    return value


# ---- spatial values (geometry, geography) ----------------------------------------------------------------------------
_WKB_TYPES = {"POINT": 1, "LINESTRING": 2, "POLYGON": 3, "MULTIPOINT": 4, "MULTILINESTRING": 5, "MULTIPOLYGON": 6}
_DEFAULT_SRID = {"geometry": 0, "geography": 4326}  # geography's default SRID, WGS 84


def _wkb(text: str) -> bytes:
    """Well-known text of a POINT, LINESTRING, POLYGON or MULTI* of them -> its well-known binary as SQL Server's
    STAsBinary writes it (little-endian, 2D: Z and M are not returned)."""
    match = re.fullmatch(r"\s*([A-Za-z]+)\s*(\(.*\)|EMPTY)\s*", text, re.DOTALL)
    if match is None or match[1].upper() not in _WKB_TYPES:
        raise ValueError(text)
    kind, body = _WKB_TYPES[match[1].upper()], match[2]

    def point(coordinates: str) -> bytes:
        x, y, *_ = (float(part) for part in coordinates.split())
        return struct.pack("<dd", x, y)

    def ring(inner: str) -> bytes:
        points = [p for p in inner.strip().strip("()").split(",") if p.strip()]
        return struct.pack("<I", len(points)) + b"".join(point(p) for p in points)

    def groups(inner: str) -> list[str]:
        found, depth, start = [], 0, 0
        for index, char in enumerate(inner):
            depth += (char == "(") - (char == ")")
            if char == "," and depth == 0:
                found.append(inner[start:index])
                start = index + 1
        found.append(inner[start:])
        return [part.strip() for part in found if part.strip()]

    inner = body.strip()[1:-1] if body.upper() != "EMPTY" else ""
    header = struct.pack("<BI", 1, kind)
    if kind == 1:
        return header + (point(inner) if inner else struct.pack("<dd", float("nan"), float("nan")))
    if kind == 2:
        return header + ring(inner)
    if kind == 3:
        rings = groups(inner)
        return header + struct.pack("<I", len(rings)) + b"".join(ring(r) for r in rings)
    parts = groups(inner)  # MULTIPOINT((0 0), (1 1)) or MULTIPOINT(0 0, 1 1); MULTILINESTRING((...), ...); ...
    members = [f"POINT({p.strip('()')})" for p in parts] if kind == 4 else \
        [("LINESTRING" if kind == 5 else "POLYGON") + p for p in parts]
    return header + struct.pack("<I", len(members)) + b"".join(_wkb(m) for m in members)


def spatial_value(value: Any, type_name: str) -> bytes:
    """A spatial value as the model stores it: what ``CAST(c.STSrid AS binary(4)) + c.STAsBinary()`` returns (the
    SRID, 4 bytes big-endian, then the well-known binary). Given as well-known text (the type's default SRID: 0 for
    geometry, 4326 for geography), as ``(text or WKB bytes, srid)``, or as those stored bytes."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, tuple):
        shape, srid = value
    else:
        shape, srid = value, _DEFAULT_SRID[type_name]
    wkb = bytes(shape) if isinstance(shape, (bytes, bytearray, memoryview)) else _wkb(str(shape))
    return int(srid).to_bytes(4, "big", signed=True) + wkb
