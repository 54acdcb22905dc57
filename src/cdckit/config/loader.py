"""Load a connector configuration (Debezium JSON or .properties), apply overrides, validate everything at once.

Example::

    config = load_config(Path("connector.json"), overrides=["snapshot.mode=never"])
    config.int("snapshot.fetch.size")
"""

from __future__ import annotations

import builtins
import difflib
import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from cdckit.config.properties import (
    BY_NAME,
    PASSTHROUGH_PREFIXES,
    POSTGRES_CONNECTOR,
    SQLSERVER_CONNECTOR,
    YUGABYTEDB_CONNECTOR,
    Property,
)
from cdckit.config.secrets import (
    holds_secret,
    redact,
    remember,
    remember_settings,
    shown_name,
    shown_value,
)
from cdckit.errors import ConfigurationError, first_line
from cdckit.formats.debezium.column_mappers import is_pattern_property, parse_message_key_columns, validate_rule
from cdckit.formats.debezium.transforms import is_transform_setting
from cdckit.formats.debezium.transforms import problems as transform_problems
from cdckit.fsutil import file_mode

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")
_SKIPPABLE_OPS = {"c", "u", "d", "t", "none"}
_OVERRIDE_PREFIX = "snapshot.select.statement.overrides."
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
_METRICS_ENDPOINT = ("cdckit.metrics.host", "cdckit.metrics.timeout.ms", "cdckit.metrics.max.connections")
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # half of a UTF-16 pair: no character, and nothing can print it


class Config:
    """Validated, typed connector settings. ``str(config)`` never shows secrets (``cdckit.config.secrets``)."""

    def __init__(self, values: dict[builtins.str, object], passthrough: dict[builtins.str, builtins.str],
                 resolved_secrets: frozenset[builtins.str] = frozenset()) -> None:
        self._values = values
        self.passthrough = passthrough
        # settings whose value came from a secret store (${secret:...}): hidden whatever their name
        self.resolved_secrets = resolved_secrets

    def __getitem__(self, name: builtins.str) -> object:
        return self._values[name]

    def str(self, name: builtins.str) -> builtins.str:
        value = self._values[name]
        return "" if value is None else str(value)

    def int(self, name: builtins.str) -> builtins.int:
        value = self._values[name]
        assert isinstance(value, int)
        return value

    def bool(self, name: builtins.str) -> builtins.bool:
        return bool(self._values[name])

    def list(self, name: builtins.str) -> tuple[builtins.str, ...]:
        value = self._values[name]
        assert isinstance(value, tuple)
        return value

    @property
    def is_sqlserver(self) -> builtins.bool:
        return self._values["connector.class"] == SQLSERVER_CONNECTOR

    @property
    def is_yugabytedb(self) -> builtins.bool:
        return self._values["connector.class"] == YUGABYTEDB_CONNECTOR

    @property
    def connector_name(self) -> builtins.str:
        """The value of ``source.connector`` in events."""
        return "YugabyteDB" if self.is_yugabytedb else "postgresql"

    def as_properties(self, include_secrets: builtins.bool = False) -> dict[builtins.str, builtins.str]:
        """Every setting as strings (what the Spark sources receive as options); without ``include_secrets``, those
        whose name or value holds a secret are left out."""
        out: dict[builtins.str, builtins.str] = {}
        for name, value in self._values.items():
            if value is None:
                continue
            if not include_secrets and (BY_NAME[name].secret or holds_secret(name)):
                continue
            out[name] = ",".join(value) if isinstance(value, tuple) else _to_text(value)
        for name, text in self.passthrough.items():
            if include_secrets or not holds_secret(name):
                out[name] = text
        return out

    def redacted(self) -> dict[builtins.str, builtins.str]:
        """Every setting as it may be shown: secret values as ``********``, salts hidden in names, passwords inside
        connection strings hidden (``cdckit.config.secrets``)."""
        shown: dict[builtins.str, builtins.str] = {}
        for name, text in self.as_properties(include_secrets=True).items():
            secret = name in self.resolved_secrets or (name in BY_NAME and BY_NAME[name].secret)
            key = shown_name(name)
            if key in shown:  # two salts of one algorithm: both shown, numbered
                key = next(f"{key}#{n}" for n in range(2, len(shown) + 3) if f"{key}#{n}" not in shown)
            shown[key] = shown_value(name, text, resolved_secret=secret)
        return shown

    def __repr__(self) -> builtins.str:
        return f"Config({self.redacted()})"


