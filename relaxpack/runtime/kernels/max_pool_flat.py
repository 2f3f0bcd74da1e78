"""A 2-d max pool on short rows, few channels or of stride 1, by passes over whole flattened planes.

The separable max pool of :func:`.nn._max_along` takes, per kernel dim, the max of tap views of
the outputs' rows: on a small plane (ShuffleNet's 3x3/2 pool over 24x31x48) every numpy call
then loops over ``C * out_rows`` rows of a few dozen values, ~20 ns a row (8 us a call where
the same values contiguous take 2). Here each pass runs over whole planes as one flat run
instead: the data rows are copied once into the stride's row phases, padded rows and columns
with the lowest value (padding never wins), so each row tap of the kept rows is a shift of one
phase by whole rows (results in the rows a plane straddles are never read); the column taps of
that row max are shifts by one value, and the output takes every stride-th column. More values
are compared (every column, not every stride-th), but in calls of a few long runs.
The max of the same values, compared in the row-tap method's order (:func:`_tap_order`), so bit
for bit its result: ``np.maximum`` returns its second operand between equal values (+0 and -0),
and the padding's lowest value never changes the running max's bits.

Channels last (:func:`max_pool_calls_channels_last`) a pixel's channels are one short run, and the
row taps' column pass loops over those runs (16 channels: a few dozen values a numpy inner loop);
there the same passes run on the flat phases with whole padded rows and single pixels as shifts.

A stride-1 pool (YOLO's SPPF, 5x5 with padding 2) has one row phase, the padded copy: its row taps
read every row, so the row-tap method's views are the outputs' rows themselves, each tap a strided
2-d view of a few values a row (a 5x5 SPPF pool over 3x32x1x5: 11.9 us against 4.4 by flat passes;
1x128x8x12 93 -> 28, 1x256x20x20 560 -> 163, 1x8x112x112 3x3 135 -> 63): both layouts take the
flat passes at any row length (measured in docs/design-notes.md, "Stride-1 max pools by flat passes").
"""

from __future__ import annotations

import sys

import numpy as np

from .conv_small_nhwc import as_channel_runs, as_row_runs

#: the flat passes are taken for output rows shorter than this many values (measured, 1 thread,
#: 3x3/2: 24x31x48 29 -> 14 us, 24x61x128 101 -> 71; ResNet's 64x112x112 stem pool about even,
#: 342 -> 328; past that the extra values compared and the buffers' size weigh more)
MAX_ROW = 64


def max_pool_calls(x: np.ndarray, out: np.ndarray, pool, strides, dilation, begins, lengths):
    """The calls ``(fn, args, kwargs)`` of the max pool of channels-first ``x`` (N, C, H, W) into
    ``out`` by flat passes, or None when they do not pay (1-d or 3-d pools, strided pools of long
    rows unless the windows lie side by side, a non-contiguous input or output, float16: the row
    taps' float32 copy). Stride-1 pools take them at any row length (:data:`MAX_ROW` is a strided
    pool's bar: there the row taps skip the rows and columns the stride skips)."""
    if not _plain(x, out):
        return None
    (kh, kw), (sh, sw), (dh, dw), (bh, bw), (mh, mw) = pool, strides, dilation, begins, lengths
    if not x.size:
        return None
    if (kh, kw) == (sh, sw) and (dh, dw) == (1, 1) and (bh, bw) == (0, 0) and mh * kh <= x.shape[2] \
            and mw * kw <= x.shape[3] and x.nbytes <= APART_MAX_BYTES:
        return _apart_calls(x, out, kh, kw, mh, mw)
    if mw >= MAX_ROW and max(sh, sw) > 1:
        return None
    planes, (h, w) = x.shape[0] * x.shape[1], x.shape[2:]
    row_taps, col_taps = _tap_order(h, kh, sh, dh, bh, mh), _tap_order(w, kw, sw, dw, bw, mw)
    if row_taps is None or col_taps is None:
        return None
    wp = max(bw + w, (mw - 1) * sw + (kw - 1) * dw + 1)     # padded columns: the taps' reach
    calls: list = []
    row_max, rows = _phased_row_max(x.reshape(planes, h, w), wp, bw, sh, dh, bh, mh, row_taps, calls)
    col_max = _flat_max(row_max, [t * dw for t in col_taps], calls)
    item = x.itemsize
    picked = np.ndarray((planes, mh, mw), x.dtype, col_max, 0, (rows * wp * item, wp * item, sw * item))
    calls.append((np.copyto, (out.reshape(planes, mh, mw), picked), {}))
    return calls


