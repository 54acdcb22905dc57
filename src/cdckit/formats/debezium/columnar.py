"""PostgreSQL snapshot reads and streamed changes formatted a column at a time, over Arrow arrays
(docs/decisions/0022).

``TableFormat.key_json`` / ``value_json`` are the reference: one row at a time in Python. ``ColumnarReads`` gives
the same bytes for a whole block of a table's rows, as PostgreSQL's text output (decision 0004) arranged in
columns:

- each column becomes the JSON text of its values with Arrow's compute kernels (integers, booleans, text, uuid,
  dates, timestamptz, precise decimals), for the values in the plain form PostgreSQL prints (``2024-03-05``,
  ``12.50``, text without characters JSON must escape);
- every other value, and every column of a type or setting without a kernel, goes through the reference
  converter, once per distinct value;
- the messages are joined column by column: the schema text, the after image, the source block (which differs
  between rows only in ``snapshot``) and the rest are constants of the block.

``ColumnarChanges`` does the same for a block of a table's streamed changes, with before images, values the
change did not carry (unchanged TOASTed ones) and the source block's per-change fields. Both write either
release's records, Debezium 2.5.2's or 3.6.0's (``cdckit.debezium.format``, decision 0028). Neither writes
transaction blocks or yboutput's wrapped values (``supports``): those stay with the reference.
Pure: pyarrow and NumPy, no Spark, no database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdckit.errors import UnsupportedValueError
from cdckit.events import UNAVAILABLE, ChangeEvent, Position
from cdckit.formats.arrow_text import Parts, join, joined, merge, parts
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat, dumps
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.formats.debezium.source import FORMATS, source_microseconds

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

# Characters orjson (and Jackson) write escaped, and those outside the Basic Multilingual Plane, which Jackson
# writes as a surrogate pair: a text with none of them is its JSON string between quotes. RE2 syntax.
_NEEDS_ESCAPING = r'["\\\x00-\x1f]|[\x{10000}-\x{10FFFF}]'
_PLAIN_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_UTC_TIMESTAMPTZ = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]*[1-9])?\+00$"
_GREGORIAN_CUTOVER = "1582-10-15"  # before it, pgjdbc's reading differs from the plain text (the reference knows)
_INTEGER_TYPES = frozenset(("int2", "int4", "int8", "oid"))
_STRING_TYPES = frozenset(("text", "varchar", "bpchar", "char", "citext", "uuid", "json", "jsonb"))
_DATE_SCHEMAS = frozenset(("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"))
_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def supports(table_format: TableFormat) -> bool:
    """Whether ``ColumnarReads`` and ``ColumnarChanges`` format this table's records (``supports_settings``)."""
    return supports_settings(table_format.settings)


def supports_settings(settings: FormatSettings) -> bool:
    """Whether these settings' records are formatted a column at a time: PostgreSQL's connector, no yboutput,
    either Debezium release (decision 0028)."""
    return settings.connector == "postgresql" and not settings.wrap_values and settings.debezium_format in FORMATS


def _around_op(ts_ms: int, version_3: bool) -> tuple[str, str]:
    """The payload's text after ``source`` (no transaction metadata, processing time ``ts_ms``), in the release's
    order: what comes before the op's letter and what comes after it, the payload's closing brace included."""
    if version_3:  # Debezium 3: the transaction block before op, the processing time in finer units too
        return ',"transaction":null,"op":"', f'","ts_ms":{ts_ms},"ts_us":{ts_ms * 1000},"ts_ns":{ts_ms * 1_000_000}}}'
    return ',"op":"', f'","ts_ms":{ts_ms},"transaction":null}}'


