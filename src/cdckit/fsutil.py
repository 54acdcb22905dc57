"""The files and folders cdckit itself writes on a local file system (its state, status and offset documents):
readable by their owner only, written whole, never through a symbolic link.

``write_private`` writes a file as ``0600`` through a temporary file ``tempfile.mkstemp`` creates in the target's
folder (``O_CREAT | O_EXCL``, an unpredictable name, so no file or link planted there is opened), then renames it
over the final name: a symbolic link at the final name is replaced, not followed. ``private_folder`` creates the
missing folders of a path as ``0700``. Folders that exist already are left as they are (the checkpoint location may
be shared or mounted by design). Spark's own files (its checkpoint, the sinks' data files) are Spark's.

A rename or a new folder is durable only once the folder holding it is synced (``sync_folder``): ``write_private``
syncs the file's folder after the rename, ``private_folder`` the parent of each folder it creates, so a power cut
after either returns keeps the file or the folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700


def file_mode(text: str | None) -> int:
    """``cdckit.files.mode`` (octal, such as ``600`` or ``640``) as a number: the mode of the files the files sink
    writes (``ValueError`` unless it is octal, within ``777``, and lets the owner read and write)."""
    value = int(str(text or "600").strip(), 8)
    if not 0 <= value <= 0o777 or value & 0o600 != 0o600:
        raise ValueError(f"{text!r}")
    return value


def output_file_mode(options: Mapping[str, str]) -> int:
    """The mode a job's configuration gives the files sink's files (``cdckit.files.mode``, validated at start)."""
    return file_mode(options.get("cdckit.files.mode"))


def folder_mode(mode: int) -> int:
    """The mode of the folders holding files of ``mode``: each class that may read the files may list them."""
    return mode | (mode & 0o444) >> 2


def sync_folder(path: Path | str) -> None:
    """Sync the folder ``path`` itself (``fsync`` of the folder opened ``O_RDONLY | O_DIRECTORY``), so that the
    names renamed into it or created in it since survive a power cut. A platform or file system that syncs no
    folder (Windows; ``EINVAL`` or ``EBADF`` from some network and FUSE file systems, as PostgreSQL's
    ``fsync_fname`` allows) is left as it is."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(descriptor)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(descriptor)


def private_folder(path: Path | str, follow_link: bool = True, mode: int = PRIVATE_FOLDER,
                   unsynced: set[Path] | None = None) -> Path:
    """Create ``path`` and its missing parents, each ``mode`` (``0700``); an existing folder is kept as it is. With
    ``follow_link=False`` a symbolic link at ``path`` itself is refused (``FileExistsError``) instead of used. The
    parent of each folder created is synced once (``sync_folder``), or, given ``unsynced``, added to it for the
    caller to sync."""
    path = Path(path)
    missing: list[Path] = []
    current = path
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile (another process): checked below as any other
            os.mkdir(folder, mode)
            os.chmod(folder, mode)  # exactly: the process's umask may have taken bits the setting gives
    for parent in dict.fromkeys(folder.parent for folder in reversed(missing)):
        if unsynced is None:
            sync_folder(parent)
        else:
            unsynced.add(parent)
    status = os.lstat(path)
    if stat.S_ISLNK(status.st_mode) and not follow_link:
        raise FileExistsError(errno.EEXIST, "a symbolic link stands where cdckit makes a folder; remove it",
                              str(path))
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(path))
    return path


def write_private(path: Path | str, data: bytes) -> None:
    """Replace the file ``path`` whole with ``data``, readable and writable by its owner only (``0600``), through
    an exclusive temporary file of an unpredictable name in the same folder, synced, then renamed over ``path``,
    and the folder synced (the rename survives a power cut)."""
    path = Path(path)
    folder = private_folder(path.parent)
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    sync_folder(folder)


# statfs's f_type of the file systems on a machine's own disks or memory, which no other machine reaches but through
# this one (an NFS export's clients lock through this machine's lock manager): ext2/3/4, XFS, Btrfs, and tmpfs
EXT, XFS, BTRFS, TMPFS = 0xEF53, 0x58465342, 0x9123683E, 0x01021994
DISK_FILE_SYSTEMS = frozenset({EXT, XFS, BTRFS})
LOCAL_FILE_SYSTEMS = DISK_FILE_SYSTEMS | {TMPFS}


def file_system_type(folder: Path | str) -> int | None:
    """The file system type (``statfs``'s ``f_type``) of ``folder``, or None where it cannot be told (not Linux, a
    missing folder)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        found = ctypes.create_string_buffer(512)  # struct statfs (120 bytes on 64-bit Linux), f_type first
        if libc.statfs(os.fsencode(str(folder)), found) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return ctypes.c_long.from_buffer(found).value & 0xFFFFFFFF

