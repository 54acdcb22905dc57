"""What every source's Qlik mapping shares: tables from catalog columns, rows of typed values, NUMERIC values, the
zero-padded change sequence and the transaction id, and the ``SourceMapping`` a record builder takes per source.

A source module (``postgres``, ``sqlserver``) supplies the per-column parts: the Qlik column of a catalog column and
the converter of its values, and the CDC headers of a change event.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from cdckit.events import UNAVAILABLE, ChangeEvent
from cdckit.formats.qlik.model import QlikColumn, QlikTable, QlikValue

__all__ = [
    "ChangeHeaders",
    "SourceMapping",
    "decimal_converter",
    "padded_sequence",
    "row_from",
    "table_from",
    "transaction_id",
]

_WIDE = decimal.Context(prec=100)


class NamedColumn(Protocol):
    @property
    def name(self) -> str: ...


ColumnT = TypeVar("ColumnT", bound=NamedColumn)


def table_from(schema: str, table: str, columns: Sequence[ColumnT], key_columns: Sequence[str], table_version: int,
               column: Callable[[ColumnT, int], QlikColumn]) -> QlikTable:
    """A QlikTable of catalog columns (in ordinal order) and the key's columns (in key order); ``column`` maps one
    catalog column and its 1-based key position (0: not a key column)."""
    names = [c.name for c in columns]
    missing = [key for key in key_columns if key not in names]
    if missing:
        raise ValueError(f"key columns {missing} are not columns of {schema}.{table}")
    positions = {key: index for index, key in enumerate(key_columns, start=1)}
    return QlikTable(schema, table, tuple(column(c, positions.get(c.name, 0)) for c in columns), table_version)


def row_from(columns: Sequence[ColumnT], row: Mapping[str, object] | None,
             value: Callable[[ColumnT, object], QlikValue]) -> dict[str, QlikValue] | None:
    """A neutral event row as typed Qlik values (``value`` converts one column's value, None being SQL NULL);
    UNAVAILABLE columns (not delivered by the source) are left out, so they are absent from the columnMask."""
    if row is None:
        return None
    by_name = {c.name: c for c in columns}
    result: dict[str, QlikValue] = {}
    for name, raw in row.items():
        if raw is UNAVAILABLE:
            continue
        if name not in by_name:
            raise ValueError(f"row column '{name}' is not among the table's columns")
        result[name] = None if raw is None else value(by_name[name], raw)
    return result


def decimal_converter(scale: int) -> Callable[[object], QlikValue]:
    """A NUMERIC(p, scale) value from a Decimal, an int or decimal text, rounded half-up to the scale; NaN and
    infinities have no NUMERIC value and become null."""
    quantum = decimal.Decimal(1).scaleb(-scale)

    def convert(raw: object) -> QlikValue:
        number = raw if isinstance(raw, decimal.Decimal) else decimal.Decimal(str(raw).strip())
        if not number.is_finite():
            return None
        return number.quantize(quantum, decimal.ROUND_HALF_UP, _WIDE)
    return convert


def padded_sequence(parts: Sequence[tuple[str, int, int]]) -> str:
    """(name, value, digits) parts as one string of zero-padded decimal numbers: equal widths make string order
    the order of the value tuples."""
    for name, number, digits in parts:
        if not 0 <= number < 10**digits:
            raise ValueError(f"{name} {number} does not fit the change sequence (0 <= {name} < {10**digits})")
    return "".join(f"{number:0{digits}d}" for _name, number, digits in parts)


def transaction_id(xid: int) -> str:
    """The transaction id as Qlik writes ids: 32 uppercase hexadecimal digits ('000...0001F4')."""
    if not 0 <= xid < 2**128:
        raise ValueError(f"transaction id {xid} is out of range")
    return f"{xid:032X}"


@dataclass(frozen=True)
class ChangeHeaders:
    """The CDC headers a change event's position gives: ``changeSequence``, ``streamPosition``, ``transactionId``."""

    change_sequence: str
    stream_position: str
    transaction_id: str


@dataclass(frozen=True)
class SourceMapping:
    """One source's Qlik mapping, as a record builder uses it: ``table(schema, table, columns, key_columns,
    table_version)``, ``row(columns, row)`` and ``headers(event)``."""

    table: Callable[[str, str, Sequence[Any], Sequence[str], int], QlikTable]
    row: Callable[[Sequence[Any], Mapping[str, object] | None], dict[str, QlikValue] | None]
    headers: Callable[[ChangeEvent], ChangeHeaders]
