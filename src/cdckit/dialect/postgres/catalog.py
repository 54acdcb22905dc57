"""What cdckit needs to know of the source catalog: server settings, captured tables, columns and keys."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2.extensions import connection as Connection

from cdckit.dialect.postgres.server_version import ServerVersion, check_supported
from cdckit.errors import SourcePreconditionError, TableNotFoundError
from cdckit.formats.debezium.column_mappers import emitted_key_columns, parse_message_key_columns
from cdckit.formats.debezium.postgres_types import ColumnType

log = logging.getLogger("cdckit")
_TOLD_KEYLESS: set[str] = set()  # keyless tables already reported by this process

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")

# The rows of table ``c`` (pg_class) as PostgreSQL's planner estimates them (estimate_rel_size): the table's pages now
# times the rows per page VACUUM or ANALYZE last saw; for a table neither has seen yet (reltuples -1 since PostgreSQL
# 14, relpages 0 before) the rows per page its columns' widths allow (a page header of 24 bytes; a row's header 24,
# its line pointer 4; 32 bytes for a value of variable length). A partitioned table's root holds no rows itself.
ESTIMATED_ROWS_SQL = """(CASE WHEN c.relkind = 'p' THEN GREATEST(c.reltuples, 0) ELSE
  floor(pg_relation_size(c.oid) / current_setting('block_size')::float8) *
  CASE WHEN c.relpages > 0 AND c.reltuples >= 0 THEN c.reltuples / c.relpages
  ELSE (current_setting('block_size')::float8 - 24) / (28 + (
    SELECT COALESCE(sum(CASE WHEN a.attlen > 0 THEN a.attlen ELSE 32 END), 0) FROM pg_attribute a
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)) END END)::bigint"""


@dataclass(frozen=True)
class TableInfo:
    schema: str
    name: str
    oid: int
    columns: tuple[ColumnType, ...]
    key_columns: tuple[str, ...]
    replica_identity: str  # d, n, f, i
    estimated_rows: int = 0
    column_filter: tuple[str, ...] | None = None  # emitted columns after column include/exclude (None = all)
    # Generated columns (PostgreSQL 12+): a snapshot reads them, as Debezium's does, while pgoutput leaves them
    # out of the stream's tuples (and Relation messages).
    generated_columns: tuple[str, ...] = ()
    partitioned: bool = False  # a partitioned table's root (its rows live in its partitions)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    def emitted_columns(self) -> tuple[ColumnType, ...]:
        if self.column_filter is None:
            return self.columns
        return tuple(col for col in self.columns if col.name in self.column_filter)


def check_server(conn: Connection, host: str) -> str:
    """Fail clearly when the server cannot do logical decoding (too old, or not set up for it); returns the server
    version string."""
    check_supported(ServerVersion.of(conn), host)
    with conn.cursor() as cur:
        cur.execute("SELECT current_setting('wal_level'), current_setting('server_version'), "
                    "current_setting('max_replication_slots')")
        wal_level, version, max_slots = cur.fetchone()
    conn.commit()
    if wal_level != "logical":
        raise SourcePreconditionError(
            f"wal_level is '{wal_level}' on {host}, but logical decoding needs 'logical'; run "
            f"ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL (on Amazon RDS set "
            f"rds.logical_replication = 1 in the parameter group)")
    if int(max_slots) < 1:
        raise SourcePreconditionError(f"max_replication_slots is 0 on {host}; set it to at least 1 and restart")
    return str(version)


def _matches(patterns: Sequence[str], text: str) -> bool:
    return any(re.fullmatch(pattern, text, flags=re.IGNORECASE) for pattern in patterns)


def select_tables(candidates: Sequence[tuple[str, str]], options: Mapping[str, str]) -> list[tuple[str, str]]:
    """Apply Debezium's anchored, case-insensitive schema/table include and exclude lists.

    The tables come in the order Debezium snapshots them (RelationalSnapshotChangeEventSource): for each
    ``table.include.list`` entry in turn, the tables it matches sorted by ``schema.table``, each table once."""
    def listed(name: str) -> list[str]:
        return [item.strip() for item in options.get(name, "").split(",") if item.strip()]

    schema_in, schema_out = listed("schema.include.list"), listed("schema.exclude.list")
    table_in, table_out = listed("table.include.list"), listed("table.exclude.list")
    chosen = []
    for schema, table in candidates:
        qualified = f"{schema}.{table}"
        if schema_in and not _matches(schema_in, schema):
            continue
        if schema_out and _matches(schema_out, schema):
            continue
        if table_in and not _matches(table_in, qualified):
            continue
        if table_out and _matches(table_out, qualified):
            continue
        chosen.append((schema, table))
    ordered: dict[tuple[str, str], None] = {}
    for pattern in table_in or [".*"]:
        for schema, table in sorted(chosen, key=lambda found: f"{found[0]}.{found[1]}"):
            if re.fullmatch(pattern, f"{schema}.{table}", flags=re.IGNORECASE):
                ordered.setdefault((schema, table))
    return list(ordered)


def captured_names(conn: Connection, options: Mapping[str, str]) -> list[tuple[str, str]]:
    """The (schema, table) names the include and exclude lists capture now, in ``select_tables``'s order; none is an
    answer too (unlike ``discover_tables``)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND n.nspname <> ALL(%s) "
            "AND n.nspname NOT LIKE 'pg\\_temp\\_%%' AND n.nspname NOT LIKE 'pg\\_toast%%' "
            "ORDER BY n.nspname, c.relname", (list(SYSTEM_SCHEMAS),))
        candidates = [(str(s), str(t)) for s, t in cur.fetchall()]
    return select_tables(candidates, options)


