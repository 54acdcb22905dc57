"""The corpus cdckit's records are compared on with Debezium 2.5.2's (``cdckit_lab.parity``): tables of every
PostgreSQL type and table shape Debezium's connector captures, the rows they hold when the snapshot runs, the
changes made while both stream, and the connector settings each comparison runs under.

Each table is created, filled and changed by plain SQL. Values sit at ordinary points and at the edges: NULLs,
limits, infinities, NaN, far dates and intervals, negative numeric scales, unchanged TOASTed values, and so on.
Table shapes: column defaults, no primary key (with REPLICA IDENTITY DEFAULT and FULL, and with
``message.key.columns``), REPLICA IDENTITY USING INDEX and FULL, generated columns, partitions. The last table
written, ``zz_sentinel``, marks the end of the changes: once a capture holds its row, it holds everything before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PREFIX = "parity"


@dataclass(frozen=True)
class Table:
    """One captured table: ``ddl`` creates it (and what it needs), ``rows`` fill it before the snapshot,
    ``changes`` run once both captures stream. ``captured`` names what ``table.include.list`` lists for it (the
    partitions of a partitioned table, else the table)."""

    name: str
    ddl: tuple[str, ...]
    rows: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()
    captured: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()  # the profiles it is captured in (empty: all)

    @property
    def include(self) -> tuple[str, ...]:
        return self.captured or (f"public.{self.name}",)


SETUP = (
    "CREATE EXTENSION IF NOT EXISTS hstore",
    "CREATE EXTENSION IF NOT EXISTS ltree",
    "CREATE EXTENSION IF NOT EXISTS citext",
    "CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN public.positive AS integer CHECK (VALUE > 0)",
    "CREATE DOMAIN public.price AS numeric(8,2)",
)

# Enough incompressible text that PostgreSQL stores it out of line (TOAST): an UPDATE that leaves it alone sends
# no value for it through logical decoding.
_BIG = "(SELECT string_agg(md5(g::text || {seed}), '') FROM generate_series(1, 400) g)"

TABLES: tuple[Table, ...] = (
    Table("t_numeric", (
        "CREATE TABLE public.t_numeric (id integer PRIMARY KEY, n numeric, n52 numeric(5,2), nneg numeric(5,-2), "
        "n0 numeric(10,0), big numeric(38,10), m money, f4 real, f8 double precision, i2 smallint, i8 bigint, "
        "o oid, p public.price)",), (
        "(1, 12345.6789, 123.45, 12300, 42, 1234567890123456789012345678.0123456789, 12.34, 1.5, 2.25, 1, 1, 1, "
        "9.99)",
        "(2, -0.000001, -999.99, -99900, -9999999999, -1, -92233720368547758.08, -3.4028235e38, -1e-300, -32768, "
        "-9223372036854775808, 0, -0.01)",
        "(3, 0, 0, 0, 0, 0, 92233720368547758.07, 'NaN', '-Infinity', 32767, 9223372036854775807, 4294967295, "
        "0)",
        "(4, 1e-30, 0.01, 49, 1, 0.0000000001, 0.01, 'Infinity', 'NaN', 0, 0, 7, 123456.78)",
        "(5, -123e25, NULL, 50, NULL, NULL, 0, 1e-45, 5e-324, NULL, NULL, NULL, NULL)",
        "(6, 100, 1, -49, 0, 10000000000.5, -0.01, 0.1, 0.1, 0, 0, 0, 1)",
    ), (
        "INSERT INTO public.t_numeric VALUES (10, 1e-20, 0.5, 151, 7, 1.1, 1000000.00, 1e7, 1e7, 5, 5, 5, 2.5)",
        "UPDATE public.t_numeric SET n = 5.5, nneg = -150, m = -0.5 WHERE id = 1",
        "DELETE FROM public.t_numeric WHERE id = 2",
    )),
    # NaN and the infinities: Debezium 2.5.2 stops on them with decimal.handling.mode=precise (no Decimal holds
    # them), so this table is captured only under the string and double modes.
    Table("t_numeric_special", (
        "CREATE TABLE public.t_numeric_special (id integer PRIMARY KEY, n numeric, n52 numeric(5,2), "
        "a_n numeric[])",), (
        "(1, 'NaN', 'NaN', '{1.5,NaN}')", "(2, 'Infinity', 1.25, '{Infinity,-Infinity}')",
        "(3, '-Infinity', NULL, NULL)",
    ), (
        "INSERT INTO public.t_numeric_special VALUES (10, 'NaN', 'NaN', '{NaN}')",
        "UPDATE public.t_numeric_special SET n = 'Infinity' WHERE id = 1",
    ), profiles=("modes-a", "modes-b")),
    # The same values in a snapshot only: Debezium's snapshot reads them through JDBC and writes them (its
    # stream stops on them in precise mode).
    Table("t_numeric_read", (
        "CREATE TABLE public.t_numeric_read (id integer PRIMARY KEY, n numeric, n52 numeric(5,2))",), (
        "(1, 'NaN', 'NaN')", "(2, 'Infinity', 1)", "(3, '-Infinity', NULL)", "(4, 1.5, 2.5)",
    )),
    Table("t_text", (
        "CREATE TABLE public.t_text (id integer PRIMARY KEY, nm name, ch char(3), c1 \"char\", bp bpchar, "
        "vc varchar(10), t text, ci citext, u uuid, js json, jb jsonb, ip inet, cidr_ cidr, mac macaddr, "
        "mac8 macaddr8, lt ltree, tv tsvector, tq tsquery, lsn pg_lsn)",), (
        "(1, 'a name', 'ab', 'x', 'bp', 'abc', 'text', 'CiTeXt', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
        "'{\"a\": [1, 2]}', '{\"b\": 1, \"a\": null}', '192.168.1.1', '10.0.0.0/8', '08:00:2b:01:02:03', "
        "'08:00:2b:01:02:03:04:05', 'top.science.astronomy', 'a fat cat sat on a mat', 'fat & (rat | cat)', "
        "'16/B374D848')",
        "(2, '', '', ' ', '', '', '', '', '00000000-0000-0000-0000-000000000000', '[]', '{}', '::1', '::/0', "
        "'ff:ff:ff:ff:ff:ff', '00:00:00:00:00:00:00:00', '', '', '', '0/0')",
        "(3, repeat('n', 70), 'x\"y', '\\', 'quote\"s', E'tab\\tnl\\n', E'\\u00e9\\u2028 \\U0001F600', 'X', NULL, "
        "'\"s\"', '[1, 2.50, \"x\", true]', '2001:db8::1/64', '2001:db8::/32', NULL, NULL, 'a.b_c.d1', "
        "'''quoted'' weight:3A zero:1B', '!a <-> b', NULL)",
        "(4" + ", NULL" * 18 + ")",
    ), (
        "INSERT INTO public.t_text (id, nm, t, lt, tv, tq) VALUES (10, 'inserted', 'new', 'x.y', 'b a', 'a & b')",
        "UPDATE public.t_text SET t = 'changed', lt = 'x', tv = 'z' WHERE id = 1",
        "DELETE FROM public.t_text WHERE id = 2",
    )),
    Table("t_time", (
        "CREATE TABLE public.t_time (id integer PRIMARY KEY, d date, t time, t0 time(0), t3 time(3), tz timetz, "
        "ts timestamp, ts0 timestamp(0), ts3 timestamp(3), tstz timestamptz, tstz3 timestamptz(3), iv interval, "
        "ivym interval year to month, ivs interval second(3))",), (
        "(1, '2024-02-29', '13:14:15.123456', '13:14:15', '13:14:15.123', '13:14:15.5+02', "
        "'2024-01-02 03:04:05.123456', '2024-01-02 03:04:05', '2024-01-02 03:04:05.123', "
        "'2024-01-02 03:04:05.123456+00', '2024-01-02 03:04:05.12+05:30', '1 year 2 mons 3 days 04:05:06.5', "
        "'1 year 2 months', '1.5 seconds')",
        "(2, 'infinity', '24:00:00', '00:00:00', '23:59:59.999', '00:00:00-12', 'infinity', 'infinity', "
        "'infinity', 'infinity', 'infinity', '-178000000 years', '-178000000 years', '-0.001 seconds')",
        "(3, '-infinity', '00:00:00', '23:59:59', '00:00:00.001', '23:59:59.999999+14', '-infinity', '-infinity', "
        "'-infinity', '-infinity', '-infinity', '178000000 years', '0', '86399.999 seconds')",
        "(4, '5874897-12-31', '12:00:00', NULL, NULL, NULL, '294276-12-31 23:59:59.999999', "
        "'294276-12-31 23:59:59', '2262-04-11 23:47:16.854', '294276-12-31 23:59:59.999999+00', "
        "'9999-12-31 23:59:59.999+00', '2147483647 days 596523 hours 59.999999 seconds', '1 mon', "
        "'-1 days -00:00:00.000001')",
        "(5, '1582-10-15', NULL, NULL, NULL, NULL, '1582-10-15 00:00:00', '1970-01-01 00:00:00', "
        "'1969-12-31 23:59:59.999', '1970-01-01 00:00:00+00', '1969-12-31 23:59:59.999+00', "
        "'-1 year -2 mons +3 days -04:05:06', '-1 mon', '0.000001 seconds')",
        "(6" + ", NULL" * 13 + ")",
        "(7, '0044-03-15 BC', NULL, NULL, NULL, NULL, '1000-01-01 12:00:00', '0001-01-01 00:00:00 BC', "
        "'1582-10-04 23:59:59.999', '1000-01-01 00:00:00+00', '0044-03-15 00:00:00+00 BC', "
        "'-2147483648 days -596523 hours', '1 year 11 mons', '0.1 seconds')",
    ), (
        "INSERT INTO public.t_time VALUES (10, '4713-01-01 BC', '01:02:03', '01:02:03', '01:02:03.004', "
        "'01:02:03-01', '0001-01-01 00:00:00 BC', '0001-01-01 00:00:00', '0001-01-01 00:00:00.001', "
        "'4713-01-01 00:00:00+00 BC', '1000-01-01 00:00:00+00', '-2147483648 days -596523 hours', "
        "'-178000000 years', '-86399.999 seconds')",
        "UPDATE public.t_time SET d = 'infinity', ts = '-infinity', iv = '1 day' WHERE id = 1",
        "UPDATE public.t_time SET t = '00:00:01' WHERE id IN (3, 4, 7)",
        "DELETE FROM public.t_time WHERE id = 2",
    )),
    Table("t_binary", (
        "CREATE TABLE public.t_binary (id integer PRIMARY KEY, b bytea, b1 bit, b3 bit(3), b10 bit(10), "
        "vb varbit, vb8 varbit(8), flag boolean)",), (
        "(1, '\\x0102ff', B'1', B'101', B'1100000001', B'1', B'10110', true)",
        "(2, '\\x', B'0', B'000', B'0000000000', B'', B'', false)",
        "(3, decode(repeat('ff', 300), 'hex'), NULL, B'111', B'1111111111', "
        "B'1010101010101010101010101010101010101', B'11111111', NULL)",
        "(4" + ", NULL" * 7 + ")",
    ), (
        "INSERT INTO public.t_binary VALUES (10, '\\x00', B'1', B'010', B'0000000001', B'01', B'1', true)",
        "UPDATE public.t_binary SET b = '\\xdeadbeef', vb = B'111000111' WHERE id = 1",
        "DELETE FROM public.t_binary WHERE id = 2",
    )),
    Table("t_geometry", (
        "CREATE TABLE public.t_geometry (id integer PRIMARY KEY, pt point, bx box, ci circle, ln line, ls lseg, "
        "pa path, pg polygon)",), (
        "(1, '(1.5,2.5)', '((1,2),(3,4))', '<(1,2),3>', '{1,2,3}', '[(1,2),(3,4)]', '((1,2),(3,4),(5,6))', "
        "'((0,0),(1,0),(1,1))')",
        "(2, '(-0.1,1e10)', '((0,0),(0,0))', '<(0,0),0.5>', '{0,-1,0}', '[(0,0),(0,0)]', '[(1,2),(3,4)]', "
        "'((0,0))')",
        "(3" + ", NULL" * 7 + ")",
    ), (
        "INSERT INTO public.t_geometry VALUES (10, '(0,0)', '((1,1),(0,0))', '<(1,1),1>', '{1,0,-5}', "
        "'[(0,1),(1,0)]', '((0,0),(1,1))', '((0,0),(2,0),(2,2),(0,2))')",
        "UPDATE public.t_geometry SET pt = '(3,4)' WHERE id = 1",
        "DELETE FROM public.t_geometry WHERE id = 2",
    )),
    Table("t_range_hstore", (
        "CREATE TABLE public.t_range_hstore (id integer PRIMARY KEY, r4 int4range, r8 int8range, rn numrange, "
        "rts tsrange, rtz tstzrange, rd daterange, h hstore, m public.mood, pos public.positive)",), (
        "(1, '[1,10)', '(1,10]', '[1.5,2.5]', '[2024-01-01 00:00,2024-01-02 00:00)', "
        "'[2024-01-01 00:00+00,2024-01-02 00:00+00)', '[2024-01-01,2024-02-01)', 'a=>1, b=>NULL', 'happy', 5)",
        "(2, 'empty', '(,)', '(,5)', '(,)', 'empty', '[2024-01-01,infinity)', '', 'sad', 1)",
        "(3, NULL, NULL, NULL, NULL, NULL, NULL, '\"k e y\"=>\"v\\\"al\", \"\"=>\"\"', NULL, NULL)",
    ), (
        "INSERT INTO public.t_range_hstore VALUES (10, '[5,6)', NULL, NULL, NULL, NULL, NULL, 'x=>y', 'ok', 2)",
        "UPDATE public.t_range_hstore SET h = 'z=>1', m = 'sad' WHERE id = 1",
        "DELETE FROM public.t_range_hstore WHERE id = 2",
    )),
    Table("t_arrays", (
        "CREATE TABLE public.t_arrays (id integer PRIMARY KEY, a_i2 smallint[], a_i4 integer[], a_i8 bigint[], "
        "a_t text[], a_vc varchar(5)[], a_n numeric[], a_n52 numeric(5,2)[], a_f4 real[], a_f8 float8[], "
        "a_b boolean[], a_d date[], a_ts timestamp[], a_tstz timestamptz[], a_tm time[], a_u uuid[], "
        "a_jb jsonb[], a_js json[], a_by bytea[], a_ip inet[], a_m public.mood[], a_ch char(2)[], a_ci citext[], "
        "a_iv interval[], a_pt point[], a_mo money[], a_nm name[], a_bit bit(3)[], a_lt ltree[], a_tsv tsvector[])",
    ), (
        "(1, '{1,2}', '{1,NULL,3}', '{9223372036854775807}', '{\"a b\",c,NULL,\"\\\"q\\\"\"}', '{x,yz}', "
        "'{1.5,-0.001}', '{1.50,2}', '{1.5,NaN}', '{2.5,Infinity}', '{t,f,NULL}', '{2024-01-01,infinity,-infinity}', "
        "'{\"2024-01-01 00:00:00.5\"}', '{\"2024-01-01 00:00:00+00\"}', '{12:00:00}', "
        "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', ARRAY['{\"a\":1}'::jsonb], ARRAY['[1]'::json], "
        "ARRAY['\\x01'::bytea], '{10.0.0.1}', '{sad,happy}', '{ab,c}', '{AbC}', '{1 day}', '{\"(1,2)\"}', "
        "'{1.50}', '{nm}', '{101,010}', '{a.b,c}', '{\"a b\"}')",
        "(2, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
        "'{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
        "(3" + ", NULL" * 29 + ")",
        "(4, NULL, '{{1,2},{3,4}}'" + ", NULL" * 27 + ")",
    ), (
        "INSERT INTO public.t_arrays (id, a_i4, a_m, a_d) VALUES (10, '{7}', '{ok}', '{1970-01-01}')",
        "UPDATE public.t_arrays SET a_i4 = '{4,5}', a_m = '{happy}' WHERE id = 1",
        "UPDATE public.t_arrays SET a_i8 = '{{5},{6}}' WHERE id = 4",
        "DELETE FROM public.t_arrays WHERE id = 2",
    )),
    Table("t_defaults", (
        "CREATE TABLE public.t_defaults (id integer PRIMARY KEY DEFAULT 42, i integer DEFAULT 7, "
        "s smallint DEFAULT -1, b bigint DEFAULT 9223372036854775807, n numeric(5,2) DEFAULT 1.5, "
        "nv numeric DEFAULT 2.25, r real DEFAULT 1.5, f double precision DEFAULT 0.1, t text DEFAULT 'it''s', "
        "vc varchar(5) DEFAULT 'v', "
        "ch char(2) DEFAULT 'c', flag boolean DEFAULT true, d date DEFAULT '2000-01-01', "
        "tm time DEFAULT '01:02:03', ts timestamp DEFAULT '2000-01-01 00:00:00', "
        "tstz timestamptz DEFAULT '2000-01-01 00:00:00+00', iv interval DEFAULT '1 day', "
        "u uuid DEFAULT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', js jsonb DEFAULT '{}', by bytea DEFAULT '\\x01', "
        "m public.mood DEFAULT 'ok', mo money DEFAULT 1.25, bt bit(3) DEFAULT B'101', "
        "now_ts timestamptz DEFAULT now(), seq bigserial, neg integer DEFAULT -5, nulled text DEFAULT NULL, "
        "nn integer NOT NULL DEFAULT 3, expr integer DEFAULT (1 + 2), a_i integer[] DEFAULT '{1,2}', "
        "n_neg numeric(5,2) DEFAULT -1.5, n_int numeric(6,2) DEFAULT 42, n0 numeric(4,0) DEFAULT 12, "
        "vc_cast varchar(10) DEFAULT 'x'::character varying, t_fn text DEFAULT md5('x'), "
        "t_user text DEFAULT CURRENT_USER, t_concat text DEFAULT ('a' || 'b'), "
        "ts_cur timestamp DEFAULT CURRENT_TIMESTAMP, d_cur date DEFAULT CURRENT_DATE, "
        "tm_cur time(3) DEFAULT LOCALTIME, r_pi real DEFAULT 3.14159265358979, "
        "f_big double precision DEFAULT 1e300, flag_expr boolean DEFAULT (1 = 1), flag_f boolean DEFAULT false, "
        "bt1 bit(1) DEFAULT B'1', vb varbit(8) DEFAULT B'0110', "
        "iv2 interval DEFAULT '1 year 2 mons 3 days 04:05:06.5', "
        "tstz3 timestamptz(3) DEFAULT '2000-01-01 00:00:00.123+00', ts_inf timestamp DEFAULT 'infinity', "
        "tstz_inf timestamptz DEFAULT 'infinity', u_fn uuid DEFAULT gen_random_uuid(), "
        "js_fn json DEFAULT json_build_object(), dom public.price DEFAULT 1.5, pos public.positive DEFAULT 1, "
        "ct citext DEFAULT 'x')",
    ), (
        "(1" + ", DEFAULT" * 47 + ", '2001-02-03 04:05:06'" + ", DEFAULT" * 6 + ")",  # ts_inf: see below
        "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, '2020-01-01 00:00:00+00', 5, NULL, NULL, 4, NULL, NULL" + ", NULL" * 25 + ")",
    ), (
        # ts_inf's default shows in the schema and in place of its NULLs; its data stays finite, as the infinite
        # timestamp's own value is the concern of t_time.
        "INSERT INTO public.t_defaults (id, now_ts, ts_inf) VALUES (10, '2021-01-01 00:00:00+00', '2001-02-03')",
        "UPDATE public.t_defaults SET i = 8 WHERE id = 2",
        "DELETE FROM public.t_defaults WHERE id = 2",
        "UPDATE public.t_defaults SET s = 2 WHERE id = 1",
    )),
    Table("t_nopk", (
        "CREATE TABLE public.t_nopk (a integer, b text)",), (
        "(1, 'one')", "(2, 'two')", "(2, 'two')",
    ), (
        "INSERT INTO public.t_nopk VALUES (3, 'three')",
    )),
    Table("t_nopk_full", (
        "CREATE TABLE public.t_nopk_full (a integer, b text)",
        "ALTER TABLE public.t_nopk_full REPLICA IDENTITY FULL",), (
        "(1, 'one')", "(2, 'two')",
    ), (
        "INSERT INTO public.t_nopk_full VALUES (3, 'three')",
        "UPDATE public.t_nopk_full SET b = 'ONE' WHERE a = 1",
        "DELETE FROM public.t_nopk_full WHERE a = 2",
    )),
    Table("t_msgkey", (
        "CREATE TABLE public.t_msgkey (a integer NOT NULL, b text NOT NULL, c text)",
        "ALTER TABLE public.t_msgkey REPLICA IDENTITY FULL",), (
        "(1, 'x', 'one')", "(2, 'y', 'two')",
    ), (
        "INSERT INTO public.t_msgkey VALUES (3, 'z', 'three')",
        "UPDATE public.t_msgkey SET c = 'ONE' WHERE a = 1",
        "DELETE FROM public.t_msgkey WHERE a = 2",
    )),
    Table("t_ri_index", (
        "CREATE TABLE public.t_ri_index (id integer PRIMARY KEY, code text NOT NULL, v text)",
        "CREATE UNIQUE INDEX t_ri_index_code ON public.t_ri_index (code)",
        "ALTER TABLE public.t_ri_index REPLICA IDENTITY USING INDEX t_ri_index_code",), (
        "(1, 'a', 'one')", "(2, 'b', 'two')", "(3, 'c', 'three')",
    ), (
        "INSERT INTO public.t_ri_index VALUES (10, 'z', 'ten')",
        "UPDATE public.t_ri_index SET v = 'ONE' WHERE id = 1",
        "UPDATE public.t_ri_index SET code = 'bb' WHERE id = 2",
        "UPDATE public.t_ri_index SET id = 30 WHERE id = 3",
        "DELETE FROM public.t_ri_index WHERE id = 1",
    )),
    Table("t_ri_full", (
        "CREATE TABLE public.t_ri_full (id integer PRIMARY KEY, v text, n numeric(5,2))",
        "ALTER TABLE public.t_ri_full REPLICA IDENTITY FULL",), (
        "(1, 'one', 1.5)", "(2, 'two', NULL)", "(3, 'three', 3)",
    ), (
        "UPDATE public.t_ri_full SET v = 'ONE' WHERE id = 1",
        "UPDATE public.t_ri_full SET id = 30 WHERE id = 3",
        "DELETE FROM public.t_ri_full WHERE id = 2",
    )),
    Table("t_toast", (
        "CREATE TABLE public.t_toast (id integer PRIMARY KEY, small integer, big_t text, big_b bytea, "
        "big_a text[], big_j jsonb, big_i integer[], big_l bigint[], big_d date[], big_u uuid[], big_ba bytea[], "
        "big_vc varchar[], big_js json, big_h hstore, big_n numeric[])",), (
        f"(1, 1, {_BIG.format(seed=1)}, convert_to({_BIG.format(seed=2)}, 'UTF8'), "
        f"ARRAY[{_BIG.format(seed=3)}], jsonb_build_object('k', {_BIG.format(seed=4)}), "
        "(SELECT array_agg((g * 7919) % 100003) FROM generate_series(1, 3000) g), "
        "(SELECT array_agg((g::bigint * 104729) % 1000003) FROM generate_series(1, 3000) g), "
        "(SELECT array_agg(DATE '2000-01-01' + (g * 7919) % 100003) FROM generate_series(1, 3000) g), "
        "(SELECT array_agg(md5(g::text)::uuid) FROM generate_series(1, 1000) g), "
        f"ARRAY[convert_to({_BIG.format(seed=8)}, 'UTF8')], ARRAY[{_BIG.format(seed=9)}]::varchar[], "
        f"json_build_object('k', {_BIG.format(seed=10)}), hstore('k', {_BIG.format(seed=11)}), "
        "(SELECT array_agg(((g * 7919) % 100003) / 7.0) FROM generate_series(1, 3000) g))",
    ), (
        "UPDATE public.t_toast SET small = 2 WHERE id = 1",
        f"INSERT INTO public.t_toast (id, small, big_t) VALUES (2, 1, {_BIG.format(seed=5)})",
        "UPDATE public.t_toast SET small = 3 WHERE id = 2",
        "DELETE FROM public.t_toast WHERE id = 1",
    )),
    Table("t_toast_full", (
        "CREATE TABLE public.t_toast_full (id integer PRIMARY KEY, small integer, big_t text, big_b bytea)",
        "ALTER TABLE public.t_toast_full REPLICA IDENTITY FULL",), (
        f"(1, 1, {_BIG.format(seed=6)}, convert_to({_BIG.format(seed=7)}, 'UTF8'))",
    ), (
        "UPDATE public.t_toast_full SET small = 2 WHERE id = 1",
    )),
    Table("t_generated", (
        "CREATE TABLE public.t_generated (id integer PRIMARY KEY, a integer, "
        "doubled integer GENERATED ALWAYS AS (a * 2) STORED, label text)",), (
        "(1, 1, DEFAULT, 'one')", "(2, NULL, DEFAULT, 'two')",
    ), (
        "INSERT INTO public.t_generated (id, a, label) VALUES (10, 5, 'ten')",
        "UPDATE public.t_generated SET a = 7 WHERE id = 1",
        "DELETE FROM public.t_generated WHERE id = 2",
    )),
    Table("t_parted", (
        "CREATE TABLE public.t_parted (id integer NOT NULL, region text NOT NULL, v text, "
        "PRIMARY KEY (id, region)) PARTITION BY LIST (region)",
        "CREATE TABLE public.t_parted_eu PARTITION OF public.t_parted FOR VALUES IN ('eu')",
        "CREATE TABLE public.t_parted_us PARTITION OF public.t_parted FOR VALUES IN ('us')",), (
        "(1, 'eu', 'one')", "(2, 'us', 'two')", "(3, 'eu', 'three')",
    ), (
        "INSERT INTO public.t_parted VALUES (10, 'us', 'ten')",
        "UPDATE public.t_parted SET v = 'ONE' WHERE id = 1",
        "DELETE FROM public.t_parted WHERE id = 2",
    ), captured=("public.t_parted_eu", "public.t_parted_us")),
    # Captured through its root: the publication publishes via the partition root (cdckit's sets it; Debezium's
    # is made so beforehand, as a Debezium user must).
    Table("t_rooted", (
        "CREATE TABLE public.t_rooted (id integer NOT NULL, day date NOT NULL, v text, PRIMARY KEY (id, day)) "
        "PARTITION BY RANGE (day)",
        "CREATE TABLE public.t_rooted_2024 PARTITION OF public.t_rooted FOR VALUES FROM ('2024-01-01') TO "
        "('2025-01-01')",
        "CREATE TABLE public.t_rooted_2025 PARTITION OF public.t_rooted FOR VALUES FROM ('2025-01-01') TO "
        "('2026-01-01')",), (
        "(1, '2024-03-01', 'one')", "(2, '2025-03-01', 'two')", "(3, '2024-07-01', 'three')",
    ), (
        "INSERT INTO public.t_rooted VALUES (10, '2025-01-01', 'ten')",
        "UPDATE public.t_rooted SET v = 'ONE' WHERE id = 1",
        "UPDATE public.t_rooted SET day = '2025-06-01' WHERE id = 3",
        "DELETE FROM public.t_rooted WHERE id = 2",
    )),
    Table("zz_sentinel", (
        "CREATE TABLE public.zz_sentinel (id integer PRIMARY KEY, at text)",), (
        "(0, 'snapshot')",
    ), (
        "INSERT INTO public.zz_sentinel VALUES (1, 'end')",
    )),
)

SENTINEL_TOPIC = f"{PREFIX}.public.zz_sentinel"


@dataclass(frozen=True)
class Profile:
    """Connector settings one comparison runs under, given to both connectors by Debezium's names."""

    name: str
    settings: dict[str, str] = field(default_factory=dict)
    description: str = ""
    merged: int = 0  # topics the profile's routers merge into others (ByLogicalTableRouter)


