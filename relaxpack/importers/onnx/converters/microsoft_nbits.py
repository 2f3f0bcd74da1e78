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
"""

from __future__ import annotations

import numpy as np

from ....ops.registry import make_call
from ..registry import register_converter
from ._math_common import unsupported
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


__all__ = ["dequantized_weight", "unpack_codes"]
