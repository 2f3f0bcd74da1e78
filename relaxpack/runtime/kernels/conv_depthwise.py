"""Depthwise convolutions computed channels last.

For small planes with many channels (MobileNet's 28x28 to 7x7 stages) the
channel-first method of :mod:`.conv_direct` runs rows of only a few dozen
values, and numpy's per-row overhead dominates. Channels last, the input
is copied once into a zero-padded buffer ``(N, *extent[:-1], phases, row,
C)`` whose last spatial dim is split into its stride's phases (phase ``a``
holds the padded positions ``a, a + s, a + 2s, ...``, as the phase planes
of :mod:`.conv_direct`). Whatever the stride, a kernel tap then reads, for
a whole output row, one contiguous run of ``width * C`` values, and the
taps of one phase are an affine grid of strided views: one ``np.einsum``
per phase does their multiply-adds (einsum's inner loop is a fused
multiply-add over long contiguous runs, ~1.5x faster than a multiply and
an add per tap; the weights are tiled ``width`` times to match). Phases
after the first add in from a second result. Without the phases a
strided conv's einsum runs runs of only ``C`` values: 1.2-1.4x slower on
MobileNet's stride-2 layers of 96 and 144 channels, 2-2.7x at 16-32; from
:data:`PHASES_MAX_CHANNELS` channels or on narrow outputs those runs are
long enough, and the plan keeps the unsplit buffer (``row_step``: the
stride). Below :data:`SLOTS_MAX_CHANNELS` channels a strided conv copies
instead, per tap of the last kernel dim, the positions it reads into a row
of the output's width ("slots", a ``k``-times im2col along that dim only):
all taps are then one affine grid and one einsum, whose every run is
``width * C`` values.

Two engines use it: ``nn.conv`` channels last (:mod:`.conv_nhwc`
"depthwise", straight into ``out``) and channels first (:mod:`.conv_direct`
``depthwise_cl``: the fill reads the input through a transposed view, and
a transposing copy carries the result and the bias back). Scratch arrays
(:func:`depthwise_layouts`) come from the caller's workspace.
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass

import numpy as np


# ---------------------------------------------------------------- plans

@dataclass(frozen=True, eq=False)
class DepthwisePlan:
    """How one depthwise geometry runs channels last; see the module docstring.
    (Compared and hashed by identity: :func:`depthwise_plan` makes one per geometry.)"""

    lengths: tuple[int, ...]    # the output's spatial shape
    kernel: tuple[int, ...]
    lead_steps: tuple           # per spatial dim but the last: (stride, dilation)
    buffer: tuple[int, ...]     # what the taps read, its spatial shape: (*lead, phases, row)
    fills: tuple                # per phase: (dst, src) index tuples over the spatial dims, or None
    zeros: tuple                # index tuples over the buffer's spatial dims that are zero
    groups: tuple               # per phase: (slot, its taps of the last kernel dim (a slice) and their
                                #             count, offset of the first in the phase row, offset step)
    reads_input: bool           # the taps read the input itself (no padded copy)
    row_step: int = 1           # positions between outputs in a phase row (the stride when not phased)
    slots: bool = False         # one buffer row per tap of the last kernel dim (see :data:`SLOTS_MAX_CHANNELS`)


#: a strided conv splits its last dim into phases below this many channels
#: and from this output width on; otherwise its runs of C values are long
#: enough, and the phases' strided fill and extra add cost more than they
#: save (measured, 1 thread, 3x3 stride 2: phases 1.2-2.7x faster at 8-144
#: channels and widths 28-56, 0.8-0.9x at 192-1024 channels, 0.6-0.75x at
#: width 7 in the generic kernel; in the specialized runner of
#: :mod:`.conv_small_nhwc`, which makes the views once, 0.6-0.88x at widths
#: 8-12 and 16-96 channels (the zoo's 61x96 MobileNets, ShuffleNet,
#: EfficientNet), 0.96-0.99x at 144 channels, 1.1-1.45x at widths 3-6)
PHASES_MAX_CHANNELS = 160
PHASES_MIN_WIDTH = 8

#: a strided conv below this many channels copies, per tap ``t`` of its last kernel dim, the
#: positions ``t * d + s * j`` it reads into a row of its own ("slots": ``k`` rows of the output's
#: width), so that all its taps are one affine grid of views and one einsum: no second result
#: and add, and runs of ``width * C`` values at any width from :data:`SLOTS_MIN_WIDTH` output
#: columns. Measured in the specialized runner (1 thread, 3x3 stride 2 unless said): 0.8-0.9x the
#: phases' time at 16-72 channels and widths 12-24 (the zoo's 61x96 CNNs; 0.72x at batch 3 and
#: 72 channels), 5x5 0.86x, 0.85x at width 6 (where the plan had runs of C), even at 96-144 channels
#: from width 28 up and at width 4; 1.04-1.07x at width 3 and at 240-576 channels on narrow maps
SLOTS_MAX_CHANNELS = 160
SLOTS_MIN_WIDTH = 4


@functools.lru_cache(maxsize=1024)
def depthwise_plan(spatial: tuple, kernel: tuple, strides: tuple, dilation: tuple, begins: tuple,
                   lengths: tuple, channels: int, may_read_input: bool = True) -> DepthwisePlan:
    """The channel-last layout of a depthwise conv of this geometry (cached);
    ``channels`` decides whether a strided conv is split into phases (see
    :data:`PHASES_MAX_CHANNELS`); ``may_read_input``: the input is channels
    last with contiguous rows, so without padding or stride it can be read
    as it is."""
    n = len(spatial)
    extent = tuple((m - 1) * s + (k - 1) * d + 1 for m, k, s, d in zip(lengths, kernel, strides, dilation))
    s, d, k, b, size, e = strides[-1], dilation[-1], kernel[-1], begins[-1], spatial[-1], extent[-1]
    slots = s > 1 and k > 1 and channels < SLOTS_MAX_CHANNELS and lengths[-1] >= SLOTS_MIN_WIDTH
    phased = not slots and channels < PHASES_MAX_CHANNELS and lengths[-1] >= PHASES_MIN_WIDTH
    row_step = 1 if phased or slots else s
    s = s if phased or slots else 1
    if slots:       # slot t: the positions t * d, t * d + s, ... that tap t reads, one per output
        phases = [t * d for t in range(k)]
        groups = [(0, slice(0, k), k, 0, 1)]
    else:
        phases = sorted({t * d % s for t in range(k)})
        groups = []
        for slot, a in enumerate(phases):
            taps = [t for t in range(k) if t * d % s == a]
            step = taps[1] - taps[0] if len(taps) > 1 else 1
            groups.append((slot, slice(taps[0], taps[-1] + 1, step), len(taps), (taps[0] * d - a) // s,
                           step * d // s))
    row = lengths[-1] if slots else max(-(-(e - a) // s) for a in phases)
    full = (slice(None),) * (n + 1)
    lead_dst, lead_src, zeros = [], [], []
    for i, (m, bi, ei) in enumerate(zip(spatial[:-1], begins[:-1], extent[:-1])):
        lo = min(bi, ei)
        hi = max(lo, min(ei, bi + m))
        lead_dst.append(slice(lo, hi))
        lead_src.append(slice(lo - bi, hi - bi))
        zeros += [full[:i] + (slice(0, lo),) + full[i + 1:]] if lo > 0 else []
        zeros += [full[:i] + (slice(hi, ei),) + full[i + 1:]] if hi < ei else []
    fills = []
    for slot, a in enumerate(phases):
        used = row if slots else -(-(e - a) // s)   # the phase's positions the taps read
        lo = max(0, -(-(b - a) // s))
        hi = max(lo, min(used, -(-(size + b - a) // s)))
        start = lo * s + a - b
        if lo > 0:
            zeros.append(full[:n - 1] + (slot, slice(0, lo)))
        if hi < used:
            zeros.append(full[:n - 1] + (slot, slice(hi, used)))
        fills.append((tuple(lead_dst) + (slot, slice(lo, hi)),
                      tuple(lead_src) + (slice(start, start + (hi - lo - 1) * s + 1, s),)) if hi > lo else None)
    if any(r.stop <= r.start for r in lead_dst):
        fills, zeros = [None] * len(phases), [full]
    reads_input = may_read_input and s == 1 and not any(begins) and all(x >= y for x, y in zip(spatial, extent))
    buffer = (*spatial[:-1], 1, spatial[-1]) if reads_input else (*extent[:-1], len(phases), row)
    return DepthwisePlan(tuple(lengths), tuple(kernel), tuple(zip(strides[:-1], dilation[:-1])), buffer,
                         tuple(fills), tuple(zeros), tuple(groups), reads_input, row_step, slots)


@dataclass(frozen=True)
class _Einsum:
    """One phase's einsum for a batch, channel count and dtype."""

    view: tuple                 # the taps' view of the buffer: (shape, byte strides, byte offset)
    taps: tuple                 # the phase's weights: an index into (*kernel, C)
    tiled: tuple | None         # (*kernel[:-1], T, width, C): the weights tiled to whole rows; None: as they are
    subscripts: str
    target: tuple               # the result's shape as the einsum writes it


