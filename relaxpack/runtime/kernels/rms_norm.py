"""RMS normalization (``nn.rms_norm``): the unfused chain's steps with its roundings, in one kernel.

FuseRMSNorm's contract (docs/design-notes.md, "Transformers' small chains as one op"): the
result is the chain's bit for bit (power, mean, add, sqrt, reciprocal, two multiplies).
"""

from __future__ import annotations

import functools

import numpy as np

from ..fpstate import quiet
from ._math import commit, scalar_array, scratch, upcast
from ._registry import register_kernel
from .normalization import _ROW_DTYPES
from .tiled_operand import ROW_TILE_MAX_SIZE, tiled


@functools.lru_cache(maxsize=64)
def rms_constants(d: int, dtype, epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The count ``d``, ``epsilon`` and 1 as read-only 0-d arrays of ``dtype``: the values a ufunc
    converts the Python numbers to (NEP 50: weak scalars take the array's dtype), without the
    conversion on every call (~0.3 us each)."""
    return scalar_array(d, dtype), scalar_array(epsilon, dtype), scalar_array(1, dtype)


def _rms_norm_into(x: np.ndarray, scale: np.ndarray, buf: np.ndarray, epsilon: float,
                   times_scale=np.multiply) -> None:
    """``x * (1 / sqrt(mean(x * x) + epsilon)) * scale`` over the last axis into ``buf`` (float32 or
    float64 like ``x``; may be ``x``): the steps of the unfused chain (power, mean, add, sqrt,
    reciprocal, multiply, multiply) with the same roundings and numpy's own pairwise row sums, so
    the result is the chain's bit for bit, in eight ufunc calls with ``out`` positional (the
    chain's kernels cost ~9 us on a few rows of 32, this ~4); its scalars as 0-d arrays
    (:func:`rms_constants`). ``times_scale(buf, scale, buf)`` makes the last multiply (a bound
    scale's: :func:`.tiled_operand.tiled`, the same products)."""
    count, eps, one = rms_constants(x.shape[-1], x.dtype, epsilon)
    inv = np.multiply(x, x)
    inv = np.add.reduce(inv, -1, None, None, True)
    with quiet():       # a row of length 0 is 0 / 0 (NaN, as the mean); a zero row with epsilon 0 is 1 / 0
        np.divide(inv, count, inv)
        np.add(inv, eps, inv)
        np.sqrt(inv, inv)
        np.divide(one, inv, inv)
        np.multiply(x, inv, buf)
        times_scale(buf, scale, buf)


@register_kernel("nn.rms_norm")
def rms_norm(x, scale, *, out, epsilon):
    """RMS normalization over the last axis, scaled (``scale`` broadcasts to ``x``). float16 and
    bfloat16 compute in float32 and round once at the end."""
    if out.dtype == x.dtype and out.dtype in (np.float32, np.float64):
        _rms_norm_into(x, scale, out, epsilon)
        return
    buf = scratch(out)
    _rms_norm_into(upcast(x), upcast(scale), buf, epsilon)
    commit(buf, out)


def _specialize_rms_norm(attrs: dict, constant: tuple):
    """Per instruction: epsilon bound, so a call passes no keyword but ``out``; a bound scale is
    multiplied as its tile of the output's shape (:func:`.tiled_operand.tiled`: a same-shape
    multiply where numpy broadcast a row per call, 0.75 -> 0.25 us at a few rows of 32)."""
    epsilon = attrs["epsilon"]
    if not (len(constant) > 1 and constant[1]):
        return lambda x, scale, *, out, workspace=None: rms_norm(x, scale, out=out, epsilon=epsilon)
    times_scale = tiled(np.multiply, 1, True, ROW_TILE_MAX_SIZE)
    kept: list = [None, None, None, None]       # x, out, scale, the run on them (_kept_run)

    def call(x, scale, *, out, workspace=None):
        if x is kept[0] and out is kept[1] and scale is kept[2]:
            kept[3]()
        elif out.dtype == x.dtype and out.dtype in _ROW_DTYPES:
            _rms_norm_into(x, scale, out, epsilon, times_scale)
            kept[:] = _kept_run(x, scale, out, epsilon, times_scale)
        else:
            rms_norm(x, scale, out=out, epsilon=epsilon)
    return call


def _kept_run(x, scale, out, epsilon: float, times_scale) -> tuple:
    """``(x, out, scale, run)`` for a call on the same arena views (the same objects run after run):
    ``run()`` makes :func:`_rms_norm_into`'s calls into buffers kept with it (the squares, C-order
    as its fresh product is, and the row sums: the same reduction given ``out``), its constants
    bound, without the two allocations and lookups (5.5 -> 3.8 us at (1, 5, 32)); Nones when
    ``x`` or ``out`` owns its memory (a model input or output, not held past the call) or is
    empty."""
    if x.base is None or out.base is None or x.__class__ is not np.ndarray or out.__class__ is not np.ndarray \
            or not x.size or x.shape != out.shape:
        return None, None, None, None
    count, eps, one = rms_constants(x.shape[-1], x.dtype, epsilon)
    squares, inv = np.empty(x.shape, x.dtype), np.empty(x.shape[:-1] + (1,), x.dtype)
    multiply, reduce, divide, add, sqrt = np.multiply, np.add.reduce, np.divide, np.add, np.sqrt

    def run():
        multiply(x, x, squares)
        reduce(squares, -1, None, inv, True)
        with quiet():   # a zero row with epsilon 0 is 1 / 0
            divide(inv, count, inv)
            add(inv, eps, inv)
            sqrt(inv, inv)
            divide(one, inv, inv)
            multiply(x, inv, out)
            times_scale(out, scale, out)
    return x, out, scale, run


rms_norm.specialize_attrs = _specialize_rms_norm