class _Converter:
    """One field's values, text in, JSON text out, as the reference writes them inside the message."""

    def __init__(self, field: Any, column: ColumnType | None, key: bool, read: bool = True) -> None:
        self.field = field
        self.key = key
        self.convert = field.read_value if read else field.mapped.convert_value
        self.kind = _kind(field, column)
        self.precision = 6 if column is None or column.modifier < 0 else column.modifier
        self.scale = int(field.mapped.schema.get("parameters", {}).get("scale", "0"))

    def reference(self, text: str | None) -> str:
        """The reference's JSON for one value (``TableFormat.key_payload`` / ``row_payload`` with ``read``)."""
        field = self.field
        converted = field.fallback if text is None else self.convert(text)
        if self.key:
            return dumps(converted)
        result = converted if field.mapping.mapper is None else field.mapping.mapper(converted)
        return dumps(field.default if result is None else result)

    def unavailable(self) -> str:
        """The JSON of a value the change did not carry (an unchanged TOASTed one): the placeholder, or else the
        field's default."""
        field = self.field
        return dumps(field.default if field.placeholder is None else field.placeholder)

    def json(self, texts: pa.Array) -> pa.Array | Parts:
        """Each value's JSON text (``Parts`` where they are still to be joined)."""
        import pyarrow.compute as pc

        plain = self._plain(texts)
        if plain is None:
            return self._by_reference(texts)
        plain = pc.fill_null(plain, False)
        if pc.all(plain).as_py():
            return self._fast(texts)
        if not pc.any(plain).as_py():
            return self._by_reference(texts)
        return merge(plain, joined(self._fast(texts.filter(plain))),
                     self._by_reference(texts.filter(pc.invert(plain))))

    def _by_reference(self, texts: pa.Array) -> pa.Array:
        """Each distinct value converted once by the reference; nulls too."""
        import pyarrow as pa
        import pyarrow.compute as pc

        encoded = texts.dictionary_encode()
        converted = pa.array([self.reference(text) for text in encoded.dictionary.to_pylist()], type=pa.large_string())
        result = converted.take(encoded.indices)
        if result.null_count:
            result = pc.fill_null(result, pa.scalar(self.reference(None), pa.large_string()))
        return result

    def _plain(self, texts: pa.Array) -> pa.Array | None:
        """Where the kernel applies (None: nowhere)."""
        import pyarrow.compute as pc

        kind = self.kind
        if kind == "integer":
            return pc.is_valid(texts)
        if kind == "boolean":
            return pc.is_in(texts, value_set=_strings(["t", "f"]))
        if kind == "string":
            return pc.invert(pc.match_substring_regex(texts, _NEEDS_ESCAPING))
        if kind == "date":
            return pc.and_(pc.match_substring_regex(texts, _PLAIN_DATE), pc.greater(texts, "0000-99-99"))
        if kind == "timestamptz":
            return pc.and_(pc.match_substring_regex(texts, _UTC_TIMESTAMPTZ),
                           pc.greater_equal(texts, _GREGORIAN_CUTOVER))
        if kind == "decimal":
            fraction = rf"\.[0-9]{{{self.scale}}}" if self.scale else ""
            digits = 18 - self.scale  # the unscaled value fits a long
            return pc.match_substring_regex(texts, rf"^-?[0-9]{{1,{max(digits, 1)}}}{fraction}$") \
                if digits > 0 else None
        return None

    def _fast(self, texts: pa.Array) -> pa.Array | Parts:
        """The kernel's JSON for values ``_plain`` accepted."""
        import pyarrow as pa
        import pyarrow.compute as pc

        text = pa.large_string()
        texts = texts.cast(text)
        kind = self.kind
        if kind == "integer":
            return texts
        if kind == "boolean":
            return pc.if_else(pc.equal(texts, "t"), pa.scalar("true", text), pa.scalar("false", text))
        if kind == "string":
            return parts('"', texts, '"')
        if kind == "date":
            days = pc.strptime(texts, format="%Y-%m-%d", unit="s").cast(pa.date32()).cast(pa.int32())
            return days.cast(text)
        if kind == "timestamptz":
            clock = pc.utf8_slice_codeunits(texts, 11, 19)
            date = pc.utf8_slice_codeunits(texts, 0, 10)
            if self.precision == 0:
                return parts('"', date, "T", clock, 'Z"')
            fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(texts, 20, -3), width=self.precision, padding="0")
            return parts('"', date, "T", clock, ".", fraction, 'Z"')
        if kind == "decimal":
            import numpy as np

            unscaled = pc.replace_substring(texts, ".", "").cast(pa.int64()).to_numpy(zero_copy_only=False)
            return parts('"', _base64_twos_complement(np.asarray(unscaled, dtype=np.int64)), '"')
        raise AssertionError(kind)


def _kind(field: Any, column: ColumnType | None) -> str:
    """Which kernel a field's values take ("generic": none, every value by the reference)."""
    schema = field.mapped.schema
    if field.mapping.mapper is not None or column is None:
        return "generic"
    name = column.type_name
    if name in _INTEGER_TYPES and schema["type"] in ("int16", "int32", "int64") and "name" not in schema:
        return "integer"
    if name == "bool" and schema["type"] == "boolean":
        return "boolean"
    if name in _STRING_TYPES and schema["type"] == "string":
        return "string"
    if name == "date" and schema.get("name") in _DATE_SCHEMAS:
        return "date"
    if name == "timestamptz" and schema.get("name") == "io.debezium.time.ZonedTimestamp":
        return "timestamptz"
    if name in ("numeric", "decimal") and schema.get("name") == "org.apache.kafka.connect.data.Decimal":
        return "decimal"
    return "generic"