@functools.lru_cache(maxsize=1024)
def _einsums(plan: DepthwisePlan, batch: int, channels: int, dtype: np.dtype) -> tuple[_Einsum, ...]:
    """The einsums of :func:`run_depthwise`, one per phase (cached: building
    the strided views costs more than a small conv's arithmetic)."""
    n = len(plan.lengths)
    item = np.dtype(dtype).itemsize
    strides = [channels * item]
    for d in reversed(plan.buffer):
        strides.append(strides[-1] * d)
    strides = strides[::-1]                                # the buffer's: (N, *lead, phase, row, C)
    pitch = strides[1:n]
    width = plan.lengths[-1]
    k, spatial = string.ascii_lowercase[:n], string.ascii_lowercase[n:2 * n - 1]
    if plan.row_step == 1:                                 # a row's values are one run
        inner, inner_strides = (width * channels,), (item,)
    else:
        inner, inner_strides = (width, channels), (plan.row_step * channels * item, item)
        spatial += "X"
    specs = []
    for slot, taps, count, first, step in plan.groups:
        shape = (*plan.kernel[:-1], count, batch, *plan.lengths[:-1], *inner)
        tap_stride = strides[n] if plan.slots else step * channels * item
        view_strides = (*(d * p for (_, d), p in zip(plan.lead_steps, pitch)), tap_stride, strides[0],
                        *(s * p for (s, _), p in zip(plan.lead_steps, pitch)), *inner_strides)
        offset = slot * strides[n] + first * channels * item
        tiled = (*plan.kernel[:-1], count, width, channels) if plan.row_step == 1 else None
        specs.append(_Einsum((shape, view_strides, offset), (slice(None),) * (n - 1) + (taps,), tiled,
                             f"{k}Z{spatial}Y,{k}Y->Z{spatial}Y", (batch, *plan.lengths[:-1], *inner)))
    return tuple(specs)


