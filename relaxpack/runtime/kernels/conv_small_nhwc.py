"""Channels-last convs specialized per instruction: the runners :mod:`.conv_small` prepares for NHWC.

A channels-last CNN (ConvertLayout's regions: MobileNet, ShuffleNet,
EfficientNet at the zoo's 61x96 and below) runs dozens of small convs whose
numpy calls take a few microseconds each; the generic kernel adds as much
again in Python (the plan lookup, the scratch carving, the views, the bias
and activation dispatch). For the engine's ``pointwise``, ``gemm`` and
``depthwise`` methods (:mod:`.conv_nhwc`) the runner made here keeps the
views and makes only the method's numpy calls, the same calls in the same
order as the generic kernel (bit for bit its results), with changes of how,
not what: the im2col of ``gemm`` is one copy of an ``as_strided`` view of the
padded input instead of a copy per tap (as the channels-first ``strided``
method); a bound weight's or bias's tiled copies (the depthwise einsum's
weights tiled to whole rows, the bias tiled to rows of ``width * O`` values
or to the whole of a small output) are made once, in memory of the
instruction's own; a small GEMM is ``np.dot`` (matmul's sgemm call); copies
move whole rows or pixels as void items (the same bytes).
Any other call (winograd, taps, grouped non-depthwise convs, float16, a
layout change) returns None: the generic kernel runs it.
"""

from __future__ import annotations

import math

import numpy as np

from ..kept import keep
from . import gemm_panels
from ._math import EINSUM
from .conv_depthwise import SLOTS_MAX_CHANNELS, _einsums, depthwise_layouts
from .conv_nhwc import add_bias, rows_by_weight
from .tiled_operand import KEPT_SHAPES, tile_of

_as_strided = np.lib.stride_tricks.as_strided

#: the methods this module runs (``gemm`` only for groups == 1)
METHODS = frozenset({"pointwise", "gemm", "depthwise"})

#: a pixels-major GEMM ``(P, K) @ (K, O)`` of at most this many output values is ``np.dot`` (the same
#: sgemm call as ``np.matmul``'s, bit for bit, without its ~0.35 us of gufunc dispatch: 96 x 16 x 16
#: 1.40 -> 1.04 us); larger ones keep ``np.matmul``, which OpenBLAS runs faster there with few K
#: (1488 x 8 x 48: 13.7 against 14.9 us; measured, 1 thread)
DOT_MAX_VALUES = 1 << 14

#: a strided depthwise conv of fewer than :data:`.conv_depthwise.SLOTS_MAX_CHANNELS` channels whose
#: taps read runs of just its channels (outputs narrower than the slots' bar,
#: :data:`.conv_depthwise.SLOTS_MIN_WIDTH`) copies its taps into a tap-major im2col of at most this
#: many values and runs one einsum over each tap's run of the whole output (:func:`_depthwise_taps`).
#: Measured (1 thread, the runners, old -> new): 5x5/2 at (3, 8, 6, 36) with HardSwish 20.7 -> 14.1
#: us, 3x3/2 at (3, 4, 3, 48) 0.77x, (1, 4, 6, 32-48) 0.84-0.86x, (3, 4, 3, 96-144) 0.91-0.93x,
#: (1, 4, 6, 96-144) 0.97-0.99x; from 160 channels the runs are long already (192 channels 5x5/2
#: at (1, 4, 6): 1.04x), and with slots or at stride 1 it does not pay (0.97-1.46x)
TAPS_MAX_COLUMN_VALUES = 1 << 15

#: a depthwise or gemm conv's padded copy of at most this many bytes is the instruction's own (not
#: the shared workspace's), its padding zeroed once instead of every call (one to a few numpy calls
#: of a small conv's ~6-10)
OWN_PADDED_MAX_BYTES = 256 << 10


def layouts(plan, batch: int, channels: int, groups: int, dtype) -> list | None:
    """The scratch ``(shape, dtype)`` layouts of the runner for ``plan`` (a
    :class:`.conv_nhwc.NhwcPlan`), as :func:`.conv_nhwc.scratch_layouts` orders
    them for a direct result; None when this module does not run the plan."""
    if plan.method not in METHODS or (plan.method != "depthwise" and groups != 1):
        return None
    if plan.method == "depthwise":
        return depthwise_layouts(plan.dw, batch, channels, dtype)
    padded = [] if plan.source_is_input else [((batch, *plan.cl[0], channels), dtype)]
    if plan.method == "pointwise":
        return padded
    return padded + [((batch, *plan.lengths, plan.taps, channels), dtype)]


