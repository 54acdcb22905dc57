"""What is checked before anything starts: ``cdckit validate`` prints it, and every job runs it first.

The source (connection, server settings, the user's privileges, every captured table readable, the publication and
the slot for PostgreSQL; CDC, the Agent and the capture instances' access for SQL Server), the sink (its location
writable, Kafka reachable, a key for every table whose current state it keeps) and the checkpoint location. Every
check reads; none creates anything, so a job refused here leaves nothing behind (no slot, no publication, no
folder). Each problem is one line that names the fix.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cdckit.config import Config
from cdckit.errors import CdcKitError
from cdckit.formats.debezium.column_mappers import emitted_key_columns, parse_message_key_columns
from cdckit.spark.sinks import sink_class
from cdckit.state import StateStore


@dataclass(frozen=True)
class Check:
    what: str  # source, tables, publication, slot, capture, sink, checkpoint
    detail: str  # what was found, or the problem and its fix
    ok: bool = True


class NotReadyError(CdcKitError):
    """Something a job needs is missing: found before anything started."""

    def __init__(self, failed: Sequence[Check]) -> None:
        self.failed = list(failed)
        if len(self.failed) == 1:
            super().__init__(self.failed[0].detail)
        else:
            lines = "\n".join(f"  - {check.detail}" for check in self.failed)
            super().__init__(f"{len(self.failed)} problems, found before anything started:\n{lines}")


# The captured tables the checks before a job found, handed on to that job (in the same process, once): its
# prepare_source takes them instead of discovering them again, a few catalog queries per table, seconds apart.
_HANDED_ON: dict[str, list[Any]] = {}


def _fingerprint(config: Config) -> str:
    """The configuration as a digest (its secrets included, so that another password is another source; the
    digest is kept in memory only)."""
    text = json.dumps(config.as_properties(include_secrets=True), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def checked_tables(config: Config) -> list[Any] | None:
    """The tables the checks before this job found with this configuration (once), or None: discover them."""
    return _HANDED_ON.pop(_fingerprint(config), None)


def run_checks(config: Config, check_source: Callable[[Config], tuple[list[Check], list[Any]]], *,
               offline: bool = False, hand_on: bool = False) -> list[Check]:
    """Every check, in order (``check_source``: the dialect pipeline's); with ``offline`` none that connects
    anywhere (the source, Kafka, S3). With ``hand_on`` (the checks before a job), the captured tables the source's
    checks found, when they all passed, go to the job (``checked_tables``)."""
    checks: list[Check] = []
    tables: list[Any] = []
    _HANDED_ON.clear()
    if not offline:
        found, tables = check_source(config)
        checks.extend(found)
        if hand_on and all(check.ok for check in found):
            _HANDED_ON[_fingerprint(config)] = list(tables)
    options = config.as_properties(include_secrets=True)
    kind = config.str("cdckit.sink")
    sink_problems = sink_class(options).problems(options, keyless_tables(options, tables), offline)
    checks.extend(Check("sink", problem, ok=False) for problem in sink_problems)
    if not sink_problems:
        checks.append(Check("sink", f"{kind}: {_sink_target(options)}" + (" (not reached: --offline)" if offline
                                                                          and kind in ("kafka", "eventhubs")
                                                                          else "")))
    checkpoint = config.str("cdckit.checkpoint.location")
    store = StateStore(checkpoint)
    problem = None if store.remote and offline else store.write_problem("cdckit.checkpoint.location")
    checks.append(Check("checkpoint", problem, ok=False) if problem else Check("checkpoint", checkpoint))
    return checks


def require_ready(checks: list[Check]) -> list[Check]:
    """Raise ``NotReadyError`` listing the problems when any check failed."""
    failed = [check for check in checks if not check.ok]
    if failed:
        raise NotReadyError(failed)
    return checks


def keyless_tables(options: dict[str, str], tables: Sequence[Any]) -> list[str]:
    """The captured tables whose events would have a null key: no primary key, and no ``message.key.columns``
    entry for them (the key the formats emit: ``emitted_key_columns``)."""
    try:
        keys = parse_message_key_columns(options.get("message.key.columns", ""))
    except ValueError:
        keys = ()  # the configuration's own check reports it
    return [t.qualified_name for t in tables if not emitted_key_columns(keys, t.qualified_name, t.key_columns)]


def _sink_target(options: dict[str, str]) -> str:
    kind = options.get("cdckit.sink", "files")
    if kind == "files":
        return f"{options.get('cdckit.output.path', 'cdckit-output')} writable"
    if kind == "delta":
        return (f"{options.get('cdckit.delta.path') or 'cdckit-delta'} writable "
                f"(cdckit.delta.mode={options.get('cdckit.delta.mode') or 'both'})")
    if kind == "kafka":
        return f"a broker answers at {options.get('kafka.bootstrap.servers')}"
    if kind == "eventhubs":
        return f"namespace {options.get('cdckit.eventhubs.namespace')} answers"
    return "the driver's output"
