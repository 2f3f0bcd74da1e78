"""A dilated conv's taps that read only padding, left out.

DeepLabV3's ASPP runs 3x3 convs of dilation 12, 24 and 36 on the backbone's last map, which
at the sizes it meets (8x10 at 128x160, 32x32 at 512x512) is no larger than the dilation: every
off-center tap of every output reads the zero padding, and the conv is a 1x1 conv of the
center tap. Run as it stands, its im2col and GEMM carry all nine taps (torchvision's
deeplabv3_mobilenet_v3: 15 of its 26 ms). Per spatial axis the taps that read any data form a
range (a tap's reads move monotonically with it); the conv of that range of the weight, on the
data cropped to what it reads and padded by what is left, gives every output the same sum
without the zero terms. An inf or NaN weight on a left-out tap then makes no NaN, as in
onnxruntime (whose convs never multiply the padding; onnx's reference evaluator makes NaN of
some outputs). The taps are worked out per input size (the map's size is only known at run
time), for the instructions whose dilation and padding can leave a tap on padding alone.
"""

from __future__ import annotations

import functools

import numpy as np

from ._math import pads, per_spatial


@functools.lru_cache(maxsize=256)
def may_prune(kernel_rank: int, padding, dilation) -> bool:
    """Whether a conv of these attributes can have a tap on padding alone at some input size where
    its other taps read data: a dilated axis (over 1) that is padded. (Undilated convs only leave
    taps on padding for maps smaller than their kernel: not looked for.) Cached: the generic
    kernel asks on every call."""
    begins, ends = pads(padding, kernel_rank)
    dilation = per_spatial(dilation, kernel_rank, "dilation")
    return any(d > 1 and (b > 0 or e > 0) for d, b, e in zip(dilation, begins, ends))


def pruned_operands(data: np.ndarray, weight: np.ndarray, strides, padding, dilation, channels_last: bool):
    """``(data window, kept weight, padding)`` of the conv without its taps on padding alone, for the
    generic kernel (the weight's kept taps copied per call); None where every tap reads data or
    the attributes are not the plain tuples the IR gives (an unhashable list: not cached)."""
    rank = weight.ndim - 2
    try:
        if rank < 1 or data.ndim != weight.ndim or not may_prune(rank, padding, dilation):
            return None         # (operands that do not fit: the kernel's checks say so)
    except TypeError:           # (a list attribute: not cached, and no pruning)
        return None
    spatial = data.shape[1:-1] if channels_last else data.shape[2:]
    kernel = weight.shape[:rank] if channels_last else weight.shape[2:]
    geometry = pruned_geometry(spatial, kernel, strides, padding, dilation)
    if geometry is None:
        return None
    taps, crops, new_padding = geometry
    return data[_spatial_index(crops, channels_last)], _kept_weight(weight, taps, channels_last), new_padding


def kept_taps(n: int, k: int, s: int, d: int, b: int, length: int) -> tuple[int, int]:
    """``(lo, hi)``: the taps of one axis (``n`` values, kernel ``k``, stride ``s``, dilation ``d``,
    ``b`` padded before, ``length`` outputs) that read a value of the data for some output (tap
    ``t`` of output ``o`` reads ``o * s + t * d - b``); ``(0, 0)`` when none does."""
    kept = [t for t in range(k)
            if max(0, -(-(b - t * d) // s)) <= min(length - 1, (n - 1 + b - t * d) // s)]
    return (kept[0], kept[-1] + 1) if kept else (0, 0)


def pruned_geometry(spatial: tuple, kernel: tuple, strides, padding, dilation):
    """``(taps, crops, padding)`` of the conv left when its taps on padding alone are dropped: per
    axis the kept taps' slice, the slice of the data they read, and the new padding (begins then
    ends, ONNX's order); None when every tap reads data or some axis has none that does."""
    n = len(kernel)
    strides, dilation = per_spatial(strides, n, "strides"), per_spatial(dilation, n, "dilation")
    begins, ends = pads(padding, n)
    taps, crops, new_begins, new_ends, dropped = [], [], [], [], False
    for size, k, s, d, b, e in zip(spatial, kernel, strides, dilation, begins, ends):
        length = (size + b + e - d * (k - 1) - 1) // s + 1
        if length <= 0:
            return None
        lo, hi = kept_taps(size, k, s, d, b, length)
        if lo == hi:
            return None
        dropped |= (lo, hi) != (0, k)
        first = lo * d - b                           # the first position read (output 0, tap lo)
        last = (length - 1) * s + (hi - 1) * d - b   # the last (the last output, tap hi - 1)
        start, stop = max(first, 0), min(last + 1, size)
        taps.append(slice(lo, hi))
        crops.append(slice(start, stop))
        new_begins.append(start - first)
        new_ends.append(last + 1 - stop)
    if not dropped:
        return None
    return tuple(taps), tuple(crops), tuple(new_begins) + tuple(new_ends)


def wrap(call, make, attrs: dict, kernel_rank: int, fixed_weight: bool):
    """``call`` (a specialized conv: ``call(data, weight, bias=None, *, out, workspace=None)``) for
    inputs where every tap reads data; where some read padding alone, ``make(new_attrs)``'s call
    on the data cropped and the weight's kept taps, copied once per weight object where
    ``fixed_weight`` says the weight is a bound constant, else every call (a weight computed at
    run time may come back in the same array with new values). The last input size's plan is
    kept."""
    channels_last = attrs["data_layout"] == "NHWC"
    plan = [None, None]         # the last spatial shape, its (taps, crops, inner call) or False
    weights = [None, None]      # the last weight object, its kept taps

    def pruned(data, weight, bias=None, *, out, workspace=None):
        spatial = data.shape[1:-1] if channels_last else data.shape[2:]
        if spatial != plan[0]:
            kernel = weight.shape[:kernel_rank] if channels_last else weight.shape[2:]
            geometry = pruned_geometry(spatial, kernel, attrs["strides"], attrs["padding"], attrs["dilation"])
            inner = False if geometry is None else make(dict(attrs, padding=geometry[2]))
            plan[:] = spatial, False if geometry is None else (geometry[0], geometry[1], inner)
            weights[:] = None, None
        if plan[1] is False:
            call(data, weight, bias, out=out, workspace=workspace)
            return
        taps, crops, inner = plan[1]
        if weight is not weights[0] or not fixed_weight:
            weights[:] = weight, _kept_weight(weight, taps, channels_last)
        inner(data[_spatial_index(crops, channels_last)], weights[1], bias, out=out, workspace=workspace)
    return pruned


def _spatial_index(spatial: tuple, channels_last: bool) -> tuple:
    """The index of the data (NCHW or NHWC) taking the slices ``spatial`` of its spatial axes."""
    every = slice(None)
    return (every,) + spatial + (every,) if channels_last else (every, every) + spatial


def _kept_weight(weight: np.ndarray, taps: tuple, channels_last: bool) -> np.ndarray:
    """The weight's kept taps (HWIO for channels last, else OIHW), contiguous."""
    every = slice(None)
    return np.ascontiguousarray(weight[taps + (every, every) if channels_last else (every, every) + taps])
