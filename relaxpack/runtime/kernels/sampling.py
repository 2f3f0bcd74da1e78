"""Sampling kernels: image.grid_sample, image.roi_align, nn.deform_conv.

Interpolation is separable: for every spatial axis each sample position gets
a few integer taps and their weights (1 nearest, 2 linear, 4 cubic taps), and
the value is the sum over all tap combinations of the product of the
weights times the gathered pixel. The taps and weights are whole arrays
(one per axis), and each tap combination is one fancy-indexing gather over
every sample at once: no Python loop runs per pixel.

The arithmetic follows onnx's reference implementations
(``onnx.reference.ops.op_grid_sample`` / ``op_roi_align`` /
``op_deform_conv``), in float32 (float64 for float64 operands).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...errors import ShapeError
from ._registry import register_kernel

# ---------------------------------------------------------------- taps and weights


def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``x`` reflected at the borders ``lo`` and ``hi`` until it lies between them.

    >>> reflect(np.array([-1.0, 0.5, 4.0]), 0.0, 3.0)
    array([1. , 0.5, 2. ])
    """
    span = hi - lo
    below, above = x < lo, x > hi
    if span <= 0:
        return np.where(below | above, np.asarray(lo, x.dtype), x)
    dx = np.where(below, lo - x, x - hi)
    bounces = np.trunc(dx / span)
    rest = dx - bounces * span
    # an even number of bounces leaves x on the side it left from
    from_lo = below == (bounces % 2 == 0)
    return np.where(below | above, np.where(from_lo, lo + rest, hi - rest), x).astype(x.dtype, copy=False)


def cubic_weights(t: np.ndarray, alpha: float = -0.75) -> np.ndarray:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 for the
    fractional offsets ``t`` in [0, 1): shape ``t.shape + (4,)``."""
    a = alpha
    d = np.stack([t + 1, t, 1 - t, 2 - t], axis=-1)
    near = ((a + 2) * d - (a + 3)) * d * d + 1            # |d| <= 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a       # 1 < |d| < 2
    return np.where(np.arange(4) % 3 == 0, far, near)


def axis_taps(x: np.ndarray, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Integer taps (int64) and weights around the coordinates ``x``, both
    ``x.shape + (k,)``: nearest takes ``x`` itself (already rounded), linear
    floor(x) and the next, cubic the four around floor(x)."""
    if method == "nearest":
        return np.trunc(x).astype(np.int64)[..., None], np.ones(x.shape + (1,), x.dtype)
    base = np.floor(x)
    t = x - base
    base = base.astype(np.int64)[..., None]
    if method == "linear":
        return base + np.arange(2), np.stack([1 - t, t], axis=-1)
    if method == "cubic":
        return base + np.arange(-1, 3), cubic_weights(t).astype(x.dtype, copy=False)
    raise ShapeError(f"unknown interpolation method {method!r}")


def gather_taps(table: np.ndarray, batch: np.ndarray, taps: list[np.ndarray], weights: list[np.ndarray] | None,
                valid: list[np.ndarray], spatial: tuple[int, ...], dtype) -> np.ndarray:
    """The weighted sum over all tap combinations of ``table[batch, flat tap]``.

    ``table`` is ``(B, prod(spatial), C)``; ``taps``, ``weights`` and
    ``valid`` hold one ``(..., k)`` array per spatial axis, broadcastable
    with ``batch``; invalid taps contribute zero; ``weights=None`` gathers
    without weighting (nearest: one tap per axis, any dtype). Returns ``(..., C)``.
    """
    strides = [math.prod(spatial[i + 1:]) for i in range(len(spatial))]
    acc = None
    for combo in itertools.product(*(range(t.shape[-1]) for t in taps)):
        flat = sum(t[..., k] * s for t, k, s in zip(taps, combo, strides))
        ok = np.logical_and.reduce([v[..., k] for v, k in zip(valid, combo)])
        values = table[batch, np.where(ok, flat, 0)].astype(dtype, copy=False)
        if weights is not None:
            values = values * math.prod(w[..., k] for w, k in zip(weights, combo))[..., None]
        # where, not a zero weight: 0 * inf would be nan
        term = np.where(ok[..., None], values, np.zeros((), values.dtype))
        acc = term if acc is None else acc + term
    return acc