# Settings of tables that only make sense with them; given in every profile.
TABLE_SETTINGS = {"message.key.columns": "public.t_msgkey:a,b"}

PROFILES: dict[str, Profile] = {profile.name: profile for profile in (
    Profile("default", {}, "Debezium's defaults"),
    Profile("modes-a", {"decimal.handling.mode": "string", "time.precision.mode": "adaptive_time_microseconds",
                        "binary.handling.mode": "base64", "interval.handling.mode": "string",
                        "hstore.handling.mode": "map"},
            "decimal string, adaptive_time_microseconds, binary base64, interval string, hstore map"),
    Profile("modes-b", {"decimal.handling.mode": "double", "time.precision.mode": "connect",
                        "binary.handling.mode": "hex"},
            "decimal double, time.precision connect, binary hex"),
    Profile("modes-c", {"binary.handling.mode": "base64-url-safe", "provide.transaction.metadata": "true"},
            "binary base64-url-safe, transaction metadata"),
    Profile("modes-d", {"key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false",
                        "interval.handling.mode": "string", "provide.transaction.metadata": "true"},
            "schemas off, interval string, transaction metadata"),
    # Single message transforms. The sentinel stays on its topic, and each keeps op in the value (add.fields=op),
    # which the comparison reads to tell snapshot reads from changes.
    Profile("smt-a", {
        "transforms": "unwrap,route",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.drop.tombstones": "false", "transforms.unwrap.delete.handling.mode": "rewrite",
        "transforms.unwrap.add.fields": "op,table,lsn,source.ts_ms,snapshot:snap",
        "transforms.unwrap.add.headers": "op,db",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": rf"{PREFIX}\.public\.t_(numeric.*)",
        "transforms.route.replacement": f"{PREFIX}.routed.$1"},
        "ExtractNewRecordState (delete.handling.mode rewrite, tombstones kept, add.fields), then RegexRouter"),
    Profile("smt-b", {
        "provide.transaction.metadata": "true",
        "transforms": "merge,unwrap",
        "transforms.merge.type": "io.debezium.transforms.ByLogicalTableRouter",
        "transforms.merge.topic.regex": rf"{PREFIX}\.public\.t_(binary|text)",
        "transforms.merge.topic.replacement": f"{PREFIX}.public.merged",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.tombstone.handling.mode": "tombstone",
        "transforms.unwrap.add.fields": "op,source.lsn,id,source.schema:sch"},
        "ByLogicalTableRouter, then ExtractNewRecordState (deletes as tombstones), transaction metadata", merged=1),
    Profile("smt-c", {
        "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false",
        "transforms": "unwrap,merge",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.tombstone.handling.mode": "rewrite-with-tombstone",
        "transforms.unwrap.add.fields": "op", "transforms.unwrap.add.fields.prefix": "__",
        "transforms.merge.type": "io.debezium.transforms.ByLogicalTableRouter",
        "transforms.merge.topic.regex": rf"{PREFIX}\.public\.t_(time|geometry)",
        "transforms.merge.topic.replacement": f"{PREFIX}.public.merged",
        "transforms.merge.key.field.name": "source_table",
        "transforms.merge.key.field.regex": rf"{PREFIX}\.public\.(.*)", "transforms.merge.key.field.replacement": "$1"},
        "schemas off, ExtractNewRecordState (rewrite with tombstones), ByLogicalTableRouter with key.field.regex",
        merged=1),
)}
NON_DEFAULT = ("modes-a", "modes-b", "modes-c", "modes-d", "smt-a", "smt-b", "smt-c")