def _to_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def is_uri(location: str | Path) -> bool:
    return str(location).startswith(("s3://", "s3a://"))


def read_config_file(path: Path | str) -> dict[str, str]:
    """Read a Debezium connector JSON (``{"name":..., "config":{...}}`` or a flat object) or a .properties file,
    from a path or an ``s3://`` URI (as the deployed jobs are given it)."""
    if is_uri(path):
        from cdckit.state import StateStore

        folder, _, name = str(path).rpartition("/")
        remote = StateStore(folder).read_text(name)
        if remote is None:
            raise ConfigurationError([f"configuration file {path} does not exist; check the URI (make deploy "
                                      f"writes connector.json beside the artefacts)"])
        text = remote
        path = Path(name)
    else:
        path = Path(path)
        if not path.exists():
            raise ConfigurationError([f"configuration file {path} does not exist; pass the path of a connector "
                                      f"JSON or .properties file"])
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigurationError([f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as "
                                      f"UTF-8"]) from None
        except OSError as exc:
            raise ConfigurationError([f"configuration file {path} cannot be read ({exc.strerror or exc}); pass the "
                                      f"path of a connector JSON or .properties file"]) from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError([f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                                      f"{exc.msg}); fix the file or use a .properties file"]) from None
        except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; arrays nested too deep
            raise ConfigurationError([f"{path} is JSON that cannot be read ({first_line(exc)}); fix the file or use "
                                      f"a .properties file"]) from None
        if not isinstance(document, dict):
            raise ConfigurationError([f"{path} must hold a JSON object with the connector properties"])
        body = document.get("config", document)
        if not isinstance(body, dict):
            raise ConfigurationError([f"{path}: \"config\" must be a JSON object of properties"])
        values = {str(key): _json_scalar(value) for key, value in body.items()}
        if "config" in document and "name" in document and "name" not in values:
            values["name"] = str(document["name"])
        return values
    return parse_properties(text)


