"""SQL Server columns and values -> Qlik Replicate columns and typed values; SQL Server change headers."""

from __future__ import annotations

import datetime
import json
import uuid
from decimal import Decimal

import pytest

from cdckit.events import ChangeEvent, Position
from cdckit.formats.debezium.sqlserver_types import SqlServerColumn, UnsupportedSqlServerTypeError
from cdckit.formats.qlik import QlikChange, QlikSettings, data_message, data_schema, decode_avro, encode_data
from cdckit.formats.qlik.sqlserver import (
    change_headers,
    change_sequence,
    qlik_column,
    qlik_row,
    qlik_table,
    qlik_value,
    stream_position,
)

UTC = datetime.timezone.utc


def col(type_name: str, max_length: int = 0, precision: int = 0, scale: int = 0, name: str = "c",
        optional: bool = True) -> SqlServerColumn:
    return SqlServerColumn(name, type_name, max_length, precision, scale, optional)


@pytest.mark.parametrize(("column", "expected"), [
    (col("bit", 1, 1), ("BOOLEAN", 0, 0, 0)),
    (col("tinyint", 1, 3), ("UINT1", 0, 0, 0)),
    (col("smallint", 2, 5), ("INT2", 0, 0, 0)),
    (col("int", 4, 10), ("INT4", 0, 0, 0)),
    (col("bigint", 8, 19), ("INT8", 0, 0, 0)),
    (col("real", 4, 24), ("REAL4", 0, 0, 0)),
    (col("float", 8, 53), ("REAL8", 0, 0, 0)),
    (col("decimal", 9, 10, 2), ("NUMERIC", 0, 10, 2)),
    (col("numeric", 17, 38, 0), ("NUMERIC", 0, 38, 0)),
    (col("money", 8, 19, 4), ("NUMERIC", 0, 19, 4)),
    (col("smallmoney", 4, 10, 4), ("NUMERIC", 0, 10, 4)),
    (col("date", 3, 10), ("DATE", 0, 0, 0)),
    (col("datetime", 8, 23, 3), ("DATETIME", 0, 0, 3)),
    (col("smalldatetime", 4, 16), ("DATETIME", 0, 0, 0)),
    (col("datetime2", 8, 27, 7), ("DATETIME", 0, 0, 7)),
    (col("datetime2", 6, 19, 0), ("DATETIME", 0, 0, 0)),
    (col("time", 5, 16, 7), ("STRING", 16, 0, 0)),
    (col("datetimeoffset", 10, 34, 7), ("STRING", 34, 0, 0)),
    (col("char", 10), ("STRING", 10, 0, 0)),
    (col("varchar", 255), ("STRING", 255, 0, 0)),
    (col("varchar", -1), ("CLOB", 0, 0, 0)),
    (col("text", 16), ("CLOB", 0, 0, 0)),
    (col("nchar", 20), ("WSTRING", 10, 0, 0)),
    (col("nvarchar", 80), ("WSTRING", 40, 0, 0)),
    (col("nvarchar", -1), ("NCLOB", 0, 0, 0)),
    (col("ntext", 16), ("NCLOB", 0, 0, 0)),
    (col("sysname", 256), ("WSTRING", 128, 0, 0)),
    (col("xml", -1), ("CLOB", 0, 0, 0)),
    (col("uniqueidentifier", 16), ("STRING", 36, 0, 0)),
    (col("binary", 16), ("BYTES", 16, 0, 0)),
    (col("varbinary", 100), ("BYTES", 100, 0, 0)),
    (col("varbinary", -1), ("BLOB", 0, 0, 0)),
    (col("image", 16), ("BLOB", 0, 0, 0)),
    (col("timestamp", 8), ("BYTES", 8, 0, 0)),
    (col("geometry", -1), ("BLOB", 0, 0, 0)),
    (col("geography", -1), ("BLOB", 0, 0, 0)),
    (col("hierarchyid", 892), ("WSTRING", 4000, 0, 0)),
    (col("sql_variant", 8016), ("WSTRING", 4000, 0, 0)),
])
def test_sql_server_types_map_to_qliks_documented_types(column: SqlServerColumn,
                                                        expected: tuple[str, int, int, int]) -> None:
    mapped = qlik_column(column)
    assert (mapped.type, mapped.length, mapped.precision, mapped.scale) == expected


