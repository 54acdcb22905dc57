"""Kafka Connect single message transforms (SMTs) Debezium users configure, applied to finished records.

A connector configuration names its chain with ``transforms=<alias>,...`` and configures each with
``transforms.<alias>.type`` and ``transforms.<alias>.<option>``. cdckit applies, in the configured order:

- ``io.debezium.transforms.ExtractNewRecordState`` (Debezium 2.5.2's code): the ``after`` image instead of the
  envelope, with ``delete.tombstone.handling.mode`` (or the older ``drop.tombstones`` and
  ``delete.handling.mode``), ``add.fields`` / ``add.fields.prefix``, ``add.headers`` / ``add.headers.prefix`` and
  ``route.by.field``;
- ``io.debezium.transforms.ByLogicalTableRouter``: ``topic.regex`` / ``topic.replacement``, with the key made
  unique per physical table (``key.enforce.uniqueness``, ``key.field.name``, ``key.field.regex``,
  ``key.field.replacement``) and the schema names renamed (``schema.name.adjustment.mode``);
- ``org.apache.kafka.connect.transforms.RegexRouter``: ``regex`` / ``replacement``.

Every other transform type, option, predicate (``predicates``, ``transforms.<alias>.predicate``) and
``errors.*`` value cdckit cannot honour is refused by ``problems()``, by name, before anything runs.

The transforms work on the records' JSON texts as Kafka Connect's JsonConverter wrote them: numbers keep their
exact text (parsed as ``orjson.Fragment``) and the result is written as JsonConverter writes it, so a transformed
record is byte for byte what Kafka Connect writes with the same chain. Header values are written as Kafka Connect's
default header converter (SimpleHeaderConverter) writes them: a string as its UTF-8 bytes, a number or boolean as
its text, null as no value.

Pure: no Spark, no database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdckit.formats.debezium.envelope import dumps
from cdckit.formats.debezium.naming import MODES, adjust_schema_name

EXTRACT_NEW_RECORD_STATE = "io.debezium.transforms.ExtractNewRecordState"
BY_LOGICAL_TABLE_ROUTER = "io.debezium.transforms.ByLogicalTableRouter"
REGEX_ROUTER = "org.apache.kafka.connect.transforms.RegexRouter"
SUPPORTED = (EXTRACT_NEW_RECORD_STATE, BY_LOGICAL_TABLE_ROUTER, REGEX_ROUTER)

# Records that carry a Debezium envelope (rows' ``op``); heartbeats, transaction and schema change records do not.
DATA_OPS = frozenset(("c", "u", "d", "r", "t"))

# errors.* settings (Kafka Connect's error handling): the value each must keep, and why another cannot be honoured.
_ERRORS: dict[str, tuple[str, str]] = {
    "errors.tolerance": ("none", "cdckit never skips a record it could not convert or transform: a failing record "
                                 "stops the batch, which is written again, whole, on the next run"),
    "errors.log.enable": ("false", "a failing record stops the batch with an error that names it"),
    "errors.log.include.messages": ("false", "cdckit never writes records' contents to its logs"),
    "errors.retry.timeout": ("0", "cdckit does not retry a failed operation inside the job: Spark retries a failed "
                                  "task (spark.task.maxFailures) and a stopped job resumes from its checkpoint"),
    "errors.max.retries": ("0", "cdckit does not restart itself after an error: the job stops with the error and "
                                "resumes from its checkpoint when it is run again (an EMR step's retry, the Spark "
                                "operator's restartPolicy)"),
}
# Meaningful only with retries, which are refused above.
_ERRORS_FREE = {"errors.retry.delay.max.ms", "errors.retry.delay.initial.ms"}

_BOOL = {"true": True, "false": False}


class TransformConfigError(ValueError):
    """A transform setting cdckit cannot honour; ``problems`` lists each, with what to do."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# -- records ----------------------------------------------------------------------------------------------------


def _fragment(text: str) -> Any:
    return orjson.Fragment(text)


def parse_json(text: str) -> Any:
    """A record text as Python objects, numbers kept as their exact text (JsonConverter's ``1.0E10`` stays so)."""
    return json.loads(text, parse_float=_fragment, parse_int=_fragment)


