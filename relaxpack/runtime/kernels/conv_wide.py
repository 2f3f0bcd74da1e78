"""The strided method on wide rows: a small 2-d conv's im2col in long contiguous runs.

The strided method (:mod:`.conv_strided`) copies the im2col columns
``(N, C, kh, kw, H, W)`` out of the padded input in one call, but numpy then
loops over rows of ``W`` values (a 3x3 conv on a 16x24 plane: 3456 runs of
24). When the conv has unit strides, the padded plane flattened row-major
holds every tap's window as one run: tap ``(i, j)`` of output pixel
``(y, x)`` is ``padded[y * P + x + i * d0 * P + j * d1]`` (``P`` the padded
width), so a tap's columns are the ``q = (H - 1) * P + W`` values from
``i * d0 * P + j * d1``; output row ``y`` is columns ``y * P .. y * P + W``
and the ``P - W`` between rows are not pixels ("wide" rows, as the engine's
``wide`` method). The copy then loops over ``C * kh * kw`` runs of ``q``
values (3x faster on the zoo's 61x96 CNNs), the GEMM makes ``q`` columns
instead of ``H * W`` (``P / W`` times as many: 8% at width 24), and the
valid pixels are copied out of the wide result, the bias and a ReLU applied
before (in place, in cache; then the copy moves whole rows). A strided conv (ResNet's
7x7/2 stem) first splits the padded copy into its stride's phases (phase
``(a, b)`` holds the padded positions ``(a + s0 * u, b + s1 * v)``, as the
engine's planes): the taps of one phase are then a wide window of its plane,
one copy per phase (where the column phases apply, the runners take those instead:
:func:`.conv_column_phases.replaces_wide`). Measured in docs/design-notes.md ("Wide
rows for the strided method").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .gemm_blocks import SMALL_GEMM_PRODUCTS, block_calls
from .tiled_operand import tile_of

_as_strided = np.lib.stride_tricks.as_strided

#: wide rows while the GEMM's columns are at most this many times the output's pixels (both rounded up
#: to :data:`COLUMN_MULTIPLE`; on a large plane: the pitch against the output width)
MAX_PITCH_RATIO = 1.5
#: a stride-1 conv's GEMM takes its wide columns rounded up to a multiple of this: OpenBLAS's sgemm
#: (Haswell/Zen kernels) runs a column count that is not a multiple of 8 with a slow edge kernel, a
#: fixed cost of ~1.2 us at 32 x 288 and ~3.4 us at 64 x 576 (30 columns 7.9 us, 32 6.7; 6 columns 4.0,
#: 8 2.7). The extra columns read the zero rows added below the padded plane, and are not copied out.
COLUMN_MULTIPLE = 8
#: a strided conv takes phases from this many taps per phase on (measured, 1 thread, the runner: 7x7/2
#: stems 0.7-0.8x the time from 32x32 to 64x96 and batch 3, 5x5/2 0.72-0.85x; 3x3/2, 2.25 taps a
#: phase, 1.0-1.1x: the phase split and a copy per phase cost what the copy saves; 4x4/4 1.3x)
PHASES_MIN_TAPS = 4
#: a stride-1 conv that halves its channels or more (from 16 input channels on), whose one GEMM is
#: above the small-matrix bar, stacks its kernel rows (:func:`stacks_rows`) while the rows' span is
#: at most this many times the columns
STACK_MAX_SPAN_RATIO = 1.15
STACK_MIN_CHANNELS = 16


@dataclass(frozen=True)
class WideGeometry:
    """Where a conv's wide rows are: ``q`` columns per image, read from planes of rows of ``pitch``
    values, the padded copy of spatial shape ``padded`` split into ``phases`` (its strides; (1, 1):
    the padded copy is the plane) of ``plane`` shape; the GEMM makes ``columns`` (``q`` or more:
    :data:`COLUMN_MULTIPLE`)."""

    q: int
    pitch: int
    padded: tuple
    phases: tuple
    plane: tuple
    columns: int


def wide_geometry(spatial: tuple, begins: tuple, ends: tuple, kernel: tuple, strides: tuple, dilation: tuple,
                  lengths: tuple) -> WideGeometry | None:
    """The wide rows of a strided-method conv of this geometry, when its taps
    can read them: two spatial dims; unit strides and padding (the padded copy is the plane they
    read), or strides without dilation and :data:`PHASES_MIN_TAPS` taps a phase or more; rows at
    most :data:`MAX_PITCH_RATIO` times the output width. None otherwise."""
    if len(spatial) != 2 or min(lengths) <= 0:
        return None
    padded = tuple(x + b + e for x, b, e in zip(spatial, begins, ends))
    pitch = padded[1] if all(s == 1 for s in strides) else lengths[1] + (kernel[1] - 1) // strides[1]
    q = (lengths[0] - 1) * pitch + lengths[1]
    if all(s == 1 for s in strides):
        if not any(tuple(begins) + tuple(ends)):
            return None
        columns = _round_up(q, COLUMN_MULTIPLE)
        # the last tap's window ends at the padded plane's end: the extra columns read zero rows below it
        padded = (padded[0] + -(-(columns - q) // pitch), padded[1])
        phases, plane = (1, 1), padded
    else:
        if any(d != 1 for d in dilation) or kernel[0] * kernel[1] < PHASES_MIN_TAPS * strides[0] * strides[1]:
            return None
        phases, columns = tuple(strides), q
        plane = tuple(n + (k - 1) // s for n, k, s in zip(lengths, kernel, strides))
        padded = tuple(s * max(u, -(-p // s)) for s, u, p in zip(strides, plane, padded))
    if columns > MAX_PITCH_RATIO * _round_up(lengths[0] * lengths[1], COLUMN_MULTIPLE):
        return None
    return WideGeometry(q, pitch, padded, phases, plane, columns)


def never_wide(kernel: tuple, strides, dilation) -> bool:
    """Whether :func:`wide_geometry` gives no wide rows to a conv of this kernel, strides and
    dilation (ints or one per spatial dim) at any size: not 2-d, or strided with dilation or fewer
    than :data:`PHASES_MIN_TAPS` taps a phase (a 3x3/2 stem)."""
    if len(kernel) != 2:
        return True
    strides, dilation = (tuple(v) if isinstance(v, (tuple, list)) else (int(v),) * 2 for v in (strides, dilation))
    if all(s == 1 for s in strides):
        return False
    return any(d != 1 for d in dilation) or kernel[0] * kernel[1] < PHASES_MIN_TAPS * strides[0] * strides[1]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def stacks_rows(plan, channels: int, out_channels: int) -> bool:
    """Whether a stride-1 wide conv multiplies its kernel rows stacked: one GEMM ``(kh * O, C * kw)
    @ (C * kw, span)`` over the columns of one kernel row's taps (a ``span`` of ``columns + (kh - 1)
    * d * pitch``), whose kernel rows' partial results are then summed shifted by whole plane rows
    (the engine's ``rows`` method on wide rows). A third of the im2col copy, and a GEMM of 3x the
    rows and a third of the depth, which OpenBLAS runs faster where the conv has few output
    channels (UNet's decoder convs after a concat, 1 thread: 16 -> 8 channels at 64x40 55 -> 46
    us, 32 -> 16 at 32x20 54 -> 42, 64 -> 32 at 16x10 50 -> 45; the same 16 -> 16 at 32x20 21 ->
    24, 16 -> 16 at 16x24 12 -> 17; a GEMM under OpenBLAS's small-matrix bar, DenseNet's 16 -> 8
    at 16x24, 10.8 -> 12.6: hence the bars)."""
    wide, geometry = plan.strided.wide, plan.strided
    return (wide.phases == (1, 1) and geometry.kernel[0] > 1 and channels >= STACK_MIN_CHANNELS
            and 2 * out_channels <= channels and _span(plan) <= STACK_MAX_SPAN_RATIO * wide.columns
            and out_channels * channels * len(plan.taps) * wide.columns > SMALL_GEMM_PRODUCTS)


def _span(plan) -> int:
    geometry = plan.strided
    return geometry.wide.columns + (geometry.kernel[0] - 1) * geometry.dilation[0] * geometry.wide.pitch


def wide_layouts(plan, batch, channels: int, out_channels: int, dtype) -> list:
    """The zero-padded input, its phase planes (strided convs), the columns ``(N, C, taps, columns)``
    and the wide result ``(N, O, columns)``; with stacked rows (:func:`stacks_rows`) the padded
    input, the columns ``(N, C, kw, span)``, the kernel rows' partial results ``(N, kh * O, span)``
    and the wide result."""
    wide = plan.strided.wide
    if stacks_rows(plan, channels, out_channels):
        kh, kw = plan.strided.kernel
        span = _span(plan)
        return [((batch, channels, *wide.padded), dtype), ((batch, channels, kw, span), dtype),
                ((batch, kh * out_channels, span), dtype), ((batch, out_channels, wide.columns), dtype)]
    phases = [] if wide.phases == (1, 1) else \
        [((wide.phases[0] * wide.phases[1], batch, channels, wide.plane[0] * wide.plane[1]), dtype)]
    return [((batch, channels, *wide.padded), dtype), *phases,
            ((batch, channels, len(plan.taps), wide.columns), dtype), ((batch, out_channels, wide.columns), dtype)]


def interior(plan, padded: np.ndarray) -> np.ndarray:
    """The input's place in the padded copy."""
    geometry = plan.strided
    return padded[(slice(None), slice(None)) + tuple(
        slice(b, b + n) for b, n in zip(geometry.begins, geometry.spatial))]


def copies(plan, arrays) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(destination, source)`` of the copies after the padded copy's fill: the phase split (strided
    convs), then the taps' wide windows into the columns, one per phase."""
    geometry, wide = plan.strided, plan.strided.wide
    padded, cols = arrays[0], arrays[-2]
    batch, channels = padded.shape[:2]
    q, pitch, item = wide.columns, wide.pitch, padded.itemsize
    if stacks_rows(plan, channels, arrays[-1].shape[1]):       # one kernel row's taps, over the span
        cols = arrays[1]
        return [(cols, _as_strided(padded, cols.shape, padded.strides[:2] + (geometry.dilation[1] * item, item),
                                   writeable=False))]
    columns = cols.reshape(batch, channels, *geometry.kernel, q)
    if wide.phases == (1, 1):
        window = _as_strided(padded, columns.shape, padded.strides[:2] + (
            geometry.dilation[0] * pitch * item, geometry.dilation[1] * item, item), writeable=False)
        return [(columns, window)]
    (s0, s1), (u0, u1) = wide.phases, wide.plane
    planes = arrays[1]
    split = padded.reshape(batch, channels, wide.padded[0] // s0, s0, wide.padded[1] // s1, s1)
    result = [(planes.reshape(s0, s1, batch, channels, u0, u1), split[:, :, :u0, :, :u1].transpose(3, 5, 0, 1, 2, 4))]
    for a in range(s0):
        for b in range(s1):
            plane = planes[a * s1 + b]
            shape = (batch, channels, len(range(a, geometry.kernel[0], s0)), len(range(b, geometry.kernel[1], s1)), q)
            if 0 in shape:
                continue
            window = _as_strided(plane, shape, plane.strides[:2] + (pitch * item, item, item), writeable=False)
            result.append((columns[:, :, a::s0, b::s1], window))
    return result


def as_item_runs(dst: np.ndarray, src: np.ndarray) -> tuple:
    """``(dst, src)`` of one of :func:`copies`, each run of its last axis viewed as one void item
    when that axis is contiguous in both and of one dtype (the taps' wide windows: runs of
    ``columns`` values), so that numpy's copy loops over runs by item (the same bytes: 16 -> 16
    channels at 16x24 4.4 -> 3.9 us, 32 at 4x6 3.2 -> 2.1); anything else (the phase split's
    transposing copy) as it is."""
    item = src.itemsize
    if (src.dtype != dst.dtype or src.ndim < 2 or src.shape != dst.shape or src.shape[-1] < 2
            or src.strides[-1] != item or dst.strides[-1] != item or 0 in src.shape):
        return dst, src
    run = np.dtype((np.void, src.shape[-1] * item))
    return dst.view(run), src.view(run)


def valid(plan, result: np.ndarray) -> np.ndarray:
    """The output pixels of the wide ``result`` ``(N, O, columns)``: ``(N, O, H, W)``, read-only."""
    item = result.itemsize
    return _as_strided(result, result.shape[:2] + tuple(plan.lengths),
                       result.strides[:2] + (plan.strided.wide.pitch * item, item), writeable=False)


def product_weight(plan, weight: np.ndarray, groups: int, arrays) -> np.ndarray:
    """The GEMM's left operand ``(groups, rows, depth)`` of ``weight`` (in the columns' dtype): its
    ``(O / g, C / g * taps)`` rows, or stacked rows ``(kh * O / g, C / g * kw)`` (a copy)."""
    work = arrays[-1].dtype
    out_channels, per_group = weight.shape[:2]
    if not stacks_rows(plan, arrays[0].shape[1], arrays[-1].shape[1]):
        return weight.astype(work, copy=False).reshape(groups, out_channels // groups, -1)
    kh, kw = plan.strided.kernel
    w = weight.reshape(groups, out_channels // groups, per_group, kh, kw).transpose(0, 3, 1, 2, 4)
    return np.ascontiguousarray(w, dtype=work).reshape(groups, kh * out_channels // groups, per_group * kw)


def product_calls(plan, w: np.ndarray, arrays) -> tuple[list, list]:
    """``(gemms, sums)``: the ``np.matmul(a, b, out=c)`` triples (:mod:`.gemm_blocks`' column blocks)
    of ``w`` (:func:`product_weight`) times the columns, then the ``np.add(a, b, out=c)`` triples
    that sum stacked rows' partial results into the wide result (none otherwise)."""
    groups, rows, depth = w.shape
    result = arrays[-1]
    batch, out_channels, q = result.shape
    target = result.reshape(batch, groups, out_channels // groups, q)
    if not stacks_rows(plan, arrays[0].shape[1], out_channels):
        return block_calls(w, arrays[-2].reshape(batch, groups, depth, q), target), []
    span, kh = arrays[2].shape[-1], plan.strided.kernel[0]
    gemms = block_calls(w, arrays[1].reshape(batch, groups, depth, span), arrays[2].reshape(batch, groups, rows, span))
    partial = arrays[2].reshape(batch, groups, kh, out_channels // groups, span)
    shift = plan.strided.dilation[0] * plan.strided.wide.pitch
    sums = [(partial[:, :, 0, :, :q], partial[:, :, 1, :, shift:shift + q], target)]
    sums += [(target, partial[:, :, i, :, i * shift:i * shift + q], target) for i in range(2, kh)]
    return gemms, sums


def run_wide(plan, x: np.ndarray, weight: np.ndarray, groups: int, out: np.ndarray, bias, arrays) -> None:
    """``out = conv(x, weight) (+ bias)`` from wide rows: padded copy (and its phases), one copy
    into the columns per phase, the (grouped) GEMM into the wide result (in :mod:`.gemm_blocks`'
    column blocks), the bias added there, the valid pixels copied out."""
    padded, result = arrays[0], arrays[-1]
    padded.fill(0)
    interior(plan, padded)[...] = x
    for dst, src in copies(plan, arrays):
        np.copyto(dst, src)
    out_channels = weight.shape[0]
    gemms, sums = product_calls(plan, product_weight(plan, weight, groups, arrays), arrays)
    for a, b, c in gemms:
        np.matmul(a, b, out=c)
    for a, b, c in sums:
        np.add(a, b, out=c)
    if bias is not None:
        np.add(result, bias.reshape(out_channels, 1), out=result)
    np.copyto(out, valid(plan, result), casting="unsafe")


def bias_row_layouts(plan, layouts: list, channels: int, out_channels: int) -> list | None:
    """:func:`wide_layouts`' ``layouts`` with the columns one row longer, ``(N, C * taps + 1,
    columns)``, for a conv whose bias is a term of its GEMM (:func:`prepare`'s ``bias_row``), or
    None where that does not apply (stacked rows)."""
    if stacks_rows(plan, channels, out_channels):
        return None
    (batch, c, taps, columns), dtype = layouts[-2]
    return [*layouts[:-2], ((batch, c * taps + 1, columns), dtype), layouts[-1]]


def _bias_row_operands(plan, weight, bias, groups: int, arrays: list) -> tuple:
    """``(arrays, w, ones)`` of a conv whose bias is a term of its GEMM: ``arrays`` with the
    columns ``(N, C, taps, columns)`` as a view of the first ``C * taps`` rows of the longer
    columns (:func:`bias_row_layouts`) that the copies fill, the weight ``(1, O, C * taps + 1)``
    whose last column is the bias, and the row of ones it multiplies, ``(N, columns)``."""
    cols = arrays[-2]
    batch, depth, columns = cols.shape
    item = cols.itemsize
    taps = np.ndarray((batch, depth - 1, columns), cols.dtype, cols, 0, cols.strides)
    inner = [*arrays[:-2], taps.reshape(batch, arrays[0].shape[1], len(plan.taps), columns), arrays[-1]]
    w = product_weight(plan, weight, groups, inner)
    wb = np.concatenate([w, bias.astype(w.dtype).reshape(1, -1, 1)], axis=2)
    ones = np.ndarray((batch, columns), cols.dtype, cols, (depth - 1) * columns * item, (cols.strides[0], item))
    return inner, wb, ones


def prepare(plan, weight, bias, groups: int, out, arrays, act, relu: bool, fixed_weight: bool,
            fixed_bias: bool = False, bias_row: bool = False):
    """The per-instruction runner ``run(x, out)`` of :func:`run_wide` (the same numpy calls, so the
    same results) for these operands: ``arrays`` its scratch (:func:`wide_layouts`, in the work
    dtype, float32 for a float16 ``out``); ``act`` the in-place activation, or with ``relu`` the
    ReLU as one clip of the whole wide result in place before the copy out by rows (float32/float64
    ``out``; a clip from the strided view of the valid pixels took 1.03-1.09x the time). A padded
    copy of at most :data:`~.conv_small_nhwc.OWN_PADDED_MAX_BYTES` is the instruction's own, zeroed once: each call
    writes its interior only. A bound bias (``fixed_bias``) is added to the wide result as a tile
    of its whole shape (:func:`.tiled_operand.tile_of`: numpy's same-shape loop, 2-3x a column's
    broadcast), the same values. ``bias_row`` (an exact conv's bound weight and bias, one group,
    ``arrays`` of :func:`bias_row_layouts`): the bias is the GEMM's last term, its weight's last
    column times a row of ones below the columns, instead of a pass over the result; every
    partial sum of an exact conv is an exact integer, so the sums are the same in any order."""
    from .conv_small_nhwc import OWN_PADDED_MAX_BYTES
    own = arrays[0].nbytes <= OWN_PADDED_MAX_BYTES
    if own:
        arrays = [np.zeros(arrays[0].shape, arrays[0].dtype), *arrays[1:]]
    ones = None
    if bias_row:
        full_columns = arrays[-2]
        arrays, w, ones = _bias_row_operands(plan, weight, bias, groups, arrays)
        bias = None
    padded, result = arrays[0], arrays[-1]
    work = result.dtype
    batch, out_channels, q = result.shape
    stacked = stacks_rows(plan, padded.shape[1], out_channels)
    if not bias_row:
        w = product_weight(plan, weight, groups, arrays)    # float16 or stacked rows: a copy
    # a weight computed at run time is converted or stacked again every call
    convert = (work != weight.dtype or stacked) and not fixed_weight
    inner = interior(plan, padded)
    moves = [as_item_runs(dst, src) for dst, src in copies(plan, arrays)]
    gemms, sums = product_calls(plan, w, arrays if ones is None else [*arrays[:-2], full_columns, result])
    wide_valid = valid(plan, result)
    bias_in_result = bias is not None and work == out.dtype
    bias_b = None if bias is None else bias.reshape((out_channels, 1) if bias_in_result else (out_channels, 1, 1))
    if bias_in_result and fixed_bias:
        whole = tile_of(bias_b, result)
        bias_b = bias_b if whole is None else whole
    copy, matmul, dot, add = np.copyto, np.matmul, np.dot, np.add
    # one image, one group, one call: a 2-d np.dot, the same sgemm call as matmul's (bit for bit)
    # without its ~0.4 us of batch iteration (as the strided runner's)
    a, b, c = gemms[0]
    single = (a[0], b[0, 0], c[0, 0]) if len(gemms) == 1 and batch == 1 and groups == 1 \
        and min(a.shape[-2], a.shape[-1], b.shape[-1]) >= 2 and c[0, 0].flags.c_contiguous else None
    # the copies in and out by rows as void items, where no conversion is made (same bytes)
    same = work == out.dtype
    row = np.dtype((np.void, inner.shape[-1] * inner.itemsize))
    inner_rows = inner.view(row) if same else None
    out_row = np.dtype((np.void, wide_valid.shape[-1] * wide_valid.itemsize))
    valid_rows = wide_valid.view(out_row) if same else None
    item = inner.itemsize
    if relu:
        from ._math import CLIP, scalar_array
        zero, inf = scalar_array(0, work), scalar_array(np.inf, work)      # (0-d: see ._constants)

    def run(x, out):
        if not own:
            padded.fill(0)
        if inner_rows is not None and x.dtype == work and x.strides[-1] == item:   # (an integer x: converted)
            copy(inner_rows, x.view(row))
        else:
            copy(inner, x)                      # (float16, integers: converted as it is copied)
        for dst, src in moves:
            copy(dst, src)
        if ones is not None:
            ones.fill(1)                        # (the columns are the shared workspace's)
        if convert:
            copy(w, product_weight(plan, weight, groups, arrays) if stacked else weight.reshape(w.shape))
        if single is not None:
            dot(*single)
        else:
            for gemm in gemms:
                matmul(*gemm[:2], out=gemm[2])
        for total in sums:
            add(*total[:2], out=total[2])
        if bias_in_result:
            add(result, bias_b, out=result)
        if relu:    # in place on the wide result (contiguous), then copied out by rows
            CLIP(result, zero, inf, out=result)
        if valid_rows is not None and out.dtype == work:
            copy(out.view(out_row), valid_rows)
        else:
            copy(out, wide_valid, casting="unsafe")     # the conv rounds, then the bias: as the generic kernel
        if bias_b is not None and not bias_in_result:
            add(out, bias_b, out=out)
        if act is not None:
            act(out)
    return run
