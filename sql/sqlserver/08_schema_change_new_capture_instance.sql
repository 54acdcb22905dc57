/*
================================================================================
 08_schema_change_new_capture_instance.sql  -  online schema evolution
================================================================================
 What it does, and why
   A capture instance freezes the table structure of the moment it was
   created: its change table cdc.<capture_instance>_CT and cdc.captured_columns
   keep the OLD column list and column metadata after an ALTER TABLE. A column
   added later is not captured at all; a dropped column stays in the change
   table and arrives as NULL; a NULL <-> NOT NULL change (ALTER COLUMN ... NULL /
   NOT NULL) is not reflected either, so the event schema keeps the old
   optionality until a NEW capture instance is created from the new structure.
   (SQL Server refuses some DDL on CDC-enabled tables outright, e.g. renaming
   a column or changing its data type.) Neither SQL Server nor cdckit refreshes
   a capture instance: a DBA must create a new one. This script is Debezium's
   ONLINE procedure, which needs no downtime:

     0. Apply ALL schema changes of the table first, in one go, e.g.
          ALTER TABLE dbo.customers ADD phone_number varchar(32) NULL;
        Finish this whole procedure before the next schema change of the table.
     1. @step = 1: create a second capture instance with a new, unique name
        (@new_capture_instance, e.g. N'dbo_customers_v2') from the new
        structure, with sys.sp_cdc_enable_table. The old instance keeps
        capturing too; its end is the new instance's start_lsn.
     2. WAIT until cdckit reads from the new instance: cdckit keeps reading the
        old instance up to the new one's start_lsn, then switches, re-reads
        the table structure and emits a schema change (Debezium logs
        "Migrating schema to ChangeTable [captureInstance=dbo_customers_v2 ...").
        Compare cdckit's committed offset (commit_lsn) with the new instance's
        start_lsn printed by step 1: the offset must be >= that start_lsn.
     3. @step = 2 (and @cdckit_switched = 1 to confirm step 2): drop the OLD
        instance with sys.sp_cdc_disable_table @capture_instance = old name.
        Dropping it earlier loses the changes cdckit has not yet read from it.

 The gap
   Between the ALTER TABLE (0) and the creation of the new instance (1), changes
   are captured ONLY by the old instance, with the OLD structure: rows written
   in that window have no value for a newly added column (and keep old
   nullability) in cdckit's events. Run step 1 right after the DDL. If that gap
   is not acceptable, use the OFFLINE procedure instead: stop the applications
   writing the table, let cdckit drain all changes, stop cdckit, apply the DDL,
   run step 1, restart the applications and cdckit, then run step 2.

 Two capture instances at most
   A table can have at most two capture instances. Step 1 fails if the table
   already has two (an earlier schema change whose step 3 was never run):
   finish that one first.

 Requires
   * db_owner in the database; CDC enabled on the database and the table (03).
   * Run it IN the target database (connect to it / SSMS drop-down / USE).
   * The same gating role as before (@role_name), so cdckit can read the new
     instance; SELECT on the new columns is covered by the table-level GRANT
     from 05.

 Edit
   Only the "EDIT HERE" block below; run with @step = 1, later with @step = 2.

 Idempotent
   Safe to run twice: step 1 does nothing if the new instance exists, step 2
   does nothing if the old instance is already gone.
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database             sysname;
DECLARE @schema               sysname;
DECLARE @table                sysname;
DECLARE @old_capture_instance sysname;
DECLARE @new_capture_instance sysname;
DECLARE @role_name            sysname;
DECLARE @filegroup_name       sysname;
DECLARE @step                 tinyint;
DECLARE @cdckit_switched      bit;

SET @database             = N'testDB';
SET @schema               = N'dbo';
SET @table                = N'customers';
SET @old_capture_instance = N'dbo_customers';      -- the instance cdckit reads today
SET @new_capture_instance = N'dbo_customers_v2';   -- new, unique name
SET @role_name            = N'cdc_reader';         -- same gating role as in 03
SET @filegroup_name       = NULL;                  -- same filegroup as in 03; NULL = default
SET @step                 = 1;                     -- 1 = create the new instance, 2 = drop the old one
SET @cdckit_switched      = 0;                     -- set to 1 for step 2 once cdckit reads the new instance
-- ============================================================================

DECLARE @qualified_table nvarchar(300);
DECLARE @new_start_lsn binary(10);
DECLARE @new_start_lsn_text varchar(30);
SET @qualified_table = QUOTENAME(@schema) + N'.' + QUOTENAME(@table);

IF DB_NAME() <> @database
BEGIN
    RAISERROR(N'Run this script in database %s (connect to it or add USE before the script).', 16, 1, @database);
    RETURN;
END

IF OBJECT_ID(@qualified_table, N'U') IS NULL
BEGIN
    RAISERROR(N'Table %s does not exist in this database. Edit @schema / @table.', 16, 1, @qualified_table);
    RETURN;
END

-- Step 1: the new capture instance.
IF @step = 1
   AND NOT EXISTS (SELECT 1 FROM cdc.change_tables WHERE capture_instance = @new_capture_instance)
BEGIN
    IF 2 <= (SELECT COUNT(*) FROM cdc.change_tables WHERE source_object_id = OBJECT_ID(@qualified_table))
    BEGIN
        RAISERROR(N'Table %s already has two capture instances; drop the older one first (step 2 of the previous change).', 16, 1, @qualified_table);
        RETURN;
    END
    EXEC sys.sp_cdc_enable_table
        @source_schema        = @schema,
        @source_name          = @table,
        @role_name            = @role_name,
        @capture_instance     = @new_capture_instance,
        @supports_net_changes = 0,
        @filegroup_name       = @filegroup_name;
    PRINT N'Capture instance ' + @new_capture_instance + N' created. Wait until cdckit reads from it, then run step 2.';
END
ELSE
BEGIN
    IF @step = 1
    BEGIN
        PRINT N'Capture instance ' + @new_capture_instance + N' already exists; nothing to do in step 1.';
    END
END

-- Step 2: drop the old capture instance once cdckit has switched.
IF @step = 2
   AND EXISTS (SELECT 1 FROM cdc.change_tables WHERE capture_instance = @old_capture_instance)
BEGIN
    IF @cdckit_switched <> 1
       OR NOT EXISTS (SELECT 1 FROM cdc.change_tables WHERE capture_instance = @new_capture_instance)
    BEGIN
        RAISERROR(N'Not dropping %s: the new instance must exist and cdckit must read from it (set @cdckit_switched = 1).', 16, 1, @old_capture_instance);
        RETURN;
    END
    -- @source_name is the TABLE name (the Debezium documentation's example passes
    -- the capture instance name there by mistake).
    EXEC sys.sp_cdc_disable_table
        @source_schema    = @schema,
        @source_name      = @table,
        @capture_instance = @old_capture_instance;
    PRINT N'Old capture instance ' + @old_capture_instance + N' dropped.';
END
ELSE
BEGIN
    IF @step = 2
    BEGIN
        PRINT N'Capture instance ' + @old_capture_instance + N' no longer exists; nothing to do in step 2.';
    END
END

-- The table's capture instances now. After step 1: two rows, the new one with
-- the later start_lsn (cdckit switches when it reaches that LSN). After step 2:
-- only the new one.
SELECT @new_start_lsn = start_lsn
FROM cdc.change_tables
WHERE capture_instance = @new_capture_instance;
SET @new_start_lsn_text = CONVERT(varchar(30), @new_start_lsn, 1);
PRINT N'Start LSN of ' + @new_capture_instance + N': ' + ISNULL(@new_start_lsn_text, 'none yet');

SELECT capture_instance, start_lsn, create_date, supports_net_changes, role_name
FROM cdc.change_tables
WHERE source_object_id = OBJECT_ID(@qualified_table)
ORDER BY create_date;
GO
