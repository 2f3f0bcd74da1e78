"""A strided conv's im2col from the column phases of its input: every tap copies whole runs.

The strided method (:mod:`.conv_strided`) copies its im2col columns ``(N, C,
*kernel, *lengths)`` from a window of the zero-padded input whose last axis
steps by the stride: with a stride of 2 every value is read alone (a CNN's
3x3/2 stem on 3 channels at 61x96: 40k values, 13 us, as long as its GEMM).
Split the padded input's last axis into its ``s`` phases instead (phase ``b``
holds the padded columns ``b + s * v``, ``v`` < the output width plus ``(kw -
1) // s``): tap ``j`` of output column ``x`` reads column ``x + j // s`` of
phase ``j % s``, a contiguous run of the output's width, copied as one void
item per output row. The split reads each input value once, straight from the
input (no padded copy: the phases' padding is the instruction's own, zeroed
once); the im2col reads ``kw / s`` times as many, by whole runs. It pays when
a phase has more than one tap (``kw > s``; a 4x4/4 patchify's split would be
its im2col again) and output rows are at least two values long. The columns
are the same values, so the GEMM and all after it are unchanged (bit for bit
the generic kernel). A conv whose plan reads wide phase planes (a 7x7/2 stem)
takes the column phases instead where they apply (:func:`replaces_wide`).
Measured in docs/design-notes.md ("Column phases for strided stems",
"Wide-phase stems on column phases").
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

_as_strided = np.lib.stride_tricks.as_strided

#: the phase planes of at most this many bytes: the instruction's own, zeroed once (a 3-channel
#: stem up to ~290x290, batch 1)
MAX_PLANES_BYTES = 1 << 20
#: from this many column values per image on: below, the split's extra calls (a copy per phase
#: in and out, ~1.5 us) cost what the runs save (measured, 1 thread: 3 channels at 32x48, 10k
#: values, even; 8 channels at 32x32, 18k, 0.95x; the 61x96 stems, 40k, 0.83-0.92x)
MIN_COLUMN_VALUES = 1 << 14
#: and output rows of at least this many values (the runs: rows of 12 even, 16 0.96x, 24-50
#: 0.83-0.95x)
MIN_WIDTH = 16


def applies(plan, channels: int) -> bool:
    """Whether :func:`filler` makes the columns of ``plan`` (the strided method without wide rows):
    a last-axis stride of 2 or more without dilation there, more taps along it than the stride,
    output rows of :data:`MIN_WIDTH` values or more, :data:`MIN_COLUMN_VALUES` column values per
    image or more."""
    geometry = getattr(plan, "strided", None)
    if plan.method != "strided" or geometry is None or geometry.wide is not None:
        return False
    stride, kernel = geometry.strides[-1], geometry.kernel[-1]
    return (stride >= 2 and geometry.dilation[-1] == 1 and kernel > stride and plan.lengths[-1] >= MIN_WIDTH
            and min(plan.lengths) > 0 and len(plan.taps) * plan.pixels * channels >= MIN_COLUMN_VALUES)


def column_filler(plan, data_shape: tuple, cols: np.ndarray):
    """``fill(x)``: the strided method's im2col columns ``cols`` (``(N, C, taps, *lengths)``, any
    float dtype; ``x`` of ``data_shape``, converted as it is copied) by the column phases of ``x``,
    or None where it does not apply (:func:`applies`) or the phases would take more than
    :data:`MAX_PLANES_BYTES`."""
    if min(data_shape) <= 0 or not applies(plan, data_shape[1]):
        return None
    geometry = plan.strided
    stride = geometry.strides[-1]
    shape = _planes_shape(plan, data_shape)
    if math.prod(shape) * cols.itemsize > MAX_PLANES_BYTES:
        return None
    lead, width = shape[3:-1], shape[-1]
    planes = np.zeros(shape, cols.dtype)
    unsplit = (1,) * len(lead)
    fills = []
    for b in range(stride):
        placed = _phase_fill(geometry, (*lead, width), (0,) * len(lead) + (b,), unsplit + (stride,))
        if placed is not None:
            fills.append((planes[b][placed[0]], placed[1]))
    target = cols.reshape(cols.shape[:2] + geometry.kernel + plan.lengths)
    runs = np.dtype((np.void, plan.lengths[-1] * cols.itemsize))
    copies = []
    for b in range(stride):
        window = _phase_window(plan, planes[b], b)
        dst = target[(slice(None),) * (1 + len(geometry.kernel)) + (slice(b, None, stride),)]
        copies.append((dst.view(runs), window.view(runs)))
    copy = np.copyto

    def fill(x):
        for dst, src in fills:
            copy(dst, x[src])
        for dst, src in copies:
            copy(dst, src)
    return fill


def replaces_wide(plan, data_shape: tuple, itemsize: int) -> bool:
    """Whether a strided conv whose taps would read wide phase planes (:mod:`.conv_wide`: a 7x7/2 or
    5x5/2 stem) runs the strided method on column phases instead (:func:`without_wide`): where they
    apply (:func:`applies`) and their planes of ``itemsize`` values take at most
    :data:`MAX_PLANES_BYTES` (a larger batch keeps the wide phases). The GEMM then makes the output's
    pixels, not wide rows (ResNet's 7x7/2 stem at 61x96: 1488 columns, not 1578), straight into the
    output, and no padded copy or phase split is made. Asked by the specialized runner and the
    generic kernel alike (``conv_strided.run_strided``), so both take the same columns and GEMM."""
    geometry = getattr(plan, "strided", None)
    if plan.method != "strided" or geometry is None or geometry.wide is None \
            or all(s == 1 for s in geometry.wide.phases) or min(data_shape) <= 0:
        return False
    narrow = without_wide(plan)
    return applies(narrow, data_shape[1]) and math.prod(_planes_shape(narrow, data_shape)) * itemsize <= MAX_PLANES_BYTES


def without_wide(plan):
    """``plan`` with the strided method's plain columns (no wide rows)."""
    return dataclasses.replace(plan, strided=dataclasses.replace(plan.strided, wide=None))


def _planes_shape(plan, data_shape: tuple) -> tuple:
    """The column phase planes' shape: ``(stride, N, C, *padded leading dims, width)``, ``width``
    the output's plus ``(kw - 1) // stride``."""
    geometry = plan.strided
    stride, kernel = geometry.strides[-1], geometry.kernel[-1]
    lead = tuple(x + b + e for x, b, e in zip(geometry.spatial[:-1], geometry.begins[:-1], geometry.ends[:-1]))
    return (stride, *data_shape[:2], *lead, plan.lengths[-1] + (kernel - 1) // stride)


def _phase_fill(geometry, plane_spatial: tuple, phase: tuple, strides: tuple):
    """``(destination index, source index)``: where the input's values of ``phase`` (one per spatial
    dim, split by ``strides``: 1 for a dim not split) lie in its plane of spatial shape
    ``plane_spatial`` (the plane's ``v`` along a dim is the padded position ``phase + stride * v``,
    the input's ``phase + stride * v - begin``), and which of them; None when it holds none."""
    dst, src = [slice(None)] * 2, [slice(None)] * 2
    for a, s, b, x, u in zip(phase, strides, geometry.begins, geometry.spatial, plane_spatial):
        first = max(0, -(-(b - a) // s))
        start = a + s * first - b
        count = min(len(range(start, x, s)), u - first)
        if count <= 0:
            return None
        dst.append(slice(first, first + count))
        src.append(slice(start, start + s * (count - 1) + 1, s))
    return tuple(dst), tuple(src)


def _phase_window(plan, plane: np.ndarray, b: int) -> np.ndarray:
    """The taps ``j = b + s * t`` of phase ``b``'s ``plane`` over the output: ``(N, C, *kernel[:-1],
    taps of the phase, *lengths)``; tap ``t`` of output column ``x`` is the plane's column ``x + t``."""
    geometry = plan.strided
    stride = geometry.strides[-1]
    item, lead = plane.itemsize, plane.strides[2:-1]
    shape = plane.shape[:2] + geometry.kernel[:-1] + (len(range(b, geometry.kernel[-1], stride)),) + plan.lengths
    strides = plane.strides[:2] + tuple(s * d for s, d in zip(lead, geometry.dilation[:-1])) + (item,) \
        + tuple(s * t for s, t in zip(lead, geometry.strides[:-1])) + (item,)
    return _as_strided(plane, shape, strides, writeable=False)
