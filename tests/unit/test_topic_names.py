"""Topic names as Debezium's ``TopicNamingStrategy`` makes them, and the files sink's folders, which they name.

Debezium's rule (``AbstractTopicNamingStrategy.sanitizedTopicName`` in debezium/debezium, v2.5.2.Final and
v3.6.0.Final; see ``cdckit.formats.debezium.naming``): every UTF-16 unit outside ``[A-Za-z0-9._-]`` becomes ``_``,
a name longer than 249 is cut to 249, ``.`` becomes ``_`` and ``..`` becomes ``__``. The examples marked so are
Debezium's own (``MySqlTopicNamingStrategyTest`` at v2.5.2.Final).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdckit.dialect.postgres.catalog import TableInfo
from cdckit.dialect.sqlserver.catalog import CaptureInstance
from cdckit.errors import OutputPathError, TopicCollisionError
from cdckit.formats.debezium.envelope import FormatSettings, TableFormat, check_distinct_topics, topic_name
from cdckit.formats.debezium.naming import data_change_topic, sanitized_topic_name
from cdckit.formats.debezium.postgres_types import ColumnType
from cdckit.spark.rows import EVENT_COLUMNS, event_arrow_schema
from cdckit.spark.sinks.files import read_records
from cdckit.spark.sinks.jsonl import TopicFiles, topic_folder

DEBEZIUM_LONG_START = "test_avro_strategy.test.t_orders_all_shards_"  # then "a"s: 263 characters in all


@pytest.mark.parametrize(("name", "expected"), [
    (".", "_"),  # Debezium's
    ("..", "__"),  # Debezium's
    (DEBEZIUM_LONG_START + "a" * (263 - len(DEBEZIUM_LONG_START)),  # Debezium's: cut to 249
     DEBEZIUM_LONG_START + "a" * (249 - len(DEBEZIUM_LONG_START))),
    ("mysql-server-1.test_db.dbz#4180#2", "mysql-server-1.test_db.dbz_4180_2"),  # Debezium's (dataChangeTopic)
    ("p.app.../../../escaped", "p.app..._.._.._escaped"),
    ("p.app./../p.app.orders", "p.app._.._p.app.orders"),
    ("p.app.a\\b", "p.app.a_b"),
    ("p.app.a b", "p.app.a_b"),
    ("p.Sales Ünï.order\"s; --", "p.Sales__n_.order_s__--"),  # a character within U+FFFF: one "_"
    ("p.app.\U0001f600", "p.app.__"),  # beyond U+FFFF: two UTF-16 units in Java, two "_"
    ("p.app.\x00\n", "p.app.__"),
    ("...", "..."),  # only "." and ".." themselves are replaced
    ("p.app.orders", "p.app.orders"),
    ("A-z_0.9", "A-z_0.9"),
    ("a" * 249, "a" * 249),
    ("/" * 250, "_" * 249),
    ("." * 250, "." * 249),
])
def test_topic_names_are_sanitised_as_debezium_sanitises_them(name: str, expected: str) -> None:
    assert sanitized_topic_name(name) == expected


def test_a_replaced_name_is_logged_in_debeziums_words_once(caplog: pytest.LogCaptureFixture) -> None:
    name = f"p.app.a b {os.getpid()}"  # a name no other test sanitised in this process
    with caplog.at_level(logging.WARNING, logger="cdckit.formats.debezium.naming"):
        sanitized_topic_name(name)
        sanitized_topic_name(name)
        sanitized_topic_name("p.app.valid")
    assert [r.getMessage() for r in caplog.records] == [
        f"Topic '{name}' name isn't a valid topic name, replacing it with '{name.replace(' ', '_')}'."]


def test_blank_name_parts_are_left_out_as_debeziums_mkstring_leaves_them() -> None:
    assert data_change_topic("p", ("app", "orders")) == "p.app.orders"
    assert data_change_topic("p", ("app", " \t")) == "p.app"  # Java's trim: every character up to U+0020
    assert data_change_topic("p", ("\n", "orders")) == "p.orders"
    assert data_change_topic("p", ("app", " x ")) == "p.app._x_"
    assert data_change_topic("p", ("app", "\u00a0")) == "p.app._"  # not blank for Java's trim


def _postgres_table(schema: str, name: str) -> TableInfo:
    return TableInfo(schema, name, 1, (ColumnType("id", "int4", 23, optional=False),), ("id",), "d")


def test_a_tables_topic_and_schema_names_are_the_sanitised_ones() -> None:
    settings = FormatSettings(topic_prefix="p", database="shop")
    fmt = TableFormat(_postgres_table("app", "../../../escaped"), settings)
    assert fmt.topic == topic_name(settings, "app", "../../../escaped") == "p.app..._.._.._escaped"
    # Debezium's record schema names start with the sanitised topic (recordSchemaPrefix = dataChangeTopic)
    assert fmt.key_schema["name"] == "p.app..._.._.._escaped.Key"
    assert fmt.value_schema["name"] == "p.app..._.._.._escaped.Envelope"
    images: Any = fmt.value_schema["fields"]
    assert images[0]["name"] == images[1]["name"] == "p.app..._.._.._escaped.Value"  # before and after
    avro = TableFormat(_postgres_table("app", "a b"), dataclasses.replace(settings, schema_name_adjustment="avro"))
    assert (avro.topic, avro.key_schema["name"]) == ("p.app.a_b", "p.app.a_b.Key")


def test_a_sqlserver_tables_topic_is_sanitised_with_its_database() -> None:
    settings = FormatSettings(topic_prefix="p", database="", connector="sqlserver")
    assert topic_name(settings, "dbo", "a/b", "Shop DB") == "p.Shop_DB.dbo.a_b"
    instance = CaptureInstance(database="Shop DB", schema="dbo", name="a/b", capture_instance="dbo_a_b",
                               start_lsn=0, object_id=1, source_object_id=2, columns=(), key_columns=())
    assert TableFormat(instance, settings).topic == "p.Shop_DB.dbo.a_b"


def test_two_tables_of_one_topic_are_refused_in_one_line_naming_both() -> None:
    settings = FormatSettings(topic_prefix="p", database="shop")
    tables = [("app", "a_b"), ("app", "orders"), ("app", "a b")]
    with pytest.raises(TopicCollisionError) as refused:
        check_distinct_topics(((schema, name), topic_name(settings, schema, name)) for schema, name in tables)
    message = str(refused.value)
    assert '"app"."a_b" and "app"."a b"' in message and "topic p.app.a_b" in message and "\n" not in message
    # a dot in a name: the same topic from other tables, told apart by their quoted names
    with pytest.raises(TopicCollisionError, match=r'"app"\."x\.y" and "app\.x"\."y"'):
        check_distinct_topics([(("app", "x.y"), "p.app.x.y"), (("app.x", "y"), "p.app.x.y")])
    with pytest.raises(TopicCollisionError, match=r'"app"\."a\\u000ab"') as refused:  # a newline stays one line
        check_distinct_topics([(("app", "a_b"), "p.app.a_b"), (("app", "a\nb"), "p.app.a_b")])
    assert "\n" not in str(refused.value)
    check_distinct_topics([(("app", "a_b"), "p.app.a_b"), (("app", "a_b"), "p.app.a_b"),  # one table twice
                           (("app", "orders"), "p.app.orders")])


@pytest.mark.parametrize("topic", [".", "..", "", "a/b", "../x", "a\\b", "/abs", "a\x00b"])
def test_a_topic_that_is_no_plain_folder_name_is_refused(tmp_path: Path, topic: str) -> None:
    with pytest.raises(OutputPathError, match="cannot be written under") as refused:
        topic_folder(tmp_path / "out", topic)
    assert "\n" not in str(refused.value)


def test_a_topic_folder_leading_outside_through_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "p.app.orders").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputPathError, match=r"leads to .*elsewhere"):
        topic_folder(tmp_path / "out", "p.app.orders")
    assert topic_folder(tmp_path / "out", "p.app.other") == tmp_path / "out" / "p.app.other"
    (tmp_path / "linked-out").symlink_to(tmp_path / "out")  # the output itself may be a link
    assert topic_folder(tmp_path / "linked-out", "p.app.other") == tmp_path / "linked-out" / "p.app.other"


def _batch(topics: list[str]) -> pa.RecordBatch:
    rows = [{"topic": topic, "key": f'{{"id":{n}}}', "value": '{"v":1}', "headers": None, "table": "app.t",
             "op": "c", "commit_lsn": 1, "lsn": n, "serial": 0, "source_ts_ms": 0, "value_binary": None}
            for n, topic in enumerate(topics)]
    return pa.RecordBatch.from_pylist([{name: row[name] for name in EVENT_COLUMNS} for row in rows],
                                      schema=event_arrow_schema())


def _all_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def test_the_files_writer_refuses_a_hostile_topic_before_writing_anything(tmp_path: Path) -> None:
    output = tmp_path / "jobs" / "out"
    batches = [_batch(["p.app.orders", "p.app.orders"]), _batch(["p.app.orders", "p.app./../p.app.orders"])]
    with pytest.raises(OutputPathError, match=r"topic 'p\.app\./\.\./p\.app\.orders' cannot be written under"):
        TopicFiles(str(output), "stream-000000000001-00000").write_all(batches)
    assert _all_files(tmp_path) == []  # not the first batch's file either, nor a temporary one
    assert TopicFiles(str(output), "stream-000000000001-00000").write_all(batches[:1]) == {"p.app.orders": 2}
    assert len(list(read_records(str(output), "p.app.orders"))) == 2
    with pytest.raises(OutputPathError):
        list(read_records(str(output), "p.app/../p.app.orders"))


def test_dead_letters_stay_inside_the_output_folder(tmp_path: Path) -> None:
    output = tmp_path / "out"
    output.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (output / "_dead-letter").symlink_to(tmp_path / "elsewhere")
    # as write_dead_letters writes them: under <output>/_dead-letter, every file inside <output>
    files = TopicFiles(str(output / "_dead-letter"), "stream-000000000001-00000", within=str(output))
    with pytest.raises(OutputPathError, match="outside"):
        files.write_all([_batch(["p.app.orders"])])
    assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing written through the link
    assert _all_files(tmp_path) == []


def test_the_lakes_folder_of_a_topic_is_never_its_own_folder_or_its_parent() -> None:
    from cdckit.spark.change_rows import folder_name

    # a topic a transform routes to "." or ".." (Kafka refuses such names) would name the lake's folder or its parent
    assert [folder_name(t) for t in (".", "..", "...", "", "a/../b", "p.app.orders")] == [
        "_", "__", "___", "_", "a_.._b", "p.app.orders"]


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("topic.prefix", "..", "is dots alone"), ("topic.prefix", "a/b", "may only contain"),
    ("topic.heartbeat.prefix", "../x", "may only contain"), ("topic.transaction", ".", "is dots alone"),
])
def test_the_topic_name_parts_a_user_gives_are_refused_where_kafka_or_a_folder_would_break(key: str, value: str,
                                                                                             problem: str) -> None:
    from cdckit.config.loader import validate
    from cdckit.errors import ConfigurationError

    settings = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "h",
                "database.user": "u", "database.password": "p", "database.dbname": "d", "topic.prefix": "p"}
    with pytest.raises(ConfigurationError, match=f"{key}='{re.escape(value)}' {problem}"):
        validate({**settings, key: value})