# ---------------------------------------------------------------- running a plan

def depthwise_layouts(plan: DepthwisePlan, batch, channels: int, dtype) -> list:
    """The ``(shape, dtype)`` scratch :func:`run_depthwise` takes: the padded
    copy unless the taps read the input, a second result when there are
    several phases, and each phase's tiled weights. ``batch`` may be symbolic."""
    layouts = [] if plan.reads_input else [((batch, *plan.buffer, channels), dtype)]
    if len(plan.groups) > 1:
        layouts.append(((batch, *plan.lengths, channels), dtype))
    if plan.row_step == 1:
        width = plan.lengths[-1]
        layouts += [((*plan.kernel[:-1], count, width, channels), dtype) for _, _, count, _, _ in plan.groups]
    return layouts


def run_depthwise(plan: DepthwisePlan, x: np.ndarray, weight: np.ndarray, result: np.ndarray, arrays) -> None:
    """``result`` (N, *lengths, C), C-contiguous = the depthwise conv of ``x``
    (N, *spatial, C; any strides) with ``weight`` (*kernel, C); ``arrays``:
    the scratch of :func:`depthwise_layouts`."""
    specs = _einsums(plan, x.shape[0], x.shape[-1], x.dtype)
    arrays = list(arrays)
    if plan.reads_input:
        buffer = np.ascontiguousarray(x)
    else:
        buffer = arrays.pop(0)
        _fill(plan, x, buffer)
    second = arrays.pop(0) if len(specs) > 1 else None
    for i, spec in enumerate(specs):
        shape, strides, offset = spec.view
        views = np.ndarray(shape, buffer.dtype, buffer, offset, strides)
        w = weight[spec.taps]
        if spec.tiled is not None:
            tiled = arrays[i].reshape(spec.tiled)
            np.copyto(tiled, w[..., None, :])
            w = tiled.reshape(*spec.tiled[:-2], -1)
        target = result if i == 0 else second
        np.einsum(spec.subscripts, views, w, out=target.reshape(spec.target))
        if i:
            np.add(result, second, out=result)


