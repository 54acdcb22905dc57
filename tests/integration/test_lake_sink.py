"""The lake sink against real PostgreSQL and Spark: Parquet change tables that follow schema changes, and stop
on a change they cannot follow without publishing anything of the batch."""

from __future__ import annotations

import datetime as dt
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, fetch, make_config

from cdckit.errors import CdcKitError
from cdckit.pipeline import run_snapshot, run_stream
from cdckit.spark.lake_sink import read_lake_table

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _rows(spark: Any, lake: Path, topic: str) -> list[dict[str, Any]]:
    df = read_lake_table(spark, str(lake), topic)
    return [r.asDict() for r in df.orderBy("__commit_lsn", "__lsn", "__serial").collect()]


def test_lake_tables_follow_added_and_widened_columns(postgres: Any, spark: Any, database: str,
                                                      workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.orders (id integer PRIMARY KEY, amount numeric(10,2), placed date, "
                 "at timestamp, seen timestamptz, note text, blob bytea)",
            "INSERT INTO public.orders VALUES (1, -12.50, '2024-02-29', '2024-01-02 03:04:05.123456', "
            "'2024-01-02 03:04:05+02', 'first', '\\x00ff')")
    lake = workdir / "lake"
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "lake", "cdckit.lake.path": str(lake)})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.orders (id, amount) VALUES (2, 7.25)",
            "ALTER TABLE public.orders ADD COLUMN qty smallint",
            "INSERT INTO public.orders (id, amount, qty) VALUES (3, 1.00, 4)")
    run_stream(spark, config)
    execute(dsn, "ALTER TABLE public.orders ALTER COLUMN qty TYPE bigint",
            "ALTER TABLE public.orders ALTER COLUMN amount TYPE numeric(14,4)",
            "UPDATE public.orders SET qty = 5000000000, amount = 123.4567 WHERE id = 3",
            "DELETE FROM public.orders WHERE id = 2")
    run_stream(spark, config)

    rows = _rows(spark, lake, "it.public.orders")
    assert [(r["id"], r["__op"], r["__deleted"]) for r in rows] == [
        (1, "r", False), (2, "c", False), (3, "c", False), (3, "u", False), (2, "d", True)]
    first = rows[0]
    assert first["amount"] == Decimal("-12.5000") and first["placed"] == dt.date(2024, 2, 29)
    assert first["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert first["seen"].astimezone(dt.UTC) == dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=dt.UTC)
    assert first["note"] == "first" and first["blob"] == bytearray(b"\x00\xff") and first["qty"] is None
    assert rows[2]["qty"] == 4 and rows[3]["qty"] == 5_000_000_000 and rows[3]["amount"] == Decimal("123.4567")
    # the latest row of each key equals the source table
    latest: dict[int, dict[str, Any]] = {}
    for row in rows:
        latest[row["id"]] = row
    current = {k: r["amount"] for k, r in latest.items() if not r["__deleted"]}
    assert current == {i: a for i, a in fetch(dsn, "SELECT id, amount FROM public.orders")}

    document = (lake / "it.public.orders" / "_cdckit_lake.json").read_text()
    assert "added column qty smallint" in document
    assert "widened column qty from smallint to bigint" in document
    assert "widened column amount from decimal(10,2) to decimal(14,4)" in document


def test_a_type_the_lake_cannot_widen_stops_the_stream_and_publishes_nothing(postgres: Any, spark: Any,
                                                                              database: str, workdir: Path) -> None:
    dsn = postgres.dsn(database)
    execute(dsn, "CREATE TABLE public.items (id integer PRIMARY KEY, code integer)",
            "INSERT INTO public.items VALUES (1, 10)")
    lake = workdir / "lake"
    config = make_config(postgres, database, workdir, **{"cdckit.sink": "lake", "cdckit.lake.path": str(lake)})
    run_snapshot(spark, config)
    execute(dsn, "INSERT INTO public.items VALUES (2, 20)")
    run_stream(spark, config)
    execute(dsn, "ALTER TABLE public.items ALTER COLUMN code TYPE text",
            "INSERT INTO public.items VALUES (3, 'A-30')")
    folder = lake / "it.public.items"
    files_before = sorted(p.name for p in folder.glob("*.parquet"))
    for _ in range(2):  # the batch is not committed: a second run meets the same change
        with pytest.raises(CdcKitError) as failure:
            run_stream(spark, config)
        message = str(failure.value)
        assert "public.items" in message and "'code'" in message and "from int to string" in message
        assert "Choices:" in message
        assert sorted(p.name for p in folder.glob("*.parquet")) == files_before
        assert not (folder / "_staging").exists()
    assert [r["id"] for r in _rows(spark, lake, "it.public.items")] == [1, 2]

    # the documented way out: move the table aside; the next run starts a new one with the new structure
    shutil.move(str(folder), str(workdir / "items-before-retype"))
    run_stream(spark, config)
    assert [(r["id"], r["code"]) for r in _rows(spark, lake, "it.public.items")] == [(3, "A-30")]
