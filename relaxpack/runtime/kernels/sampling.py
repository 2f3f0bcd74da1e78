"""Sampling kernels: image.grid_sample, image.roi_align, image.max_roi_pool, nn.deform_conv.

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
from . import roi_cropped, roi_separable
from ._math import pads, per_spatial, upcast, work_dtype
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
def grid_sample(data, grid, *, out, method, padding_mode, align_corners):
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


# ---------------------------------------------------------------- image.roi_align

#: elements of the per-chunk gathers of roi_align (bounds the temporaries)
_ROI_CHUNK_ELEMENTS = 1 << 24


def _roi_axis(start: np.ndarray, length: np.ndarray, grid: np.ndarray, bins: int, size, most: int):
    """For one axis of every box: the two taps and their weights of each
    sample point, ``(R, bins, most, 2)``. Bin ``b`` of a box has ``grid``
    points at ``start + (b + (i + 0.5) / grid) * length / bins``; points
    past ``grid`` (other boxes have more) and points more than a pixel
    outside the image weigh nothing; the rest are clamped into it. ``size``
    is the axis's length, or an int64 ``(R, 1, 1)`` array of one per row
    (:func:`_roi_axes` does both axes in one go)."""
    p, used, sampled = roi_separable.sample_points(start, length, grid, bins, size, most)
    p = np.maximum(p, 0)
    low = np.trunc(p).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    p = np.where(edge, low.astype(p.dtype), p)
    frac = p - low
    weights = np.empty(frac.shape + (2,), frac.dtype)
    np.subtract(1, frac, out=weights[..., 0])
    weights[..., 1] = frac
    weights *= used[..., None]
    taps = np.empty(low.shape + (2,), low.dtype)
    taps[..., 0] = low
    np.add(low, 1, out=taps[..., 1])
    np.copyto(taps[..., 1], low, where=edge)
    return taps, weights, sampled


def _axis_matrices(y0, h, grid_h, x0, w, grid_w, output_size, height: int, width: int, most_h: int,
                   most_w: int) -> tuple:
    """The separable method's ``(R, out_h, height)`` and ``(R, out_w, width)`` weights: by the
    points' hat functions where their array is small (:data:`.roi_separable.HAT_MAX_VALUES`), in
    one call on the boxes' y and x rows stacked when both axes have as many bins and points (as
    :func:`_roi_axes`; a row's pixels past its own axis weigh 0: its points are clamped below its
    last), else from the taps of :func:`_roi_axes`, summed by pixel; in the boxes' dtype either way
    (the taps' weights are float64, widened by their integer taps: the products then ran in float64
    on float32 data, a dgemm where an sgemm does, 1.5-2x the time)."""
    out_h, out_w = output_size
    count, longest = len(y0), max(height, width)
    if out_h == out_w and most_h == most_w and 2 * count * out_h * most_h * longest <= roi_separable.HAT_MAX_VALUES:
        starts, lengths, grids, sizes = _stacked(y0, h, grid_h, x0, w, grid_w, height, width)
        both = roi_separable.hat_matrix(starts, lengths, grids, out_h, sizes, most_h, longest)
        return both[:count, :, :height], both[count:, :, :width]
    if count * (out_h * most_h * height + out_w * most_w * width) <= roi_separable.HAT_MAX_VALUES:
        return (roi_separable.hat_matrix(y0, h, grid_h, out_h, height, most_h, height),
                roi_separable.hat_matrix(x0, w, grid_w, out_w, width, most_w, width))
    (ytaps, yw, _), (xtaps, xw, _) = _roi_axes(y0, h, grid_h, x0, w, grid_w, output_size, height, width,
                                              most_h, most_w)
    return (roi_separable.axis_matrix(ytaps, yw, height).astype(y0.dtype, copy=False),
            roi_separable.axis_matrix(xtaps, xw, width).astype(x0.dtype, copy=False))


def _roi_axes(y0, h, grid_h, x0, w, grid_w, output_size, height: int, width: int, most_h: int, most_w: int):
    """:func:`_roi_axis` of the y and then the x axis of every box: when both have as many bins and
    sample points, one call on the boxes' y and x rows stacked (each step a numpy call on both: a
    detection head's few boxes make every call ~1 us of overhead; the same values element for
    element, the comparisons with the per-row length exact in either precision)."""
    out_h, out_w = output_size
    if out_h != out_w or most_h != most_w:
        return _roi_axis(y0, h, grid_h, out_h, height, most_h), _roi_axis(x0, w, grid_w, out_w, width, most_w)
    count = len(y0)
    starts, lengths, grids, sizes = _stacked(y0, h, grid_h, x0, w, grid_w, height, width)
    taps, weights, used = _roi_axis(starts, lengths, grids, out_h, sizes, most_h)
    return (taps[:count], weights[:count], used[:count]), (taps[count:], weights[count:], used[count:])


def _stacked(y0, h, grid_h, x0, w, grid_w, height: int, width: int) -> tuple:
    """The boxes' y rows above their x rows: starts, lengths, grids, and each row's axis length as
    an int64 ``(2R, 1, 1)`` array (the stacked calls of :func:`_roi_axes` and
    :func:`_axis_matrices`)."""
    sizes = np.repeat(np.array([height, width], np.int64), len(y0)).reshape(-1, 1, 1)
    return np.concatenate([y0, x0]), np.concatenate([h, w]), np.concatenate([grid_h, grid_w]), sizes


def _roi_boxes(rois: np.ndarray, out_h: int, out_w: int, sampling_ratio: int, spatial_scale: float,
               half_pixel: bool):
    """Per box: start and extent along y and x, and the sample grid sizes."""
    offset = rois.dtype.type(0.5 if half_pixel else 0.0)
    scaled = rois * rois.dtype.type(spatial_scale) - offset
    x0, y0, x1, y1 = scaled.T
    width, height = x1 - x0, y1 - y0
    if not half_pixel:
        width, height = np.maximum(width, 1), np.maximum(height, 1)
    if sampling_ratio > 0:
        grid_h = grid_w = np.full(len(rois), sampling_ratio, np.int64)
    else:
        grid_h = np.maximum(np.ceil(height / out_h), 0).astype(np.int64)
        grid_w = np.maximum(np.ceil(width / out_w), 0).astype(np.int64)
    return y0, height, grid_h, x0, width, grid_w


def _average_method(mode: str, count: int, channels: int, height: int, width: int, out_h: int, out_w: int,
                    most_h: int, most_w: int, h: np.ndarray, w: np.ndarray, images: int) -> str | None:
    """How an average RoiAlign runs: ``"cropped"`` (two products per box on its window,
    :mod:`.roi_cropped`), ``"dense"`` (two products per box on the whole map, :mod:`.roi_separable`)
    or None (the gather), by their estimated costs; a box's window estimated as its extent plus a
    pixel of bilinear reach at each end; ``images`` maps at most copied channels last."""
    if mode != "avg":
        return None
    gathered = roi_separable.DENSE_PER_GATHERED * count * out_h * out_w * most_h * most_w * 4 * channels
    dense = roi_separable.dense_cost(count, channels, height, width, out_h, out_w)
    best = min(dense, gathered)
    if roi_cropped.BOX_CALL_PRODUCTS * count < best:      # (else its calls alone cost more: not estimated)
        rows = np.clip(np.ceil(np.nan_to_num(h, nan=height)) + 2, 1, height).astype(np.int64)
        cols = np.clip(np.ceil(np.nan_to_num(w, nan=width)) + 2, 1, width).astype(np.int64)
        if roi_cropped.cost(rows, cols, channels, out_h, out_w, images, height * width) < best:
            return "cropped"
    return "dense" if dense <= gathered else None


@register_kernel("image.roi_align")
def roi_align(data, rois, batch_indices, *, out, output_size, sampling_ratio, spatial_scale, mode,
              coordinate_transformation_mode):
    """RoiAlign: average (or max) of bilinear samples on a grid in each bin of each box.

    Max mode takes, per sample, the largest of the four weighted corner
    values (not the interpolated value), as onnxruntime and onnx's
    reference do. The average is two matrix products per box where they
    cost less than the gather (:mod:`.roi_separable`).
    """
    out_h, out_w = output_size
    count = rois.shape[0]
    _, channels, height, width = data.shape
    if rois.shape != (count, 4) or batch_indices.shape != (count,) or out.shape != (count, channels, out_h, out_w):
        raise ShapeError(f"image.roi_align: rois {rois.shape}, batch_indices {batch_indices.shape} and output "
                         f"{out.shape} do not fit data {data.shape}")
    if out.size == 0:
        return
    if height == 0 or width == 0:
        raise ShapeError(f"image.roi_align: cannot sample boxes of the empty image {data.shape}")
    if np.any((batch_indices < 0) | (batch_indices >= data.shape[0])):
        raise ShapeError(f"image.roi_align: batch_indices {batch_indices.tolist()} out of range for "
                         f"{data.shape[0]} images")
    dtype = np.float64 if np.float64 in (data.dtype, rois.dtype) else np.float32
    y0, h, grid_h, x0, w, grid_w = _roi_boxes(rois.astype(dtype), out_h, out_w, sampling_ratio, spatial_scale,
                                              coordinate_transformation_mode == "half_pixel")
    most_h, most_w = max(int(grid_h.max()), 1), max(int(grid_w.max()), 1)
    method = _average_method(mode, count, channels, height, width, out_h, out_w, most_h, most_w, h, w,
                             data.shape[0])
    # (the whole-map products would spread a non-finite value anywhere in a map to all its boxes;
    # the windows' to their own box, which then has one in its output: the gather redoes them)
    if method == "cropped" or (method == "dense" and np.isfinite(data).all()):
        ay, ax = _axis_matrices(y0, h, grid_h, x0, w, grid_w, output_size, height, width, most_h, most_w)
        samples = np.maximum(grid_h * grid_w, 1)
        if method == "dense":
            roi_separable.roi_average(data, batch_indices, ay, ax, samples, dtype, out)
            return
        ylo, yhi = roi_cropped.spans(ay)
        xlo, xhi = roi_cropped.spans(ax)
        if roi_cropped.roi_average(data, batch_indices, ay, ax, samples, dtype, out, (ylo, yhi, xlo, xhi)):
            return
    (ytaps, yw, yused), (xtaps, xw, xused) = _roi_axes(y0, h, grid_h, x0, w, grid_w, output_size, height, width,
                                                       most_h, most_w)
    table = data.transpose(0, 2, 3, 1)                       # (N, H, W, C): one gather reads all channels
    per_box = out_h * out_w * ytaps.shape[2] * xtaps.shape[2] * 4 * channels
    chunk = max(1, _ROI_CHUNK_ELEMENTS // max(per_box, 1))
    for lo in range(0, count, chunk):
        box = slice(lo, lo + chunk)
        n = len(range(*box.indices(count)))
        # (boxes, out_h, grid, 2, out_w, grid, 2, C)
        rows = ytaps[box][:, :, :, :, None, None, None]
        cols = xtaps[box][:, None, None, None, :, :, :]
        values = table[batch_indices[box].reshape(n, 1, 1, 1, 1, 1, 1), rows, cols].astype(dtype, copy=False)
        weight = yw[box][:, :, :, :, None, None, None] * xw[box][:, None, None, None, :, :, :]
        terms = values * weight[..., None]
        if mode == "avg":
            total = terms.sum(axis=(2, 3, 5, 6))
            result = total / np.maximum(grid_h[box] * grid_w[box], 1).astype(dtype)[:, None, None, None]
        else:
            used = yused[box][:, :, :, None, None, None, None] & xused[box][:, None, None, None, :, :, None]
            best = np.where(used[..., None], terms, -np.inf).max(axis=(2, 3, 5, 6))
            result = np.where(np.isneginf(best) & ~used.any(axis=(2, 3, 5, 6))[..., None], 0, best)
        np.copyto(out[box], result.transpose(0, 3, 1, 2), casting="unsafe")


# ---------------------------------------------------------------- image.max_roi_pool

#: elements of the per-chunk masked maxima of max_roi_pool (bounds the temporaries)
_POOL_CHUNK_ELEMENTS = 1 << 24


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's ``round``: halves go away from zero (numpy's ``round`` goes to even)."""
    return (np.sign(x) * np.floor(np.abs(x) + x.dtype.type(0.5))).astype(np.int64)


