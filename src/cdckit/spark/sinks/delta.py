"""The Delta Lake sink (``cdckit.sink=delta``): per captured table, a change table and a current-state table.

Layout (``cdckit.delta.path``, a local path or ``s3://``)::

    <delta>/changes/<topic>            every change row, appended once (a Delta table)
    <delta>/state/<topic>              the source table's rows as of the last committed batch, kept by MERGE
    <delta>/_staging/<topic>/<label>/  a batch's rows, staged by the executors until the driver commits them

A change row is the table's columns (``after``, or ``before`` for a delete; Debezium's ``ExtractNewRecordState``
shape) plus ``__op``, ``__deleted``, ``__source_ts_ms`` and the position ``__commit_lsn``, ``__lsn``, ``__serial``,
typed from each event's Connect schema (``change_rows``). A state row is the table's columns plus ``__source_ts_ms`` and
the position of its last change. ``cdckit.delta.mode`` keeps the change tables, the state tables or both.

A batch goes in two steps. The executors stage its data events as Parquet files, one per topic and structure, so
no batch is collected on the driver. The driver then checks every topic's structure against its tables before it
commits anything, and commits each topic:

- **Changes:** a stream batch is appended with Delta's idempotent write (``txnAppId`` the stream's query id,
  ``txnVersion`` the batch id), so a replayed batch commits nothing twice. A snapshot reads whole tables and is
  committed at once (``WholeSnapshot``); a resumed one replaces, in one commit per table, the ``r`` rows its
  earlier attempts committed, so a snapshot killed at any point leaves each row once.
- **State:** each key's last change in the batch, in position order, is merged: a delete removes the row, other
  changes upsert it (a primary-key update arrives as a delete of the old key and a create of the new one). The
  stream's MERGE carries the same transaction identifier (Delta's ``spark.databricks.delta.write.txnAppId`` /
  ``txnVersion`` settings). A snapshot also deletes the rows it did not read, all of them for a table it read
  empty.

Structure changes: added columns are added to both tables; integers, floats and decimals are widened with Delta's
type widening (the table feature ``typeWidening``, switched on only when a column needs it); a narrower type is
cast to the table's. Anything else, a dropped key column or a changed key, stops the batch before anything is
committed, with ``DeltaSchemaError`` naming the table, the column and the choices; the batch is not committed, so
the stream resumes from it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdckit.errors import CdcKitError
from cdckit.spark.change_rows import (
    META_COLUMNS,
    RowStructure,
    StructureError,
    filesystem,
    folder_name,
    meta_columns,
    stage_writer,
)
from cdckit.spark.sinks.base import SinkWriter, WholeSnapshot, WriteSummary, location_problem, on_partitions
from cdckit.state import StateStore

CHANGES = "changes"
STATE = "state"
STAGING = "_staging"
MODES = ("changes", "state", "both")
POSITION = ("__commit_lsn", "__lsn", "__serial")
CHANGE_COLUMNS = tuple(name for name, _ in META_COLUMNS)  # __op, __deleted, __source_ts_ms and the position
STATE_COLUMNS = ("__source_ts_ms", *POSITION)
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
KEY_PROPERTY = "cdckit.key"
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


class DeltaSinkError(CdcKitError):
    """The Delta sink cannot run as configured (no Delta Lake on the session, a table it cannot keep)."""


class DeltaSchemaError(DeltaSinkError, StructureError):
    """A structure change the Delta tables cannot follow; nothing of the batch was committed."""


def check_session(spark: SparkSession) -> None:
    """Refuse a session without Delta Lake, saying how to add it."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    catalog = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
    loaded = True
    try:
        spark._jvm.org.apache.spark.util.Utils.classForName(  # type: ignore[union-attr]
            "io.delta.tables.DeltaTable", True, False)
    except Exception:  # py4j reports a missing class as a generic error
        loaded = False
    if loaded and "io.delta.sql.DeltaSparkSessionExtension" in extensions and "DeltaCatalog" in catalog:
        return
    raise DeltaSinkError(
        "cdckit.sink=delta needs Delta Lake in the Spark session: its jars (spark-submit --packages "
        "io.delta:delta-spark_2.13:<the release made for your Spark>; on EMR, the delta-defaults classification "
        "delta.enabled=true), spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension and "
        "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog. "
        + ("The jars are missing." if not loaded else "The two spark.sql settings are missing."))


