"""Depthwise convolutions, channel-last (``depthwise_cl``).

For small planes with many channels (MobileNet's 28x28 to 7x7 stages) the
channel-first method of :mod:`.conv_direct` runs rows of only a few dozen
values, and numpy's per-row overhead dominates: 5-8x onnxruntime. Here
the input is copied once, transposed, into a zero-padded ``(N, *plane,
C)`` buffer; every tap is then a strided view of it, and one ``np.einsum``
does all the multiply-adds with the channels innermost (einsum's inner
loop is a fused multiply-add over contiguous values, ~2x faster than a
multiply and an add per tap). The transposition back into ``out`` carries
the bias. :func:`.conv_direct.conv_plan` picks it from the ratio of
channels to output pixels.

Its scratch arrays (:func:`depthwise_cl_layouts`) come from the caller's
:class:`._workspace.Scratch`.
"""

from __future__ import annotations

import string

import numpy as np

_as_strided = np.lib.stride_tricks.as_strided


# ---------------------------------------------------------------- depthwise_cl

def depthwise_cl_layouts(plan, batch: int, channels: int, dtype) -> list:
    """Scratch for :func:`depthwise_cl`: the padded channel-last input and
    the channel-last result."""
    extent, _, _ = plan.cl
    return [((batch, *extent, channels), dtype), ((batch, *plan.lengths, channels), dtype)]


def depthwise_cl(plan, x: np.ndarray, weight: np.ndarray, out: np.ndarray, bias, arrays) -> None:
    """``out = depthwise conv(x, weight) (+ bias)`` computed channel-last."""
    padded, acc = arrays
    n = len(plan.lengths)
    channels = x.shape[1]
    _fill_channel_last(plan, x, padded)
    w = np.ascontiguousarray(weight.reshape(channels, -1).T).reshape(*plan.cl[1], channels)
    channel_last_taps(plan.cl, plan.lengths, padded, w, acc)
    # a transposing copy, then the bias in place: 2x faster than a transposing add
    np.copyto(out, acc.transpose(0, n + 1, *range(1, n + 1)), casting="unsafe")
    if bias is not None:
        np.add(out, bias.reshape(bias.shape + (1,) * n), out=out)


def channel_last_taps(cl, lengths, padded: np.ndarray, w: np.ndarray, acc: np.ndarray) -> None:
    """``acc`` (N, *lengths, C) = the sum over kernel taps of the strided
    views of ``padded`` (N, *extent, C) times ``w`` (*kernel, C): one einsum."""
    extent, kernel, steps = cl
    n = len(extent)
    batch, item, channels = padded.shape[0], padded.itemsize, padded.shape[-1]
    pitch = padded.strides[1:-1]
    last_step = steps[-1][0]
    # einsum's fused multiply-add loop wants long contiguous runs in every
    # operand: with unit stride along the last dim a tap's (last dim,
    # channel) values are one run, and the weights are tiled to match
    merge = last_step == 1 and padded.strides[-1] == item and pitch[-1] == channels * item
    inner = lengths[-1] * channels if merge else channels
    lead = tuple(lengths[:-1]) if merge else tuple(lengths)
    taps = _as_strided(padded, (*kernel, batch, *lead, inner),
                       (*(d * p for (_, d), p in zip(steps, pitch)), padded.strides[0],
                        *(s * p for (s, _), p in zip(steps[:len(lead)], pitch)),
                        item if merge else padded.strides[-1]), writeable=False)
    if merge:
        w = np.tile(w, (1,) * n + (lengths[-1],))
    k, spatial = string.ascii_lowercase[:n], string.ascii_lowercase[n:n + len(lead)]
    np.einsum(f"{k}Z{spatial}Y,{k}Y->Z{spatial}Y", taps, w, out=acc.reshape(batch, *lead, inner))


def _fill_channel_last(plan, x: np.ndarray, padded: np.ndarray) -> None:
    """``x`` (N, C, *spatial) transposed into ``padded`` (N, *extent, C) at
    the plan's offsets; the rest zeroed."""
    extent, _, _ = plan.cl
    _, (dst, src), zeros = plan.cl_fill
    for region in zeros:
        padded[(slice(None),) + region] = 0
    if dst is not None:
        n = len(extent)
        moved = x.transpose(0, *range(2, n + 2), 1)
        padded[(slice(None),) + dst] = moved[(slice(None),) + src]


def channel_last_geometry(spatial, kernel, strides, dilation, begins, lengths):
    """``(cl, cl_fill)`` for a plan: the padded extent, kernel and (stride,
    dilation) per dim; and which part of the padded buffer holds the input
    (destination and source slices, or None when no input value is read)
    and which regions are zero."""
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
