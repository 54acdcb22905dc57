"""Fuzzing the configuration loader (``cdckit.config.loader``): random JSON documents, random and truncated
.properties files, values of the wrong type for every declared property, unicode, huge strings, NUL characters and
nested ``${env:...}`` / ``${secret:...}`` references.

Loading either succeeds or raises ``ConfigurationError``, whose message keeps the project's convention (a heading,
then one line per problem) and shows no secret: never another exception, never a hang. ``cdckit validate`` on bad
files exits with status 2 and no traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cdckit.config import Config, load_config, loader, secrets, validate
from cdckit.config.loader import parse_properties
from cdckit.config.properties import PROPERTIES, Property
from cdckit.errors import ConfigurationError
from cdckit.formats.debezium.column_mappers import parse_message_key_columns, parse_rules

# Fast enough for CI and the same examples on every run. A load takes milliseconds, two seconds with values of 100 kB
# (sqlglot parsing one as T-SQL); the deadline catches a hang or a quadratic path (those found took 10 to 25 s), and
# pytest-timeout's marker bounds each test as a whole.
FUZZ = settings(max_examples=200, derandomize=True, database=None, deadline=timedelta(seconds=8),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
pytestmark = pytest.mark.timeout(300)

PG = "io.debezium.connector.postgresql.PostgresConnector"
BASE = {"connector.class": PG, "database.hostname": "db.example.com", "database.user": "replicator",
        "database.password": "Fuzz-db-password-1", "database.dbname": "shop", "topic.prefix": "dbserver1"}
SECRET = "Fuzz-secret-value-2"  # a field of the secret store's document: never shown
ENV = {"CDCKIT_FUZZ_SET": "from-env", "CDCKIT_FUZZ_ARN": "fuzz/db",
       "CDCKIT_FUZZ_NESTED": "${secret:fuzz/db:password}", "CDCKIT_FUZZ_SELF": "${env:CDCKIT_FUZZ_SELF}"}
HIDDEN = (BASE["database.password"], SECRET)

_MISSING = object()


@contextmanager
def isolated() -> Iterator[None]:
    """The environment the references read, a secret store of one secret (no AWS call: boto3 is made unimportable,
    so any other secret is a problem), and a fresh memory of the secrets to hide."""
    saved_env = {name: os.environ.get(name) for name in [*ENV, "CDCKIT_FUZZ_UNSET"]}
    saved_boto3 = sys.modules.get("boto3", _MISSING)
    saved_secrets, saved_remembered = loader._SECRETS, secrets._remembered
    os.environ.update(ENV)
    os.environ.pop("CDCKIT_FUZZ_UNSET", None)
    sys.modules["boto3"] = None  # type: ignore[assignment]
    loader._SECRETS = {"fuzz/db": {"password": SECRET, "user": "replicator"}}
    secrets._remembered = set()
    try:
        yield
    finally:
        secrets._remembered, loader._SECRETS = saved_remembered, saved_secrets
        if saved_boto3 is _MISSING:
            sys.modules.pop("boto3", None)
        else:
            sys.modules["boto3"] = saved_boto3  # type: ignore[assignment]
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """What validation imports on first use (sqlglot, the transforms), imported before any deadline runs."""
    with isolated(), pytest.raises(ConfigurationError):
        validate({**BASE, "snapshot.select.statement.overrides.dbo.t": "SELECT 1", "transforms": "t",
                  "transforms.t.type": "org.apache.kafka.connect.transforms.RegexRouter", "transforms.t.regex": "(",
                  "transforms.t.replacement": "b"})


def loads_or_fails_clearly(load: Callable[[], Config]) -> Config | None:
    """Run ``load``: a configuration whose shown form hides every secret and can be printed, or None after a
    ``ConfigurationError`` of one heading and one line per problem, printable and without a secret. Any other
    exception fails the test."""
    with isolated():
        try:
            config = load()
        except ConfigurationError as exc:
            message = str(exc)
            lines = message.splitlines()
            count = len(exc.problems)
            assert lines[0] == f"the connector configuration has {count} problem{'s' if count > 1 else ''}:", message
            assert len(lines) == 1 + count and all(line.startswith("  - ") for line in lines[1:]), message
            message.encode("utf-8")  # the command prints it: no lone surrogate
            for hidden in HIDDEN:
                assert hidden not in message
            return None
        shown = "\n".join(f"{key}={value}" for key, value in config.redacted().items())  # cdckit validate's output
        shown.encode("utf-8")
        for hidden in HIDDEN:
            assert hidden not in shown
        # what the job reads of it later takes it as validated: the column rules, the key columns' regexes
        parse_rules(config.as_properties(include_secrets=True))
        for pattern, _ in parse_message_key_columns(config.str("message.key.columns")):
            re.compile(pattern)
        return config


# -- what goes into a configuration --------------------------------------------------------------------------------

PROPERTY_NAMES = [prop.name for prop in PROPERTIES]
SPECIAL_KEYS = [
    "kafka.bootstrap.servers", "kafka.sasl.jaas.config", "spark.executor.memory", "transforms", "transforms.t.type",
    "transforms.t.regex", "transforms.t.replacement", "transforms.r.topic.regex", "errors.tolerance",
    "predicates", "column.mask.hash.SHA-256.with.salt.pepper", "column.mask.with.8.chars",
    "column.truncate.to.0.chars", "column.truncate.to." + "9" * 5000 + ".chars", "column.mask.with." + "7" * 12 +
    ".chars", "snapshot.select.statement.overrides.dbo.t", "producer.override.acks", "consumer.override.x",
    "cdckit.lake.path",
]
REFERENCES = [
    "${env:CDCKIT_FUZZ_SET}", "${env:CDCKIT_FUZZ_UNSET}", "${env:CDCKIT_FUZZ_NESTED}", "${env:CDCKIT_FUZZ_SELF}",
    "${env:}", "${env:1BAD}", "${secret:fuzz/db:password}", "${secret:fuzz/db:missing}", "${secret:other:f}",
    "${secret:${env:CDCKIT_FUZZ_ARN}:password}", "${secret:fuzz/db:${env:CDCKIT_FUZZ_SET}}", "${secret:fuzz/db}",
    "${secret::password}", "${env:CDCKIT_FUZZ_SET", "$${env:CDCKIT_FUZZ_SET}}",
]
ODD_VALUES = [
    "", " ", "true", "No", "ON", "-1", "0", "65536", "2147483648", "1e3", "0x10", "٣", "nan", "\x00", "a\x00b",
    "line\nbreak", "\r", "\u2028", "\ud800", "\udcff", "\x1b[2J", "é", "😀", "(", "a{99999999999}", "(" * 2000,
    "[a-", "SELECT 'unterminated", "SELECT " + "(" * 3000 + "1" + ")" * 3000, "SELECT 1 FROM t WHERE x = = 1",
    "dbo.t", "c,u,d,t,x", "a=b,c", "k=", "public.t:id;(:x", "s3://bucket/x", "x://u:pw@h", "999999999999999999999",
]
HUGE_VALUES = [
    "x" * 100_000, "9" * 5000, "salt" * 20_000, "a." * 50_000, "${secret:" * 20_000, "${secret:a" * 20_000,
    "${env:" * 20_000, "salt." + "'" * 50_000 + "x", "a," * 50_000, "password=" * 20_000,
]
KEYS = st.one_of(st.sampled_from(PROPERTY_NAMES), st.sampled_from(SPECIAL_KEYS), st.text(max_size=30))
VALUES = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(categories=["Cs", "Cc", "Zl", "Zp", "Ll", "So"]), max_size=20),  # lone surrogates too
    st.sampled_from(ODD_VALUES),
    st.sampled_from(REFERENCES),
    st.lists(st.sampled_from(REFERENCES + ODD_VALUES[:20]), min_size=2, max_size=5).map("".join),
    st.integers().map(str),
    st.floats().map(str),
    st.sampled_from(HUGE_VALUES),
)
SETTINGS = st.dictionaries(KEYS, VALUES, max_size=8)


# -- validation of settings ----------------------------------------------------------------------------------------


@FUZZ
@given(SETTINGS)
@example({"name": "${secret:" * 20_000})  # a quadratic search for references: 18 s
@example({"name": "${env:CDCKIT_FUZZ_NESTED}"})  # a secret reached through the environment was shown
@example({"transforms": "t", "transforms.t.type": "org.apache.kafka.connect.transforms.RegexRouter",
          "transforms.t.regex": "a{99999999999}", "transforms.t.replacement": "x"})  # re.compile's OverflowError
@example({"table.include.list": "(" * 2000})  # re.compile's RecursionError
@example({"column.mask.hash.SHA-256.with.salt.pepper": "a{99999999999}"})  # OverflowError
@example({"column.truncate.to." + "9" * 5000 + ".chars": "public.t.c"})  # int()'s ValueError past 4300 digits
@example({"snapshot.select.statement.overrides.dbo.t": "SELECT 'unterminated"})  # sqlglot's TokenError
@example({"line\nbreak": "1"})  # a problem on two lines
@example({"name": "\ud800"})  # accepted, and cdckit validate could not print it
@example({"database.hostname": "a\x00b"})  # accepted: libpq and file paths refuse NUL later
@example({"salt" * 20_000: "1"})  # quadratic searches for a salt to hide: 13 s
@example({"max.batch.size": "salt." + "'" * 50_000 + "x"})  # the same, in a problem's text: 20 s
@example({"name": "a." * 100_000})  # a quadratic search for a URL's password: 15 s
@example({"max.batch.size": "${secret:fuzz/db:password}\x7f"})  # a secret inside a value shown escaped
@example({"message.key.columns": "public.(orders:id"})  # accepted; the job's formatting then raised re.error
def test_any_settings_over_a_valid_configuration_load_or_fail_clearly(settings: dict[str, str]) -> None:
    loads_or_fails_clearly(lambda: validate({**BASE, **settings}))


@FUZZ
@given(SETTINGS)
def test_any_settings_alone_load_or_fail_clearly(settings: dict[str, str]) -> None:
    loads_or_fails_clearly(lambda: validate(settings))


@FUZZ
@given(st.lists(st.one_of(st.builds("{}={}".format, KEYS, VALUES), st.text(max_size=20)), max_size=6))
def test_any_command_line_settings_load_or_fail_clearly(overrides: list[str]) -> None:
    loads_or_fails_clearly(lambda: load_config(None, overrides, base=BASE))


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda prop: prop.name)
@settings(FUZZ, max_examples=25)
@given(value=VALUES)
def test_every_declared_property_takes_any_value_or_fails_clearly(prop: Property, value: str) -> None:
    loads_or_fails_clearly(lambda: validate({**BASE, prop.name: value}))


# -- files ---------------------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.sampled_from(ODD_VALUES),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3),
    max_leaves=12)
JSON_DOCUMENTS = st.one_of(
    JSON_VALUES,
    st.dictionaries(KEYS, JSON_VALUES | VALUES, max_size=6).map(lambda config: {"name": "c", "config": {**BASE,
                                                                                                        **config}}),
    st.dictionaries(KEYS, VALUES, max_size=6).map(lambda config: {**BASE, **config}),
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-config")


def _written(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


@FUZZ
@given(JSON_DOCUMENTS, st.data())
def test_any_json_document_whole_or_truncated_loads_or_fails_clearly(folder: Path, document: object,
                                                                      data: st.DataObject) -> None:
    text = json.dumps(document).encode("utf-8")
    path = _written(folder, "connector.json", text)
    loads_or_fails_clearly(lambda: load_config(path))
    cut = data.draw(st.integers(0, len(text)), label="cut")
    path = _written(folder, "connector.json", text[:cut])
    loads_or_fails_clearly(lambda: load_config(path))


@pytest.mark.parametrize("data", [
    b'{"name": "\xff"}',  # not UTF-8
    b'{"name": "\xc3',  # cut inside a character
    b"[" * 100_000 + b"]" * 100_000,  # nested past the parser's recursion limit
    b'{"database.port": ' + b"1" * 5000 + b"}",  # an integer past Python's 4300 digits
    json.dumps({**BASE, "name": "\ud800"}).encode(),  # half a surrogate pair
    json.dumps({**BASE, "database.hostname": "a\x00b"}).encode(),  # a NUL character
    json.dumps({**BASE, "line\nbreak": "1"}).encode(),  # a key on two lines
], ids=["not-utf8", "cut-character", "deep", "huge-integer", "surrogate", "nul", "line-break-key"])
def test_a_bad_json_file_is_a_configuration_error(folder: Path, data: bytes) -> None:
    """Regression: these raised UnicodeDecodeError, RecursionError or ValueError, or were accepted and broke the
    command's output (a lone surrogate cannot be printed) or a problem's single line."""
    path = _written(folder, "connector.json", data)
    assert loads_or_fails_clearly(lambda: load_config(path)) is None


PROPERTY_LINES = st.one_of(
    st.builds(lambda key, separator, value: f"{key}{separator}{value}", KEYS, st.sampled_from(["=", ":", " ", " = "]),
              VALUES),
    st.sampled_from(["# comment", "! comment", "", "   ", "key\\", "\\", "a\\u12=b", "b=\\uD83D\\uDE00",
                     "c=\\uD800", "d=\\", "e=\\\\", "\\u0000=x", "f=\\uZZZZ", "g\\=h=i", "j\\\n  k=l"]),
    st.text(max_size=30),
)


@FUZZ
@given(st.lists(PROPERTY_LINES, max_size=10), st.sampled_from(["\n", "\r\n", "\r"]), st.data())
@example(["a\\u12=b"], "\n", None)
def test_any_properties_file_whole_or_truncated_loads_or_fails_clearly(folder: Path, lines: list[str], newline: str,
                                                                        data: st.DataObject | None) -> None:
    base = [f"{key}={value}" for key, value in BASE.items()]
    text = newline.join(base + lines).encode("utf-8", "surrogatepass")
    path = _written(folder, "connector.properties", text)
    loads_or_fails_clearly(lambda: load_config(path))
    if data is not None:
        cut = data.draw(st.integers(0, len(text)), label="cut")  # a cut inside a character too
        path = _written(folder, "connector.properties", text[:cut])
        loads_or_fails_clearly(lambda: load_config(path))


@pytest.mark.parametrize(("line", "value"), [
    ("name=\\u00e9t\\u00e9", "été"),
    ("name=\\uD83D\\uDE00", "😀"),  # a character beyond the BMP, as Java writes it: a surrogate pair
    ("name=a\\\\u0041", "a\\u0041"),
])
def test_unicode_escapes_of_properties_files_read_as_javas(line: str, value: str) -> None:
    assert parse_properties(line) == {"name": value}


@pytest.mark.parametrize(("line", "says"), [
    ("name=a\\u12", "line 1: \\u must be followed by four hexadecimal digits"),
    ("name=\\uD800", "name holds half of a UTF-16 surrogate pair"),
])
def test_a_malformed_unicode_escape_is_a_configuration_error(line: str, says: str) -> None:
    """Regression: ``\\u12`` raised a bare ValueError (int('', 16)); ``\\uD800`` was kept as a lone surrogate, which
    the command then failed to print."""
    with pytest.raises(ConfigurationError, match=r"\s- " + says.replace("\\", "\\\\")):
        validate({**BASE, **parse_properties(line)})


def test_a_folder_given_as_the_configuration_file_is_a_configuration_error(folder: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_config(folder)


@pytest.mark.timeout(30)
def test_a_secret_reached_through_the_environment_is_hidden() -> None:
    """Regression: ``${env:X}`` whose value is a ``${secret:...}`` reference read the secret, and ``cdckit
    validate`` showed it: only references written in the file were hidden."""
    with isolated():
        config = validate({**BASE, "name": "${env:CDCKIT_FUZZ_NESTED}"})
        assert config["name"] == SECRET and config.redacted()["name"] == "********"


# -- the command -----------------------------------------------------------------------------------------------------

BAD_FILES = {
    "not-utf8.json": b'{"name": "\xff"}',
    "deep.json": b"[" * 50_000 + b"]" * 50_000,
    "huge-integer.json": b'{"database.port": ' + b"1" * 5000 + b"}",
    "surrogate.json": json.dumps({**BASE, "name": "\ud800"}).encode(),
    "line-break-key.json": json.dumps({**BASE, "a\nb\x1b[2J": "1"}).encode(),
    "bad-regex.json": json.dumps({**BASE, "table.include.list": "a{99999999999}"}).encode(),
    "bad-escape.properties": "\n".join([*(f"{key}={value}" for key, value in BASE.items()), "name=\\u12"]).encode(),
    "truncated.properties": b"connector.class=io.debezium.connector.postgres",
    "not-an-object.json": b"[1, 2]",
}


@pytest.mark.timeout(120)
def test_cdckit_validate_on_bad_files_exits_2_without_a_traceback(folder: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    environment["PYTHONIOENCODING"] = "utf-8"
    for name, data in [*BAD_FILES.items(), ("folder", None)]:
        path = folder if data is None else _written(folder, name, data)
        result = subprocess.run([sys.executable, "-m", "cdckit", "validate", str(path)], capture_output=True,
                                timeout=60, env=environment, check=False)
        output = (result.stdout + result.stderr).decode("utf-8", "replace")
        assert result.returncode == 2, f"{name}: exit {result.returncode}\n{output}"
        assert "Traceback" not in output and "cdckit: error:" in output, f"{name}:\n{output}"
        assert "\x1b[2J" not in output, f"{name}: a control character reached the terminal\n{output}"
