"""SQL Server columns and values -> Qlik Replicate columns and typed values; the CDC headers of SQL Server changes.

Type mapping (sys.types name -> Qlik data type), as Qlik Replicate's SQL Server source endpoints document it
("Supported data types"; Qlik's message-format page, seed 004, lists no types):

    bit BOOLEAN | tinyint UINT1 | smallint INT2 | int INT4 | bigint INT8 | real REAL4 | float REAL8
    decimal/numeric(p,s) NUMERIC(p,s) | money NUMERIC(19,4) | smallmoney NUMERIC(10,4)
    date DATE | datetime, datetime2(n), smalldatetime DATETIME (scale: the column's fractional-second digits)
    time(n) STRING(16) 'hh:mm:ss[.fffffff]' | datetimeoffset(n) STRING(34) 'YYYY-MM-DD hh:mm:ss[.fffffff] +hh:mm'
        (SQL Server's own text of the value, with the column's n fraction digits)
    char/varchar(n) STRING(n) | varchar(max), text CLOB | nchar/nvarchar(n) WSTRING(n), sysname WSTRING(128)
    nvarchar(max), ntext NCLOB | xml CLOB | uniqueidentifier STRING(36) (upper case, as SQL Server prints it)
    binary/varbinary(n) BYTES(n) | varbinary(max), image BLOB | timestamp/rowversion BYTES(8)
    geometry, geography BLOB (the SRID, 4 bytes big-endian, then the well-known binary) | hierarchyid WSTRING(4000)
        (its text, '/1/3/') | sql_variant WSTRING(4000) (its nvarchar text)

geometry, geography, hierarchyid and sql_variant are read through conversions in cdckit's query (pyodbc cannot
fetch them; docs/decisions/0032).

Values are what cdckit's pyodbc connections return: int, bool, Decimal, float (a real widened to a double is
narrowed back to its shortest float32 form), str, bytes, date, and datetime, smalldatetime, datetime2, time and
datetimeoffset as SQL Server's text (dialect/sqlserver/connection.py); a datetime's wall-clock time is read as UTC,
as Qlik's DATETIME carries no zone. Python time and naive datetime values are taken too.

Headers: ``changeSequence`` is 55 digits (commit LSN, change LSN, each 25 digits: any 10-byte LSN; the event's
serial, 5 digits), so string order is position order; ``streamPosition`` is the change LSN in SQL Server's
notation ('0000002a:000001c8:0004'); ``transactionId`` is the commit LSN (which every change of a transaction shares,
the transaction id of Debezium's SQL Server connector) as 32 hexadecimal digits.
"""

from __future__ import annotations

import datetime
import decimal
import re
import uuid
from collections.abc import Callable, Mapping, Sequence

from cdckit.events import ChangeEvent
from cdckit.formats.debezium.source import format_sqlserver_lsn
from cdckit.formats.debezium.sqlserver_types import (
    SqlServerColumn,
    UnsupportedSqlServerTypeError,
    shortest_float32,
)
from cdckit.formats.qlik.mapping import (
    ChangeHeaders,
    SourceMapping,
    decimal_converter,
    padded_sequence,
    row_from,
    table_from,
    transaction_id,
)
from cdckit.formats.qlik.model import QlikColumn, QlikTable, QlikValue

__all__ = [
    "CHANGE_SEQUENCE_LAYOUT",
    "MAPPING",
    "change_headers",
    "change_sequence",
    "qlik_column",
    "qlik_row",
    "qlik_table",
    "qlik_value",
    "stream_position",
    "value_converter",
]

TIME_TEXT_LENGTH = 16  # 'hh:mm:ss.fffffff'
DATETIMEOFFSET_TEXT_LENGTH = 34  # 'YYYY-MM-DD hh:mm:ss.fffffff +hh:mm'
GUID_TEXT_LENGTH = 36
ROWVERSION_LENGTH = 8
SYSNAME_LENGTH = 128
CONVERTED_TEXT_LENGTH = 4000  # hierarchyid's ToString() and CAST(sql_variant AS nvarchar(4000))
_UTC = datetime.timezone.utc

