"""cdckit against Debezium 2.5.2's PostgreSQL connector on the corpus of ``cdckit_lab.parity_corpus``.

One comparison, for one settings profile: the corpus is created in a fresh database; cdckit takes its snapshot
(its slot then holds everything after); Debezium 2.5.2 (its embedded engine, from Maven Central) snapshots the
same tables and, once streaming, the corpus's changes are made; Debezium stops when the sentinel's change reached
it, and cdckit streams to the same point. Both write every record as text (Debezium through Kafka Connect's
JsonConverter into a file, cdckit through its files sink), and the texts are compared per topic:

- snapshot reads matched by key (in order where a table has no key), changes and tombstones in commit order;
- only positions and clocks are masked (``lsn``, ``txId``, ``sequence``, ``ts_ms`` and transaction ids);
- a table cdckit refuses counts every Debezium record of it as a difference.

``python -m cdckit_lab.parity [profile ...]`` runs it on an embedded PostgreSQL and prints the match per topic.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
from psycopg2 import sql

from cdckit.config import validate
from cdckit.config.properties import POSTGRES_CONNECTOR
from cdckit.errors import CdcKitError
from cdckit_lab.debezium import server as dbz
from cdckit_lab.debezium.runtime import FORMAT_VERSION, DebeziumServerError
from cdckit_lab.parity_corpus import PREFIX, PROFILES, SENTINEL_TOPIC, SETUP, TABLE_SETTINGS, TABLES, Profile, Table

Record = tuple[str | None, str | None]  # key text, value text (None: a tombstone's value, or no key)

# Also the fields ExtractNewRecordState's add.fields copies (``__lsn``, ``__source_ts_ms``, ``__id``, ...).
_VOLATILE = re.compile(r'"((?:__\w*?)?(?:ts_ms|txId|lsn))":\d+|"((?:__)?sequence)":"(?:[^"\\]|\\.)*"'
                       r'|"((?:__)?id)":"\d+:\d+"')
_CONVERTER_FORMAT = {"key.converter.schemas.enable": "debezium.format.key.schemas.enable",
                     "value.converter.schemas.enable": "debezium.format.value.schemas.enable"}


def masked(text: str | None) -> str | None:
    """The text with positions and clocks replaced by 0."""
    if text is None:
        return None
    return _VOLATILE.sub(lambda m: f'"{m.group(1) or m.group(2) or m.group(3)}":0', text)


def payload(value: str | None) -> dict[str, Any] | None:
    """The payload of a value text, with or without its schema."""
    if value is None:
        return None
    document = json.loads(value)
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        document = document["payload"]
    return document if isinstance(document, dict) else None


def op(value: str | None) -> str:
    """The record's operation: an envelope's ``op``, the ``__op`` ExtractNewRecordState adds (add.fields=op), or a
    transaction record's status."""
    found = payload(value)
    if found is None:
        return "tombstone"
    return str(found.get("op", found.get("__op", found.get("status", "?"))))


@dataclass
class TopicResult:
    topic: str
    debezium: int = 0
    cdckit: int = 0
    identical: int = 0
    differences: list[tuple[str, str]] = field(default_factory=list)  # (what, where) of each
    refused: str = ""

    @property
    def compared(self) -> int:
        return max(self.debezium, self.cdckit)


@dataclass
class Comparison:
    profile: str
    topics: dict[str, TopicResult] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(topic.compared for topic in self.topics.values())

    @property
    def identical(self) -> int:
        return sum(topic.identical for topic in self.topics.values())

    def summary(self) -> str:
        rate = 100.0 * self.identical / self.records if self.records else 0.0
        return f"{self.profile}: {self.identical} of {self.records} records identical ({rate:.1f}%)"

    def report(self, examples: int = 2) -> str:
        lines = [self.summary()]
        for name in sorted(self.topics):
            topic = self.topics[name]
            state = "refused: " + topic.refused if topic.refused else f"{topic.identical}/{topic.compared}"
            lines.append(f"  {name}: Debezium {topic.debezium}, cdckit {topic.cdckit}, identical {state}")
            for what, where in topic.differences[:examples]:
                lines.append(f"    {what}\n      {where}")
        return "\n".join(lines)