def pad_taps(taps: np.ndarray, size: int, padding_mode: str, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Taps resolved by the padding mode, and the mask of those that read
    data (zeros padding reads nothing outside ``[0, size)``)."""
    if padding_mode == "zeros":
        return taps, (taps >= 0) & (taps < size)
    if padding_mode == "border":
        resolved = np.clip(taps, 0, size - 1)
    elif padding_mode == "reflection":
        resolved = np.clip(np.trunc(reflect(taps.astype(np.float64), lo, hi)).astype(np.int64), 0, size - 1)
    else:
        raise ShapeError(f"unknown padding_mode {padding_mode!r}")
    return resolved, np.ones(taps.shape, bool)


# ---------------------------------------------------------------- image.grid_sample


def _grid_coords(g: np.ndarray, size: int, align_corners: bool, method: str, padding_mode: str):
    """Pixel coordinates of the normalized positions ``g`` along an axis of
    ``size``, rounded (nearest) and moved inside by border / reflection
    padding; also the borders reflection uses."""
    lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    x = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
    if method == "nearest":
        x = np.rint(x)      # half to even, as PyTorch
    if padding_mode == "border":
        x = np.where((x < lo) | (x > hi), np.clip(x, 0, size - 1), x)
    elif padding_mode == "reflection":
        x = reflect(x, lo, hi)
    return x.astype(g.dtype, copy=False), lo, hi


@register_kernel("image.grid_sample")
def grid_sample(data, grid, *, out, method="linear", padding_mode="zeros", align_corners=False):
    """Sample ``data (N, C, *spatial)`` at ``grid (N, *out, r)``; ``grid[..., j]``
    is the position along spatial axis ``r - 1 - j`` in [-1, 1]."""
    batch, channels, *spatial = data.shape
    r = len(spatial)
    if grid.shape[0] != batch or grid.shape[-1] != r:
        raise ShapeError(f"image.grid_sample: grid {grid.shape} does not fit data {data.shape}")
    if out.shape != (batch, channels, *grid.shape[1:-1]):
        raise ShapeError(f"image.grid_sample: output buffer {out.shape}, expected "
                         f"{(batch, channels, *grid.shape[1:-1])}")
    if out.size == 0:
        return
    if 0 in spatial:
        if padding_mode != "zeros":
            raise ShapeError(f"image.grid_sample: padding_mode {padding_mode!r} cannot sample the empty "
                             f"data {data.shape}")
        out.fill(0)
        return
    dtype = np.float64 if np.float64 in (data.dtype, grid.dtype) else np.float32
    points = grid.reshape(batch, -1, r).astype(dtype, copy=False)
    taps, weights, valid = [], [], []
    for axis, size in enumerate(spatial):
        x, lo, hi = _grid_coords(points[..., r - 1 - axis], size, bool(align_corners), method, padding_mode)
        t, w = axis_taps(x, method)
        t, ok = pad_taps(t, size, padding_mode, lo, hi)
        taps.append(t)
        weights.append(w)
        valid.append(ok)
    table = data.reshape(batch, channels, -1).transpose(0, 2, 1)
    rows = np.arange(batch)[:, None]
    if method == "nearest":
        acc = gather_taps(table, rows, taps, None, valid, tuple(spatial), data.dtype)   # (N, P, C)
    else:
        acc = gather_taps(table, rows, taps, weights, valid, tuple(spatial), dtype)
    np.copyto(out.reshape(batch, channels, -1), acc.transpose(0, 2, 1), casting="unsafe")
