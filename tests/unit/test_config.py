"""Unit tests for loading and validating connector configurations (cdckit.config)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cdckit.config import Config, load_config, validate
from cdckit.errors import ConfigurationError

PG = "io.debezium.connector.postgresql.PostgresConnector"
YB = "io.debezium.connector.postgresql.YugabyteDBConnector"
PASSWORD = "s3cret-pw"

BASE = {
    "connector.class": PG,
    "database.hostname": "db.example.com",
    "database.user": "replicator",
    "database.password": PASSWORD,
    "database.dbname": "shop",
    "topic.prefix": "dbserver1",
}


def config_with(**changes: str) -> Config:
    return validate({**BASE, **{key.replace("_", "."): value for key, value in changes.items()}})


def problems_of(raw: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigurationError) as info:
        validate(raw)
    return info.value.problems


# -- reading files ------------------------------------------------------------------------------------------------


def test_debezium_connector_json_is_loaded_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({"name": "inventory-connector",
                                "config": {**BASE, "database.port": 6543, "slot.drop.on.stop": True}}))
    config = load_config(path)
    assert config["name"] == "inventory-connector"
    assert config.str("database.hostname") == "db.example.com"
    assert config.int("database.port") == 6543
    assert config.bool("slot.drop.on.stop") is True


def test_flat_json_object_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "flat.json"
    path.write_text(json.dumps({**BASE, "snapshot.mode": "never"}))
    config = load_config(path)
    assert config.str("snapshot.mode") == "never"
    assert config.str("topic.prefix") == "dbserver1"


def test_properties_file_with_comments_colons_and_continuations_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "connector.properties"
    path.write_text(
        "# a comment\n"
        "! another comment\n"
        f"connector.class={PG}\n"
        "database.hostname: db.example.com\n"
        "database.user = replicator\n"
        f"database.password={PASSWORD}\n"
        "database.dbname=shop\n"
        "topic.prefix=dbserver1\n"
        "table.include.list=inventory.customers,\\\n"
        "    inventory.orders\n"
        "#snapshot.mode=never\n"
    )
    config = load_config(path)
    assert config.str("database.hostname") == "db.example.com"
    assert config.str("database.user") == "replicator"
    assert config.list("table.include.list") == ("inventory.customers", "inventory.orders")
    assert config.str("snapshot.mode") == "initial"  # the commented-out line is ignored


def test_properties_file_backslash_escapes_are_unescaped_like_java(tmp_path: Path) -> None:
    path = tmp_path / "connector.properties"
    lines = [f"{key}={value}" for key, value in BASE.items()]
    path.write_text("\n".join([*lines, "table.include.list=inventory\\\\.customers"]) + "\n")
    assert load_config(path).list("table.include.list") == ("inventory\\.customers",)


def test_set_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({"name": "c", "config": {**BASE, "snapshot.mode": "initial"}}))
    config = load_config(path, overrides=["snapshot.mode=never", "database.port = 7000"])
    assert config.str("snapshot.mode") == "never"
    assert config.int("database.port") == 7000


def test_override_without_equals_sign_is_a_problem() -> None:
    with pytest.raises(ConfigurationError, match="not of the form key=value"):
        load_config(None, overrides=["snapshot.mode"], base=BASE)


def test_missing_file_is_reported_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.json"
    with pytest.raises(ConfigurationError, match=re.escape(str(path))) as info:
        load_config(path)
    assert "does not exist" in str(info.value)


def test_invalid_json_file_is_reported_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"config": {"topic.prefix": }')
    with pytest.raises(ConfigurationError, match=re.escape(str(path))) as info:
        load_config(path)
    assert "not valid JSON" in str(info.value)


def test_json_file_that_is_not_an_object_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigurationError, match="must hold a JSON object"):
        load_config(path)


# -- environment references ---------------------------------------------------------------------------------------


def test_env_reference_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_TEST_PASSWORD", "from-env")
    monkeypatch.setenv("CDC_TEST_HOST", "pg.internal")
    config = config_with(database_password="${env:CDC_TEST_PASSWORD}",
                         database_hostname="${env:CDC_TEST_HOST}")
    assert config.as_properties(include_secrets=True)["database.password"] == "from-env"
    assert config.str("database.hostname") == "pg.internal"


def test_unset_env_reference_names_the_variable_and_the_property(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDC_TEST_UNSET", raising=False)
    problems = problems_of({**BASE, "database.hostname": "${env:CDC_TEST_UNSET}"})
    assert any("CDC_TEST_UNSET" in p and "database.hostname" in p and "not set" in p for p in problems)
    # said once: the unset variable, not also "database.hostname is required"
    assert [p for p in problems if "database.hostname" in p] == [
        "database.hostname refers to environment variable CDC_TEST_UNSET, which is not set; export it"]


# -- validation ---------------------------------------------------------------------------------------------------


def test_unknown_property_suggests_the_closest_name() -> None:
    problems = problems_of({**BASE, "database.hostnme": "x"})
    assert problems == ["unknown property database.hostnme; did you mean database.hostname?"]


def test_unknown_property_without_close_match_says_to_remove_it() -> None:
    (problem,) = problems_of({**BASE, "completely.unrelated": "x"})
    assert "unknown property completely.unrelated" in problem
    assert "did you mean" not in problem


def test_all_problems_are_reported_together() -> None:
    raw = {**BASE, "max.batch.size": "lots", "snapshot.mode": "sometimes", "databse.user": "x"}
    del raw["topic.prefix"]
    with pytest.raises(ConfigurationError) as info:
        validate(raw)
    problems = info.value.problems
    assert len(problems) == 4
    assert str(info.value).startswith("the connector configuration has 4 problems:")
    text = "\n".join(problems)
    for fragment in ("max.batch.size='lots' is not a whole number", "snapshot.mode='sometimes' is not one of",
                     "did you mean database.user?", "topic.prefix is required"):
        assert fragment in text


def test_single_problem_message_uses_singular() -> None:
    with pytest.raises(ConfigurationError, match=r"has 1 problem:"):
        validate({**BASE, "max.batch.size": "0"})


@pytest.mark.parametrize("missing", ["connector.class", "database.hostname", "database.user",
                                     "database.password", "database.dbname", "topic.prefix"])
def test_required_property_missing_is_a_problem(missing: str) -> None:
    raw = {key: value for key, value in BASE.items() if key != missing}
    (problem,) = problems_of(raw)
    assert problem.startswith(f"{missing} is required")
    assert f"--set {missing}=" in problem


def test_int_below_minimum_is_a_problem() -> None:
    (problem,) = problems_of({**BASE, "tasks.max": "0"})
    assert problem == "tasks.max=0 is below the minimum 1"


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("FALSE", False), ("yes", True), ("0", False)])
def test_bool_accepts_common_spellings(text: str, expected: bool) -> None:
    assert config_with(tombstones_on_delete=text).bool("tombstones.on.delete") is expected


def test_bool_rejects_other_text() -> None:
    (problem,) = problems_of({**BASE, "tombstones.on.delete": "maybe"})
    assert "tombstones.on.delete='maybe' is not a boolean" in problem


def test_choice_lists_the_allowed_values() -> None:
    (problem,) = problems_of({**BASE, "database.sslmode": "always"})
    assert problem.startswith("database.sslmode='always' is not one of: disable, allow, prefer")


def test_defaults_apply_when_unset() -> None:
    config = validate(BASE)
    assert config.str("slot.name") == "debezium"
    assert config["max.batch.size"] is None  # unset: the bound adapts (decision 0038)
    assert "max.batch.size" not in config.as_properties()
    assert validate({**BASE, "max.batch.size": "2048"}).as_properties()["max.batch.size"] == "2048"
    assert config.bool("tombstones.on.delete") is True
    assert config.list("skipped.operations") == ("t",)


@pytest.mark.parametrize("family", ["schema", "table", "column"])
def test_include_and_exclude_lists_are_mutually_exclusive(family: str) -> None:
    (problem,) = problems_of({**BASE, f"{family}.include.list": "a", f"{family}.exclude.list": "b"})
    assert problem == f"{family}.include.list and {family}.exclude.list are mutually exclusive; keep one"


def test_invalid_regular_expression_is_a_problem() -> None:
    (problem,) = problems_of({**BASE, "table.include.list": "inventory.customers, inventory.(orders"})
    assert "table.include.list entry 'inventory.(orders' is not a valid regular expression" in problem


@pytest.mark.parametrize("slot", ["Debezium", "my-slot", "slot.one", "a" * 64])
def test_slot_name_with_bad_characters_or_too_long_is_a_problem(slot: str) -> None:
    (problem,) = problems_of({**BASE, "slot.name": slot})
    assert problem.startswith(f"slot.name={slot!r} may only contain lower-case letters")


def test_slot_name_of_lowercase_digits_and_underscores_is_accepted() -> None:
    assert config_with(slot_name="cdc_slot_01" + "x" * 52).str("slot.name") == "cdc_slot_01" + "x" * 52


def test_skipped_operations_must_be_known() -> None:
    (problem,) = problems_of({**BASE, "skipped.operations": "c,x"})
    assert "skipped.operations entry 'x'" in problem


# -- connector class ----------------------------------------------------------------------------------------------


def test_yugabytedb_connector_defaults_to_port_5433() -> None:
    config = validate({**BASE, "connector.class": YB})
    assert config.int("database.port") == 5433
    assert config.is_yugabytedb
    assert config.connector_name == "YugabyteDB"


def test_postgresql_connector_defaults_to_port_5432() -> None:
    config = validate(BASE)
    assert config.int("database.port") == 5432
    assert not config.is_yugabytedb
    assert config.connector_name == "postgresql"


def test_explicit_port_wins_over_the_yugabytedb_default() -> None:
    assert validate({**BASE, "connector.class": YB, "database.port": "5432"}).int("database.port") == 5432


# -- secrets and output -------------------------------------------------------------------------------------------


def test_redacted_and_repr_never_show_the_password() -> None:
    config = validate(BASE)
    assert config.redacted()["database.password"] == "********"
    assert PASSWORD not in repr(config)
    assert PASSWORD not in str(config)
    assert PASSWORD not in json.dumps(config.redacted())


def test_invalid_values_are_reported_without_the_password() -> None:
    with pytest.raises(ConfigurationError) as info:
        validate({**BASE, "tasks.max": "zero"})
    assert PASSWORD not in str(info.value)


def test_as_properties_omits_the_password_unless_asked() -> None:
    config = validate(BASE)
    assert "database.password" not in config.as_properties()
    assert config.as_properties(include_secrets=True)["database.password"] == PASSWORD


def test_as_properties_writes_strings_spark_can_carry() -> None:
    props = config_with(table_include_list="inventory.a, inventory.b").as_properties()
    assert props["table.include.list"] == "inventory.a,inventory.b"
    assert props["tombstones.on.delete"] == "true"
    assert props["database.port"] == "5432"
    assert "database.sslrootcert" not in props  # unset, no default


def test_kafka_and_spark_prefixed_keys_pass_through() -> None:
    config = validate({**BASE, "kafka.bootstrap.servers": "broker:9092", "spark.sql.shuffle.partitions": "4"})
    assert config.passthrough == {"kafka.bootstrap.servers": "broker:9092", "spark.sql.shuffle.partitions": "4"}
    assert config.as_properties()["kafka.bootstrap.servers"] == "broker:9092"


def test_a_kafka_admin_timeout_that_is_not_milliseconds_is_refused_by_name() -> None:
    settings = {**BASE, "cdckit.sink": "kafka", "kafka.bootstrap.servers": "broker:9092"}
    assert validate({**settings, "kafka.default.api.timeout.ms": "8000"}).passthrough["kafka.default.api.timeout.ms"] \
        == "8000"
    with pytest.raises(ConfigurationError, match=r"kafka.default.api.timeout.ms='8s' is not a number of millis"):
        validate({**settings, "kafka.default.api.timeout.ms": "8s"})


@pytest.mark.parametrize(("settings", "named"), [
    ({"transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}, "not in transforms"),
    ({"transforms": "x", "transforms.x.type": "org.apache.kafka.connect.transforms.ReplaceField$Value"},
     "does not apply this transform"),
    ({"transforms": "u", "transforms.u.type": "io.debezium.transforms.ExtractNewRecordState",
      "transforms.u.drop.fields.header.name": "h"}, "transforms.u.drop.fields.header.name"),
    ({"transforms": "u", "transforms.u.type": "io.debezium.transforms.ExtractNewRecordState",
      "transforms.u.predicate": "isTombstone"}, "no predicates"),
    ({"predicates": "isTombstone"}, "no predicates"),
    ({"errors.tolerance": "all"}, "errors.tolerance=all cannot be honoured"),
    ({"errors.log.enable": "true"}, "errors.log.enable=true cannot be honoured"),
    ({"errors.max.retries": "-1"}, "errors.max.retries=-1 cannot be honoured"),
    ({"errors.deadletterqueue.topic.name": "dlq"}, "only for sink connectors"),
    ({"producer.override.acks": "all"}, "set kafka.acks instead"),
    ({"consumer.override.max.poll.records": "5"}, "no consumer"),
    ({"transforms": "r", "transforms.r.type": "org.apache.kafka.connect.transforms.RegexRouter",
      "transforms.r.regex": "(.*)", "transforms.r.replacement": "$2"}, "names group 2"),
])
def test_kafka_connect_settings_cdckit_cannot_honour_are_refused_by_name(settings: dict[str, str],
                                                                         named: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        validate({**BASE, **settings})


def test_transforms_and_the_errors_defaults_are_accepted_and_reach_the_spark_side() -> None:
    settings = {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
                "transforms.unwrap.add.fields": "op,source.ts_ms", "errors.tolerance": "none",
                "errors.retry.delay.max.ms": "1000"}
    properties = validate({**BASE, **settings}).as_properties()
    assert {key: properties[key] for key in settings} == settings


@pytest.mark.parametrize(("settings", "named"), [
    ({"cdckit.message.format": "qlik"}, "cdckit.message.format=qlik"),
    ({"cdckit.sink": "delta"}, "cdckit.sink=delta"),
])
def test_transforms_are_refused_where_records_are_not_debeziums(settings: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        validate({**BASE, **settings, "transforms": "unwrap",
                  "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"})


def test_the_delta_sink_refuses_settings_it_cannot_honour() -> None:
    with pytest.raises(ConfigurationError) as failure:
        validate({**BASE, "cdckit.sink": "delta", "cdckit.message.format": "qlik",
                  "value.converter.schemas.enable": "false"})
    message = str(failure.value)
    assert "2 problems" in message
    assert "cdckit.message.format=qlik is for the files, kafka and eventhubs sinks" in message
    assert "remove value.converter.schemas.enable=false" in message
    config = validate({**BASE, "cdckit.sink": "delta"})
    assert (config.str("cdckit.delta.path"), config.str("cdckit.delta.mode")) == ("cdckit-delta", "both")


@pytest.mark.parametrize("settings", [{"cdckit.sink": "lake"}, {"cdckit.lake.path": "s3://bucket/lake"},
                                      {"cdckit.sink": "lake", "cdckit.lake.path": "/data/lake"}])
def test_the_former_parquet_lake_sink_is_refused_with_the_way_to_delta(settings: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError) as failure:
        validate({**BASE, **settings})
    message = str(failure.value)
    assert "1 problem:" in message and "were replaced by cdckit.sink=delta" in message
    assert "not converted" in message and "new cdckit.checkpoint.location and slot.name" in message


@pytest.fixture
def aws_secret(secretsmanager: Any) -> str:
    secret = json.dumps({"username": "replicator", "password": PASSWORD})
    return str(secretsmanager.create_secret(Name="cdckit/source", SecretString=secret)["ARN"])


def test_credentials_come_from_aws_secrets_manager(aws_secret: str) -> None:
    config = validate({**BASE, "database.user": f"${{secret:{aws_secret}:username}}",
                       "database.password": f"${{secret:{aws_secret}:password}}"})
    assert config.str("database.user") == "replicator"
    assert config.str("database.password") == PASSWORD
    with pytest.raises(ConfigurationError) as failure:
        validate({**BASE, "database.password": f"${{secret:{aws_secret}:pass}}",
                  "database.user": "${secret:cdckit/missing:username}"})
    message = str(failure.value)
    assert "has no such field (it has: password, username)" in message
    assert "secret cdckit/missing, which could not be read (ResourceNotFoundException)" in message
    assert PASSWORD not in message


SQLSERVER = {"connector.class": "io.debezium.connector.sqlserver.SqlServerConnector", "database.hostname": "db",
             "database.user": "cdc", "database.password": "secret", "database.names": "shop", "topic.prefix": "t"}


@pytest.mark.parametrize(("base", "key", "value", "named"), [
    (SQLSERVER, "slot.name", "s", "slot.name applies to PostgreSQL and YugabyteDB only"),
    (SQLSERVER, "database.sslmode", "require", "database.sslmode applies to PostgreSQL and YugabyteDB only"),
    (SQLSERVER, "cdckit.stream.partitions", "4", "cdckit.stream.partitions applies to PostgreSQL"),
    (SQLSERVER, "database.dbname", "shop", "use database.names"),
    (BASE, "database.names", "shop", "use database.dbname"),
    (BASE, "snapshot.isolation.mode", "snapshot", "snapshot.isolation.mode applies to SQL Server only"),
    (BASE, "snapshot.select.statement.overrides.public.t", "SELECT 1", "applies to SQL Server only"),
    (BASE, "cdckit.sqlserver.purged.changes", "resnapshot", "applies to SQL Server only"),
])
def test_a_setting_only_the_other_connector_reads_is_refused(base: dict[str, str], key: str, value: str,
                                                            named: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        validate({**base, key: value})


def test_qlik_messages_come_without_debeziums_schema_change_records() -> None:
    assert validate({**SQLSERVER, "cdckit.message.format": "qlik"}).bool("include.schema.changes") is False
    assert validate(SQLSERVER).bool("include.schema.changes") is True
    with pytest.raises(ConfigurationError, match=re.escape("include.schema.changes=true")):
        validate({**SQLSERVER, "cdckit.message.format": "qlik", "include.schema.changes": "true"})
    with pytest.raises(ConfigurationError, match=re.escape("provide.transaction.metadata=true")):
        validate({**SQLSERVER, "cdckit.message.format": "qlik", "provide.transaction.metadata": "true"})


def test_tasks_max_above_one_is_refused_rather_than_ignored() -> None:
    with pytest.raises(ConfigurationError, match="parallelism is Spark's"):
        validate({**BASE, "tasks.max": "4"})
    assert validate({**BASE, "tasks.max": "1"}).int("tasks.max") == 1


def test_snapshot_mode_when_needed_is_refused_for_sql_server_and_names_the_alternative() -> None:
    with pytest.raises(ConfigurationError, match=r"cdckit\.sqlserver\.purged\.changes=resnapshot"):
        validate({**SQLSERVER, "snapshot.mode": "when_needed"})
    assert validate({**BASE, "snapshot.mode": "when_needed"}).str("snapshot.mode") == "when_needed"


def test_a_configuration_written_out_whole_validates_again() -> None:
    for base in (BASE, SQLSERVER):
        written = validate(base).as_properties(include_secrets=True)
        assert validate(written).as_properties(include_secrets=True) == written


@pytest.mark.parametrize("base,value,form", [
    (BASE, "shop.dbo.signals", "<schema>.<table>"),
    (BASE, "signals", "<schema>.<table>"),
    (SQLSERVER, "dbo.signals", "<database>.<schema>.<table>"),
])
def test_the_signalling_table_is_named_as_each_connector_names_tables(base: dict[str, str], value: str,
                                                                     form: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"must name the signalling table as {form}")):
        validate({**base, "signal.data.collection": value})
    assert validate({**base, "signal.data.collection": "shop.dbo.s" if base is SQLSERVER else "public.s"})


# -- Debezium's SQL Server settings: honoured, or refused by name with the reason (docs/decisions/0034) -----------
def test_a_named_instance_is_reached_through_the_sql_server_browser_unless_a_port_is_given() -> None:
    from cdckit.dialect.sqlserver.connection import connection_string

    named = validate({**SQLSERVER, "database.instance": "SALES"}).as_properties(include_secrets=True)
    assert "database.port" not in named
    assert "SERVER={db\\SALES};" in connection_string(named)
    pinned = validate({**SQLSERVER, "database.instance": "SALES", "database.port": "14330"})
    assert "SERVER={db\\SALES,14330};" in connection_string(pinned.as_properties(include_secrets=True))
    assert "SERVER={db,1433};" in connection_string(validate(SQLSERVER).as_properties(include_secrets=True))
    (problem,) = problems_of({**SQLSERVER, "database.instance": "SALES;Encrypt=no"})
    assert problem.startswith("database.instance='SALES;Encrypt=no' is not a SQL Server instance name")
    with pytest.raises(ConfigurationError, match=re.escape("database.instance applies to SQL Server only")):
        validate({**BASE, "database.instance": "SALES"})


def test_the_snapshot_list_takes_anchored_expressions_and_needs_a_snapshot() -> None:
    config = validate({**SQLSERVER, "snapshot.include.collection.list": "shop\\.dbo\\.orders,shop\\.dbo\\.c.*"})
    assert config.list("snapshot.include.collection.list") == ("shop\\.dbo\\.orders", "shop\\.dbo\\.c.*")
    (problem,) = problems_of({**SQLSERVER, "snapshot.include.collection.list": "shop.dbo.(orders"})
    assert problem.startswith("snapshot.include.collection.list entry 'shop.dbo.(orders' is not a valid regular")
    (problem,) = problems_of({**SQLSERVER, "snapshot.include.collection.list": "shop\\.dbo\\.orders",
                              "snapshot.mode": "never"})
    assert "snapshot.mode=never reads none" in problem


def test_the_snapshot_lock_timeout_is_debeziums_ten_seconds_and_takes_minus_one() -> None:
    assert validate(SQLSERVER).int("snapshot.lock.timeout.ms") == 10000
    assert validate({**SQLSERVER, "snapshot.lock.timeout.ms": "-1"}).int("snapshot.lock.timeout.ms") == -1
    (problem,) = problems_of({**SQLSERVER, "snapshot.lock.timeout.ms": "-2"})
    assert problem == "snapshot.lock.timeout.ms=-2 is below the minimum -1"


@pytest.mark.parametrize(("key", "accepted", "refused", "reason"), [
    ("source.struct.version", "v2", "v1", "the source block of Debezium before 0.10"),
    ("event.processing.failure.handling.mode", "fail", "warn", "would skip a change cdckit cannot process"),
    ("event.processing.failure.handling.mode", "fail", "skip", "cdckit.kafka.oversize.handling=dead-letter"),
    ("retriable.restart.connector.wait.ms", "10000", "5000", "cdckit does not restart itself after an error"),
])
def test_debezium_settings_cdckit_honours_in_part_name_the_reason(key: str, accepted: str, refused: str,
                                                                  reason: str) -> None:
    assert validate({**SQLSERVER, key: accepted}).as_properties()[key] == accepted
    (problem,) = problems_of({**SQLSERVER, key: refused})
    assert problem.startswith(f"{key}={refused}") and reason in problem


def test_custom_converters_are_refused_once_with_their_settings_and_what_to_use_instead() -> None:
    (problem,) = problems_of({**SQLSERVER, "converters": "isbn", "isbn.type": "io.debezium.test.IsbnConverter",
                              "isbn.schema.name": "io.debezium.sqlserver.type.Isbn"})
    assert problem.startswith("converters=isbn names Kafka Connect custom converters")
    assert "isbn.* settings" in problem and "message.key.columns" in problem and "unknown" not in problem
    assert "unknown property isbn.type" in " ".join(problems_of({**SQLSERVER, "isbn.type": "x"}))
