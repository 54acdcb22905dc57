"""Exact parsers for PostgreSQL text output (DateStyle ISO, IntervalStyle postgres, lc_monetary C).

Pure functions, no floats in temporal arithmetic: dates are proleptic Gregorian day numbers (year 0 = 1 BC, as
both PostgreSQL and java.time count), instants are integer microseconds since 1970-01-01T00:00:00Z.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from collections.abc import Callable
from datetime import date as _date
from decimal import ROUND_HALF_EVEN, Decimal

MICROS_PER_SECOND = 1_000_000
MICROS_PER_DAY = 86_400 * MICROS_PER_SECOND
# MicroDuration's month: 365.25 / 12 = 30.4375 days = 2_629_800 s exactly, so integer math is exact.
MICROS_PER_AVG_MONTH = 2_629_800 * MICROS_PER_SECOND
POSITIVE_INFINITY_TIMESTAMP = 9223372036825200000  # org.postgresql.PGStatement.DATE_POSITIVE_INFINITY
NEGATIVE_INFINITY_TIMESTAMP = -9223372036832400000  # org.postgresql.PGStatement.DATE_NEGATIVE_INFINITY
JAVA_LONG_MIN, JAVA_LONG_MAX = -(2**63), 2**63 - 1
# A date 'infinity' as Debezium 2.5.2 writes it. Read through JDBC (snapshot, and array elements everywhere):
# java.sql.Date(PGStatement.DATE_POSITIVE_INFINITY).toLocalDate().toEpochDay(), cast to a Java int.
JDBC_POSITIVE_INFINITY_DAYS = -622191234
JDBC_NEGATIVE_INFINITY_DAYS = -625821272
# Decoded from pgoutput (stream): PostgresValueConverter.POSITIVE_INFINITY_LOCAL_DATE, -5877611-06-21 (and
# NEGATIVE_INFINITY_LOCAL_DATE, one day later), in epoch days.
STREAM_POSITIVE_INFINITY_DAYS = -2147472692
STREAM_NEGATIVE_INFINITY_DAYS = -2147472691

_DATE = re.compile(r"(\d{4,})-(\d{2})-(\d{2})")
_TIME = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"
_OFFSET = r"([+-])(\d{2})(?::(\d{2}))?(?::(\d{2}))?"
_TIME_RE = re.compile(_TIME)
_TIMETZ_RE = re.compile(_TIME + _OFFSET)
_TIMESTAMP_RE = re.compile(_DATE.pattern + "[ T]" + _TIME + "( BC)?")
_TIMESTAMPTZ_RE = re.compile(_DATE.pattern + "[ T]" + _TIME + _OFFSET + "( BC)?")
_DATE_RE = re.compile(_DATE.pattern + "( BC)?")
_INTERVAL_UNIT = re.compile(r"([+-]?\d+) (year|mon|day)s?")
_INTERVAL_TIME = re.compile(r"([+-])?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year numbering)."""
    y = year - (1 if month <= 2 else 0)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """Inverse of days_from_civil."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month, day


_JULIAN_EPOCH_DAY = 2440588  # the Julian day number of 1970-01-01
_GREGORIAN_CUTOVER = (1582, 10, 15)


def days_from_julian(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a Julian calendar date (astronomical year numbering)."""
    a = (14 - month) // 12
    y = year + 4800 - a
    m = month + 12 * a - 3
    return day + (153 * m + 2) // 5 + 365 * y + y // 4 - 32083 - _JULIAN_EPOCH_DAY


def _days(year: str, month: str, day: str, bc: str | None, jdbc: bool = False) -> int:
    """Epoch days of a date label. With ``jdbc``, as pgjdbc's java.sql.Timestamp reads it: labels before the
    Gregorian cutover (1582-10-15) are Julian calendar dates, as java.util.GregorianCalendar counts them."""
    y, m, d = int(year), int(month), int(day)
    if bc:
        y = 1 - y
    if not 1 <= m <= 12 or not 1 <= d <= 31 or civil_from_days(days_from_civil(y, m, d)) != (y, m, d):
        raise ValueError(f"invalid date {year}-{month}-{day}")
    if jdbc and (y, m, d) < _GREGORIAN_CUTOVER:
        return days_from_julian(y, m, d)
    return days_from_civil(y, m, d)


