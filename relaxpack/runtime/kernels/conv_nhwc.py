"""Channels-last convolutions: ``nn.conv`` with ``data_layout="NHWC"``.

Data is ``(N, *spatial, C)`` and the weight ``(*kernel, C/groups, O)``
("HWIO", pre-packed at convert time by ConvertLayout), so nothing is
transposed per call:

* ``pointwise``: a 1x1 conv without stride or padding is one GEMM,
  ``(N*H*W, C) @ (C, O)``, straight from the input into ``out``;
* ``gemm``: im2col into ``(N, *out, taps, C)`` (one copy per tap, each of
  contiguous runs of C values), then one GEMM ``(pixels, taps*C) @ (taps*C, O)``
  into ``out`` (one per group when ``groups > 1``; a single tap's, one GEMM
  batched over the groups' column views);
* ``taps``: a stride-1 KxK conv without im2col. Flattening the padded
  plane's pixels row-major, a tap over all output pixels is one contiguous
  ``(Q, C)`` slice (``Q``: the output's pixels as "wide" rows running on to
  the plane's row end, as in :mod:`.conv_direct`), so each tap is one GEMM
  ``(Q, C) @ (C, O)`` straight from the plane, accumulated over the taps
  in row blocks of :data:`TAPS_BLOCK_ROWS`; the valid pixels are copied
  out (bias added in that copy). For large planes (:data:`TAPS_MIN_PIXELS`),
  where ``gemm``'s im2col copies short runs of C values many times: about
  the channels-first row-split GEMM's speed (0.9-1.3x its time at 16-64
  channels on 80-256 pixels square, measured, 1 thread). A grouped conv
  takes it at any size: each tap one GEMM batched over the groups, on
  views of the plane's and the result's rows (``gemm`` copied every
  group's columns out of the im2col, runs of a few values); strided, on
  the phase planes of its input (:func:`_phased_taps`);
* ``winograd``: a 3x3 stride-1 conv of many channels by F(2x2, 3x3)
  (:mod:`.conv_winograd`: 2.25x fewer products, 1.4-2x faster than
  ``gemm``/``taps`` from 64 channels);
* ``depthwise``: one ``np.einsum`` per stride phase over strided tap views
  whose inner runs are whole output rows (:mod:`.conv_depthwise`),
  straight into ``out``: the channel-last method of the NCHW engine
  without its two transposes.

A padded copy ``(N, *extent, C)`` of the input is made only when the taps
would read outside it (padding) or need less of it than given; its
geometry is :func:`.conv_depthwise.channel_last_geometry`'s (a depthwise
conv's, split into phases, :func:`.conv_depthwise.depthwise_plan`'s).
The bias is added to rows of ``width * O`` values on large outputs (a
broadcast over rows of ``O`` values is up to 2x slower there). Scratch
comes from the planned workspace (:func:`scratch_layouts`), as in
:mod:`.conv_direct`.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..kept import keep_for, kept_for
from . import conv_winograd, gemm_panels
from .conv_depthwise import DepthwisePlan, channel_last_geometry, depthwise_layouts, depthwise_plan, run_depthwise
from ._workspace import Scratch

_as_strided = np.lib.stride_tricks.as_strided

#: ``taps``: wide rows (output pixels) per block of accumulated tap GEMMs
TAPS_BLOCK_ROWS = 4096


@dataclass(frozen=True)
class NhwcPlan:
    """How one channels-last conv geometry runs; see the module docstring."""

    method: str                 # "pointwise" | "gemm" | "taps" | "winograd" | "depthwise"
    source_is_input: bool       # the taps read the input itself (no padded copy)
    cl: tuple                   # (extent, kernel, (stride, dilation) per dim)
    fill: tuple                 # (extent, (dst, src) or (None, None), zero regions)
    windows: tuple              # per tap: the strided slices of the (padded) input it reads
    lengths: tuple[int, ...]    # the output's spatial shape
    offsets: tuple = ()         # taps: per tap, its flat pixel offset in the (padded) plane
    q: int = 0                  # taps: wide rows (pixels) each tap's GEMM reads
    winograd: conv_winograd.WinogradPlan | None = None
    fallback: "NhwcPlan | None" = None  # winograd: the plan that redoes a call whose result is not finite
    by_panels: bool = False     # winograd on a small map, only where its GEMMs take gemm_panels (else fallback)
    dw: DepthwisePlan | None = None     # depthwise: its channel-last layout
    # taps of a strided conv: per tap the phase plane it reads (its index), a plane's extent, and per
    # phase (the source slices, where they go in its plane, the plane's regions no source value fills)
    phases: tuple = ()
    plane: tuple = ()
    splits: tuple = ()

    @property
    def taps(self) -> int:
        return len(self.windows)

    @property
    def pitch(self) -> tuple[int, ...]:
        """Pixels between neighbours along each spatial dim of the (padded, or phase) plane."""
        strides, acc = [], 1
        for d in reversed(self.plane or self.cl[0]):
            strides.append(acc)
            acc *= d
        return tuple(reversed(strides))


@functools.lru_cache(maxsize=1024)
def nhwc_plan(spatial: tuple, kernel: tuple, strides: tuple, dilation: tuple, begins: tuple,
              lengths: tuple, depthwise: bool, taps: bool = False, winograd: bool = False,
              channels: int = 0, by_panels: bool = False, strided_taps: bool = False) -> NhwcPlan:
    """The method and layout for a channels-last conv of this geometry (cached);
    ``taps``: a stride-1 KxK conv runs by per-tap GEMMs (the caller decides:
    see :func:`prefers_taps`); ``winograd``: a 3x3 one by F(2x2, 3x3)
    (:func:`.conv_winograd.prefers_winograd`), before ``taps``, and with ``by_panels``
    only where its GEMMs take panels (:func:`.conv_winograd.small_map_by_panels`; else
    its fallback runs); ``channels``: a depthwise conv's, which pick its layout
    (:func:`.conv_depthwise.depthwise_plan`); ``strided_taps``: with ``taps``, a strided conv
    runs by taps too, on its input's phase planes (:func:`_phased_taps`: grouped convs)."""
    cl, fill = channel_last_geometry(spatial, kernel, strides, dilation, begins, lengths)
    if winograd and not depthwise:
        fallback = nhwc_plan(spatial, kernel, strides, dilation, begins, lengths, depthwise, taps, False, channels)
        return NhwcPlan("winograd", False, cl, fill, (), tuple(lengths),
                        winograd=conv_winograd.WinogradPlan.make(lengths, begins), fallback=fallback,
                        by_panels=by_panels)
    extent = cl[0]
    source_is_input = not any(begins) and tuple(extent) == tuple(spatial)
    windows = tuple(
        tuple(slice(t * d, t * d + (m - 1) * s + 1, s) for t, s, d, m in zip(tap, strides, dilation, lengths))
        for tap in itertools.product(*(range(k) for k in kernel)))
    if depthwise:
        dw = depthwise_plan(spatial, kernel, strides, dilation, begins, lengths, channels)
        return NhwcPlan("depthwise", dw.reads_input, cl, fill, windows, tuple(lengths), dw=dw)
    if len(windows) == 1 and source_is_input and tuple(lengths) == tuple(spatial):
        method = "pointwise"
    elif taps and strided_taps and len(windows) > 1 and any(s > 1 for s in strides):
        return _phased_taps(cl, fill, windows, tuple(lengths), kernel, strides, dilation, source_is_input)
    elif taps and len(windows) > 1 and all(s == 1 for s in strides):
        plan = NhwcPlan("taps", source_is_input, cl, fill, windows, tuple(lengths))
        pitch = plan.pitch
        offsets = tuple(sum(t * d * p for t, d, p in zip(tap, dilation, pitch))
                        for tap in itertools.product(*(range(k) for k in kernel)))
        q = sum((m - 1) * p for m, p in zip(lengths, pitch)) + 1
        return NhwcPlan("taps", source_is_input, cl, fill, windows, tuple(lengths), offsets, q)
    else:
        method = "gemm"
    return NhwcPlan(method, source_is_input, cl, fill, windows, tuple(lengths))