@pytest.mark.parametrize("type_name", ["cursor", "table"])
def test_types_without_a_mapping_are_refused_naming_the_column(type_name: str) -> None:
    with pytest.raises(UnsupportedSqlServerTypeError, match=rf"'shape'.*'{type_name}'.*column\.exclude\.list"):
        qlik_column(col(type_name, name="shape"))


def test_table_takes_key_positions_and_nullability_from_the_capture_instance() -> None:
    table = qlik_table("dbo", "orders", [col("int", 4, 10, name="line", optional=False),
                                         col("int", 4, 10, name="id", optional=False), col("nvarchar", 80, name="n")],
                       ["id", "line"])
    assert [(c.name, c.primary_key_position, c.nullable) for c in table.columns] == [
        ("line", 2, False), ("id", 1, False), ("n", 0, True)]
    with pytest.raises(ValueError, match=r"not columns of dbo\.orders"):
        qlik_table("dbo", "orders", [col("int", name="id")], ["missing"])


@pytest.mark.parametrize(("column", "value", "expected"), [
    (col("bit"), True, True),
    (col("tinyint"), 255, 255),
    (col("real", 4, 24), 4.322999954223633, 4.323),  # pyodbc widens a real to a double
    (col("float", 8, 53), 0.1, 0.1),
    (col("decimal", 9, 10, 2), Decimal("12.345"), Decimal("12.35")),
    (col("money", 8, 19, 4), Decimal("1.2346"), Decimal("1.2346")),
    (col("date"), datetime.date(2024, 2, 29), datetime.date(2024, 2, 29)),
    (col("datetime2", 8, 27, 7), datetime.datetime(2024, 5, 1, 8, 30, 0, 123456),
     datetime.datetime(2024, 5, 1, 8, 30, 0, 123456, UTC)),
    (col("time", 5, 16, 7), datetime.time(8, 30, 0, 123456), "08:30:00.1234560"),
    (col("time", 5, 11, 2), datetime.time(8, 30, 0, 120000), "08:30:00.12"),
    (col("time", 3, 8, 0), datetime.time(17, 0), "17:00:00"),
    (col("datetimeoffset", 10, 34, 7), "2018-07-13 12:23:45.4560000 +11:00", "2018-07-13 12:23:45.4560000 +11:00"),
    (col("datetimeoffset", 8, 30, 3), "2018-07-13 12:23:45.4560000 -05:30", "2018-07-13 12:23:45.456 -05:30"),
    (col("datetimeoffset", 8, 26, 0), "2018-07-13 12:23:45.4560000 +00:00", "2018-07-13 12:23:45 +00:00"),
    (col("uniqueidentifier"), uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff"),
     "6F9619FF-8B86-D011-B42D-00C04FC964FF"),
    (col("nchar", 8), "ab  ", "ab  "),
    (col("varbinary", 10), bytearray(b"\x01\x02"), b"\x01\x02"),
    # cdckit's connections read datetime, datetime2 and time as SQL Server's text (100 ns), spatial values as the
    # SRID and the well-known binary, hierarchyid and sql_variant as text (docs/decisions/0032)
    (col("datetime2", 8, 27, 7), "2024-05-01 08:30:00.1234567", datetime.datetime(2024, 5, 1, 8, 30, 0, 123456, UTC)),
    (col("datetime", 8, 23, 3), "2024-05-01 08:30:00.0070000", datetime.datetime(2024, 5, 1, 8, 30, 0, 7000, UTC)),
    (col("time", 5, 16, 7), "08:30:00.1234567", "08:30:00.1234567"),
    (col("time", 5, 11, 2), "08:30:00.1200000", "08:30:00.12"),
    (col("geography", -1), b"\x00\x00\x10\xe6\x01\x01\x00\x00\x00" + bytes(16),
     b"\x00\x00\x10\xe6\x01\x01\x00\x00\x00" + bytes(16)),
    (col("hierarchyid", 892), "/1/3/", "/1/3/"),
    (col("sql_variant", 8016), "42", "42"),
])
def test_values_become_typed_qlik_values(column: SqlServerColumn, value: object, expected: object) -> None:
    assert qlik_value(column, value) == expected
    assert qlik_value(column, None) is None