def where(theirs: str | None, ours: str | None, context: int = 90) -> str:
    """Where two texts first differ, with some context on each side."""
    a, b = theirs or "null", ours or "null"
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return (f"Debezium ...{a[max(0, at - context):at + context]}...\n"
            f"      cdckit   ...{b[max(0, at - context):at + context]}...")


def compare_topic(topic: str, theirs: Sequence[Record], ours: Sequence[Record]) -> TopicResult:
    """Snapshot reads matched by key (in order when keys are missing or repeat), the rest in order."""
    result = TopicResult(topic, len(theirs), len(ours))
    snap_theirs = [r for r in theirs if op(r[1]) == "r"]
    snap_ours = [r for r in ours if op(r[1]) == "r"]
    rest_theirs = [r for r in theirs if op(r[1]) != "r"]
    rest_ours = [r for r in ours if op(r[1]) != "r"]
    pairs: list[tuple[str, Record | None, Record | None]] = []
    keys_theirs = [masked(r[0]) for r in snap_theirs]
    keys_ours = [masked(r[0]) for r in snap_ours]
    by_key = (None not in keys_theirs and len(set(keys_theirs)) == len(keys_theirs)
              and len(set(keys_ours)) == len(keys_ours))
    if by_key:
        mine = {masked(r[0]): r for r in snap_ours}
        pairs += [(f"snapshot key {r[0]}", r, mine.pop(masked(r[0]), None)) for r in snap_theirs]
        pairs += [(f"snapshot key {r[0]} (cdckit only)", None, r) for r in mine.values()]
    else:
        pairs += _in_order("snapshot", snap_theirs, snap_ours)
    pairs += _in_order("change", rest_theirs, rest_ours)
    for what, their, our in pairs:
        if their is not None and our is not None and masked(their[0]) == masked(our[0]) \
                and masked(their[1]) == masked(our[1]):
            result.identical += 1
        else:
            if their is None or our is None:
                shown = their or our
                side = "Debezium only" if our is None else "cdckit only"
                result.differences.append((f"{what}: {side}", (shown[1] or "tombstone")[-400:] if shown else ""))
            elif masked(their[0]) != masked(our[0]):
                result.differences.append((f"{what}: keys differ", where(masked(their[0]), masked(our[0]))))
            else:
                result.differences.append((f"{what} ({op(their[1])})", where(masked(their[1]), masked(our[1]))))
    return result


def _in_order(what: str, theirs: Sequence[Record], ours: Sequence[Record]
              ) -> list[tuple[str, Record | None, Record | None]]:
    count = max(len(theirs), len(ours))
    return [(f"{what} #{i + 1}", theirs[i] if i < len(theirs) else None, ours[i] if i < len(ours) else None)
            for i in range(count)]


# -- reading both outputs -----------------------------------------------------------------------------------------


