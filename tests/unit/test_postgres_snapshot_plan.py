"""How a PostgreSQL snapshot is planned: chunks of about ``cdckit.snapshot.chunk.rows`` rows whatever the table's size,
and consecutive chunks grouped into Spark partitions (small tables together, a partition count bounded) without
changing a chunk."""

from __future__ import annotations

from cdckit.dialect.postgres.catalog import ColumnType, TableInfo
from cdckit.dialect.postgres.snapshot import SnapshotChunk, _plan_table, group_chunks


def _table(name: str, rows: int, key_type: str = "int8") -> TableInfo:
    columns = (ColumnType(name="id", type_name=key_type, type_oid=20, modifier=-1, optional=False),
               ColumnType(name="note", type_name="text", type_oid=25, modifier=-1, optional=True))
    return TableInfo("public", name, 1, columns, ("id",), "d", rows)


def test_a_large_table_is_planned_into_chunks_of_chunk_rows_however_many() -> None:
    # 2,000,000 keys at 10 rows a chunk: 200,000 chunks (the 1,024 a table once had would be ~2,000 rows each)
    chunks = _plan_table(_table("big", 2_000_000), 10, True, (1, 2_000_000), None)
    assert len(chunks) == 200_000
    assert all(c.upper - c.lower <= 10 for c in chunks[1:-1])  # type: ignore[operator]
    assert chunks[0].lower is None and chunks[-1].upper is None and chunks[1].lower == 11


def test_a_large_table_without_an_integer_key_is_planned_into_page_ranges_of_chunk_rows() -> None:
    table = TableInfo("public", "pages", 1, _table("x", 0).columns, (), "d", 5_000_000)
    chunks = _plan_table(table, 1_000, True, None, (100_000, 5_000_000, 100_000))  # 50 rows a page
    assert len(chunks) == 5_000 and {c.rows for c in chunks} == {1_000}
    assert all(c.upper - c.lower == 20 for c in chunks[1:-1])  # type: ignore[operator]


def test_a_sparse_key_is_bounded_by_the_row_estimate_and_an_unestimated_one_by_a_fixed_count() -> None:
    sparse = _plan_table(_table("sparse", 100), 10, True, (1, 10**15), None)
    assert len(sparse) == 11
    unestimated = _plan_table(_table("unknown", 0), 10, True, (1, 10**15), None)
    assert len(unestimated) == 1024


def _chunks(rows: list[int]) -> list[SnapshotChunk]:
    return [SnapshotChunk("s", f"t{i}", 0, "pk", None, None, rows=count) for i, count in enumerate(rows)]


def test_small_tables_share_a_partition_up_to_chunk_rows_in_order() -> None:
    chunks = _chunks([1_000] * 1_000)
    groups = group_chunks(chunks, 50_000)
    assert len(groups) == 20 and {len(group) for group in groups} == {50}
    assert [c for group in groups for c in group] == chunks  # every chunk once, in the plan's order


def test_a_chunk_of_chunk_rows_has_a_partition_of_its_own() -> None:
    groups = group_chunks(_chunks([50_000, 50_000, 10, 20, 50_000, 10]), 50_000)
    assert [[c.table for c in group] for group in groups] == [["t0"], ["t1"], ["t2", "t3"], ["t4"], ["t5"]]


def test_empty_tables_are_grouped_up_to_a_number_of_chunks() -> None:
    groups = group_chunks(_chunks([0] * 250), 50_000, chunks_per_group=100)
    assert [len(group) for group in groups] == [100, 100, 50]


def test_past_the_partition_bound_a_partition_reads_more_chunks_of_the_same_size() -> None:
    chunks = _chunks([10] * 10_000)
    groups = group_chunks(chunks, 10, max_groups=1_000)
    assert len(groups) <= 1_000
    assert [c for group in groups for c in group] == chunks
    assert {c.rows for group in groups for c in group} == {10}
