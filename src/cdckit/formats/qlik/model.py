"""The Qlik Replicate side of a table and a change: plain, validated, immutable values.

Qlik Replicate describes every column with one of its own data types (the names below, as its documentation and its
metadata messages spell them) and addresses columns by ordinal: the 1-based position of the column in
``QlikTable.columns``. Change masks and column masks use those ordinals.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ENCODINGS",
    "LOB_TYPES",
    "OPERATIONS",
    "QLIK_TYPES",
    "Encoding",
    "Operation",
    "QlikChange",
    "QlikColumn",
    "QlikSettings",
    "QlikTable",
    "QlikValue",
]

QLIK_TYPES = frozenset({
    "BOOLEAN", "BYTES", "DATE", "TIME", "DATETIME", "INT1", "INT2", "INT4", "INT8", "NUMERIC", "REAL4", "REAL8",
    "STRING", "WSTRING", "BLOB", "CLOB", "NCLOB", "UINT1", "UINT2", "UINT4", "UINT8",
})
# Large objects: Qlik never sets their bit in a changeMask.
LOB_TYPES = frozenset({"BLOB", "CLOB", "NCLOB"})

Operation = Literal["REFRESH", "INSERT", "UPDATE", "DELETE"]
OPERATIONS: tuple[Operation, ...] = ("INSERT", "UPDATE", "DELETE", "REFRESH")  # the Avro enum's symbol order
Encoding = Literal["json", "avro"]
ENCODINGS: tuple[Encoding, ...] = ("json", "avro")

# A column value as the formats consume it. DATETIME values are timezone-aware UTC datetimes.
QlikValue = (
    int | float | decimal.Decimal | str | bytes | bool | datetime.date | datetime.time | datetime.datetime | None
)


@dataclass(frozen=True)
class QlikColumn:
    """One column as a Qlik metadata message describes it.

    ``length`` is the maximum size for STRING / WSTRING / BYTES (0 where Qlik has none), ``precision`` and ``scale``
    describe NUMERIC (``scale`` also carries the fractional-second digits of TIME and DATETIME), and
    ``primary_key_position`` is the 1-based position in the primary key or unique index (0: not a key column).
    """

    name: str
    type: str
    length: int = 0
    precision: int = 0
    scale: int = 0
    primary_key_position: int = 0
    nullable: bool = True

    def __post_init__(self) -> None:
        if self.type not in QLIK_TYPES:
            raise ValueError(f"column '{self.name}': {self.type!r} is not a Qlik Replicate data type")
        if min(self.length, self.precision, self.scale, self.primary_key_position) < 0:
            raise ValueError(f"column '{self.name}': length, precision, scale and key position must be >= 0")

    @property
    def is_lob(self) -> bool:
        return self.type in LOB_TYPES


@dataclass(frozen=True)
class QlikTable:
    """A table's structure at one ``table_version``; column ordinals are positions in ``columns`` (from 1)."""

    schema: str
    table: str
    columns: tuple[QlikColumn, ...]
    table_version: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        names = [column.name for column in self.columns]
        if not names:
            raise ValueError(f"table {self.schema}.{self.table} has no columns")
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"table {self.schema}.{self.table}: duplicate column names {duplicates}")
        if self.table_version < 1:
            raise ValueError(f"table {self.schema}.{self.table}: table_version must be >= 1")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def ordinal(self, name: str) -> int:
        """1-based ordinal of a column, as the metadata message states it."""
        for index, column in enumerate(self.columns, start=1):
            if column.name == name:
                return index
        raise KeyError(f"table {self.schema}.{self.table} has no column '{name}'")


@dataclass(frozen=True)
class QlikSettings:
    """Task-level settings: the lineage names and the message encoding."""

    server: str
    task: str
    encoding: Encoding = "json"

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"unknown Qlik message encoding {self.encoding!r}; expected 'json' or 'avro'")


@dataclass(frozen=True)
class QlikChange:
    """One row change (or full-load row) for a data message.

    ``data`` is the row after the change (for DELETE: the deleted row image as known), ``before_data`` the row before
    an UPDATE (None when unknown). Columns the source could not deliver (an unchanged TOASTed value) are left out of
    the dicts: they are absent from the columnMask and written as null. ``changed_columns`` overrides the computed
    change set of an UPDATE. The CDC headers (``change_sequence`` ... ``transaction_last_event``) are ignored for
    REFRESH, which Qlik sends with empty strings and nulls.
    """

    operation: Operation
    data: dict[str, QlikValue] | None
    before_data: dict[str, QlikValue] | None = None
    change_sequence: str = ""
    timestamp: str = ""
    stream_position: str = ""
    transaction_id: str = ""
    transaction_event_counter: int = 0
    transaction_last_event: bool = False
    changed_columns: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(f"unknown Qlik operation {self.operation!r}; expected one of {', '.join(OPERATIONS)}")
        if self.data is None:
            raise ValueError(f"a {self.operation} change needs data (for DELETE: the deleted row image)")
        if self.before_data is not None and self.operation != "UPDATE":
            raise ValueError(f"beforeData applies to UPDATE only, not to {self.operation}")
        if self.changed_columns is not None:
            object.__setattr__(self, "changed_columns", frozenset(self.changed_columns))
