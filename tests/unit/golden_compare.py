"""Field-for-field comparison of golden (seed) messages with cdckit's output, shared by the golden tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
IGNORED = "<ignored>"

# Kafka Connect schemas as Debezium writes them, written out here (not imported from cdckit) so that the schema
# comparison is not circular: source.snapshot is an io.debezium.data.Enum string; the envelope always declares the
# optional transaction block.
SNAPSHOT_ENUM_SCHEMA = {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                        "parameters": {"allowed": "true,last,false,incremental"}, "default": "false",
                        "field": "snapshot"}
TRANSACTION_FIELD_SCHEMA = {
    "type": "struct",
    "fields": [{"type": "string", "optional": False, "field": "id"},
               {"type": "int64", "optional": False, "field": "total_order"},
               {"type": "int64", "optional": False, "field": "data_collection_order"}],
    "optional": True, "name": "event.block", "version": 1, "field": "transaction",
}


# ---- comparison ---------------------------------------------------------------------------------------------------

def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Field-for-field differences; JSON types must match exactly (1 != "1", true != 1), and so must the order
    of object keys (JsonConverter output is compared as text by consumers of byte-compatible messages)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in expected:
            sub = f"{path}.{key}" if path else key
            if key not in actual:
                out.append(f"{sub}: missing in cdckit output (seed: {expected[key]!r})")
            else:
                out += differences(expected[key], actual[key], sub)
        out += [f"{path}.{key}: not in seed (cdckit: {actual[key]!r})" if path
                else f"{key}: not in seed (cdckit: {actual[key]!r})" for key in actual if key not in expected]
        common = [key for key in expected if key in actual]
        if not out and common != [key for key in actual if key in expected]:
            out.append(f"{path or '<root>'}: key order, seed {common}, cdckit {list(actual)}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: seed has {len(expected)} items, cdckit {len(actual)}"]
        pairs = enumerate(zip(expected, actual, strict=True))
        return [d for i, (e, a) in pairs for d in differences(e, a, f"{path}[{i}]")]
    if type(expected) is not type(actual) or expected != actual:
        return [f"{path}: seed {expected!r}, cdckit {actual!r}"]
    return []


def paths(diffs: Sequence[str]) -> set[str]:
    return {d.split(":", 1)[0] for d in diffs}


def get(doc: Any, path: str) -> Any:
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def ignore(expected: Any, actual: Any, path: str) -> None:
    """Replace the value at ``path`` on both sides (timestamps, doc placeholders, elided parts)."""
    *parents, last = path.split(".")
    exp, act = (get(expected, ".".join(parents)), get(actual, ".".join(parents))) if parents else (expected, actual)
    if last in exp:
        exp[last] = IGNORED
        if last in act:
            act[last] = IGNORED


def golden_params(cases: Mapping[str, Callable[[], Any]], known: Mapping[str, set[str]]) -> list[Any]:
    """One parameter per golden file; a strict xfail naming the differing paths where the seed and cdckit differ."""
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason="seed/cdckit difference: "
                                                       + ", ".join(sorted(known[name]))))
            if name in known else name for name in cases]


