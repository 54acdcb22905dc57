"""The configured single message transforms (``transforms=...``), applied in Spark before the sink.

The chain runs on the executors, partition by partition, keeping the records' order; it reads and writes the
same row shape (``EVENT_SCHEMA``), so every sink takes transformed records as it takes any others. Control rows
(``op`` starting with ``_``) pass untouched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql import DataFrame

from cdckit.formats.debezium.transforms import Record, apply_chain, chain, is_transform_setting
from cdckit.spark.rows import option_bool


def transform_settings(options: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in options.items() if is_transform_setting(name)}


def has_transforms(options: Mapping[str, str]) -> bool:
    """Whether a chain of transforms is configured."""
    return bool(chain(transform_settings(options)))


def transformed(df: DataFrame, options: Mapping[str, str]) -> DataFrame:
    """``df``'s records through the configured chain (``df`` itself when no transform is configured)."""
    settings = transform_settings(options)
    if not chain(settings):
        return df
    schemas = (option_bool(options, "key.converter.schemas.enable", True),
               option_bool(options, "value.converter.schemas.enable", True))

    def apply(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        transforms = chain(settings)
        for batch in batches:
            out = []
            for row in batch.to_pylist():
                if row["op"].startswith("_"):
                    out.append(row)
                    continue
                headers = [(h["key"], h["value"]) for h in row["headers"] or ()]
                result = apply_chain(transforms, Record(row["topic"], row["key"], row["value"], headers, row["op"],
                                                        schemas))
                if result is None:
                    continue
                row["topic"], row["key"], row["value"] = result.topic, result.key_text(), result.value_text()
                row["headers"] = [{"key": key, "value": value} for key, value in result.headers]
                out.append(row)
            yield pa.RecordBatch.from_pylist(out, schema=batch.schema)

    return df.mapInArrow(apply, df.schema)
