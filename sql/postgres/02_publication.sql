/*
 02_publication.sql  -  the publication cdckit reads (pgoutput), for the captured tables only
 ============================================================================================
 Run as the tables' owner or a superuser, in the captured database:

   psql "host=... dbname=shop user=postgres" -v publication=dbz_publication \
        -v tables='public.orders,public.customers' -f sql/postgres/02_publication.sql

 Then give cdckit publication.name=<publication> and publication.autocreate.mode=disabled. Tables added later:
 ALTER PUBLICATION <publication> ADD TABLE <schema>.<table> (cdckit refuses to start while a table in its
 table.include.list is missing from the publication, naming it).

 Idempotent: an existing publication is left as it is.
*/
\set ON_ERROR_STOP on

SELECT format('CREATE PUBLICATION %I FOR TABLE %s', :'publication',
              (SELECT string_agg(format('%I.%I', split_part(trim(t), '.', 1), split_part(trim(t), '.', 2)), ', ')
               FROM unnest(string_to_array(:'tables', ',')) AS t))
WHERE NOT EXISTS (SELECT FROM pg_publication WHERE pubname = :'publication') \gexec
