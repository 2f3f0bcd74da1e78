"""A strided 2-d max pool on short rows or few channels, by passes over whole flattened planes.

The separable max pool of :func:`.nn._max_along` takes, per kernel dim, the max of tap views of
the outputs' rows: on a small plane (ShuffleNet's 3x3/2 pool over 24x31x48) every numpy call
then loops over ``C * out_rows`` rows of a few dozen values, ~20 ns a row (8 us a call where
the same values contiguous take 2). Here each pass runs over whole planes as one flat run
instead: the data are copied once into a buffer padded with the lowest value (padding never
wins), the rows' taps are shifts of that flat buffer by whole rows (results in the rows a plane
straddles are never read), the rows the stride keeps are copied into a second padded buffer
whose column taps are shifts by one value, and the output takes every stride-th column. More
values are compared (every row and column, not every stride-th), but in calls of a few long runs.
The max of the same values, compared in the row-tap method's order (:func:`_tap_order`), so bit
for bit its result: ``np.maximum`` returns its second operand between equal values (+0 and -0),
and the padding's lowest value never changes the running max's bits.

Channels last (:func:`max_pool_calls_channels_last`) a pixel's channels are one short run, and the
row taps' column pass loops over those runs (16 channels: a few dozen values a numpy inner loop);
there the same passes run on the flat buffer with whole padded rows and single pixels as shifts.
"""

from __future__ import annotations

import numpy as np

from .conv_small_nhwc import as_channel_runs, as_row_runs

#: the flat passes are taken for output rows shorter than this many values (measured, 1 thread,
#: 3x3/2: 24x31x48 29 -> 14 us, 24x61x128 101 -> 71; ResNet's 64x112x112 stem pool about even,
#: 342 -> 328; past that the extra values compared and the buffers' size weigh more)
MAX_ROW = 64


def max_pool_calls(x: np.ndarray, out: np.ndarray, pool, strides, dilation, begins, lengths):
    """The calls ``(fn, args, kwargs)`` of the max pool of channels-first ``x`` (N, C, H, W) into
    ``out`` by flat passes, or None when they do not pay (1-d or 3-d pools, stride 1, long rows, a
    non-contiguous input or output, float16: the row taps' float32 copy)."""
    if not _plain(x, out):
        return None
    (kh, kw), (sh, sw), (dh, dw), (bh, bw), (mh, mw) = pool, strides, dilation, begins, lengths
    if max(sh, sw) == 1 or mw >= MAX_ROW or not x.size:
        return None
    planes, (h, w) = x.shape[0] * x.shape[1], x.shape[2:]
    row_taps, col_taps = _tap_order(h, kh, sh, dh, bh, mh), _tap_order(w, kw, sw, dw, bw, mw)
    if row_taps is None or col_taps is None:
        return None
    hp = max(bh + h, (mh - 1) * sh + (kh - 1) * dh + 1)     # padded rows: the taps' reach
    wp = max(bw + w, (mw - 1) * sw + (kw - 1) * dw + 1)
    rows = np.full((planes, hp, w), _lowest(x.dtype), x.dtype)
    cols = np.full((planes * mh, wp), _lowest(x.dtype), x.dtype)
    calls = [(np.copyto, (rows[:, bh:bh + h], x.reshape(planes, h, w)), {})]
    row_max = _flat_max(rows.reshape(-1), [t * dh * w for t in row_taps], calls)
    kept = np.ndarray((planes, mh, w), x.dtype, row_max, 0, (hp * w * x.itemsize, sh * w * x.itemsize,
                                                              x.itemsize))
    calls.append((np.copyto, (cols.reshape(planes, mh, wp)[:, :, bw:bw + w], kept), {}))
    col_max = _flat_max(cols.reshape(-1), [t * dw for t in col_taps], calls)
    picked = np.ndarray((planes * mh, mw), x.dtype, col_max, 0, (wp * x.itemsize, sw * x.itemsize))
    calls.append((np.copyto, (out.reshape(planes * mh, mw), picked), {}))
    return calls


#: the channels-last passes are taken while a pixel's channels span at most this many bytes
#: (measured, 1 thread, float32 3x3/2: 16 channels at 31x48 23.8 -> 13.7 us, at 112x112 156 -> 102,
#: 2x2/2 at 31x48 11.5 -> 9.2; 32 channels at 112x112 198 -> 206 and 2x2/2 at 31x48 15.0 -> 16.4:
#: there the row taps' runs of a pixel's channels are long enough)
MAX_CHANNEL_BYTES = 64


