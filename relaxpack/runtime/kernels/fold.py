"""Windows that remember positions: nn.max_pool_argmax, nn.max_unpool, nn.col2im,
and the packed forms of the last two for shapes given at run time
(``dyn.max_unpool``, ``dyn.col2im``).

Like the pooling kernels in :mod:`.nn`, each runs one numpy op per kernel
tap over the whole output (strided views of the padded input), never a loop
over pixels.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...errors import ShapeError
from ._math import is_low_float, pads, per_spatial, work_dtype
from ._registry import register_kernel, register_packed
from .nn import _lowest, _pad, _pool_geometry, _tap_slices

# ---------------------------------------------------------------- nn.max_pool_argmax


def _flat_strides(spatial: tuple[int, ...], column_major: bool) -> list[int]:
    """Each spatial dim's step in a flat index (row- or column-major)."""
    if column_major:
        return [math.prod(spatial[:i]) for i in range(len(spatial))]
    return [math.prod(spatial[i + 1:]) for i in range(len(spatial))]


def _tap_positions(tap, strides, dilation, begins, lengths, spatial, steps):
    """For one kernel tap: the flat spatial index each output reads, and
    whether it lies inside the data (not in the padding); both broadcast
    to ``(1, 1, *lengths)``."""
    n = len(spatial)
    flat, inside = 0, True
    for i, (t, s, d, b, m, x, step) in enumerate(zip(tap, strides, dilation, begins, lengths, spatial, steps)):
        p = (np.arange(m) * s - b + t * d).reshape((1, 1) + (1,) * i + (m,) + (1,) * (n - i - 1))
        flat = flat + p * step
        inside = inside & (p >= 0) & (p < x)
    return flat, inside


@register_kernel("nn.max_pool_argmax")
def max_pool_argmax(data, *, out, pool_size, strides, padding, dilation, ceil_mode,
                    storage_order):
    """Max pooling and the flat input index of each maximum (batch and
    channel included); ties keep the first tap in row-major window order."""
    values, indices = out
    pool, strides, dilation, begins, _, reach, lengths = _pool_geometry(
        "nn.max_pool_argmax", data, values, pool_size, strides, dilation, padding, ceil_mode)
    if indices.shape != values.shape:
        raise ShapeError(f"nn.max_pool_argmax: indices buffer {indices.shape}, values {values.shape}")
    if values.size == 0:
        return
    x = data.astype(np.float32) if is_low_float(data.dtype) and data.dtype != np.float16 else data
    x = _pad(x, begins, reach, _lowest(x.dtype))
    spatial = data.shape[2:]
    steps = _flat_strides(spatial, bool(storage_order))
    best = argmax = have = None
    for tap in itertools.product(*(range(k) for k in pool)):
        v = x[_tap_slices(tap, strides, dilation, lengths)]
        flat, inside = _tap_positions(tap, strides, dilation, begins, lengths, spatial, steps)
        if best is None:
            best, argmax, have = v.copy(), np.broadcast_to(flat, v.shape).copy(), np.broadcast_to(inside, v.shape)
            continue
        better = inside & (~have | (v > best))
        np.copyto(best, v, where=better)
        np.copyto(argmax, flat, where=better)
        have = have | inside
    np.copyto(values, best, casting="unsafe")
    base = (np.arange(data.shape[0] * data.shape[1]) * math.prod(spatial)).reshape(data.shape[:2] + (1,) * len(spatial))
    np.add(argmax, base, out=indices, casting="unsafe")


# ---------------------------------------------------------------- nn.max_unpool


def max_unpool(data, indices, *, pool_size, strides, padding, output_shape) -> np.ndarray:
    """``data`` scattered to the flat ``indices`` of a zero tensor of the
    pooled input's shape ``(x - 1) * s - pads + k``, then padded at the end
    of each dim to ``output_shape`` (onnx's reference reading of MaxUnpool)."""
    n = data.ndim - 2
    kernel = per_spatial(pool_size, n, "pool_size")
    strides = per_spatial(strides, n, "strides")
    begins, ends = pads(padding, n)
    inferred = data.shape[:2] + tuple((x - 1) * s - b - e + k for x, k, s, b, e in
                                      zip(data.shape[2:], kernel, strides, begins, ends))
    if indices.shape != data.shape:
        raise ShapeError(f"MaxUnpool: indices {indices.shape} must have the data's shape {data.shape}")
    size = math.prod(inferred)
    flat = indices.reshape(-1).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= size):
        raise ShapeError(f"MaxUnpool: indices out of range [0, {size}) for the unpooled shape {inferred}")
    result = np.zeros(size, data.dtype)
    result[flat] = data.reshape(-1)
    result = result.reshape(inferred)
    if output_shape is None or tuple(output_shape) == inferred:
        return result
    output_shape = tuple(int(d) for d in output_shape)
    if len(output_shape) != data.ndim or any(o < i for o, i in zip(output_shape, inferred)):
        raise ShapeError(f"MaxUnpool: output_shape {output_shape} is smaller than the unpooled shape {inferred}")
    padded = np.zeros(output_shape, data.dtype)
    padded[tuple(slice(0, d) for d in inferred)] = result
    return padded


