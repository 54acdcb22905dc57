"""Passing connector properties to Spark data sources without losing the case of their keys.

Spark lower-cases data source option keys, but some Debezium properties carry case-sensitive text in the key
itself (``column.mask.hash.SHA-256.with.salt.CzQMA0cB5K``). The original keys travel alongside in one option
and are restored on the other side. Secrets stay in their own options, so Spark's redaction of keys that look
like passwords keeps them out of plans and logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

KEYS_OPTION = "cdckit.option.keys"


def to_spark_options(properties: Mapping[str, str]) -> dict[str, str]:
    return {**properties, KEYS_OPTION: json.dumps(sorted(properties))}


def from_spark_options(options: Mapping[str, str]) -> dict[str, str]:
    """The properties with their original keys (Spark may hand them over lower-cased)."""
    received = {key.lower(): value for key, value in options.items()}
    original = json.loads(received.get(KEYS_OPTION, "[]"))
    restored = {key: received[key.lower()] for key in original if key.lower() in received}
    for key, value in options.items():
        if key.lower() != KEYS_OPTION and key.lower() not in {k.lower() for k in restored}:
            restored[key] = value
    return restored
