"""Kafka and Event Hubs producer settings derived from the configuration."""

from __future__ import annotations

import pytest

from cdckit.config import validate
from cdckit.errors import ConfigurationError
from cdckit.spark.sinks.kafka import kafka_options, max_message_bytes

BASE = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "h",
        "database.user": "u", "database.password": "p", "database.dbname": "d", "topic.prefix": "t"}


def test_kafka_settings_pass_through_with_idempotent_defaults() -> None:
    options = validate({**BASE, "cdckit.sink": "kafka", "kafka.bootstrap.servers": "b1:9092,b2:9092",
                        "kafka.security.protocol": "SASL_SSL", "kafka.acks": "all"}).as_properties(True)
    produced = kafka_options(options)
    assert produced["kafka.bootstrap.servers"] == "b1:9092,b2:9092"
    assert produced["kafka.security.protocol"] == "SASL_SSL"
    assert produced["kafka.enable.idempotence"] == "true" and produced["kafka.acks"] == "all"


def test_the_producer_batches_and_compresses_unless_told_otherwise() -> None:
    kafka = kafka_options(validate({**BASE, "cdckit.sink": "kafka", "kafka.bootstrap.servers": "b:9092"})
                          .as_properties(True))
    assert (kafka["kafka.batch.size"], kafka["kafka.linger.ms"], kafka["kafka.compression.type"]) == \
        ("262144", "20", "lz4")
    chosen = kafka_options(validate({**BASE, "cdckit.sink": "kafka", "kafka.bootstrap.servers": "b:9092",
                                     "kafka.compression.type": "none", "kafka.linger.ms": "0",
                                     "kafka.batch.size": "16384"}).as_properties(True))
    assert (chosen["kafka.batch.size"], chosen["kafka.linger.ms"], chosen["kafka.compression.type"]) == \
        ("16384", "0", "none")
    hubs = kafka_options(validate({**BASE, "cdckit.sink": "eventhubs", "cdckit.eventhubs.namespace": "ns",
                                   "cdckit.eventhubs.connection.string": "Endpoint=sb://ns/;SharedAccessKey=k"})
                         .as_properties(True))
    assert "kafka.compression.type" not in hubs and hubs["kafka.batch.size"] == "262144"


def test_kafka_sink_without_bootstrap_servers_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"kafka\.bootstrap\.servers is required"):
        validate({**BASE, "cdckit.sink": "kafka"})


def test_event_hubs_profile_sets_endpoint_sasl_and_tier_limit() -> None:
    config = validate({**BASE, "cdckit.sink": "eventhubs", "cdckit.eventhubs.namespace": "myns",
                       "cdckit.eventhubs.connection.string": 'Endpoint=sb://myns/;SharedAccessKey="k"'})
    options = config.as_properties(include_secrets=True)
    produced = kafka_options(options)
    assert produced["kafka.bootstrap.servers"] == "myns.servicebus.windows.net:9093"
    assert (produced["kafka.security.protocol"], produced["kafka.sasl.mechanism"]) == ("SASL_SSL", "PLAIN")
    assert 'username="$ConnectionString"' in produced["kafka.sasl.jaas.config"]
    assert 'SharedAccessKey=\\"k\\"' in produced["kafka.sasl.jaas.config"]
    assert max_message_bytes(options) == 1024 * 1024
    assert "SharedAccessKey" not in repr(config)  # the connection string is a secret


def test_event_hubs_basic_tier_limits_events_and_refuses_compaction() -> None:
    with pytest.raises(ConfigurationError, match="not available on the Event Hubs basic tier"):
        validate({**BASE, "cdckit.sink": "eventhubs", "cdckit.eventhubs.namespace": "n",
                  "cdckit.eventhubs.connection.string": "x", "cdckit.eventhubs.tier": "basic",
                  "topic.creation.default.cleanup.policy": "compact"})
    options = validate({**BASE, "cdckit.sink": "eventhubs", "cdckit.eventhubs.namespace": "n",
                        "cdckit.eventhubs.connection.string": "x", "cdckit.eventhubs.tier": "basic"}
                       ).as_properties(True)
    assert max_message_bytes(options) == 256 * 1024


def test_event_hubs_oauth_leaves_the_login_handler_to_the_user() -> None:
    options = validate({**BASE, "cdckit.sink": "eventhubs", "cdckit.eventhubs.namespace": "n",
                        "cdckit.eventhubs.auth": "oauthbearer",
                        "kafka.sasl.login.callback.handler.class": "com.example.Handler"}).as_properties(True)
    produced = kafka_options(options)
    assert produced["kafka.sasl.mechanism"] == "OAUTHBEARER"
    assert produced["kafka.sasl.login.callback.handler.class"] == "com.example.Handler"


def test_kafka_cluster_ids_never_look_like_command_line_options() -> None:
    from cdckit_lab.kafka_broker import cluster_id

    ids = [cluster_id() for _ in range(5000)]
    assert all(not i.startswith("-") and len(i) == 22 for i in ids)
    assert len(set(ids)) == len(ids)
