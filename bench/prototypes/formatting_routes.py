"""Prototype measurement: what formatting a snapshot row's Debezium value costs by each candidate route.

    .venv/bin/python bench/prototypes/formatting_routes.py [rows]

The bench table's eight columns (bigint, text, numeric(12,2), timestamptz, date, boolean, uuid, text), as snapshot
reads with the default settings. Each route formats the same rows; the first rows of every route are compared
byte for byte with cdckit's formatter (the reference), and a route that differs is reported, not timed.

- reference: cdckit's per-row Python formatter (``TableFormat.value_json``), one process, text values in;
- (b) Spark SQL: typed columns, the JSON built by Spark expressions (``to_json`` of the after image, the Decimal's
  unscaled bytes by ``hex``/``unhex``, constant schema and source text), in local mode on every core.

Prints rows/s per route and the ratio to the reference; nothing is collected beyond the compared sample.
"""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat
from cdckit.formats.debezium.postgres_types import ColumnType

COLUMNS = (ColumnType("id", "int8", 20, optional=False), ColumnType("customer", "text", 25, optional=False),
           ColumnType("amount", "numeric", 1700, modifier=((12 << 16) | 2) + 4, optional=False),
           ColumnType("placed_at", "timestamptz", 1184, optional=False), ColumnType("due", "date", 1082),
           ColumnType("paid", "bool", 16), ColumnType("ref", "uuid", 2950), ColumnType("note", "text", 25))
TABLE = TableInfo("public", "orders", 16385, COLUMNS, ("id",), "d")
SETTINGS = FormatSettings(topic_prefix="bench", database="postgres")
SNAPSHOT_TS, NOW_TS, LSN, TX = 1_700_000_000_000, 1_700_000_000_001, 24_000_000, 771
EPOCH = datetime(2024, 6, 1, tzinfo=UTC)


def row(g: int) -> dict[str, Any]:
    """Row ``g`` of the bench table (bench/run.py's TABLE_FILL), typed."""
    return {"id": g, "customer": f"customer-{g % 5000}", "amount": Decimal(g % 100000) / 100,
            "placed_at": EPOCH - timedelta(seconds=g, microseconds=(g * 7919) % 1_000_000),
            "due": date(2024, 1, 1) + timedelta(days=g % 700), "paid": g % 3 == 0,
            "ref": str(uuid.UUID(f"{g:08x}00004000800{g:013x}"[:32])), "note": None if g % 11 == 0 else f"n\"{g}\\"}


def as_text(values: dict[str, Any]) -> dict[str, str | None]:
    """The row as PostgreSQL's text output gives it to cdckit's formatter."""
    out: dict[str, str | None] = {}
    for name, value in values.items():
        if value is None:
            out[name] = None
        elif isinstance(value, bool):
            out[name] = "t" if value else "f"
        elif isinstance(value, datetime):
            out[name] = value.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".") + "+00"
        elif isinstance(value, Decimal):
            out[name] = f"{value:.2f}"
        else:
            out[name] = str(value)
    return out


def reference_value(fmt: TableFormat, values: dict[str, Any]) -> str:
    event = ChangeEvent("public", "orders", "r", None, as_text(values), Position(LSN, LSN, 0), SNAPSHOT_TS,
                        tx_id=TX, snapshot="true")
    return fmt.value_json(event, NOW_TS)


def measure_reference(rows: int) -> float:
    fmt = TableFormat(TABLE, SETTINGS)
    texts = [as_text(row(g)) for g in range(1, rows + 1)]
    started = time.perf_counter()
    for text in texts:
        event = ChangeEvent("public", "orders", "r", None, text, Position(LSN, LSN, 0), SNAPSHOT_TS, tx_id=TX,
                            snapshot="true")
        fmt.value_json(event, NOW_TS)
    return rows / (time.perf_counter() - started)