def prepare(plan, data, weight, bias, arrays: list, act, fixed_weight: bool, fixed_bias: bool):
    """``run(x, out)`` for this plan and these operands (``arrays``: the scratch of :func:`layouts`,
    carved); the bias and ``act`` (an in-place activation or None) applied after the conv."""
    pixels = data.shape[0] * math.prod(plan.lengths)
    width = plan.lengths[-1] if plan.lengths else 1
    finish = _finisher(bias, act, fixed_bias, width)
    if plan.method == "depthwise":
        return _depthwise(plan, data, weight, arrays, finish, fixed_weight)
    channels, out_channels = data.shape[-1], weight.shape[-1]
    padded = None if plan.source_is_input else arrays[0]
    own = padded is not None and padded.nbytes <= OWN_PADDED_MAX_BYTES
    if own:     # the instruction's own, its padding zeroed once (4 fills a call: ~1 us of a 2x3 conv's 8)
        padded = np.zeros(padded.shape, padded.dtype)
    fill = None if padded is None else _filler(plan, padded, zero=not own)
    w = weight.reshape(-1, out_channels)
    copy = np.copyto
    matmul = _by_weight(rows_product(pixels, w.shape[0], out_channels), w, fixed_weight, pixels)
    if plan.method == "pointwise":      # (a 1x1 conv of the whole input: never padded)
        seen = [None, None, None, None]     # the last x and out that are views (arena), their 2-d views

        def run(x, out):
            if x is not seen[0]:
                rows = x.reshape(-1, channels)
                if x.base is not None:
                    seen[0], seen[1] = x, rows
            else:
                rows = seen[1]
            if out is not seen[2]:
                target = out.reshape(-1, out_channels)
                if out.base is not None:
                    seen[2], seen[3] = out, target
            else:
                target = seen[3]
            matmul(rows, w, target)
            finish(out)
        return run
    cols = arrays[-1]
    pixels = cols.size // (plan.taps * channels)
    matmul = _by_weight(rows_product(pixels, w.shape[0], out_channels), w, fixed_weight, pixels)
    windows = _windows(plan, padded) if fill is not None else None
    dst = cols.reshape(windows.shape if windows is not None else
                       (data.shape[0], *plan.lengths, *plan.cl[1], channels))

    seen = [None, None]     # unpadded: the last x that is a view (arena), its windows

    def run(x, out):
        if fill is not None:
            fill(x)
            window = windows
        elif x is seen[0]:          # (as_strided costs ~2 us: more than a small copy)
            window = seen[1]
        else:
            window = _windows(plan, x)
            if x.base is not None:  # (an array owning its memory is not held past the call)
                seen[0], seen[1] = x, window
        copy(dst, window)
        matmul(cols.reshape(pixels, -1), w, out.reshape(pixels, out_channels))
        finish(out)
    return run


def _by_weight(product, weight: np.ndarray, fixed_weight: bool, pixels: int):
    """``product`` of :func:`rows_product`, or, where ``pixels`` rows by ``weight`` may take panels
    (:func:`.gemm_panels.considered`), :func:`.conv_nhwc.rows_by_weight` (the generic kernel's call:
    panels where they apply, the same bits), a bound weight's panels packed once."""
    if not gemm_panels.considered(pixels * weight.shape[0], weight):
        return product
    kept = [None] if fixed_weight else None
    return lambda a, b, out: rows_by_weight(a, b, out, kept)


def rows_product(rows: int, inner: int, columns: int):
    """``product(a, b, out)`` of a ``(rows, inner) @ (inner, columns)`` GEMM into ``out``: ``np.dot``
    for true matrices (no dim of 1, where either might take a vector routine) of at most
    :data:`DOT_MAX_VALUES` results, else ``np.matmul`` (its results are the same)."""
    if min(rows, inner, columns) >= 2 and rows * columns <= DOT_MAX_VALUES:
        return np.dot
    matmul = np.matmul
    return lambda a, b, out: matmul(a, b, out=out)


