"""The type-mapping suite: each emitted column's Connect schema against the mapping for its source type and the
configured handling modes, and each value against its logical type.

The expected mappings are reference tables kept apart from the formatter (``mappings/postgresql.csv``,
``mappings/sqlserver.csv``: source type, the handling mode that governs it, the declared precision range, schema
type and logical name), written from Debezium's mapping tables. Source column types come from the schema change
records in the checked records (``include.schema.changes``) or, for PostgreSQL and YugabyteDB, from the catalog
when a connector configuration is given. Arrays, enums, domains and other types the tables do not list are not
checked (the report counts them). A column whose type changed over the checked records is compared in its latest
form.
"""

from __future__ import annotations

import base64
import csv
from collections.abc import Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdckit.quality.envelopes import UNAVAILABLE

MAPPINGS = Path(__file__).parent / "mappings"
DEFAULT_MODES = {"decimal.handling.mode": "precise", "time.precision.mode": "adaptive",
                 "binary.handling.mode": "bytes", "interval.handling.mode": "numeric", "hstore.handling.mode": "json"}
SOURCE_COLUMNS = "schema STRING, `table` STRING, `column` STRING, type_name STRING, length INT, scale INT"
_TEMPORAL = ("time", "timestamp", "timetz", "timestamptz", "datetime2", "datetimeoffset")
_CHECKED_LOGICAL = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date", "io.debezium.time.Timestamp",
                    "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp",
                    "io.debezium.time.ZonedTimestamp", "io.debezium.data.Uuid", "org.apache.kafka.connect.data.Decimal")
ZONED = r"^([+-]?\d{4,}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})|infinity|-infinity)$"
UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
DECIMAL_NAME = "org.apache.kafka.connect.data.Decimal"
DECIMAL_MAPPING = f"bytes/{DECIMAL_NAME}"
BASE64 = r"^[A-Za-z0-9+/]*={0,2}$"
DAY_RANGE = (-719_162, 2_932_896)  # 0001-01-01 .. 9999-12-31 (SQL Server's dates)
MICRO_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)  # years 1..9999 (SQL Server's datetime2)
# PostgreSQL's dates (4713 BC .. 5874897 AD) and timestamps (4713 BC .. 294276 AD), their infinities included, are
# what Debezium's 32-bit day and 64-bit microsecond counts hold (its own encodings of the extremes among them)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
# Debezium's placeholder for an unchanged TOASTed value: the text (or an array of it), or, for bytea with
# binary.handling.mode=bytes, its bytes (base64 in JSON); see cdckit.formats.debezium.pg_toast
UNAVAILABLE_FORMS = (UNAVAILABLE, base64.b64encode(UNAVAILABLE.encode()).decode(),
                     f'["{base64.b64encode(UNAVAILABLE.encode()).decode()}"]')
# PostgreSQL's 'infinity' / '-infinity' timestamps, as Debezium encodes them
INFINITY_MICROS = (9223372036825200000, -9223372036832400000)


