"""The files sink's JSON lines: one Kafka record a line (shared by the files sink, the sources that write its files
themselves, the console sink's lines and the dead letters).

``record_line`` is the reference, one record built in Python. ``record_lines`` gives the same bytes for every row
of an Arrow batch with Arrow's compute kernels, so the files sink spends no Python per record: the topic is
escaped once per distinct topic, key and value texts (already JSON) are joined as they are, and only the rare rows
Arrow has no kernel for (a binary value, written base64, or headers) take the reference path.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import mmap
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pyspark import TaskContext

from cdckit.errors import OutputPathError
from cdckit.formats.arrow_text import join, merge
from cdckit.fsutil import (
    DISK_FILE_SYSTEMS,
    PRIVATE_FILE,
    file_system_type,
    folder_mode,
    private_folder,
    sync_folder,
)
from cdckit.spark.sinks.base import WriteSummary, on_partitions, persist_controls, summarize

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


def _json_string(text: str) -> str:
    return orjson.dumps(text).decode("utf-8")


def headers_json(headers: Sequence[Mapping[str, Any]] | None) -> str:
    """A record's headers as a JSON array of ``{"key", "value"}``, each value base64 (null for none)."""
    return "[" + ",".join(
        '{"key":' + _json_string(h["key"]) + ',"value":'
        + (_json_string(base64.b64encode(h["value"]).decode()) if h["value"] is not None else "null") + "}"
        for h in (headers or [])) + "]"


def value_json(row: Mapping[str, Any]) -> str:
    """A record's value as its line holds it: the JSON text, null, or a binary (Avro) value base64-encoded and
    followed by ``"valueEncoding"``."""
    binary = row["value_binary"]
    if binary is not None:
        return _json_string(base64.b64encode(binary).decode()) + ',"valueEncoding":"base64"'
    return row["value"] if row["value"] is not None else "null"


def record_line(row: Mapping[str, Any]) -> str:
    """One record as a JSON line (without its newline)."""
    return ('{"topic":' + _json_string(row["topic"]) + ',"key":' + (row["key"] or "null") + ',"value":'
            + value_json(row) + ',"headers":' + headers_json(row["headers"]) + "}")


def _topic_json(topics: pa.Array, text: pa.DataType) -> pa.Array:
    """Each row's topic as a JSON string, escaped once per distinct topic."""
    import pyarrow as pa

    encoded = topics.dictionary_encode()
    escaped = pa.array([_json_string(topic) for topic in encoded.dictionary.to_pylist()], type=text)
    return escaped.take(encoded.indices)


def _line_type(batch: pa.RecordBatch) -> pa.DataType:
    """``string`` when the batch's lines fit its 2 GiB offsets (the key and value columns are then joined as they
    come, without a copy to ``large_string``), else ``large_string``."""
    import pyarrow as pa

    texts = [batch.column(name) for name in ("key", "value", "topic")]
    # the lines' bytes at most: the texts, binary values base64-encoded (and headers, rare) twice over, the rest
    room = (sum(column.nbytes for column in texts) + 2 * (batch.column("value_binary").nbytes
                                                          + batch.column("headers").nbytes) + batch.num_rows * 64)
    if all(column.type == pa.string() for column in texts) and room < (1 << 31) - 1:
        return pa.string()
    return pa.large_string()


def _or_null(column: pa.Array, text: pa.DataType) -> pa.Array:
    """A key or value column as its line holds it: ``null`` where there is none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column if column.type == text else column.cast(text)
    return column if column.null_count == 0 else pc.coalesce(column, pa.scalar("null", text))


def record_lines(batch: pa.RecordBatch) -> pa.Array:
    """Each row of an event batch (``rows.EVENT_SCHEMA``) as its JSON line and a newline, a ``string`` array (a
    ``large_string`` one when the lines would not fit): byte for byte ``record_line(row) + "\\n"``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = _line_type(batch)
    key = _or_null(batch.column("key"), text)
    value = _or_null(batch.column("value"), text)
    headers: Any = pa.repeat(pa.scalar("[]", text), batch.num_rows)
    rare = pc.or_(pc.is_valid(batch.column("value_binary")),
                  pc.greater(pc.fill_null(pc.list_value_length(batch.column("headers")), 0), 0))
    if pc.any(rare).as_py():
        rows = batch.filter(rare).to_pylist()
        plain = pc.invert(rare)
        value = merge(rare, pa.array([value_json(row) for row in rows], type=text), value.filter(plain))
        headers = merge(rare, pa.array([headers_json(row["headers"]) for row in rows], type=text),
                        headers.filter(plain))
    return join('{"topic":', _topic_json(batch.column("topic"), text), ',"key":', key, ',"value":', value,
                ',"headers":', headers, "}\n", text=text)