def _windows(plan, source: np.ndarray) -> np.ndarray:
    """The im2col view ``(N, *lengths, *kernel, C)`` of the (padded) input: tap ``t`` of output pixel ``p``."""
    (_, kernel, steps), spatial = plan.cl, source.strides[1:-1]
    return _as_strided(source, (source.shape[0], *plan.lengths, *kernel, source.shape[-1]),
                       (source.strides[0], *(s * st for (s, _), st in zip(steps, spatial)),
                        *(d * st for (_, d), st in zip(steps, spatial)), source.strides[-1]), writeable=False)


def _filler(plan, padded: np.ndarray, zero: bool = True):
    """``fill(x)``: ``x`` copied into ``padded`` at the plan's offsets, the rest zeroed where ``zero``
    (the scratch is shared with other instructions: the zeros are written every call; False: a
    buffer of the instruction's own, zeroed once)."""
    _, (dst, src), zeros = plan.fill
    regions = [padded[(slice(None),) + region] for region in zeros] if zero else []
    inner = None if dst is None else padded[(slice(None),) + dst]
    src = None if src is None else (slice(None),) + src

    def fill(x):
        for region in regions:
            region.fill(0)
        if inner is not None:
            np.copyto(inner, x[src])
    return fill


def _depthwise(plan, data, weight, arrays: list, finish, fixed_weight: bool):
    """:func:`.conv_depthwise.run_depthwise` with its views, and a bound weight's tiles, made once;
    a padded copy of at most :data:`OWN_PADDED_MAX_BYTES` is the instruction's own, its padding
    zeroed once."""
    dw = plan.dw
    channels = data.shape[-1]
    specs = _einsums(dw, data.shape[0], channels, data.dtype)
    arrays = list(arrays)
    buffer = None if dw.reads_input else arrays.pop(0)
    second = arrays.pop(0) if len(specs) > 1 else None
    w_all = weight.reshape(*weight.shape[:-2], channels)
    own = buffer is not None and buffer.nbytes <= OWN_PADDED_MAX_BYTES
    if own:
        buffer = np.zeros(buffer.shape, buffer.dtype)
    steps = []      # per phase: (view or view spec, weights, (tiles, weight view) or None, subscripts, target shape)
    for i, spec in enumerate(specs):
        shape, strides, offset = spec.view
        view = None if buffer is None else np.ndarray(shape, buffer.dtype, buffer, offset, strides)
        w = w_all[spec.taps]
        if spec.tiled is not None:
            tiled = arrays[i].reshape(spec.tiled)
            if fixed_weight:        # tiled once, into memory of this instruction's own
                tiled = np.empty(spec.tiled, weight.dtype)
                np.copyto(tiled, w[..., None, :])
                w, refill = tiled.reshape(*spec.tiled[:-2], -1), None
            else:
                w, refill = tiled.reshape(*spec.tiled[:-2], -1), (tiled, w[..., None, :])
        else:
            refill = None
        steps.append((view, spec.view, w, refill, spec.subscripts, spec.target))
    if buffer is not None and len(steps) == 1 and steps[0][3] is None:
        if dw.row_step > 1 and fixed_weight and channels < SLOTS_MAX_CHANNELS and \
                math.prod(dw.kernel) * data.shape[0] * math.prod(dw.lengths) * channels <= TAPS_MAX_COLUMN_VALUES:
            return _depthwise_taps(dw, buffer, w_all, own, finish, data.shape[0])
        return _depthwise_one(dw, buffer, steps[0], own, finish)
    fill = None if buffer is None else _depthwise_filler(dw, buffer, zero=not own)
    einsum, add, copy = EINSUM, np.add, np.copyto

    def run(x, out):
        if fill is not None:
            fill(x)
            source = buffer
        else:
            source = np.ascontiguousarray(x)
        for i, (view, spec_view, w, refill, subscripts, target_shape) in enumerate(steps):
            if view is None:
                shape, strides, offset = spec_view
                view = np.ndarray(shape, source.dtype, source, offset, strides)
            if refill is not None:
                copy(*refill)
            target = out if i == 0 else second
            einsum(subscripts, view, w, out=target.reshape(target_shape))
            if i:
                add(out, second, out=out)
        finish(out)
    return run


