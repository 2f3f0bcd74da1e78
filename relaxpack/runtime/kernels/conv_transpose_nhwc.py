"""Channels-last transposed convolution: ``nn.conv_transpose`` with ``data_layout="NHWC"``.

Data is ``(N, *spatial, C)`` and the weight ``(C, *kernel, O/groups)``
(packed at convert time by ConvertLayout), so every input pixel's
contribution to all taps and output channels is one GEMM row:
``(N*H*W, C) @ (C, taps*O)``, with the weight read as it is.

* ``unfold``: when the kernel equals the stride (no dilation, padding or
  output padding; UNet's 2x2 stride-2 upsampling) the taps do not overlap:
  output pixel ``(h*kh + i, w*kw + j)`` is tap ``(i, j)`` of input pixel
  ``(h, w)`` alone. On wide planes (2-d, :data:`UNFOLD_DIRECT_MIN_WIDTH`)
  the GEMM of each kernel row ``i`` writes straight into ``out`` viewed as
  ``(N*H, kh, W, kw*O)``; otherwise one GEMM into columns and one copy
  that interleaves them;
* ``col2im``: the general case (overlapping taps, padding, dilation,
  output padding, groups): the columns ``(N, *spatial, *kernel, O)``, then
  one strided add per tap into the full output, whose runs of ``O``
  channels are contiguous, then the crop.

float16 and bfloat16 compute in float32 and round once.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ._math import work_dtype

#: ``unfold`` on 2-d planes at least this wide writes each kernel row's GEMM
#: (batched over the N*H input rows) straight into ``out``: measured (1
#: thread) 1.3-2x faster than one GEMM + interleaving copy from 64 wide, even
#: at 32, and 1.8x slower at 16 wide (GEMMs of 16 rows)
UNFOLD_DIRECT_MIN_WIDTH = 32


def is_unfold(kernel, strides, dilation, extra, begins, ends) -> bool:
    """The taps of this geometry do not overlap and nothing is cropped or added."""
    return (tuple(kernel) == tuple(strides) and all(d == 1 for d in dilation)
            and not any(extra) and not any(begins) and not any(ends))


def run_conv_transpose_nhwc(x: np.ndarray, weight: np.ndarray, out: np.ndarray, groups: int, strides,
                            dilation, extra, begins, ends) -> None:
    """``out = conv_transpose(x, weight)`` channels last (see the module docstring)."""
    dtype = work_dtype(out.dtype)
    x, weight = x.astype(dtype, copy=False), weight.astype(dtype, copy=False)
    kernel = weight.shape[1:-1]
    if groups == 1 and is_unfold(kernel, strides, dilation, extra, begins, ends):
        _unfold(x, weight, out)
        return
    _col2im(x, weight, out, groups, strides, dilation, extra, begins, ends)


def _unfold(x: np.ndarray, weight: np.ndarray, out: np.ndarray) -> None:
    batch, *spatial, channels = x.shape
    kernel, out_channels = weight.shape[1:-1], weight.shape[-1]
    direct = out.dtype == x.dtype and out.flags.c_contiguous
    if direct and len(spatial) == 2 and spatial[1] >= UNFOLD_DIRECT_MIN_WIDTH:
        (h, w), (kh, kw) = spatial, kernel
        rows = x.reshape(batch * h, w, channels)
        target = out.reshape(batch * h, kh, w, kw * out_channels)
        for i in range(kh):
            np.matmul(rows, weight[:, i].reshape(channels, kw * out_channels), out=target[:, i])
        return
    n = len(spatial)
    cols = x.reshape(-1, channels) @ weight.reshape(channels, -1)
    cols = cols.reshape(batch, *spatial, *kernel, out_channels)
    # (N, x1, .., xn, k1, .., kn, O) -> (N, x1, k1, .., xn, kn, O): out's pixel order
    order = (0, *itertools.chain.from_iterable((1 + d, 1 + n + d) for d in range(n)), 1 + 2 * n)
    interleaved = out.reshape(batch, *itertools.chain.from_iterable(zip(spatial, kernel)), out_channels)
    np.copyto(interleaved, cols.transpose(order), casting="unsafe")


def _col2im(x: np.ndarray, weight: np.ndarray, out: np.ndarray, groups: int, strides, dilation, extra,
            begins, ends) -> None:
    batch, *spatial, channels = x.shape
    kernel, per_group = weight.shape[1:-1], weight.shape[-1]
    taps, in_per_group, pixels = math.prod(kernel), channels // groups, batch * math.prod(spatial)
    rows = x.reshape(pixels, channels)
    w = weight.reshape(channels, taps, per_group)
    cols = np.empty((pixels, taps, groups, per_group), x.dtype)
    for g in range(groups):
        part = slice(g * in_per_group, (g + 1) * in_per_group)
        cols[:, :, g] = (rows[:, part] @ w[part].reshape(in_per_group, taps * per_group)).reshape(
            pixels, taps, per_group)
    cols = cols.reshape(batch, *spatial, *kernel, groups * per_group)
    full = [s * (n - 1) + d * (k - 1) + 1 + p for n, k, s, d, p in zip(spatial, kernel, strides, dilation, extra)]
    exact = not any(begins) and not any(ends) and out.dtype == x.dtype     # (x has the working dtype)
    acc = out if exact else np.zeros((batch, *full, groups * per_group), x.dtype)
    if exact:
        acc.fill(0)
    lead = (slice(None),) * (1 + len(spatial))
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = tuple(slice(t * d, t * d + (n - 1) * s + 1, s)
                       for t, s, d, n in zip(tap, strides, dilation, spatial))
        acc[(slice(None), *window)] += cols[lead + tap]
    if acc is not out:
        crop = tuple(slice(b, f - e) for b, e, f in zip(begins, ends, full))
        np.copyto(out, acc[(slice(None), *crop)], casting="unsafe")
