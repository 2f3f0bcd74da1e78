"""MurmurHash3 (x86, 32-bit) of each element: com.microsoft MurmurHash3, which skl2onnx's
FeatureHasher emits (scikit-learn hashes its tokens with the same function).

A string is hashed by its UTF-8 bytes, an int32 or uint32 key by its four bytes (little
endian, as onnxruntime reads the tensor's memory). Keys are one block each, so they hash as
whole arrays in uint32 arithmetic (numpy's integer arrays wrap, as the algorithm needs);
strings, of any length, one by one in Python integers.

>>> murmur_hash3_bytes(b"hello", 0)
613153351
"""

from __future__ import annotations

import numpy as np

from ...errors import ExecutionError
from ._registry import register_kernel

_C1, _C2 = 0xCC9E2D51, 0x1B873593
_MASK = 0xFFFFFFFF


def _rotl(v: int, r: int) -> int:
    return ((v << r) | (v >> (32 - r))) & _MASK


def _scrambled(k: int) -> int:
    return (_rotl((k * _C1) & _MASK, 15) * _C2) & _MASK


def _finished(h: int, length: int) -> int:
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    return h ^ (h >> 16)


def murmur_hash3_bytes(data: bytes, seed: int) -> int:
    """The unsigned 32-bit hash of ``data``."""
    h = seed & _MASK
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        h ^= _scrambled(int.from_bytes(data[i:i + 4], "little"))
        h = (_rotl(h, 13) * 5 + 0xE6546B64) & _MASK
    tail = data[whole:]
    if tail:
        h ^= _scrambled(int.from_bytes(tail, "little"))
    return _finished(h, len(data))


def _rotl_array(v: np.ndarray, r: int) -> np.ndarray:
    return (v << np.uint32(r)) | (v >> np.uint32(32 - r))


def _hash_keys(keys: np.ndarray, seed: int) -> np.ndarray:
    """The hashes of uint32 ``keys`` (one four-byte block each), uint32."""
    k = _rotl_array(keys * np.uint32(_C1), 15) * np.uint32(_C2)
    h = _rotl_array(np.uint32(seed & _MASK) ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    h ^= np.uint32(4)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _text_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    raise ExecutionError(f"murmur_hash3: a string tensor holds a {type(value).__name__}")


@register_kernel("murmur_hash3")
def murmur_hash3(x, *, out, seed, positive):
    """Each element's hash into ``out``: uint32 when ``positive``, else the same bits as int32."""
    if x.dtype == object:
        flat = [murmur_hash3_bytes(_text_bytes(v), seed) for v in x.reshape(-1).tolist()]
        hashes = np.array(flat, dtype=np.uint32).reshape(x.shape)
    else:
        hashes = _hash_keys(np.ascontiguousarray(x.reshape(-1)).view(np.uint32), seed).reshape(x.shape)
    out[...] = hashes if positive else hashes.view(np.int32)
