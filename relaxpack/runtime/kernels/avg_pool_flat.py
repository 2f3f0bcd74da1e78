"""A 2-d average pool of windows side by side, by sums of shifts of the flattened data.

The tap method of ``nn._avg_pool_calls`` copies the first tap of every window and adds the
others, each a strided view over the output's rows: on a small map (DenseNet's 2x2/2 transition
pools, 16x16x24 and below) every call loops over ``C * out_rows`` rows of a few values. Where the
windows lie side by side (each as long as its stride, no padding, no dilation, all inside the
data) every tap is a shift of the flat data by whole rows and single values, so the taps are
summed over the whole flat data in a few contiguous calls (results in the cells no window starts
at are never read) and the window sums are divided by the count straight into the output. The
same taps added in the same order (``itertools.product`` of the kernel's ranges, the first two in
one call: ``tap0 + tap1`` is what copying tap0 then adding tap1 gives) and the same divisor: bit
for bit the tap method.
"""

from __future__ import annotations

import itertools

import numpy as np

from ._math import is_low_float, scalar_array

#: data of at most this many bytes (as ``max_pool_flat.APART_MAX_BYTES``: past it the passes over
#: every value move more bytes than the tap method's strided calls save)
MAX_BYTES = 256 << 10


def avg_pool_calls(x: np.ndarray, out: np.ndarray, pool, strides, dilation, begins, ends, lengths) -> list | None:
    """The calls ``(fn, args, kwargs)`` of the average pool of channels-first ``x`` (N, C, H, W)
    into ``out`` when its windows lie side by side (``pool == strides``, no padding or dilation,
    every window inside the data), ``x`` and ``out`` are C-contiguous float32/float64 of one dtype
    and ``x`` at most :data:`MAX_BYTES`; None otherwise (the tap method)."""
    if x.ndim != 4 or out.ndim != 4 or x.dtype != out.dtype or x.dtype.kind != "f" or is_low_float(x.dtype) \
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or not x.size or x.nbytes > MAX_BYTES:
        return None
    (kh, kw), (mh, mw), (h, w) = pool, lengths, x.shape[2:]
    if tuple(pool) != tuple(strides) or tuple(dilation) != (1, 1) or any(begins) or any(ends) \
            or kh * kw < 2 or mh * kh > h or mw * kw > w or not mh * mw:
        return None
    flat, item = x.reshape(-1), x.itemsize
    shifts = [i * w + j for i, j in itertools.product(range(kh), range(kw))]
    size = flat.size - max(shifts)
    sums = np.empty(size, x.dtype)
    first, second, *rest = shifts
    calls = [(np.add, (flat[first:first + size], flat[second:second + size]), {"out": sums})]
    calls += [(np.add, (sums, flat[s:s + size]), {"out": sums}) for s in rest]
    planes = x.shape[0] * x.shape[1]
    windows = np.ndarray((planes, mh, mw), x.dtype, sums, 0, (h * w * item, kh * w * item, kw * item))
    count = scalar_array(kh * kw, x.dtype)      # (every window inside the data: one count)
    calls.append((np.divide, (windows, count), {"out": out.reshape(planes, mh, mw)}))
    return calls
