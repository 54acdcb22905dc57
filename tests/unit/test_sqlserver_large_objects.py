"""Large-object columns as SQL Server's change tables hold them, and what cdckit emits for them.

Microsoft's cdc.<capture_instance>_CT page ("Large Object Data Types"): image, text and ntext are always NULL in
delete rows and update-before rows; varbinary(max), varchar(max) and nvarchar(max) are NULL in update-before rows
unless the update changed them. Debezium (debezium/dbz#1164) writes ``unavailable.value.placeholder`` for such a NULL
in an update whose ``__$update_mask`` says the column did not change, in the column's type: the text, or its bytes
in the binary handling mode's form.
"""

from __future__ import annotations

import base64
import json
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cdckit.config.properties import SQLSERVER_CONNECTOR
from cdckit.dialect.sqlserver.catalog import capture_instances
from cdckit.dialect.sqlserver.changes import check_readable, fold_changes, read_changes, require_max_lsn
from cdckit.dialect.sqlserver.connection import connect
from cdckit.formats.debezium.envelope import TableFormat, format_settings
from cdckit_lab.sqlserver_model import ModelColumn, SqlServerModel

PLACEHOLDER = "__debezium_unavailable_value"
COLUMNS = [ModelColumn("id", "int", nullable=False), ModelColumn("small", "varchar", 20),
           ModelColumn("notes", "nvarchar", -1), ModelColumn("pic", "varbinary", -1), ModelColumn("legacy", "text"),
           ModelColumn("img", "image"), ModelColumn("doc", "xml")]
# more than eight columns, so the update mask spans two bytes and ordinal 9 sits in its first byte
WIDE = [*COLUMNS, ModelColumn("c8", "int"), ModelColumn("big", "varchar", -1)]
ROW = {"id": 1, "small": "s", "notes": "long " * 3000, "pic": b"\x00\x01" * 5000, "legacy": "old text",
       "img": b"\xff\xd8", "doc": "<a>1</a>"}


def _payloads(tmp_path: Path, columns: list[ModelColumn], changes: Any,
              **settings: str) -> list[dict[str, Any]]:
    server = SqlServerModel(tmp_path / "sqlserver.sqlite")
    server.create_database("testDB")
    server.enable_cdc("testDB")
    server.create_table("testDB", "dbo", "docs", columns, ["id"])
    server.enable_table("testDB", "dbo", "docs")
    changes(server)
    options = {"connector.class": SQLSERVER_CONNECTOR, "database.hostname": "sqlserver.test",
               "database.names": "testDB", "topic.prefix": "server1",
               "cdckit.sqlserver.connection.factory": "cdckit_lab.sqlserver_model:connect",
               "cdckit.sqlserver.model.path": str(server.path), **settings}
    with closing(connect(options, "testDB")) as conn:
        cursor = conn.cursor()
        (instance,) = capture_instances(cursor, "testDB", options)
        end = require_max_lsn(cursor, "testDB") or 0
        events = list(fold_changes(instance, read_changes(cursor, instance, check_readable(cursor, instance, 0), end)))
    table = TableFormat(instance, format_settings(options))
    return [json.loads(table.value_json(event, 0))["payload"] for event in events]


def _insert_update_delete(server: SqlServerModel) -> None:
    with server.transaction("testDB") as tx:
        tx.insert("dbo", "docs", ROW)
    with server.transaction("testDB") as tx:
        tx.update("dbo", "docs", {"id": 1}, {"small": "t"})
    with server.transaction("testDB") as tx:
        tx.update("dbo", "docs", {"id": 1}, {"notes": "short", "legacy": "new text"})
    with server.transaction("testDB") as tx:
        tx.delete("dbo", "docs", {"id": 1})


def test_unchanged_large_objects_of_an_update_are_the_placeholder_in_their_type(tmp_path: Path) -> None:
    insert, untouched, touched, delete = _payloads(tmp_path, COLUMNS, _insert_update_delete)
    placeholder_bytes = base64.b64encode(PLACEHOLDER.encode()).decode()
    assert insert["after"]["notes"] == ROW["notes"] and insert["after"]["legacy"] == "old text"
    # an update of `small` only: the large objects of the old row are unknown, the new row has them
    assert untouched["before"] == {"id": 1, "small": "s", "notes": PLACEHOLDER, "pic": placeholder_bytes,
                                   "legacy": PLACEHOLDER, "img": placeholder_bytes, "doc": PLACEHOLDER}
    assert untouched["after"]["notes"] == ROW["notes"] and untouched["after"]["doc"] == "<a>1</a>"
    # an update of notes and legacy: notes(max) keeps its old value; text is NULL whatever changed (Debezium: null)
    assert touched["before"]["notes"] == ROW["notes"] and touched["before"]["legacy"] is None
    assert touched["before"]["pic"] == placeholder_bytes and touched["after"]["notes"] == "short"
    # a delete: text and image are NULL, the (max) types keep their value
    assert delete["before"]["legacy"] is None and delete["before"]["img"] is None
    assert delete["before"]["notes"] == "short" and delete["before"]["doc"] == "<a>1</a>"


def test_the_placeholder_of_a_binary_column_follows_binary_handling_mode(tmp_path: Path) -> None:
    _, untouched, _, _ = _payloads(tmp_path, COLUMNS, _insert_update_delete, **{"binary.handling.mode": "hex"})
    assert untouched["before"]["pic"] == PLACEHOLDER.encode().hex()


def test_the_update_mask_is_read_from_its_last_byte_on_wide_tables(tmp_path: Path) -> None:
    """Ordinal 9 is the lowest bit of the mask's first byte (sys.fn_cdc_is_bit_set): an update that sets `big` to
    NULL is a real NULL, not the placeholder; an update that leaves it is the placeholder."""
    def changes(server: SqlServerModel) -> None:
        with server.transaction("testDB") as tx:
            tx.insert("dbo", "docs", {**ROW, "c8": 8, "big": "x" * 9000})
        with server.transaction("testDB") as tx:
            tx.update("dbo", "docs", {"id": 1}, {"c8": 9})
        with server.transaction("testDB") as tx:
            tx.update("dbo", "docs", {"id": 1}, {"big": None})

    _, left, cleared = _payloads(tmp_path, WIDE, changes)
    assert left["before"]["big"] == PLACEHOLDER and left["after"]["big"] == "x" * 9000
    assert cleared["before"]["big"] == "x" * 9000 and cleared["after"]["big"] is None


@pytest.mark.parametrize("column", ["notes", "legacy"])
def test_an_insert_and_a_delete_never_carry_the_placeholder(tmp_path: Path, column: str) -> None:
    insert, *_, delete = _payloads(tmp_path, COLUMNS, _insert_update_delete)
    assert PLACEHOLDER not in json.dumps(insert) and PLACEHOLDER not in json.dumps(delete)
