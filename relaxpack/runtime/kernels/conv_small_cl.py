"""A small channels-first conv (float or exact) run channels last inside its runner.

On small planes the channels-first strided method is slow where it copies:
its im2col loops over runs of one output row (a few values) or, for a stride
of 2, over single values, and the GEMM's few columns (24 at 4x6, 6 at 2x3)
run OpenBLAS's narrow edge kernels. Here the input is copied once, transposed,
into a zero-padded channels-last copy (the instruction's own, its padding
zeroed once), where each kernel row of an output pixel's window is one run of
``kw * C`` values whatever the stride; the im2col copies those runs as void
items, and one GEMM ``(pixels, K) @ (K, O)`` (the weight's taps reordered to
match, once) or, for a few pixels of one image, ``(O, K) @ (pixels, K)^T``
straight into ``out``; then the bias and the activation on ``out`` as the
strided runner adds them. The GEMM's sums run in another order than the
channels-first method's: an exact conv (QLinearConv as float32) has the same
result, a float one differs in its last bits. So the method is chosen by
geometry alone (:func:`applies`), asked by the specialized runner
(``conv_small._prepare``) and the generic kernel (:func:`runs_generic`) alike:
a call gets the same bits from either. Measured in docs/design-notes.md
("Exact small convs channels last inside", "Float small convs too").
"""

from __future__ import annotations

import math

import numpy as np

from .tiled_operand import tile_of

#: from this many input channels (a 3-channel stem's runs of ``kw * 3`` values are too short; float
#: 8 -> 16 3x3/2 at 8x12 0.63x the strided runner's time, at 16x24 0.84x, 12 -> 16 at 8x12 0.58x)
MIN_CHANNELS = 8
#: stride-1 convs only up to this many output pixels per image (float, 3x3: 16 and 32 channels at
#: 8x12 0.90x / 0.79x, 32 at 12x16 1.00x: the channels-first wide rows are as fast from there on)
MAX_STRIDE1_PIXELS = 96
#: and from this many input channels up to :data:`DEEP_STRIDE1_MAX_PIXELS` (float32 3x3, 1 thread,
#: against the wide rows: 64 -> 32 at 16x10 0.79x, batch 2 0.82x, 11x13 0.82x, 12x16 0.84x, 16x16 0.95x;
#: 64 -> 64 / 96 -> 32 / 128 -> 64 at 16x10 0.77x / 0.81x / 0.77x, 64 -> 16 0.94x; 48 -> 32 0.98x;
#: with 16-32 channels 1.0-1.4x, hence the channel bar)
DEEP_STRIDE1_MIN_CHANNELS = 64
DEEP_STRIDE1_MAX_PIXELS = 256
#: and input planes of at most this many pixels (the transposing copy in grows with it: a 3x3/2 conv
#: of 16 channels 0.80x the strided runner's time at 16x24, 1.05x at 31x48)
MAX_PLANE_PIXELS = 1024
#: the runner's scratch (padded copy, columns, GEMM result: the instruction's own) at most this
#: many bytes, a cap on the memory an instruction keeps (as the column phases' planes); larger convs
#: keep the strided method. Not a speed bar: float32, 1 thread, against the strided method, UNet's
#: batch-3 64 -> 32 3x3 at 6x14 (694 KiB) 0.80-0.82x, 64 -> 16 3x3/2 at 30x30 (776 KiB) 0.65x, 96 ->
#: 32 3x3/2 at 24x24 0.70x, and past this bar (1.1-1.5 MiB) still 0.65-0.88x (was 512 KiB)
OWN_MAX_BYTES = 1 << 20
#: one image's GEMM writes ``out`` directly, ``(O, K) @ cols^T``, up to this many pixels (past it
#: OpenBLAS runs that orientation 2-3x slower than ``cols @ W`` and a transposing copy)
DIRECT_MAX_PIXELS = 32


