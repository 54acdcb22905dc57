/*
================================================================================
 07_verify.sql  -  check that CDC is set up and healthy for cdckit
================================================================================
 What it does
   Read-only queries, each with what a healthy answer looks like:
     1. sys.sp_cdc_help_change_data_capture  - the capture instances you can read
     2. sys.databases.is_cdc_enabled          - CDC on the database
     3. sys.tables.is_tracked_by_cdc          - CDC on the tables
     4. cdc.change_tables + cdc.captured_columns - capture instances, start LSN, columns
     5. sys.fn_cdc_get_min_lsn / sys.fn_cdc_get_max_lsn - the readable LSN window
     6. msdb.dbo.cdc_jobs                     - capture and cleanup job settings
     7. sys.dm_server_services                - is SQL Server Agent running?
     8. sys.dm_cdc_log_scan_sessions (+ sys.dm_cdc_errors) - capture latency, errors
   Changes nothing.

 Requires
   * Run it IN the target database (connect to it / SSMS drop-down / USE).
   * Best run twice: once as a DBA (everything visible) and once AS THE cdckit
     LOGIN (05) - query 1 then proves cdckit can read every capture instance.
   * Query 6 reads msdb (sysadmin, or SELECT on msdb.dbo.cdc_jobs); query 7
     needs VIEW SERVER STATE; query 8 needs VIEW DATABASE STATE. Queries the
     caller lacks permissions for fail on their own; the others still run
     because each query is its own batch.

 Edit
   Only @database in the "EDIT HERE" block of the first batch. It is used only
   to warn when you are connected to another database: every query reports on
   the CURRENT database (T-SQL variables do not survive GO, and each query is
   kept in its own batch on purpose).
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database sysname;
SET @database = N'testDB';          -- the database cdckit captures
-- ============================================================================

DECLARE @current_database sysname;
SET @current_database = DB_NAME();

IF @current_database <> @database
BEGIN
    RAISERROR(N'WARNING: connected to %s, not %s; the queries below report on the current database.', 10, 1, @current_database, @database);
END
GO

-- 1. Capture instances visible to the caller (one row per capture instance).
--    Healthy: one row per table cdckit captures, plus dbo.debezium_signal;
--    supports_net_changes = 0, role_name = the gating role (e.g. cdc_reader).
--    EMPTY when run as cdckit = its login lacks SELECT on the captured columns
--    or membership in the gating role (rerun 05), or no table is enabled (03).
EXEC sys.sp_cdc_help_change_data_capture;
GO

-- 2. CDC on the database.
--    Healthy: is_cdc_enabled = 1 for the current database (run 01/02 if 0).
SELECT name, is_cdc_enabled
FROM sys.databases
WHERE database_id = DB_ID();
GO

-- 3. CDC on the tables.
--    Healthy: is_tracked_by_cdc = 1 for every table cdckit captures and for
--    dbo.debezium_signal; 0 means 03 (or 06) has not run for that table.
SELECT SCHEMA_NAME(t.schema_id) AS schema_name, t.name AS table_name, t.is_tracked_by_cdc
FROM sys.tables AS t
WHERE t.is_ms_shipped = 0 AND SCHEMA_NAME(t.schema_id) <> N'cdc'
ORDER BY t.is_tracked_by_cdc DESC, schema_name, table_name;
GO

-- 4a. Capture instances with their start LSN.
--     Healthy: one instance per table (two only while a schema change is in
--     progress, see 08); start_lsn NOT NULL; supports_net_changes = 0;
--     has_drop_pending = 0.
SELECT OBJECT_SCHEMA_NAME(ct.source_object_id) AS schema_name,
       OBJECT_NAME(ct.source_object_id) AS table_name,
       ct.capture_instance,
       ct.start_lsn,
       sys.fn_cdc_map_lsn_to_time(ct.start_lsn) AS start_time,
       ct.supports_net_changes,
       ct.has_drop_pending,
       ct.role_name,
       ct.index_name,
       ct.filegroup_name,
       ct.create_date
FROM cdc.change_tables AS ct
ORDER BY schema_name, table_name, ct.create_date;
GO

-- 4b. Captured columns per capture instance.
--     Healthy: every column of the source table is listed (unless a column list
--     was given in 03). A column missing here but present in the table means
--     the table changed after the instance was created: run 08.
SELECT ct.capture_instance, cc.column_ordinal, cc.column_name, cc.column_type, cc.is_computed
FROM cdc.change_tables AS ct
JOIN cdc.captured_columns AS cc ON cc.object_id = ct.object_id
ORDER BY ct.capture_instance, cc.column_ordinal;
GO

-- 4c. Source-table DDL recorded since the capture instances were created.
--     Healthy: empty, or only DDL already handled by a new capture instance (08).
SELECT OBJECT_NAME(dh.source_object_id) AS table_name, dh.ddl_command, dh.ddl_lsn, dh.ddl_time
FROM cdc.ddl_history AS dh
ORDER BY dh.ddl_lsn;
GO

-- 5. The readable LSN window.
--    Healthy: min_lsn <> 0x00000000000000000000 for every instance (0x00... means
--    the instance does not exist or the caller may not read it); max_lsn NOT
--    NULL and max_lsn_time recent on a database with traffic. max_lsn NULL =
--    nothing captured yet: usually the SQL Server Agent is not running (query 7).
--    The cleanup job moves min_lsn forward; cdckit must have read past an
--    instance's min_lsn or it will miss changes (check retention, query 6).
SELECT ct.capture_instance,
       sys.fn_cdc_get_min_lsn(ct.capture_instance) AS min_lsn,
       sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_min_lsn(ct.capture_instance)) AS min_lsn_time
FROM cdc.change_tables AS ct
ORDER BY ct.capture_instance;

SELECT sys.fn_cdc_get_max_lsn() AS max_lsn,
       sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn()) AS max_lsn_time,
       DATEDIFF(SECOND, sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn()), GETDATE()) AS seconds_since_max_lsn;
GO

-- 6. Capture and cleanup jobs (values set by 04).
--    Healthy: two rows. capture: continuous = 1, pollinginterval/maxtrans/maxscans
--    as intended (defaults 5 / 500 / 10). cleanup: retention (minutes, default
--    4320 = 3 days) longer than cdckit's longest possible outage.
--    No rows: CDC is not enabled, or the jobs were dropped (sys.sp_cdc_add_job).
SELECT job_type, job_id, continuous, pollinginterval, maxtrans, maxscans, retention, threshold
FROM msdb.dbo.cdc_jobs
WHERE database_id = DB_ID()
ORDER BY job_type;

EXEC sys.sp_cdc_help_jobs;
GO

-- 7. SQL Server Agent (the same check cdckit runs when it finds no max LSN).
--    Healthy: status_desc = 'Running' (status = 4, is_running = 1) and
--    startup_type_desc = 'Automatic'. Not running = no capture, no cleanup.
--    Needs VIEW SERVER STATE; not available on Azure SQL Database.
SELECT dss.servicename,
       dss.status_desc,
       dss.startup_type_desc,
       CASE WHEN dss.[status] = 4 THEN 1 ELSE 0 END AS is_running
FROM sys.dm_server_services AS dss
WHERE dss.[servicename] LIKE N'SQL Server Agent (%';
GO

-- 8a. The most recent capture log scan sessions.
--     Healthy: new sessions every pollinginterval seconds (start_time recent),
--     error_count = 0, latency (seconds between a commit and its capture) small
--     and not growing. A growing latency means the capture job cannot keep up:
--     raise maxtrans / maxscans or lower pollinginterval (04). The aggregate row
--     has session_id = 0 and is left out here.
SELECT TOP (20)
       session_id, start_time, end_time, duration, scan_phase, error_count,
       tran_count, command_count, last_commit_time, last_commit_cdc_time,
       latency, empty_scan_count, failed_sessions_count
FROM sys.dm_cdc_log_scan_sessions
WHERE session_id <> 0
ORDER BY start_time DESC;

-- 8b. Capture errors. Healthy: no rows (or only old ones).
SELECT TOP (20) session_id, phase_number, entry_time, error_number, error_severity, error_state, error_message
FROM sys.dm_cdc_errors
ORDER BY entry_time DESC;
GO