#: windows side by side take :func:`_apart_calls` for data of at most this many bytes (measured in
#: CRNN, 1 thread, against the row taps: 2x2/2 at 16x32x80 20.7 -> 14.7 us, 3x24x16x78 (359 KB)
#: 55.5 -> 59.0, 3x16x32x157 (964 KB) 145 -> 148: the passes over all rows and columns move 2-3x
#: the bytes, which a large map fresh from its conv pays for; alone in cache they won up to 3 MB)
APART_MAX_BYTES = 256 << 10


def _apart_calls(x: np.ndarray, out: np.ndarray, kh: int, kw: int, mh: int, mw: int) -> list:
    """The calls of a pool of windows side by side (each as long as its stride, no padding, no
    dilation: the 2x2/2 and 2x1/2x1 pools of VGG-like stacks and CRNNs) on channels-first ``x``:
    every window lies inside its plane, so the taps are shifts of the data itself (no padded copy)
    by whole rows, then by single values, and the output takes the windows' first cells. The
    pick of every other float32 is a truncating copy of the pairs as uint64 (their low half is the
    first value on a little-endian machine) where every picked cell sits at an even index."""
    planes, (h, w), item = x.shape[0] * x.shape[1], x.shape[2:], x.itemsize
    calls: list = []
    row_max = _flat_max(x.reshape(-1), [t * w for t in range(kh)], calls)
    strides = (h * w * item, kh * w * item, kw * item)
    target = out.reshape(planes, mh, mw)
    if item == 4 and kw == 2 and _LITTLE and (planes == 1 or h * w % 2 == 0) and (mh == 1 or kh * w % 2 == 0):
        size = row_max.size - 1
        room = np.empty(size + 1, x.dtype)      # one value more: the last pair's (unread) high half
        calls.append((np.maximum, (row_max[:size], row_max[1:]), {"out": room[:size]}))
        pairs = np.ndarray((planes, mh, mw), np.uint64, room, 0, strides)
        calls.append((np.copyto, (target.view(np.uint32), pairs), {"casting": "unsafe"}))
        return calls
    col_max = _flat_max(row_max, list(range(kw)), calls)
    calls.append((np.copyto, (target, np.ndarray((planes, mh, mw), x.dtype, col_max, 0, strides)), {}))
    return calls


_LITTLE = sys.byteorder == "little"


#: the channels-last passes are taken while a pixel's channels span at most this many bytes
#: (measured, 1 thread, float32 3x3/2: 16 channels at 31x48 23.8 -> 13.7 us, at 112x112 156 -> 102,
#: 2x2/2 at 31x48 11.5 -> 9.2; 32 channels at 112x112 198 -> 206 and 2x2/2 at 31x48 15.0 -> 16.4:
#: there the row taps' runs of a pixel's channels are long enough)
MAX_CHANNEL_BYTES = 64


