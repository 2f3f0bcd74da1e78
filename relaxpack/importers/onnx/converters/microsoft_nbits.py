"""com.microsoft MatMulNBits: what onnxruntime's MatMulNBitsQuantizer (int4 weights) makes of a MatMul.

``Y = A @ W^T (+ bias)`` with W (N, K) stored blockwise along K: B (N,
k_blocks, block_size * bits / 8) uint8 holds ``bits``-bit codes, low bits
first; each block has a scale and a zero point (packed codes of the same
width, one row of ``ceil(k_blocks * bits / 8)`` bytes per column, or values
of the scales' type; 2^(bits-1) when omitted): ``W[n, k] = (code - zero) *
scale``, the codes past K (the last block's padding) unused. The converter
dequantizes W at import (B, the scales and zero points are initializers)
and emits a float matmul; ``accuracy_level`` is the lowest precision
onnxruntime may compute A in (4: int8), which float32 satisfies.

    MatMulNBits(A, B, scales, zero_points, K=64, N=32, bits=4, block_size=16)
        ->  R.matmul(a, W^T)      (W^T a constant (64, 32))

GatherBlockQuantized (onnxruntime-genai's quantized embedding table) is a Gather from data
quantized the same way along ``quantize_axis``: int4/uint4 codes, uint8 holding ``bits``-bit
codes packed along the last axis (zero points likewise; 2^(bits-1) when omitted), or float8 /
float4 values scaled without zero points (``block_size`` 0: one block per row, scales of 1
broadcast). The table is dequantized at import too; an index outside ``[-s, s)`` gives a zero
slice, as onnxruntime's kernel does (ONNX's Gather would fail).
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._math_common import astype, call, malformed, scalar, unsupported
from ._shape_common import norm_axis, shaped
from .microsoft import MS


def unpack_codes(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` ``bits``-bit codes of each row of ``packed`` (uint8, low bits first).

    >>> unpack_codes(np.array([[0x21, 0x43]], np.uint8), 4, 3).tolist()
    [[1, 2, 3]]
    """
    flat = np.unpackbits(packed.astype(np.uint8), axis=-1, bitorder="little")
    codes = flat.reshape(*packed.shape[:-1], -1, bits)
    weights = (1 << np.arange(bits)).astype(np.int64)
    return (codes.astype(np.int64) * weights).sum(axis=-1)[..., :count]


