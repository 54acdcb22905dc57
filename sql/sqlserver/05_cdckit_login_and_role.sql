/*
================================================================================
 05_cdckit_login_and_role.sql  -  least-privilege login and user for cdckit
================================================================================
 What it does (each step only if not done yet)
   1. CREATE LOGIN @login WITH PASSWORD = @password, CHECK_POLICY = ON
      (server level; the Windows password policy applies to the password).
   2. CREATE USER @user_name FOR LOGIN @login in @database.
   3. Adds the user to the CDC gating role @role_name - the same role given to
      sys.sp_cdc_enable_table (@role_name in 03 and 06). Without membership,
      cdc.fn_cdc_get_all_changes_* and the change tables return nothing / deny.
      The role is created here if 03 has not created it yet.
   4. GRANT SELECT on every captured table listed in @captured_tables (needed
      for the initial/incremental snapshots AND for reading change data: SQL
      Server requires SELECT on all captured columns of the source table) and on
      the signal table dbo.debezium_signal (06).
   5. GRANT SELECT ON SCHEMA::cdc (change tables cdc.*_CT, cdc.change_tables,
      cdc.captured_columns, cdc.index_columns, cdc.ddl_history,
      cdc.lsn_time_mapping and the cdc.fn_cdc_get_all_changes_* functions).
   6. GRANT VIEW DATABASE STATE (sys.dm_cdc_log_scan_sessions, sys.dm_cdc_errors,
      used for lag monitoring).
   7. Optionally (@grant_view_server_state = 1) GRANT VIEW SERVER STATE, needed
      for the SQL Server Agent status check cdckit runs when it finds no maximum
      LSN (SELECT ... FROM sys.dm_server_services WHERE servicename LIKE
      N'SQL Server Agent (%'). Alternative if server-wide state is not
      acceptable: leave it at 0; cdckit then cannot tell "Agent stopped" from
      "no changes yet", so monitor the Agent service outside cdckit, or (as
      Debezium's database.sqlserver.agent.status.query option allows) point the
      check at a DBA-owned function, e.g. dbo.func_is_sql_server_agent_running(),
      that is signed with a certificate whose login holds VIEW SERVER STATE and
      on which cdckit only gets EXECUTE.
   Never grants db_owner, sysadmin or any write permission on the source tables.
   INSERT on the signal table is off by default (@grant_signal_insert): cdckit
   only reads signals; whoever SENDS signals needs INSERT (grant it to them).

 Requires
   * ALTER ANY LOGIN (securityadmin) for step 1, db_owner (or ALTER ANY USER and
     ALTER ANY ROLE) in @database for steps 2-6, and CONTROL SERVER (sysadmin)
     for step 7. In practice: run it as sysadmin, or on RDS as the master user.
   * Run it IN the target database (connect to it / SSMS drop-down / USE).
   * Replace the @password placeholder with a strong password from your secret
     store before running; the script refuses to create the login with the
     placeholder. Do not commit the edited copy. cdckit reads the password from
     its configuration/secret store, never from this file.

 Edit
   Only the "EDIT HERE" block below.

 Idempotent
   Safe to run twice: existing login, user and role memberships are kept (the
   password of an existing login is NOT changed), and GRANT of a permission
   already granted is a no-op.
================================================================================
*/
SET NOCOUNT ON;

-- ============================== EDIT HERE ===================================
DECLARE @database                sysname;
DECLARE @login                   sysname;
DECLARE @password                nvarchar(128);
DECLARE @user_name               sysname;
DECLARE @role_name               sysname;
DECLARE @grant_view_server_state bit;
DECLARE @grant_signal_insert     bit;
DECLARE @captured_tables TABLE (schema_name sysname NOT NULL, table_name sysname NOT NULL);

SET @database                = N'testDB';
SET @login                   = N'cdckit';
SET @password                = N'<REPLACE_WITH_STRONG_PASSWORD>';   -- placeholder: replace, never commit
SET @user_name               = N'cdckit';
SET @role_name               = N'cdc_reader';   -- the @role_name given to sys.sp_cdc_enable_table (03, 06)
SET @grant_view_server_state = 1;               -- 0 = no Agent status check (see 7. above)
SET @grant_signal_insert     = 0;               -- 1 = cdckit may also INSERT into dbo.debezium_signal

-- Every table cdckit captures (the tables enabled in 03), plus the signal table.
INSERT INTO @captured_tables (schema_name, table_name)
VALUES (N'dbo', N'customers'),
       (N'dbo', N'debezium_signal');
-- ============================================================================

DECLARE @sql nvarchar(max);

IF DB_NAME() <> @database
BEGIN
    RAISERROR(N'Run this script in database %s (connect to it or add USE before the script).', 16, 1, @database);
    RETURN;
END

