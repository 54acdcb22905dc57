"""PostgreSQL / YugabyteDB columns and values -> Qlik Replicate columns and typed values.

Type mapping (pg_type.typname of the base type -> Qlik data type):

    int2 INT2 | int4 INT4 | int8 INT8 | float4 REAL4 | float8 REAL8 | bool BOOLEAN
    numeric/decimal(p,s) NUMERIC(p,s); without a modifier NUMERIC(28,6) and precision > 38 STRING, as Qlik's
        PostgreSQL source does (values are rounded half-up to the scale; NaN has no NUMERIC value and becomes null)
    varchar(n)/bpchar(n) STRING(n) (varchar without n: 8000, Qlik's unboundedVarcharMaxSize default)
    text CLOB | json/jsonb NCLOB | bytea BLOB | uuid STRING(36)
    date DATE | time TIME (milliseconds: Qlik's Avro type is time-millis) | timestamp/timestamptz DATETIME (UTC)
    anything else STRING(8000) holding PostgreSQL's text output unchanged

Values arrive as PostgreSQL's text output (DateStyle ISO) and are parsed with cdckit's exact pg_values parsers.
DATETIME values are aware UTC datetimes: timestamptz is converted to UTC, timestamp's wall-clock time is read as UTC.
'infinity' / '-infinity' become the largest / smallest datetime or date Python has; a value outside Python's
years 1-9999 (BC dates, year 10000+) raises ValueError. time '24:00:00' becomes 23:59:59.999.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence

from cdckit.events import ChangeEvent
from cdckit.formats.debezium import pg_values as pv
from cdckit.formats.debezium.postgres_types import ColumnType, numeric_typmod
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

UNBOUNDED_STRING_LENGTH = 8000
MAX_NUMERIC_PRECISION = 38
DEFAULT_NUMERIC = (28, 6)
_UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_LAST_MILLI_OF_DAY = datetime.time(23, 59, 59, 999_000)

_FIXED: dict[str, str] = {
    "int2": "INT2", "int4": "INT4", "int8": "INT8", "float4": "REAL4", "float8": "REAL8", "bool": "BOOLEAN",
    "text": "CLOB", "json": "NCLOB", "jsonb": "NCLOB", "bytea": "BLOB", "date": "DATE",
}


def _numeric_shape(column: ColumnType) -> tuple[int, int] | None:
    """(precision, scale) of the Qlik NUMERIC, or None when the column maps to STRING."""
    typmod = numeric_typmod(column)
    if typmod is None:
        return DEFAULT_NUMERIC
    precision, scale = typmod
    if scale < 0:  # PostgreSQL 15+: numeric(p, -s) holds integers of up to p - s digits
        precision, scale = precision - scale, 0
    return (precision, scale) if precision <= MAX_NUMERIC_PRECISION else None


def _fraction_digits(column: ColumnType) -> int:
    return column.modifier if 0 <= column.modifier <= 6 else 6


def qlik_column(column: ColumnType, primary_key_position: int = 0) -> QlikColumn:
    """The Qlik column of a PostgreSQL column (``primary_key_position``: 1-based, 0 when not a key column)."""
    def make(kind: str, length: int = 0, precision: int = 0, scale: int = 0) -> QlikColumn:
        return QlikColumn(column.name, kind, length, precision, scale, primary_key_position, column.optional)

    name = column.type_name
    if name in _FIXED:
        return make(_FIXED[name])
    if name in ("numeric", "decimal"):
        shape = _numeric_shape(column)
        if shape is None:
            typmod = numeric_typmod(column)
            return make("STRING", (typmod[0] if typmod else 0) + 2)  # digits, sign and point
        return make("NUMERIC", precision=shape[0], scale=shape[1])
    if name in ("varchar", "bpchar"):
        default = UNBOUNDED_STRING_LENGTH if name == "varchar" else 1
        return make("STRING", column.modifier - 4 if column.modifier >= 4 else default)
    if name == "uuid":
        return make("STRING", 36)
    if name == "time":
        return make("TIME", scale=min(_fraction_digits(column), 3))
    if name in ("timestamp", "timestamptz"):
        return make("DATETIME", scale=_fraction_digits(column))
    return make("STRING", UNBOUNDED_STRING_LENGTH)


def qlik_table(schema: str, table: str, columns: Sequence[ColumnType], key_columns: Sequence[str] = (),
               table_version: int = 1) -> QlikTable:
    """A QlikTable from the catalog's columns (in attnum order) and the primary key's columns (in key order)."""
    return table_from(schema, table, columns, key_columns, table_version, qlik_column)


# ---- values -----------------------------------------------------------------------------------------------------


def _datetime(micros: int) -> datetime.datetime:
    try:
        return _EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:
        raise ValueError("timestamp outside years 1-9999 has no Qlik DATETIME value in cdckit") from None


def _temporal_infinity(text: str, high: object, low: object) -> object | None:
    stripped = text.strip()
    if stripped == "infinity":
        return high
    if stripped == "-infinity":
        return low
    return None


def _timestamp(parse: Callable[[str], int]) -> Callable[[str], QlikValue]:
    def convert(text: str) -> QlikValue:
        infinite = _temporal_infinity(text, datetime.datetime.max.replace(tzinfo=_UTC),
                                      datetime.datetime.min.replace(tzinfo=_UTC))
        return infinite if isinstance(infinite, datetime.datetime) else _datetime(parse(text))
    return convert


def _date(text: str) -> QlikValue:
    infinite = _temporal_infinity(text, datetime.date.max, datetime.date.min)
    if isinstance(infinite, datetime.date):
        return infinite
    try:
        return datetime.date.fromordinal(pv.parse_date(text) + _EPOCH_ORDINAL)
    except (OverflowError, ValueError) as error:
        raise ValueError(f"date {text!r} has no Qlik DATE value in cdckit ({error})") from None


def _time(text: str) -> QlikValue:
    micros = pv.parse_time(text)
    if micros >= pv.MICROS_PER_DAY:
        return _LAST_MILLI_OF_DAY
    seconds, fraction = divmod(micros, pv.MICROS_PER_SECOND)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return datetime.time(hour, minute, second, fraction // 1000 * 1000)


def _identity(text: str) -> QlikValue:
    return text


_PARSERS: dict[str, Callable[[str], QlikValue]] = {
    "INT2": int, "INT4": int, "INT8": int, "REAL4": float, "REAL8": float, "BOOLEAN": pv.parse_bool,
    "BLOB": pv.parse_bytea, "DATE": _date, "TIME": _time,
}


def value_converter(column: ColumnType) -> Callable[[str | None], QlikValue]:
    """A converter from the column's PostgreSQL text output (None for SQL NULL) to its typed Qlik value."""
    target = qlik_column(column)
    parse: Callable[[str], QlikValue]
    if target.type == "NUMERIC":
        parse = decimal_converter(target.scale)
    elif target.type == "DATETIME":
        parse = _timestamp(pv.parse_timestamptz if column.type_name == "timestamptz" else pv.parse_timestamp)
    elif target.type == "STRING" and column.type_name in ("numeric", "decimal"):
        parse = str.strip
    else:
        parse = _PARSERS.get(target.type, _identity)

    def convert(text: str | None) -> QlikValue:
        return None if text is None else parse(text)
    return convert