def _depthwise_one(dw, buffer: np.ndarray, step, own: bool, finish):
    """The runner of a depthwise conv that is one einsum over a padded copy with bound weights
    (stride 1, or a strided conv's slots): the fill's copies, the einsum, the bias and
    activation; the views of an input and an output that are views (an arena's: the same
    objects run after run) kept."""
    view, _, w, _, subscripts, target_shape = step
    fill = _one_filler(dw, buffer, own)
    einsum = EINSUM
    seen = [None, None]     # the last out that is a view, its target

    def run(x, out):
        fill(x)
        if out is seen[0]:
            target = seen[1]
        else:
            target = out.reshape(target_shape)
            if out.base is not None:
                seen[0], seen[1] = out, target
        einsum(subscripts, view, w, out=target)
        finish(out)
    return run


def _one_filler(dw, buffer: np.ndarray, own: bool):
    """``fill(x)``: ``x`` copied into the padded ``buffer`` (its padding zeroed unless ``own``: zeroed
    once), as :func:`_depthwise_filler`; the source views of an ``x`` that is a view (an arena's: the
    same object run after run) kept, its rows then copied as void items."""
    regions = [] if own else [buffer[(slice(None),) + region] for region in dw.zeros]
    fills = [(buffer[(slice(None),) + dst], (slice(None),) + src) for dst, src in
             (f for f in dw.fills if f is not None)]
    copy = np.copyto
    seen = [None, None]     # the last x that is a view, its sources

    def fill(x):
        for region in regions:
            region.fill(0)
        if x is seen[0]:
            sources = seen[1]
        else:
            sources = [as_channel_runs(dst, x[src]) for dst, src in fills]
            if x.base is not None:      # (an array owning its memory is not held past the call)
                # kept: rows as items too (making their views costs ~2.5 us, more than they save once)
                sources = [as_row_runs(*pair) if pair[0] is dst else pair for dst, pair in
                           zip((dst for dst, _ in fills), sources)]
                seen[0], seen[1] = x, sources
        for dst, src in sources:
            copy(dst, src)
    return fill


def _depthwise_taps(dw, buffer: np.ndarray, w_all: np.ndarray, own: bool, finish, batch: int):
    """The runner of a strided depthwise conv whose taps read runs of its ``C`` channels (a plan
    with ``row_step`` > 1) and whose weight is bound: the padded copy, then every tap's values
    copied into a tap-major im2col ``(*kernel, N, *lengths, C)`` (one copy of void items of a
    pixel's channels), then one einsum summing, for each tap in turn, its run of the whole output
    times the weights tiled to it (made once): the einsum's inner loop runs once per tap, not once
    per tap, image, row and pixel. The same products added in the same order from zero as the
    plan's einsum (:func:`.conv_depthwise.run_depthwise`), bit for bit. (A plan whose taps read
    the input itself, unpadded, keeps the plan's einsum.)"""
    n = len(dw.lengths)
    item, channels = buffer.itemsize, buffer.shape[-1]
    strides = buffer.strides        # (N, *lead, phase, row, C)
    pitch, pixel = strides[1:n], strides[n + 1]
    step_last, dilation_last = dw.row_step, dw.groups[0][4]
    run_item = np.dtype((np.void, channels * item))
    taps = math.prod(dw.kernel)
    window = np.ndarray((*dw.kernel, batch, *dw.lengths), run_item, buffer, 0,
                        (*(d * p for (_, d), p in zip(dw.lead_steps, pitch)), dilation_last * pixel, strides[0],
                         *(s * p for (s, _), p in zip(dw.lead_steps, pitch)), step_last * pixel))
    cols = np.empty((taps, batch * math.prod(dw.lengths) * channels), buffer.dtype)
    cols_items = cols.view(run_item).reshape(window.shape)
    tiled = np.empty((taps, batch * math.prod(dw.lengths), channels), buffer.dtype)
    np.copyto(tiled, w_all.reshape(taps, 1, channels))
    tiled = tiled.reshape(taps, -1)
    fill = _one_filler(dw, buffer, own)
    einsum, copy = EINSUM, np.copyto
    seen = [None, None]     # the last out that is a view, its flat view

    def run(x, out):
        fill(x)
        copy(cols_items, window)
        if out is seen[0]:
            target = seen[1]
        else:
            target = out.reshape(-1)
            if out.base is not None:
                seen[0], seen[1] = out, target
        einsum("tQ,tQ->Q", cols, tiled, out=target)
        finish(out)
    return run


