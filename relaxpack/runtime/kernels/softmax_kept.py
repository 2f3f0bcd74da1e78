"""The specialized softmax: the row path on row matrices kept per instruction.

An arena view is the same object run after run, so a softmax instruction keeps its input's row
matrix, the buffers of its row maxes and sums, and the row path's calls bound to them
(:func:`_rowwise_run`, :func:`_shifted_run`); a call on the same arrays makes only the calls. A
model's output is a new array every run: the kept calls then write into its rows. The same calls
on the same values as :func:`.normalization._softmax_into`'s row path, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from .layer_norm_rows import ones_column
from .normalization import (DONE, REDONE, _FEW, _MAX, _ROW_DTYPES, _ROW_SUM_FLOOR, _ROWWISE_SIZE, _general_rows,
                            _block_rows, _least, _nonfinite_rowwise, _redo_low_rows, _softmax_into, _softmax_matrix,
                            _tensor_max, redoes_whole, safe_softmax, softmax, surely_redone_whole)


def specialize_softmax(safe: bool, attrs: dict, constant: tuple):
    """``specialize_attrs`` of ``nn.softmax`` (``safe``: ``nn.safe_softmax``): per instruction, a
    call on the same arrays as the last one that took the float32/float64 row path runs it on the
    kept row matrices (:func:`_softmax_matrix`: the same calls, the same bits) without
    :func:`_softmax_into`'s checks and reshapes (~0.7 us of a ~4.7 us softmax at a few rows).
    Arena views are the same objects run after run; an array owning its memory (a model input or
    output) is never kept. A call on the kept ``x`` into a new array owning its memory (the
    model's output: a new one every run) runs the same kept calls into that array's rows
    (~2.4 us of a ~6 us softmax of one row of three)."""
    if set(attrs) != {"axis"}:
        return lambda x, *, out, workspace=None: (safe_softmax if safe else softmax)(x, out=out, **attrs)
    axis = attrs["axis"]
    # x, out, their row matrices, whether they share memory, rows of one, rowwise run(dst),
    # and the run into a new output's rows (apart from x: ``out`` None then)
    kept: list = [None] * 8

    def call(x, *, out, workspace=None):
        if x is kept[0]:
            if out is kept[1]:
                dst = kept[3]
            elif kept[7] is not None and out.__class__ is np.ndarray and out.base is None \
                    and out.shape == x.shape and out.dtype is kept[2].dtype and out.flags.c_contiguous \
                    and out is not x.base:
                # a new output (owning its memory, so apart from x): its rows, not kept
                dst = out.reshape(kept[2].shape)
            else:
                dst = None
            if dst is not None:
                if safe and kept[5]:
                    np.isfinite(kept[2], dst)   # one value a row: 1, or 0 for what is NaN unguarded
                    return
                run = kept[6] if dst is kept[3] else kept[7]
                done = run(dst) if run is not None else _softmax_matrix(kept[2], dst, kept[4])
                if done is None:
                    done = _softmax_into(x, out, axis)
                if safe and done is REDONE:
                    np.copyto(out, 0, where=np.isnan(out))
                return
        done = _softmax_into(x, out, axis)
        kept[:] = _row_matrices(x, out, axis)
        if safe and done is REDONE:
            np.copyto(out, 0, where=np.isnan(out))
    return call


def _row_matrices(x, out, axis) -> tuple:
    """``(x, out, x's rows, out's rows, whether they share memory, whether a row holds one value,
    run(dst), run into a new output's rows)`` when :func:`_softmax_into` runs the row path on
    them directly (float32/float64, not empty, contiguous, of one shape and dtype, along the last
    axis) and ``x`` does not own its memory (an arena view: a model input is not held past the
    call); ``out``, its rows and the first run None when ``out`` owns its memory (a model
    output, a new array each run); else Nones."""
    if not (x.__class__ is np.ndarray and out.__class__ is np.ndarray and x.base is not None
            and x.ndim and x.size and (axis == -1 or axis == x.ndim - 1)
            and x.shape == out.shape and x.dtype == out.dtype and x.dtype in _ROW_DTYPES
            and x.flags.c_contiguous and out.flags.c_contiguous):
        return (None,) * 8
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    rowwise = _rowwise_run(rows)
    into = rowwise or _shifted_run(rows)
    if out.base is None:
        return x, None, rows, None, False, n == 1, None, into
    shared = bool(np.may_share_memory(x, out))
    return x, out, rows, out.reshape(-1, n), shared, n == 1, rowwise or (None if shared else into), None


def _rowwise_run(rows: np.ndarray):
    """``run(dst)``: :func:`_rowwise_softmax` of these kept rows into ``dst`` (rows of their shape
    and dtype, ``rows`` themselves or apart from them) when :func:`_softmax_matrix` takes it (a
    few rows of more than one value), its row maxes and sums written into buffers kept
    with it (the same reductions and BLAS product, ``out`` given), its finiteness check on a kept
    flat view of the maxes and its calls positional, without the frames around it (~1 us of a
    ~5.5 us softmax at (1, 2, 5, 5)); else None. A row max that is not finite goes to
    :func:`_nonfinite_rowwise` as before. One row of finite values: its max is Python's (the same
    value, see :func:`~._math.python_max`; ~0.8 us less than the reduction) and the max and the
    sum are 0-d views of the kept buffers (a ufunc broadcasting a ``(1, 1)`` operand costs ~0.5 us
    more): the same float operations on the same values. A row with an inf or NaN, or whose sum
    overflows, takes the reduction."""
    count, n = rows.shape
    if n == 1 or count > _FEW or rows.size > _ROWWISE_SIZE:
        return None
    maxes, total = np.empty((count, 1), rows.dtype), np.empty((count, 1), rows.dtype)
    flat, ones = maxes.reshape(-1), ones_column(n, rows.dtype)
    isfinite, subtract, exp, dot, divide = math.isfinite, np.subtract, np.exp, np.dot, np.divide
    one_row = count == 1
    top, whole = (maxes.reshape(()), total.reshape(())) if one_row else (None, None)   # 0-d: no broadcast

    def run(dst):
        if one_row:
            listed = rows.tolist()[0]
            if isfinite(sum(listed)):
                top[()] = max(listed)
                subtract(rows, top, dst)
                exp(dst, dst)
                dot(dst, ones, total)
                divide(dst, whole, dst)
                return DONE
        _MAX(rows, 1, None, maxes, True)
        listed = flat.tolist()
        if not all(map(isfinite, listed)):
            return _nonfinite_rowwise(rows, dst, maxes, listed)
        subtract(rows, maxes, dst)
        exp(dst, dst)
        dot(dst, ones, total)           # each row holds a 1: sums >= 1
        divide(dst, total, dst)
        return DONE
    return run


def _shifted_run(rows: np.ndarray):
    """``run(dst)``: the tensor-shift path of :func:`_softmax_matrix` (rows of more than one value
    past :func:`_rowwise_softmax`'s bounds) on these kept rows into ``dst`` (rows of their shape
    and dtype, apart from them), its row sums written into a kept ``(rows, 1)`` column (the same
    BLAS product as the vector :func:`_shifted_softmax` takes, which numpy hands to the same
    gemv) that the division broadcasts without a ``[:, None]`` view: :func:`_shifted_softmax`'s
    calls, a low row redone by its end (:func:`_redo_low_rows`), ~1.5 us less at (1, 2, 17, 17)."""
    count, n = rows.shape
    if n == 1 or _block_rows(rows) is not None:      # a large tensor runs by blocks (_softmax_matrix)
        return None
    total = np.empty((count, 1), rows.dtype)
    flat, ones = total.reshape(-1), ones_column(n, rows.dtype)
    isfinite, subtract, exp, dot, divide = math.isfinite, np.subtract, np.exp, np.dot, np.divide
    whole = [False]     # the last call redid every row: try surely_redone_whole first

    def run(dst):
        if whole[0]:
            done = surely_redone_whole(rows, dst)
            if done is not None:
                return done
        shift = _tensor_max(rows)
        if not isfinite(shift):
            return _general_rows(rows, dst, _MAX(rows, 1, None, None, True))
        subtract(rows, shift, dst)
        exp(dst, dst)
        dot(dst, ones, total)
        if _least(flat) < _ROW_SUM_FLOOR:
            whole[0] = redoes_whole(rows, flat)
            return _redo_low_rows(rows, dst, dst, flat)
        whole[0] = False
        divide(dst, total, dst)
        return DONE
    return run


__all__ = ["specialize_softmax"]
