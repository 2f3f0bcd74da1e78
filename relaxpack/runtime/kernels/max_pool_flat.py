"""A strided channels-first 2-d max pool on short rows, by passes over whole flattened planes.

The separable max pool of :func:`.nn._max_along` takes, per kernel dim, the max of tap views of
the outputs' rows: on a small plane (ShuffleNet's 3x3/2 pool over 24x31x48) every numpy call
then loops over ``C * out_rows`` rows of a few dozen values, ~20 ns a row (8 us a call where
the same values contiguous take 2). Here each pass runs over whole planes as one flat run
instead: the data are copied once into a buffer padded with the lowest value (padding never
wins), the rows' taps are shifts of that flat buffer by whole rows (results in the rows a plane
straddles are never read), the rows the stride keeps are copied into a second padded buffer
whose column taps are shifts by one value, and the output takes every stride-th column. More
values are compared (every row and column, not every stride-th), but in calls of a few long runs.
The max of the same values: bit for bit the row-tap method's (it picks between equal values
only, and a NaN anywhere in a window propagates either way).
"""

from __future__ import annotations

import numpy as np

#: the flat passes are taken for output rows shorter than this many values (measured, 1 thread,
#: 3x3/2: 24x31x48 29 -> 14 us, 24x61x128 101 -> 71; ResNet's 64x112x112 stem pool about even,
#: 342 -> 328; past that the extra values compared and the buffers' size weigh more)
MAX_ROW = 64


def max_pool_calls(x: np.ndarray, out: np.ndarray, pool, strides, dilation, begins, lengths):
    """The calls ``(fn, args, kwargs)`` of the max pool of channels-first ``x`` (N, C, H, W) into
    ``out`` by flat passes, or None when they do not pay (1-d or 3-d pools, stride 1, long rows, a
    non-contiguous input or output, float16: the row taps' float32 copy)."""
    if x.ndim != 4 or out.ndim != 4 or x.dtype != out.dtype or x.dtype.kind not in "fiu" \
            or (x.dtype.kind == "f" and x.dtype.itemsize < 4) \
            or not (x.flags.c_contiguous and out.flags.c_contiguous):
        return None
    (kh, kw), (sh, sw), (dh, dw), (bh, bw), (mh, mw) = pool, strides, dilation, begins, lengths
    if max(sh, sw) == 1 or mw >= MAX_ROW or not x.size:
        return None
    planes, (h, w) = x.shape[0] * x.shape[1], x.shape[2:]
    hp = max(bh + h, (mh - 1) * sh + (kh - 1) * dh + 1)     # padded rows: the taps' reach
    wp = max(bw + w, (mw - 1) * sw + (kw - 1) * dw + 1)
    lowest = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    rows = np.full((planes, hp, w), lowest, x.dtype)
    cols = np.full((planes * mh, wp), lowest, x.dtype)
    calls = [(np.copyto, (rows[:, bh:bh + h], x.reshape(planes, h, w)), {})]
    row_max = _flat_max(rows.reshape(-1), kh, dh * w, calls)
    kept = np.ndarray((planes, mh, w), x.dtype, row_max, 0, (hp * w * x.itemsize, sh * w * x.itemsize,
                                                              x.itemsize))
    calls.append((np.copyto, (cols.reshape(planes, mh, wp)[:, :, bw:bw + w], kept), {}))
    col_max = _flat_max(cols.reshape(-1), kw, dw, calls)
    picked = np.ndarray((planes * mh, mw), x.dtype, col_max, 0, (wp * x.itemsize, sw * x.itemsize))
    calls.append((np.copyto, (out.reshape(planes * mh, mw), picked), {}))
    return calls


def _flat_max(flat: np.ndarray, taps: int, shift: int, calls: list) -> np.ndarray:
    """The array whose ``[i]`` is the max of ``flat[i + t * shift]`` over ``t < taps``, for every
    ``i`` all taps reach (``flat`` itself for one tap); its calls appended to ``calls``."""
    if taps == 1:
        return flat
    size = flat.size - (taps - 1) * shift
    target = np.empty(size, flat.dtype)
    calls.append((np.maximum, (flat[:size], flat[shift:shift + size]), {"out": target}))
    for t in range(2, taps):
        calls.append((np.maximum, (target, flat[t * shift:t * shift + size]), {"out": target}))
    return target
