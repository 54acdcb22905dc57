/*
================================================================================
 01_enable_cdc_database.sql  -  enable change data capture on one database
================================================================================
 What it does
   Runs sys.sp_cdc_enable_db inside the database named in @database, but only if
   sys.databases.is_cdc_enabled = 0 for it. Enabling creates the cdc schema, the
   cdc user, the CDC metadata tables (cdc.change_tables, cdc.captured_columns,
   cdc.index_columns, cdc.ddl_history, cdc.lsn_time_mapping) and two SQL Server
   Agent jobs for the database: cdc.<database>_capture (reads the transaction log
   into the change tables) and cdc.<database>_cleanup (purges old change rows).

 Requires
   * SQL Server 2016 SP1 or later, Standard or Enterprise edition (or Developer).
   * The caller must be a member of the sysadmin fixed server role.
     On Amazon RDS use 02_enable_cdc_database_rds.sql instead (no sysadmin there).
   * A user database: CDC cannot be enabled on master, model, msdb or tempdb.
   * SQL Server Agent must be RUNNING (and should start automatically). Without it
     the capture job never runs: nothing reaches the change tables, cdckit sees
     no maximum LSN and reads nothing, and the cleanup job never purges either.
     Check with 07_verify.sql (sys.dm_server_services).

 Edit
   Only the variables in the "EDIT HERE" block below. The script can be run from
   any database (e.g. master): it switches into @database through
   [@database].sys.sp_executesql, which runs the statement in that database.

 Idempotent
   Safe to run twice: the second run sees is_cdc_enabled = 1 and does nothing.
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database sysname;
SET @database = N'testDB';          -- the database whose tables cdckit captures
-- ============================================================================

DECLARE @exec_in_database nvarchar(300);
DECLARE @statement nvarchar(max);

IF DB_ID(@database) IS NULL
BEGIN
    RAISERROR(N'Database %s does not exist. Edit @database at the top of the script.', 16, 1, @database);
    RETURN;
END

IF @database IN (N'master', N'model', N'msdb', N'tempdb')
BEGIN
    RAISERROR(N'CDC cannot be enabled on the system database %s.', 16, 1, @database);
    RETURN;
END

IF IS_SRVROLEMEMBER(N'sysadmin') <> 1
BEGIN
    RAISERROR(N'Enabling CDC on a database needs membership in the sysadmin server role.', 16, 1);
    RETURN;
END

IF EXISTS (SELECT 1 FROM sys.databases WHERE name = @database AND is_cdc_enabled = 0)
BEGIN
    -- [testDB].sys.sp_executesql executes its statement with testDB as the current
    -- database, which is what sys.sp_cdc_enable_db requires.
    SET @exec_in_database = QUOTENAME(@database) + N'.sys.sp_executesql';
    SET @statement = N'EXEC sys.sp_cdc_enable_db;';
    EXEC @exec_in_database @statement;
    PRINT N'CDC enabled on database ' + @database + N'.';
END
ELSE
BEGIN
    PRINT N'CDC is already enabled on database ' + @database + N'; nothing to do.';
END

-- Show the result: is_cdc_enabled must now be 1.
SELECT name, is_cdc_enabled
FROM sys.databases
WHERE name = @database;
GO
