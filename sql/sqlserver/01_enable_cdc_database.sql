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

 Large values (server-wide)
   'max text repl size' is the most bytes one INSERT or UPDATE may write into a
   captured text, ntext, image, varchar(max), nvarchar(max), varbinary(max) or
   xml column: 65536 by default. Above it the APPLICATION's own statement fails
   with error 7139 ("Length of LOB data (N) to be replicated exceeds configured
   maximum 65536"), not cdckit. The script sets @max_text_repl_size (-1: no
   limit but the data type's) with sp_configure + RECONFIGURE, which needs
   ALTER SETTINGS (sysadmin has it), takes effect at once, and also applies to
   transactional replication. On Amazon RDS it is the DB parameter group's
   "max text repl size (B)" parameter instead (see 02).

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
DECLARE @max_text_repl_size int;
SET @database = N'testDB';          -- the database whose tables cdckit captures
SET @max_text_repl_size = -1;       -- bytes of a captured large value at most; -1 = no limit (default 65536)
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

-- Large captured values: without this, an INSERT or UPDATE writing more than 65536 bytes into a captured
-- large-object column fails with error 7139. In effect at once; server-wide.
IF EXISTS (SELECT 1 FROM sys.configurations
           WHERE name = N'max text repl size (B)' AND CAST(value_in_use AS int) <> @max_text_repl_size)
BEGIN
    EXEC sp_configure N'max text repl size', @max_text_repl_size;
    RECONFIGURE;
    PRINT N'max text repl size set to ' + CAST(@max_text_repl_size AS nvarchar(11)) + N' (-1 = no limit).';
END

-- Show the result: is_cdc_enabled must now be 1.
SELECT name, is_cdc_enabled
FROM sys.databases
WHERE name = @database;
GO