def _micros_of_day(hour: str, minute: str, second: str, fraction: str | None) -> int:
    h, m, s = int(hour), int(minute), int(second)
    micros = int((fraction or "").ljust(6, "0"))
    total = ((h * 60 + m) * 60 + s) * MICROS_PER_SECOND + micros
    if m > 59 or s > 59 or total > MICROS_PER_DAY:  # '24:00:00' is valid in PostgreSQL
        raise ValueError(f"invalid time {hour}:{minute}:{second}")
    return total


def _offset_seconds(sign: str, hours: str, minutes: str | None, seconds: str | None) -> int:
    total = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    return -total if sign == "-" else total


def _match(pattern: re.Pattern[str], text: str, what: str) -> re.Match[str]:
    match = pattern.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"cannot parse {what} value {text!r}")
    return match


def parse_date(text: str) -> int:
    """'2024-02-29' / '0044-03-15 BC' -> days since epoch."""
    g = _match(_DATE_RE, text, "date").groups()
    return _days(g[0], g[1], g[2], g[3])


def parse_time(text: str) -> int:
    """'13:13:16.945104' -> microseconds past midnight ('24:00:00' -> 86_400_000_000)."""
    g = _match(_TIME_RE, text, "time").groups()
    return _micros_of_day(g[0], g[1], g[2], g[3])


def parse_timestamp(text: str, jdbc: bool = False) -> int:
    """'2018-06-20 13:13:16.945104' (read as UTC) -> microseconds since epoch (``jdbc``: see ``_days``)."""
    g = _match(_TIMESTAMP_RE, text, "timestamp").groups()
    return _days(g[0], g[1], g[2], g[7], jdbc) * MICROS_PER_DAY + _micros_of_day(g[3], g[4], g[5], g[6])


def parse_timestamptz(text: str, jdbc: bool = False) -> int:
    """'2018-06-20 15:13:16.945104+02' -> microseconds since epoch (UTC instant; ``jdbc``: see ``_days``)."""
    g = _match(_TIMESTAMPTZ_RE, text, "timestamptz").groups()
    local = _days(g[0], g[1], g[2], g[11], jdbc) * MICROS_PER_DAY + _micros_of_day(g[3], g[4], g[5], g[6])
    return local - _offset_seconds(g[7], g[8], g[9], g[10]) * MICROS_PER_SECOND


def parse_timetz(text: str) -> int:
    """'10:15:30.123+02' -> microseconds past midnight UTC, wrapped into [0, 24h)."""
    g = _match(_TIMETZ_RE, text, "timetz").groups()
    local = _micros_of_day(g[0], g[1], g[2], g[3])
    return (local - _offset_seconds(g[4], g[5], g[6], g[7]) * MICROS_PER_SECOND) % MICROS_PER_DAY


_EPOCH_ORDINAL = 719_163  # datetime.date(1970, 1, 1).toordinal()


def _date_days(text: str, infinities: tuple[int, int]) -> int:
    # The common case, 'YYYY-MM-DD' in years 1-9999, through the C date parser; anything else (BC, years past
    # 9999, infinities, bad input) takes the exact parser below.
    if len(text) == 10 and text[4] == "-" and text[7] == "-" and text[5] != "W":
        try:
            return _date.fromisoformat(text).toordinal() - _EPOCH_ORDINAL
        except ValueError:
            pass
    stripped = text.strip()
    if stripped == "infinity":
        return infinities[0]
    if stripped == "-infinity":
        return infinities[1]
    return parse_date(text)


def date_days(text: str) -> int:
    """A date decoded from the stream -> epoch days (the infinities as Debezium's stream writes them)."""
    return _date_days(text, (STREAM_POSITIVE_INFINITY_DAYS, STREAM_NEGATIVE_INFINITY_DAYS))


def jdbc_date_days(text: str) -> int:
    """A date Debezium reads through JDBC (snapshot rows, array elements) -> epoch days. java.sql.Date's
    toLocalDate() keeps the label but takes the year of era, so '0044-03-15 BC' becomes 0044-03-15."""
    stripped = text.strip()
    if stripped.endswith(" BC"):
        stripped = stripped[:-3]
    return _date_days(stripped, (JDBC_POSITIVE_INFINITY_DAYS, JDBC_NEGATIVE_INFINITY_DAYS))