def _json_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` line continuations."""
    values: dict[str, str] = {}
    problems: list[str] = []
    pending = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"^((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line)
        try:
            if match is None:
                values[_unescape(line)] = ""
                continue
            values[_unescape(match.group(1))] = _unescape(match.group(2))
        except ValueError as exc:  # a malformed \u escape
            problems.append(f"line {number}: {exc}")
    if problems:
        raise ConfigurationError(problems)
    return values


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    r"""Java's .properties escapes: a doubled backslash is one backslash, ``\t`` a tab, ``\uXXXX`` a character (two,
    a UTF-16 surrogate pair, for one beyond the Basic Multilingual Plane); raises ``ValueError`` for a malformed
    ``\u``, as Java does."""
    def replace(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if escaped == "u":
            raise ValueError("\\u must be followed by four hexadecimal digits, as in Java's .properties files "
                             "(\\u00e9 is é)")
        if escaped.startswith("u"):
            return chr(int(escaped[1:], 16))
        return _ESCAPES.get(escaped, escaped)

    text = re.sub(r"\\(u[0-9A-Fa-f]{4}|.)", replace, text)
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass") \
        if _SURROGATE.search(text) else text  # the pairs joined; a half left alone is refused in validation


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    problems = []
    for item in items:
        if "=" not in item:
            problems.append(f"--set {item!r} is not of the form key=value")
            continue
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    if problems:
        raise ConfigurationError(problems)
    return out


def load_config(path: Path | str | None = None, overrides: Iterable[str] = (),
                base: Mapping[str, str] | None = None) -> Config:
    """Merge ``base`` < file < ``--set`` overrides, then validate. ``${env:NAME}`` values read the environment."""
    raw: dict[str, str] = dict(base or {})
    if path is not None:
        raw.update(read_config_file(path))
    raw.update(parse_overrides(overrides))
    return validate(raw)


_SECRETS: dict[str, dict[str, object]] = {}


def _resolve(value: str, key: str, problems: list[str], from_secrets: set[str] | None = None) -> str:
    """Replace ``${env:NAME}`` with the environment variable and ``${secret:<id or ARN>:<field>}`` with a field of
    a JSON secret in AWS Secrets Manager (read once per run; the value never appears in a message). A setting that
    refers to a secret, in its text or in an environment variable's, is added to ``from_secrets``."""
    def env(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            problems.append(f"{key} refers to environment variable {name}, which is not set; export it")
            return ""
        return os.environ[name]

    def secret(match: re.Match[str]) -> str:
        secret_id, field = match.group(1), match.group(2)
        if from_secrets is not None:
            from_secrets.add(key)
        document = _secret(secret_id, key, problems)
        if document is None:
            return ""
        if field not in document:
            problems.append(f"{key} refers to field {field!r} of secret {secret_id}, which has no such field "
                            f"(it has: {', '.join(sorted(document)) or 'none'})")
            return ""
        remember(str(document[field]))  # hidden in any text, whatever else the setting's value holds
        return str(document[field])

    value = re.sub(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}", env, value)
    # A secret's name or ARN holds no '$', '{' or '}': each search stops at the next reference (linear time).
    return re.sub(r"\$\{secret:([^${}]+):([A-Za-z0-9_.-]+)\}", secret, value)


def _secret(secret_id: str, key: str, problems: list[str]) -> dict[str, object] | None:
    if secret_id in _SECRETS:
        return _SECRETS[secret_id]
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        problems.append(f"{key} refers to an AWS Secrets Manager secret; install boto3 (pip install 'cdckit[aws]')")
        return None
    try:
        response = boto3.client("secretsmanager").get_secret_value(SecretId=secret_id)
        document = json.loads(response.get("SecretString") or "{}")
    except (BotoCoreError, ClientError) as exc:
        problems.append(f"{key} refers to secret {secret_id}, which could not be read ({_error_code(exc)}); "
                        f"check the secret's name and the job role's secretsmanager:"
                        f"GetSecretValue permission")
        return None
    except json.JSONDecodeError:
        problems.append(f"{key} refers to secret {secret_id}, whose value is not a JSON object of fields")
        return None
    if not isinstance(document, dict):
        problems.append(f"{key} refers to secret {secret_id}, whose value is not a JSON object of fields")
        return None
    _SECRETS[secret_id] = document
    return document


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "error"))
    return "no response"


def validate(raw: Mapping[str, str]) -> Config:
    """Check every setting at once; a problem found is reported with every secret hidden (``secrets.redact``)."""
    problems: list[str] = []
    values: dict[str, object] = {}
    passthrough: dict[str, str] = {}
    resolved: dict[str, str] = dict(raw)  # the settings' texts, ${env:...} and ${secret:...} replaced
    # settings that refer to a secret; _resolve adds those reaching one through an environment variable
    from_secrets = {key for key, text in raw.items() if "${secret:" in text}
    try:
        _validate(raw, values, passthrough, resolved, problems, from_secrets)
    finally:  # this configuration's secrets are hidden from here on, in its problems, errors and the log
        remember_settings(resolved, from_secrets)
    if problems:
        raise ConfigurationError([redact(problem) for problem in problems])
    return Config(values, passthrough, frozenset(from_secrets))


def _validate(raw: Mapping[str, str], values: dict[str, object], passthrough: dict[str, str],
              resolved: dict[str, str], problems: list[str], from_secrets: set[str]) -> None:
    unresolved: set[str] = set()  # settings whose ${env:...} or ${secret:...} could not be resolved
    for key, text in raw.items():
        if key.startswith(PASSTHROUGH_PREFIXES):
            passthrough[key] = resolved[key] = _resolve(text, key, problems, from_secrets)
            continue
        if is_transform_setting(key):  # checked as a whole below; the Spark side applies them
            passthrough[key] = text
            continue
        if key.startswith(("producer.override.", "consumer.override.")):
            problems.append(_connect_override(key))
            continue
        prop = BY_NAME.get(key)
        if prop is None and key.startswith(_OVERRIDE_PREFIX):
            from cdckit.dialect.sqlserver.snapshot import check_override

            problem = check_override(key[len(_OVERRIDE_PREFIX):], text)
            if problem:
                problems.append(problem)
            passthrough[key] = text
            continue
        if prop is None and is_pattern_property(key):
            problem = validate_rule(key, text)
            if problem:
                problems.append(problem)
            passthrough[key] = text
            continue
        if (key == "cdckit.sink" and text.strip() == "lake") or key == "cdckit.lake.path":
            if LAKE_REPLACED not in problems:
                problems.append(LAKE_REPLACED)
            continue
        if prop is None and key.split(".", 1)[0] in _converter_names(raw):
            continue  # a custom converter's own settings (<name>.type, ...): the converters problem covers them
        if prop is None:
            problems.append(_unknown(key))
            continue
        before = len(problems)
        resolved[key] = _resolve(text, key, problems, from_secrets)
        if len(problems) > before:  # its reference is reported; it is not also "required" below
            unresolved.add(key)
        values[key] = _parse(prop, resolved[key], problems)
    for key, text in resolved.items():
        if "\x00" in key or "\x00" in text:
            problems.append(f"{shown_name(key)} holds a NUL character, which no setting can carry; remove it")
        if _SURROGATE.search(key) or _SURROGATE.search(text):
            problems.append(f"{shown_name(key)} holds half of a UTF-16 surrogate pair, which is not a character: "
                            f"write the character, or its whole pair (\\uD83D\\uDE00); bytes given with --set must "
                            f"be UTF-8")
    connector_class = str(values.get("connector.class") or "")
    for prop in BY_NAME.values():
        if values.get(prop.name) in (None, ""):
            if prop.required and prop.name not in unresolved:
                problems.append(f"{prop.name} is required ({prop.doc}); set it in the configuration file or "
                                f"with --set {prop.name}=...")
            default = prop.default_for(connector_class) if prop.default_for else prop.default
            values[prop.name] = default
    if values.get("cdckit.message.format") == "qlik" and raw.get("cdckit.debezium.format"):
        problems.append("cdckit.debezium.format chooses the release of Debezium's envelopes, which "
                        "cdckit.message.format=qlik does not write: remove one of them")
    if values.get("cdckit.message.format") == "qlik":
        # Qlik's metadata messages announce each table's structure; Debezium's schema change records are not
        # written beside them (SQL Server's default of include.schema.changes is Debezium's, for its format).
        if "include.schema.changes" in raw and values.get("include.schema.changes"):
            problems.append("include.schema.changes=true writes Debezium's schema change records; with "
                            "cdckit.message.format=qlik each table's structure is in Qlik's metadata messages: "
                            "remove include.schema.changes")
        values["include.schema.changes"] = False
        if values.get("provide.transaction.metadata"):
            problems.append("provide.transaction.metadata=true writes Debezium's BEGIN/END records and transaction "
                            "block; Qlik messages carry their transaction in their headers (transactionId, "
                            "transactionEventCounter, transactionLastEvent): remove it with cdckit.message.format=qlik")
    _check_connector_family(raw, values, connector_class, problems)
    _check_combinations(values, problems, passthrough)
    _check_metrics_endpoint(raw, values, problems)
    _check_transforms(values, problems, passthrough)
    _check_connections(raw, values, problems)
    _check_debezium_settings(raw, values, problems)


_INTERVAL_UNITS = {"ms": "milliseconds", "millisecond": "milliseconds", "milliseconds": "milliseconds",
                   "s": "seconds", "sec": "seconds", "secs": "seconds", "second": "seconds", "seconds": "seconds",
                   "m": "minutes", "min": "minutes", "mins": "minutes", "minute": "minutes", "minutes": "minutes",
                   "h": "hours", "hour": "hours", "hours": "hours", "d": "days", "day": "days", "days": "days"}
_INTERVAL_PART = re.compile(r"\s*(\d+)\s*([a-z]+)\s*")


def trigger_interval(text: str) -> str | None:
    """A processing-time trigger's interval as Spark reads it (``10 seconds``, ``1 minute 30 seconds``), from that
    form or the short one (``10s``, ``500ms``, ``1m30s``); None when it is neither."""
    body = text.strip().lower()
    body = body[len("interval"):] if body.startswith("interval ") else body
    parts, end = [], 0
    for match in _INTERVAL_PART.finditer(body):
        if match.start() != end or match.group(2) not in _INTERVAL_UNITS:
            return None
        parts.append(f"{int(match.group(1))} {_INTERVAL_UNITS[match.group(2)]}")
        end = match.end()
    return " ".join(parts) if parts and end == len(body) else None


def _converter_names(raw: Mapping[str, str]) -> set[str]:
    return {name.strip() for name in raw.get("converters", "").split(",") if name.strip()}


_INSTANCE_NAME = re.compile(r"^[^\\,;{}=\s]{1,16}$")


def _check_debezium_settings(raw: Mapping[str, str], values: dict[str, object], problems: list[str]) -> None:
    """Debezium settings cdckit honours only in part, or not at all: each refused by name with the reason and what
    to do instead (docs/decisions/0034)."""
    instance = str(values.get("database.instance") or "")
    if instance:
        if not _INSTANCE_NAME.match(instance):
            problems.append(f"database.instance={instance!r} is not a SQL Server instance name (at most 16 "
                            f"characters, no backslash, comma, semicolon, braces, '=' or spaces); give the name alone "
                            f"(SALES for host\\SALES)")
        if "database.port" not in raw:  # the SQL Server Browser finds the named instance's port
            values["database.port"] = None
    patterns = values.get("snapshot.include.collection.list") or ()
    assert isinstance(patterns, tuple)
    for pattern in patterns:
        try:
            re.compile(str(pattern))
        except (re.error, OverflowError, RecursionError) as exc:
            problems.append(f"snapshot.include.collection.list entry {pattern!r} is not a valid regular expression "
                            f"({exc})")
    if patterns and values.get("snapshot.mode") in ("never", "no_data", "schema_only"):
        problems.append(f"snapshot.include.collection.list chooses the tables a snapshot reads, and "
                        f"snapshot.mode={values.get('snapshot.mode')} reads none; remove one of them")
    if values.get("source.struct.version") == "v1":
        problems.append("source.struct.version=v1 asks for the source block of Debezium before 0.10 (deprecated, "
                        "planned for removal); cdckit writes the v2 block, the one Debezium writes by default and the "
                        "only one its formats reproduce: remove the setting or set v2")
    mode = values.get("event.processing.failure.handling.mode")
    if mode not in (None, "fail"):
        problems.append(f"event.processing.failure.handling.mode={mode} would skip a change cdckit cannot process, "
                        f"and a consumer's copy would silently differ from the table; cdckit stops with an error "
                        f"naming the event and its position, and the batch is written again, whole, when the job runs "
                        f"again (fail). Remove the setting or set fail; for records too large for Kafka, "
                        f"cdckit.kafka.oversize.handling=dead-letter keeps them aside")
    wait = values.get("retriable.restart.connector.wait.ms")
    if isinstance(wait, int) and wait != 10000:
        problems.append(f"retriable.restart.connector.wait.ms={wait}: cdckit does not restart itself after an error; "
                        f"the stream job stops and resumes from its checkpoint when run again, Spark retries a failed "
                        f"task (spark.task.maxFailures), and the deployed stream is restarted by its scheduler (the "
                        f"Spark operator after 10 s, growing linearly, which is Debezium's default of 10000; EMR "
                        f"Serverless by its retry policy). Remove the setting and set the wait there")
    names = sorted(_converter_names(raw))
    if names:
        problems.append(f"converters={','.join(names)} names Kafka Connect custom converters, Java classes "
                        f"({names[0]}.type) that cdckit, which is no Kafka Connect worker, cannot run. Remove it and "
                        f"its {', '.join(n + '.*' for n in names)} settings; what cdckit offers instead: "
                        f"decimal.handling.mode, time.precision.mode, binary.handling.mode, column.mask.with.N.chars, "
                        f"column.truncate.to.N.chars, column.mask.hash.* (salted hashes), "
                        f"message.key.columns and the transforms ExtractNewRecordState, ByLogicalTableRouter and "
                        f"RegexRouter")


def _check_connections(raw: Mapping[str, str], values: dict[str, object], problems: list[str]) -> None:
    """How cdckit reaches the source: the SQL Server connection factory (a test seam the lab's code alone may fill)
    and libpq's rule for ``database.sslrootcert=system`` (verify-full, its default then, and nothing weaker)."""
    from cdckit.dialect.sqlserver.connection import FACTORY_SETTING, MODEL_SETTING, factory_problem

    problem = factory_problem(str(values.get(FACTORY_SETTING) or ""))
    if problem:
        problems.append(problem)
    if values.get(MODEL_SETTING) and not values.get(FACTORY_SETTING):
        problems.append(f"{MODEL_SETTING} is read by the lab's model of SQL Server only, which pyodbc's connections "
                        f"never reach; remove it, or set {FACTORY_SETTING}=cdckit_lab.sqlserver_model:connect")
    if values.get("database.sslrootcert") == "system":
        if "database.sslmode" not in raw:
            values["database.sslmode"] = "verify-full"
        elif values.get("database.sslmode") != "verify-full":
            problems.append(f"database.sslrootcert=system checks the server against the machine's trust store, which "
                            f"libpq allows only with database.sslmode=verify-full, not "
                            f"{values.get('database.sslmode')}; set database.sslmode=verify-full")


_FAMILY_NAMES = {"sqlserver": "SQL Server", "postgres": "PostgreSQL and YugabyteDB"}


def _check_connector_family(raw: Mapping[str, str], values: Mapping[str, object], connector_class: str,
                            problems: list[str]) -> None:
    """A setting only the other connector reads would be accepted and do nothing: refuse it. Its default is
    accepted (a configuration written out whole, as ``cdckit validate`` prints it, holds every default)."""
    if connector_class not in (POSTGRES_CONNECTOR, YUGABYTEDB_CONNECTOR, SQLSERVER_CONNECTOR):
        return
    family = "sqlserver" if connector_class == SQLSERVER_CONNECTOR else "postgres"
    for key in raw:
        prop = BY_NAME.get(key)
        only = prop.only if prop else ("sqlserver" if key.startswith(_OVERRIDE_PREFIX) else "")
        if prop is not None and values.get(key) in (prop.default, None, "", ()):
            continue
        if only and only != family:
            hint = "; use database.names" if key == "database.dbname" else (
                "; use database.dbname" if key == "database.names" else "")
            problems.append(f"{key} applies to {_FAMILY_NAMES[only]} only and does nothing with "
                            f"connector.class={connector_class}; remove it{hint}")


def _connect_override(key: str) -> str:
    if key.startswith("consumer."):
        return f"{key}: a source connector has no consumer of its own to configure; remove it"
    name = key[len("producer.override."):]
    return (f"{key}: cdckit's Kafka sink takes producer settings as kafka.<name>; set kafka.{name} instead (it "
            f"reaches the producer of cdckit.sink=kafka or eventhubs)")


LAKE_REPLACED = (
    "cdckit.sink=lake and cdckit.lake.path (Parquet change tables with a _cdckit_lake.json document) were replaced by "
    "cdckit.sink=delta: Delta Lake change and current-state tables under cdckit.delta.path (docs/decisions/0025). "
    "An existing lake folder is not converted: its Parquet files stay readable with spark.read.parquet. To fill Delta "
    "tables from the start, set cdckit.sink=delta with a new cdckit.checkpoint.location and slot.name, so a new "
    "snapshot is taken")


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, list(BY_NAME), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else "; remove it (see `cdckit properties` for the list)"
    return f"unknown property {shown_name(key)}{hint}"


def _parse(prop: Property, text: str, problems: list[str]) -> object:
    text = text.strip()
    if text == "" and prop.kind not in ("string", "password", "list"):
        return None
    shown = "********" if prop.secret else repr(text)
    if prop.kind == "int":
        try:
            number = int(text)
        except ValueError:
            problems.append(f"{prop.name}={shown} is not a whole number")
            return None
        if prop.minimum is not None and number < prop.minimum:
            problems.append(f"{prop.name}={number} is below the minimum {prop.minimum}")
        return number
    if prop.kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        problems.append(f"{prop.name}={shown} is not a boolean; use true or false")
        return None
    if prop.kind == "choice":
        if text not in prop.choices:
            problems.append(f"{prop.name}={shown} is not one of: {', '.join(prop.choices)}")
        return text
    if prop.kind == "list":
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return text


def _check_combinations(values: dict[str, object], problems: list[str], passthrough: dict[str, str]) -> None:
    if values.get("cdckit.files.mode") is not None:
        try:
            file_mode(str(values["cdckit.files.mode"]))
        except ValueError:
            problems.append(f"cdckit.files.mode={values['cdckit.files.mode']!r} is not a file mode; give it in octal, "
                            f"with the owner's read and write (600, 640, 644)")
    for family in ("schema", "table", "column"):
        if values.get(f"{family}.include.list") and values.get(f"{family}.exclude.list"):
            problems.append(f"{family}.include.list and {family}.exclude.list are mutually exclusive; keep one")
    for key in ("schema.include.list", "schema.exclude.list", "table.include.list", "table.exclude.list",
                "column.include.list", "column.exclude.list"):
        patterns = values.get(key) or ()
        assert isinstance(patterns, tuple)
        for pattern in patterns:
            try:
                re.compile(str(pattern))
            except (re.error, OverflowError, RecursionError) as exc:  # a repetition past 2^32, groups nested deep
                problems.append(f"{key} entry {pattern!r} is not a valid regular expression ({exc})")
    tasks = values.get("tasks.max")
    if isinstance(tasks, int) and tasks > 1:
        problems.append(f"tasks.max={tasks}: one cdckit job reads every table and database, and its parallelism is "
                        f"Spark's (executors, cdckit.snapshot.chunk.rows, cdckit.stream.partitions); remove tasks.max "
                        f"or set it to 1")
    slot = str(values.get("slot.name") or "")
    if slot and not _SLOT_NAME.match(slot):
        problems.append(f"slot.name={slot!r} may only contain lower-case letters, digits and underscores "
                        f"(at most 63)")
    interval = str(values.get("cdckit.trigger.interval") or "")
    if interval:
        normal = trigger_interval(interval)
        if normal is None:
            problems.append(f"cdckit.trigger.interval={interval!r} is not an interval Spark reads; write a number "
                            f"and a unit, e.g. '10 seconds', '500 milliseconds', '1 minute' (or 10s, 500ms, 1m)")
        else:
            values["cdckit.trigger.interval"] = normal
    skipped = values.get("skipped.operations") or ()
    assert isinstance(skipped, tuple)
    for op in skipped:
        if op not in _SKIPPABLE_OPS:
            problems.append(f"skipped.operations entry {op!r} is not one of c, u, d, t, none")
    if values.get("data.query.mode") == "function":
        problems.append("data.query.mode=function reads changes through cdc.fn_cdc_get_all_changes_<instance>, which "
                        "does not return __$command_id, so a deferred update's delete and insert rows could only be "
                        "ordered by __$seqval and a consumer could lose those rows; cdckit reads the change tables "
                        "directly (direct, Debezium's default): remove the setting or set data.query.mode=direct")
    if values.get("connector.class") == SQLSERVER_CONNECTOR and not values.get("database.names"):
        problems.append("database.names is required for SQL Server (the databases to capture, comma-separated); "
                        "set it in the configuration file or with --set database.names=...")
    elif values.get("connector.class") in (POSTGRES_CONNECTOR, YUGABYTEDB_CONNECTOR) \
            and not values.get("database.dbname"):
        problems.append("database.dbname is required (database to capture); set it in the configuration file or "
                        "with --set database.dbname=...")
    try:
        metric_tags(str(values.get("custom.metric.tags") or ""))
    except ValueError as exc:
        problems.append(str(exc))
    if values.get("cdckit.sink") == "kafka" and not passthrough.get("kafka.bootstrap.servers"):
        problems.append("kafka.bootstrap.servers is required for cdckit.sink=kafka (host:port,...)")
    api_timeout = passthrough.get("kafka.default.api.timeout.ms")
    if api_timeout is not None and not api_timeout.isdigit():
        problems.append(f"kafka.default.api.timeout.ms={api_timeout!r} is not a number of milliseconds (Kafka's "
                        f"default is 60000)")
    if values.get("cdckit.sink") == "delta":
        if values.get("cdckit.message.format") == "qlik":
            problems.append("cdckit.sink=delta writes change rows from Debezium envelopes; cdckit.message.format=qlik "
                            "is for the files, kafka and eventhubs sinks")
        if values.get("value.converter.schemas.enable") is False:
            problems.append("cdckit.sink=delta reads each event's schema; remove value.converter.schemas.enable=false")
    if values.get("cdckit.sink") == "eventhubs":
        if not values.get("cdckit.eventhubs.namespace"):
            problems.append("cdckit.eventhubs.namespace is required for cdckit.sink=eventhubs")
        if values.get("cdckit.eventhubs.auth") == "connection-string" \
                and not values.get("cdckit.eventhubs.connection.string"):
            problems.append("cdckit.eventhubs.connection.string is required with cdckit.eventhubs.auth="
                            "connection-string; use ${env:NAME} to keep it out of files")
        if values.get("cdckit.eventhubs.tier") == "basic" \
                and "compact" in str(values.get("topic.creation.default.cleanup.policy") or ""):
            problems.append("topic.creation.default.cleanup.policy=compact is not available on the Event Hubs basic "
                            "tier; remove it or use the standard tier or higher")
    if values.get("snapshot.mode") == "when_needed" and values.get("connector.class") == SQLSERVER_CONNECTOR:
        problems.append("snapshot.mode=when_needed is not a mode of Debezium's SQL Server connector (initial, "
                        "initial_only, schema_only); use initial, and set cdckit.sqlserver.purged.changes=resnapshot "
                        "to snapshot a table again when the cleanup job removed changes cdckit had not read")
    signals = str(values.get("signal.data.collection") or "")
    parts = 3 if values.get("connector.class") == SQLSERVER_CONNECTOR else 2
    if signals and (len(signals.split(".")) != parts or not all(signals.split("."))):
        form = "<database>.<schema>.<table>" if parts == 3 else "<schema>.<table>"
        problems.append(f"signal.data.collection={signals!r} must name the signalling table as {form}")
    if values.get("plugin.name") == "yboutput" and values.get("connector.class") != YUGABYTEDB_CONNECTOR:
        problems.append("plugin.name=yboutput exists only on YugabyteDB; use pgoutput with the PostgreSQL connector, "
                        "or set connector.class=io.debezium.connector.postgresql.YugabyteDBConnector")
    try:
        key_columns = parse_message_key_columns(str(values.get("message.key.columns") or ""))
    except ValueError as exc:
        problems.append(str(exc))
        key_columns = ()
    for pattern, _ in key_columns:
        try:
            re.compile(pattern)
        except (re.error, OverflowError, RecursionError) as exc:
            problems.append(f"message.key.columns entry {pattern!r} is not a valid regular expression ({exc})")
    # the parts of topic names a user gives: Kafka's legal characters (as Debezium's topic.prefix check), and never
    # a name of dots alone, which Kafka refuses and which would name a folder's own or parent folder in the files sink
    for key in ("topic.prefix", "topic.heartbeat.prefix", "topic.transaction"):
        part = values.get(key)
        if part is None or part == "":
            continue
        if not re.fullmatch(r"[A-Za-z0-9._-]+", str(part)):
            problems.append(f"{key}={part!r} may only contain letters, digits, '.', '_' and '-'")
        elif not str(part).strip("."):
            problems.append(f"{key}={part!r} is dots alone, which Kafka refuses as a topic name; use letters or digits")


def _check_metrics_endpoint(raw: Mapping[str, str], values: dict[str, object], problems: list[str]) -> None:
    port = values.get("cdckit.metrics.port")
    if isinstance(port, int) and port > 65535:
        problems.append(f"cdckit.metrics.port={port} is not a TCP port (1 to 65535, or 0 for no endpoint)")
    host = str(values.get("cdckit.metrics.host") or "")
    if host and not _is_address(host):
        problems.append(f"cdckit.metrics.host={host!r} is neither an IP address nor a host name; use 127.0.0.1 (this "
                        f"machine only), 0.0.0.0 (every interface) or the address Prometheus scrapes")
    if not port:
        for key in _METRICS_ENDPOINT:
            if key in raw and values.get(key) != BY_NAME[key].default:
                problems.append(f"{key} configures the Prometheus endpoint, which cdckit.metrics.port=0 turns off; "
                                f"set cdckit.metrics.port or remove {key}")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_HOST_NAME.match(host))
    return True


def _check_transforms(values: dict[str, object], problems: list[str], passthrough: dict[str, str]) -> None:
    settings = {key: value for key, value in passthrough.items() if is_transform_setting(key)}
    found = transform_problems(settings)
    problems.extend(found)
    if found or not any(key == "transforms" and value.strip() for key, value in settings.items()):
        return
    if values.get("cdckit.message.format") == "qlik":
        problems.append("transforms apply to Debezium's records; cdckit.message.format=qlik writes Qlik Replicate "
                        "messages, which they do not know: remove the transforms or use the Debezium format")
    if values.get("cdckit.sink") == "delta":
        problems.append("cdckit.sink=delta writes change rows from Debezium envelopes and applies no transforms; "
                        "remove the transforms for the delta sink (its tables hold the after image already)")


def metric_tags(text: str) -> dict[str, str]:
    """``custom.metric.tags`` (``k1=v1,k2=v2``): labels on every metric."""
    tags = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"custom.metric.tags entry {item!r} is not key=value; write k1=v1,k2=v2")
        tags[key.strip()] = value.strip()
    return tags