def takes_geometry(plan, groups: int, channels: int, batch: int) -> bool:
    """Whether an ungrouped, undilated 2-d conv of the strided method runs here: a kernel of at
    least two rows and two columns (a 1x1/2 conv's runs of ``C`` values: 1.3-1.9x slower), at
    least :data:`MIN_CHANNELS` input channels, an input plane of at most :data:`MAX_PLANE_PIXELS`,
    and strided or of at most :data:`MAX_STRIDE1_PIXELS` output pixels (:data:`DEEP_STRIDE1_MAX_PIXELS`
    from :data:`DEEP_STRIDE1_MIN_CHANNELS` input channels). The geometry alone decides
    (exact or float: the generic kernel takes the same method, :func:`runs_generic`)."""
    if groups != 1 or plan.method != "strided" or channels < MIN_CHANNELS or batch < 1:
        return False
    geometry = plan.strided
    if len(geometry.kernel) != 2 or min(geometry.kernel) < 2 or any(d != 1 for d in geometry.dilation) \
            or math.prod(geometry.spatial) > MAX_PLANE_PIXELS:
        return False
    pixels = math.prod(plan.lengths)
    return any(s != 1 for s in geometry.strides) or pixels <= MAX_STRIDE1_PIXELS \
        or (channels >= DEEP_STRIDE1_MIN_CHANNELS and pixels <= DEEP_STRIDE1_MAX_PIXELS)


def scratch_bytes(plan, batch: int, channels: int, out_channels: int, dtype) -> int:
    """The bytes of the runner's scratch (padded copy, columns, GEMM result unless it writes ``out``
    directly); past :data:`OWN_MAX_BYTES` the conv keeps the strided method."""
    geometry = plan.strided
    padded = batch * channels * math.prod(s + b + e for s, b, e in zip(geometry.spatial, geometry.begins,
                                                                       geometry.ends))
    pixels = math.prod(plan.lengths)
    direct = batch == 1 and pixels <= DIRECT_MAX_PIXELS
    values = padded + batch * pixels * channels * len(plan.taps) + (0 if direct else batch * pixels * out_channels)
    return values * np.dtype(dtype).itemsize


def applies(plan, groups: int, batch: int, channels: int, out_channels: int, dtype) -> bool:
    """Whether a conv (channels-first data and result of ``dtype``, float32/float64) runs here: its
    geometry (:func:`takes_geometry`) and its scratch (:func:`scratch_bytes`). The specialized
    runner (``conv_small._prepare``) and the generic kernel (:func:`runs_generic`) both ask this,
    so a call gets the same method, and the same bits, from either."""
    return np.dtype(dtype) in _DTYPES and takes_geometry(plan, groups, channels, batch) \
        and scratch_bytes(plan, batch, channels, out_channels, dtype) <= OWN_MAX_BYTES


_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def runs_generic(plan, x, weight, groups: int, out, bias) -> bool:
    """The generic kernel's call (``conv_direct._run_method``, channels-first ``out``): when
    :func:`applies` holds for these operands (``x``, ``weight``, ``bias`` already of ``out``'s
    dtype, ``out`` C-contiguous), run the conv here, by the runner's own calls (:func:`prepare`,
    then the run: bit for bit the specialized runner's), and return True; else False."""
    if x.ndim != 4 or out.dtype != x.dtype or weight.dtype != x.dtype or not out.flags.c_contiguous \
            or (bias is not None and bias.dtype != x.dtype) \
            or not applies(plan, groups, x.shape[0], x.shape[1], weight.shape[0], out.dtype):
        return False
    prepare(plan, x, weight, bias, out, None, False)(x, out)
    return True


def bias_in_gemm(plan, batch: int, exact: bool, bound_bias: bool) -> bool:
    """Whether the runner of an ``exact`` conv with a bound bias makes the bias its GEMM's last term
    (:func:`prepare`): but for the GEMM straight into ``out`` (one image of at most
    :data:`DIRECT_MAX_PIXELS`), where the add is on few values and the deeper GEMM of that
    orientation measured no faster (0.99-1.01x)."""
    return exact and bound_bias and not (batch == 1 and math.prod(plan.lengths) <= DIRECT_MAX_PIXELS)


