"""Publications and the logical replication slot: create, inspect, and acknowledge (advance)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql
from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres.catalog import TableInfo, pg_bool
from cdckit.dialect.postgres.connection import connect
from cdckit.dialect.postgres.lsn import format_lsn, parse_lsn
from cdckit.dialect.postgres.server_version import ServerVersion
from cdckit.errors import ReplicationSlotError, SourcePreconditionError


@dataclass(frozen=True)
class SlotStatus:
    slot_name: str
    plugin: str
    database: str
    active: bool
    confirmed_flush_lsn: int
    restart_lsn: int
    # reserved, extended, unreserved, or lost (the WAL it needs was removed); before PostgreSQL 13 a slot keeps all
    # the WAL it needs, so it is always reserved
    wal_status: str = "reserved"


@dataclass
class ExportedSlot:
    """A slot just created with an exported snapshot; the snapshot lives while ``connection`` stays open."""

    slot_name: str
    consistent_point: int
    snapshot_name: str
    connection: Connection

    def release(self) -> None:
        """End the exported snapshot (closing the replication connection); the slot itself stays."""
        self.connection.close()


def ensure_publication(conn: Connection, options: Mapping[str, str], tables: Sequence[TableInfo]) -> None:
    """Create or check the publication per ``publication.autocreate.mode``; every captured table must be in it (and
    ``filtered`` adds the signalling table, ``signal.data.collection``, too).

    A captured partitioned table (its root) needs ``publish_via_partition_root``, or its changes arrive under its
    partitions' names and never under its own: a publication cdckit creates or sets (``filtered``) gets it."""
    name = options.get("publication.name", "dbz_publication")
    mode = options.get("publication.autocreate.mode", "all_tables")
    roots = [t for t in tables if t.partitioned]
    publish_via_root = bool(roots) and ServerVersion.of(conn).publishes_via_partition_root
    if roots and not publish_via_root:
        raise SourcePreconditionError(
            f"{', '.join(t.qualified_name for t in roots)}: before PostgreSQL 13 a partitioned table cannot be "
            f"published; capture its partitions instead (name them in table.include.list)")
    via_root = sql.SQL(" WITH (publish_via_partition_root = true)" if publish_via_root else "")
    with conn.cursor() as cur:
        cur.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s", (name,))
        row = cur.fetchone()
        names = [(t.schema, t.name) for t in tables]
        signals = options.get("signal.data.collection", "").strip().rpartition(".")
        if signals[0] and (signals[0], signals[2]) not in names:  # its inserts are the signals (incremental.py)
            names.append((signals[0], signals[2]))
        table_list = sql.SQL(", ").join(sql.Identifier(schema, name) for schema, name in names)
        try:
            if row is None and mode == "disabled":
                raise SourcePreconditionError(
                    f"publication '{name}' does not exist and publication.autocreate.mode is disabled; create it "
                    f"(CREATE PUBLICATION {name} FOR TABLE ...) or set publication.autocreate.mode=filtered")
            if row is None and mode == "all_tables":
                cur.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(sql.Identifier(name)))
            elif row is None and mode == "filtered":
                cur.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}{}").format(sql.Identifier(name), table_list,
                                                                                    via_root))
            elif row is not None and mode == "filtered" and not pg_bool(row[0]):  # not FOR ALL TABLES
                cur.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(sql.Identifier(name), table_list))
                if publish_via_root:
                    cur.execute(sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)").format(
                        sql.Identifier(name)))
        except psycopg2.errors.InsufficientPrivilege as exc:
            conn.rollback()
            raise SourcePreconditionError(
                f"user {options.get('database.user')!r} may not create or alter publication '{name}' "
                f"({exc.pgerror.strip() if exc.pgerror else exc}); create it as a superuser or table owner, "
                f"or grant the privileges listed in the README") from None
        cur.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,))
        published = {(str(s), str(t)) for s, t in cur.fetchall()}
    conn.commit()
    unpublished_roots = [t.qualified_name for t in roots if (t.schema, t.name) not in published]
    if unpublished_roots:
        raise unpublished_roots_error(name, unpublished_roots)
    missing = [t.qualified_name for t in tables if (t.schema, t.name) not in published]
    if missing:
        raise unpublished_error(name, missing)


_PUBLICATION_RIGHTS_SQL = """
SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
       has_database_privilege(current_database(), 'CREATE'),
       (SELECT pg_has_role(p.pubowner, 'USAGE') FROM pg_publication p WHERE p.pubname = %s),
       (SELECT puballtables FROM pg_publication WHERE pubname = %s),
       (SELECT json_agg(c.oid ORDER BY x.i)::text FROM unnest(%s::oid[]) WITH ORDINALITY AS x(o, i)
        JOIN pg_class c ON c.oid = x.o WHERE NOT pg_has_role(c.relowner, 'USAGE')),
       (SELECT json_agg(schemaname || '.' || tablename)::text FROM pg_publication_tables WHERE pubname = %s)
"""


