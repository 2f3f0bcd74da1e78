"""Algorithms: einsum, topk, cumsum, one_hot, trilu, range, tile, and the
packed ``nonzero`` (its output size depends on the data).

>>> out = np.empty((2, 2), np.float32)
>>> einsum((np.eye(2, dtype=np.float32), np.ones((2, 2), np.float32)), out=out, equation="ij,jk->ik")
>>> out
array([[1., 1.],
       [1., 1.]], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..kept import keep
from ._math import is_low_float, normalize_axis, separate
from ._registry import register_kernel, register_packed
from . import einsum_matmul
from .cumulative import accumulate_into


@register_kernel("einsum")
def einsum(operands, *, out, equation):
    """``numpy.einsum(equation, *operands)``; low floats compute in float32
    and round once (numpy has no bfloat16 einsum)."""
    equation = "".join(equation.split())
    # numpy's contraction-order search pays off only from three operands on
    optimize = len(operands) > 2
    if is_low_float(out.dtype):
        result = np.einsum(equation, *(a.astype(np.float32) for a in operands), optimize=optimize)
        np.copyto(out, result, casting="unsafe")
        return
    if len(operands) == 2 and einsum_matmul.run(equation, operands[0], operands[1], out):
        return              # a batched matrix product: BLAS (numpy's einsum of two operands is not)
    operands = separate(out, *operands)
    np.einsum(equation, *operands, out=out, optimize=optimize)


@register_kernel("topk")
def topk(x, *, out, k, axis, largest, sorted):  # noqa: A002 (the op's attribute name)
    """The ``k`` largest (or smallest) values along ``axis`` and their indices,
    in order; among equal values the lower index comes first (as ONNX says)."""
    values, indices = out
    ax = normalize_axis(axis, x.ndim)
    n = x.shape[ax]
    if k > n:
        raise ShapeError(f"topk: k={k} is larger than dim {ax} (of size {n}) of the data {x.shape}")
    if 0 < k * _FEW <= n == x.size and x.dtype.kind in "fiu" and not (x.dtype.kind == "f" and np.isnan(x).any()):
        order = _few_of_one_row(x.reshape(n), k, largest).reshape(indices.shape)
        np.copyto(indices, order)
        np.copyto(values, np.take(x.reshape(n), order))
        return
    if largest:
        # A stable sort of the reversed axis, read backwards: descending values,
        # and among equal values ascending indices (works for unsigned ints too).
        order = np.flip(np.argsort(np.flip(x, ax), axis=ax, kind="stable"), ax)
        order = (n - 1) - order
    else:
        order = np.argsort(x, axis=ax, kind="stable")
    order = np.take(order, np.arange(k), axis=ax)
    np.copyto(indices, order, casting="unsafe")
    np.copyto(values, np.take_along_axis(x, order, axis=ax))


#: topk of one row sorts only its candidates when ``k * _FEW <= n`` (an RPN's top 60 of 2304 anchors)
_FEW = 8


def _few_of_one_row(flat: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """The indices of :func:`topk` for a 1-D ``flat`` without NaN: a partition finds the k-th
    value, the values beyond it and the first (lowest-index) ties fill ``k``, and only those are
    sorted, stably, as the full sort would order them (52 -> ~10 us at 60 of 2304)."""
    n = flat.shape[0]
    kth = np.partition(flat, n - k if largest else k - 1)[n - k if largest else k - 1]
    beyond = np.flatnonzero(flat > kth if largest else flat < kth)
    candidates = np.sort(np.concatenate([beyond, np.flatnonzero(flat == kth)[:k - beyond.size]]))
    if largest:     # the reversed candidates sorted stably, read backwards: ties keep the lower index first
        return candidates[::-1][np.argsort(flat[candidates[::-1]], kind="stable")][::-1]
    return candidates[np.argsort(flat[candidates], kind="stable")]


def _one_int(value: np.ndarray, op: str, what: str) -> int:
    """The int held by a run-time argument (a 0-d or one-element int tensor)."""
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ShapeError(f"{op}: {what} must be one int, got {value.dtype} of shape {value.shape}")
    return int(value.reshape(()))


@register_kernel("cumsum")
def cumsum(x, *axis_value, out, axis, exclusive, reverse):
    """Cumulative sum along ``axis`` (or the 0-d tensor ``axis_value``, when
    it is known only at run time); ``exclusive`` leaves out the element
    itself (the first sum is 0), ``reverse`` sums from the end."""
    if axis_value:
        axis = _one_int(axis_value[0], "cumsum", "axis")
    accumulate_into(np.cumsum, 0, x, out, normalize_axis(axis, x.ndim), exclusive, reverse)


@register_kernel("one_hot")
def one_hot(indices, values, *, out, depth, axis):
    """ONNX OneHot: ``values[1]`` where the position along ``axis`` equals the
    index, ``values[0]`` elsewhere. Negative indices count from ``depth``;
    indices still out of range give a row of ``values[0]``; float indices
    are truncated to int64 first."""
    if values.size != 2:
        raise ShapeError(f"one_hot: values must hold [off_value, on_value], got shape {values.shape}")
    ax = normalize_axis(axis, indices.ndim + 1)
    idx = indices.astype(np.int64) if indices.dtype != np.int64 else indices
    idx = np.where(idx < 0, idx + depth, idx)
    positions = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - ax))
    hot = np.expand_dims(idx, ax) == positions
    flat = values.reshape(2)
    out[...] = flat[0]
    np.copyto(out, flat[1], where=hot)


@register_kernel("trilu")
def trilu(x, *k_value, out, upper, k):
    """``numpy.triu(x, k)`` (``upper``) or ``numpy.tril(x, k)`` on the last
    two dims; the other elements become zero (False, or "" for strings).
    ``k_value``, a 0-d tensor, gives ``k`` when it is known only at run time."""
    if k_value:
        k = _one_int(k_value[0], "trilu", "k")
    rows, cols = x.shape[-2:]
    # tri(.., k) is True on and below diagonal k: what tril keeps, triu zeroes at k - 1
    drop = np.tri(rows, cols, k - 1, dtype=bool) if upper else ~np.tri(rows, cols, k, dtype=bool)
    np.copyto(out, x)
    out[..., drop] = "" if out.dtype == object else 0


def range_length(start, limit, delta) -> int:
    """The number of values of ``range(start, limit, delta)``: exact for ints,
    ``ceil((limit - start) / delta)`` in float64 otherwise."""
    if delta == 0:
        raise ShapeError(f"range: delta must not be 0 (start {start}, limit {limit})")
    if all(isinstance(v, (int, np.integer)) for v in (start, limit, delta)):
        count = max(-((int(start) - int(limit)) // int(delta)), 0)
    else:
        span = (float(limit) - float(start)) / float(delta)
        if not math.isfinite(span):
            raise ShapeError(f"range: start {start}, limit {limit}, delta {delta} give no finite number of values")
        count = max(math.ceil(span), 0)
    if count > 1 << 48:
        raise ShapeError(f"range: start {start}, limit {limit}, delta {delta} give {count:.3g} values, "
                         f"more than any tensor can hold (2**48)")
    return count


@register_kernel("range")
def range_(start, limit, delta, *, out, dtype):
    """``start + i * delta`` for ``i`` in ``range(len(out))``; the bounds are
    Python numbers (symbolic dims evaluated by the VM). Ints compute in
    int64, floats in float64, rounded once to ``out``'s dtype."""
    count = range_length(start, limit, delta)
    if all(isinstance(v, (int, np.integer)) for v in (start, limit, delta)):
        start, delta = int(start), int(delta)
        if max(abs(start), abs(start + count * delta)) < 1 << 62:
            values = np.arange(start, start + count * delta, delta, dtype=np.int64)    # one call
        else:
            values = start + delta * np.arange(count, dtype=np.int64)
    else:
        values = float(start) + float(delta) * np.arange(count, dtype=np.float64)
    if count != out.shape[0]:
        raise ShapeError(f"range: start {start}, limit {limit}, delta {delta} give {count} values, "
                         f"but the output has {out.shape[0]}")
    np.copyto(out, values, casting="unsafe")


