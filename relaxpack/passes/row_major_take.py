"""A take of rows ``b * S + s`` from ``B * S`` rows, ``b`` and ``s`` iotas, is a reshape.

transformers' attention masks, as torch exports them with the padding mask read per
(batch, position) pair, gather a flattened mask by a linear index:
``take(flatten(mask), arange(B)[:, None, None, None] * S + arange(S)[None, None, None, :],
axis=0)``: two ranges, their unit axes, the dim as a tensor, a multiply, an add and the
take, every run, for what is ``mask`` reshaped. When ``b`` is ``range(0, B)`` along
output axis ``a0``, ``s`` ``range(0, S)`` along a later axis ``a1``, the factor is ``S``
(a one-element constant or ``shape_to_tensor`` of the dim) and the data has ``B * S``
rows, row ``b * S + s`` is the row-major order of ``(B, S)``: the take is the data
reshaped to ``B`` at ``a0``, ``S`` at ``a1`` and ones elsewhere. Every index is in
range by construction, so the take's bound check has nothing to find. Integers:
exact, the same values and dtype.

:func:`check` says why a take is not one; :func:`rewrite` is SimplifyAlgebra's rule
``take_of_row_major_iotas``.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant, ShapeExpr
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.rules import Match
from .iota_gather import iota_axis, op_name


def _factor(m: Match, expr):
    """The one value ``expr`` holds when it is a one-element integer constant or
    ``shape_to_tensor`` of one dim (a dim expression); None otherwise."""
    value = m.producer(expr)[0]
    if isinstance(value, Constant):
        data = value.data
        if data.size == 1 and data.dtype.kind in "iu":
            return int(np.asarray(data).reshape(-1)[0])
        return None
    if op_name(value) == "shape_to_tensor" and value.args and isinstance(value.args[0], ShapeExpr) \
            and len(value.args[0].values) == 1:
        return value.args[0].values[0]
    return None


def _scaled_iota(m: Match, expr):
    """``(axis, length, factor)`` when ``expr`` is ``iota * factor`` (either order)."""
    value = m.producer(expr)[0]
    if op_name(value) != "multiply":
        return None
    for a, b in ((value.args[0], value.args[1]), (value.args[1], value.args[0])):
        found, factor = iota_axis(m, a), _factor(m, b)
        if found is not None and factor is not None:
            return found[0], found[1], factor
    return None


def _plan(m: Match):
    """The index's shape and the data's rows' dims ``(a0, B, a1, S)``, or why the take is not one."""
    take = m["take"]
    if take.attrs.get("axis", 0) != 0:
        return "the take is not along axis 0"
    data, index = m.sinfo("data"), m["index"].struct_info
    if not isinstance(data, TensorStructInfo) or data.shape is None or data.ndim < 1 \
            or not isinstance(index, TensorStructInfo) or index.shape is None or index.ndim < 2:
        return "the data's or the index's shape is not known"
    if index.dtype not in ("int64", "int32"):
        return "the index is not an int32/int64 tensor"
    parts = m["index"].args
    for hi, lo in ((parts[0], parts[1]), (parts[1], parts[0])):
        inner, outer = iota_axis(m, lo), _scaled_iota(m, hi)
        if inner is None or outer is None:
            continue
        a1, s, _ = inner
        a0, b, factor = outer
        if a0 >= a1:
            return "the row iota does not vary along an earlier axis than the column iota"
        if not m.analyzer.prove_equal(factor, s):
            return "the row iota's factor is not the column iota's length"
        if not m.analyzer.prove_equal(data.shape[0], b * s):
            return "the data's rows are not the two iotas' lengths multiplied"
        for axis, dim in enumerate(index.shape):
            want = b if axis == a0 else s if axis == a1 else 1
            if not (dim == want or m.analyzer.prove_equal(dim, want)):
                return f"the index's axis {axis} is not {want}"
        return a0, b, a1, s
    return "the index is not iota * S + iota"


def check(m: Match) -> str | None:
    plan = _plan(m)
    return plan if isinstance(plan, str) else None


def rewrite(m: Match):
    """take(data, iota_b * S + iota_s, axis=0) -> reshape(data, index shape + data.shape[1:])."""
    a0, b, a1, s = _plan(m)
    index, data = m["index"].struct_info, m.sinfo("data")
    shape = [b if axis == a0 else s if axis == a1 else 1 for axis in range(index.ndim)]
    return make_call("reshape", m["data"], ShapeExpr(tuple(shape) + tuple(data.shape[1:])))
