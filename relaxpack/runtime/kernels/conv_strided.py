"""The ``strided`` conv method: im2col by one copy of a strided view, for small convs.

The engine's other methods (:mod:`.conv_direct`) copy the im2col columns a
kernel tap at a time from phase planes, so every read has unit stride: on a
large plane that is what keeps the copy fast. On a small one a copy per tap
costs more in numpy calls than in bytes (a 7x7 stem is 49 copies, a 3x3 conv
on an 8x12 plane spends most of its time calling numpy). Here the zero-padded
input (when there is padding) is viewed as ``(N, C, *kernel, *lengths)`` with
``as_strided`` (a tap's window of the output's lengths at the stride and
dilation) and copied into the columns in one call, then one GEMM writes
``out``. :func:`~.conv_direct.conv_plan` picks it below
:data:`MAX_COLUMN_VALUES` values of columns per image for a depthwise conv,
:data:`MAX_DENSE_COLUMN_VALUES` for others (measured in ``docs/design-notes.md``).
Padded stride-1 convs and strided ones of many taps a phase copy wide rows
instead (:mod:`.conv_wide`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import conv_column_phases, conv_wide
from .gemm_blocks import blocked_matmul

_as_strided = np.lib.stride_tricks.as_strided

#: an image's im2col columns hold at most this many values for the strided method (depthwise convs)
MAX_COLUMN_VALUES = 1 << 16
#: ... and for other convs: measured (1 thread, thread CPU time, the per-instruction runners), the
#: strided method is 5-35% faster than ``wide``/``rows``/``compact`` up to ~450k values (a 3-channel
#: stem at 32x80: 68 -> 43 us; 16 -> 24 channels at 31x48: 168 -> 136 us), even at ~900k and slower
#: at 3.6M (``rows``' blocks stay in cache)
MAX_DENSE_COLUMN_VALUES = 1 << 19


@dataclass(frozen=True)
class StridedGeometry:
    """What the strided view needs beyond the plan: the input's spatial shape and padding, the window."""

    spatial: tuple
    begins: tuple
    ends: tuple
    kernel: tuple
    strides: tuple
    dilation: tuple
    wide: conv_wide.WideGeometry | None = None     # when the taps read wide rows (:mod:`.conv_wide`)


def padded_shape(spatial: tuple, begins: tuple, ends: tuple) -> tuple[int, ...]:
    return tuple(x + b + e for x, b, e in zip(spatial, begins, ends))


def strided_layouts(plan, batch, channels: int, out_channels: int, dtype) -> list:
    """The zero-padded input (when padded) and the columns ``(N, C, taps, *lengths)``; wide rows:
    :func:`.conv_wide.wide_layouts`."""
    geometry = plan.strided
    if geometry.wide is not None:
        return conv_wide.wide_layouts(plan, batch, channels, out_channels, dtype)
    padded = [] if not any(geometry.begins + geometry.ends) else \
        [((batch, channels, *padded_shape(geometry.spatial, geometry.begins, geometry.ends)), dtype)]
    return padded + [((batch, channels, len(plan.taps), *plan.lengths), dtype)]