def _strings(values: Sequence[str]) -> pa.Array:
    import pyarrow as pa

    return pa.array(values, type=pa.string())


def _base64_twos_complement(values: np.ndarray) -> pa.Array:
    """Each long as ``b64(twos_complement(v))``: the base64 text of BigInteger.toByteArray(), the shortest
    big-endian two's complement."""
    import numpy as np
    import pyarrow as pa

    magnitude = np.where(values >= 0, values, ~values)
    lengths = np.ones(len(values), dtype=np.int64)
    for size in range(1, 8):  # one more byte for each 8 bits of magnitude, the sign bit included
        lengths += magnitude >= (1 << (8 * size - 1))
    big_endian = values.astype(">i8").view(np.uint8).reshape(-1, 8)
    alphabet = np.frombuffer(_B64, dtype=np.uint8)
    pieces, order = [], []
    for length in np.unique(lengths):
        rows = np.nonzero(lengths == length)[0]
        groups = (int(length) + 2) // 3
        data = np.zeros((len(rows), groups * 3), dtype=np.uint32)
        data[:, :length] = big_endian[rows, 8 - length:]
        triples = data.reshape(len(rows), groups, 3)
        word = (triples[:, :, 0] << 16) | (triples[:, :, 1] << 8) | triples[:, :, 2]
        sextets = np.stack([(word >> shift) & 63 for shift in (18, 12, 6, 0)], axis=2).reshape(len(rows), -1)
        chars = alphabet[sextets]
        padding = groups * 3 - int(length)
        if padding:
            chars[:, -padding:] = ord("=")
        width = groups * 4
        pieces.append(pa.array(np.ascontiguousarray(chars).view(f"S{width}").ravel(), type=pa.binary()))
        order.append(rows)
    combined = pa.concat_arrays(pieces).cast(pa.large_string())
    return combined.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


class _TableConverters:
    """A table's key and value converters and the texts its messages are wrapped in."""

    read = True  # a snapshot's values (Debezium reads them through JDBC), or the stream's

    def __init__(self, table_format: TableFormat, topic_prefix: str) -> None:
        self.format = table_format
        self.topic_prefix = topic_prefix
        columns = {column.name: column for column in table_format.table.columns}

        def column_of(field: Any) -> ColumnType | None:
            column = columns.get(field.name)
            return column if isinstance(column, ColumnType) else None

        self.keys = [_Converter(f, column_of(f), key=True, read=self.read) for f in table_format.key_fields]
        self.values = [_Converter(f, column_of(f), key=False, read=self.read) for f in table_format.value_fields]
        (self.key_prefix, self.key_suffix), (self.value_prefix, self.value_suffix) = table_format.wrappers()


class ColumnarReads(_TableConverters):
    """A table's snapshot reads, a block of rows at a time: the same key and value texts as the reference's
    ``key_json(row, read=True)`` and ``value_json(event, ts_ms)`` for each row's read event."""

    def texts(self, columns: Mapping[str, pa.Array], markers: pa.Array, event: Callable[[str], ChangeEvent],
              ts_ms: int) -> tuple[pa.Array | None, pa.Array]:
        """Keys (None: the table has no key) and values of the rows in ``columns`` (each column's text output),
        whose ``source.snapshot`` markers are ``markers``; ``event(marker)`` is a read event of the block with that
        marker, for the source block."""
        import pyarrow as pa

        table = self.format.table
        rows = len(markers)
        try:
            after = _struct(self.values, columns, rows)
            key = _struct(self.keys, columns, rows) if self.keys else None
        except UnsupportedValueError as error:
            raise UnsupportedValueError(f"table {table.schema}.{table.name}: {error}") from None
        encoded = markers.dictionary_encode()
        sources = pa.array([self._source(event(marker)) for marker in encoded.dictionary.to_pylist()],
                           type=pa.large_string()).take(encoded.indices)
        before_op, after_op = _around_op(ts_ms, self.format.version_3)
        value = join(self.value_prefix + '{"before":null,"after":', after, ',"source":', sources,
                     before_op + "r" + after_op + self.value_suffix)
        if key is None:
            return None, value
        return join(self.key_prefix, key, self.key_suffix), value

    def _source(self, event: ChangeEvent) -> str:
        format_ = self.format
        return dumps(format_.source.payload(event, self.topic_prefix, format_.database))