@dataclass
class Record:
    """One record on its way through the chain. Texts are parsed when a transform first needs them and written
    once at the end (``key_text`` / ``value_text``)."""

    topic: str
    key: str | None
    value: str | None
    headers: list[tuple[str, bytes | None]]
    op: str
    schemas: tuple[bool, bool]  # key.converter.schemas.enable, value.converter.schemas.enable
    envelope: bool = False
    _key_doc: Any = field(default=None, repr=False)
    _value_doc: Any = field(default=None, repr=False)
    _key_parsed: bool = field(default=False, repr=False)
    _value_parsed: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.envelope = self.op in DATA_OPS and self.value is not None

    # key and value as {"schema", "payload"} (or only the payload, when schemas are off), parsed on demand
    @property
    def key_doc(self) -> Any:
        if not self._key_parsed:
            self._key_doc = None if self.key is None else parse_json(self.key)
            self._key_parsed = True
        return self._key_doc

    @key_doc.setter
    def key_doc(self, document: Any) -> None:
        self._key_doc, self._key_parsed, self.key = document, True, None

    @property
    def value_doc(self) -> Any:
        if not self._value_parsed and self.value is not None:  # reading a tombstone leaves it a tombstone
            self._value_doc = parse_json(self.value)
            self._value_parsed = True
        return self._value_doc

    @value_doc.setter
    def value_doc(self, document: Any) -> None:
        self._value_doc, self._value_parsed, self.value = document, True, None

    def key_text(self) -> str | None:
        if self.key is None and self._key_parsed and self._key_doc is not None:
            self.key = dumps(self._key_doc)
        return self.key

    def value_text(self) -> str | None:
        if self.value is None and self._value_parsed:
            self.value = dumps(self._value_doc)  # a parsed null (a delete kept as null) is the text "null"
        return self.value

    def is_tombstone(self) -> bool:
        return self.value is None and not self._value_parsed

    def has_key(self) -> bool:
        return self.key is not None or (self._key_parsed and self._key_doc is not None)

    def payload(self) -> Any:
        document = self.value_doc
        return document["payload"] if self.schemas[1] and isinstance(document, dict) else document

    def value_schema(self) -> dict[str, Any] | None:
        return self.value_doc["schema"] if self.schemas[1] and self.value_doc is not None else None


def _set_value(record: Record, schema: dict[str, Any] | None, payload: Any) -> None:
    """The record's value as JsonConverter writes ``payload`` under ``schema``: {"schema", "payload"} with schemas
    on, the bare payload (``null`` for none) without."""
    record.value_doc = {"schema": schema, "payload": payload} if record.schemas[1] else payload


def _header_bytes(value: Any) -> bytes | None:
    """SimpleHeaderConverter's bytes for a header value."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, orjson.Fragment):
        return orjson.dumps(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return dumps(value).encode("utf-8")


# -- Java regular expressions and replacement strings -------------------------------------------------------------


def java_replacement(replacement: str) -> Callable[[re.Match[str]], str]:
    """Java's ``Matcher.replaceFirst`` replacement: ``$n`` and ``${name}`` are groups, ``\\x`` is ``x``."""
    parts: list[tuple[bool, str | int]] = []  # (is a group, literal text or group reference)
    index, literal = 0, []
    while index < len(replacement):
        char = replacement[index]
        if char == "\\" and index + 1 < len(replacement):
            literal.append(replacement[index + 1])
            index += 2
        elif char == "$":
            match = re.match(r"\$(?:\{(\w+)\}|(\d))", replacement[index:])
            if not match:
                raise ValueError(f"replacement {replacement!r}: '$' at {index} names no group; write \\$ for a "
                                 f"literal dollar")
            parts += [(False, "".join(literal)), (True, match.group(1) or int(match.group(2)))]
            literal = []
            index += match.end()
        else:
            literal.append(char)
            index += 1
    parts.append((False, "".join(literal)))

    def expand(match: re.Match[str]) -> str:
        return "".join((match.group(part) or "") if group else str(part) for group, part in parts)

    return expand


class _Renamer:
    """``regex`` / ``replacement`` applied to a whole topic name (``Matcher.matches`` then ``replaceFirst``)."""

    def __init__(self, regex: str, replacement: str) -> None:
        self.pattern = re.compile(regex)
        self.expand = java_replacement(replacement)
        for group in re.findall(r"(?<!\\)\$(\d)", replacement):
            if int(group) > self.pattern.groups:
                raise ValueError(f"replacement {replacement!r} names group {group}, but the regex has "
                                 f"{self.pattern.groups}")
        self.cache: dict[str, str | None] = {}

    def __call__(self, topic: str) -> str | None:
        if topic not in self.cache:
            match = self.pattern.fullmatch(topic)
            self.cache[topic] = self.expand(match) if match else None
        return self.cache[topic]