def _depthwise_filler(dw, buffer: np.ndarray, zero: bool = True):
    """``fill(x)`` as :func:`.conv_depthwise._fill`, its destination views made once; ``zero``
    False: the padding is left as it is (a buffer of the instruction's own, zeroed once)."""
    regions = [buffer[(slice(None),) + region] for region in dw.zeros] if zero else []
    fills = [(buffer[(slice(None),) + dst], (slice(None),) + src) for dst, src in
             (f for f in dw.fills if f is not None)]

    def fill(x):
        for region in regions:
            region.fill(0)
        for dst, src in fills:
            np.copyto(*as_channel_runs(dst, x[src]))
    return fill


def as_channel_runs(dst: np.ndarray, src: np.ndarray) -> tuple:
    """``(dst, src)`` for ``np.copyto``: when ``src`` reads runs of just its channels (a strided
    conv's slots or phases: every other pixel), both viewed with one void item per pixel, whose
    copy moves a pixel's run at once instead of looping over its values (31x48x16 every other
    column: 3.8 -> 1.5 us; rows already contiguous over pixels copy faster as they are, or by
    rows: :func:`as_row_runs`)."""
    item, channels = src.itemsize, src.shape[-1]
    if src.ndim < 2 or src.strides[-2] == channels * item or src.strides[-1] != item \
            or dst.strides[-1] != item or not channels:
        return dst, src
    run = np.dtype((np.void, channels * item))
    return dst.view(run), src.view(run)


def as_row_runs(dst: np.ndarray, src: np.ndarray, tail: int = 2) -> tuple:
    """``(dst, src)`` for ``np.copyto``: when both hold each row (their last ``tail`` axes:
    ``(W, C)`` channels last, ``(W,)`` channels first) as one contiguous run but not the rows after
    one another (a padded copy's interior, a wide result's valid pixels), both viewed with one
    void item per row: numpy's copy then loops over rows by item, not over their values by row
    (NHWC 31x48x16 1.46 -> 1.23 us; NCHW 16x31x48 2.9 -> 1.7, 16x16x24 1.3 -> 0.7; the same
    bytes). Anything else (other dtypes: a converting copy) as it is."""
    item = src.itemsize
    if src.ndim <= tail or src.shape != dst.shape or src.dtype != dst.dtype or 0 in src.shape:
        return dst, src
    shape = src.shape[-tail:]
    runs = [item]
    for n in reversed(shape):
        runs.insert(0, runs[0] * n)
    if list(src.strides[-tail:]) != runs[1:] or list(dst.strides[-tail:]) != runs[1:] \
            or (src.strides[-tail - 1] == runs[0] and dst.strides[-tail - 1] == runs[0]):
        return dst, src
    row = np.dtype((np.void, runs[0]))
    views = []
    for a in (dst, src):
        view = a.view()
        view.shape = a.shape[:-tail] + (runs[0] // item,)     # (raises rather than copy)
        views.append(view.view(row))
    return tuple(views)


def _finisher(bias, act, fixed_bias: bool, width: int):
    """``finish(out)``: ``out += bias``, then ``act(out)``. A bound bias is added as a tile of
    ``out``'s whole shape (:func:`.tiled_operand.tile_of`, made once per shape: numpy's same-shape
    loop, half the time of rows of ``width * O`` values at 2k-55k values), past its size bar as
    those rows (tiled once)."""
    if bias is None:
        return act if act is not None else (lambda out: None)
    if fixed_bias:
        tiled = np.tile(bias, width)
        rows = tiled.size
        add = np.add
        seen = [None, None, None]   # the last out that is a view (an arena's: the same each run), target, addend
        wholes: dict = {}           # out's shape -> its whole tile (or None past the bar)

        def finish(out):
            if out is seen[0]:
                target, addend = seen[1], seen[2]
            else:
                whole = wholes.get(out.shape, wholes)
                if whole is wholes:
                    whole = keep(wholes, out.shape, tile_of(bias, out), KEPT_SHAPES)
                target, addend = (out, whole) if whole is not None else (out.reshape(-1, rows), tiled)
                if out.base is not None:    # (an array owning its memory is not held past the call)
                    seen[:] = out, target, addend
            add(target, addend, target)     # (out positional: ~0.15 us less)
            if act is not None:
                act(out)
        return finish

    def finish(out):
        add_bias(out, bias)
        if act is not None:
            act(out)
    return finish

