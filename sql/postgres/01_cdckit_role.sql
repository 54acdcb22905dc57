/*
 01_cdckit_role.sql  -  the login cdckit uses, with only what logical replication capture needs
 ================================================================================================
 Run as a superuser (on Amazon RDS / Aurora: the master user), once per captured database:

   psql "host=... dbname=shop user=postgres" -v cdckit_user=cdckit -v cdckit_password="$CDCKIT_PASSWORD" \
        -v dbname=shop -v schema=public -f sql/postgres/01_cdckit_role.sql

 Grants: LOGIN and REPLICATION (create and read its replication slot; on RDS the REPLICATION attribute is not
 available: the script grants the rds_replication role instead), CONNECT on the database, USAGE on the schema,
 SELECT on its tables (the snapshot reads them) now and later. Never SUPERUSER, CREATEDB, CREATEROLE, or any
 write privilege. The publication is created by 02_publication.sql, so cdckit runs with
 publication.autocreate.mode=disabled and needs no CREATE privilege either.

 Idempotent: an existing role keeps its password; grants are repeated harmlessly.
*/
\set ON_ERROR_STOP on

SELECT format('CREATE ROLE %I WITH LOGIN PASSWORD %L', :'cdckit_user', :'cdckit_password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'cdckit_user') \gexec

-- REPLICATION where the server allows it; rds_replication on Amazon RDS / Aurora
SELECT CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'rds_replication')
            THEN format('GRANT rds_replication TO %I', :'cdckit_user')
            ELSE format('ALTER ROLE %I WITH REPLICATION', :'cdckit_user') END \gexec

SELECT format('GRANT CONNECT ON DATABASE %I TO %I', :'dbname', :'cdckit_user') \gexec
SELECT format('GRANT USAGE ON SCHEMA %I TO %I', :'schema', :'cdckit_user') \gexec
SELECT format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO %I', :'schema', :'cdckit_user') \gexec
SELECT format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT ON TABLES TO %I', :'schema', :'cdckit_user') \gexec
