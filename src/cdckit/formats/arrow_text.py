"""Texts built a whole Arrow array at a time: element-wise joins and merges of two arrays by a mask.

Pure: pyarrow only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def join(*parts: Any, text: pa.DataType | None = None) -> pa.Array:
    """Texts joined element-wise, as ``large_string`` (or ``text``, whose offsets the result must fit); a ``str``
    part is the same in every row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = text or pa.large_string()
    arrays = [pa.scalar(part, text) if isinstance(part, str) else part.cast(text) for part in parts]
    return pc.binary_join_element_wise(*arrays, pa.scalar("", text))


def merge(mask: pa.Array, where_true: pa.Array, where_false: pa.Array) -> pa.Array:
    """One array from two: rows where ``mask`` holds take ``where_true``'s values in turn, the others
    ``where_false``'s."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(where_false) == 0:
        return where_true
    if len(where_true) == 0:
        return where_false
    trues = pc.cumulative_sum(pc.cast(mask, pa.int64()))
    falses = pc.cumulative_sum(pc.cast(pc.invert(mask), pa.int64()))
    picks_true = pc.max_element_wise(pc.subtract(trues, 1), 0)
    picks_false = pc.max_element_wise(pc.subtract(falses, 1), 0)
    return pc.if_else(mask, where_true.take(picks_true), where_false.take(picks_false))