def debezium_records(path: Path) -> dict[str, list[Record]]:
    """The runner's file sink, per topic in the order written."""
    found: dict[str, list[Record]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").split("\n")[:-1]:  # whole lines only; U+2028 is text
            record = json.loads(line)
            found.setdefault(record["topic"], []).append((record["key"], record["value"]))
    return found


def cdckit_records(output: Path) -> dict[str, list[Record]]:
    """The files sink's records per topic, exactly as written: snapshot files first, then the stream's."""
    decoder = json.JSONDecoder()
    found: dict[str, list[Record]] = {}
    for folder in sorted(p for p in output.iterdir() if p.is_dir()) if output.exists() else ():
        paths = sorted(folder.glob("snapshot-*.jsonl")) + sorted(folder.glob("stream-*.jsonl"))
        for path in paths:
            for line in path.read_text(encoding="utf-8").split("\n")[:-1]:  # not splitlines(): U+2028 is text
                # '{"topic":<string>,"key":<key JSON>,"value":<value JSON>,"headers":[...]}', each part read whole
                topic, end = decoder.raw_decode(line, len('{"topic":'))
                parts: list[str | None] = []
                for name in ("key", "value"):
                    start = end + len(f',"{name}":')
                    _, end = decoder.raw_decode(line, start)
                    parts.append(None if line[start:end] == "null" else line[start:end])
                found.setdefault(topic, []).append((parts[0], parts[1]))
    return found


# -- running both ----------------------------------------------------------------------------------------------


def create_corpus(dsn_properties: Mapping[str, str], tables: Iterable[Table] = TABLES) -> None:
    statements = list(SETUP)
    for table in tables:
        statements += table.ddl
        if table.rows:
            statements.append(f"INSERT INTO public.{table.name} VALUES " + ", ".join(table.rows))
    _execute(dsn_properties, statements)


def apply_changes(dsn_properties: Mapping[str, str], tables: Iterable[Table] = TABLES) -> None:
    """Each change its own transaction, table after table; the sentinel's last."""
    _execute(dsn_properties, [change for table in tables for change in table.changes])


def _execute(dsn_properties: Mapping[str, str], statements: Sequence[str]) -> None:
    with contextlib.closing(dbz.connect(dsn_properties)) as conn, conn.cursor() as cur:
        for statement in statements:
            try:
                cur.execute(statement)
            except psycopg2.Error as error:
                raise RuntimeError(f"corpus statement failed: {statement[:300]}: {error}") from error


def include_list(tables: Iterable[Table]) -> str:
    return ",".join(re.escape(name) for table in tables for name in table.include)


def settings_for(profile: Profile, tables: Iterable[Table]) -> dict[str, str]:
    """The connector settings both captures run with (Debezium's names)."""
    return {"topic.prefix": PREFIX, "table.include.list": include_list(tables), "snapshot.mode": "initial",
            "publication.autocreate.mode": "filtered", **TABLE_SETTINGS, **profile.settings}


def run_debezium_to_file(dsn_properties: Mapping[str, str], work_dir: Path, settings: Mapping[str, str], *,
                         slot: str, captured: Sequence[Table], changed: Sequence[Table],
                         timeout_s: float = 300.0) -> Path:
    """Debezium 2.5.2 over the ``captured`` tables of the corpus: its snapshot, then the changes of the
    ``changed`` ones; stopped once the sentinel's change and what follows it (its transaction's END) arrived.
    Returns the records file."""
    work_dir.mkdir(parents=True, exist_ok=True)
    output = work_dir / "debezium-records.jsonl"
    output.unlink(missing_ok=True)
    extra = {"debezium.sink.type": "file", "debezium.sink.file.path": str(output)}
    for name, value in settings.items():
        extra[_CONVERTER_FORMAT.get(name, f"debezium.source.{name}")] = value
    properties = dbz.server_properties(dsn_properties, "unused:9092", work_dir, table_include=settings[
        "table.include.list"], snapshot_mode="initial", slot_name=slot, publication_name=slot,
        topic_prefix=PREFIX, extra=extra)
    # As a Debezium user must for a table captured through its partitioned root: a publication that publishes
    # via the root (Debezium's filtered mode then sets its tables and keeps that).
    names = sql.SQL(", ").join(sql.Identifier(*name.split(".")) for t in captured for name in t.include)
    with contextlib.closing(dbz.connect(dsn_properties)) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish_via_partition_root = true)").format(
            sql.Identifier(slot), names))
    server = dbz.DebeziumServer(work_dir, properties, version=FORMAT_VERSION)
    server.start()
    deadline = time.monotonic() + timeout_s
    try:
        def wait(done: Any, what: str) -> None:
            while not done():
                server.check_alive()
                if time.monotonic() > deadline:
                    raise DebeziumServerError(f"Debezium 2.5.2: {what} within {timeout_s:.0f}s; log "
                                                  f"{server.log_path}:\n{server.log_tail()}")
                time.sleep(0.1)

        wait(lambda: dbz.slot_active(dsn_properties, slot), f"slot {slot} not active")
        apply_changes(dsn_properties, changed)
        wait(lambda: any(op(value) == "c" for _, value in debezium_records(output).get(SENTINEL_TOPIC, [])),
             "the sentinel's change not written")
        size = -1
        while size != output.stat().st_size:  # what follows the sentinel (its END record) is written promptly
            size = output.stat().st_size
            time.sleep(1.0)
    finally:
        server.stop()
        dbz.drop_slot(dsn_properties, slot, slot)
    return output


