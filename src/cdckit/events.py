"""The neutral change event every dialect produces and every format consumes."""

from __future__ import annotations

from dataclasses import dataclass, field


class _Unavailable:
    """Marker for a value the source did not send (an unchanged TOASTed column)."""

    def __repr__(self) -> str:
        return "UNAVAILABLE"

    def __reduce__(self) -> str:
        return "UNAVAILABLE"  # unpickles as the module singleton


UNAVAILABLE = _Unavailable()

# A row as the dialect read it: column name -> the value's text form (None for SQL NULL).
Row = dict[str, object]


@dataclass(frozen=True)
class Position:
    """Where an event sits in the source's history; tuples of positions order events totally.

    For PostgreSQL: ``commit_lsn`` is the end LSN of the transaction's commit record, ``lsn`` the
    change's own LSN, ``serial`` the event's index among the events one change produces
    (a primary-key update yields a delete and a create under one change LSN).
    """

    commit_lsn: int
    lsn: int
    serial: int = 0

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.commit_lsn, self.lsn, self.serial)


@dataclass(frozen=True)
class ChangeEvent:
    schema: str
    table: str
    op: str  # c, u, d, r (snapshot read), or "hb" for a heartbeat
    before: Row | None
    after: Row | None
    position: Position
    source_ts_ms: int  # commit time (or snapshot time) at the source
    tx_id: int | None = None
    snapshot: str = "false"  # "true", "last" or "false", as Debezium's source.snapshot
    sequence: tuple[int | None, int | None] = (None, None)  # (last commit LSN, current LSN)
    extra: dict[str, object] = field(default_factory=dict)  # dialect details: event_serial_no, transaction block
    database: str = ""  # for sources that capture several databases (SQL Server database.names)
