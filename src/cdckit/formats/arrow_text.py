"""Texts built a whole Arrow array at a time: element-wise joins and merges of two arrays by a mask.

Pure: pyarrow only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


class Parts(tuple[Any, ...]):
    """Texts to be joined element-wise, not joined yet: ``join`` takes them as the parts they hold, so a text made
    of texts is copied once, at the end, instead of once for each level it is nested in."""


def parts(*items: Any) -> Parts:
    """``items`` (``str``, arrays, or ``Parts``) as one flat ``Parts``, adjacent literal texts folded into one."""
    flat: list[Any] = []
    for item in items:
        for part in (item if isinstance(item, Parts) else (item,)):
            if isinstance(part, str) and flat and isinstance(flat[-1], str):
                flat[-1] += part
            else:
                flat.append(part)
    return Parts(flat)


def join(*items: Any, text: pa.DataType | None = None) -> pa.Array:
    """Texts joined element-wise, as ``large_string`` (or ``text``, whose offsets the result must fit); a ``str``
    part is the same in every row, and ``Parts`` are joined as the parts they hold. A row is null where any of its
    parts is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = text or pa.large_string()
    flat = parts(*items)
    if len(flat) == 1 and not isinstance(flat[0], str):
        return flat[0].cast(text)
    arrays = [pa.scalar(part, text) if isinstance(part, str) else part.cast(text) for part in flat]
    return pc.binary_join_element_wise(*arrays, pa.scalar("", text))


def joined(texts: Any) -> pa.Array:
    """An array as it is, ``Parts`` joined (``large_string``)."""
    return join(texts) if isinstance(texts, Parts) else texts


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