def _struct(converters: Sequence[_Converter], columns: Mapping[str, pa.Array], rows: int,
            unavailable: Mapping[str, pa.Array] | None = None) -> pa.Array | Parts:
    """The JSON object of each of ``rows`` rows: ``{"name":value,...}`` (``Parts`` to be joined); ``unavailable``:
    where a column's value is one the change did not carry (a mask per column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not converters:
        return pa.repeat(pa.scalar("{}", pa.large_string()), rows)
    items: list[Any] = ["{"]
    for index, converter in enumerate(converters):
        name = converter.field.name
        items.append(("," if index else "") + dumps(converter.field.json_name) + ":")
        texts = converter.json(columns[name])
        if unavailable and name in unavailable:
            texts = pc.if_else(unavailable[name], pa.scalar(converter.unavailable(), pa.large_string()),
                               joined(texts))
        items.append(texts)
    items.append("}")
    return parts(*items)


def read_event(schema: str, table: str, lsn: int, ts_ms: int, tx_id: int, marker: str) -> ChangeEvent:
    """A snapshot's read event without its row: what the source block of its record is made of."""
    return ChangeEvent(schema, table, "r", None, None, Position(lsn, lsn, 0), ts_ms, tx_id, snapshot=marker,
                       sequence=(None, lsn))


class CannotFormat(Exception):
    """A block ``ColumnarChanges`` leaves to the reference (a key value the change did not carry)."""


# The source block's fields that differ from one streamed change to the next (``ts_us`` and ``ts_ns``: Debezium 3's).
_VARYING_SOURCE = ("ts_ms", "sequence", "ts_us", "ts_ns", "txId", "lsn")


@dataclass(frozen=True)
class Image:
    """One side of a block's changes (their before or after images) in columns: which rows have one
    (``present``, None: every row), each column's text values over all rows (null where the value is null or the
    row has no image) and, per column, where the value is one the change did not carry (an unchanged TOASTed one)."""

    present: pa.Array | None
    columns: Mapping[str, pa.Array]
    unavailable: Mapping[str, pa.Array]


@dataclass(frozen=True)
class ChangeBlock:
    """A block of one table's streamed changes (``c``, ``u``, ``d``) in columns, as ``ColumnarChanges`` formats
    them: each row's op, before and after images, key values (None: the table has no key; every key value is one
    the change carried), and the source block's per-change fields. ``first``: the block's first change, whose
    source block gives the fields that are the same for every change."""

    ops: pa.Array
    before: Image
    after: Image
    keys: Mapping[str, pa.Array] | None
    source_ts_ms: pa.Array
    # the source time in microseconds, which Debezium 3's source block carries: a streamed PostgreSQL change's
    # commit's own (its transaction's Begin), else ``source_ts_ms`` in microseconds (``source_microseconds``)
    source_ts_us: pa.Array
    tx_ids: pa.Array
    lsns: pa.Array
    last_commits: pa.Array  # the sequence's first element: the last commit before the change (null: none)
    first: ChangeEvent