def spark_location(location: str) -> str:
    """The location as Spark's filesystems name it: ``s3://`` through S3A, a local path made absolute."""
    scheme, _, rest = location.partition("://")
    if rest and scheme in ("s3", "s3a"):
        return "s3a://" + rest.rstrip("/")
    return os.path.abspath(location)


def table_path(location: str, kind: str, topic: str) -> str:
    """A topic's change (``changes``) or state (``state``) table."""
    return f"{spark_location(location)}/{kind}/{folder_name(topic)}"


def _staging(root: str, topic: str, label: str) -> str:
    return f"{root}/{STAGING}/{folder_name(topic)}/{label}"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _table(path: str) -> str:
    return f"delta.{_quote(path)}"


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def widen(old: T.DataType, new: T.DataType) -> T.DataType | None:
    """The type a column needs to hold both its values and ``new`` ones, where Delta's type widening can change
    it to that (or ``old`` already holds ``new``), else None."""
    if old == new:
        return old
    if isinstance(old, _INTEGRAL) and isinstance(new, _INTEGRAL):
        return max(old, new, key=lambda t: [isinstance(t, k) for k in _INTEGRAL].index(True))
    if isinstance(old, (T.FloatType, T.DoubleType)) and isinstance(new, (T.FloatType, T.DoubleType)):
        return T.DoubleType()
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        scale = max(old.scale, new.scale)
        digits = max(old.precision - old.scale, new.precision - new.scale)
        return T.DecimalType(digits + scale, scale) if digits + scale <= 38 else None
    return None


@dataclass
class _Plan:
    """What committing one topic of a batch takes: its staged files and the tables' changes of structure."""

    topic: str
    table: str
    key: list[str]
    columns: dict[str, T.DataType]  # the batch's columns (without cdckit's), in order
    files: list[dict[str, Any]]
    rows: int
    alters: dict[str, list[str]] = field(default_factory=dict)  # table path -> SQL statements to run first
    existing: set[str] = field(default_factory=set)  # the paths of the tables that exist already
    changes: list[str] = field(default_factory=list)  # what a user is told (added column, widened column)


DELTA_CONTROLS = "delta-snapshot.json"  # a Delta snapshot's control rows, written at once after its commits


