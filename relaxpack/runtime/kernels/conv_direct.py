"""The convolution engine behind ``nn.conv``: taps read contiguous rows.

The input is laid out once (zero-padded, split into stride phases) so that
every kernel tap is a unit-stride slice of it; one of the methods of
:func:`conv_plan` (``wide``, ``rows``, ``compact``, ``strided``,
``depthwise``), picked per shape, turns the taps into GEMMs. Scratch
buffers (:func:`scratch_layouts`) come from the planned workspace or the
per-thread one (:mod:`._workspace`). How each method works and when it
pays: docs/design-notes.md, "The conv engine".
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from . import conv_depthwise, conv_small_cl, conv_strided, conv_wide
from ._workspace import Scratch

_as_strided = np.lib.stride_tricks.as_strided

#: depthwise: channel-last from this many channels per output pixel on
#: (MobileNet: from 144 channels at a 28x28 output; at 56x56 and 112x112 the
#: channel-first method is 10-30% faster, its rows being long enough)
CL_MIN_CHANNELS_PER_PIXEL = 0.15
#: depthwise: channel-last whatever the channels on outputs of at most this many
#: pixels (measured, 1 thread, 3x3 and 5x5 at 8-32 channels: 1.2-2x faster up
#: to 48x48, about even at 56x56 and 45x64, slower from 48x72)
CL_MAX_PIXELS = 2500
#: depthwise: the partial sums of a block of channels take at most this many bytes
DEPTHWISE_BLOCK_BYTES = 512 << 10
#: the wide layout is used while its extra GEMM columns stay under this share
WIDE_MAX_WASTE = 0.08
#: the row-split GEMM from this many columns on (below, its larger partial
#: results cost more than the im2col it saves) and this many products per
#: output and kernel row (below, its GEMM is too shallow: a 3-channel input)
ROWS_MIN_COLUMNS = 2048
ROWS_MIN_DEPTH = 32
#: the row-split GEMM runs over blocks of output rows of about this many wide
#: columns (measured, 1 thread, UNet's 16-64 channel 3x3 convs at 128x128 and
#: 256x256 with the ReLU fused: blocks of 4k-8k columns 0.9-0.95x the
#: unblocked time; of 1k-2k, 1.1-1.5x: the GEMMs get too short)
ROWS_BLOCK_COLUMNS = 8192
#: the methods that finish with a copy out of a GEMM result: they write a
#: channels-last result at about the channels-first cost (measured, 1 thread:
#: YOLO's 32-channel 3x3 conv at 160x160, rows, 5.84 vs 5.79 ms; ResNet's
#: 7x7/2 stem, wide, about even) instead of a transpose after the conv
COPIES_OUT = frozenset({"wide", "rows"})


def writes_channels_last(plan) -> bool:
    """Whether ``plan``'s method writes a channels-last result itself: the copy-out methods
    (:data:`COPIES_OUT`) and the strided one without wide rows, whose GEMM then runs the other way
    round (:func:`.conv_strided.run_strided_channels_last`); the others stage a channels-first one."""
    return plan.method in COPIES_OUT or conv_strided.transposes_in_gemm(plan)


# ---------------------------------------------------------------- plans

@dataclass(frozen=True)
class ConvPlan:
    """How one conv geometry runs; see the module docstring."""

    method: str                 # "wide" | "rows" | "compact" | "depthwise" | "depthwise_cl"
    source_is_input: bool       # taps read the input itself (no padded copy)
    plane: tuple[int, ...]      # U: the (phase) plane's spatial shape
    phases: int                 # phase planes in the padded copy
    fills: tuple                # per phase: (dst index, src index) of its data, or None
    zeros: tuple                # per phase: index tuples of its zero padding
    taps: tuple                 # per tap: (phase, flat offset F, window slices)
    q: int                      # columns of a wide tap slice
    lengths: tuple[int, ...]    # L: output spatial shape
    rows: tuple | None = None   # when "rows" can run: (kernel rows, flat shift per row, one row's tap offsets)
    cl: conv_depthwise.DepthwisePlan | None = None    # depthwise: the channel-last layout
    strided: conv_strided.StridedGeometry | None = None     # not depthwise: the window over the padded input

    @property
    def pixels(self) -> int:
        return math.prod(self.lengths)

    @property
    def plane_strides(self) -> tuple[int, ...]:
        return _row_major(self.plane)


def _row_major(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=1024)
def conv_plan(spatial: tuple, kernel: tuple, strides: tuple, dilation: tuple, begins: tuple,
              ends: tuple, lengths: tuple, depthwise: bool, per_group: int = 1,
              channels: int = 0) -> ConvPlan:
    """The layout and method for a conv of this geometry (cached); ``per_group``
    is the input channels per group, ``channels`` the input channels (it
    picks the depthwise layout)."""
    n = len(spatial)
    plane = tuple(m + (k - 1) * d // s for m, k, s, d in zip(lengths, kernel, strides, dilation))
    source_is_input = (all(s == 1 for s in strides) and not any(begins) and not any(ends)
                       and plane == tuple(spatial))
    phase_of: dict[tuple, int] = {}
    taps = []
    pstrides = _row_major(plane)
    for tap in itertools.product(*(range(k) for k in kernel)):
        phase = tuple(t * d % s for t, s, d in zip(tap, strides, dilation))
        offset = tuple(t * d // s for t, s, d in zip(tap, strides, dilation))
        slot = phase_of.setdefault(phase, len(phase_of))
        flat = sum(o * st for o, st in zip(offset, pstrides))
        window = tuple(slice(o, o + m) for o, m in zip(offset, lengths))
        taps.append((slot, flat, window))
    fills, zeros = [], []
    for phase in phase_of:
        dst, src, pad = [], [], []
        for i, (x, a, s, b, u) in enumerate(zip(spatial, phase, strides, begins, plane)):
            lo = max(0, -(-(b - a) // s))
            hi = min(u, -(-(x + b - a) // s))
            hi = max(hi, lo)
            start = lo * s + a - b
            dst.append(slice(lo, hi))
            src.append(slice(start, start + (hi - lo - 1) * s + 1 if hi > lo else start, s))
            full = [slice(None)] * n
            if lo > 0:
                pad.append(tuple(full[:i] + [slice(0, lo)] + full[i + 1:]))
            if hi < u:
                pad.append(tuple(full[:i] + [slice(hi, u)] + full[i + 1:]))
        empty = any(d.stop <= d.start for d in dst)
        fills.append(None if empty else (tuple(dst), tuple(src)))
        zeros.append(((slice(None),) * n,) if empty else tuple(pad))
    q = sum((m - 1) * st for m, st in zip(lengths, pstrides)) + 1
    pixels = math.prod(lengths)
    rows = None
    if len(phase_of) == 1 and kernel[0] > 1:
        shift = dilation[0] // strides[0] * pstrides[0]
        rows = (kernel[0], shift, tuple(flat for _, flat, _ in taps[:len(taps) // kernel[0]]))
    cl = strided = None
    # im2col by one strided copy and one (batched) GEMM: on small convs, depthwise ones included,
    # the fewest numpy calls (a small depthwise conv: 2-6x the per-tap multiply-adds' speed)
    limit = conv_strided.MAX_COLUMN_VALUES if depthwise else conv_strided.MAX_DENSE_COLUMN_VALUES
    small = (len(taps) > 1 or not source_is_input) and 0 < channels * len(taps) * pixels <= limit
    if not depthwise or small:
        wide = conv_wide.wide_geometry(spatial, begins, ends, kernel, strides, dilation, lengths)
        strided = conv_strided.StridedGeometry(tuple(spatial), tuple(begins), tuple(ends), tuple(kernel),
                                               tuple(strides), tuple(dilation), wide)
    if depthwise and not small:
        cl = conv_depthwise.depthwise_plan(spatial, kernel, strides, dilation, begins, lengths, channels, False)
        method = "depthwise_cl" if channels >= CL_MIN_CHANNELS_PER_PIXEL * pixels or pixels <= CL_MAX_PIXELS \
            else "depthwise"
    elif small:
        method = "strided"
    elif q > pixels * (1 + WIDE_MAX_WASTE):
        method = "compact"          # too many extra columns
    elif rows is not None and q >= ROWS_MIN_COLUMNS and per_group * len(rows[2]) >= ROWS_MIN_DEPTH:
        method = "rows"
    elif q == pixels:
        method = "compact"          # no extra columns: the windows are the rows
    else:
        method = "wide"
    return ConvPlan(method, source_is_input, plane, len(phase_of), tuple(fills), tuple(zeros),
                    tuple(taps), q, tuple(lengths), None if depthwise else rows, cl, strided)


# ---------------------------------------------------------------- running a plan

def scratch_layouts(plan: ConvPlan, batch, channels: int, out_channels: int, dtype,
                    channels_last: bool = False) -> list:
    """The ``(shape, dtype)`` scratch arrays :func:`run_conv` takes for ``plan``:
    the padded (phase) planes unless the taps read the input, then the
    method's im2col columns and GEMM result; for a ``channels_last`` result
    of a method that does not copy out (:data:`COPIES_OUT`), last, the
    channels-first staging result. ``batch`` may be a symbolic dim (the
    compiler sizes the planned workspace with it)."""
    staging = [((batch, out_channels, *plan.lengths), dtype)] if channels_last and not writes_channels_last(plan) \
        else []
    return _method_layouts(plan, batch, channels, out_channels, dtype) + staging


def _method_layouts(plan: ConvPlan, batch, channels: int, out_channels: int, dtype) -> list:
    taps = len(plan.taps)
    method = plan.method
    if method == "depthwise_cl":
        return conv_depthwise.depthwise_cl_layouts(plan, batch, channels, dtype)
    if method == "strided":
        return conv_strided.strided_layouts(plan, batch, channels, out_channels, dtype)
    layouts = [] if plan.source_is_input else [((batch, plan.phases, channels, *plan.plane), dtype)]
    q = plan.q
    if method == "depthwise":
        block = max(1, min(channels, DEPTHWISE_BLOCK_BYTES // (2 * q * np.dtype(dtype).itemsize)))
        layouts += [((block, q), dtype), ((block, q), dtype)]
    elif method == "rows":       # one block of output rows of one image at a time
        kernel_rows, shift, row_taps = plan.rows
        span = _rows_block_columns(plan, rows_per_block(plan)) + (kernel_rows - 1) * shift
        if row_taps != (0,):
            layouts.append(((channels, len(row_taps), span), dtype))
        layouts.append(((out_channels * kernel_rows, span), dtype))
    elif method == "wide":
        if taps > 1:
            layouts.append(((batch, channels, taps, q), dtype))
        layouts.append(((batch, out_channels, q), dtype))
    elif taps > 1:
        layouts.append(((batch, channels, taps, *plan.lengths), dtype))
    return layouts


def rows_per_block(plan: ConvPlan) -> int:
    """Output rows (along the first spatial dim) per block of the row-split GEMM."""
    return max(1, min(plan.lengths[0], ROWS_BLOCK_COLUMNS // plan.plane_strides[0]))


def _rows_block_columns(plan: ConvPlan, rows: int) -> int:
    """Wide columns of a block of ``rows`` output rows: whole plane rows but
    the last, which ends where the output's last wide row does."""
    pitch = plan.plane_strides[0]
    return (rows - 1) * pitch + plan.q - (plan.lengths[0] - 1) * pitch