_FIXED: dict[str, tuple[str, int]] = {
    "bit": ("BOOLEAN", 0), "tinyint": ("UINT1", 0), "smallint": ("INT2", 0), "int": ("INT4", 0),
    "bigint": ("INT8", 0), "real": ("REAL4", 0), "float": ("REAL8", 0), "date": ("DATE", 0),
    "time": ("STRING", TIME_TEXT_LENGTH), "datetimeoffset": ("STRING", DATETIMEOFFSET_TEXT_LENGTH),
    "text": ("CLOB", 0), "ntext": ("NCLOB", 0), "xml": ("CLOB", 0), "image": ("BLOB", 0),
    "uniqueidentifier": ("STRING", GUID_TEXT_LENGTH), "sysname": ("WSTRING", SYSNAME_LENGTH),
    "timestamp": ("BYTES", ROWVERSION_LENGTH), "rowversion": ("BYTES", ROWVERSION_LENGTH),
    "geometry": ("BLOB", 0), "geography": ("BLOB", 0), "hierarchyid": ("WSTRING", CONVERTED_TEXT_LENGTH),
    "sql_variant": ("WSTRING", CONVERTED_TEXT_LENGTH),
}
_MONEY = {"money": (19, 4), "smallmoney": (10, 4)}
# Sized types: (Qlik type when sized, Qlik type for (max), bytes per character)
_SIZED = {"char": ("STRING", "CLOB", 1), "varchar": ("STRING", "CLOB", 1), "nchar": ("WSTRING", "NCLOB", 2),
          "nvarchar": ("WSTRING", "NCLOB", 2), "binary": ("BYTES", "BLOB", 1), "varbinary": ("BYTES", "BLOB", 1)}
_DATETIMES = {"datetime": 3, "smalldatetime": 0, "datetime2": None}  # fraction digits (None: the column's scale)


def qlik_column(column: SqlServerColumn, primary_key_position: int = 0) -> QlikColumn:
    """The Qlik column of a SQL Server column (``primary_key_position``: 1-based, 0 when not a key column)."""
    def make(kind: str, length: int = 0, precision: int = 0, scale: int = 0) -> QlikColumn:
        return QlikColumn(column.name, kind, length, precision, scale, primary_key_position, column.optional)

    name = column.type_name.strip().lower()
    if name in _FIXED:
        return make(*_FIXED[name])
    if name in _MONEY:
        precision, scale = _MONEY[name]
        return make("NUMERIC", precision=precision, scale=scale)
    if name in ("decimal", "numeric"):
        return make("NUMERIC", precision=column.precision or 18, scale=column.scale)
    if name in _DATETIMES:
        digits = _DATETIMES[name]
        return make("DATETIME", scale=column.scale if digits is None else digits)
    if name in _SIZED:
        sized, unbounded, width = _SIZED[name]
        return make(unbounded) if column.max_length == -1 else make(sized, column.max_length // width)
    raise UnsupportedSqlServerTypeError(
        f"column '{column.name}': SQL Server type '{column.type_name}' has no Qlik Replicate mapping in cdckit; "
        "exclude the column with column.exclude.list")


def qlik_table(schema: str, table: str, columns: Sequence[SqlServerColumn], key_columns: Sequence[str] = (),
               table_version: int = 1) -> QlikTable:
    """A QlikTable from a capture instance's columns (in column order) and its key's columns (in key order)."""
    return table_from(schema, table, columns, key_columns, table_version, qlik_column)


# ---- values -----------------------------------------------------------------------------------------------------

_DATETIMEOFFSET_TEXT = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\s*([+-]\d{2}:\d{2})")


def _fraction(digits: str, scale: int) -> str:
    """SQL Server's text of a fraction at a column's scale: ``scale`` digits after a point, nothing for scale 0."""
    return "." + digits.ljust(scale, "0")[:scale] if scale > 0 else ""


_TIME_TEXT = re.compile(r"(\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?")
_DATETIME_TEXT = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def _time_text(scale: int) -> Callable[[object], QlikValue]:
    def convert(value: object) -> QlikValue:
        if isinstance(value, str):  # SQL Server's text, 'hh:mm:ss.fffffff'
            match = _TIME_TEXT.fullmatch(value.strip())
            if match is None:
                raise ValueError(f"cannot read time value {value!r}")
            return match[1] + _fraction(match[2] or "", scale)
        if not isinstance(value, datetime.time):
            raise TypeError(f"expected a time, got {type(value).__name__}")
        return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}" + _fraction(f"{value.microsecond:06d}",
                                                                                      scale)
    return convert


def _datetimeoffset_text(scale: int) -> Callable[[object], QlikValue]:
    def convert(value: object) -> QlikValue:
        if isinstance(value, datetime.datetime) and value.utcoffset() is not None:
            offset = int((value.utcoffset() or datetime.timedelta()).total_seconds()) // 60
            sign = "-" if offset < 0 else "+"
            value = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} {value.hour:02d}:{value.minute:02d}:"
                     f"{value.second:02d}.{value.microsecond:06d} {sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}")
        match = _DATETIMEOFFSET_TEXT.fullmatch(str(value).strip())
        if match is None:
            raise ValueError(f"cannot read datetimeoffset value {value!r}")
        clock, digits, offset_text = match.groups()
        return f"{clock}{_fraction(digits or '', scale)} {offset_text}"
    return convert


