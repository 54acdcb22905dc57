"""The lake sink: one Parquet table per captured table, holding the change rows (``cdckit.sink=lake``).

Layout (``cdckit.lake.path``, a local path or ``s3://``)::

    <lake>/<topic>/snapshot-00003-0.parquet        rows of snapshot partition 3
    <lake>/<topic>/stream-000000000012-0.parquet   change rows of micro-batch 12, in position order
    <lake>/<topic>/_cdckit_lake.json               the table's lake schema, key and schema changes

Each row is the table's columns (``after``, or ``before`` for a delete; Debezium's ``ExtractNewRecordState``
shape) plus ``__op``, ``__deleted``, ``__source_ts_ms`` and the position ``__commit_lsn``, ``__lsn``, ``__serial``
(the latest row of a key is the one with the greatest position). Tombstones, transaction metadata, heartbeats and
schema change records are not written: the lake table keeps its own schema.

Column types follow each event's Connect schema: integers, floats, booleans, strings and bytes as themselves;
``Decimal`` as a decimal (a string above 38 digits); ``io.debezium.time.Date`` as a date; ``Timestamp``,
``MicroTimestamp`` and ``NanoTimestamp`` as a timestamp without time zone in microseconds; ``ZonedTimestamp`` as a
UTC timestamp; other logical types (times, durations, JSON, UUIDs...) as their Connect representation.

Schema changes: executors stage the batch's files under ``_staging``; the driver then compares each event schema
with the lake table's. Added columns are added (older files read them as null), a dropped column stays (null from
then on), and integers, floats and decimals are widened (Spark's Parquet reader promotes older files). A type the
lake column cannot be widened to, or a dropped key column, stops the job with ``LakeSchemaError`` before any file
of the batch is published; the batch is not committed, so nothing is lost and the stream resumes from it.
Read a table with :func:`read_lake_table`, which applies the lake schema.
"""

from __future__ import annotations

import base64
import decimal
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from cdckit.errors import CdcKitError
from cdckit.state import StateStore, join

DATA_OPS = ("c", "u", "d", "r")
META_FILE = "_cdckit_lake.json"
STAGING = "_staging"
ROWS_PER_ROW_GROUP = 10_000
META_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("__op", pa.string()), ("__deleted", pa.bool_()), ("__source_ts_ms", pa.int64()),
    ("__commit_lsn", pa.int64()), ("__lsn", pa.int64()), ("__serial", pa.int32()))

_DECIMAL = ("org.apache.kafka.connect.data.Decimal",)
_DATE = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
_TIMESTAMP_UNITS = {"io.debezium.time.Timestamp": 1000, "org.apache.kafka.connect.data.Timestamp": 1000,
                    "io.debezium.time.MicroTimestamp": 1, "io.debezium.time.NanoTimestamp": -1000}
_ZONED = "io.debezium.time.ZonedTimestamp"
_PHYSICAL = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
             "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(), "string": pa.string(),
             "bytes": pa.binary()}
_INTEGERS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_FLOATS = (pa.float32(), pa.float64())


class LakeSchemaError(CdcKitError):
    """A schema change the lake table cannot follow (a narrowing type change, a dropped key column)."""


# -- Connect schema -> Arrow ----------------------------------------------------------------------------------

def arrow_type(schema: Mapping[str, Any]) -> pa.DataType:
    """The lake column type of a Connect field schema."""
    name = schema.get("name") or ""
    kind = schema["type"]
    params = schema.get("parameters") or {}
    if name in _DECIMAL:
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        return pa.decimal128(max(precision, scale), scale) if max(precision, scale) <= 38 else pa.string()
    if name in _DATE:
        return pa.date32()
    if name in _TIMESTAMP_UNITS:
        return pa.timestamp("us")
    if name == _ZONED:
        return pa.timestamp("us", tz="UTC")
    if kind == "struct":
        return pa.struct([pa.field(f["field"], arrow_type(f)) for f in schema.get("fields", [])])
    if kind == "array":
        return pa.list_(arrow_type(schema["items"]))
    if kind == "map":
        return pa.map_(arrow_type(schema["keys"]), arrow_type(schema["values"]))
    return _PHYSICAL[kind]


