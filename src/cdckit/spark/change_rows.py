"""Typed change rows from Debezium events, staged as Parquet files by the executors (the Delta sink's first step).

A change row is the table's columns (``after``, or ``before`` for a delete; Debezium's ``ExtractNewRecordState``
shape) plus ``__op``, ``__deleted``, ``__source_ts_ms`` and the position ``__commit_lsn``, ``__lsn``, ``__serial``
(the latest row of a key is the one with the greatest position). Tombstones, transaction metadata, heartbeats and
schema change records are not rows.

Column types follow each event's Connect schema: integers, floats, booleans, strings and bytes as themselves;
``Decimal`` as a decimal (a string above 38 digits); ``io.debezium.time.Date`` as a date; ``Timestamp``,
``MicroTimestamp`` and ``NanoTimestamp`` as a timestamp without time zone in microseconds (nanoseconds are cut);
``ZonedTimestamp`` as a UTC timestamp; other logical types (times, durations, JSON, UUIDs...) as their Connect
representation. So SQL Server and PostgreSQL share the code, and each row takes the structure in force at its
position.
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
from cdckit.state import StateStore

DATA_OPS = ("c", "u", "d", "r")
ROWS_PER_ROW_GROUP = 10_000
META_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("__op", pa.string()), ("__deleted", pa.bool_()), ("__source_ts_ms", pa.int64()),
    ("__commit_lsn", pa.int64()), ("__lsn", pa.int64()), ("__serial", pa.int32()))
WIDE_POSITION = pa.decimal128(25, 0)  # SQL Server's 80-bit LSNs (rows.POSITION_DIGITS)


def meta_columns(wide: bool = False) -> tuple[tuple[str, pa.DataType], ...]:
    """cdckit's columns of a typed row; ``wide``: the position's LSNs as DECIMAL(25, 0), SQL Server's (its LSNs
    pass 64 bits), else BIGINT, PostgreSQL's."""
    if not wide:
        return META_COLUMNS
    return tuple((n, WIDE_POSITION if n in ("__commit_lsn", "__lsn") else t) for n, t in META_COLUMNS)

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


class StructureError(CdcKitError):
    """A structure change a table of typed rows cannot follow (a type it cannot widen to, a dropped key column)."""


# -- Connect schema -> Arrow ----------------------------------------------------------------------------------

def arrow_type(schema: Mapping[str, Any]) -> pa.DataType:
    """The column type of a Connect field schema."""
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
    """A function from the JSON payload value of a Connect field to the Python value of its column."""
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
    raise StructureError("an event's value schema has no before/after field; typed change rows need Debezium "
                          "envelopes (cdckit.message.format=debezium)")


# -- executors: stage files -----------------------------------------------------------------------------------