def java_long(value: float) -> int:
    """Java's (long) cast of a double: toward zero, saturated at the long range, NaN -> 0."""
    if value != value:
        return 0
    if value >= 2.0**63:
        return JAVA_LONG_MAX
    if value <= -(2.0**63):
        return JAVA_LONG_MIN
    return int(value)


def wrap_long(value: int) -> int:
    """Java long arithmetic: the value modulo 2**64, in the signed range."""
    return (value - JAVA_LONG_MIN) % 2**64 + JAVA_LONG_MIN


def epoch_micros(micros: int) -> int:
    """Microseconds since the epoch as io.debezium.time.Conversions.toEpochMicros(Instant) computes them:
    TimeUnit.SECONDS.toMicros(epochSecond), which saturates, plus the micro of second in long arithmetic
    ('294276-12-31 23:59:59.999999' -> -9223372036853775810)."""
    seconds, fraction = divmod(micros, MICROS_PER_SECOND)
    whole = max(JAVA_LONG_MIN, min(JAVA_LONG_MAX, seconds * MICROS_PER_SECOND))
    return wrap_long(whole + fraction)


def floor_millis(micros: int) -> int:
    return micros // 1000  # floor, as java.time Instant.toEpochMilli()


def time_millis(text: str) -> int:
    return floor_millis(parse_time(text))


def timestamp_converter(to_unit: Callable[[int], int], jdbc: bool = False) -> Callable[[str], int]:
    """``to_unit`` turns epoch microseconds into the schema's unit; the infinities are pgjdbc's sentinels, read
    as microseconds (9223372036825200000, or 9223372036825200 in milliseconds). ``jdbc``: see ``_days``."""
    def convert(text: str) -> int:
        stripped = text.strip()
        if stripped == "infinity":
            return to_unit(POSITIVE_INFINITY_TIMESTAMP)
        if stripped == "-infinity":
            return to_unit(NEGATIVE_INFINITY_TIMESTAMP)
        return to_unit(parse_timestamp(stripped, jdbc))

    return convert


_UTC_TIMESTAMPTZ_RE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d*[1-9])?\+00")


def timestamptz_iso(text: str, precision: int | None = None, jdbc: bool = False) -> str:
    """A timestamptz as Debezium's ZonedTimestamp: UTC, ISO 8601. With the column's ``precision`` (0-6; plain
    timestamptz is 6), the fraction has exactly that many digits, as Debezium 2.5's PostgreSQL connector writes
    it ('2024-03-05T10:20:05.120000Z'); without it, trailing zeros are trimmed."""
    stripped = text.strip()
    if stripped in ("infinity", "-infinity"):
        return stripped
    if _UTC_TIMESTAMPTZ_RE.fullmatch(stripped) and (not jdbc or stripped[:10] >= "1582-10-15"):
        # Already UTC (cdckit's sessions use TimeZone=UTC) in years 0001-9999 with trimmed fraction digits:
        # only the separators (and the fraction's width) differ from the ISO form.
        if precision is None:
            return stripped[:10] + "T" + stripped[11:-3] + "Z"
        fraction = "." + stripped[20:-3].ljust(precision, "0") if precision > 0 else ""
        return stripped[:10] + "T" + stripped[11:19] + fraction + "Z"
    return format_iso_utc_timestamp(parse_timestamptz(stripped, jdbc), precision)


def _fraction(micros: int, width: int | None = None) -> str:
    if width is not None:
        return "." + f"{micros:06d}"[:width] if width > 0 else ""
    return "" if micros == 0 else "." + f"{micros:06d}".rstrip("0")


def _clock(micros_of_day: int, width: int | None = None) -> str:
    seconds, micros = divmod(micros_of_day, MICROS_PER_SECOND)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}{_fraction(micros, width)}"


def format_iso_utc_time(micros_of_day: int) -> str:
    """As java.time ISO_OFFSET_TIME prints an OffsetTime at UTC: '10:15:30.123Z'."""
    return _clock(micros_of_day) + "Z"


def format_iso_utc_timestamp(epoch_micros: int, width: int | None = None) -> str:
    """As java.time ISO_OFFSET_DATE_TIME prints a UTC instant: '2018-06-20T13:13:16.945104Z', '-0043-03-15T...';
    with ``width``, exactly that many fraction digits."""
    days, micros = divmod(epoch_micros, MICROS_PER_DAY)
    year, month, day = civil_from_days(days)
    if year > 9999:
        year_text = f"+{year}"
    elif year < 0:
        year_text = f"-{-year:04d}"
    else:
        year_text = f"{year:04d}"
    return f"{year_text}-{month:02d}-{day:02d}T{_clock(micros, width)}Z"


