/*
================================================================================
 03_enable_cdc_table.sql  -  enable CDC on one source table (one capture instance)
================================================================================
 What it does
   Runs sys.sp_cdc_enable_table for @schema.@table, only if the table has no
   capture instance yet (sys.tables.is_tracked_by_cdc = 0, i.e. no row for it in
   cdc.change_tables). This creates the capture instance: the change table
   cdc.<capture_instance>_CT, the functions cdc.fn_cdc_get_all_changes_<capture_instance>,
   and rows in cdc.change_tables / cdc.captured_columns / cdc.index_columns.
   Run it once per table cdckit must capture (edit @table and run again).

 Requires
   * 01 (or 02 on RDS) has run: the database has is_cdc_enabled = 1.
   * Membership in db_owner of the database (sysadmin also works).
   * SQL Server Agent running (the capture job fills the change table).
   * If @filegroup_name is set, that filegroup must already exist.
   * Run it IN the target database: connect with `sqlcmd -d testDB`, pick the
     database in the SSMS drop-down, or add `USE [testDB];` + GO above this
     header. The script stops with an error if DB_NAME() differs from @database.

 Parameters of sys.sp_cdc_enable_table used here
   @source_schema         schema of the source table (@schema below).
   @source_name           name of the source table (@table below).
   @role_name             the GATING ROLE. To read change data a user needs SELECT
                          on the captured columns AND membership in this role
                          (sysadmin and db_owner bypass it). If the role does not
                          exist, sp_cdc_enable_table creates it. 05 adds the cdckit
                          user to it. NULL = no gating role: then only members of
                          sysadmin/db_owner get full access, so cdckit would need
                          db_owner - avoid NULL.
   @capture_instance      name of the capture instance; the change table is
                          cdc.<capture_instance>_CT. NULL = the default <schema>_<table>.
                          Must be unique in the database; a second, differently
                          named instance is how schema changes are picked up
                          (08_schema_change_new_capture_instance.sql).
   @supports_net_changes  0 here. Net-change support (cdc.fn_cdc_get_net_changes_*)
                          collapses several changes to one row per key and requires
                          an extra index on the change table, which costs capture
                          time and space. cdckit, like Debezium, reads EVERY change
                          in LSN order through fn_cdc_get_all_changes_*, so net
                          changes would be pure overhead.
   @filegroup_name        filegroup for the change table. Recommended: a dedicated
                          filegroup, separate from the source tables, so change
                          tables do not compete for space/IO with the data.
                          NULL = the database's default filegroup.
   @index_name            (optional) a unique index identifying rows when the table
                          has no primary key. NULL = use the primary key. cdckit
                          uses the key to build the Kafka-style event key; without
                          a primary key or unique index events have no key.
   @captured_column_list  (optional) comma-separated column list. NULL = all
                          columns. Columns left out never appear in cdckit's events.

 Two capture instances at most
   SQL Server allows at most TWO capture instances per source table. The second
   one exists only during a schema change (08); drop the old one afterwards or
   the next schema change cannot create a new instance. This script never
   creates a second instance: if the table is already tracked it only reports
   the existing instance(s).

 Edit
   Only the "EDIT HERE" block below.

 Idempotent
   Safe to run twice: a table that already has a capture instance is skipped.
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database             sysname;
DECLARE @schema               sysname;
DECLARE @table                sysname;
DECLARE @role_name            sysname;
DECLARE @capture_instance     sysname;
DECLARE @filegroup_name       sysname;
DECLARE @index_name           sysname;
DECLARE @captured_column_list nvarchar(max);

SET @database             = N'testDB';         -- database to run in (checked against DB_NAME())
SET @schema               = N'dbo';            -- source table schema
SET @table                = N'customers';      -- source table name
SET @role_name            = N'cdc_reader';     -- gating role; cdckit's user joins it in 05
SET @capture_instance     = N'dbo_customers';  -- NULL = default <schema>_<table>
SET @filegroup_name       = NULL;              -- e.g. N'testDB_CT' (must exist); NULL = default filegroup
SET @index_name           = NULL;              -- NULL = primary key
SET @captured_column_list = NULL;              -- NULL = all columns
-- ============================================================================

DECLARE @qualified_table nvarchar(300);
SET @qualified_table = QUOTENAME(@schema) + N'.' + QUOTENAME(@table);

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

IF OBJECT_ID(@qualified_table, N'U') IS NULL
BEGIN
    RAISERROR(N'Table %s does not exist in this database. Edit @schema / @table.', 16, 1, @qualified_table);
    RETURN;
END

IF @filegroup_name IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sys.filegroups WHERE name = @filegroup_name)
BEGIN
    RAISERROR(N'Filegroup %s does not exist: create it (ALTER DATABASE ... ADD FILEGROUP / ADD FILE) or set @filegroup_name = NULL.', 16, 1, @filegroup_name);
    RETURN;
END

IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(@qualified_table) AND is_tracked_by_cdc = 0)
BEGIN
    EXEC sys.sp_cdc_enable_table
        @source_schema        = @schema,
        @source_name          = @table,
        @role_name            = @role_name,
        @capture_instance     = @capture_instance,
        @supports_net_changes = 0,
        @index_name           = @index_name,
        @captured_column_list = @captured_column_list,
        @filegroup_name       = @filegroup_name;
    PRINT N'CDC enabled on table ' + @qualified_table + N'.';
END
ELSE
BEGIN
    PRINT N'Table ' + @qualified_table + N' already has a capture instance; nothing to do (see the rows below).';
END

-- The capture instance(s) of the table. Healthy: one row, supports_net_changes = 0,
-- role_name = the gating role, start_lsn not NULL once the capture job has run.
SELECT ct.capture_instance,
       ct.start_lsn,
       ct.supports_net_changes,
       ct.role_name,
       ct.index_name,
       ct.filegroup_name,
       ct.create_date
FROM cdc.change_tables AS ct
WHERE ct.source_object_id = OBJECT_ID(@qualified_table)
ORDER BY ct.create_date;
GO