class DeltaSink(SinkWriter):
    """Commits staged batches into the Delta tables of ``cdckit.delta.path`` (``cdckit.sink=delta``). Takes the
    records as the sources make them: the configuration refuses transforms with this sink."""

    names = ("delta",)
    transforms = False

    def __init__(self, spark: SparkSession, options: Mapping[str, str]) -> None:
        super().__init__(spark, options)
        self._app: str | None = None  # the stream query's id, fixed for the checkpoint's life: read once
        check_session(spark)
        self.spark = spark
        self.location = options.get("cdckit.delta.path") or "cdckit-delta"
        if "://" not in self.location:
            self.location = os.path.abspath(self.location)
        self.mode = options.get("cdckit.delta.mode") or "both"
        if self.mode not in MODES:
            raise DeltaSinkError(f"cdckit.delta.mode={self.mode!r}: use one of {', '.join(MODES)}")
        self.partition_columns = [c.strip() for c in (options.get("cdckit.delta.partition.columns") or "").split(",")
                                  if c.strip()]
        self._keys: dict[str, list[str]] = {}  # each existing table's recorded key, set when it was created
        self._refuse_a_parquet_lake()

    @classmethod
    def problems(cls, options: Mapping[str, str], keyless: Sequence[str], offline: bool) -> list[str]:
        """The Delta location can be written, and every captured table has a key when current-state tables are
        kept (``cdckit.delta.mode`` state or both): a keyless table's would have no row to update."""
        found = []
        problem = location_problem(options, "cdckit.delta.path", "cdckit-delta", offline)
        if problem:
            found.append(problem)
        mode = options.get("cdckit.delta.mode") or "both"
        if keyless and mode in ("state", "both"):
            shown = ", ".join(keyless[:10]) + (f" and {len(keyless) - 10} more" if len(keyless) > 10 else "")
            found.append(f"{shown} {'has' if len(keyless) == 1 else 'have'} no primary key, so cdckit.delta.mode="
                         f"{mode} cannot keep {'its' if len(keyless) == 1 else 'their'} current-state table: name "
                         f"key columns with message.key.columns (e.g. {keyless[0]}:<column>,<column>), set "
                         f"cdckit.delta.mode=changes, or leave {'it' if len(keyless) == 1 else 'them'} out with "
                         f"table.exclude.list")
        return found

    def _refuse_a_parquet_lake(self) -> None:
        """A folder the former lake sink wrote (Parquet files beside ``_cdckit_lake.json``) is not a Delta location."""
        import pyarrow.fs as pafs

        fs, root = filesystem(self.location)
        for entry in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
            if entry.type == pafs.FileType.Directory and \
                    fs.get_file_info(f"{entry.path}/_cdckit_lake.json").type == pafs.FileType.File:
                raise DeltaSinkError(
                    f"cdckit.delta.path={self.location} holds a lake table of the former Parquet lake sink "
                    f"({entry.base_name}/_cdckit_lake.json), which the Delta sink does not convert (decision 0025); "
                    f"its Parquet files stay readable with spark.read.parquet. Choose a new cdckit.delta.path, and to "
                    f"fill its tables from the start a new cdckit.checkpoint.location and slot.name")

    @property
    def changes(self) -> bool:
        return self.mode in ("changes", "both")

    @property
    def state(self) -> bool:
        return self.mode in ("state", "both")

    def stage_writer(self, label: str) -> Any:
        """The executor side of a batch: stage its data events as Parquet files (``change_rows.stage_writer``)."""
        return stage_writer(self.location, label, True, _staging)

    def commit(self, reported: Sequence[tuple[str, Any]], label: str, controls: list[str] | None = None,
               txn: tuple[str, int] | None = None, snapshot: WholeSnapshot | None = None) -> dict[str, int]:
        """Commit a staged batch (what ``stage_writer``'s tasks reported) topic by topic. ``txn``: (application id,
        version) of an idempotent stream batch; ``snapshot``: the batch is a snapshot of whole tables. Returns rows
        per topic; the batch's control rows go to ``controls``."""
        staged: dict[str, list[dict[str, Any]]] = defaultdict(list)
        summary: Counter[str] = Counter()
        found: list[str] = []
        for name, item in reported:
            if name == "_staged":
                entry = json.loads(item)
                staged[entry["topic"]].append(entry)
                summary[entry["topic"]] += entry["rows"]
            elif name == "_control":
                found.append(item)
            else:
                summary[name] += item
        try:
            plans = [self._plan(topic, files, label) for topic, files in sorted(staged.items())]
            for plan in plans:
                self._commit(plan, txn, snapshot)
                for change in plan.changes:
                    print(f"delta table {plan.topic}: {change}", flush=True)
            if snapshot is not None:
                for topic in sorted(set(snapshot.since) - set(staged)):
                    self._read_empty(topic, snapshot)
        finally:
            self._remove_staging(staged, label)
        if controls is not None:
            controls.extend(found)
        return dict(sorted(summary.items()))

    # -- the driver: check structures ----------------------------------------------------------------------------

    def snapshot(self, df: DataFrame, controls: list[str] | None, controls_dir: str | None,
                 topics: list[str] | None, whole: WholeSnapshot | None) -> WriteSummary:
        """The control rows go to ``controls_dir`` as one document, once every table is committed, so a snapshot
        resumed after a kill reads either every chunk again or none."""
        found: list[str] = []
        summary = self.commit(self._staged(df, "snapshot"), "snapshot", found, snapshot=whole)
        if controls_dir and found:
            StateStore(controls_dir).write_json(DELTA_CONTROLS, [json.loads(value) for value in found])
        if controls is not None:
            controls.extend(found)
        return summary

    def batch(self, df: DataFrame, batch_id: int, controls: list[str] | None, ordered_partitions: bool,
              topics: Callable[[], list[str]] | None) -> WriteSummary:
        """An idempotent commit: Delta's transaction identifiers (the query's id, the batch id) skip a replay."""
        if self._app is None:
            self._app = stream_app_id(self.options.get("cdckit.checkpoint.location", "cdckit-checkpoint"))
        label = f"stream-{batch_id:012d}"
        return self.commit(self._staged(df, label), label, controls, txn=(self._app, batch_id))

    def _plan(self, topic: str, files: list[dict[str, Any]], label: str) -> _Plan:
        from pyspark.sql.pandas.types import from_arrow_type

        where = "Delta table {path} (source table {table})"
        choices = (f"Choices: change the column back at the source; or move the table's folder out of "
                   f"{self.location} (it stays readable) so the next run starts a new table with the new structure. "
                   f"Nothing of the batch ({label}) was committed and the stream resumes from it.")
        batch = RowStructure(topic)
        for staged in sorted(files, key=lambda s: s["position"] or []):
            batch.evolve(staged, where.format(path=table_path(self.location, CHANGES, topic),
                                              table=staged["table"] or topic), choices)
        columns = {name: from_arrow_type(arrow, prefer_timestamp_ntz=True) for name, arrow in batch.columns.items()}
        key = list(batch.key)
        plan = _Plan(topic, batch.table, key, columns, files, sum(f["rows"] for f in files))
        if self.state and not key:
            raise DeltaSchemaError(
                f"source table {plan.table} has no primary key, so its current-state table cannot be kept: set "
                f"message.key.columns for it, or cdckit.delta.mode=changes. Nothing of the batch ({label}) was "
                f"committed.")
        for kind in ([CHANGES] if self.changes else []) + ([STATE] if self.state else []):
            path = table_path(self.location, kind, topic)
            if not self._exists(path):
                continue
            plan.existing.add(path)
            current = {f.name: f.dataType for f in self.spark.read.format("delta").load(path).schema.fields}
            here = where.format(path=path, table=plan.table)
            statements = plan.alters.setdefault(path, [])
            recorded = self._key(path)
            for column in recorded:
                if column not in columns:
                    raise DeltaSchemaError(f"{here}: key column {column!r} was dropped at the source; rows without "
                                           f"it cannot be matched to earlier ones. {choices}")
            if kind == STATE and recorded and recorded != key:
                raise DeltaSchemaError(f"{here}: the key changed from {', '.join(recorded)} to {', '.join(key)}; "
                                       f"the state table is kept by its key. {choices}")
            added = [name for name in columns if name not in current]
            if added:
                statements.append(f"ALTER TABLE {_table(path)} ADD COLUMNS ("
                                  + ", ".join(f"{_quote(n)} {columns[n].simpleString()}" for n in added) + ")")
                if kind == CHANGES or not self.changes:
                    plan.changes.extend(f"added column {n} {columns[n].simpleString()}" for n in added)
            widened = []
            for name, new in columns.items():
                old = current.get(name)
                if old is None or old == new:
                    continue
                wider = widen(old, new)
                if wider is None:
                    raise DeltaSchemaError(
                        f"{here}: column {name!r} changed from {old.simpleString()} to {new.simpleString()}, which "
                        f"the Delta column cannot be widened to (cdckit widens integers, floats and decimals with "
                        f"Delta's type widening). {choices}")
                if wider != old:
                    widened.append(f"ALTER TABLE {_table(path)} ALTER COLUMN {_quote(name)} TYPE "
                                   f"{wider.simpleString()}")
                    if kind == CHANGES or not self.changes:
                        plan.changes.append(f"widened column {name} from {old.simpleString()} to "
                                            f"{wider.simpleString()}")
            if widened:
                statements.append(f"ALTER TABLE {_table(path)} SET TBLPROPERTIES ('delta.enableTypeWidening' = "
                                  f"'true')")
                statements.extend(widened)
        return plan

    def _exists(self, path: str) -> bool:
        jvm = self.spark._jvm
        return bool(jvm.io.delta.tables.DeltaTable.isDeltaTable(self.spark._jsparkSession, path))  # type: ignore[union-attr]

    def _key(self, path: str) -> list[str]:
        if path not in self._keys:
            self._keys[path] = self._recorded_key(path)
        return self._keys[path]

    def _recorded_key(self, path: str) -> list[str]:
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {_table(path)} ({_sql_string(KEY_PROPERTY)})").collect()
        value = rows[0]["value"] if rows else ""
        try:
            key = json.loads(value)
        except ValueError:
            return []
        return [str(k) for k in key] if isinstance(key, list) else []

    # -- the driver: commit -------------------------------------------------------------------------------------

    def _create(self, path: str, plan: _Plan, kind: str) -> None:
        """Create a topic's table unless it exists. A ``_delta_log`` folder without a commit is what a job killed
        while creating the table leaves: no table, but one Spark's CREATE takes for existing; it is removed first."""
        if path in plan.existing:
            return
        import pyarrow.fs as pafs

        fs, root = filesystem(self.location)
        log = f"{root}/{path[len(spark_location(self.location)):].strip('/')}/_delta_log"
        if fs.get_file_info(log).type == pafs.FileType.Directory:
            entries = fs.get_file_info(pafs.FileSelector(log, recursive=True))
            if any(e.type == pafs.FileType.File and e.base_name.endswith(".json") for e in entries):
                raise DeltaSinkError(f"{path} has a Delta log that Delta cannot read as a table; look at its "
                                     f"_delta_log folder, or move the folder aside so cdckit creates the table again")
            fs.delete_dir(log)
        extra = CHANGE_COLUMNS if kind == CHANGES else STATE_COLUMNS
        from pyspark.sql.pandas.types import from_arrow_type

        wide = any(staged.get("wide") for staged in plan.files)  # SQL Server's positions (change_rows.meta_columns)
        meta = {name: from_arrow_type(arrow) for name, arrow in meta_columns(wide)}
        columns = [f"{_quote(n)} {t.simpleString()}" for n, t in plan.columns.items()]
        columns += [f"{_quote(n)} {meta[n].simpleString()}" for n in extra]
        partitioned = ""
        if kind == CHANGES and self.partition_columns:
            missing = [c for c in self.partition_columns if c not in plan.columns and c not in extra]
            if missing:
                raise DeltaSinkError(f"cdckit.delta.partition.columns names {', '.join(missing)}, which source table "
                                     f"{plan.table} does not have; partition by columns every captured table has "
                                     f"(such as __op), or leave the setting empty")
            partitioned = f" PARTITIONED BY ({', '.join(_quote(c) for c in self.partition_columns)})"
        properties = {"delta.enableChangeDataFeed": "true", KEY_PROPERTY: json.dumps(plan.key),
                      "cdckit.source.table": plan.table, "cdckit.topic": plan.topic}
        listed = ", ".join(f"{_sql_string(k)} = {_sql_string(v)}" for k, v in properties.items())
        self.spark.sql(f"CREATE TABLE {_table(path)} ({', '.join(columns)}) USING DELTA{partitioned} "
                       f"TBLPROPERTIES ({listed})")
        self._keys[path] = list(plan.key)

    def _rows(self, plan: _Plan) -> DataFrame:
        """The batch's rows of a topic, read back from the staged files, in the batch's columns."""
        from pyspark.sql.pandas.types import from_arrow_schema

        by_schema: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for staged in plan.files:
            by_schema[json.dumps(staged["schema"], sort_keys=True)].append(staged)
        frames = []
        for group in by_schema.values():
            structure = RowStructure(plan.topic)
            structure.evolve(group[0], plan.topic, "")
            schema = from_arrow_schema(structure.arrow_schema(), prefer_timestamp_ntz=True)
            frame = self.spark.read.schema(schema).parquet(*(self._spark_file(s["path"]) for s in group))
            present = set(schema.names)
            frames.append(frame.select(
                *(F.col(_quote(n)).cast(t) if n in present else F.lit(None).cast(t).alias(n)
                  for n, t in plan.columns.items()),
                *(F.col(n) for n in CHANGE_COLUMNS)))
        rows = frames[0]
        for frame in frames[1:]:
            rows = rows.unionByName(frame)
        return rows

    def _spark_file(self, path: str) -> str:
        return "s3a://" + path if self.location.startswith(("s3://", "s3a://")) else path

    def _commit(self, plan: _Plan, txn: tuple[str, int] | None, snapshot: WholeSnapshot | None) -> None:
        kinds = ([CHANGES] if self.changes else []) + ([STATE] if self.state else [])
        targets = {}  # each table's schema once created and altered
        for kind in kinds:
            path = table_path(self.location, kind, plan.topic)
            self._create(path, plan, kind)
            for statement in plan.alters.get(path, []):
                self.spark.sql(statement)
            targets[kind] = self.spark.read.format("delta").load(path).schema
        rows = self._rows(plan)
        if self.changes:
            path = table_path(self.location, CHANGES, plan.topic)
            target = targets[CHANGES]
            shaped = rows.select(*(F.col(_quote(f.name)).cast(f.dataType) if f.name in rows.columns
                                   else F.lit(None).cast(f.dataType).alias(f.name) for f in target.fields))
            writer = shaped.write.format("delta")
            if snapshot is not None and snapshot.resumed and plan.topic in snapshot.since:
                writer = writer.mode("overwrite").option("replaceWhere", snapshot.replaced(plan.topic))
            else:
                writer = writer.mode("append")
                if txn is not None:
                    writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
            writer.save(path)
        if self.state:
            self._merge(plan, rows, targets[STATE], txn, whole=snapshot is not None)

    def _merge(self, plan: _Plan, rows: DataFrame, target: T.StructType, txn: tuple[str, int] | None,
               whole: bool) -> None:
        from pyspark.sql.window import Window

        path = table_path(self.location, STATE, plan.topic)
        names = [f.name for f in target.fields]
        latest = rows.withColumn("__rank", F.row_number().over(
            Window.partitionBy(*(F.col(_quote(k)) for k in plan.key))
            .orderBy(*(F.col(p).desc() for p in POSITION))))
        latest = latest.filter("__rank = 1").select(
            F.col("__op"), *(F.col(_quote(f.name)).cast(f.dataType) if f.name in rows.columns
                             else F.lit(None).cast(f.dataType).alias(f.name) for f in target.fields))
        view = f"cdckit_delta_{uuid.uuid4().hex}"
        latest.createOrReplaceTempView(view)
        on = " AND ".join(f"t.{_quote(k)} <=> s.{_quote(k)}" for k in plan.key)
        assignments = ", ".join(f"t.{_quote(n)} = s.{_quote(n)}" for n in names)
        inserted = ", ".join(_quote(n) for n in names)
        values = ", ".join(f"s.{_quote(n)}" for n in names)
        statement = (f"MERGE INTO {_table(path)} t USING {view} s ON {on} "
                     f"WHEN MATCHED AND s.__op = 'd' THEN DELETE "
                     f"WHEN MATCHED THEN UPDATE SET {assignments} "
                     f"WHEN NOT MATCHED AND s.__op <> 'd' THEN INSERT ({inserted}) VALUES ({values})")
        if whole:
            statement += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
        try:
            with self._transaction(txn):
                self.spark.sql(statement)
        finally:
            self.spark.catalog.dropTempView(view)

    def _read_empty(self, topic: str, snapshot: WholeSnapshot) -> None:
        """A table the snapshot read no row of: its earlier attempts' change rows and all its state rows go."""
        if self.changes and snapshot.resumed:
            path = table_path(self.location, CHANGES, topic)
            if self._exists(path):
                self.spark.sql(f"DELETE FROM {_table(path)} WHERE {snapshot.replaced(topic)}")
        if self.state:
            path = table_path(self.location, STATE, topic)
            if self._exists(path):
                self.spark.sql(f"DELETE FROM {_table(path)}")

    @contextmanager
    def _transaction(self, txn: tuple[str, int] | None) -> Iterator[None]:
        """Delta's idempotent DML: a MERGE under an (application id, version) already committed does nothing."""
        if txn is None:
            yield
            return
        self.spark.conf.set(TXN_APP_ID, txn[0])
        self.spark.conf.set(TXN_VERSION, str(txn[1]))
        try:
            yield
        finally:
            self.spark.conf.unset(TXN_APP_ID)
            self.spark.conf.unset(TXN_VERSION)

    def _staged(self, df: DataFrame, label: str) -> list[tuple[str, Any]]:
        """Stage a batch on the executors (``stage_writer``); when a task fails, what the others staged for this
        label is removed before the failure goes on, so a failed job leaves no staging folder behind."""
        try:
            return on_partitions(df, self.stage_writer(label))
        except BaseException:
            import pyarrow.fs as pafs

            fs, root = filesystem(self.location)
            with suppress(OSError):
                topics = [entry.base_name for entry in fs.get_file_info(
                    pafs.FileSelector(f"{root}/{STAGING}", allow_not_found=True))
                    if entry.type == pafs.FileType.Directory]
                self._remove_staging(topics, label, folder_names=True)
            raise

    def _remove_staging(self, staged: Iterable[str], label: str, folder_names: bool = False) -> None:
        """Remove a label's staged files, and the topic's and the lake's staging folders once empty.
        ``staged``: the topics; ``folder_names``: given as their folders' names already."""
        import pyarrow.fs as pafs

        fs, root = filesystem(self.location)
        for topic in staged:
            folder = f"{root}/{STAGING}/{topic}/{label}" if folder_names else _staging(root, topic, label)
            fs.delete_dir_contents(folder, missing_dir_ok=True)
            with suppress(FileNotFoundError, OSError):
                fs.delete_dir(folder)
            parent = folder.rsplit("/", 1)[0]
            with suppress(FileNotFoundError, OSError):
                if not fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
                    fs.delete_dir(parent)
        with suppress(FileNotFoundError, OSError):
            if not fs.get_file_info(pafs.FileSelector(f"{root}/{STAGING}", allow_not_found=True)):
                fs.delete_dir(f"{root}/{STAGING}")


def stream_app_id(checkpoint: str) -> str:
    """The stream's Delta application id: Spark's query id, kept in the stream checkpoint's ``metadata`` (so a new
    checkpoint, whose batch ids start again at 0, is a new application and none of its batches is skipped)."""
    from cdckit.spark.compat import STREAM_CHECKPOINT

    text = StateStore(checkpoint).read_text(f"{STREAM_CHECKPOINT}/metadata")
    if not text:
        raise DeltaSinkError(f"{checkpoint}/{STREAM_CHECKPOINT}/metadata is missing: the stream's query id names its "
                             f"Delta transactions")
    return "cdckit-" + str(json.loads(text.splitlines()[0])["id"])