def test_a_value_of_the_wrong_kind_names_the_column() -> None:
    with pytest.raises(ValueError, match="column 'when' \\(datetime2\\)"):
        qlik_value(col("datetime2", 8, 27, 7, name="when"), "2024-05-01")


def test_rows_keep_only_delivered_columns_and_refuse_unknown_ones() -> None:
    columns = [col("int", name="id"), col("nvarchar", 80, name="n")]
    assert qlik_row(columns, {"id": 1, "n": None}) == {"id": 1, "n": None}
    with pytest.raises(ValueError, match="'x' is not among"):
        qlik_row(columns, {"id": 1, "x": 2})


def test_change_sequence_is_55_digits_ordered_as_positions_for_any_10_byte_lsn() -> None:
    largest = 2**80 - 1
    sequences = [change_sequence(5, 3, 0), change_sequence(5, 4, 0), change_sequence(5, 4, 2),
                 change_sequence(largest, largest, 0)]
    assert all(len(s) == 55 for s in sequences)
    assert sequences == sorted(sequences)
    with pytest.raises(ValueError, match="change_lsn"):
        change_sequence(1, 2**84, 0)


def test_headers_come_from_the_lsns() -> None:
    commit, change = 0x0000002A_000001C8_0005, 0x0000002A_000001C0_0002
    event = ChangeEvent("dbo", "t", "c", None, {"id": 1}, Position(commit, change, 0), 0, database="testDB")
    headers = change_headers(event)
    assert headers.stream_position == "0000002a:000001c0:0002" == stream_position(change)
    assert headers.transaction_id == f"{commit:032X}" and len(headers.transaction_id) == 32
    assert headers.change_sequence == f"{commit:025d}{change:025d}00000"


def test_messages_render_sql_server_values_in_json_and_avro() -> None:
    columns = [col("int", 4, 10, name="id", optional=False), col("tinyint", 1, 3, name="qty"),
               col("decimal", 9, 10, 2, name="price"), col("datetime2", 8, 27, 7, name="at"),
               col("time", 5, 16, 7, name="starts"), col("nvarchar", 80, name="name"), col("varbinary", 4, name="b")]
    table = qlik_table("dbo", "items", columns, ["id"])
    row = qlik_row(columns, {"id": 1, "qty": 3, "price": Decimal("2.50"), "at": datetime.datetime(2024, 5, 1, 8, 30),
                             "starts": datetime.time(8, 30), "name": "Zoë", "b": b"\xca\xfe"})
    assert row is not None
    message = data_message(table, QlikChange("INSERT", row, change_sequence=change_sequence(5, 3, 0)))
    rendered = json.loads(encode_data(table, message, QlikSettings("s", "t")))
    assert rendered["data"] == {"id": 1, "qty": 3, "price": "2.50", "at": "2024-05-01 08:30:00.000000",
                                "starts": "08:30:00.0000000", "name": "Zoë", "b": "CAFE"}
    assert rendered["headers"]["columnMask"] == "7F"
    avro = decode_avro(encode_data(table, message, QlikSettings("s", "t", "avro")), data_schema(table))
    assert avro["data"]["qty"] == 3 and avro["data"]["price"] == Decimal("2.50")
    assert avro["data"]["at"] == datetime.datetime(2024, 5, 1, 8, 30, tzinfo=UTC)