def _phased_taps(cl, fill, windows, lengths: tuple, kernel, strides, dilation, source_is_input: bool) -> NhwcPlan:
    """The ``taps`` plan of a strided conv: the (padded) input split into its strides' phase planes
    (phase ``p`` holds the positions ``p + s * u`` along each dim, as :mod:`.conv_direct`'s planes),
    so that tap ``t`` (at ``a = t * d``) reads, for every output pixel, phase ``a % s`` at ``a // s``
    on: one contiguous run of wide rows over that plane, as a stride-1 conv's tap over its plane."""
    extent = cl[0]
    plane = tuple(-(-e // s) for e, s in zip(extent, strides))
    pitch = tuple(math.prod(plane[i + 1:]) for i in range(len(plane)))
    phases, offsets = [], []
    for tap in itertools.product(*(range(k) for k in kernel)):
        at = [t * d for t, d in zip(tap, dilation)]
        phases.append(int(np.ravel_multi_index([a % s for a, s in zip(at, strides)], strides)))
        offsets.append(sum((a // s) * p for a, s, p in zip(at, strides, pitch)))
    splits = []
    for phase in itertools.product(*(range(s) for s in strides)):
        counts = [len(range(p, e, s)) for p, e, s in zip(phase, extent, strides)]
        unfilled = tuple(tuple(slice(c, n) if j == i else slice(None) for j in range(len(plane)))
                         for i, (c, n) in enumerate(zip(counts, plane)) if c < n)
        splits.append((tuple(slice(p, None, s) for p, s in zip(phase, strides)),
                       tuple(slice(0, c) for c in counts), unfilled))
    q = sum((m - 1) * p for m, p in zip(lengths, pitch)) + 1
    return NhwcPlan("taps", source_is_input, cl, fill, windows, lengths, tuple(offsets), q,
                    phases=tuple(phases), plane=plane, splits=tuple(splits))


#: ``taps`` over ``gemm`` for a stride-1 KxK conv (groups 1) from this many
#: output pixels: measured (1 thread) on UNet's and YOLO's 3x3 convs, taps
#: runs 1.2-2.6x faster than gemm from 80x80 on (16-64 channels; 2.5x at
#: 16-32 channels on 256x256), at 64x64 about even (0.8-1.3x) and on
#: smaller planes slower (0.8x at 64 channels on 32x32)
TAPS_MIN_PIXELS = 6400


def prefers_taps(groups: int, pixels: int) -> bool:
    """Whether a stride-1 KxK conv runs by per-tap GEMMs: ungrouped from :data:`TAPS_MIN_PIXELS`
    output pixels, grouped always (each tap one GEMM per group, batched, read from the plane:
    ``gemm``'s im2col then copied each group's columns out of every tap's; measured, 1 thread,
    3x3 at group widths 4-32 from 7x7 to 112x112: 1.4-6.5x faster, ResNeXt's and DPN's 4 wide
    3.5x, RegNet's 8 wide 2.3-2.8x)."""
    return pixels >= TAPS_MIN_PIXELS if groups == 1 else True


def scratch_layouts(plan: NhwcPlan, batch, channels: int, out_channels: int, dtype, direct: bool) -> list:
    """The ``(shape, dtype)`` scratch arrays :func:`run_conv_nhwc` takes: the
    padded input unless the taps read the input, the im2col columns for
    ``gemm``, and a result buffer unless the result goes straight into
    ``out`` (``direct``: ``out`` has the working dtype); for ``winograd``
    :func:`.conv_winograd.scratch_layouts`. ``batch`` may be symbolic."""
    if plan.method == "winograd":
        return conv_winograd.scratch_layouts(plan.winograd, batch, channels, out_channels, dtype)
    if plan.method == "depthwise":
        result = [] if direct else [((batch, *plan.lengths, channels), dtype)]
        return depthwise_layouts(plan.dw, batch, channels, dtype) + result
    layouts = [] if plan.source_is_input else [((batch, *plan.cl[0], channels), dtype)]
    if plan.method == "taps":
        # (a strided conv's phase planes,) the wide result, one image at a time, and one block of a tap's GEMM
        phases = [((batch, len(plan.splits), *plan.plane, channels), dtype)] if plan.phases else []
        return layouts + phases + [((plan.q, out_channels), dtype),
                                   ((min(plan.q, TAPS_BLOCK_ROWS), out_channels), dtype)]
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
    if plan.by_panels and not conv_winograd.panels_pay(x.dtype):
        plan = plan.fallback
    direct = out.dtype == x.dtype and out.flags.c_contiguous
    if plan.method == "pointwise" and direct and groups == 1:       # no scratch: the GEMM alone
        rows_by_weight(x.reshape(-1, channels), weight.reshape(channels, out_channels), out.reshape(-1, out_channels))
        if bias is not None:
            add_bias(out, bias)
        return
    layouts = scratch_layouts(plan, batch, channels, out_channels, x.dtype, direct)
    if plan.method == "winograd":
        with Scratch(layouts, workspace) as arrays:
            conv_winograd.run_winograd(plan.winograd, x, weight, out, bias, arrays)
        if not conv_winograd.all_finite(out):
            # an inf or NaN operand, or an overflow: the transforms subtract values (inf - inf is
            # NaN where the direct sums give +-inf), so the call is redone the direct way
            run_conv_nhwc(plan.fallback, x, weight, groups, out, bias, workspace)
        return
    with Scratch(layouts, workspace) as arrays:
        arrays = list(arrays)
        if plan.method == "depthwise":
            result = out if direct else arrays.pop()
            run_depthwise(plan.dw, x, weight.reshape(*weight.shape[:-2], channels), result, arrays)
        else:
            if plan.source_is_input:
                source = x
            else:
                source = arrays.pop(0)
                _fill(plan, x, source)
            if plan.method == "taps":
                if plan.phases:
                    source = _split_phases(plan, source, arrays.pop(0))
                _taps(plan, source, weight, groups, out, bias, *arrays)
                return
            result = out if direct else arrays.pop()
            _gemm(plan, source, weight, groups, result, arrays)
        if result is not out:
            np.copyto(out, result, casting="unsafe")
    if bias is not None:
        add_bias(out, bias)


#: the bias is added to rows of ``width * O`` values (a tiled copy of it) from
#: this many output values on; on smaller outputs tiling costs more than the
#: broadcast over rows of ``O`` values (measured, 1 thread: 1.2-2x faster from
#: 75k values, MobileNet's shapes; 0.6-1x below 64k)
BIAS_ROWS_MIN_SIZE = 1 << 16


def add_bias(out: np.ndarray, bias: np.ndarray) -> None:
    """``out`` (N, *spatial, O) += ``bias`` (O,), as rows of ``width * O``
    values when ``out`` is contiguous and large (:data:`BIAS_ROWS_MIN_SIZE`)."""
    if out.ndim > 2 and out.size >= BIAS_ROWS_MIN_SIZE and out.flags.c_contiguous:
        rows = out.reshape(-1, out.shape[-2] * out.shape[-1])
        np.add(rows, np.tile(bias, out.shape[-2]), out=rows)
    else:
        np.add(out, bias, out=out)


def _fill(plan: NhwcPlan, x: np.ndarray, padded: np.ndarray) -> None:
    """``x`` copied into ``padded`` at the plan's offsets; the rest zeroed."""
    _, (dst, src), zeros = plan.fill
    for region in zeros:
        padded[(slice(None),) + region] = 0
    if dst is not None:
        padded[(slice(None),) + dst] = x[(slice(None),) + src]


def _split_phases(plan: NhwcPlan, source: np.ndarray, planes: np.ndarray) -> np.ndarray:
    """``source`` (N, *extent, C) split into its phase ``planes`` (N, phases, *plane, C), the cells
    no source value reaches zeroed (the wide rows read them for columns that are not pixels)."""
    lead = (slice(None),)
    for k, (src, dst, unfilled) in enumerate(plan.splits):
        target = planes[:, k]
        target[lead + dst] = source[lead + src]
        for region in unfilled:
            target[lead + region] = 0
    return planes


def _taps(plan: NhwcPlan, source: np.ndarray, weight: np.ndarray, groups: int, out: np.ndarray, bias,
          wide: np.ndarray, tmp: np.ndarray) -> None:
    """Per image: the wide result accumulated from one GEMM per tap, a block
    of rows at a time (so the partial sums stay in cache), then its valid
    pixels copied out (+ bias). Grouped, a tap's GEMM is one batched call over
    the groups: views ``(G, rows, C/G)`` of the plane and ``(G, rows, O/G)`` of
    the result, whose rows BLAS reads and writes at the channels' pitch."""
    batch, channels = source.shape[0], source.shape[-1]
    out_channels = weight.shape[-1]
    w = _tap_weights(weight, plan.taps, channels // groups, groups)
    q, block = plan.q, tmp.shape[0]
    item = wide.itemsize
    valid = _as_strided(wide, (*plan.lengths, out_channels),
                        (*(p * out_channels * item for p in plan.pitch), item), writeable=False)
    by_group = _by_group if groups > 1 else _as_is
    phases = plan.phases or (0,) * plan.taps
    for n in range(batch):
        # the rows each tap reads slices along their second last dim: the plane's, or its phase plane's
        planes = [source[n]] if not plan.phases else source[n]
        rows = [by_group(p.reshape(-1, channels), groups) for p in planes]
        for q0 in range(0, q, block):
            q1 = min(q, q0 + block)
            acc, part = wide[q0:q1], tmp[:q1 - q0]
            acc_g, part_g = by_group(acc, groups), by_group(part, groups)
            first = plan.offsets[0]
            np.matmul(rows[phases[0]][..., q0 + first:q1 + first, :], w[0], out=acc_g)
            for offset, phase, w_tap in zip(plan.offsets[1:], phases[1:], w[1:]):
                np.matmul(rows[phase][..., q0 + offset:q1 + offset, :], w_tap, out=part_g)
                np.add(acc, part, out=acc)
        if bias is not None:
            np.add(valid, bias, out=out[n])
        else:
            np.copyto(out[n], valid, casting="unsafe")


def _tap_weights(weight: np.ndarray, taps: int, per_group: int, groups: int) -> np.ndarray:
    """The HWIO ``weight`` as one matrix per tap: ``(taps, C, O)`` (a view), grouped ``(taps, G,
    C/G, O/G)``: each group's block of columns made contiguous (BLAS reads a block at the weight's
    pitch up to 1.8x slower), once per read-only weight (:data:`_GROUPED`)."""
    out_channels = weight.shape[-1]
    w = weight.reshape(taps, per_group, out_channels)
    if groups == 1:
        return w
    constant = not weight.flags.writeable       # kept while it lives (a computed weight: made per call)
    grouped = kept_for(_GROUPED, weight) if constant else None
    if grouped is None:
        grouped = np.ascontiguousarray(w.reshape(taps, per_group, groups, out_channels // groups)
                                       .transpose(0, 2, 1, 3))
        if constant:
            keep_for(_GROUPED, weight, grouped)
    return grouped


#: grouped convs' per-tap weights by the identity of the read-only weight they were made from
_GROUPED: dict[int, tuple] = {}


def _by_group(rows: np.ndarray, groups: int) -> np.ndarray:
    """``(rows, C)`` as ``(G, rows, C/G)``: group ``g``'s columns, a view."""
    return rows.reshape(rows.shape[0], groups, rows.shape[1] // groups).transpose(1, 0, 2)


def _as_is(rows: np.ndarray, groups: int) -> np.ndarray:
    return rows


def rows_by_weight(rows: np.ndarray, weight: np.ndarray, out: np.ndarray, kept: list | None = None) -> None:
    """``out = rows @ weight``: pixels by the weight as :mod:`.gemm_panels`'s small products where
    they apply (a few pixels by a large weight: ResNet's last stages at 7x7 and 14x14; many pixels
    by a small one), else one ``np.matmul``; ``kept``: a bound weight's slot for its packed panels."""
    if not gemm_panels.considered(rows.size, weight) or not gemm_panels.matmul_into(rows, weight, out, kept):
        np.matmul(rows, weight, out=out)


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
        rows_by_weight(cols, weight.reshape(-1, out_channels), target)
        return
    per_group, outs = channels // groups, out_channels // groups
    if plan.taps == 1:      # each group's columns are a view of the rows: one batched GEMM
        np.matmul(_by_group(cols, groups), _tap_weights(weight, 1, per_group, groups)[0], out=_by_group(target, groups))
        return
    cols = cols.reshape(pixels, plan.taps, groups, per_group)
    w = weight.reshape(plan.taps, per_group, out_channels)
    for g in range(groups):
        lhs = cols[:, :, g].reshape(pixels, plan.taps * per_group)
        rhs = w[:, :, g * outs:(g + 1) * outs].reshape(plan.taps * per_group, outs)
        target[:, g * outs:(g + 1) * outs] = lhs @ rhs