def run_conv(plan: ConvPlan, x: np.ndarray, weight: np.ndarray, groups: int, out: np.ndarray,
             bias: np.ndarray | None = None, workspace: np.ndarray | None = None, epilogue=None,
             channels_last: bool = False) -> None:
    """``out = conv(x, weight) (+ bias)``, with ``x`` and ``weight`` already in
    the working dtype; ``out`` may be of a lower precision (rounded once).
    ``bias`` (one value per output channel) is only given when ``out`` has
    the working dtype, so ``conv + bias`` rounds as the two ops would.
    ``epilogue(view)``, when given, transforms finished parts of ``out`` in
    place (an elementwise activation): the row-split GEMM applies it to each
    block of rows while it is in cache, the other methods to all of ``out``.
    ``channels_last``: ``out`` is ``(N, *spatial, O)`` (``x`` stays channels
    first). Scratch comes from ``workspace`` when given (see :func:`scratch_layouts`)."""
    _run_conv(plan, x, weight, groups, out, bias, workspace, epilogue, channels_last)
    if epilogue is not None and plan.method != "rows":
        epilogue(out)


def _run_conv(plan, x, weight, groups, out, bias, workspace, epilogue, channels_last) -> None:
    batch, channels = x.shape[:2]
    plane_size = math.prod(plan.plane)
    method = plan.method
    layouts = scratch_layouts(plan, batch, channels, weight.shape[0], x.dtype, channels_last)
    with Scratch(layouts, workspace) as arrays:
        arrays = list(arrays)
        if channels_last and conv_strided.transposes_in_gemm(plan):
            conv_strided.run_strided_channels_last(plan, x, weight, groups, out, bias, arrays)
            return
        if channels_last and method not in COPIES_OUT:
            staging = arrays.pop()
            # (a float16 result keeps the strided method, as its channels-first result does)
            _run_method(plan, x, weight, groups, staging, bias, arrays, None, plane_size,
                        small_cl=out.dtype == staging.dtype)
            np.copyto(out, np.moveaxis(staging, 1, -1), casting="unsafe")
            return
        _run_method(plan, x, weight, groups, out, bias, arrays, epilogue, plane_size, channels_last)


