/*
================================================================================
 04_tune_capture_job.sql  -  tune the CDC capture job and the cleanup retention
================================================================================
 What it does
   1. Sets the capture job's @pollinginterval, @maxtrans and @maxscans with
      sys.sp_cdc_change_job @job_type = N'capture', if they differ from the
      values in msdb.dbo.cdc_jobs, and then restarts the capture job
      (sys.sp_cdc_stop_job + sys.sp_cdc_start_job): a running capture job only
      picks up new settings when it is restarted.
   2. Sets the cleanup job's @retention with sys.sp_cdc_change_job
      @job_type = N'cleanup', if it differs. The cleanup job is not continuous
      (by default it runs daily at 02:00) and reads the retention on each run, so
      it needs no restart.

 How the capture job works, and the latency / throughput trade-off
   The capture job (sys.sp_cdc_scan) runs in cycles:
     * @maxtrans        transactions processed per log scan.           default 500
     * @maxscans        log scans per cycle.                          default 10
     * @pollinginterval seconds to sleep between cycles.                default 5
   A cycle therefore moves at most @maxtrans * @maxscans transactions into the
   change tables (defaults: 500 * 10 = 5000), then waits @pollinginterval
   seconds. That is the throughput ceiling: about
       @maxtrans * @maxscans / (@pollinginterval + scan time)  transactions/s
   (defaults: at most ~1000 transactions/s). If the workload commits more than
   that, the capture job falls behind and cdckit's latency grows without bound
   (sys.dm_cdc_log_scan_sessions.latency in 07_verify.sql keeps rising).
     * Lower @pollinginterval  -> lower latency (a commit waits up to this long
       before it is captured) but more frequent log scans, i.e. more CPU/IO.
       0 = no wait at all (continuous scanning).
     * Higher @maxtrans / @maxscans -> more throughput per cycle, longer scans,
       more load while scanning. Lower values reduce load but add latency.
   cdckit cannot see a change before the capture job has copied it into the
   change table, so end-to-end latency >= capture latency + cdckit's own poll.

 Retention (cleanup job)
   @retention_minutes is how long change rows stay in the change tables
   (default 4320 = 3 days; maximum 52494800 = 100 years). It MUST exceed the
   longest time cdckit may be stopped or behind (outage, maintenance,
   backlog): when cdckit resumes from an LSN older than the retention window,
   those changes have been purged before they were read, and cdckit must take
   a new snapshot. Larger retention costs disk space in the change tables.

 Requires
   * 01 (or 02) has run: the capture and cleanup jobs exist.
   * Membership in db_owner of the database (sysadmin also works); the job
     restart additionally needs the SQL Server Agent running.
   * Run it IN the target database (connect to it / SSMS drop-down / USE).
   * Amazon RDS: the master user (it runs rdsadmin.dbo.rds_set_configuration,
     step 3, which keeps the settings through a Multi-AZ failover).
   * If the database is also published with transactional replication, the
     replication log reader does the capturing and the capture-job settings
     have no effect.

 Edit
   Only the "EDIT HERE" block below.

 Idempotent
   Safe to run twice: values already in place are not changed and the capture
   job is restarted only when its settings actually changed.
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database          sysname;
DECLARE @pollinginterval   bigint;
DECLARE @maxtrans          int;
DECLARE @maxscans          int;
DECLARE @retention_minutes bigint;
DECLARE @restart_capture   bit;

SET @database          = N'testDB';
SET @pollinginterval   = 5;       -- seconds between capture cycles (default 5)
SET @maxtrans          = 500;     -- transactions per log scan (default 500)
SET @maxscans          = 10;      -- log scans per cycle (default 10)
SET @retention_minutes = 10080;   -- 7 days; must exceed cdckit's longest outage (default 4320 = 3 days)
SET @restart_capture   = 1;       -- 1 = stop/start the capture job so new settings take effect now
-- ============================================================================

DECLARE @error_number int;
DECLARE @error_message nvarchar(4000);

IF DB_NAME() <> @database
BEGIN
    RAISERROR(N'Run this script in database %s (connect to it or add USE before the script).', 16, 1, @database);
    RETURN;
END

IF NOT EXISTS (SELECT 1 FROM msdb.dbo.cdc_jobs WHERE database_id = DB_ID() AND job_type = N'capture')
BEGIN
    RAISERROR(N'No CDC capture job for database %s: run 01_enable_cdc_database.sql (or 02) and 03 first.', 16, 1, @database);
    RETURN;
END

-- 1. Capture job: change and restart only when a setting differs.
IF EXISTS (SELECT 1 FROM msdb.dbo.cdc_jobs
           WHERE database_id = DB_ID() AND job_type = N'capture'
             AND (pollinginterval <> @pollinginterval OR maxtrans <> @maxtrans OR maxscans <> @maxscans))
BEGIN
    EXEC sys.sp_cdc_change_job
        @job_type        = N'capture',
        @pollinginterval = @pollinginterval,
        @maxtrans        = @maxtrans,
        @maxscans        = @maxscans;
    PRINT N'Capture job settings changed.';

    IF @restart_capture = 1
    BEGIN
        -- Stopping a capture job that is not running raises error 22022; ignore
        -- that one, the start below runs it with the new settings either way.
        BEGIN TRY
            EXEC sys.sp_cdc_stop_job @job_type = N'capture';
        END TRY
        BEGIN CATCH
            SET @error_number = ERROR_NUMBER();
            SET @error_message = ERROR_MESSAGE();
            IF @error_number <> 22022
            BEGIN
                RAISERROR(N'%s', 16, 1, @error_message);
                RETURN;
            END
        END CATCH
        EXEC sys.sp_cdc_start_job @job_type = N'capture';
        PRINT N'Capture job restarted.';
    END
    ELSE
    BEGIN
        PRINT N'Capture job NOT restarted: the new settings apply after its next restart.';
    END
END
ELSE
BEGIN
    PRINT N'Capture job already has these settings; nothing to do.';
END

-- 2. Cleanup job retention.
IF EXISTS (SELECT 1 FROM msdb.dbo.cdc_jobs
           WHERE database_id = DB_ID() AND job_type = N'cleanup' AND retention <> @retention_minutes)
BEGIN
    EXEC sys.sp_cdc_change_job
        @job_type  = N'cleanup',
        @retention = @retention_minutes;
    PRINT N'Cleanup job retention changed.';
END
ELSE
BEGIN
    PRINT N'Cleanup job retention already set (or no cleanup job); nothing to do.';
END

-- 3. Amazon RDS: record the settings with rdsadmin.dbo.rds_set_configuration too.
--    On a Multi-AZ instance, RDS drops and re-creates the CDC jobs on the new
--    primary after a failover, with the parameters recorded this way; settings
--    made only with sp_cdc_change_job are lost there. The parameters are the
--    instance's (every database's CDC jobs). See "Change data capture for
--    Multi-AZ instances" in the RDS User Guide:
--    https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/Appendix.SQLServer.CommonDBATasks.CDC.html
IF DB_ID(N'rdsadmin') IS NOT NULL
BEGIN
    EXEC rdsadmin.dbo.rds_set_configuration N'cdc_capture_pollinginterval', @pollinginterval;
    EXEC rdsadmin.dbo.rds_set_configuration N'cdc_capture_maxtrans', @maxtrans;
    EXEC rdsadmin.dbo.rds_set_configuration N'cdc_capture_maxscans', @maxscans;
    EXEC rdsadmin.dbo.rds_set_configuration N'cdc_cleanup_retention', @retention_minutes;
    PRINT N'Amazon RDS: settings recorded with rds_set_configuration (kept after a Multi-AZ failover).';
END

-- Current settings. Healthy: one capture row (continuous = 1) with the values
-- above and one cleanup row whose retention (minutes) exceeds cdckit's longest outage.
SELECT job_type, continuous, pollinginterval, maxtrans, maxscans, retention, threshold
FROM msdb.dbo.cdc_jobs
WHERE database_id = DB_ID()
ORDER BY job_type;
GO