def compare(spark: Any, dsn_properties: Mapping[str, str], work_dir: Path, profile: Profile | str, *,
            slot_suffix: str = "parity", tables: Sequence[Table] = TABLES) -> Comparison:
    """One comparison on a database that holds the corpus as ``create_corpus`` made it (and nothing of it
    changed yet)."""
    from cdckit.dialect.postgres.catalog import discover_tables
    from cdckit.dialect.postgres.connection import connect
    from cdckit.formats.debezium.envelope import TableFormat, format_settings
    from cdckit.pipelines.dispatch import run_snapshot, run_stream

    profile = PROFILES[profile] if isinstance(profile, str) else profile
    result = Comparison(profile.name)
    changed, tables = tables, [t for t in tables if not t.profiles or profile.name in t.profiles]
    def config_for(chosen: Sequence[Table]) -> Any:
        return validate({"connector.class": POSTGRES_CONNECTOR, **dsn_properties, **settings_for(profile, chosen),
                         "slot.name": f"cdckit_{slot_suffix}", "publication.name": f"cdckit_{slot_suffix}",
                         "cdckit.output.path": str(work_dir / "cdckit-out"),
                         "cdckit.checkpoint.location": str(work_dir / "cdckit-checkpoint")})

    kept = []
    for table in tables:  # a table cdckit refuses is left out, and all its records counted as differences
        try:
            if table.name in os.environ.get("CDCKIT_PARITY_SKIP", "").split(","):
                raise CdcKitError("left out by CDCKIT_PARITY_SKIP")
            options = config_for([table]).as_properties(include_secrets=True)
            with contextlib.closing(connect(options)) as conn:
                settings = format_settings(options)
                for info in discover_tables(conn, options):
                    TableFormat(info, settings)
            kept.append(table)
        except CdcKitError as error:
            for name in table.include:
                topic = f"{PREFIX}.{name}"
                result.topics[topic] = TopicResult(topic, refused=str(error).splitlines()[0][:300])
    config = config_for(kept)
    run_snapshot(spark, config)
    records_file = run_debezium_to_file(dsn_properties, work_dir / "debezium", settings_for(profile, tables),
                                        slot=f"dbz_{slot_suffix}", captured=tables, changed=changed)
    run_stream(spark, config)
    theirs = debezium_records(records_file)
    ours = cdckit_records(Path(config.str("cdckit.output.path")))
    for topic in sorted(set(theirs) | set(ours)):
        if topic in result.topics:  # refused
            result.topics[topic].debezium = len(theirs.get(topic, []))
            continue
        result.topics[topic] = compare_topic(topic, theirs.get(topic, []), ours.get(topic, []))
    return result


@contextlib.contextmanager
def _postgres(root: Path) -> Iterator[Any]:
    from cdckit_lab.embedded_postgres import EmbeddedPostgres

    pg = EmbeddedPostgres(root / "pg", password=secrets.token_urlsafe(18)).start()
    try:
        yield pg
    finally:
        pg.stop()


def main(argv: Sequence[str] = ()) -> int:
    from cdckit.spark.session import get_spark

    names = list(argv) or list(PROFILES)
    unknown = [name for name in names if name not in PROFILES]
    if unknown:
        print(f"unknown profile(s) {', '.join(unknown)}; choose from {', '.join(PROFILES)}", file=sys.stderr)
        return 2
    spark = get_spark()
    results = []
    kept = os.environ.get("CDCKIT_PARITY_DIR")  # a folder to keep (logs, both outputs) instead of a temporary one
    with (contextlib.nullcontext(kept) if kept else tempfile.TemporaryDirectory(prefix="cdckit-parity-")) as tmp, \
            _postgres(Path(tmp)) as pg:
        for number, name in enumerate(names):
            database = f"parity{number}"
            pg.create_database(database)
            properties = pg.connector_properties(database)
            create_corpus(properties)
            comparison = compare(spark, properties, Path(tmp) / name, name, slot_suffix=database)
            print(comparison.report(), flush=True)
            results.append(comparison)
    for comparison in results:
        print(comparison.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