def run_strided(plan, x: np.ndarray, weight: np.ndarray, groups: int, out: np.ndarray, bias, arrays) -> None:
    """``out = conv(x, weight) (+ bias)``: padded copy, one strided copy into the columns, one GEMM."""
    geometry = plan.strided
    if geometry.wide is not None:
        if not conv_column_phases.replaces_wide(plan, x.shape, arrays[-1].itemsize):
            conv_wide.run_wide(plan, x, weight, groups, out, bias, arrays)
            return
        plan, arrays = _without_wide(plan, x, arrays)
    cols = _columns(plan, x, arrays)
    grouped_gemm(weight, cols, out, bias, groups, x.shape[1] // groups * len(plan.taps), plan.lengths)


def _without_wide(plan, x: np.ndarray, arrays) -> tuple:
    """``plan`` without wide rows (:func:`.conv_column_phases.replaces_wide`: the runner's method, whose
    columns are the strided window's values) and its scratch carved from the wide layouts' (the
    padded copy, the columns in the wide columns' memory, which is larger)."""
    plan = conv_column_phases.without_wide(plan)
    layouts = strided_layouts(plan, *x.shape[:2], 1, arrays[-1].dtype)
    cols = np.ndarray(layouts[-1][0], layouts[-1][1], arrays[-2])
    return plan, arrays[:len(layouts) - 1] + [cols]


def transposes_in_gemm(plan) -> bool:
    """Whether :func:`run_strided_channels_last` runs ``plan`` (the strided method without wide rows)."""
    return plan.method == "strided" and plan.strided.wide is None


def run_strided_channels_last(plan, x: np.ndarray, weight: np.ndarray, groups: int, out: np.ndarray, bias,
                              arrays) -> None:
    """``out`` (N, *lengths, O) = conv(x, weight) (+ bias) of channels-first ``x``: the strided
    method's padded copy and columns, then per group the GEMM the other way round, ``cols^T @
    W^T`` (BLAS reads both transposed), whose result is the channels-last output itself: no
    staging result and no transposing copy (a 3-channel stem's 16 x 1488 result: 6.8 us of copy).
    Its sums are the products' in another GEMM orientation, not the channels-first result's bits."""
    batch, channels = x.shape[:2]
    cols = _columns(plan, x, arrays)
    k = channels // groups * len(plan.taps)
    pixels, out_channels = math.prod(plan.lengths), weight.shape[0]
    per = out_channels // groups
    w_t = weight.reshape(groups, per, k).transpose(0, 2, 1)
    cols_t = cols.reshape(batch, groups, k, pixels).transpose(0, 1, 3, 2)
    if out.dtype == w_t.dtype and out.flags.c_contiguous:
        np.matmul(cols_t, w_t, out=out.reshape(batch, pixels, groups, per).transpose(0, 2, 1, 3))
    else:
        result = np.matmul(cols_t, w_t).transpose(0, 2, 1, 3).reshape(out.shape)
        np.copyto(out, result, casting="unsafe")
    if bias is not None:
        np.add(out, bias, out=out)


def _columns(plan, x: np.ndarray, arrays) -> np.ndarray:
    """The im2col columns ``(N, C, taps, *lengths)`` of ``x``: the padded copy (when padded), then one
    copy of the strided window view."""
    geometry = plan.strided
    source = x
    if len(arrays) > 1:
        source = arrays[0]
        source.fill(0)
        inner = tuple(slice(b, b + n) for b, n in zip(geometry.begins, geometry.spatial))
        source[(slice(None), slice(None)) + inner] = x
    cols = arrays[-1]
    lead, spatial_strides = source.strides[:2], source.strides[2:]
    window = _as_strided(source, cols.shape[:2] + geometry.kernel + plan.lengths,
                         lead + tuple(s * d for s, d in zip(spatial_strides, geometry.dilation))
                         + tuple(s * t for s, t in zip(spatial_strides, geometry.strides)), writeable=False)
    np.copyto(cols.reshape(window.shape), window)
    return cols


def grouped_gemm(weight, cols, out, bias, groups: int, k: int, lengths) -> None:
    """``out`` (N, O, *lengths) = per group, the weight rows times the im2col
    columns ``cols`` (N, groups * k, pixels in any shape), plus ``bias``;
    straight into ``out`` when it can take the product (the strided and the
    direct engines share it), in :func:`.gemm_blocks.column_blocks`."""
    batch, out_channels, pixels = out.shape[0], weight.shape[0], math.prod(lengths)
    w = weight.reshape(groups, out_channels // groups, k)
    columns = cols.reshape(batch, groups, k, pixels)
    target_shape = (batch, groups, out_channels // groups, pixels)
    if out.dtype == w.dtype and out.flags.c_contiguous:
        blocked_matmul(w, columns, out.reshape(target_shape))
    else:
        result = np.empty(target_shape, w.dtype)
        blocked_matmul(w, columns, result)
        np.copyto(out, result.reshape(out.shape), casting="unsafe")
    if bias is not None:
        np.add(out, bias.reshape(bias.shape + (1,) * len(lengths)), out=out)