# -- the transforms -------------------------------------------------------------------------------------------------


class Transform:
    OPTIONS: tuple[str, ...] = ()  # the type's options cdckit honours (any other is refused)

    def __init__(self, alias: str, options: Mapping[str, str]) -> None:
        self.alias = alias

    def apply(self, record: Record) -> Record | None:
        raise NotImplementedError


@dataclass(frozen=True)
class _FieldReference:
    """One ``add.fields`` / ``add.headers`` entry: ``[struct.]field[:new name]``."""

    struct: str | None
    field: str
    new_field: str

    @classmethod
    def parse(cls, prefix: str, entry: str) -> _FieldReference:
        parts = entry.split(":")
        if len(parts) > 2:
            raise ValueError(f"unexpected field name {entry!r}")
        splits = parts[0].split(".")
        name = splits[0] if len(splits) == 1 else splits[1]
        struct = _struct_of(name) if len(splits) == 1 else splits[0]
        if len(parts) == 2:
            new_field = prefix + parts[1]
        else:
            new_field = prefix + (name if len(splits) == 1 else f"{struct}_{name}")
        return cls(struct, name, new_field)

    def schema(self, envelope_schema: dict[str, Any]) -> dict[str, Any] | None:
        """The added field's schema: the source field's, optional, without its default (SchemaUtil's copy)."""
        fields = {f["field"]: f for f in envelope_schema.get("fields", [])}
        parent = fields.get(self.struct) if self.struct is not None else envelope_schema
        found = None
        if parent is not None:
            found = {f["field"]: f for f in parent.get("fields", [])}.get(self.field)
        if found is None:
            found = fields.get(self.field)
        if found is None:
            return None
        copied = {k: v for k, v in found.items() if k not in ("field", "default", "fields")}
        copied["optional"] = True
        ordered = {k: copied[k] for k in ("type", "items", "keys", "values", "optional") if k in copied}
        ordered.update({k: v for k, v in copied.items() if k not in ordered})
        return ordered

    def value(self, payload: dict[str, Any]) -> tuple[Any, bool]:
        """The field's value, and whether the payload has the field: in its struct (a null struct, such as the
        transaction block of a snapshot read, gives null) or, a field another transform added, at the top."""
        if self.struct is not None and self.struct in payload:
            parent = payload[self.struct]
            if parent is None:
                return None, True
            if isinstance(parent, dict) and self.field in parent:
                value = parent[self.field]
                if _UNSET_DEFAULTS.get((self.struct, self.field)) == value:
                    value = None  # Debezium left it unset; the envelope's text shows the schema's default
                return value, True
        elif self.struct is None and self.field in payload:
            return payload[self.field], True
        return payload.get(self.field), self.field in payload


# Source fields Debezium leaves unset (null) where the envelope's text shows their schema default (JsonConverter
# writes the default for a null): ``snapshot`` outside a snapshot. add.fields and add.headers copy the unset null.
_UNSET_DEFAULTS = {("source", "snapshot"): "false"}


def _struct_of(name: str) -> str | None:
    if name in ("id", "total_order", "data_collection_order"):
        return "transaction"
    if name in ("op", "ts_ms"):
        return None
    return "source"


