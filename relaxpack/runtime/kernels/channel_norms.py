"""Normalizations with one parameter per channel: inference batch norm, instance norm, LRN."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ._math import commit, load, normalize_axis, upcast
from ._registry import register_kernel
from .layer_norm_rows import row_constants
from .normalization import _normalize_into


def _per_channel(param: np.ndarray, ndim: int, axis: int, dtype) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return upcast(param).astype(dtype, copy=False).reshape(shape)


@register_kernel("nn.batch_norm")
def batch_norm(x, gamma, beta, moving_mean, moving_var, *, out, axis, epsilon):
    """Inference batch norm: ``(x - mean) / sqrt(var + eps) * gamma + beta``
    with one parameter per channel along ``axis``."""
    ax = normalize_axis(axis, x.ndim)
    buf = load(x, out)
    dt = buf.dtype
    scale = upcast(moving_var).astype(dt) + dt.type(epsilon)
    np.sqrt(scale, out=scale)
    np.divide(upcast(gamma).astype(dt, copy=False), scale, out=scale)
    buf -= _per_channel(moving_mean, x.ndim, ax, dt)
    buf *= _per_channel(scale, x.ndim, ax, dt)
    buf += _per_channel(beta, x.ndim, ax, dt)
    commit(buf, out)


@register_kernel("nn.instance_norm")
def instance_norm(x, gamma, beta, *, out, epsilon):
    """Normalize each (sample, channel) of ``(N, C, *spatial)`` over the
    spatial dims, then scale and shift per channel."""
    if x.size == 0:
        return
    if _instance_rows(x, gamma, beta, out):
        _instance_norm_rows(x, gamma, beta, out, epsilon)
        return
    buf = load(x, out)
    _normalize_into(buf, tuple(range(2, x.ndim)), epsilon)
    buf *= _per_channel(gamma, x.ndim, 1, buf.dtype)
    buf += _per_channel(beta, x.ndim, 1, buf.dtype)
    commit(buf, out)


def _instance_rows(x, gamma, beta, out) -> bool:
    """Whether :func:`_instance_norm_rows` applies: float32/float64 throughout, contiguous, with
    spatial dims, one gamma and beta value per channel."""
    dt = out.dtype
    return (x.ndim >= 3 and dt in (np.float32, np.float64) and x.dtype == dt and gamma.dtype == dt
            and beta.dtype == dt and x.flags.c_contiguous and out.flags.c_contiguous
            and gamma.shape == beta.shape == (x.shape[1],) and x.shape == out.shape)


def _instance_norm_rows(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray,
                        epsilon: float) -> None:
    """Instance norm as :func:`_layer_norm_rows` normalizes: each (sample, channel) a row of the
    spatial values, its mean a matrix product, its scale ``sqrt(d) / sqrt(s + d * eps)`` from the
    squares' ``vecdot``; then each row times its scale times its channel's gamma, plus beta. The
    generic path's two ``np.mean`` and four broadcasts cost ~30 us on wav2vec2's first group norm
    (32 channels of 65 frames): ~40 us -> ~8."""
    n, c = x.shape[:2]
    d = x.size // (n * c)
    column, eps_d, root_d = row_constants(d, x.dtype, epsilon)
    rows, dst = x.reshape(n * c, d), out.reshape(n * c, d)
    mean = np.dot(rows, column)
    np.subtract(rows, mean, dst)
    scale = np.vecdot(dst, dst, keepdims=True)
    np.add(scale, eps_d, scale)
    np.sqrt(scale, scale)
    np.divide(root_d, scale, scale)
    per_channel = scale.reshape(n, c)
    np.multiply(per_channel, gamma, per_channel)            # (x - mean) * (s * gamma): as layer norm's rows
    np.multiply(dst, scale, dst)
    planes = dst.reshape(n, c, d)
    np.add(planes, beta.reshape(c, 1), planes)


#: up to this many values a constant beta is added as its tile of the output's shape (kept per
#: instruction): numpy adds a (C, 1) column row by row (~0.9 against ~0.3 us at 16 x 65)
BETA_TILE_MAX_SIZE = 1 << 14


def _specialize_instance_norm(attrs: dict, constant: tuple):
    """Per instruction: a call on the same arrays as the last one that took the row path (arena
    views: the same objects run after run; arrays owning their memory are never kept) runs
    :func:`_instance_norm_rows`' calls on kept views with every operand bound (:func:`_rows_run`),
    without the checks, reshapes and constants' look-up (~1.5 us of wav2vec2's ~8 us group norm)."""
    if set(attrs) != {"epsilon"}:
        return lambda x, gamma, beta, *, out, workspace=None: instance_norm(x, gamma, beta, out=out, **attrs)
    epsilon = attrs["epsilon"]
    constant_beta = len(constant) > 2 and constant[2]
    kept: list = [None] * 5          # x, out, gamma, beta, run()

    def call(x, gamma, beta, *, out, workspace=None):
        if x is kept[0] and out is kept[1] and gamma is kept[2] and beta is kept[3]:
            kept[4]()
            return
        instance_norm(x, gamma, beta, out=out, epsilon=epsilon)
        if (x.__class__ is np.ndarray and out.__class__ is np.ndarray and x.base is not None
                and out.base is not None and x.size and beta.flags.c_contiguous and _instance_rows(x, gamma, beta, out)):
            kept[:] = x, out, gamma, beta, _rows_run(x, gamma, beta, out, epsilon, constant_beta)
        else:
            kept[:] = (None,) * 5
    return call


def _rows_run(x, gamma, beta, out, epsilon: float, constant_beta: bool):
    """``run()``: :func:`_instance_norm_rows` on these arrays, its row means and scales written into
    kept ``(rows, 1)`` columns (``np.dot`` and ``vecdot`` with ``out``: the same BLAS and loop calls as
    their fresh results), beta as the kept view ``(C, 1)`` of its array (new values show through)
    or, a constant, as its tile of the output's shape up to :data:`BETA_TILE_MAX_SIZE` values (a
    column broadcast loops per channel): the same calls on the same values, bit for bit."""
    n, c = x.shape[:2]
    d = x.size // (n * c)
    column, eps_d, root_d = row_constants(d, x.dtype, epsilon)
    rows, dst = x.reshape(n * c, d), out.reshape(n * c, d)
    mean, scale = np.empty((n * c, 1), x.dtype), np.empty((n * c, 1), x.dtype)
    per_channel, planes = scale.reshape(n, c), dst.reshape(n, c, d)
    shift = beta.reshape(c, 1)
    if constant_beta and planes.size <= BETA_TILE_MAX_SIZE:
        shift = np.ascontiguousarray(np.broadcast_to(shift, planes.shape))
    dot, subtract, multiply, add, sqrt, divide, vecdot = np.dot, np.subtract, np.multiply, np.add, np.sqrt, \
        np.divide, np.vecdot

    def run() -> None:
        dot(rows, column, mean)
        subtract(rows, mean, dst)
        vecdot(dst, dst, out=scale, keepdims=True)
        add(scale, eps_d, scale)
        sqrt(scale, scale)
        divide(root_d, scale, scale)
        multiply(per_channel, gamma, per_channel)
        multiply(dst, scale, dst)
        add(planes, shift, planes)
    return run


instance_norm.specialize_attrs = _specialize_instance_norm


@register_kernel("nn.lrn")
def lrn(x, *, out, size, alpha, beta, bias):
    """ONNX LRN: ``x / (bias + alpha / size * sum(x^2 over nearby channels)) ** beta``,
    the window covering channels ``c - floor((size-1)/2) .. c + ceil((size-1)/2)``."""
    if size < 1:
        raise ShapeError(f"nn.lrn: size must be >= 1, got {size}")
    buf = load(x, out)
    channels = x.shape[1]
    square = np.square(buf)
    total = np.zeros_like(buf)
    below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
    for shift in range(-below, above + 1):
        # total[:, c] += square[:, c + shift] where 0 <= c + shift < C
        lo, hi = max(0, -shift), min(channels, channels - shift)
        if lo < hi:
            total[:, lo:hi] += square[:, lo + shift:hi + shift]
    total *= alpha / size
    total += bias
    np.power(total, beta, out=total)
    buf /= total
    commit(buf, out)