def lines_by_topic(batch: pa.RecordBatch) -> Iterator[tuple[str, memoryview, int]]:
    """The batch's records as lines, grouped by topic in row order: (topic, the lines' UTF-8 bytes, how many)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if batch.num_rows == 0:
        return
    lines = record_lines(batch)
    topics = batch.column("topic")
    distinct = topics.unique().to_pylist()
    for topic in distinct:
        chosen = lines if len(distinct) == 1 else lines.filter(pc.equal(topics, topic))
        width = 8 if chosen.type == pa.large_string() else 4
        offsets = np.frombuffer(chosen.buffers()[1], dtype=np.int64 if width == 8 else np.int32,
                                count=len(chosen) + 1, offset=chosen.offset * width)
        yield topic, memoryview(chosen.buffers()[2])[int(offsets[0]):int(offsets[-1])], len(chosen)


WRITE_BEHIND_BYTES = 8 << 20  # how much a file is written before the disk is asked to start writing it out
DIRECT_BLOCK = 4096  # what a file written past the page cache is written in: whole blocks, from aligned memory
DIRECT_STAGE_BYTES = 4 << 20  # the aligned buffer those blocks are gathered in, one per task's files


def direct_writes_suit(folder: Path) -> bool:
    """Whether files in ``folder`` suit writes past the page cache (``_TopicFile``), as
    ``cdckit.files.direct.writes=auto`` asks: on Linux, where the folder is on a local disk's file system (ext4, XFS,
    Btrfs: ``fsutil.DISK_FILE_SYSTEMS``), whose direct writes go to the disk as they are. A network file system
    (NFS, EFS, SMB) would wait for its server at each direct write, and others (tmpfs, FUSE, overlays) gain nothing
    or refuse it: those are written through the page cache."""
    return hasattr(os, "O_DIRECT") and file_system_type(folder) in DISK_FILE_SYSTEMS


DIRECT_WRITES = "cdckit.files.direct.writes"


def direct_writes(options: Mapping[str, str]) -> str:
    """``cdckit.files.direct.writes`` as a job's configuration gives it (``auto``, ``true`` or ``false``; validated
    at start), else its default."""
    from cdckit.config.properties import BY_NAME

    return str(options.get(DIRECT_WRITES) or BY_NAME[DIRECT_WRITES].default)


def direct_writes_asked(setting: str | None, folder: Path) -> bool:
    """Whether files in ``folder`` are opened for direct writes under ``cdckit.files.direct.writes``: ``auto`` where
    ``direct_writes_suit`` the folder, ``true`` wherever the platform has ``O_DIRECT`` (a file system that refuses
    it then has its files written through the page cache, as ``_TopicFile`` does with any refused direct write),
    ``false`` never. ``None``: the setting's default."""
    if setting is None:
        setting = direct_writes({})
    if setting == "false":
        return False
    if setting == "true":
        return hasattr(os, "O_DIRECT")
    return direct_writes_suit(folder)