class ExtractNewRecordState(Transform):
    OPTIONS = ("drop.tombstones", "delete.handling.mode", "delete.tombstone.handling.mode", "add.fields",
               "add.fields.prefix", "add.headers", "add.headers.prefix", "route.by.field")

    def __init__(self, alias: str, options: Mapping[str, str]) -> None:
        self.alias = alias
        tombstone_mode = options.get("delete.tombstone.handling.mode", "").strip()
        if tombstone_mode:
            if tombstone_mode.lower() not in ("drop", "tombstone", "rewrite", "rewrite-with-tombstone"):
                raise ValueError(f"delete.tombstone.handling.mode={tombstone_mode!r} is not one of drop, tombstone, "
                                 f"rewrite, rewrite-with-tombstone")
            mode = tombstone_mode.lower()
            self.drop_tombstones = mode != "rewrite-with-tombstone"
            self.deletes = {"drop": "drop", "tombstone": "none"}.get(mode, "rewrite")
            self.rewrite = mode.startswith("rewrite")
        else:  # Debezium's older pair
            drop = options.get("drop.tombstones", "true").strip().lower()
            if drop not in _BOOL:
                raise ValueError(f"drop.tombstones={drop!r} is not a boolean; use true or false")
            deletes = options.get("delete.handling.mode", "drop").strip().lower()
            if deletes not in ("drop", "rewrite", "none"):
                raise ValueError(f"delete.handling.mode={deletes!r} is not one of drop, rewrite, none")
            self.drop_tombstones, self.deletes, self.rewrite = _BOOL[drop], deletes, deletes == "rewrite"
        fields_prefix = options.get("add.fields.prefix", "__")
        headers_prefix = options.get("add.headers.prefix", "__")
        self.fields = [_FieldReference.parse(fields_prefix, entry.strip())
                       for entry in options.get("add.fields", "").split(",") if entry.strip()]
        self.headers = [_FieldReference.parse(headers_prefix, entry.strip())
                        for entry in options.get("add.headers", "").split(",") if entry.strip()]
        for reference in self.fields + self.headers:
            if reference.field in ("source", "transaction", "before", "after"):
                raise ValueError(f"add.fields / add.headers entry {reference.field!r} names a structure; name one of "
                                 f"its fields, e.g. source.ts_ms")
        self.route_by_field = options.get("route.by.field", "").strip() or None

    def apply(self, record: Record) -> Record | None:
        if self.headers:
            self._add_headers(record)
        if record.is_tombstone():
            return None if self.drop_tombstones else record
        if not record.envelope:
            return record
        payload = record.payload()
        schema = record.value_schema()
        after, before = payload.get("after"), payload.get("before")
        if after is None and before is None:  # a truncate
            return None
        if after is None:  # a delete
            if self.deletes == "drop":
                return None
            if self.deletes == "none":
                _set_value(record, self._image_schema(schema, "after"), None)
                record.envelope = False
                return self._route(record, before)
            unwrapped, image_schema = dict(before), self._image_schema(schema, "before")
        else:
            unwrapped, image_schema = dict(after), self._image_schema(schema, "after")
        if self.rewrite:
            unwrapped["__deleted"] = "true" if after is None else "false"
        for reference in self.fields:
            value, present = reference.value(payload)
            if schema is not None:  # Debezium adds what the schema has
                present = reference.schema(schema) is not None
            if present:
                unwrapped[reference.new_field] = value
        if schema is not None:
            image_schema = self._updated_schema(schema, image_schema)
        _set_value(record, image_schema, unwrapped)
        record.envelope = False
        return self._route(record, after if after is not None else before)

    def _route(self, record: Record, image: dict[str, Any] | None) -> Record:
        if self.route_by_field and image is not None:
            topic = image.get(self.route_by_field)
            if isinstance(topic, str) and topic.strip():
                record.topic = topic
        return record

    @staticmethod
    def _image_schema(schema: dict[str, Any] | None, which: str) -> dict[str, Any] | None:
        if schema is None:
            return None
        found = next(f for f in schema["fields"] if f["field"] == which)
        return {k: v for k, v in found.items() if k != "field"}

    def _updated_schema(self, envelope_schema: dict[str, Any], image_schema: dict[str, Any] | None
                        ) -> dict[str, Any]:
        """Kafka's InsertField and Debezium's addFields copy the image's schema without its optional flag, then
        append ``__deleted`` (rewrite) and the added fields."""
        assert image_schema is not None
        fields = list(image_schema.get("fields", []))
        if self.rewrite:
            fields.append({"type": "string", "optional": True, "field": "__deleted"})
        for reference in self.fields:
            added = reference.schema(envelope_schema)
            if added is not None:
                fields.append({**added, "field": reference.new_field})
        updated: dict[str, Any] = {"type": "struct", "fields": fields, "optional": False}
        updated.update({k: v for k, v in image_schema.items() if k not in ("type", "fields", "optional")})
        return updated

    def _add_headers(self, record: Record) -> None:
        if record.is_tombstone():
            for reference in self.headers:  # a tombstone carries only the operation, a delete's
                if reference.field == "op":
                    record.headers.append((reference.new_field, b"d"))
            return
        payload = record.payload()
        if not isinstance(payload, dict):
            return
        schema = record.value_schema()
        for reference in self.headers:
            value, present = reference.value(payload)
            if schema is not None:
                present = reference.schema(schema) is not None
            if present:
                record.headers.append((reference.new_field, _header_bytes(value)))


