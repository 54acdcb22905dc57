"""A DBA's T-SQL scripts through cdckit over the SQL Server model (python -m cdckit_lab.sqlserver_model.replay):
CDC enabled by sql/sqlserver's own scripts, the snapshot, the changes, the stream, and the output replayed per key
equal to the tables. The same AdventureWorks scenario runs against a real SQL Server in tests/docker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdckit_lab.sqlserver_model import replay

pytestmark = [pytest.mark.spark]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.version_neutral
def test_a_shop_schema_and_its_changes_replay_to_the_tables(spark: Any, workdir: Path) -> None:
    shop = FIXTURES / "sqlserver"
    report = replay.run([shop / "schema.sql"], shop / "changes.sql", workdir / "replay", spark=spark)
    assert report.equal, "\n".join(report.lines())
    assert report.tables == ["dbo.tag", "shop.customer", "shop.order_line"]
    assert (report.changes_applied, report.records_streamed) == (16, 32)
    assert report.computed_columns == ["shop.customer.display_name", "shop.order_line.line_total"]


@pytest.mark.version_neutral
def test_adventureworks_every_table_captured_changed_streamed_and_replayed(spark: Any, workdir: Path) -> None:
    adventureworks = FIXTURES / "adventureworks"
    report = replay.run([adventureworks / "schema.sql", adventureworks / "data.sql"],
                        adventureworks / "changes.sql", workdir / "adventureworks", spark=spark)
    assert report.equal, "\n".join(report.lines())
    assert len(report.tables) == 71
    assert report.rows_snapshotted > 200 and report.changes_applied > 200 and report.records_streamed > 200
    assert "Sales.SalesOrderHeader.TotalDue" in report.computed_columns
