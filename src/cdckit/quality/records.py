"""Reading emitted records back into Spark for the quality suites: a files-sink folder or Kafka topics.

Both give one row per record: ``topic``, ``part`` and ``seq`` (the order a consumer sees: Kafka partition and
offset; for files, 0 and the file's rank then the line number, snapshot files before stream files), and ``key`` /
``value`` as JSON text (``value`` null for a tombstone). Files are read line by line on the executors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from cdckit.errors import CdcKitError

RECORD_SCHEMA = "topic STRING, part INT, seq BIGINT, key STRING, value STRING"
LINE_BITS = 32


class QualityInputError(CdcKitError):
    """The records to check cannot be read (no such folder, nothing in it, an unreadable line)."""


class _FilePartition(InputPartition):
    def __init__(self, rank: int, path: str, topic: str) -> None:
        super().__init__(rank)
        self.rank = rank
        self.path = path
        self.topic = topic


class FilesRecordsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cdckit_records"

    def schema(self) -> str:
        return RECORD_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _FilesReader(self.options["path"])


class _FilesReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[InputPartition]:
        return [_FilePartition(rank, str(path), topic) for rank, (topic, path) in enumerate(record_files(self.path))]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        import orjson

        assert isinstance(partition, _FilePartition)
        with open(partition.path, "rb") as handle:
            for number, line in enumerate(handle):
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise QualityInputError(f"{partition.path} line {number + 1} is not JSON ({exc})") from None
                if record.get("valueEncoding") == "base64":
                    raise QualityInputError(f"{partition.path} holds binary (Avro) values; the quality suites read "
                                            f"JSON messages")
                value = record.get("value")
                yield (record.get("topic", partition.topic), 0, (partition.rank << LINE_BITS) + number,
                       orjson.dumps(record.get("key")).decode() if record.get("key") is not None else None,
                       orjson.dumps(value).decode() if value is not None else None)


def record_files(output: str) -> list[tuple[str, Path]]:
    """A files-sink folder's record files in consumer order: per topic, snapshot files, then stream files."""
    root = Path(output)
    if not root.is_dir():
        raise QualityInputError(f"{output} is not a folder of the files sink (cdckit.output.path)")
    found: list[tuple[str, Path]] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")):
        for pattern in ("snapshot-*.jsonl", "stream-*.jsonl"):
            found.extend((folder.name, path) for path in sorted(folder.glob(pattern)))
    if not found:
        raise QualityInputError(f"{output} holds no record files (<topic>/snapshot-*.jsonl, stream-*.jsonl)")
    return found


def read_files(spark: SparkSession, output: str) -> DataFrame:
    record_files(output)  # a clear error before Spark plans anything
    spark.dataSource.register(FilesRecordsDataSource)
    return spark.read.format("cdckit_records").option("path", str(Path(output).resolve())).load()


def read_kafka(spark: SparkSession, pattern: str, options: Mapping[str, str]) -> DataFrame:
    """Records of the topics matching ``pattern`` (a Java regular expression), from the earliest offsets;
    ``kafka.*`` options (bootstrap servers, security) pass to the consumer."""
    from pyspark.sql import functions as F

    reader = spark.read.format("kafka").option("subscribePattern", pattern).option("startingOffsets", "earliest")
    for key, value in options.items():
        if key.startswith("kafka.") and not key.startswith(("kafka.acks", "kafka.enable.idempotence")):
            reader = reader.option(key, value)
    return reader.load().select(
        "topic", F.col("partition").alias("part"), F.col("offset").alias("seq"),
        F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"))