def _pool_bins(start: np.ndarray, end: np.ndarray, bins: int, size: int, dtype) -> np.ndarray:
    """For one axis of every box: a mask ``(R, bins, size)`` of the pixels
    in each bin. A box spans ``end - start + 1`` pixels (at least 1), cut in
    ``bins`` bins of fractional size; bin ``b`` covers
    ``[floor(b * step), ceil((b + 1) * step))`` from ``start``, clipped to
    the image (onnxruntime's ``RoiPool``, in the rois' precision)."""
    step = (np.maximum(end - start + 1, 1).astype(dtype) / dtype.type(bins))[:, None]
    b = np.arange(bins, dtype=dtype)[None, :]
    lo = np.clip(np.floor(b * step).astype(np.int64) + start[:, None], 0, size)
    hi = np.clip(np.ceil((b + 1) * step).astype(np.int64) + start[:, None], 0, size)
    pixel = np.arange(size)[None, None, :]
    return (lo[..., None] <= pixel) & (pixel < hi[..., None])


@register_kernel("image.max_roi_pool")
def max_roi_pool(data, rois, *, out, pooled_shape, spatial_scale):
    """MaxRoiPool: the max of each bin of each box, 0 for a bin that holds
    no pixel. The bins are pixel masks and the max is separable (over the
    columns of each bin, then its rows), so one masked reduction per axis
    serves every box of a chunk. A bin holding a NaN is NaN, as numpy's and
    torch's max: onnxruntime's running ``x < best ? best : x`` instead
    depends on where the NaN falls in its scan order (a NaN is forgotten
    at the next number)."""
    out_h, out_w = pooled_shape
    count = rois.shape[0]
    batch, channels, height, width = data.shape
    if rois.shape != (count, 5) or out.shape != (count, channels, out_h, out_w):
        raise ShapeError(f"image.max_roi_pool: rois {rois.shape} and output {out.shape} do not fit data "
                         f"{data.shape} and pooled_shape {tuple(pooled_shape)}")
    if out.size == 0:
        return
    if height == 0 or width == 0:
        out.fill(0)                                            # every bin is empty
        return
    dtype = work_dtype(rois.dtype)
    boxes = rois.astype(dtype, copy=False)
    images = boxes[:, 0].astype(np.int64)
    if np.any((images < 0) | (images >= batch)):
        raise ShapeError(f"image.max_roi_pool: batch indices {images.tolist()} (rois[:, 0]) out of range for "
                         f"{batch} images")
    x0, y0, x1, y1 = _round_half_away(boxes[:, 1:] * dtype.type(spatial_scale)).T
    rows = _pool_bins(y0, y1, out_h, height, dtype)            # (R, out_h, H)
    cols = _pool_bins(x0, x1, out_w, width, dtype)             # (R, out_w, W)
    empty = ~rows.any(axis=2)[:, :, None] | ~cols.any(axis=2)[:, None, :]
    table = upcast(data)
    lowest = np.finfo(table.dtype).min                        # onnxruntime starts from -max
    per_box = channels * height * width * max(out_h, out_w)
    chunk = max(1, _POOL_CHUNK_ELEMENTS // max(per_box, 1))
    for lo in range(0, count, chunk):
        box = slice(lo, lo + chunk)
        values = table[images[box]]                                          # (n, C, H, W)
        by_col = np.where(cols[box][:, None, None], values[:, :, :, None], lowest)   # (n, C, H, out_w, W)
        by_col = by_col.max(axis=4)
        by_row = np.where(rows[box][:, None, :, :, None], by_col[:, :, None], lowest)  # (n, C, out_h, H, out_w)
        best = by_row.max(axis=3)
        np.copyto(out[box], np.where(empty[box][:, None], 0, best), casting="unsafe")


# ---------------------------------------------------------------- nn.deform_conv


def _deformed_columns(data, offset, mask, kernel, strides, dilation, begins, out_dims, offset_groups, dtype):
    """im2col of a deformable convolution: ``(N, C, prod(kernel), prod(out))``,
    each column the bilinear sample (zero outside the data) at the tap's
    position moved by its offset, times the mask."""
    batch, channels, *spatial = data.shape
    n, taps, points = len(spatial), math.prod(kernel), math.prod(out_dims)
    per_group = channels // offset_groups
    # offset (N, G, K, n, P): the positions (N, G, K, P) along each spatial dim
    moves = offset.reshape(batch, offset_groups, taps, n, points).astype(dtype, copy=False)
    tap_index = np.indices(kernel).reshape(n, taps)
    out_index = np.indices(out_dims).reshape(n, points)
    tap_list, weight_list, valid_list = [], [], []
    for d in range(n):
        base = out_index[d] * strides[d] - begins[d]                      # (P,)
        where = (base[None, :] + tap_index[d][:, None] * dilation[d]).astype(dtype) + moves[:, :, :, d]
        t, w = axis_taps(where, "linear")
        t, ok = pad_taps(t, spatial[d], "zeros", 0.0, 0.0)
        tap_list.append(t)
        weight_list.append(w)
        valid_list.append(ok)
    # (N * G, S, C / G): one gather reads every channel of an offset group
    table = data.reshape(batch, offset_groups, per_group, -1).transpose(0, 1, 3, 2)
    table = table.reshape(batch * offset_groups, -1, per_group)
    rows = (np.arange(batch)[:, None] * offset_groups + np.arange(offset_groups)[None, :])[:, :, None, None]
    cols = gather_taps(table, rows, tap_list, weight_list, valid_list, tuple(spatial), dtype)  # (N, G, K, P, C/G)
    if mask is not None:
        cols = cols * mask.reshape(batch, offset_groups, taps, points, 1).astype(dtype, copy=False)
    return cols.transpose(0, 1, 4, 2, 3).reshape(batch, channels, taps, points)


@register_kernel("nn.deform_conv")
def deform_conv(data, weight, offset, mask=None, *, out, strides, padding, dilation, groups,
                offset_groups):
    """Deformable convolution (ONNX DeformConv, without the bias): the
    sampled columns of :func:`_deformed_columns`, then one batched matmul
    per group, as an im2col convolution."""
    batch, channels, *spatial = data.shape
    n = len(spatial)
    out_channels, per_group, *kernel = weight.shape
    strides, dilation = per_spatial(strides, n, "strides"), per_spatial(dilation, n, "dilation")
    begins, ends = pads(padding, n)
    out_dims = [(x + b + e - d * (k - 1) - 1) // s + 1
                for x, k, s, d, b, e in zip(spatial, kernel, strides, dilation, begins, ends)]
    taps = math.prod(kernel)
    if (channels != groups * per_group or out_channels % groups or channels % offset_groups
            or offset.shape != (batch, offset_groups * taps * n, *out_dims)
            or (mask is not None and mask.shape != (batch, offset_groups * taps, *out_dims))
            or out.shape != (batch, out_channels, *out_dims)):
        raise ShapeError(f"nn.deform_conv: data {data.shape}, weight {weight.shape}, offset {offset.shape}"
                         f"{'' if mask is None else f', mask {mask.shape}'} and output {out.shape} do not fit "
                         f"groups={groups}, offset_groups={offset_groups}")
    if out.size == 0:
        return
    if 0 in spatial:
        out.fill(0)
        return
    dtype = work_dtype(out.dtype)
    cols = _deformed_columns(data, offset, mask, kernel, strides, dilation, begins, out_dims, offset_groups, dtype)
    cols = cols.reshape(batch, groups, per_group * taps, -1)
    w = weight.astype(dtype, copy=False).reshape(groups, out_channels // groups, per_group * taps)
    result = np.matmul(w, cols)                                          # (N, groups, O / groups, P)
    np.copyto(out, result.reshape(out.shape), casting="unsafe")