def folder_name(topic: str) -> str:
    """A topic's folder name (topic names are already file-name safe; anything else is replaced), never ``.`` or
    ``..`` (a topic a transform routes there: Kafka refuses those names too), which would name the lake's own folder
    or its parent."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", topic)
    return name if name.strip(".") else "_" * max(1, len(name))


class _StagedFile:
    def __init__(self, fs: Any, path: str, schema: Mapping[str, Any], table: str, key: list[str],
                 wide: bool = False) -> None:
        self.fs = fs
        self.wide = wide
        self.path = path
        self.table = table
        self.key = key
        self.row_schema = schema
        self.fields = [(f["field"], value_converter(f)) for f in schema.get("fields", [])]
        self.arrow = pa.schema([pa.field(n, arrow_type(f)) for n, f in
                                ((f["field"], f) for f in schema.get("fields", []))]
                               + [pa.field(n, t) for n, t in meta_columns(wide)])
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


def filesystem(location: str) -> tuple[Any, str]:
    """pyarrow filesystem and root path of a location (local path, or S3 as for the state store)."""
    return StateStore(location).filesystem()


def stage_writer(location: str, label: str, per_partition: bool, staging: Callable[[str, str, str], str]
                 ) -> Callable[[Iterable[Any]], Iterator[tuple[str, Any]]]:
    """The executor side: write a partition's data events as staged Parquet files, one per (topic, schema), in
    ``staging(root, topic, label)``; yields ``("_staged", <staged file description>)``, ``("_control", <control
    value>)`` for control rows, and ``(topic, 0)`` for the records it does not store (so the driver reports every
    topic)."""

    def write(rows: Iterable[Any]) -> Iterator[tuple[str, Any]]:
        import orjson
        from pyspark import TaskContext

        fs, root = filesystem(location)
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
                raise StructureError("typed change rows need each event's schema: set value.converter.schemas.enable"
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
                source = (document["payload"] or {}).get("source") or {}
                staged = files[(topic, schema_id)] = _StagedFile(fs, f"{folder}/{name}", schema, row["table"], key,
                                                                 source.get("connector") == "sqlserver")
            staged.add(document["payload"], op, [int(row["commit_lsn"]), int(row["lsn"]), row["serial"]],
                       row["source_ts_ms"])
        for (topic, _), staged in files.items():
            staged.close()
            yield ("_staged", json.dumps({
                "topic": topic, "table": staged.table, "file": staged.path.rsplit("/", 1)[1], "path": staged.path,
                "rows": staged.rows,
                "position": staged.first_position, "schema": staged.row_schema, "key": staged.key,
                "wide": staged.wide}))
        for topic in skipped:
            yield (topic, 0)
        for value in controls:
            yield ("_control", value)

    return write


def _key_names(key: Any) -> list[str]:
    if isinstance(key, dict) and "payload" in key and "schema" in key:
        key = key["payload"]
    return list(key) if isinstance(key, dict) else []


# -- structures ----------------------------------------------------------------------------------------

def widen(old: pa.DataType, new: pa.DataType) -> pa.DataType | None:
    """The type a column needs to hold both its values and ``new`` ones (integers, floats and decimals widen), or
    None when there is none."""
    if old == new:
        return old
    if old in _INTEGERS and new in _INTEGERS:
        return max(old, new, key=_INTEGERS.index)
    if old in _FLOATS and new in _FLOATS:
        return pa.float64()
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        scale = max(old.scale, new.scale)
        digits = max(old.precision - old.scale, new.precision - new.scale)
        return pa.decimal128(digits + scale, scale) if digits + scale <= 38 else None
    return None


def type_text(arrow: pa.DataType) -> str:
    from pyspark.sql.pandas.types import from_arrow_type

    return str(from_arrow_type(arrow, prefer_timestamp_ntz=True).simpleString())


class RowStructure:
    """The columns (in order) and key of a topic's typed rows, taken in staged file by staged file."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.table = ""
        self.key: list[str] = []
        self.columns: dict[str, pa.DataType] = {}
        self.wide = False  # positions as DECIMAL(25, 0) (meta_columns)

    def evolve(self, staged: Mapping[str, Any], where: str, choices: str) -> None:
        """Take the structure of a staged file in, or raise ``StructureError`` naming ``where`` (the table), the
        column and ``choices``."""
        self.table = self.table or staged["table"] or self.topic
        self.wide = self.wide or bool(staged.get("wide"))
        new = {f["field"]: arrow_type(f) for f in staged["schema"].get("fields", [])}
        for column in self.key:
            if column not in new:
                raise StructureError(f"{where}: key column {column!r} was dropped at the source; rows without it "
                                     f"cannot be matched to earlier ones. {choices}")
        for name, arrow in new.items():
            old = self.columns.get(name)
            if old is None:
                self.columns[name] = arrow
                continue
            wider = widen(old, arrow)
            if wider is None:
                raise StructureError(
                    f"{where}: column {name!r} changed from {type_text(old)} to {type_text(arrow)}, which the column "
                    f"cannot be widened to (integers, floats and decimals widen). {choices}")
            self.columns[name] = wider
        if staged["key"]:
            self.key = list(staged["key"])

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, t) for n, t in self.columns.items()]
                         + [pa.field(n, t) for n, t in meta_columns(self.wide)])
