"""Column DEFAULTs as Debezium 2.5.2's PostgreSQL connector reads them (``PostgresDefaultValueConverter``).

Debezium does not evaluate a DEFAULT expression: it reads the text ``pg_get_expr(adbin, adrelid)`` gives (through
pgjdbc's ``getColumns``), picks a literal out of it with a few patterns, parses that as a Java value of the
column's type and converts it as it converts the column's values. Whatever fails along the way gives no default.
Its quirks are kept on purpose, as they are part of the messages:

* the literal is the text between the first pair of single quotes (``'it''s'::text`` gives ``it``);
* a function call (``now()``, ``nextval('s'::regclass)``, ``md5('x'::text)``) or CURRENT_TIMESTAMP and its kin
  gives the type's placeholder instead (0, '', the epoch, the zero UUID, ...);
* anything else without a quote is taken as it is (``CURRENT_USER`` for a text column gives "CURRENT_USER",
  ``(1 = 1)`` for a boolean gives false, ``(1 + 2)`` for an integer gives none);
* only the types named in ``_PLACEHOLDERS`` and enums have a parser; bytea, money, arrays, domains and the rest
  have no default.

``default_text`` turns an expression into the PostgreSQL text of the value Debezium ends up with, so the column's
own value converter (``postgres_types``) finishes the job, mode by mode.
"""

from __future__ import annotations

import re
import struct
import uuid
from decimal import Decimal

from cdckit.formats.debezium import pg_values as pv

__all__ = ["default_text"]

# Java's '.' matches anything but a line terminator; Python's only leaves out '\n'.
_JAVA_DOT = "[^\n\r\u0085\u2028\u2029]"
_LITERAL = re.compile(f"'({_JAVA_DOT}*?)'")
_FUNCTION = re.compile(f"^[(]?[A-Za-z0-9_.]+\\((?:{_JAVA_DOT}+(?:, ?{_JAVA_DOT}+)*)?\\)")
_CURRENT_DATE_TIMES = frozenset({"current_timestamp", "current_time", "current_date", "localtime", "localtimestamp"})

# The types Debezium has a default parser for, each with the value a generated default (a function call) stands
# for, written as PostgreSQL prints that value (Debezium's own placeholders, e.g. '00:00' or 'epoch', mean these).
_PLACEHOLDERS: dict[str, str] = {
    "bit": "00", "varbit": "0", "bool": "false", "bpchar": "", "varchar": "", "text": "",
    "numeric": "0.0", "float4": "0.0", "float8": "0.0", "int2": "0", "int4": "0", "int8": "0",
    "json": "{}", "jsonb": "{}", "xml": "", "uuid": "00000000-0000-0000-0000-000000000000",
    "date": "1970-01-01", "time": "00:00:00", "timestamp": "1970-01-01 00:00:00",
    "timestamptz": "1970-01-01 00:00:00+00", "interval": "00:00:00",
}
# Types whose expression Debezium trims (String.trim) before parsing it.
_TRIMMED = frozenset({"bit", "varbit", "bool", "numeric", "float4", "float8", "int2", "int4", "int8", "uuid", "date",
                      "time", "timestamp", "timestamptz", "interval"})
# Types whose parser reads an expression starting with 'NULL::' as no default.
_NULL_AWARE = frozenset({"bool", "numeric", "float4", "float8", "int2", "int4", "int8"})
_INTEGER_BITS = {"int2": 16, "int4": 32, "int8": 64}

_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_JAVA_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_JAVA_FLOAT = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_UUID = re.compile(r"([0-9a-fA-F]{1,8})-([0-9a-fA-F]{1,4})-([0-9a-fA-F]{1,4})-([0-9a-fA-F]{1,4})-"
                        r"([0-9a-fA-F]{1,12})")
_UUID_WIDTHS = (32, 16, 16, 16, 48)


_JAVA_WHITESPACE = "".join(chr(code) for code in range(33))  # what String.trim removes: every char up to ' '


def _java_trim(text: str) -> str:
    return text.strip(_JAVA_WHITESPACE)


def _literal(expression: str, placeholder: str) -> str | None:
    """Debezium's extractDefault: the placeholder for a generated value, the first quoted literal, else the
    expression itself (None for 'NULL::...')."""
    if _FUNCTION.search(expression) or expression.lower() in _CURRENT_DATE_TIMES:
        return placeholder
    if "'" not in expression:
        return None if expression.startswith("NULL::") else expression
    match = _LITERAL.search(expression)
    if match is None:
        raise ValueError(f"no literal in default expression {expression!r}")
    return match.group(1)


