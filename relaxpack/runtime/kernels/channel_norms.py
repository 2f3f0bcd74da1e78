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