def discover_tables(conn: Connection, options: Mapping[str, str], *, tell: bool = True) -> list[TableInfo]:
    """The captured tables, in the order Debezium snapshots them (``select_tables``), with columns and keys.
    ``tell``: warn of a table without a key (once per process; the job's driver tells, not its Spark workers).

    Partitions are tables like any other, as Debezium captures them (each on its own topic); a partitioned
    table's root is one too. A table without a primary key is captured with a null key, as Debezium does.
    Raises ``TableNotFoundError`` when a ``table.include.list`` entry matches nothing.
    """
    chosen = captured_names(conn, options)
    dbname = options.get("database.dbname", "")
    for entry in [item.strip() for item in options.get("table.include.list", "").split(",") if item.strip()]:
        if not any(re.fullmatch(entry, f"{s}.{t}", flags=re.IGNORECASE) for s, t in chosen):
            raise TableNotFoundError(
                f"table.include.list entry '{entry}' matches no table in database '{dbname}'; check the "
                f"schema.table spelling (entries are anchored regular expressions) or create the table first")
    if not chosen:
        raise TableNotFoundError(f"no table in database '{dbname}' matches the include/exclude lists; "
                                 f"check table.include.list and schema.include.list")
    # No commit here: callers may be reading inside an exported snapshot's transaction.
    tables = load_tables(conn, chosen, options)
    keys = parse_message_key_columns(options.get("message.key.columns", ""))
    for table in tables if tell else ():
        if emitted_key_columns(keys, table.qualified_name, table.key_columns):
            continue
        # As Debezium: a table without a primary key is captured with a null key (message.key.columns names one).
        if table.qualified_name in _TOLD_KEYLESS:
            continue
        _TOLD_KEYLESS.add(table.qualified_name)
        if table.replica_identity in ("d", "n"):
            log.warning("table %s has no primary key and REPLICA IDENTITY %s: its events have a null key, and "
                        "while it is in a publication PostgreSQL refuses UPDATE and DELETE on it; run ALTER TABLE "
                        "%s REPLICA IDENTITY FULL (or add a primary key)", table.qualified_name,
                        "DEFAULT" if table.replica_identity == "d" else "NOTHING", table.qualified_name)
        else:
            log.info("table %s has no primary key: its events have a null key (name key columns with "
                     "message.key.columns)", table.qualified_name)
    return tables