-- 1. Login (server level). The password is only needed when the login is new.
IF NOT EXISTS (SELECT 1 FROM sys.server_principals WHERE name = @login)
BEGIN
    IF @password IS NULL OR @password = N'' OR @password LIKE N'<%>'
    BEGIN
        RAISERROR(N'Set @password to a real strong password (it is still the placeholder).', 16, 1);
        RETURN;
    END
    SET @sql = N'CREATE LOGIN ' + QUOTENAME(@login)
             + N' WITH PASSWORD = N''' + REPLACE(@password, N'''', N'''''') + N''''
             + N', DEFAULT_DATABASE = ' + QUOTENAME(@database)
             + N', CHECK_POLICY = ON, CHECK_EXPIRATION = OFF;';
    EXEC sys.sp_executesql @sql;
    PRINT N'Login ' + @login + N' created.';
END
ELSE
BEGIN
    PRINT N'Login ' + @login + N' already exists; password left unchanged.';
END

-- 2. Database user.
IF NOT EXISTS (SELECT 1 FROM sys.database_principals WHERE name = @user_name)
BEGIN
    SET @sql = N'CREATE USER ' + QUOTENAME(@user_name) + N' FOR LOGIN ' + QUOTENAME(@login) + N';';
    EXEC sys.sp_executesql @sql;
    PRINT N'User ' + @user_name + N' created.';
END

-- 3. Gating role membership.
IF @role_name IS NOT NULL AND DATABASE_PRINCIPAL_ID(@role_name) IS NULL
BEGIN
    SET @sql = N'CREATE ROLE ' + QUOTENAME(@role_name) + N';';
    EXEC sys.sp_executesql @sql;
    PRINT N'Role ' + @role_name + N' created (03 would otherwise create it).';
END

IF @role_name IS NOT NULL AND NOT EXISTS (
    SELECT 1
    FROM sys.database_role_members AS drm
    WHERE drm.role_principal_id = DATABASE_PRINCIPAL_ID(@role_name)
      AND drm.member_principal_id = DATABASE_PRINCIPAL_ID(@user_name))
BEGIN
    SET @sql = N'ALTER ROLE ' + QUOTENAME(@role_name) + N' ADD MEMBER ' + QUOTENAME(@user_name) + N';';
    EXEC sys.sp_executesql @sql;
    PRINT N'User ' + @user_name + N' added to role ' + @role_name + N'.';
END

-- 4. SELECT on the captured tables (and the signal table); tables that do not
--    exist (yet) are skipped - run the script again after creating them.
SET @sql = N'';
SELECT @sql = @sql + N'GRANT SELECT ON ' + QUOTENAME(schema_name) + N'.' + QUOTENAME(table_name)
            + N' TO ' + QUOTENAME(@user_name) + N'; '
FROM @captured_tables
WHERE OBJECT_ID(QUOTENAME(schema_name) + N'.' + QUOTENAME(table_name), N'U') IS NOT NULL;
EXEC sys.sp_executesql @sql;

IF @grant_signal_insert = 1 AND OBJECT_ID(N'dbo.debezium_signal', N'U') IS NOT NULL
BEGIN
    SET @sql = N'GRANT INSERT ON dbo.debezium_signal TO ' + QUOTENAME(@user_name) + N';';
    EXEC sys.sp_executesql @sql;
END

-- 5. + 6. The cdc schema and database DMVs.
IF SCHEMA_ID(N'cdc') IS NOT NULL
BEGIN
    SET @sql = N'GRANT SELECT ON SCHEMA::cdc TO ' + QUOTENAME(@user_name) + N';';
    EXEC sys.sp_executesql @sql;
END
ELSE
BEGIN
    PRINT N'No cdc schema yet: run 01/02 first, then this script again.';
END

SET @sql = N'GRANT VIEW DATABASE STATE TO ' + QUOTENAME(@user_name) + N';';
EXEC sys.sp_executesql @sql;

-- 7. Optional server-level permission; server-scope GRANTs must run in master.
IF @grant_view_server_state = 1
BEGIN
    SET @sql = N'GRANT VIEW SERVER STATE TO ' + QUOTENAME(@login) + N';';
    EXEC master.sys.sp_executesql @sql;
    PRINT N'VIEW SERVER STATE granted to ' + @login + N'.';
END

-- Result: the user's role memberships and permissions. Healthy: member of
-- @role_name only (never db_owner); SELECT on the tables and on SCHEMA cdc;
-- VIEW DATABASE STATE.
SELECT r.name AS role_name
FROM sys.database_role_members AS drm
JOIN sys.database_principals AS r ON r.principal_id = drm.role_principal_id
WHERE drm.member_principal_id = DATABASE_PRINCIPAL_ID(@user_name);

SELECT p.class_desc, p.permission_name, p.state_desc,
       CASE p.class
           WHEN 1 THEN OBJECT_SCHEMA_NAME(p.major_id) + N'.' + OBJECT_NAME(p.major_id)
           WHEN 3 THEN SCHEMA_NAME(p.major_id)
           ELSE DB_NAME()
       END AS securable
FROM sys.database_permissions AS p
WHERE p.grantee_principal_id = DATABASE_PRINCIPAL_ID(@user_name)
ORDER BY p.class_desc, securable, p.permission_name;
GO
