"""One writer per slot and per checkpoint: a job claims both before Spark starts, and a second job is refused.

Two guards, because either can be shared without the other:

* the source's lock (``SourceLock``, from the dialect's pipeline): PostgreSQL, an advisory lock of the slot held on
  a connection of the driver; SQL Server, an application lock (``sp_getapplock``, owner Session) of the checkpoint
  in the first captured database. The server releases it when the job's connection ends, however the job ends.
* the checkpoint's owner file ``<checkpoint>/cdckit.owner`` (a path or s3://): the job's host, pid, command, when it
  started, and a heartbeat a driver thread refreshes every ``HEARTBEAT_SECONDS``. Written, then read back
  ``SETTLE_SECONDS`` later, so that of two jobs started at once the one whose file was overwritten stops. A
  checkpoint on a file system of this machine's own (ext4, XFS, Btrfs, tmpfs) is also locked with a POSIX lock of
  ``<checkpoint>/cdckit.owner.lock`` while the job runs: the kernel lets one process have it (and frees it however
  the process ends), so there the owner file needs no settling. A fresh heartbeat of another job
  refuses the start; one older than ``STALE_SECONDS`` is a job that ended without saying so (killed, its machine
  lost) and is taken over, with a log line. When the job ends, the file records that it stopped, when, and why
  (``cdckit status`` shows it).

The claim is per process and per checkpoint (``claim``, ``held``); ``cdckit.pipelines.dispatch`` takes it when the
CLI has not, and releases it when the job ends.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from cdckit.config import Config
from cdckit.errors import CdcKitError
from cdckit.fsutil import LOCAL_FILE_SYSTEMS, file_system_type, private_folder
from cdckit.state import StateStore, join

OWNER_FILE = "cdckit.owner"
LOCK_FILE = "cdckit.owner.lock"
HEARTBEAT_SECONDS = 5.0
STALE_SECONDS = 3 * HEARTBEAT_SECONDS
SETTLE_SECONDS = 0.3  # between writing the owner file and reading it back (two jobs starting at once)
log = logging.getLogger("cdckit")


class JobAlreadyRunning(CdcKitError):
    """Another job holds the slot's (or the checkpoint's) lock, or the checkpoint's owner file is fresh."""


class SourceLock(Protocol):
    """The source's exclusive lock of a job (``Pipeline.lock_source``)."""

    identity: str  # what the lock guards, the same for every job that would conflict (the slot's name)

    def keep(self) -> None:
        """Called every heartbeat: keep the lock's connection alive (take the lock again if it was lost)."""

    def close(self) -> None:
        """Release the lock (close its connection)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def when(ms: Any) -> str:
    """Epoch milliseconds as ``2026-11-28 17:52:03 UTC``."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(ms) / 1000))
    except (TypeError, ValueError):
        return "an unknown time"


def describe_owner(owner: dict[str, Any]) -> str:
    """``cdckit stream on host pid 123, running since ... (heartbeat 2 s ago)``."""
    age = (now_ms() - int(owner.get("heartbeat_ms") or 0)) / 1000
    return (f"cdckit {owner.get('command', 'job')} on {owner.get('host')} pid {owner.get('pid')}, running since "
            f"{when(owner.get('started_ms'))} (heartbeat {age:.0f} s ago)")


def read_owner(location: str) -> dict[str, Any] | None:
    try:
        document = StateStore(location).read_json(OWNER_FILE)
    except ValueError:  # a torn or foreign file: no owner
        return None
    return document if isinstance(document, dict) else None


def fresh(owner: dict[str, Any] | None) -> bool:
    """Whether ``owner`` records a running job whose heartbeat is recent."""
    return bool(owner and owner.get("running")
                and now_ms() - int(owner.get("heartbeat_ms") or 0) <= STALE_SECONDS * 1000)


