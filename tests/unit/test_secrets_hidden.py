"""Every key, certificate, password, salt and token of a configuration stays hidden in ``cdckit validate``, in the
configuration's errors, in the command's error line, in the log and in the options Spark shows.

The finding this reproduces: ``cdckit validate`` printed ``kafka.ssl.keystore.key`` (a private key), the
certificate stores and the salt of ``column.mask.hash.<algorithm>.with.salt.<salt>`` (a part of the name)."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from cdckit.cli import main
from cdckit.config import validate
from cdckit.config.secrets import MASK, RedactingFilter, is_secret_name, redact, redact_logs, scrub, shown_name
from cdckit.errors import ConfigurationError
from cdckit.spark.options import SECRETS_OPTION, from_spark_options, to_spark_options
from cdckit.spark.session import REDACTION_REGEX

SALT = "CzQMA0cB5K"
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASC-----END PRIVATE KEY-----"
# one secret of each kind, by the name that holds it; each value is unique, to be looked for in the output
SECRETS = {
    "database.password": "Db-Password-1a",
    "kafka.ssl.keystore.key": PRIVATE_KEY,
    "kafka.ssl.key.password": "Key-Password-2b",
    "kafka.ssl.keystore.password": "Keystore-Password-3c",
    "kafka.ssl.truststore.password": "Truststore-Password-4d",
    "kafka.ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----TRUSTED5e-----END CERTIFICATE-----",
    "kafka.ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----CHAIN6f-----END CERTIFICATE-----",
    "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="svc" '
                              'password="Jaas-Password-7g";',
    "cdckit.eventhubs.connection.string": "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;"
                                          "SharedAccessKey=Sas-Key-8h",
    "spark.hadoop.fs.s3a.access.key": "AKIAACCESSKEY9i",
    "spark.hadoop.fs.s3a.secret.key": "S3-Secret-Key-10j",
    "spark.hadoop.fs.s3a.session.token": "Session-Token-11k",
    "spark.hadoop.fs.azure.account.oauth2.client.secret": "Client-Secret-12l",
}
# secrets inside the values of settings that are not secrets themselves
EMBEDDED = {"kafka.sasl.oauthbearer.token.endpoint.url": ("https://svc:Url-Password-13m@idp.example.com/token",
                                                          "Url-Password-13m")}
PLAIN = {"database.hostname": "db.example.com", "kafka.bootstrap.servers": "broker-1.example.com:9093",
         "kafka.security.protocol": "SSL", "kafka.ssl.keystore.type": "PEM", "topic.prefix": "shop",
         "database.user": "replicator", "database.dbname": "shop"}
CONNECTOR = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector"}


@pytest.fixture
def aws_secret(secretsmanager: Any) -> str:
    secret = json.dumps({"topic": "Stored-Value-14n"})
    return str(secretsmanager.create_secret(Name="cdckit/sink", SecretString=secret)["ARN"])


def _run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, str]:
    monkeypatch.setenv("COLUMNS", "1000")
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_validate_shows_no_secret_nor_salt_and_every_other_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, aws_secret: str) -> None:
    config = {**CONNECTOR, **PLAIN, **SECRETS, **{key: url for key, (url, _) in EMBEDDED.items()},
              f"column.mask.hash.SHA-256.with.salt.{SALT}": "shop.public.users.email",
              "column.mask.hash.v2.SHA-512.with.salt.Another-Salt-15o": "shop.public.users.phone",
              "topic.heartbeat.prefix": f"${{secret:{aws_secret}:topic}}"}
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({"name": "shop", "config": config}))
    # offline: the settings and the local paths only (the source and Kafka of this configuration do not exist)
    status, output = _run(capsys, monkeypatch, "validate", "--offline", str(path))
    assert status == 0, output
    assert output.splitlines()[-1].startswith("valid: a job would start (offline")
    shown = dict(line.split("=", 1) for line in output.splitlines() if re.match(r"^[^\s=]+=", line))
    for value in (*SECRETS.values(), *(hidden for _, hidden in EMBEDDED.values()), SALT, "Another-Salt-15o",
                  "Stored-Value-14n", "Sas-Key-8h", "Jaas-Password-7g"):
        assert value not in output
    for key in SECRETS:
        assert shown[key] == MASK, key
    assert shown["topic.heartbeat.prefix"] == MASK  # read from a secret store: hidden whatever its name
    assert shown["kafka.sasl.oauthbearer.token.endpoint.url"] == f"https://svc:{MASK}@idp.example.com/token"
    assert shown[f"column.mask.hash.SHA-256.with.salt.{MASK}"] == "shop.public.users.email"
    assert shown[f"column.mask.hash.v2.SHA-512.with.salt.{MASK}"] == "shop.public.users.phone"
    for key, value in PLAIN.items():
        assert shown[key] == value, key


def test_a_refused_configuration_names_its_problems_without_its_secrets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    config = {**CONNECTOR, **PLAIN, **SECRETS, "tasks.max": "zero",
              f"column.mask.hash.MD2.with.salt.{SALT}": "shop.public.users.email",  # an unsupported algorithm
              f"column.mask.hash.SHA-256.with.salts.{SALT}": "shop.public.users.email",  # misspelt: unknown
              "cdckit.metrics.port": SECRETS["database.password"]}  # a secret where a number belongs
    path = tmp_path / "connector.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
    status, output = _run(capsys, monkeypatch, "validate", str(path))
    assert status == 2
    assert "hash algorithm 'MD2' is not supported" in output and "tasks.max='zero' is not a whole number" in output
    assert f"column.mask.hash.MD2.with.salt.{MASK}:" in output
    assert "cdckit.metrics.port='********' is not a whole number" in output
    for value in (*SECRETS.values(), SALT):
        assert value not in output


def test_the_errors_of_validate_itself_hide_the_secrets_of_the_configuration() -> None:
    with pytest.raises(ConfigurationError) as refused:
        validate({**CONNECTOR, **PLAIN, **SECRETS, "cdckit.metrics.port": "Keystore-Password-3c",
                  f"column.mask.hash.MD2.with.salt.{SALT}": "a.b.c"})
    message = str(refused.value)
    assert "cdckit.metrics.port='********'" in message and "Keystore-Password-3c" not in message
    assert SALT not in message and MASK in message


def test_the_log_shows_no_secret_of_the_configuration() -> None:
    validate({**CONNECTOR, **PLAIN, **SECRETS, f"column.mask.hash.SHA-256.with.salt.{SALT}": "a.b.c"})
    logger = logging.getLogger("cdckit.test.secrets")
    logger.propagate = False
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    logger.addHandler(handler)
    try:
        redact_logs(logger)
        redact_logs(logger)  # once is enough
        assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
        logger.warning("connecting with %s and %r", SECRETS["kafka.ssl.keystore.password"], SECRETS)
        logger.warning("rule column.mask.hash.SHA-256.with.salt.%s applied", SALT)
        try:
            raise RuntimeError(f"refused: {SECRETS['database.password']}")
        except RuntimeError:
            logger.exception("the source failed")
    finally:
        logger.removeHandler(handler)
    logged = text.getvalue()
    assert "connecting with ********" in logged and "the source failed" in logged and "RuntimeError" in logged
    for value in (*SECRETS.values(), SALT):
        assert value not in logged


def test_spark_gets_the_secrets_in_one_option_its_redaction_hides() -> None:
    properties = {**PLAIN, **SECRETS, f"column.mask.hash.SHA-256.with.salt.{SALT}": "shop.public.users.email"}
    options = to_spark_options(properties)
    redaction = re.compile(REDACTION_REGEX)
    for key, value in options.items():
        if key != SECRETS_OPTION:
            assert SALT not in key + value and not any(secret in value for secret in SECRETS.values()), key
    assert redaction.search(SECRETS_OPTION)
    spark_side = {key.lower(): value for key, value in options.items()}  # Spark lower-cases option keys
    assert from_spark_options(spark_side) == properties
    for key in SECRETS:
        assert redaction.search(key), key  # Spark's own options (Kafka's, Hadoop's) are hidden by their names


@pytest.mark.parametrize("name", [*SECRETS, "kafka.ssl.keystore.key", "kafka.sasl.login.password",
                                  "cdckit.eventhubs.connection.string", "some.api.token", "odbc.pwd"])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["database.hostname", "message.key.columns", "kafka.key.serializer",
                                  "kafka.sasl.oauthbearer.token.endpoint.url", "database.trustServerCertificate",
                                  "database.sslrootcert", "column.mask.hash.SHA-256.with.salt.x",
                                  "kafka.ssl.keystore.type", "kafka.ssl.keystore.location"])
def test_names_that_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


def test_salts_passwords_in_urls_and_connection_strings_are_hidden_in_text() -> None:
    assert shown_name("column.mask.hash.SHA-256.with.salt.a.b:c") == f"column.mask.hash.SHA-256.with.salt.{MASK}"
    assert shown_name("column.mask.hash.MD5.with.salts.ab") == f"column.mask.hash.MD5.with.salts.{MASK}"  # misspelt
    assert shown_name("column.truncate.to.5.chars") == "column.truncate.to.5.chars"
    assert scrub("postgresql://cdc:pw%40x@db:5432/shop") == f"postgresql://cdc:{MASK}@db:5432/shop"
    assert scrub("Server=db;UID=cdc;PWD=p4ss;Encrypt=yes") == f"Server=db;UID=cdc;PWD={MASK};Encrypt=yes"
    assert scrub('username="svc" password="x y";') == f'username="svc" password={MASK};'
    assert redact("property column.mask.hash.MD5.with.salt.XYZ: refused") == \
        f"property column.mask.hash.MD5.with.salt.{MASK}: refused"
