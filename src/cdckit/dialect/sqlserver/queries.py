"""Every T-SQL statement cdckit sends to SQL Server, in one place.

Values are always bound (``?``, pyodbc's parameter style); identifiers (database, schema, table, capture
instance, column names) come from SQL Server's own catalog and are quoted with ``quote_name``. Each statement
is a template whose ``{db}`` placeholder takes a quoted database name; tests parse every rendered statement
with sqlglot's T-SQL dialect, and the in-process model of SQL Server (``cdckit_lab.sqlserver_model``) answers
exactly these statements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def quote_name(name: str) -> str:
    """T-SQL QUOTENAME: ``[name]`` with ``]`` doubled."""
    return "[" + name.replace("]", "]]") + "]"


# -- server and database ----------------------------------------------------------------------------------
PRODUCT_VERSION = "SELECT CAST(SERVERPROPERTY('ProductVersion') AS nvarchar(128))"

DATABASE_CDC_ENABLED = "SELECT is_cdc_enabled FROM sys.databases WHERE name = ?"

AGENT_RUNNING = (
    "SELECT CASE WHEN dss.[status] = 4 THEN 1 ELSE 0 END AS is_running "
    "FROM sys.dm_server_services dss WHERE dss.[servicename] LIKE N'SQL Server Agent (%'"
)

# Minutes east of UTC of the server clock: commit times in cdc.lsn_time_mapping are local server time.
SERVER_UTC_OFFSET = "SELECT DATEPART(TZOFFSET, SYSDATETIMEOFFSET())"

MAX_LSN = "SELECT {db}.sys.fn_cdc_get_max_lsn()"

MIN_LSN = "SELECT {db}.sys.fn_cdc_get_min_lsn(?)"

# fn_cdc_get_min_lsn answers 0x00 both for a capture instance that does not exist and for one the login may not read
# (SELECT on every captured column, membership of the gating role); its row in cdc.change_tables tells them apart.
# start_lsn is NULL while the instance's low endpoint is not established (Microsoft's cdc.change_tables page).
CAPTURE_INSTANCE_START = "SELECT start_lsn FROM {db}.cdc.change_tables WHERE capture_instance = ?"

INCREMENT_LSN = "SELECT {db}.sys.fn_cdc_increment_lsn(?)"

# For the metrics: the capture job's last scan session (its latency: seconds from the last transaction it processed
# committing to the scan's end; session 0 is SQL Server's summary of all sessions) ...
CAPTURE_LATENCY = ("SELECT TOP (1) [latency] FROM {db}.sys.dm_cdc_log_scan_sessions WHERE [session_id] > 0 "
                   "ORDER BY [session_id] DESC")
# ... and the commit times of the oldest transaction the change tables still hold (at or after the cleanup job's
# low-water mark, a capture instance's minimum LSN) and of the last transaction at or before a position.
OLDEST_KEPT_TIME = "SELECT MIN([tran_end_time]) FROM {db}.cdc.lsn_time_mapping WHERE [start_lsn] >= ?"
POSITION_TIME = "SELECT MAX([tran_end_time]) FROM {db}.cdc.lsn_time_mapping WHERE [start_lsn] <= ?"

# -- capture instances and their columns ------------------------------------------------------------------
CAPTURE_INSTANCES = (
    "SELECT s.name AS schema_name, t.name AS table_name, ct.capture_instance, ct.start_lsn, ct.object_id, "
    "ct.source_object_id "
    "FROM {db}.cdc.change_tables ct "
    "JOIN {db}.sys.tables t ON t.object_id = ct.source_object_id "
    "JOIN {db}.sys.schemas s ON s.schema_id = t.schema_id "
    "ORDER BY s.name, t.name, ct.create_date"
)

# The columns as the capture instance recorded them: cdc.captured_columns (name, ordinal, type name) and the change
# table's own columns (length, precision, scale as captured); nullability and identity from the table, where the
# column still exists (NULL when it was dropped).
# A column of an alias type (CREATE TYPE dbo.Name FROM nvarchar(50)) is read as its base type: where
# cc.column_type names the alias, the base type of the source column's alias (sys.types.system_type_id) is taken.
CAPTURED_COLUMNS = (
    "SELECT cc.column_name, cc.column_ordinal, "
    "CASE WHEN sty.is_user_defined = 1 AND sty.is_assembly_type = 0 AND sty.name = cc.column_type "
    "THEN bty.name ELSE cc.column_type END AS column_type, ctc.max_length, ctc.precision, ctc.scale, "
    "src.is_nullable, src.is_identity "
    "FROM {db}.cdc.captured_columns cc "
    "JOIN {db}.sys.columns ctc ON ctc.object_id = cc.object_id AND ctc.name = cc.column_name "
    "LEFT JOIN {db}.sys.columns src ON src.object_id = ? AND src.name = cc.column_name "
    "LEFT JOIN {db}.sys.types sty ON sty.user_type_id = src.user_type_id "
    "LEFT JOIN {db}.sys.types bty ON bty.user_type_id = sty.system_type_id "
    "WHERE cc.object_id = ? ORDER BY cc.column_ordinal"
)

PRIMARY_KEY_COLUMNS = (
    "SELECT c.name FROM {db}.sys.indexes i "
    "JOIN {db}.sys.index_columns ic ON ic.object_id = i.object_id AND ic.index_id = i.index_id "
    "JOIN {db}.sys.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id "
    "WHERE i.object_id = ? AND i.is_primary_key = 1 ORDER BY ic.key_ordinal"
)

INDEX_COLUMNS = (
    "SELECT column_name FROM {db}.cdc.index_columns WHERE object_id = ? ORDER BY index_ordinal"
)

TABLE_COLUMNS = (  # an alias type as its base type, as CAPTURED_COLUMNS reads it
    "SELECT c.name, CASE WHEN ty.is_user_defined = 1 AND ty.is_assembly_type = 0 THEN bty.name ELSE ty.name END "
    "AS type_name, c.max_length, c.precision, c.scale, c.is_nullable "
    "FROM {db}.sys.columns c JOIN {db}.sys.types ty ON ty.user_type_id = c.user_type_id "
    "JOIN {db}.sys.types bty ON bty.user_type_id = c.system_type_id "
    "WHERE c.object_id = ? ORDER BY c.column_id"
)

# Capture instance rotation (schema evolution). System procedures called through the database's name run in
# that database.
ENABLE_TABLE = (
    "EXEC {db}.sys.sp_cdc_enable_table @source_schema = ?, @source_name = ?, @role_name = ?, "
    "@capture_instance = ?, @supports_net_changes = 0"
)
DISABLE_TABLE = "EXEC {db}.sys.sp_cdc_disable_table @source_schema = ?, @source_name = ?, @capture_instance = ?"

DDL_HISTORY = (
    "SELECT source_object_id, object_id, required_column_update, ddl_command, ddl_lsn, ddl_time "
    "FROM {db}.cdc.ddl_history WHERE ddl_lsn > ? ORDER BY ddl_lsn"
)

# -- changes ----------------------------------------------------------------------------------------------
# The n-th transaction after a position (max.iteration.transactions): commit LSNs from the time mapping.
NTH_TRANSACTION_LSN = (
    "SELECT MAX(start_lsn) FROM (SELECT TOP (?) start_lsn FROM {db}.cdc.lsn_time_mapping "
    "WHERE start_lsn > ? AND tran_id <> 0x00 ORDER BY start_lsn) AS next_transactions"
)

# Changes per commit LSN in a range (admission control, whole transactions only).
CHANGE_COUNTS = (
    "SELECT TOP (?) [__$start_lsn], COUNT(*) FROM {db}.cdc.{change_table} "
    "WHERE [__$start_lsn] > ? AND [__$start_lsn] <= ? AND [__$operation] <> 3 "
    "GROUP BY [__$start_lsn] ORDER BY [__$start_lsn]"
)


# Column types pyodbc cannot fetch (ODBC SQL types -151, SQL_SS_UDT: geometry, geography, hierarchyid; -150,
# SQL_SS_VARIANT: sql_variant) are read through a conversion the server applies, under the column's own name
# (docs/decisions/0032): a spatial value as its SRID (4 bytes, big-endian) followed by its well-known binary
# (STAsBinary), a hierarchyid as its text ('/1/3/', ToString), a sql_variant as nvarchar text.
CONVERTED_TYPES = ("geometry", "geography", "hierarchyid", "sql_variant")


def column_expression(column: str, type_name: str = "", prefix: str = "") -> str:
    """A select-list item reading ``column`` (of sys.types ``type_name``; ``prefix``: a table alias and a dot) as a
    value pyodbc can fetch."""
    quoted = quote_name(column)
    qualified = prefix + quoted
    kind = type_name.strip().lower()
    if kind in ("geometry", "geography"):
        return f"CAST({qualified}.STSrid AS binary(4)) + {qualified}.STAsBinary() AS {quoted}"
    if kind == "hierarchyid":
        return f"{qualified}.ToString() AS {quoted}"
    if kind == "sql_variant":
        return f"CAST({qualified} AS nvarchar(4000)) AS {quoted}"
    return qualified


def select_list(columns: Sequence[str], types: Mapping[str, str] | None = None, prefix: str = "") -> str:
    """The select list of ``columns``; ``types`` (column name -> sys.types name) chooses ``column_expression``'s
    conversions."""
    return ", ".join(column_expression(column, (types or {}).get(column, ""), prefix) for column in columns)


def changes_query(db: str, capture_instance: str, columns: Sequence[str], command_id: bool = True,
                  types: Mapping[str, str] | None = None) -> str:
    """All changes of a capture instance with commit LSN in [from, to], read from its change table, update pairs as
    rows 3 and 4, then ``__$command_id`` (NULL where the change table has none) and the commit time.

    A transaction's rows are ordered by ``__$command_id``, then ``__$seqval``: Microsoft added the column (KB 3030352)
    because ``__$seqval`` alone misorders the delete and insert rows of a deferred update, and
    ``cdc.fn_cdc_get_all_changes_<instance>`` does not return it. This is Debezium's ``data.query.mode=direct`` read
    (the change table WITH (NOLOCK), its commit times from ``cdc.lsn_time_mapping``), bounded on both sides so it is
    a range seek on the change table's clustered index. Change tables from before that update have no
    ``__$command_id`` (``command_id=False``): their rows can only be ordered by ``__$seqval``. ``types`` (column
    name -> sys.types name) chooses the conversions of ``column_expression``.
    """
    selected = select_list(columns, types, "ct.")
    order = "ct.[__$command_id], " if command_id else ""
    command = "ct.[__$command_id]" if command_id else "CAST(NULL AS int)"
    return (
        f"SELECT ct.[__$start_lsn], ct.[__$seqval], ct.[__$operation], ct.[__$update_mask], {selected}, "
        f"ltm.[tran_end_time] AS [__$commit_time], {command} AS [__$command_id] "
        f"FROM {db}.cdc.{change_table(capture_instance)} AS ct WITH (NOLOCK) "
        f"LEFT JOIN {db}.cdc.lsn_time_mapping AS ltm ON ltm.[start_lsn] = ct.[__$start_lsn] "
        f"WHERE ct.[__$start_lsn] >= ? AND ct.[__$start_lsn] <= ? "
        f"ORDER BY ct.[__$start_lsn], {order}ct.[__$seqval], ct.[__$operation]"
    )


# Whether a change table has the __$command_id column (SQL Server 2012-2016 before KB 3030352's update lack it).
COMMAND_ID_COLUMN = "SELECT COUNT(*) FROM {db}.sys.columns WHERE object_id = ? AND name = ?"


def change_table(capture_instance: str) -> str:
    return quote_name(f"{capture_instance}_CT")


# -- snapshot ---------------------------------------------------------------------------------------------
def select_rows(db: str, schema: str, table: str, columns: Sequence[str], key: Sequence[str],
                lower_bounded: bool, upper_bounded: bool, condition: str | None = None,
                types: Mapping[str, str] | None = None, key_types: Sequence[str] = ()) -> str:
    """The rows of one chunk in key order: those after its lower boundary key and up to its upper one
    (``keyset``; ``key_types``: the key columns' declarations, ``type_declaration``).

    ``condition`` is an incremental snapshot signal's ``additional-condition``: a boolean T-SQL expression a
    user with write access to the signal table supplied, checked to be one expression (``check_condition``).
    ``types`` (column name -> sys.types name) chooses the conversions of ``column_expression``.
    """
    selected = select_list(columns, types)
    conditions = [f"({condition})"] if condition else []
    if key and lower_bounded:
        conditions.append(keyset(key, key_types, ">"))
    if key and upper_bounded:
        conditions.append(keyset(key, key_types, "<="))
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    order = f" ORDER BY {', '.join(quote_name(k) for k in key)}" if key else ""
    return f"SELECT {selected} FROM {db}.{quote_name(schema)}.{quote_name(table)}{where}{order}"


def try_condition(db: str, schema: str, table: str, condition: str) -> str:
    """An empty read with a signal's (checked) additional condition: SQL Server compiles it, so an unknown column or a
    conversion the table's types refuse fails here, before any chunk is planned."""
    return f"SELECT TOP (0) 1 FROM {db}.{quote_name(schema)}.{quote_name(table)} WHERE ({condition})"


# Chunks of a snapshot are keyset ranges over the whole primary key, as Debezium's incremental snapshots read them
# (AbstractChunkQueryBuilder): boundaries are keys the server found in its own order (ORDER BY the key columns: the
# collation of a character column, uniqueidentifier's byte groups, dates as dates), each chunk holds the keys after its
# lower boundary and up to its upper one, and every boundary value is bound as a parameter cast to its column's type.
def type_declaration(type_name: str, max_length: int, precision: int, scale: int) -> str:
    """A column's type as CAST takes it, from ``sys.columns`` sizes (``max_length`` in bytes, -1 = MAX)."""
    kind = type_name.strip().lower()
    if kind in ("decimal", "numeric"):
        return f"{kind}({precision}, {scale})"
    if kind in ("datetime2", "time", "datetimeoffset"):
        return f"{kind}({scale})"
    if kind in ("char", "varchar", "binary", "varbinary", "nchar", "nvarchar"):
        length = max_length // 2 if kind.startswith("n") else max_length
        return f"{kind}({'max' if max_length == -1 else length})"
    if kind in ("timestamp", "rowversion"):
        return "binary(8)"
    if kind == "sysname":
        return "nvarchar(128)"
    if kind == "float":
        return "real" if 0 < precision <= 24 else "float"
    return kind


def keyset(key: Sequence[str], key_types: Sequence[str], operator: str, prefix: str = "") -> str:
    """``(k1, k2, ...) > (?, ?, ...)`` (``operator`` ``>``) or ``<= (?, ?, ...)`` in the AND/OR form T-SQL needs (it
    compares no row values): ``k1 >= ? AND (k1 > ? OR (k1 = ? AND k2 > ?))``, the leading ``k1`` range letting the
    server seek on the key's first column. Its parameters are ``keyset_parameters`` of the boundary key."""
    if operator not in (">", "<="):
        raise ValueError(f"keyset comparison {operator!r}: use '>' or '<='")
    if len(key_types) != len(key):
        raise ValueError(f"keyset over {len(key)} key columns needs as many types, not {len(key_types)}")
    columns = [prefix + quote_name(k) for k in key]
    bound = [f"CAST(? AS {t})" for t in key_types]
    if len(key) == 1:
        return f"{columns[0]} {operator} {bound[0]}"
    strict = ">" if operator == ">" else "<"
    terms = []
    for i in range(len(key)):
        parts = [f"{columns[j]} = {bound[j]}" for j in range(i)]
        parts.append(f"{columns[i]} {operator if i == len(key) - 1 else strict} {bound[i]}")
        terms.append(parts[0] if len(parts) == 1 else f"({' AND '.join(parts)})")
    return f"({columns[0]} {'>=' if operator == '>' else '<='} {bound[0]} AND ({' OR '.join(terms)}))"


def keyset_parameters(values: Sequence[object]) -> list[object]:
    """The parameters of a ``keyset`` condition on the boundary key ``values``, in their order in the SQL."""
    if len(values) == 1:
        return [values[0]]
    return [values[0], *(values[j] for i in range(len(values)) for j in range(i + 1))]


def _key_list(key: Sequence[str], prefix: str = "", descending: bool = False) -> str:
    return ", ".join(f"{prefix}{quote_name(k)}{' DESC' if descending else ''}" for k in key)


def row_count(db: str, schema: str, table: str) -> str:
    return f"SELECT COUNT_BIG(*) FROM {db}.{quote_name(schema)}.{quote_name(table)}"


def key_boundaries(db: str, schema: str, table: str, key: Sequence[str], types: Mapping[str, str] | None = None) -> str:
    """The first m (the first parameter) of every n-th key of the table (n the second), in key order: the upper
    boundaries of an initial snapshot's chunks of n rows, numbered by the server in one ordered read of the key."""
    return (f"SELECT TOP (?) {select_list(key, types, '[numbered].')} FROM (SELECT {_key_list(key)}, ROW_NUMBER() OVER "
            f"(ORDER BY {_key_list(key)}) AS [__$row] FROM {db}.{quote_name(schema)}.{quote_name(table)}) "
            f"AS [numbered] WHERE [numbered].[__$row] % ? = 0 ORDER BY [numbered].[__$row]")


def last_key(db: str, schema: str, table: str, key: Sequence[str], types: Mapping[str, str] | None = None) -> str:
    """The table's largest key: where an incremental snapshot of it stops cutting chunks (Debezium's maximum key)."""
    return (f"SELECT TOP (1) {select_list(key, types)} FROM {db}.{quote_name(schema)}.{quote_name(table)} "
            f"ORDER BY {_key_list(key, descending=True)}")


def next_boundary(db: str, schema: str, table: str, key: Sequence[str], key_types: Sequence[str],
                  lower_bounded: bool, types: Mapping[str, str] | None = None) -> str:
    """The last of the next n keys (the first parameter) after a boundary key (when ``lower_bounded``) and up to the
    snapshot's largest key, with its number among them: an incremental snapshot chunk's upper boundary."""
    conditions = [keyset(key, key_types, ">")] if lower_bounded else []
    conditions.append(keyset(key, key_types, "<="))
    return (f"SELECT TOP (1) {select_list(key, types, '[chunk].')}, [chunk].[__$row] FROM (SELECT TOP (?) "
            f"{_key_list(key)}, ROW_NUMBER() OVER (ORDER BY {_key_list(key)}) AS [__$row] "
            f"FROM {db}.{quote_name(schema)}.{quote_name(table)} WHERE {' AND '.join(conditions)} "
            f"ORDER BY {_key_list(key)}) AS [chunk] ORDER BY [chunk].[__$row] DESC")


def keys_within(db: str, schema: str, table: str, key: Sequence[str], key_types: Sequence[str], count: int,
                lower_bounded: bool, upper_bounded: bool) -> str:
    """Which of ``count`` keys (each a number and the key's values) lie in a chunk: the server compares them. The
    keys are a derived table under the table's own (empty) key columns, so they compare in the columns' collations."""
    if count < 1:
        raise ValueError("keys_within needs at least one key")
    values = ", ".join(f"CAST(? AS {t})" for t in key_types)
    rows = " UNION ALL ".join(f"SELECT ?, {values}" for _ in range(count))
    conditions = ([keyset(key, key_types, ">", "[v].")] if lower_bounded else []) + (
        [keyset(key, key_types, "<=", "[v].")] if upper_bounded else [])
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return (f"SELECT [v].[__$i] FROM (SELECT -1 AS [__$i], {_key_list(key)} FROM {db}.{quote_name(schema)}."
            f"{quote_name(table)} WHERE 1 = 0 UNION ALL {rows}) AS [v]{where}")


def check_condition(condition: str) -> str:
    """An ``additional-condition`` must be one T-SQL boolean expression, never a statement: refuse anything else."""
    from cdckit.dialect.signals import check_condition as check

    return check(condition, "tsql")


SET_ISOLATION = {
    "read_uncommitted": "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
    "read_committed": "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "repeatable_read": "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    "snapshot": "SET TRANSACTION ISOLATION LEVEL SNAPSHOT",
    "exclusive": "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
}


def set_lock_timeout(milliseconds: int) -> str:
    """``snapshot.lock.timeout.ms``: how long the session's statements wait for a lock (-1 forever, 0 not at all)
    before failing with error 1222; SET LOCK_TIMEOUT takes a literal, never a parameter (an int, so nothing else)."""
    return f"SET LOCK_TIMEOUT {int(milliseconds)}"


# -- one job per checkpoint: an application lock owned by the job's session, released when its connection ends -----
# sp_getapplock with @LockOwner = 'Session' and @LockTimeout = 0: a lock another session holds is not waited for.
# Its return code (Microsoft's sp_getapplock page: 0 granted, 1 granted after waiting, -1 timed out, -2 cancelled,
# -3 deadlock victim, -999 a parameter or call error) is the procedure's return value, which a statement of its own
# does not hand back; APPLOCK_MODE then says whether this session holds the lock: Exclusive, or NoLock.
# Bound: the resource, then Exclusive and Session (JOB_LOCK_PARAMETERS); APPLOCK_MODE: public, the resource, Session.
GET_JOB_LOCK = "EXEC {db}.sys.sp_getapplock @Resource = ?, @LockMode = ?, @LockOwner = ?, @LockTimeout = 0"
JOB_LOCK_MODE = "SELECT APPLOCK_MODE(?, ?, ?)"


def lock_table(db: str, schema: str, table: str) -> str:
    """``snapshot.isolation.mode=exclusive``: hold an exclusive table lock while the schema is read."""
    return f"SELECT TOP (0) * FROM {db}.{quote_name(schema)}.{quote_name(table)} WITH (TABLOCKX)"


# -- signals (ad hoc incremental snapshots) ---------------------------------------------------------------
def read_signals(db: str, signal_table: str) -> str:
    schema, _, table = signal_table.rpartition(".")
    return (f"SELECT [id], [type], [data] FROM {db}.{quote_name(schema or 'dbo')}.{quote_name(table)}")
