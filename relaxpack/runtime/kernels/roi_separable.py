"""RoiAlign's average as two matrix products per box (the fast method of ``image.roi_align``).

A sample's four bilinear weights are products of a weight along y and one
along x, so the average of a bin is ``sum_y sum_x A[y] B[x] data[y, x] /
count``, where ``A[y]`` (``B[x]``) sums the y (x) weights that row (column)
gets from the bin's samples. For every box that is ``A (out_h, H) @ data
(H, C*W)``, then ``(C, W) @ B^T (W, out_w)``: GEMMs over the whole feature
map instead of a fancy-indexed gather of ``out_h*out_w*grid_h*grid_w*4``
values per channel, which costs ~10x more per value. The gather stays where
it moves fewer values (large maps, many small boxes) and for max mode (a
max of products does not separate). The sums run in another order than the
reference's per-sample ones (the same terms, rounded differently); a
non-finite value anywhere in an image would spread NaN (0 * inf) to every
box of it, so such data takes the gather.
"""

from __future__ import annotations

import numpy as np

from ._workspace import Scratch

#: the GEMMs' multiply-adds may be this many times the gathered values (measured on small maps: a
#: gathered value costs 10-20 multiply-adds of these small products; ``sampling._average_method``)
DENSE_PER_GATHERED = 8


#: the most values of the hat functions' ``(R, bins, points, size)`` array (:func:`hat_matrix`); past
#: it the taps are summed by pixel (:func:`axis_matrix`)
HAT_MAX_VALUES = 1 << 16
#: up to this many sample points per bin :func:`hat_matrix` adds them one by one
_ADDED_POINTS = 4


def sample_points(start: np.ndarray, length: np.ndarray, grid: np.ndarray, bins: int, size, most: int):
    """``(p, used, sampled)``, each ``(R, bins, most)``, for one axis of every box: bin ``b`` of a
    box has ``grid`` points at ``start + (b + (i + 0.5) / grid) * length / bins``; ``sampled`` marks
    the first ``grid`` (other boxes have more), ``used`` those of them at most a pixel outside the
    image (``size``: the axis's length, or an int64 ``(R, 1, 1)`` array of one per row)."""
    step = (length / bins)[:, None, None]
    i = np.arange(most, dtype=start.dtype)[None, None, :]
    b = np.arange(bins, dtype=start.dtype)[None, :, None]
    p = start[:, None, None] + b * step + (i + 0.5) * step / np.maximum(grid, 1).astype(start.dtype)[:, None, None]
    sampled = i < grid[:, None, None]
    return p, sampled & (p >= -1) & (p <= size), sampled


def hat_matrix(start: np.ndarray, length: np.ndarray, grid: np.ndarray, bins: int, size, most: int,
               pixels: int) -> np.ndarray:
    """``(R, bins, pixels)``: per box and bin, the summed bilinear weight of each pixel along one
    axis over the bin's used sample points (:func:`sample_points`; ``size`` the axis's length or
    an int64 ``(R, 1, 1)`` array of one per row, ``pixels`` at least the longest). A point clamped
    into ``[0, size - 1]`` (the reference's: below 0 it is 0, from ``size - 1`` on it is the last
    pixel) gives pixel ``y`` the hat ``max(0, 1 - |p - y|)``: ``1 - frac`` and ``frac`` on its two
    pixels, as the taps' weights (the far one's ``1 - |p - y|`` may differ from ``frac`` in its last
    bit), 0 past the row's own length. ~12 calls on ``R * bins * most * pixels`` values, where the
    taps and their sum by pixel take ~30 on a few."""
    p, used, _ = sample_points(start, length, grid, bins, size, most)
    np.maximum(p, 0, out=p)
    np.minimum(p, size - 1, out=p)
    np.copyto(p, -2, where=~used)                       # an unused point: two pixels before the first
    hat = p[..., None] - np.arange(pixels, dtype=p.dtype)
    np.abs(hat, out=hat)
    np.subtract(1, hat, out=hat)
    np.maximum(hat, 0, out=hat)
    if most > _ADDED_POINTS:
        return hat.sum(axis=2)
    total = hat[:, :, 0].copy()         # a few points: added one by one (a reduction over a middle
    for i in range(1, most):            # axis of a small array costs ~10 us to set up)
        total += hat[:, :, i]
    return total


