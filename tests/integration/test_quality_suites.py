"""Every quality expectation fails on a crafted bad record (and names it among its examples), while the good
records beside them pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdckit.quality import check_records

pytestmark = [pytest.mark.spark]

TOPIC = "srv.public.t"
NOW_MS = 1_760_000_000_000
COLUMNS: list[tuple[str, dict[str, Any], tuple[str, int | None, int | None]]] = [
    # name, Connect field schema as emitted, source (typeName, length, scale)
    ("id", {"type": "int32", "optional": False}, ("int4", None, None)),
    ("amount", {"type": "string", "optional": True}, ("numeric", 10, 2)),
    ("price", {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
               "parameters": {"scale": "2", "connect.decimal.precision": "9"}}, ("numeric", 8, 3)),
    ("total", {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
               "parameters": {"scale": "2", "connect.decimal.precision": "10"}}, ("numeric", 10, 2)),
    ("day", {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1}, ("date", None, None)),
    ("at", {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1},
     ("timestamp", None, None)),
    ("seen", {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1},
     ("timestamptz", None, None)),
    ("uid", {"type": "string", "optional": True, "name": "io.debezium.data.Uuid", "version": 1}, ("uuid", None, None)),
    ("clock", {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "version": 1},
     ("time", 9, None)),
]
GOOD_ROW = {"amount": "1.50", "price": "AJg=", "total": "AJg=", "day": 19000, "at": 1_700_000_000_000_000,
            "seen": "2024-01-02T03:04:05.5Z", "uid": "123e4567-e89b-12d3-a456-426614174000", "clock": 1000}


def _row_schema() -> dict[str, Any]:
    return {"type": "struct", "optional": True, "name": f"{TOPIC}.Value",
            "fields": [{**schema, "field": name} for name, schema, _ in COLUMNS]}


def _value(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, lsn: int, *,
           snapshot: str = "false", ts_ms: int = NOW_MS, tx: str | None = None,
           drop_source: str | None = None) -> str:
    source = {"version": "3.0.0.Final", "connector": "postgresql", "name": "srv", "ts_ms": ts_ms - 5,
              "snapshot": snapshot, "db": "shop", "sequence": None, "schema": "public", "table": "t", "txId": 7,
              "lsn": lsn, "xmin": None}
    if drop_source:
        del source[drop_source]
    payload: dict[str, Any] = {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts_ms,
                               "transaction": None if tx is None else {"id": tx, "total_order": 1,
                                                                       "data_collection_order": 1}}
    schema = {"type": "struct", "name": f"{TOPIC}.Envelope", "optional": False,
              "fields": [{**_row_schema(), "field": "before"}, {**_row_schema(), "field": "after"}]}
    return json.dumps({"schema": schema, "payload": payload})


def _key(key: int) -> str:
    return json.dumps({"schema": {"type": "struct", "fields": [{"type": "int32", "field": "id"}]},
                       "payload": {"id": key}})


def _row(key: int, **changes: Any) -> dict[str, Any]:
    return {"id": key, **GOOD_ROW, **changes}


def _schema_change() -> str:
    columns = [{"name": name, "typeName": source[0], "length": source[1], "scale": source[2]}
               for name, _, source in COLUMNS]
    return json.dumps({"source": {"connector": "postgresql"}, "databaseName": "shop", "schemaName": "public",
                       "ddl": None, "tableChanges": [{"type": "CREATE", "id": '"shop"."public"."t"',
                                                      "table": {"columns": columns}}]})


def _qlik(kind: str, message: dict[str, Any]) -> str:
    return json.dumps({"magic": "atMSG", "type": kind, "headers": None, "messageSchemaId": None,
                       "messageSchema": None, "message": message})


def _qlik_metadata(table: str) -> str:
    return _qlik("MD", {"schemaId": "x", "lineage": {"server": "srv", "task": "t", "schema": "public", "table": table,
                                                     "tableVersion": 1, "timestamp": "2024-01-01T00:00:00"},
                        "tableStructure": {"tableColumns": {
                            "id": {"ordinal": 1, "type": "INT4", "length": 0, "precision": 0, "scale": 0,
                                   "primaryKeyPosition": 1},
                            "name": {"ordinal": 2, "type": "STRING", "length": 10, "precision": 0, "scale": 0,
                                     "primaryKeyPosition": 0}}}, "dataSchema": "{}"})


def _qlik_data(table: str, operation: str, sequence: str, data: dict[str, Any], before: dict[str, Any] | None,
               column_mask: str, change_mask: str) -> str:
    return _qlik("DT", {"schema": "public", "table": table, "headers": {
        "operation": operation, "changeSequence": sequence, "timestamp": "2024-01-01T00:00:00", "streamPosition": "",
        "transactionId": "1", "changeMask": change_mask, "columnMask": column_mask, "transactionEventCounter": 1,
        "transactionLastEvent": True}, "data": data, "beforeData": before})


def _records() -> list[tuple[str, int, int, str | None, str | None]]:
    out: list[tuple[str, str | None, str | None]] = [("srv", None, _schema_change())]

    def event(key: int, value: str, tombstone: bool = False) -> None:
        out.append((TOPIC, _key(key), value))
        if tombstone:
            out.append((TOPIC, _key(key), None))

    # good records: a read, a create, an update, a delete and its tombstone, in one transaction
    event(1, _value("r", None, _row(1), 100, snapshot="last"))
    event(2, _value("c", None, _row(2), 110, tx="tx-good"))
    event(2, _value("u", None, _row(2, amount="2.50"), 111, tx="tx-good"))
    event(2, _value("d", _row(2), None, 112, tx="tx-good"), tombstone=True)
    event(2, _value("d", _row(2), None, 112, tx="tx-good"), tombstone=True)  # a replay: not a problem
    out.append(("srv.transaction", json.dumps({"id": "tx-good"}),
                json.dumps({"status": "END", "id": "tx-good", "event_count": 3, "data_collections": []})))
    # bad records, one per expectation
    event(10, _value("x", None, _row(10), 120))
    event(11, _value("c", _row(11), _row(11), 121))
    event(12, _value("d", None, None, 122), tombstone=True)
    event(13, _value("d", _row(13), _row(13), 123), tombstone=True)
    event(14, _value("r", None, _row(14), 100, snapshot="false"))
    event(15, _value("c", None, _row(15), 125, snapshot="true"))
    event(16, _value("c", None, _row(16), 126, drop_source="lsn"))
    event(17, _value("c", None, _row(17), 127, ts_ms=NOW_MS // 1000))
    event(18, _value("c", None, _row(99), 128))
    event(19, _value("c", None, _row(19), 200))
    event(19, _value("u", None, _row(19), 150))
    event(20, _value("d", _row(20), None, 130))
    event(21, _value("u", {"id": 21, "amount": "1.50"}, _row(21), 131))
    out.append((TOPIC, None, _value("c", None, _row(24), 987654)))  # no key, among keyed events of its table
    event(22, _value("c", None, _row(22), 132, tx="tx-bad"))
    out.append(("srv.transaction", json.dumps({"id": "tx-bad"}),
                json.dumps({"status": "END", "id": "tx-bad", "event_count": 2, "data_collections": []})))
    event(23, _value("c", None, _row(23, amount="1.5", day=5_000_000_000, at=90_000_000_000_000_000_000,
                                     seen="2024-13-01 10:00", uid="not-a-uuid", total="12.5"), 133))
    # Qlik: data before any metadata; a changeSequence going back; masks that disagree with the data
    out.append(("qlik.t", json.dumps({"id": 1}), _qlik_data("nometa", "INSERT", "0001", {"id": 1, "name": "a"},
                                                              None, "03", "03")))
    out.append(("qlik.t", None, _qlik_metadata("t")))
    out.append(("qlik.t", json.dumps({"id": 1}), _qlik_data("t", "INSERT", "0010", {"id": 1, "name": "a"}, None,
                                                              "03", "03")))
    out.append(("qlik.t", json.dumps({"id": 2}), _qlik_data("t", "INSERT", "0005", {"id": 2, "name": "b"}, None,
                                                              "03", "03")))
    out.append(("qlik.t", json.dumps({"id": 3}), _qlik_data("t", "UPDATE", "0020", {"id": 3, "name": "c"},
                                                              {"id": 3, "name": "old"}, "03", "03")))
    return [(topic, 0, seq, key, value) for seq, (topic, key, value) in enumerate(out)]


@pytest.fixture(scope="module")
def report(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    frame = spark.createDataFrame(_records(), "topic STRING, part INT, seq BIGINT, key STRING, value STRING")
    return check_records(frame, {"topic.prefix": "srv"}, tmp_path_factory.mktemp("quality") / "report")


def _examples(report: Any, suite: str, check: str) -> str:
    outcome = report.outcome(suite, check)
    assert not outcome.success, f"{suite}: {check} passed on the crafted records"
    return json.dumps(outcome.examples, default=str)


@pytest.mark.parametrize(("suite", "check", "culprit"), [
    ("envelopes", "op is c, u, d or r", '\\"id\\":10'),
    ("envelopes", "a create has no before", '\\"id\\":11'),
    ("envelopes", "a delete has a before", '\\"id\\":12'),
    ("envelopes", "a delete has no after", '\\"id\\":13'),
    ("envelopes", "a read (snapshot) event has the snapshot marker set", '\\"id\\":14'),
    ("envelopes", "a streamed event has source.snapshot false", '\\"id\\":15'),
    ("envelopes", "the source block has every field of its connector", '\\"id\\":16'),
    ("envelopes", "ts_ms is a plausible time in milliseconds", '\\"id\\":17'),
    ("envelopes", "the key equals the key columns of after (before for deletes)", '\\"id\\":18'),
    ("envelopes", "every event of a table with a key (its primary key, or message.key.columns) carries it (a key "
                  "added or dropped meanwhile excepted)", "@00000000000000987654"),
    ("envelopes", "per key, positions strictly increase once replays are dropped", '\\"id\\":19'),
    ("envelopes", "a tombstone follows each delete (tombstones.on.delete)", '\\"id\\":20'),
    ("envelopes", "an update's before is absent (REPLICA IDENTITY DEFAULT), the key (USING INDEX) or the whole row "
                  "(FULL)", '\\"id\\":21'),
    ("transactions", "a transaction's END event_count equals the data events carrying its id", "tx-bad"),
    ("type_mappings", "schema type and logical name match the mapping for the source type and handling mode",
     "public.t.amount numeric"),
    ("type_mappings", "a decimal's scale parameter is the declared scale", "public.t.price"),
    ("type_mappings", "a decimal's precision parameter is the declared precision", "public.t.price"),
    ("type_mappings", "the source type's declared precision has a mapping", "public.t.clock time"),
    ("values", "PostgreSQL dates are a 32-bit count of days since the epoch", "5000000000"),
    ("values", "PostgreSQL microsecond timestamps are a 64-bit count", "90000000000000000000"),
    ("values", "zoned timestamps are ISO-8601 with an offset", "2024-13-01 10:00"),
    ("values", "UUIDs are canonical text", "not-a-uuid"),
    ("values", "precise decimals are base64 unscaled bytes", "12.5"),
    ("decimal_scales", "decimals written as strings carry the declared scale", "public.t.amount 1.5"),
    ("qlik", "a metadata message with the data's columns precedes it", "public.nometa"),
    ("qlik", "changeSequence increases per partition", "0005"),
    ("qlik", "columnMask and changeMask agree with the data", "0020"),
])
def test_each_expectation_fails_on_its_crafted_record(report: Any, suite: str, check: str, culprit: str) -> None:
    assert culprit in _examples(report, suite, check)


def test_good_records_are_not_among_the_failures(report: Any) -> None:
    failing = json.dumps([o.examples for o in report.failed()], default=str)
    for good in ('\\"id\\":1}', '\\"id\\":2}', "tx-good"):
        assert good not in failing
    assert not report.success


def test_the_report_folder_has_data_docs_and_summaries(report: Any) -> None:
    folder = Path(report.data_docs.removeprefix("file://")).parents[4]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["success"] is False
    assert {o["suite"] for o in summary["outcomes"]} >= {"envelopes", "transactions", "type_mappings", "values",
                                                         "decimal_scales", "qlik"}
    markdown = (folder / "summary.md").read_text()
    assert "**FAILED**" in markdown and "| envelopes | op is c, u, d or r |" in markdown
    assert (folder / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html").exists()