def value_converter(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    """A function from the JSON payload value of a Connect field to the Python value of its lake column."""
    name = schema.get("name") or ""
    kind = schema["type"]
    if name in _DECIMAL:
        scale = int((schema.get("parameters") or {}).get("scale", 0))
        as_text = arrow_type(schema) == pa.string()

        def to_decimal(value: Any) -> Any:
            if value is None:
                return None
            number = decimal.Decimal(int.from_bytes(base64.b64decode(value), "big", signed=True)).scaleb(-scale)
            return str(number) if as_text else number
        return to_decimal
    if name in _TIMESTAMP_UNITS:
        factor = _TIMESTAMP_UNITS[name]
        if factor > 0:
            return lambda value: None if value is None else int(value) * factor
        return lambda value: None if value is None else int(value) // -factor
    if name == _ZONED:
        return lambda value: None if value is None else datetime.fromisoformat(value)
    if kind in ("float", "double", "float32", "float64"):  # NaN and the infinities arrive as strings
        return lambda value: None if value is None else float(value)
    if kind == "bytes":
        return lambda value: None if value is None else base64.b64decode(value)
    if kind == "struct":
        fields = [(f["field"], value_converter(f)) for f in schema.get("fields", [])]
        return lambda value: None if value is None else {n: convert(value.get(n)) for n, convert in fields}
    if kind == "array":
        item = value_converter(schema["items"])
        return lambda value: None if value is None else [item(v) for v in value]
    if kind == "map":
        key, val = value_converter(schema["keys"]), value_converter(schema["values"])

        def to_map(value: Any) -> Any:
            if value is None:
                return None
            pairs = value.items() if isinstance(value, dict) else value  # JsonConverter: object, or [k, v] pairs
            return [(key(k), val(v)) for k, v in pairs]
        return to_map
    return lambda value: value


def row_schema(value_schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row struct (``after``'s schema) inside an envelope's value schema."""
    for field in value_schema.get("fields", []):
        if field.get("field") in ("after", "before"):
            return dict(field)
    raise LakeSchemaError("an event's value schema has no before/after field; the lake sink needs Debezium "
                          "envelopes (cdckit.message.format=debezium)")


# -- executors: stage files -----------------------------------------------------------------------------------

def folder_name(topic: str) -> str:
    """A topic's folder in the lake (topic names are already file-name safe; anything else is replaced)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", topic)


class _StagedFile:
    def __init__(self, fs: Any, path: str, schema: Mapping[str, Any], table: str, key: list[str]) -> None:
        self.fs = fs
        self.path = path
        self.table = table
        self.key = key
        self.row_schema = schema
        self.fields = [(f["field"], value_converter(f)) for f in schema.get("fields", [])]
        self.arrow = pa.schema([pa.field(n, arrow_type(f)) for n, f in
                                ((f["field"], f) for f in schema.get("fields", []))]
                               + [pa.field(n, t) for n, t in META_COLUMNS])
        self.columns: list[list[Any]] = [[] for _ in self.arrow]
        self.rows = 0
        self.first_position: list[int] | None = None
        self._writer: Any = None

    def add(self, payload: Mapping[str, Any], op: str, position: list[int], source_ts_ms: int | None) -> None:
        row = payload.get("before") if op == "d" else payload.get("after")
        row = row or {}
        for index, (name, convert) in enumerate(self.fields):
            self.columns[index].append(convert(row.get(name)))
        offset = len(self.fields)
        for index, value in enumerate((op, op == "d", source_ts_ms, *position)):
            self.columns[offset + index].append(value)
        if self.first_position is None:
            self.first_position = position
        self.rows += 1
        if len(self.columns[0]) >= ROWS_PER_ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow.parquet as pq

        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self.arrow, filesystem=self.fs)
        table = pa.Table.from_arrays([pa.array(values, type=field.type) for values, field in
                                      zip(self.columns, self.arrow, strict=True)], schema=self.arrow)
        self._writer.write_table(table)
        self.columns = [[] for _ in self.arrow]

    def close(self) -> None:
        self._flush()
        self._writer.close()


def lake_filesystem(location: str) -> tuple[Any, str]:
    """pyarrow filesystem and root path of a lake location (local path, or S3 as for the state store)."""
    return StateStore(location).filesystem()


def staging_folder(root: str, topic: str, label: str) -> str:
    """Where a batch's files of a topic are staged: inside the lake table's folder."""
    return f"{root}/{folder_name(topic)}/{STAGING}/{label}"


def stage_writer(location: str, label: str, per_partition: bool,
                 staging: Callable[[str, str, str], str] = staging_folder
                 ) -> Callable[[Iterable[Any]], Iterator[tuple[str, Any]]]:
    """The executor side: write a partition's data events as staged Parquet files, one per (topic, schema), in
    ``staging(root, topic, label)``; yields ``("_lake", <staged file description>)``, ``("_control", <control
    value>)`` for control rows, and ``(topic, 0)`` for the records it does not store (so the driver reports every
    topic)."""

    def write(rows: Iterable[Any]) -> Iterator[tuple[str, Any]]:
        import orjson
        from pyspark import TaskContext

        fs, root = lake_filesystem(location)
        suffix = f"-{TaskContext.get().partitionId():05d}" if per_partition else ""  # type: ignore[union-attr]
        files: dict[tuple[str, str], _StagedFile] = {}
        per_topic: Counter[str] = Counter()
        controls: list[str] = []
        skipped: set[str] = set()
        for row in rows:
            op = row["op"]
            if op.startswith("_"):
                controls.append(row["value"])
                continue
            if op not in DATA_OPS:
                skipped.add(row["topic"])
                continue
            document = orjson.loads(row["value"])
            if not isinstance(document, dict) or "schema" not in document:
                raise LakeSchemaError("the lake sink reads each event's schema: set value.converter.schemas.enable"
                                      "=true (the default)")
            schema = row_schema(document["schema"])
            schema_id = hashlib.sha1(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).hexdigest()
            topic = row["topic"]
            staged = files.get((topic, schema_id))
            if staged is None:
                number = per_topic[topic]
                per_topic[topic] += 1
                folder = staging(root, topic, label)
                fs.create_dir(folder, recursive=True)
                name = f"{label}{suffix}-{number}.parquet"
                key = _key_names(orjson.loads(row["key"]) if row["key"] else None)
                staged = files[(topic, schema_id)] = _StagedFile(fs, f"{folder}/{name}", schema, row["table"], key)
            staged.add(document["payload"], op, [row["commit_lsn"], row["lsn"], row["serial"]], row["source_ts_ms"])
        for (topic, _), staged in files.items():
            staged.close()
            yield ("_lake", json.dumps({
                "topic": topic, "table": staged.table, "file": staged.path.rsplit("/", 1)[1], "path": staged.path,
                "rows": staged.rows,
                "position": staged.first_position, "schema": staged.row_schema, "key": staged.key}))
        for topic in skipped:
            yield (topic, 0)
        for value in controls:
            yield ("_control", value)

    return write


def _key_names(key: Any) -> list[str]:
    if isinstance(key, dict) and "payload" in key and "schema" in key:
        key = key["payload"]
    return list(key) if isinstance(key, dict) else []


# -- the driver: check schemas, publish ----------------------------------------------------------------------

def widen(lake: pa.DataType, new: pa.DataType) -> pa.DataType | None:
    """The type a lake column needs to hold both its values and ``new`` ones, or None when there is none that
    Spark's Parquet reader can promote older files to."""
    if lake == new:
        return lake
    if lake in _INTEGERS and new in _INTEGERS:
        return max(lake, new, key=_INTEGERS.index)
    if lake in _FLOATS and new in _FLOATS:
        return pa.float64()
    if pa.types.is_decimal(lake) and pa.types.is_decimal(new):
        scale = max(lake.scale, new.scale)
        digits = max(lake.precision - lake.scale, new.precision - new.scale)
        return pa.decimal128(digits + scale, scale) if digits + scale <= 38 else None
    return None


def _type_text(arrow: pa.DataType) -> str:
    from pyspark.sql.pandas.types import from_arrow_type

    return str(from_arrow_type(arrow, prefer_timestamp_ntz=True).simpleString())


class LakeTable:
    """A lake table's schema document (``_cdckit_lake.json``): columns in order, key, and the changes made."""

    def __init__(self, document: Mapping[str, Any] | None, topic: str) -> None:
        document = document or {}
        self.topic = topic
        self.table = str(document.get("table", ""))
        self.key: list[str] = list(document.get("key", []))
        self.columns: dict[str, pa.DataType] = {}
        if document.get("arrow"):
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(document["arrow"])))
            self.columns = {f.name: f.type for f in schema if f.name not in dict(META_COLUMNS)}
        self.changes: list[dict[str, Any]] = list(document.get("changes", []))
        self.dirty = False

    def evolve(self, staged: Mapping[str, Any], location: str, label: str) -> None:
        """Take the schema of a staged file in, or raise ``LakeSchemaError`` naming table, column and choices."""
        self.table = self.table or staged["table"] or self.topic
        new = {f["field"]: arrow_type(f) for f in staged["schema"].get("fields", [])}
        where = f"lake table {join(location, folder_name(self.topic))} (source table {self.table})"
        choices = (f"Choices: change the column back at the source; or move the folder {folder_name(self.topic)} "
                   f"out of the lake (its files stay readable) so the next run starts a new lake table with the new "
                   f"structure. The batch ({label}) was not published and the stream resumes from it.")
        for column in self.key:
            if column not in new:
                raise LakeSchemaError(f"{where}: key column {column!r} was dropped at the source; rows without it "
                                      f"cannot be matched to earlier ones. {choices}")
        changes = []
        created = not self.columns
        for name, arrow in new.items():
            old = self.columns.get(name)
            if old is None:
                if not created:
                    changes.append(f"added column {name} {_type_text(arrow)}")
                self.columns[name] = arrow
                continue
            wider = widen(old, arrow)
            if wider is None:
                raise LakeSchemaError(
                    f"{where}: column {name!r} changed from {_type_text(old)} to {_type_text(arrow)}, which the lake "
                    f"column cannot be widened to (the lake widens integers, floats and decimals). {choices}")
            if wider != old:
                changes.append(f"widened column {name} from {_type_text(old)} to {_type_text(wider)}")
                self.columns[name] = wider
        if staged["key"] and staged["key"] != self.key:
            if self.key:
                changes.append(f"key is now {', '.join(staged['key'])}")
            self.key = list(staged["key"])
        if changes:
            self.changes.append({"batch": label, "position": staged["position"], "changes": changes})
        if changes:
            self.dirty = True

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, t) for n, t in self.columns.items()]
                         + [pa.field(n, t) for n, t in META_COLUMNS])

    def document(self) -> dict[str, Any]:
        schema = self.arrow_schema()
        return {"table": self.table, "topic": self.topic, "key": self.key,
                "columns": [{"name": f.name, "type": _type_text(f.type)} for f in schema],
                "arrow": base64.b64encode(schema.serialize().to_pybytes()).decode(),
                "changes": self.changes}


