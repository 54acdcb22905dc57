"""Which settings hold secrets, and how they are shown: the one rule ``cdckit validate``, the log and every error
message follow.

A setting's value is a secret when its name says so (``is_secret_name``): a password, secret, token, credential,
private key (``*.key``, ``keystore.key``), certificate store (``truststore.certificates``,
``keystore.certificate.chain``), SASL JAAS configuration or connection string. ``column.mask.hash.<algorithm>.with.
salt.<salt>`` carries its secret, the salt, in its name: ``shown_name`` hides it. A value read from AWS Secrets
Manager (``${secret:...}``) is hidden whatever its name, and a password inside any other value (``scheme://user:
password@host``, ``Password=...;``, ``password="..."``) is hidden there (``scrub``).

``remember`` keeps the secrets of the configuration being validated, and ``redact`` hides each of them, and every
salt and embedded password, in any text: the validation's problems, the command's error line and its log records
(``RedactingFilter``).
"""

from __future__ import annotations

import logging
import re
import threading

MASK = "********"

# A name whose value is a secret. The same text is a Java regular expression too (spark.redaction.regex).
SECRET_NAME_REGEX = (r"password|passwd|secret|credential|jaas|connection[.]string|sas[.]?key|access[.]?key"
                     r"|private[.]?key|keystore[.]key|keystore[.]certificate[.]chain|truststore[.]certificates"
                     r"|(?:^|[.])(?:key|token|pwd)$")
_SECRET_NAME = re.compile(SECRET_NAME_REGEX, re.IGNORECASE)
# Debezium's column.mask.hash.<hashAlgorithm>.with.salt.<salt> (and its v2 form): the salt is the name's tail.
_SALT_NAME = re.compile(r"^(column[.]mask[.]hash[.].+?[.]with[.]salt[.])(.+)$", re.IGNORECASE | re.DOTALL)
# Shown, a name's tail after "salt." (or a misspelling such as "salts.") is hidden; in a message up to the end of
# the word (a closing quote or ':' of the message is kept: the last character hidden is the word's last other one).
# The letters after "salt" and a URL's scheme are bounded, so a search takes linear time on any text.
_SALTED = re.compile(r"^(.*?salt[a-z]{0,64}[.])(.+)$", re.IGNORECASE | re.DOTALL)
_SALT_IN_TEXT = re.compile(r"(salt[a-z]{0,64}[.])(?:\S*[^\s'\":,;)]|\S)", re.IGNORECASE)
# Passwords inside values: URL user information, key=value pairs of connection strings and JAAS configurations.
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]{0,63}://[^\s/@:]*:)[^\s/@]+(@)")
_PAIR_PASSWORD = re.compile(r"(?i)(\b(?:password|passwd|pwd|secret|token|sharedaccesskey|accountkey|sig)\s*=\s*)"
                            r"(\"[^\"]*\"|'[^']*'|[^;,&\s\"']+)")
# Secrets shorter than this are not looked for in text: they would hide ordinary words.
MIN_REMEMBERED = 4

_remembered: set[str] = set()
_lock = threading.Lock()


def is_secret_name(name: str) -> bool:
    """Whether the value of the setting ``name`` is a secret (a password, key, certificate, token...)."""
    return bool(_SECRET_NAME.search(name))


def salt_of(name: str) -> str | None:
    """The salt a ``column.mask.hash.<algorithm>.with.salt.<salt>`` name carries, or None."""
    match = _SALT_NAME.match(name)
    return match.group(2) if match else None


def shown_name(name: str) -> str:
    """The name as it may be shown: a salt in it hidden."""
    match = _SALTED.match(name)
    return f"{match.group(1)}{MASK}" if match else name


def holds_secret(name: str) -> bool:
    """Whether the setting's name or value holds a secret (such settings are left out where no secret is needed)."""
    return is_secret_name(name) or salt_of(name) is not None


def scrub(text: str) -> str:
    """``text`` with the passwords inside it hidden (URLs' user information, ``password=...`` pairs)."""
    text = _URL_PASSWORD.sub(rf"\g<1>{MASK}\g<2>", text)
    return _PAIR_PASSWORD.sub(rf"\g<1>{MASK}", text)


def shown_value(name: str, value: str, resolved_secret: bool = False) -> str:
    """The value of the setting ``name`` as it may be shown (``resolved_secret``: read from a secret store)."""
    if resolved_secret or is_secret_name(name):
        return MASK
    return scrub(value)


def remember(value: str) -> None:
    """Hide ``value`` from now on wherever ``redact`` looks (a secret of the configuration being used)."""
    value = value.strip()
    if len(value) >= MIN_REMEMBERED:
        with _lock:
            _remembered.add(value)


def remember_settings(settings: dict[str, str], resolved_secrets: set[str] | frozenset[str] = frozenset()) -> None:
    """Remember every secret of a configuration: the values of secret names and of ``resolved_secrets``, salts."""
    for name, value in settings.items():
        if is_secret_name(name) or name in resolved_secrets:
            remember(value)
        salt = salt_of(name)
        if salt is not None:
            remember(salt)


def redact(text: str) -> str:
    """``text`` with every remembered secret, every salt of a salted name and every embedded password hidden."""
    with _lock:
        known = sorted(_remembered, key=len, reverse=True)
    for value in known:
        if value in text:
            text = text.replace(value, MASK)
    return scrub(_SALT_IN_TEXT.sub(rf"\g<1>{MASK}", text))


class RedactingFilter(logging.Filter):
    """A log handler's filter: each record's message (arguments included) and exception text redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: leave it to the handler
            return True
        shown = redact(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_logs(logger: logging.Logger | None = None) -> None:
    """Add a ``RedactingFilter`` to each handler of ``logger`` (the root logger) that has none."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(existing, RedactingFilter) for existing in handler.filters):
            handler.addFilter(RedactingFilter())
