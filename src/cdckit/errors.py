"""Every failure cdckit reports on purpose, one class per failure mode.

Messages say what was wrong, where, and what to do. They never contain a password or other secret.
The command line prints ``CdcKitError`` messages without a traceback and exits with status 2.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

_WRAPPED_ERROR = re.compile(
    r"cdckit\.[\w.]*?(\w+Error): (.+?)(?:\n\s*(?:at |\tat |JVM stacktrace|Traceback|SQLSTATE|$)|\Z)", re.DOTALL)


def wrapped_message(exc: BaseException) -> str | None:
    """The cdckit error message inside a Spark / Py4J exception (raised in a task or a foreachBatch), if any."""
    match = _WRAPPED_ERROR.search(str(exc))
    return " ".join(match.group(2).split()) if match else None


def first_line(exc: BaseException) -> str:
    """An exception's first line (a driver's error may go on with detail and hints), or its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class CdcKitError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


@contextmanager
def from_spark(what: str) -> Iterator[None]:
    """A cdckit error raised inside Spark (in a task or a foreachBatch) comes back as one CdcKitError line,
    ``<what>: <its message>``, instead of Spark's wrapped trace; any other exception passes unchanged."""
    try:
        yield
    except CdcKitError:
        raise
    except Exception as exc:
        message = wrapped_message(exc)
        if message is None:
            raise
        raise CdcKitError(f"{what}: {message}") from None


# What would break a problem's line or the terminal it is printed on: line breaks and other control characters,
# and lone surrogates (not characters, so not printable), which a key or a parser's message may hold.
_NOT_ONE_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


class ConfigurationError(CdcKitError):
    """One or more properties are missing, unknown or invalid; all problems are listed together, one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = [_NOT_ONE_LINE.sub(lambda match: repr(match.group())[1:-1], problem) for problem in problems]
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"the connector configuration has {len(problems)} {noun}:\n{lines}")


class SourceConnectionError(CdcKitError):
    """The source database refused or could not be reached."""


class SourcePreconditionError(CdcKitError):
    """The source database is reachable but not set up for change data capture (wal_level, privileges...)."""


class SourceReadError(CdcKitError):
    """The source refused to hand over a captured table's rows while a job read them."""


class TableNotFoundError(CdcKitError):
    """A table named in the configuration does not exist."""


class ReplicationSlotError(CdcKitError):
    """The replication slot is missing, busy, or in a state that would lose data."""


class SnapshotStateError(CdcKitError):
    """The recorded snapshot state does not match the source (for example a slot without a finished snapshot)."""


class DecodingError(CdcKitError):
    """A change message from the source could not be decoded."""


class UnsupportedTypeError(CdcKitError, ValueError):
    """A column type has no mapping; the message names the column and how to exclude it."""


class UnsupportedValueError(CdcKitError, ValueError):
    """A value the configured handling mode cannot represent, where Debezium's connector stops too; the message
    names the table, the column and the setting that captures it."""


class SinkWriteError(CdcKitError):
    """The sink could not write a batch (disk full, permissions); the batch is not committed and comes again."""


class TopicCollisionError(CdcKitError):
    """Two captured tables would write to one topic (their names differ only where topic names replace
    characters); refused at job start."""


class OutputPathError(CdcKitError):
    """A file would be written outside its configured folder (a topic name that is not one plain folder name, or a
    symbolic link leading elsewhere); refused before anything is written."""
