"""Channels-last convolutions: ``nn.conv`` with ``data_layout="NHWC"``.

Data is ``(N, *spatial, C)`` and the weight ``(*kernel, C/groups, O)``
("HWIO", pre-packed at convert time by ConvertLayout), so nothing is
transposed per call:

* ``pointwise``: a 1x1 conv without stride or padding is one GEMM,
  ``(N*H*W, C) @ (C, O)``, straight from the input into ``out``;
* ``gemm``: im2col into ``(N, *out, taps, C)`` (one copy per tap, each of
  contiguous runs of C values), then one GEMM ``(pixels, taps*C) @ (taps*C, O)``
  into ``out`` (one per group when ``groups > 1``);
* ``depthwise``: one ``np.einsum`` over strided tap views with the channels
  innermost (:func:`.conv_depthwise.channel_last_taps`), straight into
  ``out``: the channel-last method of the NCHW engine without its two
  transposes.

A padded copy ``(N, *extent, C)`` of the input is made only when the taps
would read outside it (padding) or need less of it than given; its
geometry is :func:`.conv_depthwise.channel_last_geometry`'s. Scratch comes
from the planned workspace (:func:`scratch_layouts`), as in
:mod:`.conv_direct`.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from .conv_depthwise import channel_last_geometry, channel_last_taps
from ._workspace import Scratch


@dataclass(frozen=True)
class NhwcPlan:
    """How one channels-last conv geometry runs; see the module docstring."""

    method: str                 # "pointwise" | "gemm" | "depthwise"
    source_is_input: bool       # the taps read the input itself (no padded copy)
    cl: tuple                   # (extent, kernel, (stride, dilation) per dim)
    fill: tuple                 # (extent, (dst, src) or (None, None), zero regions)
    windows: tuple              # per tap: the strided slices of the (padded) input it reads
    lengths: tuple[int, ...]    # the output's spatial shape

    @property
    def taps(self) -> int:
        return len(self.windows)


@functools.lru_cache(maxsize=1024)
def nhwc_plan(spatial: tuple, kernel: tuple, strides: tuple, dilation: tuple, begins: tuple,
              lengths: tuple, depthwise: bool) -> NhwcPlan:
    """The method and layout for a channels-last conv of this geometry (cached)."""
    cl, fill = channel_last_geometry(spatial, kernel, strides, dilation, begins, lengths)
    extent = cl[0]
    source_is_input = not any(begins) and tuple(extent) == tuple(spatial)
    windows = tuple(
        tuple(slice(t * d, t * d + (m - 1) * s + 1, s) for t, s, d, m in zip(tap, strides, dilation, lengths))
        for tap in itertools.product(*(range(k) for k in kernel)))
    if depthwise:
        method = "depthwise"
    elif len(windows) == 1 and source_is_input and tuple(lengths) == tuple(spatial):
        method = "pointwise"
    else:
        method = "gemm"
    return NhwcPlan(method, source_is_input, cl, fill, windows, tuple(lengths))


def scratch_layouts(plan: NhwcPlan, batch, channels: int, out_channels: int, dtype, direct: bool) -> list:
    """The ``(shape, dtype)`` scratch arrays :func:`run_conv_nhwc` takes: the
    padded input unless the taps read the input, the im2col columns for
    ``gemm``, and a result buffer unless the result goes straight into
    ``out`` (``direct``: ``out`` has the working dtype). ``batch`` may be
    symbolic."""
    layouts = [] if plan.source_is_input else [((batch, *plan.cl[0], channels), dtype)]
    if plan.method == "gemm":
        layouts.append(((batch, *plan.lengths, plan.taps, channels), dtype))
    if not direct:
        layouts.append(((batch, *plan.lengths, out_channels), dtype))
    return layouts


def run_conv_nhwc(plan: NhwcPlan, x: np.ndarray, weight: np.ndarray, groups: int, out: np.ndarray,
                  bias: np.ndarray | None = None, workspace: np.ndarray | None = None) -> None:
    """``out = conv(x, weight) (+ bias)`` channels last; ``x`` and ``weight`` in
    the working dtype, ``out`` maybe of a lower precision (rounded once);
    ``bias`` only when ``out`` has the working dtype."""
    batch, channels = x.shape[0], x.shape[-1]
    out_channels = weight.shape[-1]
    direct = out.dtype == x.dtype and out.flags.c_contiguous
    layouts = scratch_layouts(plan, batch, channels, out_channels, x.dtype, direct)
    with Scratch(layouts, workspace) as arrays:
        arrays = list(arrays)
        if plan.source_is_input:
            source = x
        else:
            source = arrays.pop(0)
            _fill(plan, x, source)
        result = out if direct else arrays.pop()
        if plan.method == "depthwise":
            channel_last_taps(plan.cl, plan.lengths, source, weight.reshape(*plan.cl[1], channels), result)
        else:
            _gemm(plan, source, weight, groups, result, arrays)
        if result is not out:
            np.copyto(out, result, casting="unsafe")
    if bias is not None:
        np.add(out, bias, out=out)


def _fill(plan: NhwcPlan, x: np.ndarray, padded: np.ndarray) -> None:
    """``x`` copied into ``padded`` at the plan's offsets; the rest zeroed."""
    _, (dst, src), zeros = plan.fill
    for region in zeros:
        padded[(slice(None),) + region] = 0
    if dst is not None:
        padded[(slice(None),) + dst] = x[(slice(None),) + src]


def _gemm(plan: NhwcPlan, source: np.ndarray, weight: np.ndarray, groups: int, result: np.ndarray,
          arrays: list) -> None:
    batch, channels = source.shape[0], source.shape[-1]
    pixels = batch * math.prod(plan.lengths)
    if plan.method == "pointwise":
        cols = source.reshape(pixels, channels)
    else:
        cols = arrays[0]                                           # (N, *L, T, C)
        for t, window in enumerate(plan.windows):
            cols[..., t, :] = source[(slice(None),) + window]
        cols = cols.reshape(pixels, plan.taps * channels)
    out_channels = weight.shape[-1]
    target = result.reshape(pixels, out_channels)
    if groups == 1:
        np.matmul(cols, weight.reshape(-1, out_channels), out=target)
        return
    per_group, outs = channels // groups, out_channels // groups
    cols = cols.reshape(pixels, plan.taps, groups, per_group)
    w = weight.reshape(plan.taps, per_group, out_channels)
    for g in range(groups):
        lhs = cols[:, :, g].reshape(pixels, plan.taps * per_group)
        rhs = w[:, :, g * outs:(g + 1) * outs].reshape(plan.taps * per_group, outs)
        target[:, g * outs:(g + 1) * outs] = lhs @ rhs
