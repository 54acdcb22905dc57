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
from cdckit.formats.debezium.envelope import TableFormat, format_settings
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


@pytest.mark.parametrize("debezium_format", ["2.5", "3.6"])
def test_both_formats_take_the_columnar_path_for_snapshots_and_streams(debezium_format: str) -> None:
    """Formatting a column at a time (decision 0022) covers both releases: the snapshot reader and the change
    reader choose it for 3.6 as for 2.5, and leave only transaction metadata and yboutput to the reference."""
    from cdckit.spark.sources.postgres_snapshot import PostgresSnapshotReader
    from cdckit.spark.sources.postgres_stream_partition import DecodedRange, LsnRange

    options = {**BASE, "cdckit.debezium.format": debezium_format}
    assert columnar.supports(TableFormat(CUSTOMERS, settings(debezium_format=debezium_format)))
    assert PostgresSnapshotReader(options)._columnar(TableFormat(CUSTOMERS, format_settings(options)))
    assert DecodedRange(options, LsnRange(0, 1), "").columnar
    assert not DecodedRange({**options, "provide.transaction.metadata": "true"}, LsnRange(0, 1), "").columnar
    assert not DecodedRange({**options, "plugin.name": "yboutput"}, LsnRange(0, 1), "").columnar
    assert not columnar.supports(TableFormat(CUSTOMERS, settings(debezium_format=debezium_format, wrap_values=True)))


def test_3_6_streamed_changes_carry_each_commits_own_microseconds_on_the_columnar_path() -> None:
    """One block of changes from three transactions, committed within the same millisecond and in others: each
    record's source ``ts_us`` and ``ts_ns`` are its own commit's, and the texts are the reference's."""
    fmt = TableFormat(CUSTOMERS, settings(debezium_format="3.6"))
    commits = [1_700_000_000_123_456, 1_700_000_000_123_999, 1_700_000_000_124_001, 1_700_000_000_124_001]
    events = [event(after={**ROW, "id": str(1001 + i)}, tx_id=771 + i // 2, position=Position(300 + i, 200 + i, 0),
                    source_ts_ms=micros // 1000, sequence=(None, 200 + i), extra={"source_ts_us": micros})
              for i, micros in enumerate(commits)]
    changes = columnar.ColumnarChanges(fmt, fmt.settings.topic_prefix)
    keys, values = changes.texts(events, 1_700_000_000_500)
    assert keys is not None
    assert values.to_pylist() == [fmt.value_json(ev, 1_700_000_000_500) for ev in events]
    assert keys.to_pylist() == [fmt.key_json(ev.after or {}) for ev in events]
    sources = [json.loads(value)["payload"]["source"] for value in values.to_pylist()]
    assert [(source["ts_ms"], source["ts_us"], source["ts_ns"]) for source in sources] == [
        (micros // 1000, micros, micros * 1000) for micros in commits]
    payload = json.loads(values[0].as_py())["payload"]
    assert list(payload) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert (payload["ts_us"], payload["ts_ns"]) == (1_700_000_000_500_000, 1_700_000_000_500_000_000)


def test_3_6_snapshot_reads_on_the_columnar_path_are_the_reference() -> None:
    """Reads: the source time is known to the millisecond (``ts_us`` is ``ts_ms`` times 1000)."""
    import pyarrow as pa

    fmt = TableFormat(CUSTOMERS, settings(debezium_format="3.6"))
    rows = [{**ROW, "id": str(1001 + i)} for i in range(3)]
    markers = ["first", "true", "last"]
    columns = {name: pa.array([row[name] for row in rows], type=pa.string()) for name in ROW}

    def read(marker: str) -> ChangeEvent:
        return columnar.read_event("inventory", "customers", 200, 1_700_000_000_123, 771, marker)

    keys, values = columnar.ColumnarReads(fmt, fmt.settings.topic_prefix).texts(
        columns, pa.array(markers, type=pa.string()), read, 1_700_000_000_500)
    expected = [fmt.value_json(dataclasses.replace(read(marker), after=row), 1_700_000_000_500)
                for row, marker in zip(rows, markers, strict=True)]
    assert values.to_pylist() == expected
    assert keys is not None and keys.to_pylist() == [fmt.key_json(row, read=True) for row in rows]
    source = json.loads(expected[0])["payload"]["source"]
    assert (source["ts_us"], source["ts_ns"], source["snapshot"]) == (1_700_000_000_123_000,
                                                                      1_700_000_000_123_000_000, "first")


def test_the_setting_is_checked() -> None:
    assert validate({**BASE, "cdckit.debezium.format": "3.6"}).str("cdckit.debezium.format") == "3.6"
    with pytest.raises(ConfigurationError, match=re.escape("cdckit.debezium.format")):
        validate({**BASE, "cdckit.debezium.format": "3.0"})
    with pytest.raises(ConfigurationError, match=re.escape("cdckit.message.format=qlik does not write")):
        validate({**BASE, "cdckit.debezium.format": "3.6", "cdckit.message.format": "qlik"})
