"""A model of SQL Server 2022 CDC answering exactly the statements of ``cdckit.dialect.sqlserver.queries``.

SQL Server cannot run on this machine, so the SQL Server dialect is tested against this model, which returns what
pyodbc + SQL Server return for those statements. All state lives in one SQLite file (WAL mode, busy timeout,
writers serialised with ``BEGIN IMMEDIATE``), so Spark's Python workers, other processes and the test process
see one server.

Three surfaces:

* Admin API (Python, for tests): ``SqlServerModel(path)`` with ``create_database``, ``create_table`` (columns
  as :class:`ModelColumn`, ``sys.types`` names), ``alter_table_add_column``, ``alter_table_drop_column``,
  ``alter_table_alter_column``, ``enable_cdc``, ``enable_table``
  (default instance ``<schema>_<table>``, at most two instances per table), ``disable_table``, ``transaction(db)``
  (``insert`` / ``update`` / ``delete``), ``agent_running`` / ``start_agent`` / ``stop_agent``, ``cleanup``,
  ``set_database_online`` (an OFFLINE database refuses connections with error 942),
  ``record_statements`` / ``statement_log``; ``create_login`` (from the first login on, connections are
  authenticated), ``set_capture_access`` (a login outside a capture instance's gating role),
  ``agent_service_listed`` (False: sys.dm_server_services lists no Agent), ``configure('max text repl size', n)`` /
  ``max_text_repl_size``, ``clear_start_lsn`` (a NULL cdc.change_tables.start_lsn) and ``purge_lsn_time_mapping``
  (a quiet database's cleanup leaving no mapping row, so no maximum LSN).
* DB-API (pyodbc's shape): ``connect("MODEL=<path>;DATABASE=...")``, ``connect_factory(path)``; Connection and
  Cursor with ``execute(sql, *params)``, ``fetchone/fetchmany/fetchall/fetchval``, iteration, ``description``,
  ``rowcount`` (-1 for queries, as pyodbc), ``Row`` with attribute access; server and driver errors with
  pyodbc's ``(sqlstate, message)`` arguments and SQL Server's message numbers, pyodbc's own errors (closed
  cursor, parameter count, unsupported SQL type) with its ``(message, sqlstate)``.
* Scripts (T-SQL as a DBA writes it): ``ScriptRunner(model, database).run(text, name)`` runs a script's batches
  (split on ``GO``): CREATE SCHEMA; CREATE TYPE alias types (a column of one gets the base type and the alias's
  nullability, in the table and its change table); CREATE TABLE with IDENTITY, DEFAULT (constants, ``GETDATE()``,
  ``NEWID()``, expressions), PRIMARY KEY and UNIQUE (inline, CONSTRAINT or ALTER TABLE ... ADD CONSTRAINT,
  composite; CREATE UNIQUE INDEX) and computed columns ``c AS (expression)``, whose values the model computes from
  the row on every insert and update and which are always NULL in change tables (cdc.<capture_instance>_CT, "Large
  Object Data Types"); scalar functions of DECLARE/SET/RETURN; INSERT ... VALUES (several rows, SET IDENTITY_INSERT)
  and INSERT ... SELECT from one table, UPDATE ... SET ... WHERE and DELETE ... WHERE over every matching row (each
  SET expression reads the row as it was; ``+ - * / %``, concatenation, CASE, ISNULL/COALESCE, CAST/CONVERT, string
  functions, DATEADD, ``geography::Point``/``STGeomFromText``, ``hierarchyid::Parse``, ``GetLevel()``; conditions in
  three-valued logic); BEGIN TRAN / COMMIT / ROLLBACK (one model transaction); variables, IF/ELSE, BEGIN/END,
  TRY/CATCH, PRINT, RAISERROR, RETURN; EXEC of sp_executesql, sys.sp_cdc_enable_db, sys.sp_cdc_enable_table,
  sys.sp_cdc_disable_table and sp_configure 'max text repl size' (every script of cdckit's sql/sqlserver runs as
  written). Statements that change nothing the model holds (GRANT, CREATE ROLE/USER/LOGIN, other indexes, FOREIGN
  KEY and CHECK constraints, Agent job settings, session options, result-set SELECTs) are accepted and listed in
  ``ScriptReport.not_modelled``; anything else raises :class:`ScriptError`, one line naming the script, line,
  statement and construct. ``python -m cdckit_lab.sqlserver_model.replay --schema s.sql --changes c.sql`` runs
  cdckit's snapshot and stream over a model built from such scripts and checks that the output replayed per key
  equals the tables.

Modelled:

* Application locks: ``sp_getapplock`` with ``@LockMode = 'Exclusive'``, ``@LockOwner = 'Session'`` and
  ``@LockTimeout = 0`` (cdckit's one job per checkpoint, ``queries.GET_JOB_LOCK``) grants a resource of a database
  to one session; another session's request is not granted (SQL Server's return code -1, timed out, on Microsoft's
  sp_getapplock page) and ``APPLOCK_MODE('public', resource, 'Session')`` answers NoLock to it, Exclusive to the
  holder. A session's locks go when it ends: its connection closed, or its process gone.
* Logins and permissions: a wrong login or password fails the connection with error 18456 (SQLSTATE 28000,
  InterfaceError), a database the login has no user in (or that does not exist) with error 4060 (SQLSTATE 42000,
  ProgrammingError), both as pyodbc reports them at SQLDriverConnect; ``sys.fn_cdc_get_min_lsn`` returns 0x00 for a
  capture instance the login may not read, as for one that does not exist (its Remarks). An INSERT or UPDATE writing
  more than 'max text repl size' bytes (65536 by default) into a captured large-object column fails with error 7139.
* Statements: each statement is whitespace-normalised, parsed with ``sqlglot.parse_one(sql, read="tsql")``
  (invalid T-SQL raises; the only exceptions are ``SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED`` and
  ``... SNAPSHOT``, valid T-SQL that sqlglot 29 rejects), its ``?`` markers counted against the parameters,
  and matched against the rendered templates of queries.py. Anything else raises
  :class:`UnmodelledStatementError` naming the statement.
* Transactions: each committed model transaction gets one commit LSN (``__$start_lsn``), each change its own
  ``__$seqval`` (increasing, below the commit LSN), each statement (admin call) a ``__$command_id``, counted per
  transaction (the column's meaning in Microsoft's cdc.<capture_instance>_CT page; KB 3030352 added it because
  seqvals misorder updated rows). An update that changes no primary-key or UNIQUE column (``create_table(...,
  unique=...)``) writes rows 3 and 4 with one seqval. A split update, one that changes such a value: in a statement
  of one row, a delete (1) and an insert (2) at one seqval, the insert one command later; in a statement of several
  rows (``update_many``), a deferred update: every delete under one command, then every insert under the next, each
  insert's seqval LOWER than its delete's (the order KB 3030352 describes; Debezium's dbz#2012). Uniqueness is
  checked on a statement's result; a failing statement changes nothing (error 2627). ``command_id_column = False``
  creates change tables without ``__$command_id`` (SQL Server 2012-2016 before that update).
* Large objects in change tables (the "Large Object Data Types" paragraph of the same page): ``text``, ``ntext`` and
  ``image`` are NULL in rows 1 and 3; ``varchar(max)``, ``nvarchar(max)``, ``varbinary(max)`` (and, by choice,
  ``xml`` and the other types sys.columns gives max_length -1) NULL in row 3 unless the update changed them.
* LSNs are 10-byte big-endian values from a per-database counter; ``__$update_mask`` has bit (column_ordinal - 1)
  set, ordinal 1 being the lowest bit of the last byte (all captured columns for 1 and 2, the SET-clause columns for
  3 and 4).
* The capture job: committed changes of a CDC-enabled database wait in a "log" until SQL Server Agent runs (the
  default), then reach every capture instance enabled before they committed, with a ``cdc.lsn_time_mapping`` row
  (begin/end time as ``datetime``, transaction id) per transaction with captured changes, and a ``tran_id`` 0x00
  row when a scan ends on transactions that captured nothing. ``fn_cdc_get_max_lsn()`` is the highest mapping
  LSN (NULL before the first harvest).
* DDL on a captured table (ALTER TABLE ADD / DROP COLUMN / ALTER COLUMN; not of a primary-key column, error
  5074) reaches ``cdc.ddl_history`` through the capture job, one row per capture instance. Capture instances
  keep their column structure: a new column is not captured; a dropped column stays in the change table and in
  ``cdc.captured_columns`` and later changes carry NULL in it; a captured column's type change is the exception
  SQL Server documents: the capture job alters that column in the change table (its rows converted) and
  ``cdc.captured_columns.column_type``, and its ``ddl_history`` row has ``required_column_update`` = 1. ALTER
  COLUMN converts the table's rows, failing as SQL Server's conversions do.
* The cleanup job (``cleanup``): change rows below the low-water LSN are purged and the instance's start_lsn
  (``fn_cdc_get_min_lsn``) raised; mapping rows below every instance's start_lsn are purged.
* A change table read directly (``queries.changes_query``, Debezium's direct mode): rows with start_lsn in
  [from, to] in the order asked (by ``__$command_id`` or not), the commit time from ``cdc.lsn_time_mapping``
  (LEFT JOIN); 208 for an unknown change table; 207 for a column the instance does not capture, and for
  ``__$command_id`` on a change table without it. No range check (the query functions' error 313 is theirs).
* Catalog: ``sys.databases.is_cdc_enabled``, ``sys.tables/schemas/columns/types/indexes/index_columns`` (primary
  key), ``cdc.change_tables/captured_columns/index_columns/ddl_history/lsn_time_mapping``, sys.columns sizes as
  SQL Server reports them, the Agent in ``sys.dm_server_services`` (status 4 running, 1 stopped),
  ``SERVERPROPERTY('ProductVersion')`` = 16.0.1000.6.
* Values as pyodbc returns them: int, bool (bit), Decimal, float, str (char/nchar blank-padded, uniqueidentifier
  upper-case text), bytes (binary zero-padded), date. Times are held to 100 ns (``datetime2``, ``time``,
  ``datetimeoffset`` rounded half up to their scale; ``datetime`` to 1/300 s and returned in milliseconds, as
  Microsoft's ODBC driver rounds it; ``smalldatetime`` to the minute) and reach the client by ODBC SQL type:
  without an output converter, SQL_TYPE_TIMESTAMP (93: datetime, smalldatetime, datetime2) and SQL_SS_TIME2 (-154:
  time) come back as naive datetime and time cut to microseconds (pyodbc divides the nanosecond fraction by 1000),
  and a row with a SQL_SS_TIMESTAMPOFFSET (-155: datetimeoffset) column cannot be fetched (the execute succeeds):
  pyodbc's ``ProgrammingError('ODBC SQL type -155 is not yet supported.  column-index=N  type=-155', 'HY106')``,
  whatever the value, NULL included. An output converter for the type (``add_output_converter``, registered when
  the row is fetched) receives the driver's struct, fraction in nanoseconds: SQL_TIMESTAMP_STRUCT (``<6hI``),
  SQL_SS_TIME2_STRUCT (``<3H2xI``: hour, minute, second, two bytes of padding, fraction) or
  SQL_SS_TIMESTAMPOFFSET_STRUCT (``<6hI2h``: then offset hours and minutes, both signed), and is not called for
  NULL; ``description`` reports ``str`` for a -155 column with a converter (``bytearray`` without one).
  ``geometry``, ``geography``, ``hierarchyid`` (SQL_SS_UDT, -151) and ``sql_variant`` (SQL_SS_VARIANT, -150) fail
  the fetch the same way, whatever the value; the reader's conversions (``queries.column_expression``) return what
  SQL Server returns: ``CAST(c.STSrid AS binary(4)) + c.STAsBinary()`` the SRID (big-endian) and the 2D
  little-endian well-known binary (values given as well-known text of POINT, LINESTRING, POLYGON or their MULTI
  forms with the type's default SRID, 0 for geometry and 4326 for geography, or as ``(text or WKB, srid)``),
  ``c.ToString()`` the hierarchyid's text (``/1/3/``), ``CAST(c AS nvarchar(4000))`` a sql_variant's text; a
  method on a column of another type is error 258. A ``timestamp`` (rowversion) column takes a new 8-byte value
  from a per-database counter on every insert and update of its row (errors 273 and 272 for a value given; the
  rowversion page) and is ``binary(8)`` in change tables, with the same values ("Captured Column Data Types" of
  the cdc.<capture_instance>_CT page). Conversion, overflow, truncation, NULL, duplicate-key and identity errors
  carry SQL Server's numbers (245, 8115, 2628, 515, 2627, 544, 8102).
* Plain table reads (``select_rows``, ``read_signals``, ``row_count``, ``lock_table``): a signal's additional
  condition (``_conditions``: the expressions cdckit lets through, in three-valued logic, compiled against the
  table as ``try_condition`` is), then a chunk's keyset bounds, ORDER BY the key, NULLs first. ``SET TRANSACTION
  ISOLATION LEVEL`` is accepted and the level recorded (``Connection.isolation_level``); TABLOCKX is recorded until
  commit.
* Keyset chunks (``queries.keyset``, over keys of up to eight columns): ``(k1, k2) > (?, ?)`` and ``<= (?, ?)`` in
  T-SQL's AND/OR form are evaluated as written, each parameter converted by its ``CAST(? AS <type>)`` (as CAST
  converts: a string to a date, a uniqueidentifier, a decimal) and compared as the key column's type compares. So
  are ``key_boundaries`` (ROW_NUMBER() over the key, every n-th row, TOP), ``last_key`` (TOP (1) ORDER BY every key
  column DESC), ``next_boundary`` (the last of TOP (n) keys within bounds, with its ROW_NUMBER()) and
  ``keys_within`` (keys bound as a UNION ALL of SELECTs under the table's own empty key columns, recognised by
  rendering the statement again from its table, columns, types and number of keys). Orders: strings compare
  case-insensitively ignoring trailing blanks (an approximation of the default SQL_Latin1_General_CP1_CI_AS
  collation: accents and the collation's own letter order are not modelled); a uniqueidentifier compares by its
  bytes, the last six first, then bytes 8-9, 6-7, 4-5 and 0-3 of its stored form (the first three groups of its
  text little-endian): "SqlGuid uses SQL Server behavior, where the last six bytes of a value are most
  significant" (Microsoft, "Comparing GUID and uniqueidentifier values",
  learn.microsoft.com/dotnet/framework/data/adonet/sql/comparing-guid-and-uniqueidentifier-values, and
  ``SqlGuid.CompareTo``: "treats the last 6 bytes as the most significant ones in comparisons"), never by its text;
  date, datetime and decimal keys as their values (a ``datetime`` to its 1/300 s ticks).

Not modelled: a real transaction log (log records are rows in SQLite; the capture job runs synchronously at
commit or agent start rather than polling), isolation semantics and locking beyond recording them (every
statement reads the latest committed state), concurrent client transactions, DML or DDL through the DB-API, capture
job latency and batch limits, retention by time, the change query functions (``fn_cdc_get_all_changes_``,
``fn_cdc_get_net_changes_``), which cdckit does not call, ``__$end_lsn`` (always NULL), user-defined
types other than geometry, geography and hierarchyid, output converters for -151 and -150 (the model has no CLR
or variant bytes to give them), hierarchyid order (compared as text), sql_variant base types other than int,
nvarchar and decimal, collations other than the approximation above, and ``tran_id`` values beyond an
increasing counter.
"""

from __future__ import annotations

from ._admin import SqlServerModel
from ._dbapi import (
    Connection,
    Cursor,
    ModelConnector,
    Row,
    apilevel,
    connect,
    connect_factory,
    paramstyle,
    threadsafety,
)
from ._dml import ModelTransaction
from ._errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    UnmodelledStatementError,
    Warning,
)
from ._script import ScriptError, ScriptReport, ScriptRunner
from ._statements import PRODUCT_VERSION
from ._types import ZERO_LSN, ModelColumn, increment_lsn, lsn_text

__all__ = [
    "PRODUCT_VERSION", "ZERO_LSN", "Connection", "Cursor", "DataError", "DatabaseError", "Error", "IntegrityError",
    "InterfaceError", "InternalError", "ModelColumn", "ModelConnector", "ModelTransaction", "NotSupportedError",
    "OperationalError", "ProgrammingError", "Row", "ScriptError", "ScriptReport", "ScriptRunner", "SqlServerModel",
    "UnmodelledStatementError", "Warning",
    "apilevel", "connect", "connect_factory", "increment_lsn", "lsn_text", "paramstyle", "threadsafety",
]
