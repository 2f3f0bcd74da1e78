"""An exact stride-1 conv's im2col on rows of the output's own width: no pitch, no copy out.

The wide-rows runner (:mod:`.conv_wide`) pads each input row on both sides
(pitch ``W + kw - 1``), so its GEMM makes ``(H - 1) * pitch + W`` columns
(rounded up to 8) and the valid pixels are copied out of the wide result
(16 x 16x24: 416 columns for 384 pixels; at 16x12, 224 for 192). When the
horizontal padding is the kernel's width less one (``W_out == W_in``),
the input can instead sit in a flat buffer per channel with the output's
width as its pitch: zero rows above and below, ``pl`` zeros before the
first value and ``pr`` after the last, the input's ``H * W`` values one
contiguous run in between (one copy per channel). Tap ``(i, j)`` of output
pixel ``p = y * W + x`` is the buffer's value ``p + i * W + j``: one run of
``H * W`` values a tap, and the GEMM's columns are the output's pixels,
written straight into ``out``. The runs wrap at the row ends: tap ``j <
pl`` reads, for output columns ``x < pl - j``, the previous row's last
values instead of the padding's zeros, tap ``j > pl`` the next row's first
ones for ``x >= W - (j - pl)``; those column entries are zeroed after the
copy (``kw - 1`` strided fills of ``C * kh * H`` values).

Only for exact convs (QLinearConv as float32, ``exact``): the same
integers in any summation order, so the other column count and GEMM blocks
do not change a bit (a float conv would round differently: it keeps wide
rows). The bias is the GEMM's last term, as :func:`.conv_wide.prepare`'s
``bias_row``: a row of ones below the columns. Measured in
docs/design-notes.md ("Exact stride-1 convs on flat rows").
"""

from __future__ import annotations

import math

import numpy as np

from .gemm_blocks import block_calls


def applies(plan, groups: int, channels: int) -> bool:
    """Whether :func:`prepare` runs ``plan`` (the strided method with wide rows, asked for an exact
    conv): two spatial dims, stride and dilation 1, one group, a horizontal padding of the kernel's
    width less one (the output as wide as the input), a non-empty output."""
    geometry = getattr(plan, "strided", None)
    if plan.method != "strided" or geometry is None or geometry.wide is None or groups != 1:
        return False
    kernel, begins, ends = geometry.kernel, geometry.begins, geometry.ends
    return (len(kernel) == 2 and all(s == 1 for s in geometry.strides) and all(d == 1 for d in geometry.dilation)
            and begins[1] + ends[1] == kernel[1] - 1 and plan.lengths[1] == geometry.spatial[1]
            and min(plan.lengths) > 0 and channels > 0)


def buffer_length(plan) -> int:
    """Values per channel of the flat buffer: every tap of every output pixel reads inside it."""
    (kh, kw), (height, width) = plan.strided.kernel, plan.lengths
    return (height + kh - 1) * width + kw - 1


def flat_layouts(plan, batch: int, channels: int, bias: bool, dtype) -> list:
    """The flat buffer ``(N, C, length)`` and the columns ``(N, C * taps (+ 1 with a bias), H * W)``."""
    depth = channels * math.prod(plan.strided.kernel) + bool(bias)
    return [((batch, channels, buffer_length(plan)), dtype), ((batch, depth, math.prod(plan.lengths)), dtype)]


def wrapped(plan) -> list[tuple[int, slice]]:
    """``(j, columns)``: for each kernel column ``j`` whose runs wrap, the output columns ``x`` at
    which tap column ``j`` reads a neighbouring row's value instead of the padding's zero."""
    begin, kw, width = plan.strided.begins[1], plan.strided.kernel[1], plan.lengths[1]
    result = []
    for j in range(kw):
        if j < begin:
            result.append((j, slice(0, min(width, begin - j))))
        elif j > begin:
            result.append((j, slice(max(0, width - (j - begin)), width)))
    return result


def prepare(plan, weight: np.ndarray, bias, act, arrays: list, own_max_bytes: int):
    """The runner ``run(x, out)`` of an exact conv with a bound weight (and bias) on flat rows:
    ``arrays`` its scratch (:func:`flat_layouts`, of ``out``'s dtype); a flat buffer of at most
    ``own_max_bytes`` is the instruction's own, its zeros written once; ``act`` the in-place
    activation or None."""
    flat, cols = arrays
    if flat.nbytes <= own_max_bytes:
        flat = np.zeros(flat.shape, flat.dtype)
        own = True
    else:
        own = False
    batch, channels, length = flat.shape
    geometry = plan.strided
    (kh, kw), (height, width) = geometry.kernel, plan.lengths
    pixels, item = height * width, flat.itemsize
    start = geometry.begins[0] * width + geometry.begins[1]
    size = geometry.spatial[0] * width
    interior = flat[:, :, start:start + size]
    interior_4d = interior.reshape(batch, channels, geometry.spatial[0], width)
    interior_run = np.dtype((np.void, size * item))
    interior_runs = interior.view(interior_run) if size else None
    taps = np.ndarray((batch, channels, kh, kw, pixels), cols.dtype, cols, 0,
                      (cols.strides[0], kh * kw * pixels * item, kw * pixels * item, pixels * item, item))
    window = np.ndarray(taps.shape, flat.dtype, flat, 0, flat.strides[:2] + (width * item, item, item))
    tap_run = np.dtype((np.void, pixels * item))
    moves = (taps.view(tap_run), window.view(tap_run))
    grid = taps.reshape(batch, channels, kh, kw, height, width)
    zeros = [grid[:, :, :, j, :, columns] for j, columns in wrapped(plan)]
    out_channels = weight.shape[0]
    w = weight.reshape(1, out_channels, -1).astype(cols.dtype)
    ones = None
    if bias is not None:
        w = np.concatenate([w, bias.astype(cols.dtype).reshape(1, -1, 1)], axis=2)
        ones = cols[:, -1, :]
    copy, matmul, dot = np.copyto, np.matmul, np.dot
    columns = cols.reshape(batch, 1, cols.shape[1], pixels)
    kept = [None, None]             # the last out that is a view (an arena's) and its GEMM calls

    def gemms_into(out):
        if out is kept[0]:
            return kept[1]
        calls = block_calls(w, columns, out.reshape(batch, 1, out_channels, pixels))
        if len(calls) == 1 and batch == 1 and min(out_channels, pixels, w.shape[-1]) >= 2:
            calls = [(w[0], cols[0], out.reshape(out_channels, pixels), True)]    # np.dot, 2-d
        if out.base is not None:    # (an array owning its memory, a model output, is not held)
            kept[:] = out, calls
        return calls

    def run(x, out):
        if not own:
            flat.fill(0)
        if interior_runs is not None and x.dtype == flat.dtype and x.flags.c_contiguous:
            copy(interior_runs, x.reshape(batch, channels, size).view(interior_run))
        else:
            copy(interior_4d, x)        # (another dtype or layout: converted as it is copied)
        copy(*moves)
        for z in zeros:
            z.fill(0)
        if ones is not None:
            ones.fill(1)                # (the columns are the shared workspace's)
        for call in gemms_into(out):
            if len(call) == 4:
                dot(call[0], call[1], call[2])
            else:
                matmul(call[0], call[1], out=call[2])
        if act is not None:
            act(out)
    return run
