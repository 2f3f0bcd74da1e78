"""A channels-first ConvTranspose whose windows tile its output, specialized per instruction.

With kernel == stride, no dilation, padding or output padding (DB-det's and
segmentation heads' 2x2 stride-2 upsampling), every output position gets
exactly one tap: the kernel (:func:`.nn.conv_transpose`) makes the GEMM
``cols = W^T @ x`` (out channels x taps rows, one column per input pixel)
and copies each tap's rows to its strided positions of ``out``. On DB-det's
maps of a few thousand values that arithmetic takes ~5 us and the kernel's
Python around it (attributes expanded, shapes checked, tap slices made)
as much again; the runner here keeps the GEMM's result buffer and the
taps' views of ``out`` while the instruction gets the same arrays (arena
views are the same objects run after run) and makes only the numpy calls,
the same ones in the same order (bit for bit the kernel's results). Any
other call (another geometry or layout, groups, a low float, a product of
more than 4 MiB) goes to the kernel.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


#: the runner keeps a GEMM result of its own up to this size
PRIVATE_MAX_BYTES = 4 << 20


def specialize(kernel, attrs: dict, constant: tuple):
    """``call(data, weight, *, out, workspace=None)`` for one ``nn.conv_transpose`` instruction."""
    if not _tiles(attrs):
        return lambda data, weight, *, out, workspace=None: kernel(data, weight, out=out, **attrs)
    state = [None, None]            # the key of the prepared call, its runner (None: the kernel's)

    def call(data, weight, *, out, workspace=None):
        key = state[0]
        if key is None or data.shape != key[0] or weight is not key[1] or out is not key[2]:
            state[0], state[1] = (data.shape, weight, out), _prepare(data, weight, out, attrs["strides"])
        if state[1] is None:
            kernel(data, weight, out=out, **attrs)
        else:
            state[1](data)
    return call


def _tiles(attrs: dict) -> bool:
    """Whether the attributes describe windows that tile the output, channels first, one group."""
    def expanded(value, n=2):
        return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    return (attrs.get("data_layout") == "NCHW" and attrs.get("groups") == 1
            and all(d == 1 for d in expanded(attrs.get("dilation", 1)))
            and not any(expanded(attrs.get("padding", 0))) and not any(expanded(attrs.get("output_padding", 0))))


def _prepare(data: np.ndarray, weight: np.ndarray, out: np.ndarray, strides):
    """The runner for these arrays (windows of the weight's size at strides of it), or None where
    the kernel runs the call."""
    if data.ndim < 3 or weight.ndim != data.ndim or data.dtype.type not in (np.float32, np.float64) \
            or weight.dtype != data.dtype or out.dtype != data.dtype or not out.flags.c_contiguous:
        return None
    batch, channels, *spatial = data.shape
    in_channels, out_channels, *kernel = weight.shape
    steps = tuple(strides) if isinstance(strides, (tuple, list)) else (strides,) * len(kernel)
    if in_channels != channels or tuple(steps) != tuple(kernel) or out.size == 0 \
            or out.shape != (batch, out_channels, *(k * x for k, x in zip(kernel, spatial))):
        return None
    taps, pixels = math.prod(kernel), math.prod(spatial)
    if batch * out_channels * taps * pixels * data.dtype.itemsize > PRIVATE_MAX_BYTES:
        return None         # (the kernel's product is a temporary; a kept one this large would stay allocated)
    w = weight.reshape(1, channels, out_channels * taps).transpose(0, 2, 1)      # as the kernel's, groups = 1
    cols = np.empty((batch, 1, out_channels * taps, pixels), data.dtype)
    by_tap = cols.reshape(batch, out_channels, *kernel, *spatial)
    pairs = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        where = (slice(None), slice(None)) + tuple(slice(t, t + k * (x - 1) + 1, k)
                                                   for t, k, x in zip(tap, kernel, spatial))
        pairs.append((out[where], by_tap[(slice(None), slice(None), *tap)]))
    matmul, copy = np.matmul, np.copyto
    shape = (batch, 1, channels, pixels)

    def run(x):
        matmul(w, x.reshape(shape), out=cols)
        for dst, src in pairs:
            copy(dst, src)
    return run