def qlik_value(column: ColumnType, text: str | None) -> QlikValue:
    """One PostgreSQL text value as the typed value of its Qlik column."""
    return value_converter(column)(text)


def qlik_row(columns: Sequence[ColumnType], row: Mapping[str, object] | None) -> dict[str, QlikValue] | None:
    """A neutral event row (column -> text) as typed Qlik values; UNAVAILABLE (unchanged TOAST) columns are left out,
    so they are absent from the columnMask."""
    def value(column: ColumnType, text: object) -> QlikValue:
        if not isinstance(text, str):
            raise TypeError(f"column '{column.name}': expected PostgreSQL text output, got {type(text).__name__}")
        return qlik_value(column, text)
    return row_from(columns, row, value)


# ---- headers ----------------------------------------------------------------------------------------------------

CHANGE_SEQUENCE_LAYOUT = (20, 20, 5)  # digits of commit_lsn, lsn, serial


def change_sequence(commit_lsn: int, lsn: int, serial: int) -> str:
    """A 45-digit decimal string: commit LSN (20 digits), change LSN (20 digits), serial (5 digits), zero-padded.

    Equal width and zero padding make string order equal to the order of (commit_lsn, lsn, serial) tuples, which
    is PostgreSQL's commit order across all tables of a task. 20 digits hold any 64-bit LSN. Qlik's own sequence
    is 35 characters (a timestamp and a change counter); this one is wider so that it stays lossless and exact.
    """
    return padded_sequence(tuple(zip(("commit_lsn", "lsn", "serial"), (commit_lsn, lsn, serial),
                                     CHANGE_SEQUENCE_LAYOUT, strict=True)))


def stream_position(lsn: int) -> str:
    """The source stream position: the change's LSN in PostgreSQL's own notation ('16/B374D848')."""
    if not 0 <= lsn < 2**64:
        raise ValueError(f"LSN {lsn} is outside 0..2**64-1")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def change_headers(event: ChangeEvent) -> ChangeHeaders:
    """A change's CDC headers: its position as the change sequence, its LSN, its transaction's xid."""
    position = event.position
    return ChangeHeaders(change_sequence(position.commit_lsn, position.lsn, position.serial),
                         stream_position(position.lsn), transaction_id(event.tx_id or 0))


MAPPING = SourceMapping(qlik_table, qlik_row, change_headers)
