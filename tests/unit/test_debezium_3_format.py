"""cdckit.debezium.format=3.6: Debezium 3.6.0.Final's envelope and source blocks (measured side by side, decision
0028; tests/integration/test_debezium_compat.py compares whole records with Debezium's), and 2.5 left as it was."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from test_envelope import CUSTOMERS, ROW, event, settings

from cdckit.config import validate
from cdckit.errors import ConfigurationError
from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium import columnar
from cdckit.formats.debezium.envelope import TableFormat
from cdckit.formats.debezium.source import SqlServerSource

BASE = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db",
        "database.port": "5432", "database.user": "u", "database.password": "pw", "database.dbname": "shop",
        "topic.prefix": "p"}


def _value(fmt: TableFormat, ev: ChangeEvent) -> dict[str, Any]:
    return json.loads(fmt.value_json(ev, 1_700_000_000_500))


def test_the_3_6_envelope_puts_the_transaction_before_op_and_adds_finer_clocks() -> None:
    fmt = TableFormat(CUSTOMERS, settings(debezium_format="3.6"))
    ev = event(after=ROW, extra={"source_ts_us": 1_700_000_000_123_456})
    document = _value(fmt, ev)
    payload, schema = document["payload"], document["schema"]
    assert list(payload) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert [f["field"] for f in schema["fields"]] == ["before", "after", "source", "transaction", "op", "ts_ms",
                                                      "ts_us", "ts_ns"]
    assert schema["version"] == 2 and schema["name"] == "dbserver1.inventory.customers.Envelope"
    assert (payload["ts_ms"], payload["ts_us"], payload["ts_ns"]) == (
        1_700_000_000_500, 1_700_000_000_500_000, 1_700_000_000_500_000_000)
    source = payload["source"]
    assert list(source) == ["version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns",
                            "schema", "table", "txId", "lsn", "xmin", "origin", "origin_lsn"]
    assert (source["version"], source["ts_ms"], source["ts_us"], source["ts_ns"]) == (
        "3.6.0.Final", 1_700_000_000_123, 1_700_000_000_123_456, 1_700_000_000_123_456_000)
    assert source["origin"] is None and source["origin_lsn"] is None
    source_schema = schema["fields"][2]
    assert source_schema["version"] == 1 and list(source_schema)[-2:] == ["version", "field"]
    assert source_schema["fields"][4]["parameters"]["allowed"] == (
        "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental")
    # a source time known to the millisecond only (a snapshot's) is that time in the finer units
    assert _value(fmt, event(after=ROW))["payload"]["source"]["ts_us"] == 1_700_000_000_123_000


def test_2_5_stays_the_default_and_unchanged() -> None:
    document = _value(TableFormat(CUSTOMERS, settings()), event(after=ROW, extra={"source_ts_us": 1}))
    assert list(document["payload"]) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert document["schema"]["version"] == 1
    assert "ts_us" not in document["payload"]["source"] and document["payload"]["source"]["version"] == "2.5.2.Final"
    text = TableFormat(CUSTOMERS, settings()).value_json(event(after=ROW), 1)
    assert not re.search(r"ts_us|ts_ns|origin", text)


def test_the_3_6_sql_server_source_takes_the_same_common_fields() -> None:
    source = SqlServerSource("3.6")
    assert [f["field"] for f in source.schema["fields"]] == [
        "version", "connector", "name", "ts_ms", "snapshot", "db", "ts_us", "ts_ns", "schema", "table", "change_lsn",
        "commit_lsn", "event_serial_no"]
    assert source.schema["version"] == 1
    payload = source.payload(ChangeEvent("dbo", "customers", "c", None, {"id": 1}, Position(10, 9, 2),
                                         1_700_000_000_123, database="testDB", extra={"event_serial_no": 2}),
                             "server1", "testDB")
    assert (payload["version"], payload["ts_us"], payload["ts_ns"]) == (
        "3.6.0.Final", 1_700_000_000_123_000, 1_700_000_000_123_000_000)
    assert list(payload)[5:8] == ["db", "ts_us", "ts_ns"]
    assert [f["field"] for f in SqlServerSource().schema["fields"]][5:7] == ["db", "schema"]


def test_the_3_6_format_takes_the_reference_formatter() -> None:
    assert columnar.supports(TableFormat(CUSTOMERS, settings()))
    assert not columnar.supports(TableFormat(CUSTOMERS, dataclasses.replace(settings(), debezium_format="3.6")))


def test_the_setting_is_checked() -> None:
    assert validate({**BASE, "cdckit.debezium.format": "3.6"}).str("cdckit.debezium.format") == "3.6"
    with pytest.raises(ConfigurationError, match=re.escape("cdckit.debezium.format")):
        validate({**BASE, "cdckit.debezium.format": "3.0"})
    with pytest.raises(ConfigurationError, match=re.escape("cdckit.message.format=qlik does not write")):
        validate({**BASE, "cdckit.debezium.format": "3.6", "cdckit.message.format": "qlik"})