def local_lock(location: str) -> int | None:
    """Lock the checkpoint ``location`` for this process where it is a folder on a file system of this machine's own
    (``fsutil.LOCAL_FILE_SYSTEMS``): the open descriptor of its ``LOCK_FILE`` under an exclusive POSIX lock, or None
    where the location is not such a folder (S3, NFS, EFS, FUSE) or the platform has no such lock. Raises
    ``BlockingIOError`` when another process holds the lock."""
    if "://" in location or not hasattr(os, "O_CLOEXEC"):
        return None
    try:
        import fcntl
    except ImportError:
        return None
    folder = private_folder(location)
    if file_system_type(folder) not in LOCAL_FILE_SYSTEMS:
        return None
    descriptor = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(descriptor)
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            raise BlockingIOError(exc.errno, "held by another process") from None
        return None  # a file system that takes no lock after all: the owner file's settling guards it
    return descriptor


class Claim:
    """This process's claim of a checkpoint (and the source's lock): the owner file and its heartbeat thread."""

    def __init__(self, config: Config, command: str, source_lock: SourceLock | None) -> None:
        self.location = config.str("cdckit.checkpoint.location")
        self.store = StateStore(self.location)
        self.source_lock = source_lock
        self.token = uuid.uuid4().hex
        self.document: dict[str, Any] = {"running": True, "command": command, "host": socket.gethostname(),
                                         "pid": os.getpid(), "started_ms": now_ms(), "token": self.token}
        # what the source's lock guards (the slot; SQL Server: the checkpoint in the first database): a fresh owner
        # file of the same lock, now that this job holds the lock, is a job that ended without saying so
        self.document["lock"] = getattr(source_lock, "identity", None)
        if not config.is_sqlserver:
            self.document["slot"] = config.str("slot.name")
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._written: float | None = None  # when begin wrote the owner file (time.monotonic)
        self._confirmed = False
        self._lock: int | None = None  # the descriptor of the checkpoint's local lock (local_lock), while held
        self.lost = False

    def begin(self) -> None:
        """Lock the checkpoint where its file system allows (``local_lock``), and write the owner file unless a fresh
        one of another job is there; start the heartbeat. ``confirm`` reads the file back at least
        ``SETTLE_SECONDS`` later where no local lock is held, in case another job wrote it at the same time: the
        time between the two may be spent starting Spark."""
        try:
            self._lock = local_lock(self.location)
        except BlockingIOError:
            found = read_owner(self.location)
            if found is None or not found.get("running"):  # it has locked, and not yet written its own
                raise JobAlreadyRunning(
                    f"checkpoint {self.location} is in use by another cdckit job on this machine (it holds "
                    f"{LOCK_FILE}, and is starting); two jobs on one checkpoint would break each other. Stop that "
                    f"job first, or give this one another cdckit.checkpoint.location") from None
            raise self._refusal(found) from None
        self.document["local_lock"] = self._lock is not None
        try:
            found = read_owner(self.location)
            # a fresh owner file of a job that held this checkpoint's local lock, which is free now: it ended
            # without saying so (as a job holding the source's lock, below)
            freed = self._lock is not None and bool(found and found.get("local_lock"))
            if (fresh(found) and found is not None and found.get("token") != self.token and not freed
                    and not (self.document["lock"] and found.get("lock") == self.document["lock"])):
                raise self._refusal(found)
            if found is not None and found.get("running"):
                log.warning("taking over checkpoint %s from %s: it ended without saying so (killed, or its machine "
                            "lost): %s", self.location, describe_owner(found),
                            "its heartbeat stopped" if not fresh(found)
                            else "the checkpoint's lock it held is free" if freed
                            else "the source's lock it held is free")
            self._write()
        except BaseException:
            self._unlock()
            raise
        self._written = time.monotonic()
        # the heartbeat rewrites the file only while it holds this job's token (another job's makes it ``lost``)
        self._thread = threading.Thread(target=self._beat, daemon=True, name="cdckit-owner-heartbeat")
        self._thread.start()

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases its POSIX lock
            self._lock = None

    def confirm(self) -> None:
        """Read the owner file back once ``SETTLE_SECONDS`` have passed since ``begin`` wrote it (waiting for what is
        left of them): another job's there refuses this one. Done once."""
        if self._confirmed:
            return
        if self._written is None:
            raise RuntimeError("Claim.confirm before Claim.begin")
        left = SETTLE_SECONDS - (time.monotonic() - self._written)
        if left > 0 and self._lock is None:  # a local lock lets no other job write meanwhile
            time.sleep(left)
        found = read_owner(self.location)
        if self.lost or (found is not None and found.get("token") != self.token):
            raise self._refusal(found or self.document)
        self._confirmed = True

    def _refusal(self, owner: dict[str, Any]) -> JobAlreadyRunning:
        return JobAlreadyRunning(
            f"checkpoint {self.location} is in use by {describe_owner(owner)}; two jobs on one checkpoint would "
            f"break each other. Stop that job first (SIGTERM, or Ctrl-C where it runs), or give this one another "
            f"cdckit.checkpoint.location; a job that was killed is taken over {STALE_SECONDS:.0f} s after its last "
            f"heartbeat")

    def _write(self) -> None:
        self.document["heartbeat_ms"] = now_ms()
        self.store.write_json(OWNER_FILE, self.document)

    def _beat(self) -> None:
        while not self._done.wait(HEARTBEAT_SECONDS):
            try:
                found = read_owner(self.location)
                if found is not None and found.get("token") != self.token:
                    if not self.lost:
                        log.error("checkpoint %s was taken over by %s (this job's heartbeat was late by more than "
                                  "%.0f s): stop one of the two jobs", self.location, describe_owner(found),
                                  STALE_SECONDS)
                    self.lost = True
                else:
                    self._write()
            except Exception as exc:  # S3 or the disk failing for a moment: tried again at the next heartbeat
                log.warning("refreshing %s failed: %s", join(self.location, OWNER_FILE), exc)
            if self.source_lock is not None:
                try:
                    self.source_lock.keep()
                except Exception as exc:
                    log.warning("keeping the source's job lock failed: %s", exc)

    def abandon(self) -> None:
        """Give the claim up without touching the owner file (another job's, as ``confirm`` found): stop the
        heartbeat and release the locks."""
        self._stop_heartbeat()
        self._release_locks()

    def release(self, stopped_by: str | None = None, outcome: str = "finished") -> None:
        """Stop the heartbeat, record the stop in the owner file (unless another job took the checkpoint over), and
        release the locks."""
        self._stop_heartbeat()
        try:
            found = read_owner(self.location)
            if found is None or found.get("token") == self.token:
                self.document.update({"running": False, "stopped_ms": now_ms(), "stopped_by": stopped_by,
                                      "outcome": outcome})
                self.store.write_json(OWNER_FILE, self.document)
        except Exception as exc:
            log.warning("recording the job's stop in %s failed: %s", join(self.location, OWNER_FILE), exc)
        finally:
            self._release_locks()

    def _stop_heartbeat(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(HEARTBEAT_SECONDS * 2)

    def _release_locks(self) -> None:
        """The source's lock, the checkpoint's local lock, and this process's record of the claim."""
        if self.source_lock is not None:
            self.source_lock.close()
        self._unlock()
        _held.pop(self.location, None)


_held: dict[str, Claim] = {}


def held(config: Config) -> Claim | None:
    """This process's claim of the configuration's checkpoint, if it has one."""
    return _held.get(config.str("cdckit.checkpoint.location"))


def claim(config: Config, command: str, lock_source: Callable[[Config, str], SourceLock | None],
          confirm: bool = True) -> Claim:
    """Claim the source's lock (``lock_source``: the dialect's, raising ``JobAlreadyRunning`` naming the holder)
    and the checkpoint; ``JobAlreadyRunning`` when another job has either. ``confirm=False`` leaves the owner file's
    read-back (``Claim.confirm``) to the next call, so that starting Spark in between overlaps its settling time;
    a claim this process already holds is confirmed and returned."""
    job = held(config)
    if job is None:
        source_lock = lock_source(config, command)
        job = Claim(config, command, source_lock)
        try:
            job.begin()
        except BaseException:
            if source_lock is not None:
                source_lock.close()
            raise
        _held[job.location] = job
    if confirm:
        try:
            job.confirm()
        except BaseException:
            job.abandon()
            raise
    return job