class ByLogicalTableRouter(Transform):
    OPTIONS = ("topic.regex", "topic.replacement", "key.enforce.uniqueness", "key.field.name", "key.field.regex",
               "key.field.replacement", "schema.name.adjustment.mode", "logical.table.cache.size")

    def __init__(self, alias: str, options: Mapping[str, str]) -> None:
        self.alias = alias
        for required in ("topic.regex", "topic.replacement"):
            if not options.get(required, "").strip():
                raise ValueError(f"{required} is required")
        self.topics = _Renamer(options["topic.regex"], options["topic.replacement"])
        unique = options.get("key.enforce.uniqueness", "true").strip().lower()
        if unique not in _BOOL:
            raise ValueError(f"key.enforce.uniqueness={unique!r} is not a boolean; use true or false")
        self.unique = _BOOL[unique]
        self.key_field = options.get("key.field.name", "__dbz__physicalTableIdentifier")
        key_regex = options.get("key.field.regex", "").strip()
        self.key_renamer = None
        if key_regex:
            if not options.get("key.field.replacement", "").strip():
                raise ValueError("key.field.replacement must be non-empty if key.field.regex is set")
            self.key_renamer = _Renamer(key_regex, options["key.field.replacement"])
        self.mode = options.get("schema.name.adjustment.mode", "none").strip().lower()
        if self.mode not in MODES:
            raise ValueError(f"schema.name.adjustment.mode={self.mode!r} is not one of {', '.join(MODES)}")
        cache = options.get("logical.table.cache.size", "16").strip()
        if not cache.isdigit() or int(cache) < 1:
            raise ValueError(f"logical.table.cache.size={cache!r} is not a positive whole number")

    def apply(self, record: Record) -> Record | None:
        old_topic = record.topic
        new_topic = self.topics(old_topic)
        if not new_topic:  # no match (or an empty name: Debezium keeps the record as it is)
            return record
        record.topic = new_topic
        if record.has_key():
            self._update_key(record, old_topic, new_topic)
        if record.envelope:
            schema = record.value_schema()
            if schema is not None:
                document = record.value_doc
                value_name = adjust_schema_name(new_topic + ".Value", self.mode)
                for entry in schema["fields"]:
                    if entry["field"] in ("before", "after"):
                        _rename(entry, value_name)
                _rename(schema, adjust_schema_name(new_topic + ".Envelope", self.mode))
                record.value_doc = document
        return record

    def _update_key(self, record: Record, old_topic: str, new_topic: str) -> None:
        document = record.key_doc
        schemas = record.schemas[0]
        if schemas:
            _rename(document["schema"], adjust_schema_name(new_topic + ".Key", self.mode))
        if self.unique:
            identifier = old_topic
            if self.key_renamer is not None:
                identifier = self.key_renamer(old_topic) or old_topic
            if schemas:
                document["schema"]["fields"].append({"type": "string", "optional": False, "field": self.key_field})
                document["payload"][self.key_field] = identifier
            else:
                document[self.key_field] = identifier
        record.key_doc = document


def _rename(schema: dict[str, Any], name: str) -> None:
    """Set a schema's name where JsonConverter writes it (after ``optional``), keeping the other keys' order."""
    if "name" in schema:
        schema["name"] = name
        return
    items = list(schema.items())
    schema.clear()
    for key, value in items:
        schema[key] = value
        if key == "optional":
            schema["name"] = name


class RegexRouter(Transform):
    OPTIONS = ("regex", "replacement")

    def __init__(self, alias: str, options: Mapping[str, str]) -> None:
        self.alias = alias
        for required in ("regex", "replacement"):
            if required not in options:
                raise ValueError(f"{required} is required")
        self.topics = _Renamer(options["regex"], options["replacement"])

    def apply(self, record: Record) -> Record | None:
        new_topic = self.topics(record.topic)
        if new_topic is not None:
            record.topic = new_topic
        return record


