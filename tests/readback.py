"""Reading back what cdckit wrote to local files, as a consumer would: shared by the integration and Docker suites."""

from __future__ import annotations

from typing import Any

from cdckit.config import Config
from cdckit.spark.sinks import read_records


def records(config: Config, topic: str) -> list[dict[str, Any]]:
    return list(read_records(config.str("cdckit.output.path"), topic))


def payload(document: Any) -> Any:
    if isinstance(document, dict) and "payload" in document:
        return document["payload"]
    return document


def replay(config: Config, topic: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Apply a topic's records per key in order: the table as a consumer would rebuild it."""
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records(config, topic):
        key = tuple(payload(record["key"]).values())
        value = payload(record["value"])
        if value is None:
            continue  # tombstone
        if value["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = value["after"]
    return state


def check_unreadable_types_scenario(found: list[dict[str, Any]], version: bytes) -> None:
    """The spatial, hierarchyid, sql_variant, rowversion and 100 ns scenario's two records (a read, then an update of
    node, tag and clock), as the model's and the docker suite's runs must both give them."""
    import base64
    import struct

    after_fields = {f["field"]: f for f in found[0]["value"]["schema"]["fields"][1]["fields"]}
    assert after_fields["shape"]["name"] == "io.debezium.data.geometry.Geometry"
    assert after_fields["place"]["name"] == "io.debezium.data.geometry.Geography"
    assert (after_fields["at"]["name"], after_fields["clock"]["name"]) == ("io.debezium.time.NanoTimestamp",
                                                                           "io.debezium.time.NanoTime")
    line = base64.b64encode(struct.pack("<BII4d", 1, 2, 2, 0, 0, 3, 4)).decode()
    point = base64.b64encode(struct.pack("<BIdd", 1, 1, -122.35, 47.65)).decode()
    first = {"id": 1, "shape": {"wkb": line, "srid": 0}, "place": {"wkb": point, "srid": 4326}, "node": "/1/",
             "tag": "7", "version": base64.b64encode(version).decode(), "at": 1_704_164_645_123_456_700,
             "clock": 100, "zoned": "2024-01-02T03:04:05.1234567+11:00"}
    (read, update) = [payload(r["value"]) for r in found]
    assert (read["op"], read["after"]) == ("r", first)
    lobs = ("shape", "place")  # large values: NULL in an update's before image unless changed (the change tables' rule)
    assert (update["op"], {k: v for k, v in update["before"].items() if k not in lobs}) == (
        "u", {k: v for k, v in first.items() if k not in lobs})
    assert {k: v for k, v in update["after"].items() if first[k] != v} == {
        "node": "/1/2/", "tag": "seven", "clock": 43_200_999_999_900, "version": update["after"]["version"]}
    assert update["after"]["version"] != first["version"]
