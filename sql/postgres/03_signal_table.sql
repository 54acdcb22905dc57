/*
 03_signal_table.sql  -  the Debezium signalling table, for ad hoc incremental snapshots
 ==========================================================================================
 Run as the tables' owner or a superuser, in the captured database:

   psql "host=... dbname=shop user=postgres" -v schema=public -v table=debezium_signal \
        -v publication=dbz_publication -v cdckit_user=cdckit -f sql/postgres/03_signal_table.sql

 1. Creates <schema>.<table> (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048)), the
    columns Debezium's signalling table has.
 2. Adds it to the publication when the publication lists its tables (publication.autocreate.mode=filtered does
    this itself; FOR ALL TABLES covers it already): its inserts reach cdckit through the replication slot.
 3. Lets cdckit's user read it (cdckit reads signals from the stream, and the check at start reads the catalog).

 Then set signal.data.collection=<schema>.<table> and restart the stream. A signal is one insert:

   INSERT INTO public.debezium_signal (id, type, data) VALUES ('ad-hoc-1', 'execute-snapshot',
     '{"data-collections": ["public.orders"], "type": "incremental"}');

 Other types: stop-snapshot (data-collections optional: all when left out), pause-snapshot, resume-snapshot.
 Idempotent: an existing table is left as it is.
*/
\set ON_ERROR_STOP on

SELECT format('CREATE TABLE %I.%I (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL)',
              :'schema', :'table')
WHERE to_regclass(format('%I.%I', :'schema', :'table')) IS NULL \gexec

SELECT format('ALTER PUBLICATION %I ADD TABLE %I.%I', :'publication', :'schema', :'table')
FROM pg_publication p
WHERE p.pubname = :'publication' AND NOT p.puballtables
  AND NOT EXISTS (SELECT FROM pg_publication_tables t WHERE t.pubname = p.pubname
                  AND t.schemaname = :'schema' AND t.tablename = :'table') \gexec

SELECT format('GRANT SELECT ON %I.%I TO %I', :'schema', :'table', :'cdckit_user') \gexec
