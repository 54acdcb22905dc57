/*
================================================================================
 02_enable_cdc_database_rds.sql  -  enable CDC on a database on Amazon RDS
================================================================================
 What it does
   The Amazon RDS for SQL Server variant of 01_enable_cdc_database.sql. RDS does
   not give anyone sysadmin, so sys.sp_cdc_enable_db cannot be called directly;
   RDS provides msdb.dbo.rds_cdc_enable_db, which enables CDC on the named
   database (cdc schema, metadata tables, capture and cleanup jobs). It is run
   only if sys.databases.is_cdc_enabled = 0 for @database.
   Run EITHER 01 (self-managed SQL Server) OR this script (RDS), not both.

 Requires
   * The RDS master user (the login created with the DB instance), or a login
     the master user granted EXECUTE ON msdb.dbo.rds_cdc_enable_db.
   * An RDS edition with CDC support (Standard or Enterprise, 2016 SP1+).
   * The SQL Server Agent runs on RDS as part of the service; the CDC jobs are
     owned by the RDS system account and do not appear in SSMS, but
     sys.sp_cdc_change_job / sys.sp_cdc_start_job work as usual (04_tune_capture_job.sql).
   * Large values: 'max text repl size' (the most bytes one INSERT or UPDATE may
     write into a captured text, ntext, image, varchar(max), nvarchar(max),
     varbinary(max) or xml column; 65536 by default, above which the
     application's own statement fails with error 7139) cannot be changed with
     sp_configure on RDS: it is the DB parameter group's "max text repl size (B)"
     parameter. Set it to -1 (no limit) in a custom parameter group attached to
     the instance, e.g.
       aws rds modify-db-parameter-group --db-parameter-group-name <group>
         --parameters "ParameterName='max text repl size (B)',ParameterValue=-1,ApplyMethod=immediate"
     (what 01 does with EXEC sp_configure 'max text repl size', -1; RECONFIGURE;
     on a self-managed server). The script only reports the value in use.
   * Note: an RDS snapshot restore, point-in-time restore or native restore
     DISABLES CDC and removes its metadata. After such a restore, run this
     script and 03 again, and let cdckit take a new snapshot.

 Edit
   Only the "EDIT HERE" block below. Run from any database.

 Idempotent
   Safe to run twice: the second run sees is_cdc_enabled = 1 and does nothing.
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database sysname;
SET @database = N'testDB';          -- the database whose tables cdckit captures
-- ============================================================================

IF DB_ID(@database) IS NULL
BEGIN
    RAISERROR(N'Database %s does not exist. Edit @database at the top of the script.', 16, 1, @database);
    RETURN;
END

IF EXISTS (SELECT 1 FROM sys.databases WHERE name = @database AND is_cdc_enabled = 0)
BEGIN
    EXEC msdb.dbo.rds_cdc_enable_db @database;
    PRINT N'CDC enabled on database ' + @database + N' (Amazon RDS).';
END
ELSE
BEGIN
    PRINT N'CDC is already enabled on database ' + @database + N'; nothing to do.';
END

IF EXISTS (SELECT 1 FROM sys.configurations
           WHERE name = N'max text repl size (B)' AND CAST(value_in_use AS int) <> -1)
BEGIN
    PRINT N'max text repl size is not -1: a captured large value over it makes the writing statement fail '
        + N'(error 7139). On RDS, set "max text repl size (B)" to -1 in the DB parameter group.';
END

SELECT name, is_cdc_enabled
FROM sys.databases
WHERE name = @database;
GO