def parse_interval(text: str) -> tuple[int, int, int]:
    """IntervalStyle 'postgres' text -> (months, days, microseconds), each signed independently."""
    rest = text.strip()
    months = days = micros = 0
    time_match = _INTERVAL_TIME.search(rest)
    if time_match is not None:
        sign, hours, minutes, seconds, fraction = time_match.groups()
        micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * MICROS_PER_SECOND
        micros += int((fraction or "").ljust(6, "0"))
        micros = -micros if sign == "-" else micros
        rest = rest[: time_match.start()] + rest[time_match.end():]
    for amount, unit in _INTERVAL_UNIT.findall(rest):
        if unit == "year":
            months += 12 * int(amount)
        elif unit == "mon":
            months += int(amount)
        else:
            days += int(amount)
    if _INTERVAL_UNIT.sub("", rest).strip():
        raise ValueError(f"cannot parse interval value {text!r} (IntervalStyle must be 'postgres')")
    return months, days, micros


_JAVA_INT_MAX = 2**31 - 1


def _java_int(text: str, whole: str) -> int:
    value = int(text)
    if not -_JAVA_INT_MAX - 1 <= value <= _JAVA_INT_MAX:
        raise OverflowError(f"interval {whole!r} has a field beyond a Java int, which pgjdbc's PGInterval (and "
                            "so Debezium 2.5.2) cannot read")
    return value


def pg_interval(text: str) -> tuple[int, int, int, int, int, float]:
    """(years, months, days, hours, minutes, seconds) as pgjdbc 42.6's PGInterval reads IntervalStyle 'postgres'
    text, the seconds a double rounded to whole microseconds (PGInterval.setSeconds / getSeconds)."""
    if _INTERVAL_UNIT.sub("", _INTERVAL_TIME.sub("", text.strip())).strip():
        raise ValueError(f"cannot parse interval value {text!r} (IntervalStyle must be 'postgres')")
    years = months = days = hours = minutes = 0
    seconds = 0.0
    value_token: str | None = None
    for position, token in enumerate(text.replace("+", " ").split(), start=1):
        if position % 2 == 1:
            end_hours = token.find(":")
            if end_hours == -1:
                value_token = token
                continue
            negative = token.startswith("-")
            offset = 1 if negative else 0
            hours = _java_int(token[offset:end_hours], text)
            minutes = int(token[end_hours + 1:end_hours + 3])
            end_minutes = token.find(":", end_hours + 1)
            if end_minutes != -1:
                seconds = float(token[end_minutes + 1:])
            if negative:
                hours, minutes, seconds = -hours, -minutes, -seconds
            value_token = None
        elif value_token is not None:
            if token.startswith("year"):
                years = _java_int(value_token, text)
            elif token.startswith("mon"):
                months = _java_int(value_token, text)
            elif token.startswith("day"):
                days = _java_int(value_token, text)
    whole_seconds = int(seconds)
    micros = math.floor((seconds - whole_seconds) * 1e6 + 0.5)  # Math.round
    return years, months, days, hours, minutes, whole_seconds + micros / 1e6


_DAYS_PER_MONTH_AVG = 365.25 / 12  # MicroDuration.DAYS_PER_MONTH_AVG


def interval_micros(text: str) -> int:
    """io.debezium.time.MicroDuration.durationMicros of the PGInterval: double arithmetic with 30.4375-day
    months, then Java's (long) cast, which saturates ('178000000 years' -> 9223372036854775807)."""
    years, months, days, hours, minutes, seconds = pg_interval(text)
    number_of_days = float(years * 12 + months) * _DAYS_PER_MONTH_AVG + days
    number_of_seconds = (((number_of_days * 24 + hours) * 60) + minutes) * 60 + seconds
    return java_long(number_of_seconds * 1e6)


def interval_iso(text: str) -> str:
    """io.debezium.time.Interval.toIsoString of the PGInterval: 'P1Y2M3DT4H5M6.78S', every component printed,
    the seconds as BigDecimal.valueOf(double) without trailing zeros."""
    years, months, days, hours, minutes, seconds = pg_interval(text)
    second_text = "0" if seconds == 0 else format(Decimal(java_float_text(repr(seconds))).normalize(), "f")
    return f"P{years}Y{months}M{days}DT{hours}H{minutes}M{second_text}S"


