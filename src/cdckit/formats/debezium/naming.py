"""Debezium's ``schema.name.adjustment.mode`` and ``field.name.adjustment.mode``.

``avro`` replaces every character Avro does not allow with ``_``; ``avro_unicode`` replaces it with
``_uXXXX`` (its UTF-16 code unit in hexadecimal), so distinct names stay distinct; ``none`` keeps names.
Schema names are Avro full names (dot-separated namespaces); field names are single Avro names.
"""

from __future__ import annotations

from collections.abc import Callable

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