# The enum labels are those of the column's type or, for an array of an enum, of its element type.
_COLUMNS_SQL = """
SELECT a.attrelid, a.attname, NOT a.attnotnull, bt.oid, bt.typname,
       CASE WHEN t.typtype = 'd' AND t.typtypmod <> -1 THEN t.typtypmod ELSE a.atttypmod END,
       (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_enum e
        WHERE e.enumtypid = CASE WHEN bt.typcategory = 'A' THEN bt.typelem ELSE bt.oid END),
       {generated},
       CASE WHEN t.typtype <> 'd' THEN pg_get_expr(d.adbin, d.adrelid) END
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
"""
# A column's DEFAULT is read as Debezium reads it (pgjdbc's getColumns: pg_get_expr of pg_attrdef); Debezium finds
# no parser for a domain type's name, so a domain column has none.

_KEY_SQL = """
SELECT i.indrelid, a.attname FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = ANY(%s) AND i.indisprimary ORDER BY i.indrelid, k.ord
"""


def load_table(conn: Connection, schema: str, table: str, options: Mapping[str, str]) -> TableInfo:
    return load_tables(conn, [(schema, table)], options)[0]


def load_tables(conn: Connection, names: Sequence[tuple[str, str]], options: Mapping[str, str]) -> list[TableInfo]:
    """The (schema, table) tables named, in that order, with columns and keys: three statements for them all."""
    if not names:
        return []
    with conn.cursor() as cur:
        cur.execute(f"SELECT n.nspname, c.relname, c.oid, c.relreplident, {ESTIMATED_ROWS_SQL}, c.relkind = 'p' "
                    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "JOIN unnest(%s::text[], %s::text[]) AS w(s, t) ON n.nspname = w.s AND c.relname = w.t",
                    ([schema for schema, _ in names], [table for _, table in names]))
        found = {(str(row[0]), str(row[1])): row[2:] for row in cur.fetchall()}
        for schema, table in names:
            if (schema, table) not in found:
                raise TableNotFoundError(f"table {schema}.{table} does not exist in database "
                                         f"'{options.get('database.dbname', '')}'")
        oids = [int(found[name][0]) for name in names]
        generated_sql = "a.attgenerated <> ''" if ServerVersion.of(conn).has_generated_columns else "false"
        cur.execute(_COLUMNS_SQL.format(generated=generated_sql), (oids,))
        described: dict[int, list[tuple[Any, ...]]] = {}
        for row in cur.fetchall():
            described.setdefault(int(row[0]), []).append(row[1:])
        cur.execute(_KEY_SQL, (oids,))
        keys: dict[int, list[str]] = {}
        for relid, name in cur.fetchall():
            keys.setdefault(int(relid), []).append(str(name))
    tables = []
    for (schema, table), oid in zip(names, oids, strict=True):
        _, replica_identity, estimated_rows, partitioned = found[(schema, table)]
        rows = described.get(oid, [])
        columns = tuple(
            ColumnType(name=str(name), type_name=str(type_name), type_oid=int(type_oid), modifier=int(modifier),
                       optional=pg_bool(optional), enum_values=_enum_labels(labels),
                       default_expression=None if default is None else str(default))
            for name, optional, type_oid, type_name, modifier, labels, _, default in rows)
        generated = tuple(str(row[0]) for row in rows if pg_bool(row[6]))
        key_columns = tuple(keys.get(oid, []))
        tables.append(TableInfo(schema, table, oid, columns, key_columns, str(replica_identity), int(estimated_rows),
                                column_filter=_column_filter(schema, table, columns, key_columns, options),
                                generated_columns=generated, partitioned=pg_bool(partitioned)))
    return tables


def pg_bool(value: object) -> bool:
    """A boolean column as the raw-text typecaster ('t'/'f') or psycopg2 (True/False) returns it."""
    return value is True or value in ("t", "true")