def plan_publication(conn: Connection, options: Mapping[str, str], tables: Sequence[TableInfo]) -> str:
    """What ``ensure_publication`` will do, checked without doing it (``cdckit validate`` and every job's start, so
    that a job refused for its publication has created nothing): returns it in words, or raises
    ``SourcePreconditionError`` naming the fix. The privileges are those PostgreSQL's CREATE PUBLICATION and ALTER
    PUBLICATION pages list: FOR ALL TABLES needs a superuser; creating one needs CREATE on the database; adding a
    table needs its ownership; altering one needs the publication's ownership."""
    name = options.get("publication.name", "dbz_publication")
    mode = options.get("publication.autocreate.mode", "all_tables")
    user = options.get("database.user", "")
    with conn.cursor() as cur:
        cur.execute(_PUBLICATION_RIGHTS_SQL, (name, name, [t.oid for t in tables], name))
        superuser, create, owns_publication, all_tables, not_owned, published = cur.fetchone()
    conn.commit()
    exists = all_tables is not None
    unowned = set(json.loads(not_owned)) if not_owned else set()
    not_owned = [t.qualified_name for t in tables if t.oid in unowned]
    published = json.loads(published) if published else []
    signals = options.get("signal.data.collection", "").strip()
    if not exists and mode == "disabled":
        raise SourcePreconditionError(
            f"publication '{name}' does not exist and publication.autocreate.mode is disabled; create it "
            f"(CREATE PUBLICATION {name} FOR TABLE ...) or set publication.autocreate.mode=filtered")
    if not exists and mode == "all_tables":
        if not pg_bool(superuser):
            raise SourcePreconditionError(
                f"publication '{name}' does not exist, and creating it FOR ALL TABLES "
                f"(publication.autocreate.mode=all_tables) needs a superuser, which user {user!r} is not; create it "
                f"as a superuser, or set publication.autocreate.mode=filtered to create it FOR the captured tables")
        return f"publication '{name}' will be created FOR ALL TABLES"
    if not exists:  # filtered
        if not pg_bool(create) or not_owned:
            why = (f"user {user!r} has no CREATE privilege on the database" if not pg_bool(create) else
                   f"adding a table needs its ownership, and user {user!r} does not own {', '.join(not_owned)}")
            raise SourcePreconditionError(
                f"publication '{name}' does not exist and cannot be created FOR the captured tables ({why}); "
                f"create it as the tables' owner (CREATE PUBLICATION {name} FOR TABLE ...) and set "
                f"publication.autocreate.mode=disabled, or grant the privileges listed in the README")
        return f"publication '{name}' will be created FOR TABLE {', '.join(t.qualified_name for t in tables)}"
    if mode == "filtered" and not pg_bool(all_tables):
        current = set(published or [])
        wanted = {t.qualified_name for t in tables} | ({signals} if signals else set())
        if current == wanted:
            return f"publication '{name}' publishes the {len(tables)} captured tables"
        if not pg_bool(owns_publication) or not_owned:
            why = (f"user {user!r} does not own it" if not pg_bool(owns_publication) else
                   f"adding a table needs its ownership, and user {user!r} does not own {', '.join(not_owned)}")
            raise SourcePreconditionError(
                f"publication '{name}' must be set to the captured tables (publication.autocreate.mode=filtered) "
                f"but cannot be altered ({why}); alter it as its owner (ALTER PUBLICATION {name} SET TABLE ...) and "
                f"set publication.autocreate.mode=disabled")
        return f"publication '{name}' will be set to the {len(tables)} captured tables"
    missing = [t for t in tables if not pg_bool(all_tables) and t.qualified_name not in set(published or [])]
    if any(t.partitioned for t in missing):
        raise unpublished_roots_error(name, [t.qualified_name for t in missing if t.partitioned])
    if missing:
        raise unpublished_error(name, [t.qualified_name for t in missing])
    return f"publication '{name}' publishes the captured tables"


def unpublished_roots_error(name: str, roots: Sequence[str]) -> SourcePreconditionError:
    """Captured partitioned tables whose changes a publication sends under their partitions' names."""
    what = "is a partitioned table" if len(roots) == 1 else "are partitioned tables"
    return SourcePreconditionError(
        f"{', '.join(roots)} {what} whose changes publication '{name}' sends under the partitions' "
        f"names, so they would never arrive under its own; run ALTER PUBLICATION {name} SET "
        f"(publish_via_partition_root = true) (PostgreSQL 13+), "
        f"or capture the partitions instead (name them in table.include.list)")


