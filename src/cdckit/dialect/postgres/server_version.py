"""What the server's PostgreSQL version decides. cdckit runs on PostgreSQL 10 and later (docs/decisions/0019) and
picks, by the server's ``server_version_num``, the form of each command or query whose form changed since 10:

========  ==========================================================  =============================================
since     what                                                        cdckit's use, and what it does before
========  ==========================================================  =============================================
10        pgoutput, publications, ``CREATE_REPLICATION_SLOT ...``     the floor: older servers are refused at start
          ``EXPORT_SNAPSHOT``
11        ``pg_replication_slot_advance``                             confirming a position; on 10 the slot's
                                                                      changes up to it are consumed instead
12        ``pg_attribute.attgenerated`` (generated columns)           columns of a table; none exist before
13        ``pg_replication_slots.wal_status``,                        the lost-slot check (before 13 a slot keeps
          ``pg_current_snapshot()``                                   its WAL); the snapshot's xmin (txid_* before)
14        pgoutput's ``messages`` option                              heartbeat records; before 14 a heartbeat
                                                                      still moves the slot but writes no record
15        ``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')``         creating the slot; the older form before
========  ==========================================================  =============================================
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg2.extensions import connection as Connection

from cdckit.errors import SourcePreconditionError

MINIMUM_VERSION = 100000


@dataclass(frozen=True, order=True)
class ServerVersion:
    """A server's ``server_version_num``: ``ServerVersion(150004)`` is 15.4, ``ServerVersion(90624)`` 9.6.24.

    >>> ServerVersion(140011).delivers_logical_messages, str(ServerVersion(140011))
    (True, '14.11')
    """

    number: int

    @classmethod
    def of(cls, conn: Connection) -> ServerVersion:
        """The version of the server ``conn`` (a plain or a replication connection) is connected to."""
        return cls(int(conn.server_version))

    def __str__(self) -> str:
        major = self.number // 10000
        if major >= 10:
            return f"{major}.{self.number % 10000}"
        return f"{major}.{self.number // 100 % 100}.{self.number % 100}"

    @property
    def can_advance_slot(self) -> bool:
        """``pg_replication_slot_advance`` exists (11+)."""
        return self.number >= 110000

    @property
    def can_copy_slot(self) -> bool:
        """``pg_copy_logical_replication_slot`` exists (12+)."""
        return self.number >= 120000

    @property
    def has_generated_columns(self) -> bool:
        """``pg_attribute.attgenerated`` exists (12+)."""
        return self.number >= 120000

    @property
    def reports_slot_wal_status(self) -> bool:
        """``pg_replication_slots.wal_status`` exists (13+); before, a slot keeps all the WAL it needs."""
        return self.number >= 130000

    @property
    def publishes_via_partition_root(self) -> bool:
        """Publications take ``publish_via_partition_root`` (13+): a partitioned table's changes can arrive under
        its own name instead of its partitions'."""
        return self.number >= 130000

    @property
    def has_pg_snapshot_functions(self) -> bool:
        """``pg_current_snapshot()`` and ``pg_snapshot_xmin`` exist (13+); before, their ``txid_*`` forms."""
        return self.number >= 130000

    @property
    def delivers_logical_messages(self) -> bool:
        """pgoutput takes the ``messages`` option and delivers logical decoding messages (14+)."""
        return self.number >= 140000

    @property
    def takes_replication_command_options(self) -> bool:
        """Replication commands take parenthesised options, ``(SNAPSHOT 'export')`` (15+)."""
        return self.number >= 150000


def check_supported(version: ServerVersion, host: str) -> None:
    """Refuse a server older than cdckit's floor, naming its version and what it lacks."""
    if version.number < MINIMUM_VERSION:
        raise SourcePreconditionError(
            f"{host} runs PostgreSQL {version}, but cdckit needs PostgreSQL 10 or later: logical replication with "
            f"the pgoutput plugin and publications, which cdckit reads, arrived in 10; upgrade the server")
