"""RoiAlign's average by two products per box on the box's own window of the feature map.

:mod:`.roi_separable` multiplies every box's axis matrices ``A (out_h, H)`` and ``B (out_w, W)``
with the whole map: right for a few boxes on a small map, but a detector's RoI heads pool
hundreds of boxes a few pixels wide from maps of thousands of pixels, where almost all of
those products are by zeros. Here each box takes only the rows and columns its weights reach
(``A``'s and ``B``'s nonzero span): ``A_c (out_h, h) @ window (h, w * C)``, then
``B_c (out_w, w) @ (w, C)`` per output row, divided by the bin's sample count. A few numpy
calls per box, so it pays from a few dozen boxes on; the same terms as the whole-map products
(the zeros left out), summed in another order.
"""

from __future__ import annotations

import numpy as np

from ..fpstate import quiet

#: a box's numpy calls and views cost about as much as this many multiply-adds of its products
#: (measured: ~6 us a box against ~40 multiply-adds a ns)
BOX_CALL_PRODUCTS = 240_000
#: a value copied channels last (the map's, or a box window's) costs about this many multiply-adds
#: (0.5-0.8 ns a value)
COPY_PRODUCTS = 30


def spans(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``: per box of ``matrix (R, bins, size)``, the first and one past the last pixel
    any bin weighs (``lo == hi`` for a box that weighs none)."""
    used = matrix.any(axis=1)                                   # (R, size)
    size = used.shape[1]
    lo = used.argmax(axis=1)
    hi = size - used[:, ::-1].argmax(axis=1)
    none = ~used.any(axis=1)
    lo[none] = 0
    hi[none] = 0
    return lo, hi


def copied_values(heights, widths, channels: int, images: int, map_pixels: int) -> tuple[int, bool]:
    """``(values, by_window)``: the values the method copies channels last, and whether it copies
    each box's window (fewer values than its images' whole maps) rather than the maps."""
    windows = channels * int((np.asarray(heights, np.int64) * np.asarray(widths, np.int64)).sum())
    maps = channels * images * map_pixels
    return min(windows, maps), windows < maps


def cost(heights, widths, channels: int, out_h: int, out_w: int, images: int, map_pixels: int) -> int:
    """The method's multiply-adds for boxes of windows ``heights`` x ``widths`` pixels, with its
    per-box calls (:data:`BOX_CALL_PRODUCTS`) and its copies (:data:`COPY_PRODUCTS` a value)."""
    h, w = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
    products = int((channels * (out_h * h * w + out_h * out_w * w)).sum())
    copied, _ = copied_values(h, w, channels, images, map_pixels)
    return products + BOX_CALL_PRODUCTS * len(h) + COPY_PRODUCTS * copied


def roi_average(data: np.ndarray, batch_indices: np.ndarray, ay: np.ndarray, ax: np.ndarray,
                count: np.ndarray, dtype, out: np.ndarray, bounds: tuple) -> bool:
    """``out (R, C, out_h, out_w)``: the averages of ``data (N, C, H, W)`` (finite) with the per-box
    axis matrices ``ay (R, out_h, H)`` and ``ax (R, out_w, W)`` over ``count`` samples per bin, in
    ``dtype``, each box on its window ``bounds = (ylo, yhi, xlo, xhi)`` (:func:`spans`). The window
    is read channels last, from its image's map copied so once, or copied alone where the boxes'
    windows hold fewer values than their maps (a few boxes on a large map). The division by the
    count is taken into ``ay`` first (one call for every box), and the second product of each output
    row, ``(C, w) @ B_c^T``, is written straight into ``out``'s ``(C, out_w)`` plane of that row when
    ``out`` has ``dtype`` (else through a buffer).

    Returns False when an output is not finite: a non-finite value in a window reaches every bin
    of its box (``0 * inf`` is NaN), where the reference's samples may not read it, so the caller
    redoes the call by the gather (as a sum of the outputs that overflows does, rightly or not)."""
    _, channels, height, width = data.shape
    out_h, out_w = ay.shape[1], ax.shape[1]
    ylo, yhi, xlo, xhi = bounds
    images = len(np.unique(batch_indices))
    _, by_window = copied_values(yhi - ylo, xhi - xlo, channels, images, height * width)
    tables = {}                 # image -> its map channels last as (H, W * C) rows, in dtype
    longest = int((xhi - xlo).max(initial=0))
    first = np.empty(out_h * longest * channels, dtype)        # A_c @ window, (out_h, w * C)
    window_buffer = np.empty(int(((yhi - ylo) * (xhi - xlo)).max(initial=0)) * channels, dtype) if by_window \
        else None
    direct = out.dtype == dtype
    result = None if direct else np.empty((out_h, channels, out_w), dtype)
    scaled = ay / count.astype(dtype)[:, None, None]
    dot, matmul, copy = np.dot, np.matmul, np.copyto
    with quiet():           # (a non-finite window: its NaN is the signal, not a warning)
        for r, (image, y0, y1, x0, x1) in enumerate(zip(batch_indices.tolist(), ylo.tolist(), yhi.tolist(),
                                                        xlo.tolist(), xhi.tolist())):
            target = out[r].transpose(1, 0, 2)                      # (out_h, C, out_w)
            if y0 == y1 or x0 == x1:
                target[...] = 0                                     # no bin weighs any pixel
                continue
            w = x1 - x0
            if by_window:
                window = window_buffer[:(y1 - y0) * w * channels].reshape(y1 - y0, w, channels)
                copy(window, data[image, :, y0:y1, x0:x1].transpose(1, 2, 0), casting="unsafe")
                window = window.reshape(y1 - y0, w * channels)
            else:
                table = tables.get(image)
                if table is None:
                    table = tables[image] = np.ascontiguousarray(data[image].transpose(1, 2, 0), dtype).reshape(
                        height, width * channels)
                window = table[y0:y1, x0 * channels:x1 * channels]
            rows = first[:out_h * w * channels].reshape(out_h, w * channels)
            dot(scaled[r, :, y0:y1], window, rows)
            planes = rows.reshape(out_h, w, channels).transpose(0, 2, 1)      # (out_h, C, w)
            if direct:
                matmul(planes, ax[r, :, x0:x1].T, out=target)
            else:
                matmul(planes, ax[r, :, x0:x1].T, out=result)
                copy(target, result, casting="unsafe")
    total = np.add.reduce(out.reshape(-1), dtype=np.float32 if out.dtype.itemsize < 4 else None)
    return bool(np.isfinite(total))