class _TopicFile:
    """One topic's file of one task, written to a temporary name.

    Where direct writes are asked (``direct_writes_asked``), the file is opened with ``O_DIRECT``: its lines are
    gathered in an aligned buffer (``stage``, shared by the task's files) and written in whole blocks straight from
    it to the disk. The kernel then neither copies them into its page cache nor allocates those pages and writes
    them out later, which cost the task's process more than formatting the lines did: on the benchmarks' virtual
    machine, 1 to 6 µs of system time for each 3.4 KB line, against 0.1 µs written directly. The last partial block
    goes through the page cache when the file is finished, as does the rest of a file whose direct write is
    refused.

    Elsewhere the file is written through the page cache, and every ``WRITE_BEHIND_BYTES`` its new pages are
    handed to the disk (``POSIX_FADV_DONTNEED`` starts their writeback without waiting for it, and drops the pages
    written out before): the disk writes while the task formats, instead of idling until the page cache fills and
    the kernel stalls every writer, and ``finish``'s sync finds little left to write."""

    def __init__(self, temporary: Path, final: Path, stage: memoryview | None, mode: int = PRIVATE_FILE) -> None:
        self.temporary = temporary
        self.final = final
        self.stage = stage
        self.fd = -1
        # The temporary name is the task's own (a task run again writes the same file again): what stands there, a
        # file an attempt left or a link someone planted, is removed, not opened, and the file is created anew,
        # exclusively, never through a link, readable as cdckit.files.mode says (0600 by default)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        if stage is not None:
            with contextlib.suppress(OSError):
                self.fd = os.open(temporary, flags | os.O_DIRECT, mode)
            if self.fd < 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)  # O_DIRECT refused after the file was made
        self.direct = self.fd >= 0
        if not self.direct:
            self.fd = os.open(temporary, flags, mode)
        os.fchmod(self.fd, mode)  # exactly: the umask may have taken bits the setting gives
        self.written = 0  # bytes of the file written to it (direct: whole blocks only)
        self.pending = b""  # direct: the bytes after the last whole block, not written yet
        self._handed = 0  # buffered: of the bytes written, those handed to the disk
        self._handed_before = 0  # of which handed before the last time

    def write(self, lines: memoryview) -> None:
        if self.direct:
            self._write_direct(lines)
        else:
            self._write_all(lines)

    def _write_direct(self, lines: memoryview) -> None:
        stage = self.stage
        assert stage is not None
        lines = lines.cast("B") if lines.format != "B" else lines
        filled = len(self.pending)
        stage[:filled] = self.pending
        taken = 0
        while True:
            more = min(len(lines) - taken, len(stage) - filled)
            stage[filled:filled + more] = lines[taken:taken + more]
            filled += more
            taken += more
            whole = filled - filled % DIRECT_BLOCK
            if whole:
                try:
                    done = os.pwrite(self.fd, stage[:whole], self.written)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    done = 0  # the file system takes no direct write after all
                if done != whole:  # refused, or short (a full disk): the rest through the page cache
                    self._buffered_from_now(stage[done:filled], done)
                    self._write_all(lines[taken:])
                    return
                self.written += whole
            rest = filled - whole
            if taken == len(lines):
                self.pending = bytes(stage[whole:filled])
                return
            stage[:rest] = stage[whole:filled]
            filled = rest

    def _buffered_from_now(self, unwritten: memoryview | bytes, done: int = 0) -> None:
        """Write through the page cache from here on, starting with ``unwritten`` (after ``done`` bytes)."""
        import fcntl

        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self.direct = False
        self.written += done
        self.pending = b""
        self._write_all(unwritten)

    def _write_all(self, data: memoryview | bytes) -> None:
        view = memoryview(data)
        while view:
            done = os.pwrite(self.fd, view, self.written)
            self.written += done
            view = view[done:]
        if self.written - self._handed >= WRITE_BEHIND_BYTES:
            self._write_behind()

    def _write_behind(self) -> None:
        """Start the disk writing the file's pages written since the last call (where the platform can)."""
        if not hasattr(os, "posix_fadvise"):
            return
        # With the pages handed the last time: clean by now, they leave the page cache. Advice only: a file system
        # that refuses it (some network or FUSE mounts) is written as before, synced by ``commit``.
        start = self._handed_before
        with contextlib.suppress(OSError):
            os.posix_fadvise(self.fd, start, self.written - start, os.POSIX_FADV_DONTNEED)
        self._handed_before = self._handed
        self._handed = self.written

    def finish(self) -> None:
        """The last partial block written, the file synced, closed and renamed to its final name (the rename is
        durable once its folder is synced: ``TopicFiles.commit``)."""
        if self.pending:
            self._buffered_from_now(self.pending)
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        os.replace(self.temporary, self.final)

    def discard(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
            self.temporary.unlink(missing_ok=True)


def _folder_name_problem(topic: str) -> str | None:
    """Why ``topic`` cannot be a folder's name (None: it can): it must be one plain path part."""
    if topic in ("", ".", ".."):
        return "it is not a folder name"
    if "/" in topic or "\\" in topic or (os.altsep and os.altsep in topic):
        return "it holds a path separator"
    if "\0" in topic:
        return "it holds a NUL character"
    return None


def _outside(path: Path, root: Path) -> str | None:
    """Where ``path`` really leads (symbolic links followed), when that is not inside ``root`` (resolved)."""
    resolved = path.resolve()
    return None if resolved.is_relative_to(root) and resolved != root else str(resolved)


def topic_folder(output: str | Path, topic: str, within: str | Path | None = None) -> Path:
    """A topic's folder, ``<output>/<topic>``; refused with an ``OutputPathError`` unless the topic is one plain
    folder name (no ``/`` or ``\\``, not ``.`` or ``..``) and the folder, symbolic links followed, lies inside
    ``within`` (the configured folder; default ``output``). Topic names as cdckit makes them always are (Debezium's
    topic names, ``naming.sanitized_topic_name``); a single message transform may route records elsewhere."""
    folder = Path(output) / topic
    problem = _folder_name_problem(topic)
    if problem is None:
        leads = _outside(folder, Path(within if within is not None else output).resolve())
        problem = None if leads is None else f"its folder leads to {leads}, outside it"
    if problem is not None:
        shown = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in topic)
        raise OutputPathError(f"topic '{shown}' cannot be written under {within or output}: {problem}; nothing was "
                              f"written (route the topic to a name of letters, digits, '.', '_' and '-')")
    return folder