def unpublished_error(name: str, missing: Sequence[str]) -> SourcePreconditionError:
    """Captured tables a publication cdckit may not change leaves out."""
    return SourcePreconditionError(
        f"publication '{name}' does not include {', '.join(missing)}, so their changes would never arrive; "
        f"add them to it (ALTER PUBLICATION {_identifier(name)} ADD TABLE "
        f"{', '.join(_table_identifier(t) for t in missing)}), let cdckit set its tables "
        f"(publication.autocreate.mode=filtered), or leave them out of the capture (narrow table.include.list, or "
        f"name them in table.exclude.list)")


def _identifier(name: str) -> str:
    """A name as SQL the user copies writes it: quoted only where it must be."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'


def _table_identifier(qualified: str) -> str:
    schema, _, table = qualified.partition(".")
    return f"{_identifier(schema)}.{_identifier(table)}"


def slot_status(conn: Connection, slot_name: str) -> SlotStatus | None:
    wal_status = "wal_status" if ServerVersion.of(conn).reports_slot_wal_status else "NULL"
    with conn.cursor() as cur:
        cur.execute(f"SELECT plugin, database, active, confirmed_flush_lsn::text, restart_lsn::text, {wal_status} "
                    f"FROM pg_replication_slots WHERE slot_name = %s", (slot_name,))
        row = cur.fetchone()
    conn.commit()
    if row is None:
        return None
    plugin, database, active, confirmed, restart, wal_status = row
    return SlotStatus(slot_name, str(plugin), str(database), active in (True, "t", "true"),
                      parse_lsn(confirmed) if confirmed else 0, parse_lsn(restart) if restart else 0,
                      str(wal_status or "reserved"))


def slot_retained_wal(conn: Connection, slot_name: str) -> int | None:
    """Bytes of WAL the server keeps for the slot (from its restart LSN to the current WAL position), or None when
    the slot is missing or the server cannot tell (a standby, YugabyteDB)."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots "
                        "WHERE slot_name = %s", (slot_name,))
            row = cur.fetchone()
        conn.commit()
    except psycopg2.Error:
        conn.rollback()
        return None
    return int(row[0]) if row is not None and row[0] is not None else None


def slot_lost_error(slot_name: str, status: SlotStatus | None, checkpoint: str) -> ReplicationSlotError:
    """The error for a slot that can no longer give cdckit the changes its checkpoint continues from."""
    recovery = (f"to start over, re-snapshot: delete {checkpoint} (and the topics' or files' old events if you "
                f"want no overlap) and run `cdckit snapshot`, or `cdckit stream` with snapshot.mode=initial")
    if status is None:
        return ReplicationSlotError(
            f"replication slot '{slot_name}' no longer exists (it was dropped, or the server was replaced), so the "
            f"changes since cdckit's checkpoint are lost to it; {recovery}")
    return ReplicationSlotError(
        f"replication slot '{slot_name}' can no longer provide the WAL cdckit's checkpoint continues from "
        f"(wal_status {status.wal_status}: the server removed it, e.g. past max_slot_wal_keep_size), so the changes "
        f"since then are lost to cdckit; {recovery}")


def check_slot(status: SlotStatus, options: Mapping[str, str]) -> None:
    dbname = options["database.dbname"]
    if status.database != dbname:
        raise ReplicationSlotError(
            f"replication slot '{status.slot_name}' belongs to database '{status.database}', not '{dbname}'; "
            f"slot names are cluster-wide: choose another slot.name")
    if status.plugin != options.get("plugin.name", "pgoutput"):
        raise ReplicationSlotError(
            f"replication slot '{status.slot_name}' uses plugin '{status.plugin}', not "
            f"'{options.get('plugin.name', 'pgoutput')}'; choose another slot.name")


def create_slot_exporting_snapshot(options: Mapping[str, str]) -> ExportedSlot:
    """Create the slot over a replication connection and export its snapshot (kept until ``release()``)."""
    slot_name = options.get("slot.name", "debezium")
    conn = connect(options, replication=True, raw_text=False)
    try:
        with conn.cursor() as cur:
            cur.execute(create_slot_command(slot_name, options.get("plugin.name", "pgoutput"),
                                            ServerVersion.of(conn)))
            row = cur.fetchone()
    except psycopg2.Error as exc:
        conn.close()
        detail = (exc.pgerror or str(exc)).strip()
        if "already exists" in detail:
            raise ReplicationSlotError(f"replication slot '{slot_name}' already exists; another connector may "
                                       f"own it: choose another slot.name") from None
        if "all replication slots are in use" in detail:
            raise ReplicationSlotError(
                f"cannot create replication slot '{slot_name}': all of the server's max_replication_slots are in "
                f"use; drop slots nothing reads any more (SELECT slot_name, active FROM pg_replication_slots) or "
                f"raise max_replication_slots and restart PostgreSQL") from None
        if "permission denied" in detail or "must be superuser or replication role" in detail:
            raise SourcePreconditionError(
                f"user {options.get('database.user')!r} may not create replication slots ({detail}); "
                f"ALTER ROLE {options.get('database.user')} WITH REPLICATION") from None
        raise ReplicationSlotError(f"creating replication slot '{slot_name}' failed: {detail}") from None
    assert row is not None
    return ExportedSlot(slot_name, parse_lsn(str(row[1])), str(row[2]), conn)


