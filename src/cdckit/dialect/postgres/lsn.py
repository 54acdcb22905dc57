"""PostgreSQL log sequence numbers: ``'16/B374D848'`` <-> 64-bit integers."""

from __future__ import annotations


def parse_lsn(text: str) -> int:
    """``parse_lsn("0/16B3748") == 23803720``."""
    high, _, low = text.partition("/")
    if not _ or not high or not low:
        raise ValueError(f"{text!r} is not a PostgreSQL LSN (expected the form 'X/Y' in hexadecimal)")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(value: int) -> str:
    """``format_lsn(23803720) == "0/16B3748"``."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
