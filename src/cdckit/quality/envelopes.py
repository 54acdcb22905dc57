"""The envelope and transaction suites: what every Debezium data event, tombstone and transaction record must
satisfy, as Great Expectations expectations over Spark frames derived from the records.

``envelope_frame`` derives one row per data event (op, before, after, source fields, the position, whether the key
equals the row's key columns, whether its position follows the previous one of its key, whether a tombstone
follows a delete); ``transaction_frame`` one row per transaction END record with the data events counted for it.
Everything is computed by Spark (window functions and joins); only failing examples reach the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

OPS = ["c", "u", "d", "r"]
SNAPSHOT_MARKERS = ["true", "first", "last", "first_in_data_collection", "last_in_data_collection", "incremental"]
COMMON_SOURCE = ("version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table")
SOURCE_FIELDS = {
    "postgresql": ((*COMMON_SOURCE, "txId", "lsn", "xmin"), (*COMMON_SOURCE, "lsn")),
    "YugabyteDB": ((*COMMON_SOURCE, "txId", "lsn", "xmin"), (*COMMON_SOURCE, "lsn")),
    "sqlserver": ((*COMMON_SOURCE, "change_lsn", "commit_lsn", "event_serial_no"), (*COMMON_SOURCE, "commit_lsn")),
}
EARLIEST_MS = 946_684_800_000  # 2000-01-01: an earlier ts_ms is a unit or clock error
LATEST_MS = 4_102_444_800_000  # 2100-01-01: a later one too (microseconds, nanoseconds)
UNAVAILABLE = "__debezium_unavailable_value"


# A column's Connect schema in a value schema's ``after`` struct, as the type and value suites read it
FIELD = ("struct<field:string,type:string,name:string,optional:boolean,default:string,"
         "parameters:struct<scale:string,`connect.decimal.precision`:string>>")
_PAYLOAD = (("op", "string"), ("before", "string"), ("after", "string"), ("source", "string"), ("ts_ms", "string"),
            ("transaction", "struct<id:string>"), ("tableChanges", "string"), ("status", "string"), ("id", "string"),
            ("event_count", "string"), ("message", "string"), ("magic", "string"))
_PAYLOAD_TYPE = ",".join(f"{name}:{kind}" for name, kind in _PAYLOAD)
# A value read once: the envelope (``schema`` and ``payload``: value.converter.schemas.enable=true) or the payload's
# fields at the top (schemas disabled; Qlik's messages). A nested object read as ``string`` keeps its JSON text.
_VALUE = (f"struct<schema:struct<fields:array<struct<field:string,fields:array<{FIELD}>>>>,"
          f"payload:struct<{_PAYLOAD_TYPE}>,{_PAYLOAD_TYPE}>")
SOURCE = ("struct<connector:string,snapshot:string,ts_ms:string,lsn:string,commit_lsn:string,change_lsn:string,"
          "event_serial_no:string,version:string,name:string,db:string,schema:string,table:string,txId:string,"
          "xmin:string>")


def classify(records: DataFrame) -> DataFrame:
    """Each record's key and value parsed once (by Spark's JSON reader) into the columns the suites read:

    ``kind`` (data, tombstone, transaction, schema (a schema change record), heartbeat or qlik); ``key_payload``
    (the key without its schema); ``op``, ``before``, ``after`` and ``source`` (JSON text), ``src`` (the source
    block's fields), ``ts_ms``, ``transaction_id``; ``after_fields`` (the Connect schemas of the row's columns, when
    the value carries its schema); ``table_changes`` (a schema change record's); ``status``, ``txn_id`` and
    ``event_count`` (a transaction record's); and ``value`` for a Qlik message (null otherwise)."""
    v = F.from_json(F.col("value"), _VALUE)
    k = F.from_json(F.col("key"), "struct<schema:string,payload:string>")
    frame = records.select("topic", "part", "seq", "key", "value", v.alias("v"), k.alias("k"))
    with_schema = F.col("v.schema").isNotNull() & F.col("v.payload").isNotNull()
    top = F.struct(*[F.col(f"v.{name}").alias(name) for name, _ in _PAYLOAD])
    after_fields = F.get(F.filter(F.col("v.schema.fields"), lambda f: f["field"] == "after"), 0)["fields"]
    key_with_schema = F.col("k.schema").isNotNull() & F.col("k.payload").isNotNull()
    frame = frame.select(
        "topic", "part", "seq", "key", "value", F.when(with_schema, F.col("v.payload")).otherwise(top).alias("p"),
        F.when(with_schema, after_fields).alias("after_fields"),
        F.when(key_with_schema, F.col("k.payload")).otherwise(F.col("key")).alias("key_payload"))
    p = F.col("p")
    kind = (F.when(F.col("value").isNull(), "tombstone")
            .when(F.col("topic").startswith("__debezium-heartbeat"), "heartbeat")
            .when(p["tableChanges"].isNotNull(), "schema")
            .when(p["status"].isNotNull() & p["op"].isNull(), "transaction")
            .when(p["message"].isNotNull() | p["magic"].isNotNull(), "qlik")
            .otherwise("data"))
    return frame.select(
        "topic", "part", "seq", "key", "key_payload", kind.alias("kind"),
        p["op"].alias("op"), p["before"].alias("before"), p["after"].alias("after"), p["source"].alias("source"),
        F.from_json(p["source"], SOURCE).alias("src"), p["ts_ms"].cast("long").alias("ts_ms"),
        p["transaction"]["id"].alias("transaction_id"), "after_fields", p["tableChanges"].alias("table_changes"),
        p["status"].alias("status"), p["id"].alias("txn_id"), p["event_count"].cast("long").alias("event_count"),
        F.when(kind == "qlik", F.col("value")).alias("value"))


def event_position(src: Column) -> Column:
    """A string that orders a key's events, from the source block's fields ``src``: PostgreSQL / YugabyteDB
    ``lsn``; SQL Server ``commit_lsn``, ``change_lsn``, ``event_serial_no`` (fixed-width hex LSNs compare as
    text)."""
    sqlserver = F.concat_ws(":", src["commit_lsn"], F.coalesce(src["change_lsn"], F.lit("")),
                            F.lpad(F.coalesce(src["event_serial_no"], F.lit("0")), 10, "0"))
    return F.when(src["connector"] == "sqlserver", sqlserver).otherwise(F.lpad(src["lsn"], 20, "0"))


def _source_missing(connector: Column) -> Column:
    """The source fields a data event lacks for its connector (absent, or null where a value is required),
    comma-separated; null when complete."""
    keys = F.json_object_keys(F.col("source"))
    parts = []
    for name, (present, required) in SOURCE_FIELDS.items():
        no_keys = F.array().cast("array<string>")
        absent = F.array_except(F.array(*[F.lit(f) for f in present]), F.coalesce(keys, no_keys))
        nulls = F.filter(F.array(*[F.when(F.col("src")[f].isNull(), F.lit(f))
                                   for f in required]), lambda x: x.isNotNull())
        parts.append((name, F.array_union(absent, nulls)))
    missing = F.when(connector.isNull(), F.array(F.lit("connector")))
    for name, found in parts:
        missing = missing.when(connector == name, found)
    missing = missing.otherwise(F.array(F.concat(F.lit("connector (unknown: "), connector, F.lit(")"))))
    return F.when(F.size(missing) > 0, F.array_join(missing, ",")).otherwise(F.lit(None))


def _sorted_entries(column: Column) -> Column:
    return F.to_json(F.array_sort(F.map_entries(column)))


def envelope_frame(classified: DataFrame, keyed_tables: DataFrame | None = None) -> DataFrame:
    """One row per data event (replays included) with the columns the envelope suite checks. ``key_expected``: the
    event must carry a key (it comes between keyed events of its topic, or its table has a key, as
    ``keyed_tables`` (schema, table, keyed: from the catalog) say, and no event of it carries one)."""
    by_key = Window.partitionBy("topic", "key").orderBy("part", "seq")
    flagged = classified.withColumn("next_kind", F.coalesce(F.lead("kind").over(by_key), F.lit("nothing")))
    data = flagged.where(F.col("kind") == "data").select(
        "topic", "part", "seq", "key", "key_payload", "next_kind", "op", "before", "after", "ts_ms", "source", "src",
        "transaction_id")
    connector = F.col("src.connector")
    data = data.select(
        "*", connector.alias("connector"), F.lower(F.col("src.snapshot")).alias("snapshot"),
        F.col("src.ts_ms").cast("long").alias("source_ts_ms"), event_position(F.col("src")).alias("position"),
        _source_missing(connector).alias("source_missing"), F.col("src.schema").alias("source_schema"),
        F.col("src.table").alias("source_table")).drop("src")
    # A table's key may be added or dropped while it is captured: an event without a key is wrong among its
    # table's keyed events (after the first, before the last), or in a table with a key (the catalog's) none of
    # whose events carries one.
    at = F.struct("part", "seq")
    keyed_at = F.when(F.col("key").isNotNull(), at)
    seen = data.groupBy("topic").agg(F.min(keyed_at).alias("first_keyed"), F.max(keyed_at).alias("last_keyed"))
    data = data.join(F.broadcast(seen), "topic", "left")
    if keyed_tables is not None:
        known = keyed_tables.select(F.col("schema").alias("source_schema"), F.col("table").alias("source_table"),
                                    F.col("keyed").alias("catalog_keyed"))
        data = data.join(F.broadcast(known), ["source_schema", "source_table"], "left")
    else:
        data = data.withColumn("catalog_keyed", F.lit(None).cast("boolean"))
    expected = F.when(F.col("first_keyed").isNull(), F.coalesce("catalog_keyed", F.lit(False))).otherwise(
        (at > F.col("first_keyed")) & (at < F.col("last_keyed")))
    data = data.withColumn("key_expected", expected).drop("first_keyed", "last_keyed", "catalog_keyed")
    key_map = F.from_json(F.col("key_payload"), "map<string,string>")
    row_image = F.when(F.col("op") == "d", F.col("before")).otherwise(F.col("after"))
    row = F.from_json(row_image, "map<string,string>")
    # A table without a key (no primary key, no message.key.columns) has a null key: nothing to compare.
    in_key = F.when(key_map.isNotNull(), F.map_filter(row, lambda k, _v: F.array_contains(F.map_keys(key_map), k)))
    before_map = F.from_json(F.col("before"), "map<string,string>")
    after_map = F.from_json(F.col("after"), "map<string,string>")
    before_shape = (F.when(F.col("before").isNull(), "none")
                    .when(F.array_sort(F.map_keys(before_map)) == F.array_sort(F.map_keys(after_map)), "full")
                    .when(F.array_sort(F.map_keys(before_map)) == F.array_sort(F.map_keys(key_map)), "key")
                    .otherwise("partial"))
    data = data.select(
        "*", _sorted_entries(key_map).alias("key_values"), _sorted_entries(in_key).alias("row_key_values"),
        before_shape.alias("before_shape"),
        F.concat_ws(" ", "topic", "key_payload", F.concat(F.lit("@"), "position"), "op").alias("record"))
    # Replays (the same key, position and op again; for a table without a key, the same row too: its snapshot
    # reads share one position) are dropped before the order is checked.
    same_row = F.when(F.col("key").isNull(), F.coalesce(row_image, F.col("before")))
    first = Window.partitionBy("topic", "key", "position", "op", same_row).orderBy("part", "seq")
    ordered = Window.partitionBy("topic", "key").orderBy("part", "seq")
    data = data.withColumn("replay", F.row_number().over(first) > 1)
    unique = data.where(~F.col("replay")).withColumn("previous_position", F.lag("position").over(ordered)) \
        .withColumn("previous_op", F.lag("op").over(ordered))
    # The reads of one snapshot share its position (every row of a table without a key, in one partition here).
    unique = unique.withColumn("order_ok", F.col("previous_position").isNull()
                               | (F.col("position") > F.col("previous_position"))
                               | ((F.col("position") == F.col("previous_position")) & (F.col("op") == "r")
                                  & (F.col("previous_op") == "r")))
    return unique.drop("previous_op")


def _transaction(id_column: Any) -> Any:
    """The transaction an id names. PostgreSQL labels each record ``<xid>:<LSN>`` (the LSN of the record's own
    message), so its transaction is the xid; YugabyteDB's ``<xid>:<commit LSN>`` is the same on every record of a
    transaction, so its xid names it as well; SQL Server's commit LSN (``00000025:00000d08:0025``) is kept whole."""
    return F.when(id_column.rlike(r"^[0-9]+:[0-9]+$"), F.substring_index(id_column, ":", 1)).otherwise(id_column)


def transaction_frame(classified: DataFrame, envelopes: DataFrame) -> DataFrame:
    """One row per transaction END record: its ``event_count`` and the distinct data events of its transaction."""
    ends = classified.where((F.col("kind") == "transaction") & (F.col("status") == "END")).select(
        _transaction(F.col("txn_id")).alias("id"), "event_count").dropDuplicates(["id"])
    counted = envelopes.where(F.col("transaction_id").isNotNull()).groupBy(
        _transaction(F.col("transaction_id")).alias("id")).agg(F.count(F.lit(1)).alias("data_events"))
    return ends.join(counted, "id", "left").select(
        "id", "event_count", F.coalesce("data_events", F.lit(0)).cast("long").alias("data_events"))


def envelope_expectations(options: Mapping[str, str] | None = None) -> list[Any]:
    """The envelope suite. ``options`` (the connector configuration, if known) say whether tombstones follow
    deletes (``tombstones.on.delete``, default true)."""
    import great_expectations as gx

    options = options or {}
    e = gx.expectations
    from great_expectations.expectations.row_conditions import Column as C

    tombstones = str(options.get("tombstones.on.delete", "true")).lower() == "true"
    expectations = [
        e.ExpectColumnValuesToBeInSet(column="op", value_set=OPS, meta={"check": "op is c, u, d or r"}),
        e.ExpectColumnValuesToBeNull(column="before", row_condition=C("op") == "c",
                                     meta={"check": "a create has no before"}),
        e.ExpectColumnValuesToNotBeNull(column="after", row_condition=C("op").is_in(["c", "u", "r"]),
                                        meta={"check": "a create, update or read has an after"}),
        e.ExpectColumnValuesToNotBeNull(column="before", row_condition=C("op") == "d",
                                        meta={"check": "a delete has a before"}),
        e.ExpectColumnValuesToBeNull(column="after", row_condition=C("op") == "d",
                                     meta={"check": "a delete has no after"}),
        e.ExpectColumnValuesToBeInSet(column="before_shape", value_set=["none", "full", "key"],
                                      row_condition=C("op") == "u",
                                      meta={"check": "an update's before is absent (REPLICA IDENTITY DEFAULT), the "
                                                     "key (USING INDEX) or the whole row (FULL)"}),
        e.ExpectColumnValuesToBeInSet(column="before_shape", value_set=["full"],
                                      row_condition=(C("op") == "u") & (C("connector") == "sqlserver"),
                                      meta={"check": "a SQL Server update has the whole before row"}),
        e.ExpectColumnValuesToBeInSet(column="snapshot", value_set=SNAPSHOT_MARKERS, row_condition=C("op") == "r",
                                      meta={"check": "a read (snapshot) event has the snapshot marker set"}),
        e.ExpectColumnValuesToBeInSet(column="snapshot", value_set=["false"],
                                      row_condition=C("op").is_in(["c", "u", "d"]),
                                      meta={"check": "a streamed event has source.snapshot false"}),
        e.ExpectColumnValuesToBeNull(column="source_missing",
                                     meta={"check": "the source block has every field of its connector"}),
        e.ExpectColumnValuesToBeBetween(column="ts_ms", min_value=EARLIEST_MS, max_value=LATEST_MS,
                                        meta={"check": "ts_ms is a plausible time in milliseconds"}),
        e.ExpectColumnValuesToBeBetween(column="source_ts_ms", min_value=EARLIEST_MS, max_value=LATEST_MS,
                                        meta={"check": "source.ts_ms is a plausible time in milliseconds"}),
        e.ExpectColumnValuesToNotBeNull(column="key", row_condition=C("key_expected") == True,  # noqa: E712
                                        meta={"check": "every event of a table with a key (its primary key, or "
                                                       "message.key.columns) carries it (a key added or dropped "
                                                       "meanwhile excepted)"}),
        e.ExpectColumnPairValuesToBeEqual(column_A="key_values", column_B="row_key_values",
                                          ignore_row_if="both_values_are_missing",
                                          meta={"check": "the key equals the key columns of after (before for "
                                                         "deletes)"}),
        e.ExpectColumnValuesToBeInSet(column="order_ok", value_set=[True],
                                      meta={"check": "per key, positions strictly increase once replays are "
                                                     "dropped"}),
    ]
    if tombstones:
        expectations.append(e.ExpectColumnValuesToBeInSet(
            column="next_kind", value_set=["tombstone"], row_condition=C("op") == "d",
            meta={"check": "a tombstone follows each delete (tombstones.on.delete)"}))
    return expectations


def transaction_expectations() -> list[Any]:
    import great_expectations as gx

    return [gx.expectations.ExpectColumnPairValuesToBeEqual(
        column_A="event_count", column_B="data_events",
        meta={"check": "a transaction's END event_count equals the data events carrying its id"})]