class TopicFiles:
    """One task's records as files ``<output>/<topic>/<name>.jsonl``: written to a temporary name (as
    ``_TopicFile`` writes it), synced and renamed by ``commit``, so a file is whole or absent, and a task run again
    writes the same file again.

    An ``OSError`` becomes a ``SinkWriteError`` that says the batch is written again, whole, on the next run. A
    file that would lie outside ``within`` (the configured folder; default ``output``) is refused with an
    ``OutputPathError`` before any of its batch is written (``topic_folder``): nothing of the task's stays.
    """

    def __init__(self, output: str, name: str, within: str | None = None, mode: int = PRIVATE_FILE,
                 direct: str | None = None) -> None:
        self.output = output
        self.name = name
        self.within = within if within is not None else output
        self.mode = mode
        self.direct = direct  # cdckit.files.direct.writes (None: its default)
        self.files: dict[str, _TopicFile] = {}
        self.folders: dict[str, Path] = {}  # topic folders checked (topic_folder), not created yet
        self.counts: Counter[str] = Counter()
        self._stage: memoryview | None = None
        self._unsynced: set[Path] = set()  # folders that hold a topic folder made by this task, synced by commit

    def _checked(self, topic: str) -> Path:
        """The topic's folder, checked once (``topic_folder``), and its files' paths checked as well."""
        folder = self.folders.get(topic)
        if folder is None:
            folder = topic_folder(self.output, topic, self.within)
            root = Path(self.within).resolve()
            for path in (folder / f".{self.name}.jsonl.tmp", folder / f"{self.name}.jsonl"):
                leads = _outside(path, root)
                if leads is not None:
                    raise OutputPathError(f"{path} cannot be written: it leads to {leads}, outside "
                                          f"{self.within}; nothing was written")
            self.folders[topic] = folder
        return folder

    def _file(self, topic: str) -> _TopicFile:
        file = self.files.get(topic)
        if file is None:
            folder = self._checked(topic)
            private_folder(folder, mode=folder_mode(self.mode), unsynced=self._unsynced)
            # the topics' folders share the output's file system: asked once, for the first
            if not self.files and direct_writes_asked(self.direct, folder):
                self._stage = memoryview(mmap.mmap(-1, DIRECT_STAGE_BYTES))  # page-aligned
            file = self.files[topic] = _TopicFile(folder / f".{self.name}.jsonl.tmp", folder / f"{self.name}.jsonl",
                                                  self._stage, self.mode)
        return file

    def write(self, batch: pa.RecordBatch) -> None:
        """Append a batch of records (``rows.EVENT_SCHEMA``, no control rows), each to its topic's file; every
        topic's folder is checked before any line of the batch is written."""
        if batch.num_rows:
            try:
                for topic in batch.column("topic").unique().to_pylist():
                    self._checked(topic)
            except BaseException:
                self.abort()
                raise
        try:
            for topic, lines, count in lines_by_topic(batch):
                self._file(topic).write(lines)
                self.counts[topic] += count
        except OSError as exc:
            self.abort()
            raise self._error(exc) from None

    def write_all(self, batches: Iterable[pa.RecordBatch]) -> Counter[str]:
        """Write every batch and commit; on any failure nothing is left behind. Returns records per topic."""
        try:
            for batch in batches:
                self.write(batch)
        except BaseException:
            self.abort()
            raise
        return self.commit()

    def commit(self) -> Counter[str]:
        """Make every file durable and visible; returns the records written per topic. Each file is synced and
        renamed, then each of their folders (and the folders the topic folders made were created in) synced once,
        so that the renames survive a power cut before the batch is reported written (and the source's position
        moves past it). A task of many topics (a snapshot of many small tables) syncs its files and folders
        ``SYNC_THREADS`` at a time: the file system writes them in a few journal commits, not one each."""
        try:
            _each(lambda file: file.finish(), list(self.files.values()))
            folders = dict.fromkeys(file.final.parent for file in self.files.values())
            _each(sync_folder, list(dict.fromkeys([*folders, *sorted(self._unsynced)])))
            self._unsynced.clear()
        except OSError as exc:
            raise self._error(exc) from None
        finally:
            self.abort()
        return self.counts

    def abort(self) -> None:
        """Close and remove what is not committed."""
        for file in self.files.values():
            file.discard()

    def _error(self, exc: OSError) -> Exception:
        from cdckit.errors import SinkWriteError

        return SinkWriteError(f"writing {self.name} files under {self.output} failed: {exc.strerror or exc}; the "
                              f"batch was not committed and is written again, whole, on the next run once the sink "
                              f"can take it")


