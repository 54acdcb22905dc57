"""cdckit's state (snapshot state, finished chunks, schema history) on a local path and in S3 (a moto server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdckit.state import StateStore, join


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                 aws_secret_access_key="test").create_bucket(Bucket="cdckit-checkpoints")
    yield endpoint
    server.stop()


@pytest.fixture(params=["local", "s3"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "local":
        return str(tmp_path / "checkpoint")
    endpoint = request.getfixturevalue("s3_endpoint")
    for name, value in (("AWS_ENDPOINT_URL_S3", endpoint), ("AWS_ACCESS_KEY_ID", "test"),
                        ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    return f"s3a://cdckit-checkpoints/{tmp_path.name}/checkpoint"


def test_documents_round_trip_and_missing_ones_are_none(store_location: str) -> None:
    store = StateStore(store_location)
    assert store.read_json("snapshot/state.json") is None
    store.write_json("snapshot/state.json", {"status": "started", "plan": [1, 2]})
    store.write_json("snapshot/state.json", {"status": "completed"})
    assert store.read_json("snapshot/state.json") == {"status": "completed"}


def test_folders_list_their_documents_in_name_order_and_can_be_removed(store_location: str) -> None:
    store = StateStore(store_location)
    assert store.list_json("snapshot/chunks") == []
    store.write_json("snapshot/chunks/b.json", {"chunk": "b"})
    store.write_json("snapshot/chunks/a.json", {"chunk": "a"})
    assert store.list_json("snapshot/chunks") == [{"chunk": "a"}, {"chunk": "b"}]
    assert store.names("snapshot/chunks") == ["a.json", "b.json"]
    store.remove("snapshot/chunks")
    assert store.list_json("snapshot/chunks") == []


def test_schema_history_lives_beside_the_checkpoint(store_location: str) -> None:
    from cdckit.spark.schema_history import SchemaHistory, record_schema_controls

    options = {"cdckit.checkpoint.location": store_location}
    record_schema_controls(options, ['{"kind": "schema", "table": "public.t", "position": [1, 1, 0], '
                                     '"columns": [["id", "int4", -1, false]], "key": ["id"]}'])
    record_schema_controls(options, ['{"kind": "schema", "table": "public.t", "position": [5, 5, 0], '
                                     '"columns": [["id", "int8", -1, false]], "key": ["id"]}'])
    assert SchemaHistory.load(options).version("public.t") == 2


def test_join_keeps_uri_slashes() -> None:
    assert join("s3a://bucket/base/", "stream") == "s3a://bucket/base/stream"
    assert join("checkpoint", "snapshot", "state.json") == "checkpoint/snapshot/state.json"


def _event(op: str, row: dict[str, object], lsn: int, code_type: str = "int32") -> dict[str, object]:
    row_schema = {"type": "struct", "optional": True, "name": "p.public.t.Value",
                  "fields": [{"field": "id", "type": "int32"}, {"field": "code", "type": code_type, "optional": True}]}
    fields = [{"field": "before", **row_schema}, {"field": "after", **row_schema}]
    value = {"schema": {"type": "struct", "fields": fields},
             "payload": {"before": row if op == "d" else None, "after": None if op == "d" else row, "op": op}}
    return {"topic": "p.public.t", "key": json.dumps({"id": row["id"]}), "value": json.dumps(value), "op": op,
            "table": "public.t", "commit_lsn": lsn, "lsn": lsn, "serial": 0, "source_ts_ms": 1}


def test_change_rows_are_staged_as_typed_parquet_and_a_structure_they_cannot_follow_is_refused(
        store_location: str) -> None:
    import pyarrow.parquet as pq

    from cdckit.spark.change_rows import RowStructure, StructureError, stage_writer

    location = store_location.replace("/checkpoint", "/delta")

    def staging(root: str, topic: str, label: str) -> str:
        return f"{root}/_staging/{topic}/{label}"

    batch = [_event("c", {"id": 1, "code": 7}, 10), _event("d", {"id": 1, "code": 7}, 11),
             {"topic": "p.public.t", "op": "tombstone", "value": None}]
    staged = [json.loads(doc) for kind, doc in stage_writer(location, "stream-000000000001", False, staging)(batch)
              if kind == "_staged"]
    assert [(s["topic"], s["rows"], s["key"], s["position"]) for s in staged] == [("p.public.t", 2, ["id"],
                                                                                   [10, 10, 0])]
    store = StateStore(location)
    fs, _ = store.filesystem()
    assert store.names("_staging/p.public.t/stream-000000000001") == ["stream-000000000001-0.parquet"]
    table = pq.read_table(staged[0]["path"], filesystem=fs)
    assert table.to_pydict() == {"id": [1, 1], "code": [7, 7], "__op": ["c", "d"], "__deleted": [False, True],
                                 "__source_ts_ms": [1, 1], "__commit_lsn": [10, 11], "__lsn": [10, 11],
                                 "__serial": [0, 0]}
    structure = RowStructure("p.public.t")
    structure.evolve(staged[0], "table t", "Choices: none.")
    retyped = [_event("c", {"id": 2, "code": "x"}, 12, code_type="string")]
    later = [json.loads(doc) for kind, doc in stage_writer(location, "stream-000000000002", False, staging)(retyped)
             if kind == "_staged"]
    with pytest.raises(StructureError, match=r"table t: column 'code' changed from int to string.*Choices: none"):
        structure.evolve(later[0], "table t", "Choices: none.")
