"""Debezium signals as both dialects read them from their signalling table (``signal.data.collection``).

A signal is a row ``(id, type, data)`` inserted into that table; ``data`` is a JSON object. What each dialect does
with ``execute-snapshot``, ``stop-snapshot``, ``pause-snapshot`` and ``resume-snapshot`` is in its own module.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("cdckit.signals")


@dataclass(frozen=True)
class Signal:
    id: str
    type: str
    data: dict[str, Any]

    def data_collections(self) -> tuple[str, ...]:
        """The ``data-collections`` the signal names (regular expressions over fully qualified names)."""
        value = self.data.get("data-collections") or ()
        if isinstance(value, str):
            value = (value,)
        return tuple(str(c) for c in value)

    def conditions(self) -> dict[str, str] | str | None:
        """The filter the signal adds to its snapshot's reads: Debezium 2's ``additional-conditions`` (a filter per
        data collection, as ``{data-collection: filter}``) or Debezium 1's ``additional-condition`` (one filter for
        every collection), or None."""
        many = self.data.get("additional-conditions")
        if isinstance(many, list):
            return {str(item.get("data-collection", "")): str(item.get("filter", ""))
                    for item in many if isinstance(item, Mapping) and item.get("filter")}
        one = self.data.get("additional-condition")
        return str(one) if one else None


def parse_signal(row: Mapping[str, object]) -> Signal | None:
    """A signal from its table's row, or None (logged) when its ``data`` is not a JSON object."""
    signal_id, kind, data = str(row.get("id") or ""), str(row.get("type") or ""), row.get("data")
    try:
        document = json.loads(str(data)) if data else {}
    except json.JSONDecodeError:
        log.error("signal %s has data that is not JSON; ignored: %r", signal_id, data)
        return None
    if not isinstance(document, dict):
        log.error("signal %s data must be a JSON object; ignored", signal_id)
        return None
    return Signal(signal_id, kind, document)


def matches(patterns: tuple[str, ...], qualified_name: str) -> bool:
    """Whether a fully qualified name matches one of a signal's ``data-collections`` (anchored, any case)."""
    return any(re.fullmatch(p, qualified_name, flags=re.IGNORECASE) for p in patterns)


def check_condition(condition: str, dialect: str) -> str:
    """An ``additional-condition`` must be one boolean expression of ``dialect`` (sqlglot's name: ``tsql``,
    ``postgres``), never a statement: refuse anything else with ``ValueError``."""
    import sqlglot
    from sqlglot import exp

    try:
        parsed = sqlglot.parse_one(f"SELECT 1 WHERE {condition}", read=dialect)
    except sqlglot.errors.ParseError as error:
        raise ValueError(f"additional-condition {condition!r} is not a boolean expression ({error})") from None
    if not isinstance(parsed, exp.Select) or ";" in condition or "--" in condition or "/*" in condition:
        raise ValueError(f"additional-condition {condition!r} must be a single boolean expression")
    return condition
