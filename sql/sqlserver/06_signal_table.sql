/*
================================================================================
 06_signal_table.sql  -  the Debezium signalling table, CDC-enabled
================================================================================
 What it does
   1. Creates dbo.debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32)
      NOT NULL, data varchar(2048) NULL) if it does not exist.
        id    any unique string; used to correlate log messages only. (During
              incremental snapshots Debezium writes its own watermark rows with
              generated ids and types snapshot-window-open / -close.)
        type  the signal: execute-snapshot, stop-snapshot, pause-snapshot or
              resume-snapshot.
        data  JSON parameters of the signal.
   2. Enables CDC on it (sys.sp_cdc_enable_table, same gating role as the
      data tables) if it is not tracked yet. On SQL Server signals arrive
      THROUGH CDC: the INSERT is captured like any other change and processed
      in LSN order with the data changes, so an untracked signal table means
      signals are never seen.
   3. Optionally (flags below, off by default) sends example signals:
        execute-snapshot: an ad hoc INCREMENTAL snapshot of @snapshot_table,
          restricted by an optional additional-condition (a WHERE clause), e.g.
          {"data-collections": ["testDB.dbo.customers"], "type": "incremental",
           "additional-condition": "country = 'NL'"}
        stop-snapshot: stops the running incremental snapshot for those
          data-collections ("type": "incremental" is required; without
          "data-collections" the whole running snapshot stops), e.g.
          {"data-collections": ["testDB.dbo.customers"], "type": "incremental"}
      data-collections are <database>.<schema>.<table> names (regular
      expressions are accepted for stop-snapshot). Each signal is inserted only
      if no row with its id exists, so re-running does not signal twice; use a
      new id for every new signal.
   cdckit must be configured with signal.data.collection = <database>.dbo.debezium_signal.

 Requires
   * 01/02 has run (CDC enabled on the database); SQL Server Agent running.
   * db_owner in the database (CREATE TABLE + sys.sp_cdc_enable_table).
   * Whoever sends signals needs INSERT on dbo.debezium_signal; cdckit needs
     SELECT on it and gating-role membership (05).
   * Run it IN the target database (connect to it / SSMS drop-down / USE).
   * To use another schema or table name, change dbo.debezium_signal /
     N'debezium_signal' everywhere below and in cdckit's signal.data.collection.

 Edit
   Only the "EDIT HERE" block below.

 Idempotent
   Safe to run twice: the table is created and CDC-enabled only if missing,
   and a signal is not inserted again when its id already exists.
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database             sysname;
DECLARE @role_name            sysname;
DECLARE @capture_instance     sysname;
DECLARE @filegroup_name       sysname;
DECLARE @send_execute_example bit;
DECLARE @send_stop_example    bit;
DECLARE @execute_signal_id    varchar(42);
DECLARE @stop_signal_id       varchar(42);
DECLARE @snapshot_table       varchar(400);
DECLARE @additional_condition varchar(1024);

SET @database             = N'testDB';
SET @role_name            = N'cdc_reader';           -- same gating role as in 03 / 05
SET @capture_instance     = N'dbo_debezium_signal';  -- NULL = default dbo_debezium_signal
SET @filegroup_name       = NULL;                    -- NULL = default filegroup
SET @send_execute_example = 0;                       -- 1 = insert the execute-snapshot example
SET @send_stop_example    = 0;                       -- 1 = insert the stop-snapshot example
SET @execute_signal_id    = 'adhoc-snapshot-0001';   -- new id for every new signal
SET @stop_signal_id       = 'adhoc-stop-0001';
SET @snapshot_table       = 'testDB.dbo.customers';  -- <database>.<schema>.<table>
SET @additional_condition = 'country = ''NL''';      -- WHERE clause; '' = whole table; no double quotes
-- ============================================================================

DECLARE @execute_data varchar(2048);
DECLARE @stop_data    varchar(2048);

IF DB_NAME() <> @database
BEGIN
    RAISERROR(N'Run this script in database %s (connect to it or add USE before the script).', 16, 1, @database);
    RETURN;
END

IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE database_id = DB_ID() AND is_cdc_enabled = 1)
BEGIN
    RAISERROR(N'CDC is not enabled on database %s: run 01_enable_cdc_database.sql (or 02 on RDS) first.', 16, 1, @database);
    RETURN;
END

-- 1. The table.
IF OBJECT_ID(N'dbo.debezium_signal', N'U') IS NULL
BEGIN
    CREATE TABLE dbo.debezium_signal (
        id   varchar(42)   NOT NULL PRIMARY KEY,
        type varchar(32)   NOT NULL,
        data varchar(2048) NULL
    );
    PRINT N'Table dbo.debezium_signal created.';
END

-- 2. CDC on the table (no net changes: cdckit reads all changes).
IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(N'dbo.debezium_signal') AND is_tracked_by_cdc = 0)
BEGIN
    EXEC sys.sp_cdc_enable_table
        @source_schema        = N'dbo',
        @source_name          = N'debezium_signal',
        @role_name            = @role_name,
        @capture_instance     = @capture_instance,
        @supports_net_changes = 0,
        @filegroup_name       = @filegroup_name;
    PRINT N'CDC enabled on dbo.debezium_signal.';
END
ELSE
BEGIN
    PRINT N'dbo.debezium_signal is already tracked by CDC.';
END

-- 3. Example signals (off by default).
-- execute-snapshot, data e.g.:
--   {"data-collections": ["testDB.dbo.customers"], "type": "incremental", "additional-condition": "country = 'NL'"}
SET @execute_data = '{"data-collections": ["' + @snapshot_table + '"], "type": "incremental"'
                  + CASE WHEN ISNULL(@additional_condition, '') = '' THEN ''
                         ELSE ', "additional-condition": "' + @additional_condition + '"' END
                  + '}';
IF @send_execute_example = 1
   AND NOT EXISTS (SELECT 1 FROM dbo.debezium_signal WHERE id = @execute_signal_id)
BEGIN
    INSERT INTO dbo.debezium_signal (id, type, data)
    VALUES (@execute_signal_id, 'execute-snapshot', @execute_data);
    PRINT N'execute-snapshot signal sent.';
END

-- stop-snapshot, data e.g.:
--   {"data-collections": ["testDB.dbo.customers"], "type": "incremental"}
SET @stop_data = '{"data-collections": ["' + @snapshot_table + '"], "type": "incremental"}';
IF @send_stop_example = 1
   AND NOT EXISTS (SELECT 1 FROM dbo.debezium_signal WHERE id = @stop_signal_id)
BEGIN
    INSERT INTO dbo.debezium_signal (id, type, data)
    VALUES (@stop_signal_id, 'stop-snapshot', @stop_data);
    PRINT N'stop-snapshot signal sent.';
END

-- The signals sent so far (Debezium watermark rows included).
SELECT id, type, data
FROM dbo.debezium_signal
ORDER BY id;
GO