def _run_method(plan, x, weight, groups, out, bias, arrays, epilogue, plane_size, channels_last=False,
                small_cl=True) -> None:
    """``plan``'s method into ``out``; a small strided conv (``small_cl``) channels last inside when
    :func:`.conv_small_cl.applies` (as the specialized runner: the same bits)."""
    batch, channels = x.shape[:2]
    method = plan.method
    if method == "depthwise_cl":
        conv_depthwise.depthwise_cl(plan, x, weight, out, bias, arrays)
        return
    if method == "strided":
        if not (small_cl and conv_small_cl.runs_generic(plan, x, weight, groups, out, bias)):
            conv_strided.run_strided(plan, x, weight, groups, out, bias, arrays)
        return
    if plan.source_is_input:
        planes = np.ascontiguousarray(x).reshape(batch, 1, channels, plane_size)
    else:
        padded = arrays.pop(0)
        _fill(plan, x, padded)
        planes = padded.reshape(batch, plan.phases, channels, plane_size)
    if method == "depthwise":
        _depthwise_direct(plan, planes, weight, out, bias, *arrays)
    elif method == "wide":
        _wide_gemm(plan, planes, weight, groups, out, bias, arrays, channels_last)
    elif method == "rows":
        _rows_gemm(plan, planes, weight, groups, out, bias, arrays, epilogue, channels_last)
    else:
        _compact_gemm(plan, planes, weight, groups, out, bias, arrays)


