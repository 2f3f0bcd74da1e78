"""The strided method on wide rows: a padded stride-1 2-d conv's im2col in long contiguous runs.

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
valid pixels are copied out of the wide result, the bias added before (in
place, in cache) and a ReLU applied by that copy. Measured in
docs/design-notes.md ("Wide rows for small stride-1 convs").
"""

from __future__ import annotations

import numpy as np

_as_strided = np.lib.stride_tricks.as_strided

#: wide rows while the padded pitch is at most this many times the output width: a 3x3 conv on a
#: 4x6 output (pitch 8) gains (11.9 -> 11.0 us), on a 2x3 one (pitch 5) the GEMM's extra columns
#: cost more than the copy saves (6.4 -> 6.7 us)
MAX_PITCH_RATIO = 1.5


def wide_columns(spatial: tuple, begins: tuple, ends: tuple, strides: tuple, lengths: tuple) -> int | None:
    """``q``, the wide columns per image of a strided-method conv of this geometry, when its taps
    can read wide rows (two spatial dims, unit strides, padded: the padded copy is the plane they
    read, at most :data:`MAX_PITCH_RATIO` times as wide as the output); None otherwise."""
    if len(spatial) != 2 or any(s != 1 for s in strides) or not any(tuple(begins) + tuple(ends)):
        return None
    pitch = spatial[1] + begins[1] + ends[1]
    if pitch > MAX_PITCH_RATIO * lengths[1]:
        return None
    return (lengths[0] - 1) * pitch + lengths[1]


def wide_layouts(plan, batch, channels: int, out_channels: int, dtype) -> list:
    """The zero-padded input, the columns ``(N, C, taps, q)`` and the wide result ``(N, O, q)``."""
    geometry = plan.strided
    q = geometry.wide
    padded = (batch, channels, *(x + b + e for x, b, e in zip(geometry.spatial, geometry.begins, geometry.ends)))
    return [(padded, dtype), ((batch, channels, len(plan.taps), q), dtype), ((batch, out_channels, q), dtype)]


def interior(plan, padded: np.ndarray) -> np.ndarray:
    """The input's place in the padded copy."""
    geometry = plan.strided
    return padded[(slice(None), slice(None)) + tuple(
        slice(b, b + n) for b, n in zip(geometry.begins, geometry.spatial))]


def windows(plan, padded: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The taps' wide windows of ``padded`` ``(N, C, kh, kw, q)`` (read-only) and ``cols`` in that shape."""
    geometry = plan.strided
    q = cols.shape[-1]
    item = padded.itemsize
    pitch = padded.shape[-1]
    shape = padded.shape[:2] + geometry.kernel + (q,)
    view = _as_strided(padded, shape, padded.strides[:2] + (geometry.dilation[0] * pitch * item,
                                                           geometry.dilation[1] * item, item), writeable=False)
    return view, cols.reshape(shape)


def valid(plan, result: np.ndarray, pitch: int) -> np.ndarray:
    """The output pixels of the wide ``result`` ``(N, O, q)``: ``(N, O, H, W)``, read-only."""
    item = result.itemsize
    return _as_strided(result, result.shape[:2] + tuple(plan.lengths), result.strides[:2] + (pitch * item, item),
                       writeable=False)


def run_wide(plan, x: np.ndarray, weight: np.ndarray, groups: int, out: np.ndarray, bias, arrays) -> None:
    """``out = conv(x, weight) (+ bias)`` from wide rows: padded copy, one copy into the columns,
    one (grouped) GEMM into the wide result, the bias added there, the valid pixels copied out."""
    padded, cols, result = arrays
    padded.fill(0)
    interior(plan, padded)[...] = x
    window, dst = windows(plan, padded, cols)
    np.copyto(dst, window)
    batch, channels, taps, q = cols.shape
    out_channels = weight.shape[0]
    k = channels // groups * taps
    np.matmul(weight.reshape(groups, out_channels // groups, k), cols.reshape(batch, groups, k, q),
              out=result.reshape(batch, groups, out_channels // groups, q))
    if bias is not None:
        np.add(result, bias.reshape(out_channels, 1), out=result)
    np.copyto(out, valid(plan, result, padded.shape[-1]), casting="unsafe")


def prepare(plan, weight, bias, groups: int, out, arrays, act, relu: bool, fixed_weight: bool):
    """The per-instruction runner ``run(x, out)`` of :func:`run_wide` (the same numpy calls, so the
    same results) for these operands: ``arrays`` its scratch (:func:`wide_layouts`, in the work
    dtype, float32 for a float16 ``out``); ``act`` the in-place activation, or with ``relu`` the
    ReLU made by the copy out (float32/float64 ``out``)."""
    padded, cols, result = arrays
    work = result.dtype
    batch, channels, taps, q = cols.shape
    out_channels = weight.shape[0]
    k = channels // groups * taps
    w = weight.astype(work, copy=False).reshape(groups, out_channels // groups, k)   # float16: a float32 copy
    convert = work != weight.dtype and not fixed_weight
    inner = interior(plan, padded)
    window, dst = windows(plan, padded, cols)
    columns = cols.reshape(batch, groups, k, q)
    target = result.reshape(batch, groups, out_channels // groups, q)
    wide_valid = valid(plan, result, padded.shape[-1])
    bias_in_result = bias is not None and work == out.dtype
    bias_b = None if bias is None else bias.reshape((out_channels, 1) if bias_in_result else (out_channels, 1, 1))
    copy, matmul, add = np.copyto, np.matmul, np.add
    if relu:
        from ._math import CLIP
        zero, inf = work.type(0), work.type(np.inf)

    def run(x, out):
        padded.fill(0)
        copy(inner, x)                          # (float16, integers: converted as it is copied)
        copy(dst, window)
        if convert:
            copy(w, weight.reshape(w.shape))
        matmul(w, columns, out=target)
        if bias_in_result:
            add(result, bias_b, out=result)
        if relu:
            CLIP(wide_valid, zero, inf, out=out)
            return
        copy(out, wide_valid, casting="unsafe")     # the conv rounds, then the bias: as the generic kernel
        if bias_b is not None and not bias_in_result:
            add(out, bias_b, out=out)
        if act is not None:
            act(out)
    return run
