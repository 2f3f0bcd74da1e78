"""A range plus a dim is a range that starts at the dim.

Decoders with a KV cache number the new positions ``arange(seq) + past``; the
exporters write it as ``range(0, seq, 1) + shape_to_tensor(past)``: three kernel
calls (the range, the dim as a tensor, the add) for what ``range(past, past + seq,
1)`` makes in one (the range kernel keeps its last few small ranges, so a
decoding step's positions are one cached array). Integers: exact.
"""

from __future__ import annotations

from ..ir.expr import PrimValue, ShapeExpr
from ..ops.registry import make_call
from .core.rules import Match


def _dim(m: Match):
    """The dim that ``offset`` holds: ``shape_to_tensor(R.shape([d]), scalar=True)``, else None."""
    value = m["offset"]
    shape = value.args[0] if value.args else None
    if not value.attrs.get("scalar") or not isinstance(shape, ShapeExpr) or len(shape.values) != 1:
        return None
    return shape.values[0]


def check(m: Match) -> str | None:
    start, stop, step = m["range"].args
    if not all(isinstance(a, PrimValue) for a in (start, stop, step)):
        return "the range's bounds are not values"
    if start.value != 0 or step.value != 1 or m["range"].attrs.get("dtype") != "int64":
        return "the range is not range(0, n, 1) of int64"
    if _dim(m) is None:
        return "the other operand is not one dim as a scalar"
    return None


def rewrite(m: Match):
    """range(0, n, 1) + d -> range(d, d + n, 1)."""
    d, n = _dim(m), m["range"].args[1].value
    return make_call("range", PrimValue(d), PrimValue(d + n), PrimValue(1), dtype="int64")
