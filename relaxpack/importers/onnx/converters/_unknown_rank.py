"""Data movement on a value of unknown rank: Gather, Slice, Split, Pad, Expand.

A value whose rank the import cannot know (an If whose branches give
different ranks, as torch's ``squeeze(d)`` exports; an input typed without a
shape) keeps flowing: these ops emit their ordinary graph op with the ONNX
axes as written (negative ones count from the end of whatever rank the run
meets), and Legalize hands the call to ``dyn.apply``, which shapes and
allocates its output at run time (runtime/kernels/output_shapes.py). Where
the op's operand fixes the rank (Pad's pads, Tile's repeats), the converter
casts to it instead (``of_rank``), so everything after is symbolic again.
Operands known only at run time go to the packed kernels, whose result keeps
an unknown rank.

    Gather(x: unknown rank, i, axis=-1) -> R.take(x, i, axis=-1)   (R.Tensor(ndim=?))
    Pad(x: unknown rank, pads (6,))     -> x cast to (d1, d2, d3), then R.pad
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ....ir.expr import TupleGetItem
from ....ops.registry import make_call
from ..value import Value
from ._dynamic import packed_call
from ._shape_common import const_ints, shape_error


def gather(ctx, data: Value, indices: Value, axis: int):
    """``R.take`` with ``axis`` as written; the kernel counts negative indices from the end."""
    return make_call("take", ctx.expr(data), ctx.expr(indices), axis=axis)


def gather_elements(ctx, data: Value, indices: Value, axis: int):
    """GatherElements of data of unknown rank: the output is the indices' shape."""
    return make_call("gather_elements", ctx.expr(data), ctx.expr(indices), axis=axis)


def slice_(ctx, data: Value, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int],
           steps: Sequence[int]):
    """``R.strided_slice`` with ONNX's bounds as written (the kernel clamps them)."""
    return make_call("strided_slice", ctx.expr(data), axes=tuple(axes), begin=tuple(starts), end=tuple(ends),
                     strides=tuple(steps))


def runtime_slice(ctx, data: Value, starts: Value, ends: Value, axes: Value | None, steps: Value | None):
    """Slice with bounds known at run time: ``dyn.slice``, the result's rank unknown."""
    more = {name: v for name, v in (("axes", axes), ("steps", steps)) if v is not None}
    return packed_call(ctx, "dyn.slice", [data, starts, ends, *more.values()], [(None, data.dtype)], "slice",
                       parts=tuple(more))


def split(ctx, data: Value, sizes: Value | Sequence[int] | None, axis: int, count: int):
    """Split into ``count`` pieces: by ``sizes`` (``dyn.split``, which checks
    they sum to the dim), or equal pieces (``R.split``)."""
    if isinstance(sizes, Value) and const_ints(sizes) is not None:
        sizes = const_ints(sizes)
    if sizes is None:
        pieces = ctx.emit(make_call("split", ctx.expr(data), indices_or_sections=count, axis=axis), "split")
        return tuple(TupleGetItem(pieces.expr, i) for i in range(count))
    if not isinstance(sizes, Value):
        if len(sizes) != count or any(s < 0 for s in sizes):
            raise shape_error(ctx, f"split {tuple(sizes)} must give {count} non-negative sizes")
        sizes = ctx.const(np.array(sizes, np.int64))
    values = packed_call(ctx, "dyn.split", [data, sizes], [(None, data.dtype)] * count, "split", axis=axis,
                         count=count)
    return tuple(values) if count > 1 else values


def pad(ctx, data: Value, pads: Value, axes: Value | None, more: dict, mode: str, fill):
    """Pad whose amounts do not fix the rank (they name ``axes``, or are
    known at run time only): ``dyn.pad``, the result's rank unknown."""
    parts = dict(more)
    if axes is not None:
        parts["axes"] = axes
    return packed_call(ctx, "dyn.pad", [data, pads, *parts.values()], [(None, data.dtype)], "pad",
                       parts=tuple(parts), pad_mode=mode, pad_value=fill if mode == "constant" else 0)


def expand(ctx, data: Value, shape: Value):
    """Expand of data of unknown rank: the output's rank is at least the
    target's length, and more if the data's is larger: ``dyn.expand``."""
    return packed_call(ctx, "dyn.expand", [data, shape], [(None, data.dtype)], "expand")