def create_slot_command(slot_name: str, plugin: str, version: ServerVersion) -> str:
    """The replication command that creates a logical slot exporting its snapshot, in the form ``version`` knows:
    options in parentheses from PostgreSQL 15 on, the ``EXPORT_SNAPSHOT`` keyword before (15 accepts both)."""
    if version.takes_replication_command_options:
        return f"CREATE_REPLICATION_SLOT {sql_identifier(slot_name)} LOGICAL {plugin} (SNAPSHOT 'export')"
    return f"CREATE_REPLICATION_SLOT {sql_identifier(slot_name)} LOGICAL {plugin} EXPORT_SNAPSHOT"


def create_slot(conn: Connection, options: Mapping[str, str]) -> int:
    """Create the slot without a snapshot; returns its consistent point."""
    slot_name = options.get("slot.name", "debezium")
    with conn.cursor() as cur:
        cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, %s)",
                    (slot_name, options.get("plugin.name", "pgoutput")))
        row = cur.fetchone()
    conn.commit()
    assert row is not None
    return parse_lsn(str(row[0]))


def can_copy_slots(options: Mapping[str, str]) -> bool:
    """Whether the connector's database copies replication slots at all (YugabyteDB's cannot); whether this
    server's version can is ``slot_copy_refused``'s."""
    return not options.get("connector.class", "").endswith("YugabyteDBConnector")


def slot_copy_refused(conn: Connection) -> str | None:
    """Why this server cannot copy a replication slot (``copy_slot``), or None when it can."""
    version = ServerVersion.of(conn)
    return None if version.can_copy_slot else f"PostgreSQL {version} cannot copy a replication slot (12 and later can)"


def copy_slot(conn: Connection, slot_name: str, prefix: str) -> str:
    """A temporary copy of the slot, at its position (PostgreSQL 12 and later), named ``prefix`` and a random
    suffix; returns the name. The server drops it with this session, should ``drop_slot`` not run. Copying takes
    the slot's position without holding the slot."""
    copy = f"{prefix}_{uuid.uuid4().hex[:20]}"
    with conn.cursor() as cur:
        cur.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)", (slot_name, copy))
    conn.commit()
    return copy


def drop_slot(conn: Connection, slot_name: str) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (slot_name,))
    conn.commit()


_ADVANCE_SQL = """
SELECT pg_replication_slot_advance(slot_name, %(lsn)s::pg_lsn) FROM pg_replication_slots
WHERE slot_name = %(slot)s AND confirmed_flush_lsn < %(lsn)s::pg_lsn
"""
# PostgreSQL 10 has no pg_replication_slot_advance: consuming the slot's changes up to ``lsn`` confirms it just the
# same (decoding stops after the record that ends at ``lsn``). pgoutput needs the slot's publication; the output is
# only counted.
_CONSUME_SQL = """
SELECT (SELECT count(*) FROM pg_logical_slot_get_binary_changes(
            slot_name, %(lsn)s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', %(publication)s))
FROM pg_replication_slots
WHERE slot_name = %(slot)s AND confirmed_flush_lsn < %(lsn)s::pg_lsn
"""


def advance_slot(conn: Connection, slot_name: str, lsn: int, publication: str = "dbz_publication") -> bool:
    """Confirm everything up to ``lsn`` (the end of a commit record, or the slot's consistent point) as flushed so
    the server may release WAL; never moves backwards. ``publication`` (the slot's, ``publication.name``) serves
    PostgreSQL 10, which confirms by consuming the slot's changes."""
    parameters = {"lsn": format_lsn(lsn), "slot": slot_name, "publication": publication}
    with conn.cursor() as cur:
        cur.execute(_ADVANCE_SQL if ServerVersion.of(conn).can_advance_slot else _CONSUME_SQL, parameters)
        moved = cur.fetchone() is not None
    conn.commit()
    return moved


def sql_identifier(name: str) -> str:
    """Quote an identifier for the replication protocol's commands, which take no bind parameters."""
    return '"' + name.replace('"', '""') + '"'
