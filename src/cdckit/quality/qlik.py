"""The Qlik Replicate suite (JSON messages): metadata before data for each table version, changeSequence order,
and masks that agree with the data, per Qlik's "Metadata and data messages" description:

- a data message follows, in its partition, a metadata message of its table whose columns are the data's columns;
- per partition, the changeSequence of change messages (INSERT, UPDATE, DELETE) strictly increases once replays
  (the same changeSequence again) are dropped;
- columnMask has the bit (ordinal - 1) of each column present and no other; a column not present is null;
  changeMask is, for INSERT and REFRESH, the present columns; for DELETE, the primary-key columns; for UPDATE with
  a before image, the columns whose value differs from it; never LOB columns (BLOB, CLOB, NCLOB).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

LOBS = ("BLOB", "CLOB", "NCLOB")
CHANGES = ("INSERT", "UPDATE", "DELETE")
# What the suite reads of a message; objects read as ``string`` keep their JSON text
_MESSAGE = ("struct<type:string,message:struct<lineage:struct<schema:string,table:string,tableVersion:string>,"
            "schema:string,table:string,tableStructure:struct<tableColumns:string>,data:string,beforeData:string,"
            "headers:struct<operation:string,changeSequence:string,columnMask:string,changeMask:string>>>")


def _ordinals(mask: str | None) -> set[int]:
    bits = int(mask, 16) if mask else 0
    return {index + 1 for index in range(bits.bit_length()) if bits >> index & 1}


def mask_problem(operation: str | None, data: str | None, before: str | None, column_mask: str | None,
                 change_mask: str | None, columns: str | None) -> str | None:
    """What is wrong with a data message's masks (None when they agree with its data and its metadata)."""
    if columns is None or data is None:
        return None  # reported by the metadata check
    table = json.loads(columns)
    ordinal = {name: int(spec["ordinal"]) for name, spec in table.items()}
    lobs = {ordinal[name] for name, spec in table.items() if spec.get("type") in LOBS}
    keys = {ordinal[name] for name, spec in table.items() if int(spec.get("primaryKeyPosition") or 0) > 0}
    row = json.loads(data)
    present = _ordinals(column_mask)
    if not present <= {ordinal[name] for name in row if name in ordinal}:
        return f"columnMask {column_mask} names columns the data does not have"
    absent_with_value = sorted(name for name, value in row.items() if ordinal.get(name) not in present
                               and value is not None)
    if absent_with_value:
        return f"columnMask {column_mask} leaves out {', '.join(absent_with_value)}, which have values"
    if operation in ("INSERT", "REFRESH"):
        expected = present - lobs
    elif operation == "DELETE":
        expected = keys - lobs
    elif operation == "UPDATE" and before is not None:
        old = json.loads(before)
        expected = {ordinal[name] for name, value in row.items()
                    if name in ordinal and ordinal[name] in present and (name not in old or old[name] != value)}
        expected -= lobs
    else:
        return None
    actual = _ordinals(change_mask)
    if actual != expected:
        return (f"{operation} changeMask {change_mask} marks ordinals {sorted(actual)}, the data says "
                f"{sorted(expected)}")
    return None


def qlik_frame(classified: DataFrame) -> DataFrame:
    """One row per Qlik data message, with the latest metadata of its table before it in its partition."""
    message = F.from_json("value", _MESSAGE)  # each message parsed once
    qlik = classified.where(F.col("kind") == "qlik").select("topic", "part", "seq", message.alias("q"))
    m = F.col("q.message")
    kind = F.col("q.type")
    rows = qlik.select("topic", "part", "seq", kind.alias("type"),
                       F.coalesce(m["lineage"]["schema"], m["schema"]).alias("schema"),
                       F.coalesce(m["lineage"]["table"], m["table"]).alias("table"),
                       F.when(kind == "MD", m["tableStructure"]["tableColumns"]).alias("md_columns"),
                       m["lineage"]["tableVersion"].alias("md_version"), m["data"].alias("data"),
                       m["beforeData"].alias("before"), m["headers"]["operation"].alias("operation"),
                       m["headers"]["changeSequence"].alias("change_sequence"),
                       m["headers"]["columnMask"].alias("column_mask"),
                       m["headers"]["changeMask"].alias("change_mask"))
    before = Window.partitionBy("topic", "part", "schema", "table").orderBy("seq").rowsBetween(
        Window.unboundedPreceding, -1)
    rows = rows.withColumn("columns", F.last("md_columns", ignorenulls=True).over(before))
    data = rows.where(F.col("type") == "DT")
    data_names = F.array_sort(F.map_keys(F.from_json("data", "map<string,string>")))
    md_names = F.array_sort(F.map_keys(F.from_json("columns", "map<string,string>")))
    metadata = (F.when(F.col("columns").isNull(), "no metadata message of the table before it")
                .when(data_names != md_names, F.concat(F.lit("its columns "), F.to_json(data_names),
                                                       F.lit(" are not the metadata's "), F.to_json(md_names))))
    problem = F.udf(lambda *columns: mask_problem(*columns), "string")
    data = data.select("*", metadata.alias("metadata_problem"),
                       problem("operation", "data", "before", "column_mask", "change_mask", "columns")
                       .alias("mask_problem"))
    changes = data.where(F.col("operation").isin(*CHANGES)).dropDuplicates(["topic", "part", "change_sequence"])
    previous = F.lag("change_sequence").over(Window.partitionBy("topic", "part").orderBy("seq"))
    ordered = changes.select("topic", "part", "seq", (previous.isNull() | (F.col("change_sequence") > previous))
                             .alias("sequence_ok"))
    return data.join(ordered, ["topic", "part", "seq"], "left").withColumn(
        "record", F.concat_ws(" ", "topic", F.concat_ws(".", "schema", "table"), "operation", "change_sequence"))


def qlik_expectations() -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    return [
        e.ExpectColumnValuesToBeNull(column="metadata_problem",
                                     meta={"check": "a metadata message with the data's columns precedes it"}),
        e.ExpectColumnValuesToBeInSet(column="sequence_ok", value_set=[True],
                                      meta={"check": "changeSequence increases per partition"}),
        e.ExpectColumnValuesToBeNull(column="mask_problem",
                                     meta={"check": "columnMask and changeMask agree with the data"}),
    ]