def max_pool_calls_channels_last(x: np.ndarray, out: np.ndarray, pool, strides, dilation, begins, lengths):
    """The calls ``(fn, args, kwargs)`` of the max pool of channels-last ``x`` (N, H, W, C) into
    ``out`` (N, OH, OW, C) by flat passes, or None where they do not pay (a pixel's channels over
    :data:`MAX_CHANNEL_BYTES`) or do not apply (as :func:`max_pool_calls`). The data are
    copied once into the stride's row phases of padded rows (:func:`_phased_row_max`); the row taps
    are shifts of a phase by whole padded rows, their column taps shifts by one pixel's channels,
    and the output takes every stride-th pixel. ``pool`` .. ``lengths``
    are per spatial dim (H, W), as for :func:`max_pool_calls`."""
    if not _plain(x, out):
        return None
    (kh, kw), (sh, sw), (dh, dw), (bh, bw), (mh, mw) = pool, strides, dilation, begins, lengths
    n, h, w, c = x.shape
    if c * x.itemsize > MAX_CHANNEL_BYTES or not x.size:
        return None
    row_taps, col_taps = _tap_order(h, kh, sh, dh, bh, mh), _tap_order(w, kw, sw, dw, bw, mw)
    if row_taps is None or col_taps is None:
        return None
    wp = max(bw + w, (mw - 1) * sw + (kw - 1) * dw + 1)     # padded pixels: the taps' reach
    row, item = wp * c, x.itemsize
    calls: list = []
    row_max, rows = _phased_row_max(x.reshape(n, h, w * c), row, bw * c, sh, dh, bh, mh, row_taps, calls)
    col_max = _flat_max(row_max, [t * dw * c for t in col_taps], calls)
    picked = np.ndarray((n, mh, mw, c), x.dtype, col_max, 0, (rows * row * item, row * item, sw * c * item, item))
    calls.append((np.copyto, as_channel_runs(out, picked), {}))
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


def _phased_row_max(rows_in: np.ndarray, row: int, begin: int, s: int, d: int, b: int, m: int,
                    taps: list[int], calls: list) -> tuple[np.ndarray, int]:
    """The row taps' max of ``rows_in`` (``(planes, h, values)``: each plane's data rows) as a flat
    array of ``rows`` padded rows a plane, each of ``row`` values with the data at ``begin``; output
    row ``y`` of plane ``p`` is its row ``p * rows + y`` (the rows past ``m`` straddle planes and are
    never read). The data are copied, by row runs, into the stride's row phases (phase ``a`` holds
    the padded rows ``a + s * u``; their padding the lowest value, written once), so tap ``t`` of
    every output row is one shift of a phase by whole rows and the passes run over the kept rows
    only (no pass over the rows the stride skips, nor a copy of the kept ones). Returns the array
    and ``rows``; the copies and maxima are appended to ``calls``."""
    planes, h = rows_in.shape[:2]
    offsets = [t * d // s for t in taps]
    rows = max(max(offsets) + m, (b + h - 1) // s + 1)
    phases = np.full((s, planes, rows, row), _lowest(rows_in.dtype), rows_in.dtype)
    for a in range(s):
        first = (a - b) % s                 # the first data row in phase a
        if first < h:
            count = len(range(first, h, s))
            at = (b + first) // s
            dst = phases[a, :, at:at + count, begin:begin + rows_in.shape[2]]
            calls.append((np.copyto, as_row_runs(dst, rows_in[:, first::s], 1), {}))
    flats = phases.reshape(s, -1)
    size = flats.shape[1] - max(offsets) * row
    return _max_of([(flats[t * d % s], o * row) for t, o in zip(taps, offsets)], size, calls), rows


def _flat_max(flat: np.ndarray, shifts: list[int], calls: list) -> np.ndarray:
    """The array whose ``[i]`` is the max of ``flat[i + shift]`` over ``shifts``, compared in
    their order, for every ``i`` all of them reach (a view of ``flat`` for one shift); its
    calls appended to ``calls``."""
    return _max_of([(flat, shift) for shift in shifts], flat.size - max(shifts), calls)


def _max_of(sources: list, size: int, calls: list) -> np.ndarray:
    """The ``size`` values whose ``[i]`` is the max of ``flat[i + shift]`` over the ``(flat, shift)``
    of ``sources``, compared in their order (a view for one source); its calls appended."""
    if len(sources) == 1:
        flat, shift = sources[0]
        return flat[shift:shift + size]
    (first, at), (second, at2), *rest = sources
    target = np.empty(size, first.dtype)
    calls.append((np.maximum, (first[at:at + size], second[at2:at2 + size]), {"out": target}))
    for flat, shift in rest:
        calls.append((np.maximum, (target, flat[shift:shift + size]), {"out": target}))
    return target
