"""Column masking, hashing and truncation (``column.mask.*``, ``column.truncate.*``), as Debezium applies them.

Only character columns are touched, after their value is converted, as Debezium's ``MaskStrings`` and
``TruncateStrings`` do. Lengths count UTF-16 code units, like Java strings.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ValueMapper = Callable[[Any], Any]

_MASK_WITH = re.compile(r"^column\.mask\.with\.(\d+)\.chars$")
_TRUNCATE_TO = re.compile(r"^column\.truncate\.to\.(\d+)\.chars$")
_MASK_HASH = re.compile(r"^column\.mask\.hash\.(?:(v2)\.)?(.+?)\.with\.salt\.(.+)$")
PATTERN_PROPERTIES = (_MASK_WITH, _TRUNCATE_TO, _MASK_HASH)

# Java MessageDigest names -> hashlib names.
_ALGORITHMS = {"MD2": None, "MD5": "md5", "SHA-1": "sha1", "SHA-224": "sha224", "SHA-256": "sha256",
               "SHA-384": "sha384", "SHA-512": "sha512", "SHA-512/224": "sha512_224", "SHA-512/256": "sha512_256",
               "SHA3-224": "sha3_224", "SHA3-256": "sha3_256", "SHA3-384": "sha3_384", "SHA3-512": "sha3_512"}


@dataclass(frozen=True)
class ColumnRule:
    patterns: tuple[str, ...]
    kind: str  # mask | truncate | hash
    length: int = 0
    algorithm: str = ""
    salt: str = ""
    version: int = 1

    def matches(self, qualified_column: str) -> bool:
        return any(re.fullmatch(p, qualified_column, flags=re.IGNORECASE) for p in self.patterns)


@dataclass(frozen=True)
class ColumnMapping:
    """What rules do to one column: a value mapper and extra schema parameters."""

    mapper: ValueMapper | None = None
    parameters: dict[str, str] = field(default_factory=dict)


def is_pattern_property(key: str) -> bool:
    return any(pattern.match(key) for pattern in PATTERN_PROPERTIES)


def validate_rule(key: str, value: str) -> str | None:
    """A problem with one masking/truncation property, or None."""
    truncate = _TRUNCATE_TO.match(key)
    sized = truncate or _MASK_WITH.match(key)
    if sized and (len(sized.group(1).lstrip("0")) > 10 or int(sized.group(1)) > 2**31 - 1):
        return f"{key}: the length must be at most 2147483647 characters (Java's int)"
    if truncate and int(truncate.group(1)) <= 0:
        return f"{key}: the length must be a positive number of characters"
    hashed = _MASK_HASH.match(key)
    if hashed and _ALGORITHMS.get(hashed.group(2)) is None:
        return (f"{key}: hash algorithm {hashed.group(2)!r} is not supported; use one of "
                f"{', '.join(name for name, impl in _ALGORITHMS.items() if impl)}")
    for pattern in _split(value):
        try:
            re.compile(pattern)
        except (re.error, OverflowError, RecursionError) as exc:  # a repetition past 2^32, groups nested deep
            return f"{key} entry {pattern!r} is not a valid regular expression ({exc})"
    return None


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def parse_rules(options: Mapping[str, str]) -> tuple[ColumnRule, ...]:
    rules = []
    for key, value in options.items():
        patterns = _split(value)
        if (mask := _MASK_WITH.match(key)) is not None:
            rules.append(ColumnRule(patterns, "mask", length=int(mask.group(1))))
        elif (truncate := _TRUNCATE_TO.match(key)) is not None:
            rules.append(ColumnRule(patterns, "truncate", length=int(truncate.group(1))))
        elif (hashed := _MASK_HASH.match(key)) is not None:
            rules.append(ColumnRule(patterns, "hash", algorithm=hashed.group(2), salt=hashed.group(3),
                                    version=2 if hashed.group(1) else 1))
    return tuple(rules)


def java_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def java_substring(text: str, length: int) -> str:
    units = text.encode("utf-16-le")[: 2 * length]
    return units.decode("utf-16-le", errors="ignore")


def _java_serialized_string(text: str) -> bytes:
    """``ObjectOutputStream.writeObject(String)``: stream header, TC_STRING or TC_LONGSTRING, modified UTF-8."""
    body = bytearray()
    for char in text:
        code = ord(char)
        if 0 < code < 0x80:
            body.append(code)
        elif code < 0x800:  # includes U+0000, written as two bytes in modified UTF-8
            body += bytes([0xC0 | (code >> 6), 0x80 | (code & 0x3F)])
        elif code < 0x10000:
            body += bytes([0xE0 | (code >> 12), 0x80 | ((code >> 6) & 0x3F), 0x80 | (code & 0x3F)])
        else:  # a supplementary character: each UTF-16 surrogate as three bytes
            for unit in (0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)):
                body += bytes([0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)])
    header = b"\xac\xed\x00\x05"
    if len(body) <= 0xFFFF:
        return header + b"\x74" + len(body).to_bytes(2, "big") + bytes(body)
    return header + b"\x7c" + len(body).to_bytes(8, "big") + bytes(body)


def _hasher(rule: ColumnRule) -> ValueMapper:
    implementation = _ALGORITHMS[rule.algorithm]
    assert implementation is not None
    salt = rule.salt.encode("utf-8")

    def digest(value: Any) -> Any:
        if value is None:
            return None
        text = str(value)
        data = _java_serialized_string(text) if rule.version == 1 else text.encode("utf-8")
        return hashlib.new(implementation, salt + data).hexdigest()

    return digest


def _constant(mask: str) -> ValueMapper:
    return lambda _value: mask


def _truncator(length: int) -> ValueMapper:
    return lambda value: java_substring(value, length) if isinstance(value, str) else value


def column_mapping(rules: tuple[ColumnRule, ...], qualified_column: str, is_character: bool,
                   column_length: int) -> ColumnMapping:
    """Combine every rule matching the column (``schema.table.column``) into one mapper."""
    if not is_character:
        return ColumnMapping()
    steps: list[ValueMapper] = []
    parameters: dict[str, str] = {}
    for rule in rules:
        if not rule.matches(qualified_column):
            continue
        if rule.kind == "mask":
            steps.append(_constant("*" * rule.length))  # Debezium masks nulls too (MaskingValueConverter)
            parameters["masked"] = "true"
        elif rule.kind == "truncate" and (column_length < 0 or column_length > rule.length):
            steps.append(_truncator(rule.length))
            parameters["truncateLength"] = str(rule.length)
        elif rule.kind == "hash":
            steps.append(_hasher(rule))
            if column_length > 0:  # the pseudonym is shortened to the column's length
                steps.append(_truncator(column_length))
            parameters["masked"] = "true"
    if not steps:
        return ColumnMapping()

    def apply(value: Any) -> Any:
        for step in steps:
            value = step(value)
        return value

    return ColumnMapping(apply, parameters)


def parse_message_key_columns(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``inventory.customers:pk1,pk2;(.*).purchaseorders:pk3`` -> ((table regex, columns), ...)."""
    entries = []
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        table, _, columns = entry.rpartition(":")
        if not table or not columns.strip():
            raise ValueError(f"message.key.columns entry {entry!r} is not of the form <table regex>:<col>,<col>")
        entries.append((table.strip(), tuple(c.strip() for c in columns.split(",") if c.strip())))
    return tuple(entries)


def emitted_key_columns(entries: tuple[tuple[str, tuple[str, ...]], ...], qualified: str,
                        primary_key: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The key columns a table's events carry: those of the first ``message.key.columns`` entry (``entries``, as
    ``parse_message_key_columns`` reads them) whose pattern matches ``schema.table``, else its primary key (none:
    a null key)."""
    for pattern, columns in entries:
        if re.fullmatch(pattern, qualified, flags=re.IGNORECASE):
            return columns
    return tuple(primary_key)