def _enum_labels(labels: object) -> tuple[str, ...] | None:
    if labels is None:
        return None
    if isinstance(labels, str):  # raw text form '{a,b}' when the array is not cast by the driver
        inner = labels.strip("{}")
        return tuple(part.strip('"') for part in inner.split(",")) if inner else ()
    return tuple(str(label) for label in labels)  # type: ignore[attr-defined]


def _column_filter(schema: str, table: str, columns: Sequence[ColumnType], key_columns: Sequence[str],
                   options: Mapping[str, str]) -> tuple[str, ...] | None:
    """Columns emitted in ``before``/``after``; key columns stay in the key whatever the lists say."""
    include = [p.strip() for p in options.get("column.include.list", "").split(",") if p.strip()]
    exclude = [p.strip() for p in options.get("column.exclude.list", "").split(",") if p.strip()]
    if not include and not exclude:
        return None
    kept = []
    for column in columns:
        qualified = f"{schema}.{table}.{column.name}"
        if include and not _matches(include, qualified):
            continue
        if exclude and _matches(exclude, qualified):
            continue
        kept.append(column.name)
    return tuple(kept)


_TYPES_SQL = """
SELECT t.oid, bt.oid, bt.typname, CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE -1 END,
       (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_enum e
        WHERE e.enumtypid = CASE WHEN bt.typcategory = 'A' THEN bt.typelem ELSE bt.oid END),
       t.typtype = 'd'
FROM pg_type t JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE t.oid = ANY(%s)
"""


