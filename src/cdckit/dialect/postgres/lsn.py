"""PostgreSQL log sequence numbers: ``'16/B374D848'`` <-> 64-bit integers."""

from __future__ import annotations

import re

_LSN = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")


def parse_lsn(text: str) -> int:
    """``parse_lsn("0/16B3748") == 23803720``."""
    match = _LSN.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a PostgreSQL LSN (expected the form 'X/Y', two hexadecimal numbers of "
                         f"at most 8 digits)")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def format_lsn(value: int) -> str:
    """``format_lsn(23803720) == "0/16B3748"``."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
