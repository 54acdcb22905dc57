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
BATCH_LINES = 4096
TASK_BYTES = 128 << 20


class QualityInputError(CdcKitError):
    """The records to check cannot be read (no such folder, nothing in it, an unreadable line)."""


class _FilePartition(InputPartition):
    """Record files read by one task, each as (rank, path, topic)."""

    def __init__(self, index: int, files: list[tuple[int, str, str]]) -> None:
        super().__init__(index)
        self.files = files


class FilesRecordsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cdckit_records"

    def schema(self) -> str:
        return RECORD_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _FilesReader(self.options["path"], int(self.options.get("partitions", "2")))


class _FilesReader(DataSourceReader):
    def __init__(self, path: str, partitions: int) -> None:
        self.path = path
        self.wanted = max(1, partitions)

    def partitions(self) -> list[InputPartition]:
        """The files in about ``wanted`` tasks (more when they are large: about ``TASK_BYTES`` each), a task a run of
        whole files: a task per file would cost more to start than many files are to read."""
        files = [(rank, str(path), topic, path.stat().st_size)
                 for rank, (topic, path) in enumerate(record_files(self.path))]
        total = sum(size for *_, size in files)
        tasks = min(len(files), max(self.wanted, -(-total // TASK_BYTES)))
        share = -(-total // tasks) if total else 0
        partitions: list[InputPartition] = []
        run: list[tuple[int, str, str]] = []
        size_of_run = 0
        for rank, path, topic, size in files:
            run.append((rank, path, topic))
            size_of_run += size
            if size_of_run >= share and len(partitions) < tasks - 1:
                partitions.append(_FilePartition(len(partitions), run))
                run, size_of_run = [], 0
        if run:
            partitions.append(_FilePartition(len(partitions), run))
        return partitions

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The files' records in Arrow batches of ``BATCH_LINES`` (Spark takes them without converting each row)."""
        import orjson
        import pyarrow as pa

        assert isinstance(partition, _FilePartition)
        schema = pa.schema([("topic", pa.string()), ("part", pa.int32()), ("seq", pa.int64()), ("key", pa.string()),
                            ("value", pa.string())])
        columns: tuple[list[Any], ...] = ([], [], [], [])
        for rank, path, topic in partition.files:
            base = rank << LINE_BITS
            with open(path, "rb") as handle:
                for number, line in enumerate(handle):
                    try:
                        record = orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise QualityInputError(f"{path} line {number + 1} is not JSON ({exc})") from None
                    if record.get("valueEncoding") == "base64":
                        raise QualityInputError(f"{path} holds binary (Avro) values; the quality suites read JSON "
                                                f"messages")
                    key, value = record.get("key"), record.get("value")
                    columns[0].append(record.get("topic", topic))
                    columns[1].append(base + number)
                    columns[2].append(orjson.dumps(key).decode() if key is not None else None)
                    columns[3].append(orjson.dumps(value).decode() if value is not None else None)
                    if len(columns[0]) == BATCH_LINES:
                        yield _batch(schema, columns)
        if columns[0]:
            yield _batch(schema, columns)


def _batch(schema: Any, columns: tuple[list[Any], ...]) -> Any:
    import pyarrow as pa

    topics, seqs, keys, values = columns
    batch = pa.RecordBatch.from_arrays([pa.array(topics, pa.string()), pa.array([0] * len(topics), pa.int32()),
                                        pa.array(seqs, pa.int64()), pa.array(keys, pa.string()),
                                        pa.array(values, pa.string())], schema=schema)
    for column in columns:
        column.clear()
    return batch


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
    return spark.read.format("cdckit_records").option("path", str(Path(output).resolve())).option(
        "partitions", str(spark.sparkContext.defaultParallelism)).load()


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