#: per instruction, the values of at most this many ranges are kept, each of at most RANGE_KEEP_SIZE
RANGE_KEEP = 16
RANGE_KEEP_SIZE = 4096


def _specialize_range(attrs: dict, constant: tuple):
    """Per instruction: the values of the last few small ranges kept by their bounds (with their
    types: ``range(1, 5)`` and ``range(1.0, 5.0)`` compute differently), copied into ``out`` on a
    repeat: a sequence's positions are the same range every run, and working it out (bounds
    checks, ``arange``, the cast) cost ~3 us of a T5 or llama step."""
    dtype, kept = attrs["dtype"], {}

    def call(start, limit, delta, *, out, workspace=None):
        key = (start.__class__, start, limit.__class__, limit, delta.__class__, delta)
        values = kept.get(key)
        if values is not None and values.shape == out.shape and values.dtype == out.dtype:
            np.copyto(out, values)
            return
        range_(start, limit, delta, out=out, dtype=dtype)
        if out.ndim == 1 and out.size <= RANGE_KEEP_SIZE:
            keep(kept, key, out.copy(), RANGE_KEEP)
    return call


range_.specialize_attrs = _specialize_range


@register_kernel("tile")
def tile(x, *, out, repeats):
    """numpy tile: ``x`` repeated ``repeats[i]`` times along each axis ``i``."""
    repeats = tuple(int(r) for r in repeats)
    # out viewed as (r0, d0, r1, d1, ...) is x broadcast along the r axes
    spread = tuple(v for d, r in zip(x.shape, repeats) for v in (r, d))
    if out.flags.c_contiguous:      # then reshape gives a view of out
        np.copyto(out.reshape(spread), x.reshape(tuple(v for d in x.shape for v in (1, d))))
    else:
        np.copyto(out, np.tile(x, repeats))


@register_packed("nonzero")
def nonzero(x):
    """The indices of the nonzero elements, shape ``(ndim, nnz)``, int64, in
    row-major order. A 0-d input gives ``(0, 1)`` or ``(0, 0)``, as the
    ONNX reference does."""
    x = np.asarray(x)
    if x.ndim == 0:
        return np.empty((0, int(np.count_nonzero(x))), np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)
