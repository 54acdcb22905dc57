"""``cdckit status connector.json``: what a job's checkpoint and its source say, without Spark.

Reads the checkpoint (the snapshot's state, the stream's last committed batch and its offsets, and the status file
the running job rewrites after every batch and every idle trigger, ``status.json``) and asks the source about the
slot (PostgreSQL) or the capture job (SQL Server). A job counts as running while its status file says so and is
fresh: the job rewrites it after every batch and every idle report (``spark.sql.streaming.noDataProgressEventInterval``,
1 s unless the job sets it). One older than ``STALE_SECONDS`` belongs to a job that was stopped without saying so
(killed).

The checkpoint's owner file (``cdckit.pipelines.ownership``) says more: which job holds the checkpoint now (its
heartbeat is refreshed every few seconds, whatever a batch takes), and how the last one ended: stopped by SIGTERM or
SIGINT, finished, or failed, and when.
"""

from __future__ import annotations

import json
import time
from contextlib import suppress
from typing import Any

from cdckit.config import Config
from cdckit.observe.publish import STATUS_FILE
from cdckit.pipelines.base import STATE, Pipeline
from cdckit.pipelines.ownership import fresh, read_owner, when
from cdckit.state import StateStore

STALE_SECONDS = 60


def job_status(config: Config, pipeline: Pipeline) -> dict[str, Any]:
    """Everything ``cdckit status`` shows, as data; ``pipeline``: the source dialect's (its ``source_status``)."""
    checkpoint = config.str("cdckit.checkpoint.location")
    store = StateStore(checkpoint)
    now_ms = int(time.time() * 1000)
    found: dict[str, Any] = {"checkpoint": checkpoint, "topic.prefix": config.str("topic.prefix")}
    snapshot = store.read_json(STATE)
    found["snapshot"] = snapshot if isinstance(snapshot, dict) else None
    found["stream"] = _last_batch(store)
    report = store.read_json(STATUS_FILE)
    if isinstance(report, dict):
        age = (now_ms - int(report.get("at_ms", 0))) / 1000
        report["age_seconds"] = round(age, 1)
        report["alive"] = bool(report.get("running")) and age <= STALE_SECONDS
    found["job"] = report if isinstance(report, dict) else None
    owner = read_owner(checkpoint)
    if owner is not None:
        owner.pop("token", None)
        owner["alive"] = fresh(owner)
    found["owner"] = owner
    try:
        found["source"] = pipeline.source_status(config, found["snapshot"], found["stream"])
    except Exception as exc:  # the rest of the status is still worth showing
        found["source"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    return found


def _last_batch(store: StateStore) -> dict[str, Any] | None:
    """The stream's last committed batch (Spark's ``commits/<id>``) and its end offsets (``offsets/<id>``)."""
    commits = sorted((int(n) for n in store.names("stream/commits") if n.isdigit()), reverse=True)
    if not commits:
        return None
    batch = commits[0]
    text = store.read_text(f"stream/offsets/{batch}") or ""
    lines = text.splitlines()
    offsets = []
    for line in lines[2:]:
        with suppress(ValueError):
            offsets.append(json.loads(line))
    return {"batch": batch, "offsets": offsets[0] if len(offsets) == 1 else offsets,
            "committed_ms": store.modified_ms(f"stream/commits/{batch}")}


def render(status: dict[str, Any], console: Any) -> None:
    """``job_status`` for a person."""
    def line(text: str) -> None:
        console.print(text, highlight=False, markup=False, soft_wrap=True)

    line(f"checkpoint {status['checkpoint']} (topic.prefix {status['topic.prefix']})")
    job = status.get("job")
    owner = status.get("owner")
    if owner is not None:  # what the owner file says, from its heartbeat rather than the last batch's report
        port = (f", metrics on port {job['metrics_port']}" if owner.get("alive") and job and job.get("metrics_port")
                else "")
        line(f"job: {owner_line(owner)}{port}")
    elif job is None:
        line("job: no status recorded (no job has run with this checkpoint since metrics were added)")
    else:
        where = f"on {job.get('host')} pid {job.get('pid')}"
        port = f", metrics on port {job['metrics_port']}" if job.get("metrics_port") else ""
        if job.get("alive"):
            line(f"job: running {where}{port}; last report {job['age_seconds']} s ago")
        elif job.get("running"):
            line(f"job: not running: its last report ({job['age_seconds']} s ago, {where}) said running, so it was "
                 f"stopped without finishing (killed, or its machine lost)")
        else:
            line(f"job: not running (stopped {job['age_seconds']} s ago, {where})")
    snapshot = status.get("snapshot")
    if snapshot is None:
        line("snapshot: none recorded")
    else:
        rows = snapshot.get("rows_per_topic") or {}
        line(f"snapshot: {snapshot.get('status')}" + (f", {sum(rows.values())} rows from "
                                                       f"{len(snapshot.get('tables') or [])} tables" if rows else ""))
    stream = status.get("stream")
    if stream is None:
        line("stream: no batch committed yet")
    else:
        ago = (time.time() * 1000 - stream["committed_ms"]) / 1000 if stream.get("committed_ms") else None
        offsets = stream["offsets"]
        position = ({k: v for k, v in offsets.items() if k not in ("incremental", "window")}
                    if isinstance(offsets, dict) else offsets)
        line(f"stream: last committed batch {stream['batch']}" + (f", {ago:.0f} s ago" if ago is not None else "")
             + f"; position {json.dumps(position, sort_keys=True)}")
        for text in incremental_lines(offsets if isinstance(offsets, dict) else {}):
            line(f"  {text}")
    if job is not None:
        for database, values in (job.get("streaming") or {}).items():
            lag = values.get("MilliSecondsBehindSource")
            line(f"  {database or 'database'}: lag {lag} ms, {values.get('TotalNumberOfEventsSeen')} events "
                 f"(c {values.get('TotalNumberOfCreateEventsSeen')}, u {values.get('TotalNumberOfUpdateEventsSeen')}, "
                 f"d {values.get('TotalNumberOfDeleteEventsSeen')}), "
                 f"{values.get('NumberOfCommittedTransactions')} transactions, last event "
                 f"{values.get('LastEvent') or 'none'} (counts since the job started)")
        batch = job.get("batch") or {}
        if batch:
            line(f"  last batch {batch.get('id')}: {batch.get('records')} records"
                 + (f", {batch['duration_ms']} ms" if "duration_ms" in batch else "")
                 + (f", {batch['records_per_second']:.0f} records/s" if "records_per_second" in batch else ""))
    source = status.get("source") or {}
    if "error" in source:
        line(f"source: not reachable ({source['error']})")
    elif "slot" in source:
        if not source.get("exists"):
            line(f"source: replication slot '{source['slot']}' does not exist")
        else:
            retained = source.get("retained_wal_bytes")
            line(f"source: slot '{source['slot']}' wal_status {source['wal_status']}, confirmed "
                 f"{source['confirmed_flush_lsn']}, restart {source['restart_lsn']}, retained WAL "
                 + (f"{retained / 1048576:.1f} MiB" if retained is not None else "unknown"))
    else:
        for database, values in source.items():
            latency, margin = values.get("CaptureJobLatencySeconds"), values.get("CleanupMarginSeconds")
            agent = {True: "running", False: "NOT running"}.get(values.get("agent_running"), "unknown")
            line(f"source {database}: agent {agent}, max LSN {values.get('max_lsn')}, capture job latency "
                 + (f"{latency:.0f} s" if latency is not None else "unknown") + ", cleanup margin "
                 + (f"{margin / 3600:.1f} h" if margin is not None else "unknown"))
    now = source.get("estimated_rows") or {}
    if job is not None:
        for database, values in (job.get("snapshot") or {}).items():
            recorded = values.get("EstimatedRows") or {}
            for table, rows in (values.get("RowsScanned") or {}).items():
                if values.get("SnapshotCompleted"):
                    line(f"  snapshot {database}.{table}: {rows} rows read, all")
                    continue
                estimate = recorded.get(table) or now.get(table)  # the estimate when the snapshot started
                line(f"  snapshot {database}.{table}: {rows} rows read"
                     + (f" of about {estimate}" if estimate else ""))


def owner_line(owner: dict[str, Any]) -> str:
    """What the checkpoint's owner file says: running (where, since when), or how and when the last job ended."""
    where = f"on {owner.get('host')} pid {owner.get('pid')}"
    command = f"cdckit {owner.get('command', 'job')}"
    if owner.get("alive"):
        return (f"running {where} ({command} since {when(owner.get('started_ms'))}; heartbeat "
                f"{_ago(owner.get('heartbeat_ms'))})")
    if owner.get("running"):
        return (f"not running: its last heartbeat ({_ago(owner.get('heartbeat_ms'))}, {command} {where}) said "
                f"running, so it was stopped without finishing (killed, or its machine lost)")
    outcome = str(owner.get("outcome"))
    by = f" by {owner.get('stopped_by')}" if outcome == "stopped" and owner.get("stopped_by") else ""
    end = {"finished": ": it had finished", "failed": ": it failed"}.get(outcome, "")
    return (f"not running (stopped{by} at {when(owner.get('stopped_ms'))}, {_ago(owner.get('stopped_ms'))}{end}; "
            f"{command} {where}, started {when(owner.get('started_ms'))})")


def _ago(ms: Any) -> str:
    try:
        return f"{(time.time() * 1000 - int(ms)) / 1000:.0f} s ago"
    except (TypeError, ValueError):
        return "when unknown"


def incremental_lines(offsets: dict[str, Any]) -> list[str]:
    """What the incremental snapshot in a batch's end ``offsets`` stands at (PostgreSQL: one progress; SQL Server:
    one per database), and the chunks that batch read."""
    from cdckit.dialect.incremental import Progress

    found = offsets.get("incremental") or {}
    by_database = found if found and "pending" not in found else {"": found} if found else {}
    lines = []
    for database, document in sorted(by_database.items()):
        progress = Progress.from_offset({"incremental": document})
        where = f" of {database}" if database else ""
        reading = (f"reading {progress.current.qualified_name}" if progress.current is not None
                   else "between tables")
        pending = ", ".join(r.qualified_name for r in progress.pending)
        lines.append(f"incremental snapshot{where}: {'paused, ' if progress.paused else ''}{reading}, "
                     f"{progress.chunks} chunks planned" + (f", next: {pending}" if pending else ""))
    window = offsets.get("window") or {}
    chunks = window.get("chunks") if "chunks" in window else [c for cs in window.values() for c in cs]
    if chunks:
        lines.append(f"the last batch read {len(chunks)} incremental snapshot chunks")
    return lines