def _enum_literal(type_name: str, expression: str) -> str | None:
    """Debezium's extractEnumDefault: 'label'::type_name, the label as written (a doubled quote stays doubled)."""
    suffix = "::" + type_name
    if not expression.endswith(suffix):
        return None
    quoted = expression[: -len(suffix)]
    if len(quoted) < 2 or not (quoted.startswith("'") and quoted.endswith("'")):
        return None
    return quoted[1:-1]


def _integer(text: str, bits: int) -> str:
    """Short/Integer/Long.parseLong: plain digits in range, else no default."""
    if not _JAVA_INTEGER.fullmatch(text) or not -(1 << (bits - 1)) <= int(text) < 1 << (bits - 1):
        raise ValueError(f"{text!r} is not a {bits}-bit integer")
    return str(int(text))


def _decimal(text: str, scale: int | None) -> str:
    """new BigDecimal(text), its scale raised to the column's (Debezium's withScaleAdjustedIfNeeded), in plain
    notation as BigDecimal.toPlainString writes it."""
    if not _JAVA_DECIMAL.fullmatch(text):
        raise ValueError(f"{text!r} is not a decimal number")
    value = Decimal(text)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    digits = max(-exponent, scale or 0, 0)
    return pv.plain_decimal(pv.unscaled(value, digits), digits, strip=False)


def _float(text: str, single: bool) -> str:
    """Float/Double.parseFloat: the value rounded to the Java type, in its shortest round-trip digits."""
    if not _JAVA_FLOAT.fullmatch(text):
        raise ValueError(f"{text!r} is not a floating point number")
    value = float(text.rstrip("fFdD"))
    if not single or value != value or value in (float("inf"), float("-inf")):
        return repr(value).replace("inf", "Infinity").replace("nan", "NaN")
    try:
        rounded = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return "-Infinity" if value < 0 else "Infinity"
    for digits in range(1, 10):
        candidate = f"{rounded:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(candidate)))[0] == rounded:
            return candidate
    return repr(rounded)


def _uuid(text: str) -> str:
    """UUID.fromString: five groups of hex digits, each at most its width, printed canonically."""
    match = _JAVA_UUID.fullmatch(text)
    if match is None or len(text) > 36:
        raise ValueError(f"{text!r} is not a UUID")
    number = 0
    for group, width in zip(match.groups(), _UUID_WIDTHS, strict=True):
        number = (number << width) | int(group, 16)
    return str(uuid.UUID(int=number))


def _typed(type_name: str, literal: str, scale: int | None) -> str:
    """The literal as the Java value Debezium's parser makes of it, written back as PostgreSQL text."""
    if type_name in _INTEGER_BITS:
        return _integer(literal, _INTEGER_BITS[type_name])
    if type_name == "numeric":
        return _decimal(literal, scale)
    if type_name in ("float4", "float8"):
        return _float(literal, single=type_name == "float4")
    if type_name == "bool":
        return "true" if literal.lower() == "true" else "false"  # Boolean.parseBoolean
    if type_name == "uuid":
        return _uuid(literal)
    if type_name == "time" and literal == "24:00:00":
        return "23:59:59.999999"  # pgjdbc reads it as LocalTime.MAX
    if type_name == "timestamptz" and literal in ("infinity", "-infinity"):
        # pgjdbc reads it as OffsetDateTime.MAX / MIN, which Debezium cannot move to UTC
        raise ValueError(f"timestamptz {literal!r} cannot be moved to UTC")
    return literal


def default_text(type_name: str, expression: str | None, *, enum: bool = False, scale: int | None = None) -> str | None:
    """The PostgreSQL text of the value Debezium 2.5.2 makes of a column's DEFAULT expression, or None when it
    makes none. ``type_name`` is the column's pg_type name (an array's starts with '_'), ``expression`` what
    ``pg_get_expr`` gives for it, ``enum`` whether the type is an enum, ``scale`` a numeric column's declared scale.

    >>> default_text("int4", "'-5'::integer")
    '-5'
    >>> default_text("text", "'it''s'::text")
    'it'
    >>> default_text("timestamptz", "now()")
    '1970-01-01 00:00:00+00'
    """
    if expression is None:
        return None
    if enum and not type_name.startswith("_"):
        return _enum_literal(type_name, expression)
    placeholder = _PLACEHOLDERS.get(type_name)
    if placeholder is None:
        return None
    if type_name in _TRIMMED:
        expression = _java_trim(expression)
    if type_name in _NULL_AWARE and expression.startswith("NULL::"):
        return None
    try:
        literal = _literal(expression, placeholder)
        if literal is None:
            return None
        if type_name == "bit" and len(literal) == 1:
            return "1" if literal == "1" else "0"  # Debezium reads a one-bit literal as a boolean
        return _typed(type_name, literal, scale)
    except ValueError:
        return None