class ColumnarChanges(_TableConverters):
    """A table's streamed changes (``c``, ``u``, ``d``), a block at a time: the same key and value texts as the
    reference's ``key_json`` and ``value_json`` for each change, without transaction metadata. The block comes
    as events (``texts``) or already in columns (``block_texts``)."""

    read = False

    def texts(self, events: Sequence[ChangeEvent], ts_ms: int) -> tuple[pa.Array | None, pa.Array]:
        """Keys (None: the table has no key) and values of ``events``, all of this table, none a read; raises
        ``CannotFormat`` for a block the reference must format."""
        return self.block_texts(self.block(events), ts_ms)

    def block(self, events: Sequence[ChangeEvent]) -> ChangeBlock:
        """The events in columns; raises ``CannotFormat`` for events the reference must format."""
        import pyarrow as pa

        if any(event.sequence[1] != event.position.lsn or event.snapshot != "false" for event in events):
            raise CannotFormat("a change whose sequence does not end at its own position, or marked as a "
                               "snapshot's")
        keys = None
        if self.keys:
            key_rows = [(event.after if event.op in ("c", "u") else event.before) or {} for event in events]
            if any(row.get(c.field.name) is UNAVAILABLE for row in key_rows for c in self.keys):
                raise CannotFormat("a key value the change did not carry")
            keys = {c.field.name: pa.array([row.get(c.field.name) for row in key_rows], type=pa.string())
                    for c in self.keys}

        def numbers(values: list[int | None]) -> pa.Array:
            return pa.array(values, type=pa.int64())

        return ChangeBlock(
            pa.array([event.op for event in events], type=pa.string()),
            self._image([event.before for event in events]), self._image([event.after for event in events]), keys,
            numbers([event.source_ts_ms for event in events]), numbers([source_microseconds(e) for e in events]),
            numbers([event.tx_id for event in events]), numbers([event.position.lsn for event in events]),
            numbers([event.sequence[0] for event in events]), events[0])

    def _image(self, images: Sequence[Mapping[str, object] | None]) -> Image:
        import pyarrow as pa

        present = None if all(image is not None for image in images) else \
            pa.array([image is not None for image in images], type=pa.bool_())
        rows = [image or {} for image in images]
        columns: dict[str, pa.Array] = {}
        unavailable: dict[str, pa.Array] = {}
        for converter in self.values:
            name = converter.field.name
            values = [row.get(name) for row in rows]
            if UNAVAILABLE in values:
                unavailable[name] = pa.array([value is UNAVAILABLE for value in values], type=pa.bool_())
                values = [None if value is UNAVAILABLE else value for value in values]
            columns[name] = pa.array(values, type=pa.string())
        return Image(present, columns, unavailable)

    def block_texts(self, block: ChangeBlock, ts_ms: int) -> tuple[pa.Array | None, pa.Array]:
        """Keys (None: the table has no key) and values of a block's changes."""
        table = self.format.table
        rows = len(block.ops)
        try:
            before = self._image_texts(block.before, rows)
            after = self._image_texts(block.after, rows)
            key = None
            if self.keys and block.keys is not None:
                key = join(self.key_prefix, _struct(self.keys, block.keys, rows), self.key_suffix)
        except UnsupportedValueError as error:
            raise UnsupportedValueError(f"table {table.schema}.{table.name}: {error}") from None
        before_op, after_op = _around_op(ts_ms, self.format.version_3)
        value = join(self.value_prefix + '{"before":', before, ',"after":', after, ',"source":',
                     self._sources(block), before_op, block.ops, after_op + self.value_suffix)
        return key, value

    def _image_texts(self, image: Image, rows: int) -> pa.Array | Parts:
        """Each row's image as its JSON object, ``null`` for none (``Parts`` where they are still to be joined)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        null = pa.scalar("null", pa.large_string())
        present = image.present
        if present is None:
            return _struct(self.values, image.columns, rows, image.unavailable)
        count = int(pc.sum(present).as_py() or 0)
        if count == 0:
            return pa.repeat(null, rows)
        texts = joined(_struct(self.values, {name: column.filter(present) for name, column in image.columns.items()},
                               count, {name: mask.filter(present) for name, mask in image.unavailable.items()}))
        if count == rows:
            return texts
        return merge(present, texts, pa.repeat(null, rows - count))

    def _sources(self, block: ChangeBlock) -> Parts:
        """Each change's source block: the reference's text for the first change, its varying fields per change."""
        import pyarrow as pa
        import pyarrow.compute as pc

        def numbers(values: pa.Array) -> pa.Array:
            return pc.fill_null(values.cast(pa.large_string()), pa.scalar("null", pa.large_string()))

        def quoted(values: pa.Array) -> pa.Array:  # inside the sequence's JSON text, itself a string
            return pc.fill_null(join('\\"', values.cast(pa.large_string()), '\\"'),
                                pa.scalar("null", pa.large_string()))

        varying: dict[str, Any] = {
            "ts_ms": numbers(block.source_ts_ms),
            "txId": numbers(block.tx_ids),
            "lsn": numbers(block.lsns),
            "sequence": parts('"[', quoted(block.last_commits), ",", quoted(block.lsns), ']"'),
        }
        probe = self.format.source.payload(block.first, self.topic_prefix, self.format.database)
        if "ts_us" in probe:  # Debezium 3's source time in finer units
            varying["ts_us"] = numbers(block.source_ts_us)
            varying["ts_ns"] = numbers(pc.multiply_checked(block.source_ts_us, 1000))
        items: list[Any] = []
        for index, (name, value) in enumerate(probe.items()):
            items.append(("{" if index == 0 else ",") + dumps(name) + ":")
            items.append(varying[name] if name in _VARYING_SOURCE else dumps(value))
        items.append("}")
        return parts(*items)
