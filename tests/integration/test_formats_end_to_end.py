"""Message formats end to end through a real PostgreSQL and the Spark jobs: every common type, transaction
metadata, custom keys and masking, schema change records, Qlik Replicate messages."""

from __future__ import annotations

import base64
import datetime
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from helpers import execute, make_config, payload, records

from cdckit.formats.qlik import METADATA_AVRO_SCHEMA
from cdckit.pipelines.dispatch import run_snapshot, run_stream

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

ALL_TYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0);
CREATE TABLE public.all_types (
    id integer PRIMARY KEY, c_bool boolean, c_int2 smallint, c_int8 bigint, c_float4 real, c_float8 double precision,
    c_numeric numeric(10, 2), c_numeric_var numeric, c_text text, c_varchar varchar(20), c_char char(3),
    c_bytea bytea, c_date date, c_time time, c_ts timestamp, c_tstz timestamptz, c_interval interval, c_uuid uuid,
    c_json json, c_jsonb jsonb, c_int_array integer[], c_text_array text[], c_enum mood, c_inet inet,
    c_macaddr macaddr, c_bit bit(3), c_money money, c_domain positive_int, c_null text
)"""
ALL_TYPES_ROW = """INSERT INTO public.all_types VALUES (
    1, true, -32768, 9223372036854775807, 1.5, 3.141592653589793, 12345678.90, 3.14159, 'hello', 'world', 'ab',
    '\\x0102ff', '2024-02-29', '13:14:15.123456', '2018-06-20 15:13:16.945104', '2018-06-20 15:13:16.945104+02',
    '1 day 02:00:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": 1}', '{"b": [1, 2]}', '{1,2,NULL}',
    '{"a","b c"}', 'ok', '192.168.0.1/24', '08:00:2b:01:02:03', B'101', 12.34, 5, NULL)"""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unscaled(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True))


EPOCH = datetime.datetime(1970, 1, 1)
EXPECTED_AFTER = {
    "id": 1, "c_bool": True, "c_int2": -32768, "c_int8": 9223372036854775807, "c_float4": 1.5,
    "c_float8": 3.141592653589793,
    "c_numeric": _unscaled(1234567890),
    "c_numeric_var": {"scale": 5, "value": _unscaled(314159)},
    "c_text": "hello", "c_varchar": "world", "c_char": "ab ",
    "c_bytea": _b64(b"\x01\x02\xff"),
    "c_date": (datetime.date(2024, 2, 29) - datetime.date(1970, 1, 1)).days,
    "c_time": ((13 * 60 + 14) * 60 + 15) * 1_000_000 + 123456,
    "c_ts": (datetime.datetime(2018, 6, 20, 15, 13, 16, 945104) - EPOCH) // datetime.timedelta(microseconds=1),
    "c_tstz": "2018-06-20T13:13:16.945104Z",
    "c_interval": (24 + 2) * 3600 * 1_000_000,
    "c_uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "c_json": '{"a": 1}', "c_jsonb": '{"b": [1, 2]}',
    "c_int_array": [1, 2, None], "c_text_array": ["a", "b c"],
    "c_enum": "ok", "c_inet": "192.168.0.1/24", "c_macaddr": "08:00:2b:01:02:03",
    "c_bit": _b64(bytes([0b101])),
    "c_money": _unscaled(1234),
    "c_domain": 5, "c_null": None,
}


def test_every_common_type_streams_as_debezium_writes_it(postgres: Any, spark: Any, database: str,
                                                        workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, ALL_TYPES_DDL)
    config = make_config(postgres, database, workdir)
    run_snapshot(spark, config)
    execute(dsn, ALL_TYPES_ROW, "UPDATE public.all_types SET c_text = 'changed', c_int_array = '{}' WHERE id = 1",
            "DELETE FROM public.all_types WHERE id = 1")
    run_stream(spark, config)
    found = [r for r in records(config, "it.public.all_types") if r["value"] is not None]
    create, update, delete = (payload(r["value"]) for r in found)
    assert create["after"] == EXPECTED_AFTER
    assert update["after"] == {**EXPECTED_AFTER, "c_text": "changed", "c_int_array": []}
    assert delete["before"] == {name: (1 if name == "id" else None) for name in EXPECTED_AFTER}
    fields = {f["field"]: f for f in found[0]["value"]["schema"]["fields"][1]["fields"]}
    assert fields["c_numeric"] == {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                                   "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"},
                                   "field": "c_numeric"}
    assert fields["c_tstz"]["name"] == "io.debezium.time.ZonedTimestamp"
    assert fields["c_ts"]["name"] == "io.debezium.time.MicroTimestamp"
    assert fields["c_enum"]["parameters"] == {"allowed": "sad,ok,happy"}
    assert fields["c_int_array"]["type"] == "array"
    assert fields["c_domain"]["type"] == "int32"


def test_transaction_metadata_brackets_each_transaction(postgres: Any, spark: Any, database: str,
                                                        workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.a (id integer PRIMARY KEY)", "CREATE TABLE public.b (id integer PRIMARY KEY)")
    config = make_config(postgres, database, workdir, **{"provide.transaction.metadata": "true"})
    run_snapshot(spark, config)
    execute(dsn, "BEGIN; INSERT INTO public.a VALUES (1); INSERT INTO public.b VALUES (1); "
                 "INSERT INTO public.b VALUES (2); COMMIT")
    run_stream(spark, config)
    boundaries = [payload(r["value"]) for r in records(config, "it.transaction")]
    assert [b["status"] for b in boundaries] == ["BEGIN", "END"]
    begin, end = boundaries
    # Debezium 2.5.2's PostgreSQL connector labels each record <xid>:<LSN of its BEGIN, change or COMMIT>.
    xid = str(payload(records(config, "it.public.a")[0]["value"])["source"]["txId"])
    assert begin["id"].split(":")[0] == end["id"].split(":")[0] == xid
    assert begin["event_count"] is None and begin["data_collections"] is None
    assert end["event_count"] == 3
    assert end["data_collections"] == [{"data_collection": "public.a", "event_count": 1},
                                       {"data_collection": "public.b", "event_count": 2}]
    events = [payload(r["value"]) for table in ("a", "b") for r in records(config, f"it.public.{table}")]
    assert [e["transaction"] for e in events] == [
        {"id": f"{xid}:{e['source']['lsn']}", "total_order": order, "data_collection_order": in_table}
        for e, order, in_table in zip(events, (1, 2, 3), (1, 1, 2), strict=True)]
    lsns = [int(begin["id"].split(":")[1]), *(e["source"]["lsn"] for e in events), int(end["id"].split(":")[1])]
    assert lsns == sorted(lsns) and len(set(lsns[1:])) == 4  # the BEGIN sits at the first change's LSN


def test_custom_key_masking_and_avro_names(postgres: Any, spark: Any, database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.\"audit-log\" (happened_at integer, who varchar(40), secret text, note text)",
            "INSERT INTO public.\"audit-log\" VALUES (1, 'alice', 's3cr3t', 'a long note indeed')")
    config = make_config(postgres, database, workdir, **{
        "message.key.columns": "public.audit-log:happened_at,who",
        "column.mask.with.4.chars": "public.audit-log.secret",
        "column.truncate.to.6.chars": "public.audit-log.note",
        "column.mask.hash.v2.SHA-256.with.salt.pepper": "public.audit-log.who",
        "schema.name.adjustment.mode": "avro",
    })
    run_snapshot(spark, config)
    (read,) = records(config, "it.public.audit-log")
    assert read["key"]["payload"] == {"happened_at": 1, "who": "alice"}  # keys are never masked
    assert read["key"]["schema"]["name"] == "it.public.audit_log.Key"
    after = read["value"]["payload"]["after"]
    import hashlib

    assert after["secret"] == "****"
    assert after["note"] == "a long"
    assert after["who"] == hashlib.sha256(b"pepper" + b"alice").hexdigest()[:40]
    fields = {f["field"]: f for f in read["value"]["schema"]["fields"][1]["fields"]}
    assert fields["secret"]["parameters"] == {"masked": "true"}
    assert fields["note"]["parameters"] == {"truncateLength": "6"}


def test_schema_change_records_for_postgres_on_request(postgres: Any, spark: Any, database: str,
                                                        workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.t (id integer PRIMARY KEY, name varchar(50) NOT NULL, price numeric(8, 2))")
    config = make_config(postgres, database, workdir, **{"include.schema.changes": "true"})
    run_snapshot(spark, config)
    (change,) = records(config, "it")
    assert change["key"]["payload"] == {"databaseName": database}
    assert change["key"]["schema"]["name"] == "io.debezium.connector.postgresql.SchemaChangeKey"
    value = change["value"]["payload"]
    assert value["ddl"] is None and value["schemaName"] == "public"
    (table_change,) = value["tableChanges"]
    assert table_change["type"] == "CREATE" and table_change["id"] == f'"{database}"."public"."t"'
    assert table_change["table"]["primaryKeyColumnNames"] == ["id"]
    columns = [(c["name"], c["jdbcType"], c["typeName"], c["length"], c["scale"], c["position"], c["optional"])
               for c in table_change["table"]["columns"]]
    assert columns == [("id", 4, "int4", None, None, 1, False), ("name", 12, "varchar", 50, None, 2, False),
                       ("price", 2, "numeric", 8, 2, 3, True)]


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_qlik_messages_metadata_first_then_data(postgres: Any, spark: Any, database: str, workdir: Path,
                                                encoding: str) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.items (id integer PRIMARY KEY, name varchar(20), price numeric(6, 2))",
            "INSERT INTO public.items VALUES (1, 'one', 1.50)")
    config = make_config(postgres, database, workdir, **{"cdckit.message.format": "qlik",
                                                         "cdckit.qlik.encoding": encoding,
                                                         "cdckit.qlik.task": "orders-task"})
    run_snapshot(spark, config)
    execute(dsn, "BEGIN; INSERT INTO public.items VALUES (2, 'two', 2.00); UPDATE public.items SET price = 1.75 "
                 "WHERE id = 1; COMMIT", "DELETE FROM public.items WHERE id = 2")
    run_stream(spark, config)
    found = records(config, "it.public.items")
    messages: list[dict[str, Any]] = []
    for r in found:
        if encoding == "json":
            messages.append(r["value"])
            continue
        raw = io.BytesIO(base64.b64decode(r["value"]))
        if r["key"] is None:  # metadata messages have no key; their dataSchema decodes the data that follows
            metadata = fastavro.schemaless_reader(raw, fastavro.parse_schema(METADATA_AVRO_SCHEMA), None)
            data_schema = fastavro.parse_schema(json.loads(metadata["dataSchema"]))
            messages.append(metadata)
        else:
            messages.append(fastavro.schemaless_reader(raw, data_schema, None))
    kinds = ["metadata" if "lineage" in m else m["headers"]["operation"] for m in messages]
    # the snapshot batch and the stream batch each announce the table before their first data message
    assert kinds == ["metadata", "REFRESH", "metadata", "INSERT", "UPDATE", "DELETE"]
    metadata = messages[0]
    assert metadata["lineage"]["server"] == "it" and metadata["lineage"]["task"] == "orders-task"
    assert metadata["lineage"]["schema"] == "public" and metadata["lineage"]["table"] == "items"
    insert, update, delete = messages[3:]
    assert insert["headers"]["transactionId"] == update["headers"]["transactionId"]
    assert (insert["headers"]["transactionEventCounter"], insert["headers"]["transactionLastEvent"]) == (1, False)
    assert (update["headers"]["transactionEventCounter"], update["headers"]["transactionLastEvent"]) == (2, True)
    assert delete["headers"]["transactionLastEvent"] is True
    sequences = [m["headers"]["changeSequence"] for m in (insert, update, delete)]
    assert sequences == sorted(sequences)
    if encoding == "json":
        assert insert["data"] == {"id": 2, "name": "two", "price": "2.00"}
        assert update["headers"]["changeMask"] == "07"  # no before image (REPLICA IDENTITY DEFAULT): all present
        assert delete["data"] == {"id": 2} or delete["data"] == {"id": 2, "name": None, "price": None}
        assert delete["headers"]["changeMask"] == "01"  # only the primary key
