"""``dyn.reduce``: a reduction whose axes are a tensor known only at run time.

The packed kernel behind ONNX's Reduce* when the ``axes`` input is computed
(or fed) at run time: it reads the axes, works out the output shape and runs
the destination-passing reduction kernel of the static path (``sum``,
``mean``, ``max``, ``min``, ``prod``) into a new array, so both paths agree
on every dtype. ``log_sum_exp`` is the one composed reduction done here
whole, because its max shift broadcasts a reduced tensor against the input,
which the IR cannot shape when the axes are unknown.

Axes follow ONNX: negative ones count from the end, each may appear once,
and empty axes reduce every axis, or none with ``noop_with_empty_axes``
(the result is then a copy of the input)::

    dyn.reduce(x(2, 3, 4), [-1], op="sum", keepdims=False)  ->  (2, 3)
    dyn.reduce(x(2, 3, 4), [], op="max", keepdims=True)     ->  (1, 1, 1)
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..fpstate import quiet
from ._math import is_low_float, normalize_axis
from ._registry import register_packed
from .reduce import max_, mean, min_, prod, sum_


def reduced_axes(axes: np.ndarray, ndim: int, noop_with_empty_axes: bool) -> tuple[int, ...] | None:
    """The axes in ``[0, ndim)``; ``None`` for every axis (empty axes without
    noop), ``()`` for none (empty axes with noop). Duplicates are an error."""
    values = np.asarray(axes).reshape(-1)
    if values.dtype.kind not in "iu":
        raise ShapeError(f"dyn.reduce: axes must be integers, got {values.dtype}")
    if values.size == 0:
        return () if noop_with_empty_axes else None
    normalized = tuple(normalize_axis(int(a), ndim) for a in values)
    if len(set(normalized)) != len(normalized):
        raise ShapeError(f"dyn.reduce: axes {values.tolist()} name an axis twice (rank {ndim})")
    return normalized


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...] | None, keepdims: bool) -> tuple[int, ...]:
    """``shape`` with ``axes`` (None: all) reduced to 1s, or dropped."""
    every = axes is None
    if keepdims:
        return tuple(1 if every or i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if not every and i not in axes)


def log_sum_exp(x: np.ndarray, *, out: np.ndarray, axis, keepdims: bool) -> None:
    """``log(sum(exp(x - m))) + m`` with ``m`` the max over ``axis`` (0 where
    it is infinite), as the static ReduceLogSumExp composes it: integers
    compute in float64, low floats in float32, rounded once into ``out``."""
    work = np.float64 if x.dtype.kind in "iu" else np.float32 if is_low_float(x.dtype) else x.dtype
    data = x.astype(work, copy=False)
    peak = np.empty(reduced_shape(x.shape, axis, True), work)
    max_(data, out=peak, axis=axis, keepdims=True)
    peak[np.isinf(peak)] = 0
    total = np.empty(reduced_shape(x.shape, axis, keepdims), work)
    with quiet():
        sum_(np.exp(data - peak), out=total, axis=axis, keepdims=keepdims)
    with quiet():
        result = np.log(total) + peak.reshape(total.shape)
    np.copyto(out, result, casting="unsafe")


#: op attribute -> destination-passing reduction ``fn(x, *, out, axis, keepdims)``
REDUCTIONS = {"sum": sum_, "mean": mean, "max": max_, "min": min_, "prod": prod, "log_sum_exp": log_sum_exp}


@register_packed("dyn.reduce")
def reduce_at_run_time(x, axes, *, op, keepdims, noop_with_empty_axes):
    """``op`` over the axes held by the int tensor ``axes``; a new array."""
    fn = REDUCTIONS.get(op)
    if fn is None:
        raise ShapeError(f"dyn.reduce: unknown reduction {op!r} (expected one of {', '.join(REDUCTIONS)})")
    axis = reduced_axes(axes, x.ndim, noop_with_empty_axes)
    if axis == ():
        return x.copy()
    out = np.empty(reduced_shape(x.shape, axis, keepdims), x.dtype)
    fn(x, out=out, axis=axis, keepdims=keepdims)
    return out
