"""Debezium's names: data change topics (its ``TopicNamingStrategy``), ``schema.name.adjustment.mode`` and
``field.name.adjustment.mode``.

``avro`` replaces every character Avro does not allow with ``_``; ``avro_unicode`` replaces it with
``_uXXXX`` (its UTF-16 code unit in hexadecimal), so distinct names stay distinct; ``none`` keeps names.
Schema names are Avro full names (dot-separated namespaces); field names are single Avro names.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from functools import lru_cache

logger = logging.getLogger(__name__)

MODES = ("none", "avro", "avro_unicode")


def _valid(char: str, first: bool) -> bool:
    if "A" <= char <= "Z" or "a" <= char <= "z" or char == "_":
        return True
    return not first and "0" <= char <= "9"


def _replacement(char: str, mode: str) -> str:
    if mode == "avro":
        return "_"
    units = char.encode("utf-16-be")
    return "".join(f"_u{int.from_bytes(units[i:i + 2], 'big'):04x}" for i in range(0, len(units), 2))


def adjust_name(name: str, mode: str) -> str:
    """Adjust one Avro name (a field name, or one dot-separated part of a schema name)."""
    if mode == "none" or not name:
        return name
    return "".join(char if _valid(char, index == 0) else _replacement(char, mode) for index, char in enumerate(name))


def adjust_schema_name(fullname: str, mode: str) -> str:
    """Adjust a schema full name such as ``server1.testDB.dbo.customers.Value`` part by part."""
    if mode == "none":
        return fullname
    return ".".join(adjust_name(part, mode) for part in fullname.split("."))


def adjuster(mode: str) -> Callable[[str], str]:
    return lambda name: adjust_name(name, mode)


# Data change topics, as Debezium's default ``topic.naming.strategy`` (``io.debezium.schema.SchemaTopicNamingStrategy``)
# names them, in 2.5.2 and 3.6.0 alike (debezium/debezium, debezium-core/src/main/java/io/debezium/schema/
# AbstractTopicNamingStrategy.java at v2.5.2.Final, debezium-connector-common/... at v3.6.0.Final):
#
#   - ``getSchemaPartsTopicName``: ``mkString([prefix, *parts], delimiter)``, which leaves out every null or blank
#     part (``Strings.isNullOrBlank``: empty after Java's ``String.trim``, which strips the characters up to U+0020);
#     the parts are the schema and the table (``TableId.schemaParts``), and the database first where the connector
#     runs in multi-partition mode (SQL Server: ``TableId.parts``); ``topic.delimiter`` defaults to ``.``.
#   - ``sanitizedTopicName``: every ``char`` (a UTF-16 code unit: a character beyond U+FFFF is two) that is not
#     ``isValidCharacter``, ``[A-Za-z0-9._-]``, becomes ``ReplacementFunction.UNDERSCORE_REPLACEMENT``'s ``_``. Then
#     a name longer than ``TopicNamingStrategy.MAX_NAME_LENGTH`` (249) is cut to 249 characters; else a name ``.``
#     becomes ``_`` and ``..`` becomes ``__`` (Kafka refuses both names, and names longer than 249). When anything
#     changed, Debezium logs "Topic '{}' name isn't a valid topic name, replacing it with '{}'." at WARN.
#
# Debezium's MySqlTopicNamingStrategyTest (v2.5.2.Final) checks "." -> "_", ".." -> "__", a 263-character name cut
# to 249, and the table ``test_db.dbz#4180#2`` -> ``mysql-server-1.test_db.dbz_4180_2`` (tests/unit/test_topic_names.py
# has them). Debezium's record schema names (``<topic>.Key``, ``.Value``, ``.Envelope``) start with the sanitised
# topic (``TableSchemaBuilder``: ``recordSchemaPrefix``, which is ``dataChangeTopic``);
# tests/integration/test_hostile_names.py compares both with Debezium 2.5.2's and 3.6.0's own records.
MAX_TOPIC_NAME_LENGTH = 249
_INVALID_TOPIC_CHARACTER = re.compile(r"[^A-Za-z0-9._-]")
_JAVA_TRIMMED = "".join(chr(code) for code in range(0x21))  # what Java's String.trim strips from either end


def _replacement_units(match: re.Match[str]) -> str:
    return "__" if ord(match.group(0)) > 0xFFFF else "_"  # one "_" per UTF-16 code unit, as Java counts chars


@lru_cache(maxsize=10000)  # Debezium keeps its topic names in a cache of topic.cache.size (10000) entries
def sanitized_topic_name(name: str) -> str:
    """``name`` as a Kafka topic name, byte for byte as Debezium's ``AbstractTopicNamingStrategy.sanitizedTopicName``
    makes it (see above); logs a warning, once per name and process, when it is not one already."""
    sanitized = _INVALID_TOPIC_CHARACTER.sub(_replacement_units, name)
    if len(sanitized) > MAX_TOPIC_NAME_LENGTH:
        sanitized = sanitized[:MAX_TOPIC_NAME_LENGTH]
    elif sanitized in (".", ".."):
        sanitized = "_" * len(sanitized)
    if sanitized != name:
        logger.warning("Topic '%s' name isn't a valid topic name, replacing it with '%s'.", name, sanitized)
    return sanitized


def data_change_topic(prefix: str, parts: Sequence[str], delimiter: str = ".") -> str:
    """A table's topic: ``<prefix>.<part>...`` without its blank parts, sanitised (``SchemaTopicNamingStrategy``)."""
    return sanitized_topic_name(delimiter.join(part for part in (prefix, *parts) if part.strip(_JAVA_TRIMMED)))