def _fill(plan: DepthwisePlan, x: np.ndarray, buffer: np.ndarray) -> None:
    """``x`` (N, *spatial, C) copied into the padded phase buffer; the padding zeroed."""
    for region in plan.zeros:
        buffer[(slice(None),) + region] = 0
    for fill in plan.fills:
        if fill is not None:
            dst, src = fill
            buffer[(slice(None),) + dst] = x[(slice(None),) + src]


# ---------------------------------------------------------------- channels first (conv_direct)

def depthwise_cl_layouts(plan, batch: int, channels: int, dtype) -> list:
    """Scratch for :func:`depthwise_cl`: :func:`depthwise_layouts`' and the
    channel-last result."""
    return depthwise_layouts(plan.cl, batch, channels, dtype) + [((batch, *plan.lengths, channels), dtype)]


def depthwise_cl(plan, x: np.ndarray, weight: np.ndarray, out: np.ndarray, bias, arrays) -> None:
    """``out`` (N, C, *spatial) = depthwise conv(x, weight) (+ bias) computed
    channel-last (``plan``: a :class:`.conv_direct.ConvPlan`)."""
    n = len(plan.lengths)
    channels = x.shape[1]
    *scratch, acc = arrays
    w = np.ascontiguousarray(weight.reshape(channels, -1).T).reshape(*weight.shape[2:], channels)
    run_depthwise(plan.cl, x.transpose(0, *range(2, n + 2), 1), w, acc, scratch)
    # a transposing copy, then the bias in place: 2x faster than a transposing add
    np.copyto(out, acc.transpose(0, n + 1, *range(1, n + 1)), casting="unsafe")
    if bias is not None:
        np.add(out, bias.reshape(bias.shape + (1,) * n), out=out)


def channel_last_geometry(spatial, kernel, strides, dilation, begins, lengths):
    """``(cl, cl_fill)`` for a channels-last plan of :mod:`.conv_nhwc`: the
    padded extent, kernel and (stride, dilation) per dim; and which part of
    the padded buffer holds the input (destination and source slices, or
    None when no input value is read) and which regions are zero."""
    extent = tuple((m - 1) * s + (k - 1) * d + 1 for m, k, s, d in zip(lengths, kernel, strides, dilation))
    dst, src, zeros = [], [], []
    n = len(extent)
    for i, (size, b, e) in enumerate(zip(spatial, begins, extent)):
        lo, hi = min(b, e), min(e, b + size)
        hi = max(hi, lo)
        dst.append(slice(lo, hi))
        src.append(slice(lo - b, hi - b))
        full = [slice(None)] * (n + 1)
        if lo > 0:
            zeros.append(tuple(full[:i] + [slice(0, lo)] + full[i + 1:]))
        if hi < e:
            zeros.append(tuple(full[:i] + [slice(hi, e)] + full[i + 1:]))
    empty = any(d.stop <= d.start for d in dst)
    fill = None if empty else (tuple(dst) + (slice(None),), tuple(src))
    cl = (extent, tuple(kernel), tuple(zip(strides, dilation)))
    return cl, (extent, fill if fill else (None, None), ((slice(None),) * (n + 1),) if empty else tuple(zeros))
