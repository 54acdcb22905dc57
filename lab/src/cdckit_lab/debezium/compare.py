"""Comparing Debezium's records with cdckit's: as parsed JSON (field order, schemas, source and row values) and
byte for byte as JSON tokens."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any


def _fields(schema: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = next(f for f in schema["fields"] if f["field"] == name)["fields"]
    return fields


def compare_envelopes(debezium: Mapping[str, Any], cdckit: Mapping[str, Any]) -> list[str]:
    """Differences in field order, schemas, source values and row values between two value messages of the
    same change."""
    notes: list[str] = []
    d_top = [f["field"] for f in debezium["schema"]["fields"]]
    c_top = [f["field"] for f in cdckit["schema"]["fields"]]
    if d_top != c_top:
        notes.append(f"envelope fields: Debezium {d_top} / cdckit {c_top}")
    if list(debezium["payload"]) != list(cdckit["payload"]):
        notes.append(f"envelope payload keys: Debezium {list(debezium['payload'])} / cdckit {list(cdckit['payload'])}")
    d_src = [f["field"] for f in _fields(debezium["schema"], "source")]
    c_src = [f["field"] for f in _fields(cdckit["schema"], "source")]
    if d_src != c_src:
        notes.append(f"source fields: Debezium {d_src} / cdckit {c_src}")
    d_src_schema = {f["field"]: f for f in _fields(debezium["schema"], "source")}
    c_src_schema = {f["field"]: f for f in _fields(cdckit["schema"], "source")}
    for name in d_src_schema:
        if name in c_src_schema and d_src_schema[name] != c_src_schema[name]:
            notes.append(f"source schema of {name}: Debezium {json.dumps(d_src_schema[name])} / cdckit "
                         f"{json.dumps(c_src_schema[name])}")
    for name in ("op", "ts_ms", "transaction"):
        if debezium["payload"].get(name) != cdckit["payload"].get(name):
            notes.append(f"payload.{name}: Debezium {debezium['payload'].get(name)!r} / cdckit "
                         f"{cdckit['payload'].get(name)!r}")
    d_payload_src, c_payload_src = debezium["payload"]["source"], cdckit["payload"]["source"]
    for name in dict.fromkeys([*d_payload_src, *c_payload_src]):
        if d_payload_src.get(name) != c_payload_src.get(name):
            notes.append(f"source.{name}: Debezium {d_payload_src.get(name)!r} / cdckit {c_payload_src.get(name)!r}")
    d_cols = {f["field"]: f for f in _fields(debezium["schema"], "after")}
    c_cols = {f["field"]: f for f in _fields(cdckit["schema"], "after")}
    if list(d_cols) != list(c_cols):
        notes.append(f"row fields: Debezium {list(d_cols)} / cdckit {list(c_cols)}")
    for name in d_cols:
        if name in c_cols and d_cols[name] != c_cols[name]:
            notes.append(f"schema of {name}: Debezium {json.dumps(d_cols[name])} / cdckit {json.dumps(c_cols[name])}")
        if name in c_cols and list(d_cols[name]) != list(c_cols[name]):
            notes.append(f"key order in the schema of {name}: Debezium {list(d_cols[name])} / cdckit "
                         f"{list(c_cols[name])}")
    for part in ("before", "after"):
        d_row, c_row = debezium["payload"][part], cdckit["payload"][part]
        if (d_row is None) != (c_row is None):
            notes.append(f"payload.{part}: Debezium {d_row!r} / cdckit {c_row!r}")
            continue
        for name in d_row or {}:
            if d_row.get(name) != (c_row or {}).get(name):
                notes.append(f"value of {name}: Debezium {d_row.get(name)!r} / cdckit {(c_row or {}).get(name)!r}")
    return notes


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s"{}\[\]:,]+|[{}\[\]:,]|\s+')


def text_differences(debezium: str | None, cdckit: str | None, context: int = 6) -> list[str]:
    """Where two message texts differ, compared as sequences of JSON tokens (strings, numbers, literals,
    punctuation, character for character within each): each differing stretch in brackets with ``context``
    tokens before it and a few after, as ``Debezium's text / cdckit's text``; empty when the texts are equal."""
    return [text for _, text in _differences(debezium, cdckit, context)]


def _differences(debezium: str | None, cdckit: str | None, context: int = 6) -> list[tuple[str, str]]:
    """``text_differences`` with the kind of each: the JSON key it falls under and the differing stretches with
    their digits masked, to count like differences of different rows together."""
    if debezium is None or cdckit is None:
        return [] if debezium == cdckit else [("null", f"{debezium!r} / {cdckit!r}")]
    if debezium == cdckit:
        return []
    d_tokens, c_tokens = _JSON_TOKEN.findall(debezium), _JSON_TOKEN.findall(cdckit)
    found: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(None, d_tokens, c_tokens, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        before = "".join(d_tokens[max(0, i1 - context):i1])
        d_part, c_part = "".join(d_tokens[i1:i2]), "".join(c_tokens[j1:j2])
        d_after, c_after = "".join(d_tokens[i2:i2 + 2]), "".join(c_tokens[j2:j2 + 2])
        key = next((d_tokens[k - 1] for k in range(i1, 0, -1) if d_tokens[k] == ":" and k >= 1), "")
        kind = re.sub(r"\d", "9", f"{key}:{d_part}/{c_part}")
        found.append((kind, f"…{before}[{d_part}]{d_after}… / …{before}[{c_part}]{c_after}…"))
    return found


def excerpt(value_text: str) -> str:
    """A compact view of a value message: the row schema's field types, then the payload."""
    value = json.loads(value_text)
    types = ", ".join(f"{f['field']}:{f['type']}" + (f"/{f['name']}" if "name" in f else "")
                      for f in _fields(value["schema"], "after"))
    payload = {key: item for key, item in value["payload"].items() if key != "before" or item is not None}
    return f"after schema: {types}\npayload: {json.dumps(payload, separators=(',', ':'))}"


