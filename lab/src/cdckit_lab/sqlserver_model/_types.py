"""Column types, value coercion and storage, and LSN arithmetic of the SQL Server model."""

from __future__ import annotations

import datetime as dt
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
}
_INTEGER_RANGES = {"tinyint": (0, 255), "smallint": (-(2**15), 2**15 - 1), "int": (-(2**31), 2**31 - 1),
                   "bigint": (-(2**63), 2**63 - 1)}
_FIXED = {"bit", "tinyint", "smallint", "int", "bigint", "money", "smallmoney", "real", "date", "datetime",
          "smalldatetime", "uniqueidentifier", "text", "ntext", "image", "xml", "sysname"}
_SCALED_TIME = {"time": (8, (3, 4, 5)), "datetime2": (19, (6, 7, 8)), "datetimeoffset": (26, (8, 9, 10))}
STRING_TYPES = {"char", "varchar", "text", "nchar", "nvarchar", "ntext", "sysname", "xml"}
BINARY_TYPES = {"binary", "varbinary", "image"}
DATETIMEOFFSET_SQL_TYPE = -155  # SQL_SS_TIMESTAMPOFFSET, which pyodbc cannot read without an output converter


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
    if column.type_name == "datetime":  # ticks of 1/300 s
        ticks = round(value.microsecond * 300 / 1_000_000)
        return value.replace(microsecond=0) + dt.timedelta(microseconds=ticks * 10_000 // 3)
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
            clock = value if isinstance(value, dt.time) else dt.time.fromisoformat(str(value))
            return _fraction_rounded(clock.replace(tzinfo=None), column.scale)
        if name == "datetimeoffset":
            aware = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
            if aware.tzinfo is None:
                aware = aware.replace(tzinfo=dt.timezone.utc)
            return _fraction_rounded(aware, column.scale)
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
        return value.isoformat()
    raise TypeError(f"cannot store {value!r} for column {column.name}")


def decode(column: ModelColumn, stored: Any) -> Any:
    """A JSON value back as the Python value pyodbc returns for the column's type."""
    if stored is None:
        return None
    name = column.type_name
    if name in ("decimal", "numeric", "money", "smallmoney"):
        return Decimal(stored)
    if name in BINARY_TYPES:
        return bytes.fromhex(stored)
    if name == "date":
        return dt.date.fromisoformat(stored)
    if name == "time":
        return dt.time.fromisoformat(stored)
    if name in ("datetime", "datetime2", "smalldatetime", "datetimeoffset"):
        return dt.datetime.fromisoformat(stored)
    return stored


def sort_key(value: Any) -> tuple[Any, ...]:
    """SQL Server ordering: NULL first; strings by the default case-insensitive collation (approximated)."""
    if value is None:
        return (0,)
    if isinstance(value, str):
        return (1, value.rstrip(" ").casefold(), value)
    return (1, value)


def compare_key(value: Any) -> Any:
    """The value as compared by ``=``, ``<``, ``>=``: strings case-insensitively, trailing blanks ignored."""
    return value.rstrip(" ").casefold() if isinstance(value, str) else value


def datetimeoffset_struct(value: dt.datetime) -> bytes:
    """SQL_SS_TIMESTAMPOFFSET_STRUCT, the bytes a pyodbc output converter for -155 receives."""
    offset = value.utcoffset() or dt.timedelta()
    minutes = int(offset.total_seconds()) // 60
    hours, rest = divmod(abs(minutes), 60)
    sign = -1 if minutes < 0 else 1
    return struct.pack("<6hI2h", value.year, value.month, value.day, value.hour, value.minute, value.second,
                       value.microsecond * 1000, sign * hours, sign * rest)