def spark_value_column(fmt: TableFormat) -> Any:
    """The value text as one Spark expression over typed columns (hand-built for this table's types)."""
    import pyspark.sql.functions as F

    sample = reference_value(fmt, row(1))
    prefix = sample[:sample.index('"payload":{') + len('"payload":{')]
    source = sample[sample.index(',"source":'):sample.index(',"op":')]
    unscaled = F.col("amount") * 100  # numeric(12,2): the Decimal's unscaled value fits a bigint
    hexed = F.hex(unscaled.cast("bigint"))
    # Java's BigInteger.toByteArray: the shortest two's complement bytes (a sign byte where the top bit would lie)
    padded = F.when(F.length(hexed) % 2 == 1, F.concat(F.lit("0"), hexed)).otherwise(hexed)
    positive = F.when(F.substring(padded, 1, 1).rlike("[89A-F]"), F.concat(F.lit("00"), padded)).otherwise(padded)
    negative = F.regexp_replace(hexed, r"^(FF)+(?=[89A-F])", "")
    minimal = F.when(unscaled < 0, negative).otherwise(positive)
    after = F.struct(
        F.col("id"), F.col("customer"),
        F.base64(F.unhex(minimal)).alias("amount"),
        F.date_format(F.col("placed_at"), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("placed_at"),
        F.datediff(F.col("due"), F.lit("1970-01-01").cast("date")).alias("due"),
        F.col("paid"), F.col("ref"), F.col("note"))
    return F.concat(F.lit(prefix + '"before":null,"after":'),
                    F.to_json(after, {"ignoreNullFields": "false"}),
                    F.lit(source + ',"op":"r","ts_ms":' + str(NOW_TS) + ',"transaction":null}}'))


def typed_frame(spark: Any, rows: int) -> Any:
    import pyspark.sql.functions as F

    g = F.col("id")
    return spark.range(1, rows + 1).select(
        g.alias("id"), F.concat(F.lit("customer-"), (g % 5000).cast("string")).alias("customer"),
        ((g % 100000) / 100).cast("decimal(12,2)").alias("amount"),
        (F.lit(int(EPOCH.timestamp() * 1_000_000)) - g * 1_000_000 - (g * 7919) % 1_000_000).alias("micros"),
        F.date_add(F.lit("2024-01-01").cast("date"), (g % 700).cast("int")).alias("due"),
        (g % 3 == 0).alias("paid"),
        F.expr("lower(concat(lpad(hex(id), 8, '0'), '-0000-4000-800', substr(lpad(hex(id), 13, '0'), 1, 1), '-', "
               "substr(lpad(hex(id), 13, '0'), 2, 12)))").alias("ref"),
        F.when(g % 11 == 0, F.lit(None)).otherwise(F.concat(F.lit('n"'), g.cast("string"), F.lit("\\"))).alias("note"),
    ).withColumn("placed_at", F.timestamp_micros(F.col("micros")))


def measure_spark(rows: int) -> tuple[float, list[str]]:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[*]").appName("formatting-routes")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
    fmt = TableFormat(TABLE, SETTINGS)
    frame = typed_frame(spark, rows)
    values = frame.select(spark_value_column(fmt).alias("value"))
    values.limit(10).collect()  # compile and warm up
    started = time.perf_counter()
    values.write.format("noop").mode("overwrite").save()
    rate = rows / (time.perf_counter() - started)
    sample = [r["value"] for r in values.limit(2000).collect()]
    return rate, sample


def main(argv: list[str]) -> int:
    rows = int(argv[0]) if argv else 1_000_000
    fmt = TableFormat(TABLE, SETTINGS)
    reference = measure_reference(min(rows, 200_000))
    print(f"reference (Python, one process): {reference:,.0f} rows/s")
    rate, sample = measure_spark(rows)
    expected = []
    for g in range(1, len(sample) + 1):
        expected.append(reference_value(fmt, row(g)))
    differing = [(i, a, b) for i, (a, b) in enumerate(zip(expected, sample, strict=True)) if a != b]
    if differing:
        i, a, b = differing[0]
        at = next(k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        print(f"(b) Spark SQL: {len(differing)} of {len(sample)} sampled rows differ, first row {i + 1}:\n"
              f"  cdckit ...{a[max(0, at - 80):at + 80]}\n  spark  ...{b[max(0, at - 80):at + 80]}")
    print(f"(b) Spark SQL, local[*]: {rate:,.0f} rows/s = {rate / reference:.1f}x the reference "
          f"({'identical' if not differing else 'NOT identical'} on {len(sample)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