def reference(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """The mapping rows that apply under ``options``' handling modes, for both dialects."""
    rows = []
    for connector, name in (("postgresql", "postgresql.csv"), ("YugabyteDB", "postgresql.csv"),
                            ("sqlserver", "sqlserver.csv")):
        with (MAPPINGS / name).open(newline="") as handle:
            for row in csv.DictReader(handle):
                prop = row["property"]
                if prop and str(options.get(prop, DEFAULT_MODES.get(prop, ""))) != row["value"]:
                    continue
                low, high = _range(row["precision"])
                rows.append((connector, row["source_type"], row["precision"] == "none", low, high,
                             f"{row['schema_type']}/{row['logical_name']}"))
    return spark.createDataFrame(rows, "connector STRING, type_name STRING, undeclared BOOLEAN, low INT, high INT, "
                                       "expected STRING")


def _range(text: str) -> tuple[int | None, int | None]:
    if not text or text == "none":
        return None, None
    low, _, high = text.partition("-")
    return int(low), int(high)


def _after_fields(classified: DataFrame, *extra: str) -> DataFrame:
    """Data events with their ``after`` field schemas (needs value schemas), and the ``extra`` columns."""
    return classified.where((F.col("kind") == "data") & F.col("after_fields").isNotNull()).select(
        "topic", "part", "seq", *extra, "after_fields", F.col("src.connector").alias("connector"),
        F.col("src.schema").alias("schema"), F.col("src.table").alias("table"))


def field_frame(classified: DataFrame) -> DataFrame:
    """Each emitted column in its latest Connect schema: connector, schema, table, column, mapping, parameters.
    The events of a table share a few schemas (one per version of the table), so the schemas are told apart
    before their columns are."""
    schemas = _after_fields(classified).groupBy("connector", "schema", "table", "after_fields").agg(
        F.max(F.struct("part", "seq")).alias("at"))
    exploded = schemas.select("connector", "schema", "table", "at", F.explode("after_fields").alias("f"))
    latest = exploded.groupBy("connector", "schema", "table", F.col("f.field").alias("column")).agg(
        F.max_by("f", "at").alias("f"))
    return latest.select(
        "connector", "schema", "table", "column",
        F.concat_ws("/", F.col("f.type"), F.coalesce(F.col("f.name"), F.lit(""))).alias("mapping"),
        F.col("f.parameters.scale").cast("int").alias("param_scale"),
        F.col("f.parameters").getField("connect.decimal.precision").cast("int").alias("param_precision"))


def source_columns_from_records(classified: DataFrame) -> DataFrame:
    """Source column types from the latest schema change record of each table."""
    changes = classified.where(F.col("kind") == "schema").select(
        "part", "seq", F.explode(F.from_json("table_changes",
                                             "array<struct<id:string,table:struct<columns:array<struct<"
                                             "name:string,typeName:string,length:int,scale:int>>>>>")).alias("c"))
    schema = F.regexp_extract("c.id", r'"([^"]*)"\."([^"]*)"$', 1)
    table = F.regexp_extract("c.id", r'"([^"]*)"\."([^"]*)"$', 2)
    latest = changes.groupBy(schema.alias("schema"), table.alias("table")).agg(
        F.max_by("c", F.struct("part", "seq")).alias("c"))
    return latest.select("schema", "table", F.explode("c.table.columns").alias("col")).select(
        "schema", "table", F.col("col.name").alias("column"),
        F.trim(F.regexp_replace("col.typeName", r"\s+identity$", "")).alias("type_name"),
        F.col("col.length").alias("length"), F.col("col.scale").alias("scale"))


def source_columns_from_catalog(spark: SparkSession, options: Mapping[str, str]) -> tuple[DataFrame, DataFrame]:
    """PostgreSQL / YugabyteDB: the captured tables' column types from the catalog (metadata only), and whether each
    table's events carry a key (``schema``, ``table``, ``keyed``: its primary key, or ``message.key.columns``)."""
    from cdckit.dialect.postgres.catalog import discover_tables
    from cdckit.dialect.postgres.connection import connect
    from cdckit.formats.debezium.column_mappers import emitted_key_columns, parse_message_key_columns

    with closing(connect(dict(options))) as conn:
        tables = discover_tables(conn, dict(options), tell=False)  # the capture job tells
    try:
        keys = parse_message_key_columns(options.get("message.key.columns", ""))
    except ValueError:
        keys = ()  # the configuration's own check reports it
    rows: list[tuple[Any, ...]] = []
    keyed: list[tuple[Any, ...]] = []
    for table in tables:
        keyed.append((table.schema, table.name, bool(emitted_key_columns(keys, table.qualified_name,
                                                                          table.key_columns))))
        for column in table.columns:
            modifier = column.modifier
            length = scale = None
            if column.type_name == "numeric" and modifier > 4:
                length, scale = ((modifier - 4) >> 16) & 0xFFFF, (modifier - 4) & 0xFFFF
            elif column.type_name in _TEMPORAL or column.type_name in ("bit", "varbit"):
                length = modifier if modifier >= 0 else None
            rows.append((table.schema, table.name, column.name, column.type_name, length, scale))
    return (spark.createDataFrame(rows, SOURCE_COLUMNS),
            spark.createDataFrame(keyed, "schema STRING, `table` STRING, keyed BOOLEAN"))


def _precision(connector: Column, type_name: Column, length: Column, scale: Column) -> Column:
    """The declared precision the reference ranges are about: digits of a decimal, fractional digits of a time
    (SQL Server reports them as the scale; PostgreSQL's default is 6), bits of a bit string (default 1)."""
    temporal = type_name.isin(*_TEMPORAL)
    return (F.when(temporal & (connector == "sqlserver"), scale)
            .when(temporal, F.coalesce(length, F.lit(6)))
            .when(type_name == "bit", F.coalesce(length, F.lit(1)))
            .otherwise(length))


def type_frame(fields: DataFrame, sources: DataFrame, reference_rows: DataFrame) -> DataFrame:
    """Emitted columns joined with their source types and the expected mapping (null when the reference has none
    for the type: those rows are not checked)."""
    joined = fields.join(sources, ["schema", "table", "column"], "inner")
    precision = _precision(F.col("connector"), F.col("type_name"), F.col("length"), F.col("scale"))
    joined = joined.withColumn("precision", precision)
    ref = reference_rows.alias("ref")
    match = ((F.col("ref.connector") == F.col("src.connector")) & (F.col("ref.type_name") == F.col("src.type_name"))
             & ((F.col("ref.low").isNull() & ~F.col("ref.undeclared"))
                | (F.col("ref.undeclared") & F.col("src.precision").isNull())
                | F.col("src.precision").between(F.col("ref.low"), F.col("ref.high"))))
    checked = joined.alias("src").join(ref, match, "left").select("src.*", F.col("ref.expected").alias("expected"),
                                                                  F.col("ref.type_name").isNotNull().alias("listed"))
    listed_types = reference_rows.select("connector", "type_name").distinct().withColumn("in_reference", F.lit(True))
    checked = checked.drop("listed").join(listed_types, ["connector", "type_name"], "left")
    return checked.withColumn("in_reference", F.coalesce("in_reference", F.lit(False))).withColumn(
        "record", F.concat_ws(" ", F.concat_ws(".", "schema", "table", "column"), "type_name"))


def _stand_in(f: Column) -> Column:
    """What Debezium writes for a required column it did not get a value for (``_fallback`` of the formatter):
    the field's default, else its type's neutral value, as text (the way a row read as map<string,string> holds
    it)."""
    by_name = F.when(f["name"] == "io.debezium.time.ZonedTimestamp", F.lit("1970-01-01T00:00:00Z"))
    by_name = by_name.when(f["name"] == "io.debezium.time.ZonedTime", F.lit("00:00:00Z"))
    by_name = by_name.when(f["name"] == DECIMAL_NAME, F.lit("AA=="))
    by_name = by_name.when(f["name"] == "io.debezium.data.VariableScaleDecimal", F.lit('{"scale":0,"value":"AA=="}'))
    by_type = (F.when(f["type"].isin("int8", "int16", "int32", "int64"), F.lit("0"))
               .when(f["type"].isin("float", "double"), F.lit("0.0"))
               .when(f["type"] == "boolean", F.lit("false"))
               .when(f["type"].isin("string", "bytes"), F.lit(""))
               .when(f["type"] == "array", F.lit("[]"))
               .when(f["type"] == "map", F.lit("{}")))
    return F.coalesce(f["default"], by_name, by_type)


def _column_values(classified: DataFrame, wanted: Callable[[Column], Column],
                   tables: DataFrame | None = None) -> DataFrame:
    """One row per (data event, emitted column whose field schema is ``wanted``; of the ``tables`` (schema, table)
    only, when given): schema, table, the column's field schema ``f``, its ``value`` in
    the row (``after``, else a delete's ``before``), and ``stand_in``: the value is not the row's but one Debezium
    writes in its place, which no value rule can judge:

    - a required non-key column of a ``before`` that PostgreSQL did not send (REPLICA IDENTITY DEFAULT or USING
      INDEX): the column's default, else its type's neutral value ('', 0, the epoch, ...);
    - an unchanged TOASTed value of an update (``__debezium_unavailable_value``: the text, its bytes, an array of
      it)."""
    key_columns = F.map_keys(F.from_json(F.col("key_payload"), "map<string,string>"))
    events = _after_fields(classified, "key_payload", "before", "after")
    if tables is not None:
        events = events.join(F.broadcast(tables), ["schema", "table"], "left_semi")
    # a row is parsed only when it has a column to check
    rows = events.where(F.exists("after_fields", wanted)).select(
        "connector", "schema", "table", F.col("after").isNull().alias("from_before"), key_columns.alias("key_columns"),
        F.from_json(F.coalesce("after", "before"), "map<string,string>").alias("row"),
        F.explode(F.filter("after_fields", wanted)).alias("f"))
    value = F.col("row")[F.col("f.field")]
    f = F.col("f")
    placeholder = (F.col("from_before") & ~F.coalesce(f["optional"], F.lit(True))
                   & ~F.coalesce(F.array_contains(F.col("key_columns"), f["field"]), F.lit(False))
                   & (value == _stand_in(f)))
    unavailable = value.contains(UNAVAILABLE) | value.isin(*UNAVAILABLE_FORMS)
    return rows.select("connector", "schema", "table", "f", value.alias("value"),
                       F.coalesce(placeholder | unavailable, F.lit(False)).alias("stand_in"))


def value_frame(classified: DataFrame) -> DataFrame:
    """One row per (data event, column) whose logical type has a value rule: logical name, scale, value. Values
    Debezium writes in place of the row's (``_column_values``) are left out."""
    values = _column_values(classified, lambda f: f["name"].isin(*_CHECKED_LOGICAL)).where(~F.col("stand_in")).select(
        "connector", "schema", "table", F.col("f.field").alias("column"), F.col("f.name").alias("logical_name"),
        "value")
    return values.where(F.col("value").isNotNull()).withColumn(
        "number", F.col("value").try_cast("decimal(38,0)")).withColumn(
        "record", F.concat_ws(" ", F.concat_ws(".", "schema", "table", "column"), "value"))


def decimal_scale_frame(classified: DataFrame, sources: DataFrame) -> DataFrame:
    """decimal.handling.mode=string values of declared-scale decimals: the scale written against the declared one."""
    decimals = sources.where(F.col("type_name").isin("numeric", "decimal") & F.col("scale").isNotNull())
    strings = _column_values(classified, lambda f: (f["type"] == "string") & f["name"].isNull(),
                             decimals.select("schema", "table").distinct()).where(~F.col("stand_in")).select(
        "schema", "table", F.col("f.field").alias("column"), "value")
    joined = strings.join(decimals, ["schema", "table", "column"]).where(F.col("value").isNotNull())
    written = F.when(F.instr("value", ".") > 0, F.length(F.substring_index("value", ".", -1))).otherwise(F.lit(0))
    return joined.select("schema", "table", "column", "value", F.col("scale").alias("declared_scale"),
                         written.alias("written_scale"),
                         F.concat_ws(" ", F.concat_ws(".", "schema", "table", "column"), "value").alias("record"))


def type_expectations() -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    from great_expectations.expectations.row_conditions import Column as C

    return [
        e.ExpectColumnPairValuesToBeEqual(
            column_A="mapping", column_B="expected", ignore_row_if="either_value_is_missing",
            meta={"check": "schema type and logical name match the mapping for the source type and handling mode"}),
        e.ExpectColumnValuesToNotBeNull(
            column="expected", row_condition=C("in_reference") == True,  # noqa: E712 - a condition, not a test
            meta={"check": "the source type's declared precision has a mapping"}),
        e.ExpectColumnPairValuesToBeEqual(
            column_A="param_scale", column_B="scale", ignore_row_if="either_value_is_missing",
            row_condition=C("mapping") == DECIMAL_MAPPING,
            meta={"check": "a decimal's scale parameter is the declared scale"}),
        e.ExpectColumnPairValuesToBeEqual(
            column_A="param_precision", column_B="length", ignore_row_if="either_value_is_missing",
            row_condition=(C("mapping") == DECIMAL_MAPPING) & C("type_name").is_in(["numeric", "decimal"]),
            meta={"check": "a decimal's precision parameter is the declared precision"}),
    ]


def value_expectations() -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    from great_expectations.expectations.row_conditions import Column as C

    dates = C("logical_name").is_in(["io.debezium.time.Date", "org.apache.kafka.connect.data.Date"])
    micros = (C("logical_name") == "io.debezium.time.MicroTimestamp") & C("number").is_not_in(list(INFINITY_MICROS))
    sqlserver = C("connector") == "sqlserver"
    postgres = C("connector").is_in(["postgresql", "YugabyteDB"])
    return [
        e.ExpectColumnValuesToBeBetween(column="number", min_value=DAY_RANGE[0], max_value=DAY_RANGE[1],
                                        row_condition=dates & sqlserver,
                                        meta={"check": "SQL Server dates are days since the epoch within years "
                                                       "1..9999"}),
        e.ExpectColumnValuesToBeBetween(column="number", min_value=INT32[0], max_value=INT32[1],
                                        row_condition=dates & postgres,
                                        meta={"check": "PostgreSQL dates are a 32-bit count of days since the epoch"}),
        e.ExpectColumnValuesToBeBetween(column="number", min_value=MICRO_RANGE[0], max_value=MICRO_RANGE[1],
                                        row_condition=micros & sqlserver,
                                        meta={"check": "SQL Server microsecond timestamps are within years 1..9999"}),
        e.ExpectColumnValuesToBeBetween(column="number", min_value=INT64[0], max_value=INT64[1],
                                        row_condition=micros & postgres,
                                        meta={"check": "PostgreSQL microsecond timestamps are a 64-bit count"}),
        e.ExpectColumnValuesToMatchRegex(column="value", regex=ZONED,
                                         row_condition=C("logical_name") == "io.debezium.time.ZonedTimestamp",
                                         meta={"check": "zoned timestamps are ISO-8601 with an offset"}),
        e.ExpectColumnValuesToMatchRegex(column="value", regex=UUID,
                                         row_condition=C("logical_name") == "io.debezium.data.Uuid",
                                         meta={"check": "UUIDs are canonical text"}),
        e.ExpectColumnValuesToMatchRegex(column="value", regex=BASE64,
                                         row_condition=C("logical_name") == DECIMAL_NAME,
                                         meta={"check": "precise decimals are base64 unscaled bytes"}),
    ]


def decimal_scale_expectations() -> list[Any]:
    import great_expectations as gx

    return [gx.expectations.ExpectColumnPairValuesToBeEqual(
        column_A="written_scale", column_B="declared_scale",
        meta={"check": "decimals written as strings carry the declared scale"})]