def _fill(plan: ConvPlan, x: np.ndarray, padded: np.ndarray) -> None:
    """The padded (phase) planes of ``x``: data copied in, padding zeroed."""
    lead = (slice(None), slice(None))
    for slot, (fill, zeros) in enumerate(zip(plan.fills, plan.zeros)):
        target = padded[:, slot]
        for region in zeros:
            target[lead + region] = 0
        if fill is not None:
            dst, src = fill
            target[lead + dst] = x[lead + src]


def _scatter_out(plan: ConvPlan, result: np.ndarray, out: np.ndarray, bias, channels_last: bool = False) -> None:
    """Copy the valid pixels of wide ``result`` (N, O, Q) into ``out`` (+ bias)."""
    if channels_last:
        _scatter_channels_last(plan, plan.lengths, result[:, None], out, bias)
    else:
        _scatter(plan, result, result.shape[:2], result.strides[:2], out, bias)


def _scatter_channels_last(plan: ConvPlan, lengths: tuple, result: np.ndarray, out: np.ndarray, bias) -> None:
    """Copy the valid pixels of the wide rows ``result`` (N, G, O/G, columns)
    into the channels-last ``out`` (N, *lengths, O): the bias is added in
    place first (the sums :func:`_scatter` makes), then one copy reads the
    result transposed and writes ``out`` contiguously (twice as fast as
    adding into a transposed view of ``out``, measured)."""
    if bias is not None:
        np.add(result, bias.reshape(result.shape[1:3] + (1,)), out=result)
    item = result.itemsize
    valid = _as_strided(result, (result.shape[0], *lengths, *result.shape[1:3]),
                        (result.strides[0], *(s * item for s in plan.plane_strides), *result.strides[1:3]),
                        writeable=False)
    np.copyto(out.reshape(valid.shape), valid, casting="unsafe")


