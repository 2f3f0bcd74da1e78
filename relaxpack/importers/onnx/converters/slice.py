"""Slice: bounds known at import (a static or symbolic ``R.strided_slice``),
computed from shapes (``R.dynamic_strided_slice`` over symbolic bounds), or
read at run time (``dyn.strided_slice``); symbolic contents are sliced at
import time and emit nothing. Lengths follow ``runtime.semantics.onnx_slice``.
"""

from __future__ import annotations

import numpy as np

from ....ir.dims import Dim, dim_max
from ....ir.expr import ShapeExpr
from ....ops.definitions.index import HUGE, slice_length
from ....ops.registry import make_call
from ....runtime.semantics import onnx_slice
from ..registry import register_converter
from ..value import Value
from ._shape_common import (
    const_ints, contents_value, int_contents, is_symbolic, norm_axes, runtime_length, shape_error, shaped,
    slice_index,
)
from ._dynamic import packed_call
from . import _unknown_rank as unknown_rank


@register_converter("", "Slice", since_opset=1)
def slice_v1(ctx, data, *, starts, ends, axes=None):
    return _slice(ctx, data, tuple(starts), tuple(ends), axes, None)


@register_converter("", "Slice", since_opset=10)
def slice_v10(ctx, data, starts, ends, axes=None, steps=None):
    bounds = starts.int_values(), ends.int_values()
    if None in bounds or any(v is not None and const_ints(v) is None for v in (axes, steps)):
        return _runtime_slice(ctx, data, starts, ends, axes, steps)
    return _slice(ctx, data, *bounds, const_ints(axes), const_ints(steps))


def _runtime_slice(ctx, data: Value, starts: Value, ends: Value, axes: Value | None, steps: Value | None):
    """Bounds (or axes, steps) known only at run time: a packed slice that
    keeps the dims of the axes it provably does not slice. The result has the
    data's rank whatever the bounds' length (tf2onnx's set_diag takes its ends
    from the shape of an If of two ranks): a length known on neither side
    leaves every dim to the run, which checks the lengths agree."""
    if data.ndim < 0:
        return unknown_rank.runtime_slice(ctx, data, starts, ends, axes, steps)
    data = shaped(ctx, data)
    lengths = {runtime_length(ctx, v, what, unknown_ok=True) for v, what in ((starts, "starts"), (ends, "ends"))}
    if len(lengths - {None}) > 1:
        raise shape_error(ctx, f"starts and ends must have the same length, got {starts.shape} and {ends.shape}")
    count = next(iter(lengths - {None}), None)
    sliced = (None if count is None else range(count)) if axes is None else const_ints(axes)
    if sliced is None:
        kept = (None,) * data.ndim
    else:
        touched = norm_axes(ctx, sliced, data.ndim)
        kept = tuple(None if i in touched else d for i, d in enumerate(data.shape))
    more = {name: v for name, v in (("axes", axes), ("steps", steps)) if v is not None}
    return packed_call(ctx, "dyn.slice", [data, starts, ends, *more.values()], [(kept, data.dtype)], "slice",
                       parts=tuple(more))


def _slice(ctx, data: Value, starts, ends, axes, steps):
    count = len(starts)
    axes = tuple(range(count)) if axes is None else tuple(axes)
    steps = (1,) * count if steps is None else tuple(steps)
    if not len(ends) == len(axes) == len(steps) == count:
        raise shape_error(ctx, f"starts, ends, axes and steps must have the same length, got "
                               f"{count}, {len(ends)}, {len(axes)}, {len(steps)}")
    if 0 in steps:
        raise shape_error(ctx, f"steps {steps} must not be 0")
    if data.ndim < 0:
        return unknown_rank.slice_(ctx, data, starts, ends, axes, steps)
    axes = norm_axes(ctx, axes, data.ndim)
    bounds = starts + ends
    if is_symbolic(data) and data.ndim == 1 and all(isinstance(b, int) for b in bounds):
        flat, _ = int_contents(data)
        picked = flat[onnx_slice(starts[0], ends[0], steps[0], len(flat))]
        return contents_value(ctx, picked, (len(picked),), data.dtype)
    data = shaped(ctx, data)
    begin, end = [], []
    for ax, s, e, step in zip(axes, starts, ends, steps):
        dim = data.shape[ax]
        b, f = slice_index(ctx, _negative_step_start(ctx, s, step, dim), dim), slice_index(ctx, e, dim)
        if b is None or f is None:
            return _dynamic_slice(ctx, data, starts, ends, axes, steps)
        begin.append(b)
        end.append(f)
    keep = [i for i in range(count) if not (begin[i] == 0 and end[i] >= HUGE and steps[i] == 1)]
    if not keep:
        return data
    return make_call("strided_slice", ctx.expr(data), axes=tuple(axes[i] for i in keep),
                     begin=tuple(begin[i] for i in keep), end=tuple(end[i] for i in keep),
                     strides=tuple(steps[i] for i in keep))


def _negative_step_start(ctx, start: Dim, step: int, dim: Dim) -> Dim:
    """ONNX clamps the start of a negative step to ``[0, dim - 1]`` after
    adding ``dim`` once, so a start below ``-dim`` is the first element
    (Python's slice would give nothing): 0 where that is provable."""
    if step < 0 and isinstance(start, int) and start < 0 and ctx.bb.analyzer.prove_lt(dim + start, 0):
        return 0
    return start


def _dynamic_slice(ctx, data: Value, starts, ends, axes, steps):
    """Symbolic bounds whose clamping depends on the dims' values: the bounds
    become shape values evaluated at run time (``dynamic_strided_slice``);
    with a negative step, or a symbolic bound that may be negative (ONNX
    then counts it from the end), the packed ``dyn.slice`` clamps them and
    fresh dims bind the sliced axes."""
    if any(s < 0 for s in steps):
        return _packed_slice(ctx, data, starts, ends, axes, steps)
    analyzer = ctx.bb.analyzer
    begin, end = [], []
    for ax, s, e in zip(axes, starts, ends):
        dim = data.shape[ax]
        for index, out in ((s, begin), (e, end)):
            if isinstance(index, int):
                out.append(dim if index >= HUGE else index if index >= 0 else dim_max(dim + index, 0))
            elif analyzer.prove_nonneg(index):
                out.append(index)
            else:
                return _packed_slice(ctx, data, starts, ends, axes, steps)
    return make_call("dynamic_strided_slice", ctx.expr(data), ShapeExpr(tuple(begin)), ShapeExpr(tuple(end)),
                     axes=tuple(axes), strides=tuple(steps))


def _packed_slice(ctx, data: Value, starts, ends, axes, steps):
    """``dyn.slice`` of ``data``: an axis with int bounds keeps its exact
    length, one with a symbolic bound gets a fresh dim."""
    kept = list(data.shape)
    for ax, b, e, step in zip(axes, starts, ends, steps):
        exact = isinstance(b, int) and isinstance(e, int)
        kept[ax] = slice_length(data.shape[ax], b, e, step, ctx.bb.analyzer) if exact else None
    bounds = [ctx.sym_value(starts), ctx.sym_value(ends), ctx.const(np.array(axes, np.int64)),
              ctx.const(np.array(steps, np.int64))]
    return packed_call(ctx, "dyn.slice", [data, *bounds], [(kept, data.dtype)], "slice", parts=("axes", "steps"))