def dequantized_weight(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, *, n: int, k: int,
                       bits: int, block_size: int) -> np.ndarray:
    """W (N, K) in the scales' dtype (computed in float32, rounded once)."""
    blocks = -(-k // block_size)
    codes = unpack_codes(b.reshape(n, blocks, -1), bits, block_size)            # (N, blocks, block_size)
    scale = scales.astype(np.float32).reshape(n, blocks, 1)
    if zero_points is None:
        zero = np.float32(1 << (bits - 1))
    elif zero_points.dtype == np.uint8:
        zero = unpack_codes(zero_points.reshape(n, -1), bits, blocks).astype(np.float32).reshape(n, blocks, 1)
    else:
        zero = zero_points.astype(np.float32).reshape(n, blocks, 1)
    w = (codes.astype(np.float32) - zero) * scale
    return w.reshape(n, blocks * block_size)[:, :k].astype(scales.dtype)


@register_converter(MS, "MatMulNBits", since_opset=1)
def matmul_nbits(ctx, a, b, scales, zero_points=None, g_idx=None, bias=None, *, K, N, bits=4, block_size,
                 accuracy_level=0):
    for value, what in ((b, "B"), (scales, "scales"), (zero_points, "zero_points")):
        if value is not None and value.const is None:
            raise unsupported(ctx, f"{what} must be an initializer (the weights are dequantized at import)")
    if g_idx is not None:
        raise unsupported(ctx, "g_idx (act-order) is not supported")
    if not 2 <= bits <= 8 or block_size < 1 or K < 1 or N < 1:
        raise unsupported(ctx, f"bits={bits}, block_size={block_size}, K={K}, N={N}")
    blocks = -(-K // block_size)
    if b.const.size != N * blocks * block_size * bits // 8 or scales.const.size != N * blocks:
        raise unsupported(ctx, f"B of shape {list(b.const.shape)} and scales of {scales.const.size} values do not "
                               f"hold N={N} columns of {blocks} blocks of {block_size} {bits}-bit codes")
    w = dequantized_weight(b.const, scales.const, None if zero_points is None else zero_points.const,
                           n=int(N), k=int(K), bits=int(bits), block_size=int(block_size))
    y = make_call("matmul", ctx.expr(a), ctx.expr(ctx.const(np.ascontiguousarray(w.T))))
    return y if bias is None else make_call("add", ctx.expr(ctx.emit(y)), ctx.expr(bias))


@register_converter(MS, "GatherBlockQuantized", since_opset=1)
def gather_block_quantized(ctx, data, indices, scales, zero_points=None, *, bits=4, block_size=128, quantize_axis=1,
                           gather_axis=0):
    """Gather from a block-quantized constant table (see the module docstring)."""
    for value, what in ((data, "data"), (scales, "scales"), (zero_points, "zero_points")):
        if value is not None and value.const is None:
            raise unsupported(ctx, f"{what} must be an initializer (the table is dequantized at import)")
    table = _block_dequantized(ctx, data.const, scales.const, None if zero_points is None else zero_points.const,
                               int(bits), int(block_size), int(quantize_axis), int(gather_axis))
    return _gather_or_zero(ctx, table, shaped(ctx, indices, "indices"), norm_axis(ctx, gather_axis, table.ndim))


def _block_dequantized(ctx, data: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, bits: int,
                       block_size: int, quantize_axis: int, gather_axis: int) -> np.ndarray:
    """The table ``(codes - zero) * scale`` in the scales' dtype (computed in float32, rounded
    once), each scale and zero point spread over its block along ``quantize_axis``."""
    codes, zero = _codes(ctx, data, zero_points, bits, scales.shape[-1] if scales.ndim else 0, gather_axis)
    axis = norm_axis(ctx, quantize_axis, codes.ndim, "quantize_axis")
    count = codes.shape[axis]
    block = block_size or (count if _is_float(data) else 0)
    if block <= 0:
        raise malformed(ctx, f"block_size {block_size} must be positive (0 only for float8/float4 data)")
    blocks = -(-count // block)
    if scales.ndim != codes.ndim or scales.shape[axis] != blocks:
        raise malformed(ctx, f"scales of shape {list(scales.shape)} do not hold {blocks} blocks of {block} along "
                             f"axis {axis} of the {list(codes.shape)} table")

    def spread(per_block: np.ndarray) -> np.ndarray:
        """Each block's value over its elements along ``axis`` (a 0-d default zero as it is)."""
        values = per_block.astype(np.float32)
        return np.repeat(values, block, axis=axis).take(np.arange(count), axis=axis) if values.ndim else values
    return ((codes - spread(zero)) * spread(scales)).astype(scales.dtype)


def _codes(ctx, data: np.ndarray, zero_points: np.ndarray | None, bits: int, blocks_last: int,
           gather_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The table's codes (float32, logical shape) and its zero points (per block, or a scalar)."""
    name = data.dtype.name
    if _is_float(data):
        if zero_points is not None:
            raise malformed(ctx, f"{name} data takes no zero_points (its quantization is symmetric)")
        return data.astype(np.float32), np.zeros((), np.float32)
    if name in ("int4", "uint4"):
        zero = np.zeros((), np.float32) if zero_points is None else zero_points.astype(np.float32)
        return data.astype(np.float32), zero
    if name != "uint8":
        raise unsupported(ctx, f"data of type {name} (int4, uint4, uint8, float8 or float4)")
    if bits not in (2, 4, 8) or gather_axis != 0:
        raise malformed(ctx, f"uint8 data needs bits 2, 4 or 8 (got {bits}) and gather_axis 0 (got {gather_axis})")
    codes = unpack_codes(data, bits, data.shape[-1] * 8 // bits).astype(np.float32)
    if zero_points is None:
        return codes, np.full((), 1 << (bits - 1), np.float32)
    return codes, unpack_codes(zero_points, bits, blocks_last).astype(np.float32)


def _is_float(data: np.ndarray) -> bool:
    """float8 / float4 data (ml_dtypes), scaled without zero points."""
    return data.dtype.name.startswith("float")


def _gather_or_zero(ctx, table: np.ndarray, indices: Value, axis: int) -> Expr:
    """``take(table, indices, axis)`` with negative indices counted from the end and a zero
    slice for an index outside ``[-s, s)``."""
    size = table.shape[axis]
    index = astype(ctx, indices, "int64")
    index = call(ctx, "where", call(ctx, "less", index, scalar(ctx, 0, "int64")),
                 call(ctx, "add", index, scalar(ctx, size, "int64")), index, name="index")
    inside = call(ctx, "logical_and", call(ctx, "greater_equal", index, scalar(ctx, 0, "int64")),
                  call(ctx, "less", index, scalar(ctx, size, "int64")), name="inside")
    clipped = call(ctx, "minimum", call(ctx, "maximum", index, scalar(ctx, 0, "int64")),
                   scalar(ctx, max(size - 1, 0), "int64"))
    rows = call(ctx, "take", ctx.expr(ctx.const(table)), clipped, axis=axis, name="rows")
    after = table.ndim - axis - 1
    spread = tuple(range(axis)) + tuple(range(axis + indices.ndim, axis + indices.ndim + after))
    if spread:
        inside = call(ctx, "expand_dims", inside, axis=spread)
    return make_call("where", inside, rows, scalar(ctx, 0, table.dtype.name))


__all__ = ["dequantized_weight", "unpack_codes"]