def table_from_relation(conn: Connection, namespace: str, name: str, relation_id: int,
                        columns: Sequence[tuple[str, int, int]], options: Mapping[str, str]) -> TableInfo:
    """The table as a pgoutput Relation message describes it at its point in the stream (names, types and
    modifiers from the message; type names, nullability, defaults and the key from the catalog, as Debezium reads
    them when the message arrives), so events are formatted with the structure they were written with."""
    with conn.cursor() as cur:
        cur.execute(_TYPES_SQL, ([oid for _, oid, _ in columns],))
        types = {int(row[0]): (int(row[1]), str(row[2]), int(row[3]), _enum_labels(row[4]), pg_bool(row[5]))
                 for row in cur.fetchall()}
        cur.execute("SELECT a.attname, a.attnotnull, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
                    "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                    "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped", (relation_id,))
        catalog = {str(n): (pg_bool(v), None if default is None else str(default)) for n, v, default in cur.fetchall()}
        cur.execute(_KEY_SQL, ([relation_id],))
        key = tuple(str(row[1]) for row in cur.fetchall())
        cur.execute("SELECT c.relreplident FROM pg_class c WHERE c.oid = %s", (relation_id,))
        found = cur.fetchone()
    described = []
    for column_name, type_oid, modifier in columns:
        base_oid, type_name, domain_modifier, labels, domain = types.get(type_oid, (type_oid, "unknown", -1, None,
                                                                                    False))
        not_null, default = catalog.get(column_name, (False, None))
        described.append(ColumnType(column_name, type_name, base_oid,
                                    domain_modifier if domain_modifier != -1 else modifier,
                                    not not_null, labels, None if domain else default))
    names = [c.name for c in described]
    return TableInfo(namespace, name, relation_id, tuple(described), tuple(k for k in key if k in names),
                     str(found[0]) if found else "d",
                     column_filter=_column_filter(namespace, name, described, key, options))


_ROLE_SQL = """
SELECT r.rolsuper, r.rolreplication,
       EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = 'rds_replication'
               AND pg_has_role(r.oid, g.oid, 'MEMBER'))
FROM pg_roles r WHERE r.rolname = current_user
"""

# Per captured table (by oid, in capture order): may the user read it (SELECT, and USAGE on its schema), and would
# row-level security filter what it reads. Row security applies to a user who is not a superuser, has no BYPASSRLS,
# and does not own the table (or the owner is forced): PostgreSQL's "Row Security Policies" page.
_ACCESS_SQL = """
SELECT c.oid, has_schema_privilege(c.relnamespace, 'USAGE') AND has_table_privilege(c.oid, 'SELECT'),
       c.relrowsecurity AND (c.relforcerowsecurity OR NOT pg_has_role(c.relowner, 'USAGE'))
       AND NOT (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user)
FROM unnest(%s::oid[]) AS x(o) JOIN pg_class c ON c.oid = x.o
"""


def check_access(conn: Connection, options: Mapping[str, str], tables: Sequence[TableInfo]) -> list[str]:
    """What the user may do, checked before anything is created (``cdckit validate`` and every job's start):
    replication (the REPLICATION attribute, a superuser, or Amazon RDS's ``rds_replication`` role), a free
    replication slot when the job's does not exist yet, and ``SELECT`` (with ``USAGE`` on its schema) on every
    captured table, which the snapshot reads (the privileges PostgreSQL's "CREATE_REPLICATION_SLOT" and Debezium's
    "Setting up permissions" sections list). Returns each problem as one line that names the fix (none: all
    there)."""
    user = options.get("database.user", "")
    problems = []
    with conn.cursor() as cur:
        cur.execute(_ROLE_SQL)
        superuser, replication, rds_replication = cur.fetchone() or (False, False, False)
        if not (pg_bool(superuser) or pg_bool(replication) or pg_bool(rds_replication)):
            problems.append(f"user {user!r} may not use logical replication (no REPLICATION attribute); run ALTER "
                            f"ROLE {_role(user)} WITH REPLICATION as a superuser (Amazon RDS and Aurora: GRANT "
                            f"rds_replication TO {_role(user)})")
        slot_name = options.get("slot.name", "debezium")
        cur.execute("SELECT count(*), bool_or(slot_name = %s), current_setting('max_replication_slots')::int "
                    "FROM pg_replication_slots", (slot_name,))
        used, exists, most = cur.fetchone() or (0, False, 0)
        if not pg_bool(exists) and int(used) >= int(most):
            problems.append(f"all {most} replication slots (max_replication_slots) are in use, so slot "
                            f"{slot_name!r} cannot be created; drop one nothing reads any more (SELECT slot_name, "
                            f"active FROM pg_replication_slots; SELECT pg_drop_replication_slot('<name>')) or raise "
                            f"max_replication_slots and restart PostgreSQL")
        cur.execute(_ACCESS_SQL, ([t.oid for t in tables],))
        access = {int(oid): (pg_bool(readable), pg_bool(filtered)) for oid, readable, filtered in cur.fetchall()}
    unreadable = [(t.schema, t.name) for t in tables if not access.get(t.oid, (True, False))[0]]
    hidden = [t.qualified_name for t in tables if access.get(t.oid, (True, False))[1]]
    conn.commit()
    if hidden:
        problems.append(f"row-level security applies to user {user!r} on {', '.join(hidden)}: its policies would "
                        f"hide rows from the snapshot, and their events would be missing; run ALTER ROLE "
                        f"{_role(user)} BYPASSRLS as a superuser, or leave {'it' if len(hidden) == 1 else 'them'} out "
                        f"with table.exclude.list")
    if unreadable:
        names = [f"{schema}.{name}" for schema, name in unreadable]
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        grants = "; ".join(f"GRANT USAGE ON SCHEMA {_role(schema)} TO {_role(user)}; GRANT SELECT ON ALL TABLES IN "
                           f"SCHEMA {_role(schema)} TO {_role(user)}"
                           for schema in dict.fromkeys(schema for schema, _ in unreadable))
        problems.append(f"user {user!r} may not SELECT {shown}, which the snapshot reads; grant it ({grants}) or "
                        f"leave {'it' if len(unreadable) == 1 else 'them'} out with table.exclude.list")
    return problems


def _role(name: str) -> str:
    """A role name as a statement the user copies writes it (quoted only where it must be)."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'