def axis_matrix(taps: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """``(R, bins, size)``: per box and bin, the summed weight of each pixel along one axis, from
    the ``(R, bins, most, 2)`` taps and weights of its samples (unused ones weigh 0)."""
    count, bins = taps.shape[:2]
    rows = np.arange(count * bins).reshape(count, bins, 1, 1) * size
    summed = np.bincount((rows + taps).ravel(), weights.ravel(), minlength=count * bins * size)
    return summed.astype(weights.dtype, copy=False).reshape(count, bins, size)


def dense_cost(count: int, channels: int, height: int, width: int, out_h: int, out_w: int) -> int:
    """Multiply-adds of the cheaper order (rows first or columns first)."""
    first = count * channels * height * width
    return min(first * out_h + count * out_h * channels * width * out_w,
               first * out_w + count * out_w * channels * height * out_h)


def roi_average(data: np.ndarray, batch_indices: np.ndarray, ay: np.ndarray, ax: np.ndarray,
                count: np.ndarray, dtype, out: np.ndarray) -> None:
    """``out (R, C, out_h, out_w)``: the averages of ``data (N, C, H, W)`` (finite) with the per-box
    axis matrices ``ay (R, out_h, H)`` and ``ax (R, out_w, W)`` over ``count`` samples per bin,
    computed in ``dtype``; the intermediates live in the thread's scratch (a detection head's
    are a few hundred KB: fresh arrays each call cost their page faults)."""
    _, channels, height, width = data.shape
    out_h, out_w = ay.shape[1], ax.shape[1]
    divisor = count.astype(dtype).reshape(-1, 1, 1, 1)
    if out_h * width * (height + out_w) <= out_w * height * (width + out_h):
        _rows_first(data, batch_indices, ay, ax, dtype, divisor, out)
    else:       # the same products on the transposed map
        _rows_first(data.swapaxes(2, 3), batch_indices, ax, ay, dtype, divisor, out.swapaxes(2, 3))


def _rows_first(data: np.ndarray, batch_indices: np.ndarray, ay: np.ndarray, ax: np.ndarray, dtype,
                divisor: np.ndarray, out: np.ndarray) -> None:
    """``A @ data`` per box (one GEMM per image: its boxes' rows stacked), then ``@ B^T``, divided
    into ``out``."""
    _, channels, height, width = data.shape
    count, out_h = ay.shape[:2]
    out_w = ax.shape[1]
    with Scratch([((count, out_h, channels, width), dtype), ((count, out_h * channels, out_w), dtype)]) \
            as (rows, cols):
        one = batch_indices[0] if (batch_indices == batch_indices[0]).all() else None
        for image in (one,) if one is not None else np.unique(batch_indices):
            table = np.ascontiguousarray(data[image].transpose(1, 0, 2), dtype).reshape(height, channels * width)
            if one is not None:
                np.matmul(ay.reshape(count * out_h, height), table,
                          out=rows.reshape(count * out_h, channels * width))
            else:
                mine = batch_indices == image
                rows[mine] = (ay[mine].reshape(-1, height) @ table).reshape(-1, out_h, channels, width)
        # one product per box, (out_h * C, W) @ (W, out_w) (per box and channel they would be many tiny
        # ones); B^T made contiguous: numpy's batched matmul took a transposed operand ~1.3x slower
        np.matmul(rows.reshape(count, out_h * channels, width), np.ascontiguousarray(ax.transpose(0, 2, 1)),
                  out=cols)
        # divided in place, then moved to out's layout: a divide writing through the transpose is
        # ~1.4x the two (the same quotients, rounded to out's dtype once as before)
        averages = cols.reshape(count, out_h, channels, out_w)
        np.divide(averages, divisor, out=averages)
        np.copyto(out, averages.transpose(0, 2, 1, 3), casting="unsafe")