def publish(location: str, staged_files: list[dict[str, Any]], label: str) -> dict[str, list[str]]:
    """Check every staged file's schema against its lake table, then publish them all (schema document first,
    then the files); on a schema the lake cannot take, remove the staged files and raise. Returns the schema
    changes made per topic."""
    fs, root = lake_filesystem(location)
    staging = sorted({f"{root}/{folder_name(s['topic'])}/{STAGING}/{label}" for s in staged_files})
    tables: dict[str, LakeTable] = {}
    made: dict[str, list[str]] = {}
    store = StateStore(location)
    try:
        for staged in sorted(staged_files, key=lambda s: (s["topic"], s["position"] or [])):
            topic = staged["topic"]
            if topic not in tables:
                tables[topic] = LakeTable(store.read_json(f"{folder_name(topic)}/{META_FILE}"), topic)
                tables[topic].dirty = not tables[topic].columns
            table = tables[topic]
            before = len(table.changes)
            table.evolve(staged, location, label)
            made.setdefault(topic, []).extend(c for entry in table.changes[before:] for c in entry["changes"])
    except LakeSchemaError:
        _remove_staging(fs, staging)
        raise
    for topic, table in tables.items():
        if table.dirty:
            store.write_json(f"{folder_name(topic)}/{META_FILE}", table.document())
    for staged in staged_files:
        folder = f"{root}/{folder_name(staged['topic'])}"
        fs.move(f"{folder}/{STAGING}/{label}/{staged['file']}", f"{folder}/{staged['file']}")
    _remove_staging(fs, staging)
    return {topic: changes for topic, changes in made.items() if changes}


def _remove_staging(fs: Any, folders: list[str]) -> None:
    import pyarrow.fs as pafs

    for folder in folders:
        fs.delete_dir(folder)
        parent = folder.rsplit("/", 1)[0]
        if not fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
            fs.delete_dir(parent)


def read_lake_table(spark: Any, location: str, topic: str) -> Any:
    """A lake table as a DataFrame, read with its lake schema (older files' narrower types are promoted and
    columns added later read as null)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    document = StateStore(location).read_json(f"{folder_name(topic)}/{META_FILE}")
    if document is None:
        raise LakeSchemaError(f"{join(location, folder_name(topic))} is not a cdckit lake table (no {META_FILE})")
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(document["arrow"])))
    spark_schema = from_arrow_schema(schema, prefer_timestamp_ntz=True)
    path = join(location, folder_name(topic))
    if path.startswith("s3://"):
        path = "s3a://" + path[len("s3://"):]
    return spark.read.schema(spark_schema).parquet(path)