# Files (and folders) a task syncs at once when it commits many.
SYNC_THREADS = 16


def _each(action: Callable[[Any], None], items: list[Any]) -> None:
    """``action`` on every item: one after another for a few, ``SYNC_THREADS`` at a time for more (a sync waits on
    the disk with the GIL released). The first error is raised once every action has ended."""
    if len(items) <= 2:
        for item in items:
            action(item)
        return
    with ThreadPoolExecutor(min(SYNC_THREADS, len(items)), thread_name_prefix="cdckit-sync") as pool:
        for _ in pool.map(action, items):
            pass


def without_controls(batches: Iterable[pa.RecordBatch], controls: list[pa.RecordBatch]
                     ) -> Iterator[pa.RecordBatch]:
    """The batches without their control rows (an op starting with ``_``: for the driver, not for the sink), which
    are added to ``controls``."""
    import pyarrow.compute as pc

    for batch in batches:
        is_control = pc.starts_with(batch.column("op"), "_")
        if pc.any(is_control).as_py():
            controls.append(batch.filter(is_control))
            batch = batch.filter(pc.invert(is_control))
        yield batch


def written_rows(batches: Iterable[pa.RecordBatch], files: TopicFiles) -> Iterator[pa.RecordBatch]:
    """A source's records written to ``files`` as the files sink writes them, committed once all are; yields
    what Spark still gets: the control rows (an op starting with ``_``, for the driver) and then one
    ``rows.WRITTEN`` row per topic, its count in ``value``."""
    from cdckit.spark.rows import WRITTEN, arrow_batches

    controls: list[pa.RecordBatch] = []
    counts = files.write_all(without_controls(batches, controls))
    yield from controls
    yield from arrow_batches([(topic, None, str(count), [], None, WRITTEN, 0, 0, 0, 0, None)
                              for topic, count in counts.items()])


def file_writer(output: str, label: str, per_partition: bool, controls_dir: str | None = None,
                within: str | None = None, mode: int = PRIVATE_FILE, direct: str | None = None
                ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[tuple[str, int]]]:
    """Each task's records as ``TopicFiles`` under ``output``, every file inside ``within`` (default ``output``),
    each of ``mode`` (``cdckit.files.mode``), written directly as ``direct`` says (``cdckit.files.direct.writes``)."""
    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, int]]:
        suffix = f"-{TaskContext.get().partitionId():05d}" if per_partition else ""  # type: ignore[union-attr]
        control_rows: list[pa.RecordBatch] = []
        counts = TopicFiles(output, f"{label}{suffix}", within, mode, direct).write_all(
            without_controls(batches, control_rows))
        controls = [value for rows in control_rows for value in rows.column("value").to_pylist()]
        persist_controls(controls_dir, controls)
        yield from counts.items()
        for value in controls:
            yield ("_control", value)  # type: ignore[misc]

    return write


def write_dead_letters(df: DataFrame, output: str, label: str, mode: int = PRIVATE_FILE,
                       direct: str | None = None) -> WriteSummary:
    """Records a target refused (too large), as JSON lines under ``<output>/_dead-letter/<topic>/``, every file
    inside ``<output>`` (``topic_folder``)."""
    writer = file_writer(str(Path(output) / "_dead-letter"), label, per_partition=True, within=output, mode=mode,
                         direct=direct)
    return summarize(on_partitions(df, writer, arrow=True))