def prepare(plan, data, weight, bias, out, act, fixed_bias: bool, exact: bool = False):
    """``run(x, out)`` of this conv (:func:`applies` holds; a bound weight, whose reordered copy is
    made here; float32/float64 ``out`` of the operands' dtype, C-contiguous; ``act`` in place or
    None), or None when its scratch would pass
    the bar for memory of the instruction's own. A bound bias (``fixed_bias``) is added as a tile
    of the GEMM result's whole shape (a per-channel broadcast loops per run: 2-4x slower); an
    ``exact`` conv's (integer sums, exact in any order) is the GEMM's last term instead
    (:func:`bias_in_gemm`): a column of ones after the columns (the scratch is the instruction's
    own: written once) times a last weight row, the bias."""
    geometry = plan.strided
    batch, channels, height, width = data.shape
    out_channels = weight.shape[0]
    (kh, kw), (sh, sw) = geometry.kernel, geometry.strides
    (top, left), (bottom, right) = geometry.begins, geometry.ends
    rows, cols_n = plan.lengths
    pixels = rows * cols_n
    dtype = out.dtype
    depth = kh * kw * channels
    if scratch_bytes(plan, batch, channels, out_channels, dtype) > OWN_MAX_BYTES:
        return None
    padded = np.zeros((batch, height + top + bottom, width + left + right, channels), dtype)
    direct = batch == 1 and pixels <= DIRECT_MAX_PIXELS
    interior = padded[:, top:top + height, left:left + width, :]
    in_gemm = bias_in_gemm(plan, batch, exact, fixed_bias and bias is not None)
    width_k = depth + in_gemm
    cols2 = np.empty((batch * pixels, width_k), dtype)
    if in_gemm:
        cols2[:, depth] = 1
    run_bytes = kw * channels * dtype.itemsize
    item = np.dtype((np.void, run_bytes))
    s_n, s_h, s_w, _ = padded.strides
    window = np.ndarray((batch, rows, cols_n, kh), item, padded, 0, (s_n, sh * s_h, sw * s_w, s_h))
    pitch = cols2.strides[0]
    dst = np.ndarray((batch, rows, cols_n, kh), item, cols2, 0, (pixels * pitch, cols_n * pitch, pitch, run_bytes))
    # the weight's columns in the im2col's order (kernel row, kernel column, channel)
    w_k = np.ascontiguousarray(weight.transpose(2, 3, 1, 0).reshape(depth, out_channels), dtype)
    if in_gemm:
        w_k = np.concatenate([w_k, bias.astype(dtype).reshape(1, out_channels)])
        bias = None
    copy, dot, add = np.copyto, np.dot, np.add
    # the views of an input and an output that are views (an arena's: the same objects run after
    # run) are kept (~0.4 us a call); an array owning its memory is not held past the call
    seen = [None, None, None, None]
    target_shape = (out_channels, pixels) if direct else (batch, out_channels, pixels)
    if direct:
        bias_b = _bias_operand(bias, (out_channels, 1), target_shape, fixed_bias)
        w_t = np.ascontiguousarray(w_k.T)
        cols_t = cols2.T

        def run(x, out):
            if x is seen[0] and out is seen[1]:
                x_t, out2 = seen[2], seen[3]
            else:
                x_t, out2 = x.transpose(0, 2, 3, 1), out.reshape(target_shape)
                if x.base is not None and out.base is not None:
                    seen[:] = x, out, x_t, out2
            copy(interior, x_t)
            copy(dst, window)
            dot(w_t, cols_t, out2)
            if bias_b is not None:
                add(out2, bias_b, out2)
            if act is not None:
                act(out)
        return run

    result = np.empty((batch, pixels, out_channels), dtype)
    result2 = result.reshape(batch * pixels, out_channels)
    flipped = result.transpose(0, 2, 1)
    bias_row = _bias_operand(bias, (1, 1, out_channels), result.shape, fixed_bias)

    def run(x, out):
        if x is seen[0] and out is seen[1]:
            x_t, target = seen[2], seen[3]
        else:
            x_t, target = x.transpose(0, 2, 3, 1), out.reshape(target_shape)
            if x.base is not None and out.base is not None:
                seen[:] = x, out, x_t, target
        copy(interior, x_t)
        copy(dst, window)
        dot(cols2, w_k, result2)
        if bias_row is not None:
            add(result, bias_row, result)
        copy(target, flipped)
        if act is not None:
            act(out)
    return run


def _bias_operand(bias, shape: tuple, whole: tuple, fixed: bool):
    """``bias`` as ``shape`` (broadcasting against the GEMM result), or, bound, as a tile of the
    result's ``whole`` shape (made once: :func:`.tiled_operand.tile_of`, up to its size bar)."""
    if bias is None:
        return None
    column = bias.reshape(shape)
    tile = tile_of(column, np.empty(whole, bias.dtype)) if fixed else None
    return column if tile is None else tile