_TYPES: dict[str, type[Transform]] = {EXTRACT_NEW_RECORD_STATE: ExtractNewRecordState,
                                      BY_LOGICAL_TABLE_ROUTER: ByLogicalTableRouter, REGEX_ROUTER: RegexRouter}
# Kafka Connect's own per-transform keys, beside the type's options
_CONNECT_KEYS = ("type", "predicate", "negate")


# -- configuration ----------------------------------------------------------------------------------------------


def is_transform_setting(name: str) -> bool:
    return name == "transforms" or name.startswith(("transforms.", "predicates", "errors."))


def chain(settings: Mapping[str, str]) -> list[Transform]:
    """The configured transforms, in order; raises ``TransformConfigError`` naming every setting cdckit cannot
    honour."""
    problems: list[str] = []
    transforms = _parse(settings, problems)
    if problems:
        raise TransformConfigError(problems)
    return transforms


def problems(settings: Mapping[str, str]) -> list[str]:
    """Every transform, predicate and errors.* setting cdckit cannot honour, each with what to do."""
    found: list[str] = []
    _parse(settings, found)
    return found


def _parse(settings: Mapping[str, str], problems: list[str]) -> list[Transform]:
    relevant = {k: v for k, v in settings.items() if is_transform_setting(k)}
    for name, value in relevant.items():
        if name.startswith("errors."):
            _check_errors_setting(name, value.strip(), problems)
        elif name.startswith("predicates"):
            problems.append(f"{name}: cdckit applies no predicates (transforms run on every record); remove the "
                            f"predicates.* settings and the transforms.<alias>.predicate that use them")
    aliases = [a.strip() for a in relevant.get("transforms", "").split(",") if a.strip()]
    for name in relevant:
        if name.startswith("transforms."):
            alias = name[len("transforms."):].split(".", 1)[0]
            if alias not in aliases:
                problems.append(f"{name}: transform {alias!r} is not in transforms={relevant.get('transforms', '')!r}; "
                                f"add it there or remove its settings")
    transforms: list[Transform] = []
    for alias in aliases:
        prefix = f"transforms.{alias}."
        own = {k[len(prefix):]: v for k, v in relevant.items() if k.startswith(prefix)}
        kind = own.pop("type", "").strip()
        if not kind:
            problems.append(f"{prefix}type is required (one of {', '.join(SUPPORTED)})")
            continue
        if kind not in _TYPES:
            problems.append(f"{prefix}type={kind}: cdckit does not apply this transform; it applies "
                            f"{', '.join(SUPPORTED)}. Remove it from transforms, or apply it downstream of cdckit")
            continue
        for key in ("predicate", "negate"):
            if key in own:
                own.pop(key)
                problems.append(f"{prefix}{key}: cdckit applies no predicates; remove it (the transform then applies "
                                f"to every record)")
        unknown = sorted(set(own) - set(_TYPES[kind].OPTIONS))
        for option in unknown:
            problems.append(f"{prefix}{option}: {kind.rsplit('.', 1)[-1]} in cdckit does not support this option; "
                            f"it supports {', '.join(_TYPES[kind].OPTIONS)}")
        if unknown:
            continue
        try:
            transforms.append(_TYPES[kind](alias, own))
        except (ValueError, re.error, OverflowError, RecursionError) as error:  # the last two a regex's too
            problems.append(f"transforms.{alias} ({kind.rsplit('.', 1)[-1]}): {error}")
    return transforms


def _check_errors_setting(name: str, value: str, problems: list[str]) -> None:
    if name in _ERRORS_FREE:
        return
    if name.startswith("errors.deadletterqueue."):
        problems.append(f"{name}: a dead letter queue exists only for sink connectors; cdckit is a source. For "
                        f"records a Kafka sink refuses as too large see cdckit.kafka.oversize.handling")
        return
    if name not in _ERRORS:
        problems.append(f"{name}: unknown errors.* setting; cdckit understands {', '.join(sorted(_ERRORS))}")
        return
    accepted, reason = _ERRORS[name]
    if value.lower() != accepted:
        problems.append(f"{name}={value} cannot be honoured: {reason}; remove it or set {name}={accepted}")


# -- applying the chain -----------------------------------------------------------------------------------------


def apply_chain(transforms: Iterable[Transform], record: Record) -> Record | None:
    for transform in transforms:
        result = transform.apply(record)
        if result is None:
            return None
        record = result
    return record