def _datetime(value: object) -> QlikValue:
    if isinstance(value, str):  # SQL Server's text, 'YYYY-MM-DD hh:mm:ss.fffffff'; Qlik's DATETIME holds microseconds
        match = _DATETIME_TEXT.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"cannot read datetime value {value!r}")
        year, month, day, hour, minute, second = (int(field) for field in match.groups()[:6])
        value = datetime.datetime(year, month, day, hour, minute, second, int((match[7] or "").ljust(6, "0")[:6]))
    if not isinstance(value, datetime.datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    return value.replace(tzinfo=_UTC)  # wall-clock time, read as UTC


def _date(value: object) -> QlikValue:
    if isinstance(value, datetime.datetime):
        return value.date()
    if not isinstance(value, datetime.date):
        raise TypeError(f"expected a date, got {type(value).__name__}")
    return value


def _text(value: object) -> QlikValue:
    return str(value)


def _guid(value: object) -> QlikValue:
    return str(value).upper() if isinstance(value, (str, uuid.UUID)) else _text(value)


def _bytes(value: object) -> QlikValue:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected bytes, got {type(value).__name__}")
    return bytes(value)


def _integer(value: object) -> QlikValue:
    if not isinstance(value, (int, str, decimal.Decimal)):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return int(value)


def _boolean(value: object) -> QlikValue:
    return bool(value)


def _real(value: object) -> QlikValue:
    return shortest_float32(value)


def _double(value: object) -> QlikValue:
    if not isinstance(value, (int, float, str, decimal.Decimal)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


_BY_QLIK_TYPE: dict[str, Callable[[object], QlikValue]] = {
    "BOOLEAN": _boolean, "UINT1": _integer, "INT2": _integer, "INT4": _integer, "INT8": _integer,
    "REAL4": _real, "REAL8": _double, "DATE": _date, "DATETIME": _datetime,
    "BYTES": _bytes, "BLOB": _bytes,
}


def value_converter(column: SqlServerColumn) -> Callable[[object], QlikValue]:
    """A converter from the column's value as cdckit reads it (None for SQL NULL) to its typed Qlik value."""
    target = qlik_column(column)
    name = column.type_name.strip().lower()
    convert: Callable[[object], QlikValue]
    if target.type == "NUMERIC":
        convert = decimal_converter(target.scale)
    elif name == "time":
        convert = _time_text(column.scale)
    elif name == "datetimeoffset":
        convert = _datetimeoffset_text(column.scale)
    elif name == "uniqueidentifier":
        convert = _guid
    else:
        convert = _BY_QLIK_TYPE.get(target.type, _text)

    def converter(value: object) -> QlikValue:
        if value is None:
            return None
        try:
            return convert(value)
        except (TypeError, ValueError, ArithmeticError) as error:
            raise ValueError(f"column '{column.name}' ({column.type_name}): {error}") from None
    return converter


def qlik_value(column: SqlServerColumn, value: object) -> QlikValue:
    """One SQL Server value as the typed value of its Qlik column."""
    return value_converter(column)(value)


def qlik_row(columns: Sequence[SqlServerColumn], row: Mapping[str, object] | None) -> dict[str, QlikValue] | None:
    """A neutral event row (column -> value as read) as typed Qlik values."""
    return row_from(columns, row, qlik_value)


# ---- headers ----------------------------------------------------------------------------------------------------

CHANGE_SEQUENCE_LAYOUT = (25, 25, 5)  # digits of commit LSN, change LSN, serial


def change_sequence(commit_lsn: int, change_lsn: int, serial: int) -> str:
    """A 55-digit decimal string: commit LSN, change LSN (25 digits each, enough for 10-byte LSNs) and serial
    (5 digits), zero-padded, so string order is the order of the changes' positions across all tables."""
    return padded_sequence(tuple(zip(("commit_lsn", "change_lsn", "serial"), (commit_lsn, change_lsn, serial),
                                     CHANGE_SEQUENCE_LAYOUT, strict=True)))


def stream_position(change_lsn: int) -> str:
    """The change's LSN in SQL Server's notation: '0000002a:000001c8:0004'."""
    if not 0 <= change_lsn < 2**80:
        raise ValueError(f"LSN {change_lsn} is outside 0..2**80-1")
    return format_sqlserver_lsn(change_lsn) or ""


def change_headers(event: ChangeEvent) -> ChangeHeaders:
    """A change's CDC headers: its position as the change sequence, its change LSN, its commit LSN as the
    transaction id."""
    position = event.position
    change_lsn = event.extra.get("change_lsn")  # kept beside the position when logged out of seqval order
    return ChangeHeaders(change_sequence(position.commit_lsn, position.lsn, position.serial),
                         stream_position(position.lsn if change_lsn is None else int(str(change_lsn))),
                         transaction_id(position.commit_lsn))


MAPPING = SourceMapping(qlik_table, qlik_row, change_headers)