def _scatter(plan: ConvPlan, base: np.ndarray, lead: tuple, lead_strides: tuple, out: np.ndarray,
             bias) -> None:
    """Copy the valid pixels of the wide rows at ``base`` into ``out`` (+ bias):
    ``lead`` dims (with their byte strides) that flatten to out's (N, O),
    each ending in a wide row of ``plan.q`` columns."""
    item = base.itemsize
    shape = (*lead, *plan.lengths)
    valid = _as_strided(base, shape, (*lead_strides, *(s * item for s in plan.plane_strides)), writeable=False)
    target = out.reshape(shape)
    if bias is not None:
        np.add(valid, bias.reshape(lead[1:] + (1,) * len(plan.lengths)), out=target)
    else:
        np.copyto(target, valid, casting="unsafe")


def _tap_rows(plan: ConvPlan, planes: np.ndarray, tap) -> np.ndarray:
    slot, flat, _ = tap
    return planes[:, slot, :, flat:flat + plan.q]


def _depthwise_direct(plan, planes, weight, out, bias, acc, tmp) -> None:
    """Sum over taps of a wide slice times the channels' weights, a block of
    channels at a time (``acc``/``tmp`` rows) so the partial sums stay in cache."""
    batch, _, channels, _ = planes.shape
    block = acc.shape[0]
    w = weight.reshape(channels, len(plan.taps), 1)
    for n in range(batch):
        for c0 in range(0, channels, block):
            c1 = min(channels, c0 + block)
            a, t_ = acc[:c1 - c0], tmp[:c1 - c0]
            for t, (slot, flat, _) in enumerate(plan.taps):
                rows = planes[n, slot, c0:c1, flat:flat + plan.q]
                if t == 0:
                    np.multiply(rows, w[c0:c1, 0], out=a)
                else:
                    np.multiply(rows, w[c0:c1, t], out=t_)
                    a += t_
            _scatter(plan, a, (1, c1 - c0), (0, a.strides[0]), out[n:n + 1, c0:c1],
                     None if bias is None else bias[c0:c1])


