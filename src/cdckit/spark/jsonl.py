"""The files sink's JSON lines: one Kafka record a line.

``record_line`` is the reference, one record built in Python. ``record_lines`` gives the same bytes for every row
of an Arrow batch with Arrow's compute kernels, so the files sink spends no Python per record: the topic is
escaped once per distinct topic, key and value texts (already JSON) are joined as they are, and only the rare rows
Arrow has no kernel for (a binary value, written base64, or headers) take the reference path.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from cdckit.formats.arrow_text import join, merge

if TYPE_CHECKING:
    import pyarrow as pa


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


class TopicFiles:
    """One task's records as files ``<output>/<topic>/<name>.jsonl``: written to a temporary name, synced and
    renamed by ``commit``, so a file is whole or absent, and a task run again writes the same file again.

    Every ``WRITE_BEHIND_BYTES`` a file's new pages are handed to the disk (``POSIX_FADV_DONTNEED`` starts their
    writeback without waiting for it, and drops the pages written out before): the disk writes while the task
    formats, instead of idling until the page cache fills and the kernel stalls every writer, and ``commit``'s
    sync finds little left to write.

    An ``OSError`` becomes a ``SinkWriteError`` that says the batch is written again, whole, on the next run.
    """

    def __init__(self, output: str, name: str) -> None:
        self.output = output
        self.name = name
        self.handles: dict[str, tuple[IO[bytes], Path, Path]] = {}
        self.counts: Counter[str] = Counter()
        self._written: Counter[str] = Counter()  # bytes per topic's file
        self._handed: Counter[str] = Counter()  # of which handed to the disk
        self._handed_before: Counter[str] = Counter()  # of which handed before the last time

    def write(self, batch: pa.RecordBatch) -> None:
        """Append a batch of records (``rows.EVENT_SCHEMA``, no control rows), each to its topic's file."""
        try:
            for topic, lines, count in lines_by_topic(batch):
                if topic not in self.handles:
                    folder = Path(self.output) / topic
                    folder.mkdir(parents=True, exist_ok=True)
                    temporary = folder / f".{self.name}.jsonl.tmp"
                    self.handles[topic] = (temporary.open("wb"), temporary, folder / f"{self.name}.jsonl")
                handle = self.handles[topic][0]
                handle.write(lines)
                self.counts[topic] += count
                self._written[topic] += len(lines)
                if self._written[topic] - self._handed[topic] >= WRITE_BEHIND_BYTES:
                    self._write_behind(topic, handle)
        except OSError as exc:
            self.abort()
            raise self._error(exc) from None

    def _write_behind(self, topic: str, handle: IO[bytes]) -> None:
        """Start the disk writing the file's pages written since the last call (where the platform can)."""
        if not hasattr(os, "posix_fadvise"):
            return
        handle.flush()
        # With the pages handed the last time: clean by now, they leave the page cache. Advice only: a file system
        # that refuses it (some network or FUSE mounts) is written as before, synced by ``commit``.
        start = self._handed_before[topic]
        with contextlib.suppress(OSError):
            os.posix_fadvise(handle.fileno(), start, self._written[topic] - start, os.POSIX_FADV_DONTNEED)
        self._handed_before[topic] = self._handed[topic]
        self._handed[topic] = self._written[topic]

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
        """Make every file durable and visible; returns the records written per topic."""
        try:
            for handle, temporary, final in self.handles.values():
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
                os.replace(temporary, final)
        except OSError as exc:
            raise self._error(exc) from None
        finally:
            self.abort()
        return self.counts

    def abort(self) -> None:
        """Close and remove what is not committed."""
        for handle, temporary, _ in self.handles.values():
            if not handle.closed:
                # closed even when the flush it makes fails again (a full disk): the first error is the one reported
                with contextlib.suppress(OSError):
                    handle.close()
                temporary.unlink(missing_ok=True)

    def _error(self, exc: OSError) -> Exception:
        from cdckit.errors import SinkWriteError

        return SinkWriteError(f"writing {self.name} files under {self.output} failed: {exc.strerror or exc}; the "
                              f"batch was not committed and is written again, whole, on the next run once the sink "
                              f"can take it")


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
