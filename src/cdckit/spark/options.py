"""Passing connector properties to Spark data sources without losing the case of their keys.

Spark lower-cases data source option keys, but some Debezium properties carry case-sensitive text in the key
itself (``column.mask.hash.SHA-256.with.salt.CzQMA0cB5K``). The original keys travel alongside in one option
and are restored on the other side. Every setting whose name or value holds a secret (``cdckit.config.secrets``:
passwords, keys, certificates, a salt in the name) travels in one option of its own, ``cdckit.option.secrets``,
whose name Spark's redaction matches, so plans, the UI and event logs show neither its names nor its values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cdckit.config.secrets import holds_secret

KEYS_OPTION = "cdckit.option.keys"
SECRETS_OPTION = "cdckit.option.secrets"  # "secret": spark.redaction.regex hides its value


def to_spark_options(properties: Mapping[str, str]) -> dict[str, str]:
    secrets = {key: value for key, value in properties.items() if holds_secret(key)}
    plain = {key: value for key, value in properties.items() if key not in secrets}
    options = {**plain, KEYS_OPTION: json.dumps(sorted(plain))}
    if secrets:
        options[SECRETS_OPTION] = json.dumps(secrets, sort_keys=True)
    return options


def from_spark_options(options: Mapping[str, str]) -> dict[str, str]:
    """The properties with their original keys (Spark may hand them over lower-cased)."""
    received = {key.lower(): value for key, value in options.items()}
    original = json.loads(received.get(KEYS_OPTION, "[]"))
    restored = {key: received[key.lower()] for key in original if key.lower() in received}
    for key, value in options.items():
        if key.lower() not in (KEYS_OPTION, SECRETS_OPTION) and key.lower() not in {k.lower() for k in restored}:
            restored[key] = value
    restored.update(json.loads(received.get(SECRETS_OPTION, "{}")))
    return restored