def _wide_gemm(plan, planes, weight, groups, out, bias, arrays, channels_last=False) -> None:
    batch, _, channels, _ = planes.shape
    taps = len(plan.taps)
    out_channels = weight.shape[0]
    result = arrays[-1]
    if taps == 1:
        cols = _tap_rows(plan, planes, plan.taps[0])                   # (N, C, Q)
    else:
        cols = arrays[0]                                               # (N, C, T, Q)
        for t, tap in enumerate(plan.taps):
            cols[:, :, t] = _tap_rows(plan, planes, tap)
    k = channels // groups * taps
    w = weight.reshape(groups, out_channels // groups, k)
    np.matmul(w, cols.reshape(batch, groups, k, plan.q),
              out=result.reshape(batch, groups, out_channels // groups, plan.q))
    _scatter_out(plan, result, out, bias, channels_last)


def _rows_gemm(plan, planes, weight, groups, out, bias, arrays, epilogue=None, channels_last=False) -> None:
    """Per image and block of output rows: im2col over one kernel row's taps,
    one GEMM for every kernel row, the kernel rows' partial results summed
    (shifted by whole plane rows), then the valid pixels copied out (+ bias,
    then ``epilogue``) while the block is in cache; ``channels_last``: the
    copy out transposes them into ``out`` (N, *spatial, O)."""
    batch, _, channels, _ = planes.shape
    kernel_rows, shift, row_taps = plan.rows
    taps = len(row_taps)
    out_channels = weight.shape[0]
    per_group, outs = channels // groups, out_channels // groups
    pitch = plan.plane_strides[0]
    item = planes.itemsize
    valid_strides = tuple(s * item for s in plan.plane_strides)
    # weights (O, C/G, rows, *rest) -> (G, rows * O/G, C/G * rest): one GEMM for every kernel row
    w = weight.reshape(groups, outs, per_group, kernel_rows, taps).transpose(0, 3, 1, 2, 4)
    w = w.reshape(groups, kernel_rows * outs, per_group * taps)
    block, length0 = rows_per_block(plan), plan.lengths[0]
    bias_shape = (groups, outs) + (1,) * len(plan.lengths)
    for n in range(batch):
        for r0 in range(0, length0, block):
            rows = min(block, length0 - r0)
            q = _rows_block_columns(plan, rows)
            span = q + (kernel_rows - 1) * shift
            start = r0 * pitch
            if row_taps == (0,):
                cols = planes[n, 0, :, start:start + span]                          # (C, span)
            else:
                cols = arrays[0].reshape(-1)[:channels * taps * span].reshape(channels, taps, span)
                for t, flat in enumerate(row_taps):
                    cols[:, t] = planes[n, 0, :, start + flat:start + flat + span]
            partial = arrays[-1].reshape(-1)[:groups * kernel_rows * outs * span]
            partial = partial.reshape(groups, kernel_rows * outs, span)
            np.matmul(w, cols.reshape(groups, per_group * taps, span), out=partial)
            by_row = partial.reshape(groups, kernel_rows, outs, span)
            total = by_row[:, 0, :, :q]
            for i in range(1, kernel_rows):          # kernel row i reads i plane rows further on
                total += by_row[:, i, :, i * shift:i * shift + q]
            if channels_last:
                rows_out = out[n:n + 1, r0:r0 + rows]
                _scatter_channels_last(plan, (rows, *plan.lengths[1:]), total[None], rows_out, bias)
                if epilogue is not None:
                    epilogue(rows_out)
                continue
            valid = _as_strided(total, (groups, outs, rows, *plan.lengths[1:]),
                                (*total.strides[:2], *valid_strides), writeable=False)
            rows_out = out[n, :, r0:r0 + rows]
            target = rows_out.reshape(valid.shape)
            if bias is not None:
                np.add(valid, bias.reshape(bias_shape), out=target)
            else:
                np.copyto(target, valid, casting="unsafe")
            if epilogue is not None:
                epilogue(rows_out)


def _compact_gemm(plan, planes, weight, groups, out, bias, arrays) -> None:
    channels = planes.shape[2]
    taps = len(plan.taps)
    if taps == 1 and plan.q == plan.pixels:
        cols = _tap_rows(plan, planes, plan.taps[0])
    else:
        cols = arrays[0]                                       # (N, C, T, *L)
        grid = planes.reshape(planes.shape[:3] + plan.plane)
        for t, (slot, _, window) in enumerate(plan.taps):
            cols[:, :, t] = grid[(slice(None), slot, slice(None)) + window]
    conv_strided.grouped_gemm(weight, cols, out, bias, groups, channels // groups * taps, plan.lengths)
