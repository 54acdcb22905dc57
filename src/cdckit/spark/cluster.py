"""What a job needs when its executors run on other machines than its driver.

Executors write the files and Delta sinks' files and cdckit's state beside the checkpoint (SQL Server snapshot
chunks), and the driver reads them back; a driver restarted on another node (EMR, Kubernetes) reads the checkpoint
it left. A plain local path would be a different folder on every node, so with a non-local master such a path is
refused at start, unless the user says it is a shared mount (``cdckit.local.paths.shared``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdckit.config.properties import BY_NAME
from cdckit.errors import ConfigurationError

REMOTE_SCHEMES = ("s3://", "s3a://")


def runs_on_one_machine(master: str) -> bool:
    """``local``, ``local[4]``, ``local-cluster[...]`` (one machine by definition) run driver and executors together."""
    return master.startswith("local")


def node_local_paths(options: Mapping[str, str]) -> list[tuple[str, str]]:
    """The (property, path) pairs of this job that executors or a later driver read on whatever node they run."""
    sink = options.get("cdckit.sink", "files")
    used = ["cdckit.checkpoint.location"]
    if sink == "files" or (sink in ("kafka", "eventhubs")
                           and options.get("cdckit.kafka.oversize.handling", "fail") == "dead-letter"):
        used.append("cdckit.output.path")
    if sink == "delta":
        used.append("cdckit.delta.path")
    found = []
    for name in used:
        path = options.get(name) or str(BY_NAME[name].default)
        if not path.startswith(REMOTE_SCHEMES):
            found.append((name, path))
    return found


def check_paths(spark: Any, options: Mapping[str, str]) -> None:
    """Refuse node-local paths when Spark's executors run on other machines (see the module's docstring)."""
    check_paths_for(spark.sparkContext.master, options)


def check_paths_for(master: str, options: Mapping[str, str]) -> None:
    if runs_on_one_machine(master) or options.get("cdckit.local.paths.shared", "false").lower() == "true":
        return
    local = node_local_paths(options)
    if not local:
        return
    listed = ", ".join(f"{name}={path}" for name, path in local)
    raise ConfigurationError([
        f"{listed}: a path on one machine, but Spark runs executors on other machines (master {master}), so each "
        f"node would write to and read from its own disk. Use an s3:// location (checkpoint, delta) or the kafka "
        f"sink, or put the path on a filesystem every node mounts at the same place (NFS, EFS) and set "
        f"cdckit.local.paths.shared=true"])
