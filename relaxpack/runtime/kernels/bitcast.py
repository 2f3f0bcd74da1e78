"""Bit-level dtype changes: bitcast (the same bits read as another dtype)
and to_float8_e8m0 (a float32's exponent, rounded).

>>> out = np.empty(2, np.int32)
>>> bitcast(np.array([1.0, -2.0], np.float32), out=out, dtype="int32"); out
array([ 1065353216, -1073741824], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ._registry import register_kernel


@register_kernel("bitcast")
def bitcast(x, *, out, dtype):
    """``out = x`` reinterpreted as ``out``'s dtype (``dtype`` names it), in
    little-endian byte order. A byte read as a bool is True when it is nonzero
    (numpy would keep a bool whose byte is 2, which compares unequal to True)."""
    x = np.asarray(x)
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    if out.dtype == np.bool_:
        np.not_equal(x.view(np.uint8), 0, out=out)
    else:
        np.copyto(out, x.view(out.dtype))


@register_kernel("to_float8_e8m0")
def to_float8_e8m0(x, *, out, saturate, round_mode):
    """ONNX Cast to float8_e8m0fnu, bit for bit as onnx's reference: the
    input as float32, its biased exponent kept (the sign is dropped; NaN and
    inf give the NaN code 0xFF) and rounded by the mantissa: ``up`` when any
    mantissa bit is set, ``down`` never, ``nearest`` when the guard bit is
    set and the round or sticky bits (or a nonzero exponent) say so.
    ``saturate`` keeps exponent 0xFE from rounding up into 0xFF (NaN).

    >>> out = np.empty(4, np.uint8)     # the codes of float8_e8m0fnu
    >>> to_float8_e8m0(np.array([1.0, 1.5, 3.0, np.inf], np.float32), out=out); out
    array([127, 128, 129, 255], dtype=uint8)
    """
    bits = np.asarray(x, np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    normal = exponent != 0xFF
    if round_mode == "up":
        round_up = (bits & 0x7FFFFF) > 0
    elif round_mode == "nearest":
        guard = (bits & 0x400000) > 0
        round_up = guard & (((bits & 0x200000) > 0) | ((bits & 0x1FFFFF) > 0) | (exponent > 0))
    elif round_mode == "down":
        round_up = np.zeros(bits.shape, bool)
    else:
        raise ValueError(f"to_float8_e8m0: unknown round_mode {round_mode!r}")
    round_up &= normal
    if saturate:
        round_up &= exponent != 0xFE
    exponent += round_up
    codes = np.where(normal, exponent, 0xFF).astype(np.uint8)
    np.copyto(out.view(np.uint8), codes)
