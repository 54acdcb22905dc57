"""What Debezium 2.5.2 writes for a value PostgreSQL did not send: an unchanged TOASTed column of an UPDATE.

pgoutput leaves a large value out of an UPDATE's new tuple when the UPDATE did not change it (and the old tuple
does not carry it, as with REPLICA IDENTITY FULL). Debezium then writes its placeholder, ``unavailable.value.
placeholder`` (``__debezium_unavailable_value``), in the column's own type (UnchangedToastedPlaceholder and
PostgresValueConverter), measured with the project's parity corpus:

- character, JSON and XML types: the placeholder text;
- ``bytea``: the placeholder's bytes with binary.handling.mode=bytes; null with base64, base64-url-safe and hex;
- ``text[]``, ``varchar[]``, ``json[]``, ``jsonb[]``: a one-element array of the placeholder text;
- ``integer[]``, ``bigint[]``: the placeholder's bytes as numbers (95, 95, 100, ...); ``date[]`` the same, except
  with time.precision.mode=connect (null);
- ``uuid[]``: a one-element array of the name-based UUID of the placeholder's bytes;
- ``bytea[]``: a one-element array of the placeholder's bytes with binary.handling.mode=bytes, else null;
- ``hstore``: ``{placeholder: placeholder}`` with hstore.handling.mode=map, else null;
- anything else (``numeric[]`` for one): null.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from cdckit.formats.debezium.pg_values import b64
from cdckit.formats.debezium.postgres_types import ColumnType, MappingSettings

PLACEHOLDER = "__debezium_unavailable_value"
_BYTES = PLACEHOLDER.encode("ascii")
_TEXTS = frozenset({"text", "varchar", "bpchar", "char", "name", "citext", "json", "jsonb", "xml"})
_TEXT_ARRAYS = frozenset({"_text", "_varchar", "_json", "_jsonb"})
_NUMBER_ARRAYS = frozenset({"_int4", "_int8"})
# Java's UUID.nameUUIDFromBytes: an MD5 name-based (version 3) UUID.
_PLACEHOLDER_UUID = str(uuid.UUID(bytes=hashlib.md5(_BYTES, usedforsecurity=False).digest(), version=3))


def unavailable_value(column: ColumnType, settings: MappingSettings) -> Any:
    """The JSON-ready value Debezium writes for ``column``'s unchanged TOASTed value (None: null)."""
    kind = column.type_name
    binary_bytes = settings.binary_handling_mode == "bytes"
    if kind in _TEXTS:
        return PLACEHOLDER
    if kind in _TEXT_ARRAYS:
        return [PLACEHOLDER]
    if kind in _NUMBER_ARRAYS or (kind == "_date" and settings.time_precision_mode != "connect"):
        return list(_BYTES)
    if kind == "_uuid":
        return [_PLACEHOLDER_UUID]
    if kind == "bytea" and binary_bytes:
        return b64(_BYTES)
    if kind == "_bytea" and binary_bytes:
        return [b64(_BYTES)]
    if kind == "hstore" and settings.hstore_handling_mode == "map":
        return {PLACEHOLDER: PLACEHOLDER}
    return None