def _store(name: str, result: np.ndarray, out: np.ndarray) -> None:
    if result.shape != out.shape:
        raise ShapeError(f"{name}: output buffer has shape {out.shape}, the operands give {result.shape}")
    np.copyto(out, result, casting="unsafe")


@register_kernel("nn.max_unpool")
def max_unpool_kernel(data, indices, *, out, pool_size, strides, padding, output_shape):
    _store("nn.max_unpool", max_unpool(data, indices, pool_size=pool_size, strides=strides, padding=padding,
                                       output_shape=output_shape), out)


@register_packed("dyn.max_unpool")
def dyn_max_unpool(data, indices, output_shape, *, pool_size, strides, padding):
    """``nn.max_unpool`` with ``output_shape`` given as a tensor at run time."""
    return max_unpool(data, indices, pool_size=pool_size, strides=strides, padding=padding,
                      output_shape=[int(d) for d in np.asarray(output_shape).reshape(-1)])


# ---------------------------------------------------------------- nn.col2im


def col2im(data, *, image_shape, block_shape, strides, padding, dilation) -> np.ndarray:
    """Sum the blocks ``(N, C * prod(block), L)`` into ``(N, C, *image_shape)``:
    one strided scatter-add per block tap into the padded image, then crop."""
    image, block = tuple(int(v) for v in image_shape), tuple(int(v) for v in block_shape)
    n = len(image)
    strides, dilation = per_spatial(strides, n, "strides"), per_spatial(dilation, n, "dilation")
    begins, ends = pads(padding, n)
    if len(block) != n or data.ndim != 3 or min(block, default=0) < 1:
        raise ShapeError(f"Col2Im: data {data.shape}, image_shape {image} and block_shape {block} do not fit")
    blocks = [(x + b + e - d * (k - 1) - 1) // s + 1
              for x, k, s, d, b, e in zip(image, block, strides, dilation, begins, ends)]
    taps = math.prod(block)
    if min(blocks) < 1 or data.shape[2] != math.prod(blocks) or data.shape[1] % taps:
        raise ShapeError(f"Col2Im: data {data.shape} does not hold C * {taps} rows of {math.prod(blocks)} "
                         f"blocks for image_shape {image} and block_shape {block}")
    batch, channels = data.shape[0], data.shape[1] // taps
    dtype = work_dtype(data.dtype)
    cols = data.astype(dtype, copy=False).reshape(batch, channels, *block, *blocks)
    full = [x + b + e for x, b, e in zip(image, begins, ends)]
    acc = np.zeros((batch, channels, *full), dtype)
    for tap in itertools.product(*(range(k) for k in block)):
        acc[_tap_slices(tap, strides, dilation, blocks)] += cols[(slice(None), slice(None), *tap)]
    crop = (slice(None), slice(None)) + tuple(slice(b, b + x) for b, x in zip(begins, image))
    return acc[crop].astype(data.dtype, copy=False)


@register_kernel("nn.col2im")
def col2im_kernel(data, *, out, image_shape, block_shape, strides, padding, dilation):
    _store("nn.col2im", col2im(data, image_shape=image_shape, block_shape=block_shape, strides=strides,
                               padding=padding, dilation=dilation), out)


@register_packed("dyn.col2im")
def dyn_col2im(data, image_shape, block_shape, *, strides, padding, dilation):
    """``nn.col2im`` with the image and block shapes given as tensors at run time."""
    return col2im(data, image_shape=np.asarray(image_shape).reshape(-1),
                  block_shape=np.asarray(block_shape).reshape(-1), strides=strides, padding=padding,
                  dilation=dilation)