def max_pool_calls_channels_last(x: np.ndarray, out: np.ndarray, pool, strides, dilation, begins, lengths):
    """The calls ``(fn, args, kwargs)`` of the max pool of channels-last ``x`` (N, H, W, C) into
    ``out`` (N, OH, OW, C) by flat passes, or None where they do not pay (a pixel's channels over
    :data:`MAX_CHANNEL_BYTES`, stride 1) or do not apply (as :func:`max_pool_calls`). The data are
    copied once into a buffer of padded rows (lowest value around them); the row taps are shifts of
    it by whole padded rows, the rows the stride keeps are copied out, their column taps are shifts
    by one pixel's channels, and the output takes every stride-th pixel. ``pool`` .. ``lengths``
    are per spatial dim (H, W), as for :func:`max_pool_calls`."""
    if not _plain(x, out):
        return None
    (kh, kw), (sh, sw), (dh, dw), (bh, bw), (mh, mw) = pool, strides, dilation, begins, lengths
    n, h, w, c = x.shape
    if max(sh, sw) == 1 or c * x.itemsize > MAX_CHANNEL_BYTES or not x.size:
        return None
    row_taps, col_taps = _tap_order(h, kh, sh, dh, bh, mh), _tap_order(w, kw, sw, dw, bw, mw)
    if row_taps is None or col_taps is None:
        return None
    hp = max(bh + h, (mh - 1) * sh + (kh - 1) * dh + 1)     # padded rows and pixels: the taps' reach
    wp = max(bw + w, (mw - 1) * sw + (kw - 1) * dw + 1)
    row, item = wp * c, x.itemsize
    padded = np.full((n, hp, row), _lowest(x.dtype), x.dtype)
    kept = np.empty((n, mh, row), x.dtype)
    calls = [(np.copyto, as_row_runs(padded[:, bh:bh + h, bw * c:(bw + w) * c], x.reshape(n, h, w * c), 1), {})]
    row_max = _flat_max(padded.reshape(-1), [t * dh * row for t in row_taps], calls)
    rows = np.ndarray((n, mh, row), x.dtype, row_max, 0, (hp * row * item, sh * row * item, item))
    calls.append((np.copyto, as_row_runs(kept, rows, 1), {}))
    col_max = _flat_max(kept.reshape(-1), [t * dw * c for t in col_taps], calls)
    picked = np.ndarray((n * mh, mw, c), x.dtype, col_max, 0, (row * item, sw * c * item, item))
    calls.append((np.copyto, as_channel_runs(out.reshape(n * mh, mw, c), picked), {}))
    return calls


def _plain(x: np.ndarray, out: np.ndarray) -> bool:
    """2-d pools of contiguous data and output of one dtype the flat passes take (not float16: the
    row taps' float32 copy)."""
    return x.ndim == 4 and out.ndim == 4 and x.dtype == out.dtype and x.dtype.kind in "fiu" \
        and not (x.dtype.kind == "f" and x.dtype.itemsize < 4) and x.flags.c_contiguous and out.flags.c_contiguous


def _lowest(dtype: np.dtype):
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _tap_order(n: int, k: int, s: int, d: int, b: int, m: int) -> list[int] | None:
    """The taps along a dim of ``n`` cells in the order the row-tap method (``nn._max_along``)
    compares them: those every output reads inside the data, then the others; a tap no output
    reads inside the data is left out (it would compare padding only). ``np.maximum`` returns
    its second operand between equal values (+0 and -0), so comparing in that order gives its
    bits, signed zeros and NaN payloads included. None when no tap reads data."""
    full, partial = [], []
    for t in range(k):
        lo = max(0, -(-(b - t * d) // s))
        hi = min(m, (n - 1 - t * d + b) // s + 1)
        if hi > lo:
            (full if (lo, hi) == (0, m) else partial).append(t)
    return full + partial or None


def _flat_max(flat: np.ndarray, shifts: list[int], calls: list) -> np.ndarray:
    """The array whose ``[i]`` is the max of ``flat[i + shift]`` over ``shifts``, compared in
    their order, for every ``i`` all of them reach (a view of ``flat`` for one shift); its
    calls appended to ``calls``."""
    size = flat.size - max(shifts)
    if len(shifts) == 1:
        return flat[shifts[0]:shifts[0] + size]
    target = np.empty(size, flat.dtype)
    first, second, *rest = shifts
    calls.append((np.maximum, (flat[first:first + size], flat[second:second + size]), {"out": target}))
    for shift in rest:
        calls.append((np.maximum, (target, flat[shift:shift + size]), {"out": target}))
    return target