def plain_decimal(unscaled: int, scale: int, strip: bool = True) -> str:
    """unscaled * 10**-scale as a plain string; with strip, trailing fractional zeros are dropped."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    whole, frac = (digits[:-scale], digits[-scale:]) if scale > 0 else (digits, "")
    if strip:
        frac = frac.rstrip("0")
    return ("-" if unscaled < 0 else "") + whole + ("." + frac if frac else "")


def unscaled(value: Decimal, scale: int) -> int:
    """Exact unscaled integer of a finite Decimal at the given scale (ROUND_HALF_UP if digits are dropped)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        result: int = coefficient * 10**shift
    else:
        quotient, remainder = divmod(coefficient, 10**-shift)
        result = quotient + (1 if 2 * remainder >= 10**-shift else 0)
    return -result if sign else result


def variable_scale(value: Decimal) -> tuple[int, int]:
    """(scale, unscaled) after BigDecimal.stripTrailingZeros(), negative scales clamped to 0 (as Debezium)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digits)) or "0")
    while exponent < 0 and coefficient % 10 == 0:
        coefficient //= 10
        exponent += 1
    if exponent > 0:
        coefficient *= 10**exponent
        exponent = 0
    return -exponent, -coefficient if sign else coefficient


def twos_complement(value: int) -> bytes:
    """Minimal big-endian two's-complement bytes, as java.math.BigInteger.toByteArray()."""
    bits = value.bit_length() if value >= 0 else (~value).bit_length()
    return value.to_bytes(bits // 8 + 1, "big", signed=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_money(text: str) -> Decimal:
    """'$1,234.56', '-$1.00', '($1.00)' (lc_monetary C) -> Decimal."""
    raw = text.strip()
    negative = raw.startswith("-") or (raw.startswith("(") and raw.endswith(")"))
    cleaned = raw.strip("-()").replace("$", "").replace(",", "").strip()
    value = Decimal(cleaned)
    if not value.is_finite():
        raise ValueError(f"cannot parse money value {text!r}")
    return -value if negative else value


def parse_bytea(text: str) -> bytes:
    """bytea text output: hex format '\\x0a0b' or the legacy escape format."""
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] != "\\":
            out += text[i].encode("utf-8")
            i += 1
        elif text[i + 1: i + 2] == "\\":
            out.append(0x5C)
            i += 2
        else:
            out.append(int(text[i + 1: i + 4], 8))
            i += 4
    return bytes(out)


BINARY_ENCODERS: dict[str, Callable[[bytes], str]] = {
    "bytes": b64,  # JsonConverter writes bytes as standard base64
    "base64": b64,
    "base64-url-safe": lambda data: base64.urlsafe_b64encode(data).decode("ascii"),
    "hex": lambda data: data.hex(),
}


