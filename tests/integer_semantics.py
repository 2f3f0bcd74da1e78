"""The exact result of an integer GEMM, and onnxruntime's known deviation from it.

ONNX defines MatMulInteger (and ConvInteger, QLinearMatMul, QLinearConv,
com.microsoft's MatMulIntegerToFloat and DynamicQuantizeMatMul) by the exact
int32 sum of products. onnxruntime's u8 x s8 kernels on x86-64 CPUs without
VNNI multiply with ``vpmaddubsw``: the products of adjacent elements along K
are added in pairs with int16 saturation before the int32 sum, so its result
depends on the CPU. Tests judge relaxpack by the exact result; where they also
run onnxruntime they use inputs whose pairs cannot saturate, or assert its
behaviour as :func:`ort_u8s8_matmul` models it (checked equal to onnxruntime
under ``qemu-x86_64 -cpu Haswell``, bit for bit, with and without zero points).
"""

from __future__ import annotations

import numpy as np

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


def exact_matmul_integer(a, b, a_zero_point=0, b_zero_point=0) -> np.ndarray:
    """``(a - a_zero_point) @ (b - b_zero_point)`` in exact integers, as int32 (ONNX's MatMulInteger)."""
    lhs = np.asarray(a).astype(np.int64) - np.asarray(a_zero_point).astype(np.int64)
    rhs = np.asarray(b).astype(np.int64) - np.asarray(b_zero_point).astype(np.int64)
    return (lhs @ rhs).astype(np.int32)


def ort_u8s8_matmul(a, b, a_zero_point=0, b_zero_point=0) -> np.ndarray:
    """onnxruntime's MatMulInteger of uint8 ``a`` (..., K) by int8 ``b`` (K, N) on a
    CPU without VNNI: raw products summed in int16-saturating pairs along K, then
    the zero points corrected exactly (per-tensor zero points)."""
    a = np.asarray(a).astype(np.int64)
    b = np.asarray(b).astype(np.int64)
    k = a.shape[-1]
    if k % 2:                               # a zero product pads the last pair
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), np.int64)], axis=-1)
        b = np.concatenate([b, np.zeros((1, b.shape[1]), np.int64)], axis=0)
    products = a[..., :, None] * b                                  # (..., K, N)
    pairs = np.clip(products[..., 0::2, :] + products[..., 1::2, :], INT16_MIN, INT16_MAX)
    raw = pairs.sum(axis=-2)
    za, zb = int(a_zero_point), int(b_zero_point)
    corrected = raw - zb * a.sum(axis=-1, keepdims=True) - za * b.sum(axis=0) + k * za * zb
    return corrected.astype(np.int32)


def pairs_cannot_saturate(a, b) -> bool:
    """Whether no pair of products ``a[k] b[k] + a[k+1] b[k+1]`` can leave int16,
    whatever the order of the values (the raw values, before zero points)."""
    largest = int(np.abs(np.asarray(a).astype(np.int64)).max(initial=0))
    return 2 * largest * int(np.abs(np.asarray(b).astype(np.int64)).max(initial=0)) <= INT16_MAX
