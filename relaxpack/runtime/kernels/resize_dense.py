"""A linear or cubic resize of the last two axes of small planes as matrix products.

A separable resize pass along an axis is a product with a sparse matrix: output
position ``o`` sums its taps' weights times the source positions they read. On a small
plane (Mask R-CNN pastes 28x28 masks into their boxes one at a time, in a Loop) the
planned passes' ten-odd numpy calls (a take, a multiply and an add per tap and axis)
cost ~12 us of a 30x30 -> 23x17 resize, the same passes as two dense GEMMs ~3 us: the
matrices hold each output's summed tap weights (taps clamped onto one source pixel add
up), built once per geometry from the plan's taps. Only for finite data (a zero weight
times inf would spread NaN to the whole row) and source axes of at most
:data:`MAX_SOURCE` pixels (a dense row costs its source width in multiply-adds, the
gather its taps: BLAS's ~40x cheaper multiply-add pays up to a few hundred pixels; the
bar stays well inside). The sums are rounded in another order than the passes' (the same
terms): within float rounding of them, not bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from ._workspace import Scratch

#: the largest source axis (pixels) a dense pass takes
MAX_SOURCE = 128
#: a per-instruction runner (:func:`runner`) keeps an intermediate of at most this many bytes
OWN_BETWEEN_MAX_BYTES = 256 << 10


def build(plan, shape: tuple):
    """``(passes, the first pass's output shape)`` for the planned passes ``plan``
    (``image._interpolation_plan``'s) of data of ``shape``: each ``(axis, shape after it,
    matrix)``, the matrix ``(in, out)`` along the last axis (data @ M), ``(out, in)`` along the
    one before (M @ data); None (the planned passes serve) when a pass is along another axis or
    reads more than :data:`MAX_SOURCE`."""
    if plan is None:
        return None
    passes, _ = plan
    ndim = len(shape)
    if not passes or len(passes) > 2 or any(axis < ndim - 2 for axis, _, _ in passes):
        return None
    current, dense = shape, []
    for axis, after, taps in passes:
        source = current[axis]
        if source > MAX_SOURCE or any(t.size and int(t.max()) >= source for t, _ in taps):
            return None
        rows = np.arange(after[axis])
        matrix = np.zeros((after[axis], source), taps[0][1].dtype)
        for t, weight in taps:
            np.add.at(matrix, (rows, t), weight.reshape(-1))
        if axis == ndim - 1:
            matrix = np.ascontiguousarray(matrix.T)
        matrix.setflags(write=False)
        dense.append((axis, after, matrix))
        current = after
    return tuple(dense), dense[0][1]


def run(dense, data: np.ndarray, out: np.ndarray, between: np.ndarray | None = None) -> bool:
    """``out`` (C-contiguous) from ``data`` by the dense passes (:func:`build`'s, at most two: one
    intermediate, ``between`` when given: an array of :func:`intermediate`'s shape and ``out``'s
    dtype, else the thread's scratch); False (nothing written) when ``data`` holds a non-finite
    value."""
    if not np.isfinite(data).all():
        return False
    if between is not None or len(dense[0]) == 1:
        _passes(dense[0], data, out, between)
        return True
    with Scratch([(dense[1], out.dtype)]) as (scratch,):
        _passes(dense[0], data, out, scratch)
    return True


def intermediate(dense) -> tuple | None:
    """The shape of the first pass's result when there are two passes (None for one)."""
    return dense[1] if len(dense[0]) > 1 else None


def _passes(passes, data: np.ndarray, out: np.ndarray, between) -> None:
    matmul, last = np.matmul, data.ndim - 1
    result = data
    for j, (axis, shape, matrix) in enumerate(passes):
        target = out if j == len(passes) - 1 else between
        if axis == last:
            matmul(result, matrix, out=target)
        else:
            matmul(matrix, result, out=target)
        result = target


def runner(dense, out: np.ndarray, fallback):
    """``run(data)``: :func:`run`'s calls into one instruction's ``out`` (C-contiguous, of the
    passes' dtype) with the matrices, targets and an intermediate of its own (up to
    :data:`OWN_BETWEEN_MAX_BYTES`) bound once, where the kernel works them out and takes the
    thread's scratch every call (~8 us of a 30 us 2x upsample of 8x32x20); data holding a
    non-finite value go to ``fallback(data)`` (the kernel, which then takes its planned passes). The
    same matmul calls, so the same bits. None when the intermediate is larger."""
    passes, first = dense
    between = None
    if len(passes) > 1:
        if math.prod(first) * out.itemsize > OWN_BETWEEN_MAX_BYTES:
            return None
        between = np.empty(first, out.dtype)
    last = out.ndim - 1
    (axis, _, matrix), *rest = passes
    target = out if not rest else between
    data_first = axis == last           # data @ M along the last axis, M @ data along the one before
    second = () if not rest else ((between, rest[0][2]) if rest[0][0] == last else (rest[0][2], between))
    isfinite, matmul = np.isfinite, np.matmul

    def run(data):
        if not isfinite(data).all():
            fallback(data)
            return
        if data_first:
            matmul(data, matrix, out=target)
        else:
            matmul(matrix, data, out=target)
        if second:
            matmul(*second, out=out)
    return run