def bits_little_endian(text: str) -> bytes:
    """'101' -> bytes of BitSet(bit i = char len-1-i).toByteArray(): minimal little-endian (b'0000' -> b'',
    and so is an empty bit varying)."""
    number = int(text, 2) if text else 0
    return number.to_bytes((number.bit_length() + 7) // 8, "little")


_NON_FINITE = {"NaN": "NaN", "nan": "NaN", "Infinity": "Infinity", "inf": "Infinity", "-Infinity": "-Infinity",
               "-inf": "-Infinity"}


def java_float_text(text: str, bits: int = 64) -> str:
    """A float4 (``bits`` 32) / float8 value ('1.5', '1e+300', '-0', '1e-05'; PostgreSQL's shortest round-trip
    digits, which cdckit's sessions ask for) as Java's Float/Double.toString writes it, which is what Jackson
    writes for Kafka Connect: decimal notation from 10^-3 up to 10^7 with at least one fraction digit ('100.0',
    '0.001'), else one digit, a fraction and an exponent ('1.0E300', '1.0E-4'). NaN and the infinities keep their
    names. Java writes two significant digits at least: where one digit round-trips, it takes the two-digit
    decimal nearest the binary value when that round-trips too (Float.MIN_VALUE is '1.4E-45', not '1.0E-45')."""
    stripped = text.strip()
    if stripped in _NON_FINITE:
        return _NON_FINITE[stripped]
    minus, digits, exponent = _significant(Decimal(stripped))
    if not digits:
        return minus + "0.0"
    if len(digits) == 1:  # only here is a second digit possible (no normalize() on every value)
        minus, digits, exponent = _significant(_two_digits(Decimal(stripped), bits))
    point = len(digits) - 1 + exponent  # the power of ten of the first digit
    if -3 <= point < 7:
        if point >= 0:
            whole = digits[:point + 1].ljust(point + 1, "0")
            return f"{minus}{whole}.{digits[point + 1:] or '0'}"
        return f"{minus}0.{'0' * (-point - 1)}{digits}"
    return f"{minus}{digits[0]}.{digits[1:] or '0'}E{point}"


def _significant(decimal: Decimal) -> tuple[str, str, int]:
    """(sign, significant digits without leading or trailing zeros, power of ten of the last digit)."""
    sign, digit_tuple, exponent = decimal.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    return "-" if sign else "", stripped, exponent + len(digits) - len(stripped)


def _binary(value: float, bits: int) -> bytes:
    return struct.pack(">f" if bits == 32 else ">d", value)


def _two_digits(one_digit: Decimal, bits: int) -> Decimal:
    """The two-significant-digit decimal nearest the binary value of ``one_digit`` when it reads back as the same
    binary value, else ``one_digit``."""
    try:
        binary = _binary(float(one_digit), bits)
        exact = Decimal(struct.unpack(">f" if bits == 32 else ">d", binary)[0])
        nearest = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 1), rounding=ROUND_HALF_EVEN)
        return nearest if _binary(float(nearest), bits) == binary else one_digit
    except OverflowError:  # beyond the width's range: no binary value to be nearer to
        return one_digit


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("t", "true", "1", "y", "yes", "on"):
        return True
    if lowered in ("f", "false", "0", "n", "no", "off"):
        return False
    raise ValueError(f"cannot parse boolean value {text!r}")


def _quoted(text: str, i: int, terminators: str) -> tuple[str, bool, int]:
    """Read one (possibly quoted, backslash-escaped) token from i; returns (token, was_quoted, next index)."""
    chars: list[str] = []
    if text[i] == '"':
        i += 1
        while text[i] != '"':
            if text[i] == "\\":
                i += 1
            chars.append(text[i])
            i += 1
        return "".join(chars), True, i + 1
    while i < len(text) and text[i] not in terminators:
        if text[i] == "\\":
            i += 1
        chars.append(text[i])
        i += 1
    return "".join(chars).strip(), False, i


def parse_array(text: str) -> list[str | None]:
    """One-dimensional PostgreSQL array literal -> element texts (unquoted NULL -> None)."""
    body = text.strip()
    if body.startswith("["):  # non-default lower bound, e.g. '[0:1]={1,2}'
        body = body.split("=", 1)[1]
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"cannot parse array value {text!r}")
    if body[1:].lstrip().startswith("{"):
        raise NotImplementedError("multi-dimensional array")
    elements: list[str | None] = []
    i = 1
    while body[i:].strip() != "}":
        while body[i] == " ":
            i += 1
        token, quoted, i = _quoted(body, i, ",}")
        elements.append(None if not quoted and token.upper() == "NULL" else token)
        while body[i] == " ":
            i += 1
        if body[i] == ",":
            i += 1
    return elements


def array_outer_length(text: str) -> int:
    """The number of elements of an array literal's outer dimension ('{{1,2},{3,4}}' -> 2)."""
    body = text.strip()
    if body.startswith("["):
        body = body.split("=", 1)[1]
    depth, count, quoted, escaped = 0, 0, False, False
    for char in body:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char == "{":
            depth += 1
            if depth == 2 and count == 0:
                count = 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 1:
            count += 1
    return count


def parse_hstore(text: str) -> dict[str, str | None]:
    """'"a"=>"1", "b"=>NULL' -> {'a': '1', 'b': None} (key order kept)."""
    result: dict[str, str | None] = {}
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            return result
        key, _, i = _quoted(text, i, "=")
        if text[i: i + 2] != "=>":
            raise ValueError(f"cannot parse hstore value {text!r}")
        i += 2
        while text[i] == " ":
            i += 1
        value, quoted, i = _quoted(text, i, ",")
        result[key] = None if not quoted and value.upper() == "NULL" else value
