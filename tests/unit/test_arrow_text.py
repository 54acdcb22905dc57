"""Texts joined a whole Arrow array at a time: nested parts are joined once, as the parts they hold."""

from __future__ import annotations

import pyarrow as pa

from cdckit.formats.arrow_text import Parts, join, joined, merge, parts


def test_nested_parts_join_to_the_same_texts_as_joining_each_level() -> None:
    names = pa.array(["ada", "bob", None], type=pa.string())
    ids = pa.array(["1", "2", "3"], type=pa.large_string())
    quoted = parts('"', names, '"')
    row = parts('{"id":', ids, ',"name":', quoted, "}")

    assert isinstance(row, Parts)
    # adjacent literals are folded: the quote after ',"name":' joins it
    assert [p for p in row if isinstance(p, str)] == ['{"id":', ',"name":"', '"}']
    flat = join('{"after":', row, "}")
    by_level = join('{"after":', join('{"id":', ids, ',"name":', join('"', names, '"'), "}"), "}")
    assert flat.to_pylist() == by_level.to_pylist() == [
        '{"after":{"id":1,"name":"ada"}}', '{"after":{"id":2,"name":"bob"}}', None]  # a null part: a null row
    assert flat.type == pa.large_string()


def test_joined_gives_arrays_as_they_are_and_joins_parts() -> None:
    texts = pa.array(["x", "y"], type=pa.large_string())
    assert joined(texts) is texts
    assert joined(parts("<", texts, ">")).to_pylist() == ["<x>", "<y>"]
    assert join(texts).to_pylist() == ["x", "y"]


def test_merge_takes_each_side_in_turn() -> None:
    mask = pa.array([True, False, True, False])
    assert merge(mask, pa.array(["a", "b"]), pa.array(["1", "2"])).to_pylist() == ["a", "1", "b", "2"]