class Tally:
    """Differences over many record pairs: each note once, with how many records showed it."""

    def __init__(self) -> None:
        self.pairs = 0
        self.identical = 0
        self.notes: dict[str, list[str]] = {}
        self.bytes: dict[str, tuple[str, int]] = {}  # by the difference with its digits masked: example, count

    def add(self, debezium: tuple[str | None, str | None], cdckit: tuple[str | None, str | None]) -> None:
        """One pair of records (key and value texts; a tombstone's value is None)."""
        self.pairs += 1
        d_key, d_value = debezium
        c_key, c_value = cdckit
        if d_key == c_key and d_value == c_value:
            self.identical += 1
        if d_value is not None and c_value is not None:
            for note in compare_envelopes(json.loads(d_value), json.loads(c_value)):
                group = note.split(":")[0] if note.startswith(("value of", "source.", "payload.")) else note
                self.notes.setdefault(group, []).append(note)
        for where, d_text, c_text in (("key", d_key, c_key), ("value", d_value, c_value)):
            for kind, difference in _differences(d_text, c_text):
                example, count = self.bytes.get(f"{where}:{kind}", (f"{where}: {difference}", 0))
                self.bytes[f"{where}:{kind}"] = (example, count + 1)

    def show(self, label: str, limit: int = 25) -> None:
        print(f"{label}: {self.identical} of {self.pairs} records byte-identical (key and value); differences "
              f"(Debezium / cdckit):")
        for found in list(self.notes.values()) or [["none"]]:
            print(f"  - {found[0]}" + (f" ({len(found)} of {self.pairs} records)" if len(found) > 1 else ""))
        print("  texts compared byte for byte ([...] marks what differs; one example of each kind, digits aside):")
        for text, count in list(self.bytes.values())[:limit]:
            print(f"  - {text}" + (f" ({count} of {self.pairs} records)" if count > 1 else ""))
        if len(self.bytes) > limit:
            print(f"  - ... {len(self.bytes) - limit} more")
