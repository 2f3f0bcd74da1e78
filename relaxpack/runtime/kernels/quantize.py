"""Quantization kernels that are not compositions of others: ``dynamic_quantize_params``,
``dynamic_quantize``.

DynamicQuantizeLinear's scale and zero point are scalars: as an IR
composition they were seven instructions of a few microseconds each per
quantized activation (a dynamically quantized BERT layer has four). The
kernel makes the composition's float32 operations in its order, so the
results are the same bits (NaN and infinities included).

>>> scale, zp = np.empty((), np.float32), np.empty((), np.float32)
>>> dynamic_quantize_params(np.array([-1.0, 2.0], np.float32), out=(scale, zp))
>>> float(scale), float(zp)
(0.0117647061124444, 85.0)
"""

from __future__ import annotations

import math
import struct
from typing import Callable

import numpy as np

from ..fpstate import quiet
from ._math import CLIP
from .elementwise import clip, divide
from ._registry import register_kernel

_F32 = np.float32
#: uint8's range as read-only 0-d float32 arrays (dynamic_quantize's clip)
_ZERO, _TOP = np.zeros((), _F32), np.full((), 255.0, _F32)
_ZERO.flags.writeable = _TOP.flags.writeable = False


def _bounds_around(zero_point: int) -> tuple[np.ndarray, np.ndarray]:
    low, high = np.full((), -zero_point, _F32), np.full((), 255 - zero_point, _F32)
    low.flags.writeable = high.flags.writeable = False
    return low, high


#: per zero point ``k`` in [0, 255], uint8's range less ``k`` (``-k``, ``255 - k``) as read-only
#: 0-d float32 arrays: the clip of ``dynamic_quantize`` with ``any_zero_sign``
_AROUND = tuple(_bounds_around(k) for k in range(256))


@register_kernel("dynamic_quantize_params")
def dynamic_quantize_params(x, *, out):
    """``out = (y_scale, zero point)``: ``scale = (max(max x, 0) - min(min x, 0)) / 255``
    (1 when that span is 0, as onnxruntime), zero point ``round(clip(-min / scale, 0, 255))``
    as float32 (an empty ``x`` has the range (-inf, inf) of the reductions' identities: scale 1, 0)."""
    scale_out, zero_point_out = out
    fast = _finite_params(x) if x.dtype == _F32 and x.size else None
    if fast is not None:
        scale_out.fill(fast[0])
        zero_point_out.fill(fast[1])
        return
    with quiet():
        scale, zero_point = _params(x)
    np.copyto(scale_out, scale, casting="unsafe")
    np.copyto(zero_point_out, zero_point, casting="unsafe")


@register_kernel("dynamic_quantize")
def dynamic_quantize(x, *, out, scales, any_zero_sign):
    """``out = (y_scale, zero point, y - zero point)``: :func:`dynamic_quantize_params`, then the
    importer's chain ``clip(round(x / y_scale) + zp, 0, 255)`` (NaN to 0) minus
    ``float32(uint8(zp))``, each step the kernel the chain's instruction ran, in its order (the same
    bits). In the usual case (a finite range strictly around 0) ``x`` is finite and ``zp`` an integer
    in [0, 255], so no NaN can come and the zero point's casts change nothing: five numpy calls,
    each with 0-d array operands (a numpy scalar costs a small ufunc call twice as much); with
    ``any_zero_sign`` (nothing reads the sign of ``y``'s zeros) three, ``clip(round(x / y_scale),
    -zp, 255 - zp)``: the same integers, but ``round(-0.3)``'s -0.0 stays where the chain's
    ``+ zp ... - zp`` makes +0.0. The items after ``y`` are ``y_scale * c`` in float32 for each
    ``c`` of ``scales`` (:func:`_scale_products`)."""
    scale, zero_point, y = out[:3]
    fast = _finite_params(x) if x.dtype == _F32 and x.size else None
    if fast is not None:
        scale.fill(fast[0])
        zero_point.fill(fast[1])
        np.divide(x, scale, y)
        np.rint(y, y)
        if any_zero_sign:
            low, high = _AROUND[int(fast[1])]
            CLIP(y, low, high, y)
        else:
            np.add(y, zero_point, y)
            CLIP(y, _ZERO, _TOP, y)
            np.subtract(y, zero_point, y)
        _scale_products(fast[0], scale, scales, out[3:])
        return
    dynamic_quantize_params(x, out=(scale, zero_point))
    divide(x, scale, out=y)
    with quiet():
        np.rint(y, out=y)
        np.add(y, zero_point, out=y)
        clip(y, out=y, min=0.0, max=255.0, saturate_nan=True)
        stored = np.empty((), np.uint8)
        np.copyto(stored, zero_point, casting="unsafe")
        np.subtract(y, stored.astype(_F32), out=y)
    _scale_products(None, scale, scales, out[3:])


def _specialize_dynamic_quantize(attrs: dict, constant) -> Callable:
    """The kernel with this instruction's attributes bound (no keywords to unpack per call)."""
    scales, any_zero_sign = tuple(attrs["scales"]), bool(attrs["any_zero_sign"])

    def run(x, *, out, workspace=None):
        dynamic_quantize(x, out=out, scales=scales, any_zero_sign=any_zero_sign)
    return run


dynamic_quantize.specialize_attrs = _specialize_dynamic_quantize


def _scale_products(value, scale, scales, products) -> None:
    """Each ``products[i] = scale * scales[i]`` as the float32 multiply kernel makes it. With the
    usual case's Python ``value`` of the scale (a float32 value) the double product of two float32
    values is exact, so its one rounding to float32 is the float32 product: ``fill`` with a Python
    float makes that rounding (C's double-to-float cast, as ``struct``'s did, without its two
    calls). A product past float32's largest value (which would round to inf, or warn), or no
    ``value``, multiplies in numpy."""
    if value is not None:
        for c, product in zip(scales, products):
            exact = value * c
            if not -_F32_MAX <= exact <= _F32_MAX:
                break
            product.fill(exact)
        else:
            return
    with quiet():
        for c, product in zip(scales, products):
            np.multiply(scale, _F32(c), out=product)


#: a Python float rounded to float32 (to nearest even) is ``_UNPACK_F32(_PACK_F32(v))[0]``;
#: OverflowError past float32's range
_PACK_F32, _UNPACK_F32 = struct.Struct("f").pack, struct.Struct("f").unpack
_INF = math.inf
#: float32's largest finite value, as a Python float
_F32_MAX = float(np.finfo(_F32).max)


def _finite_params(x):
    """:func:`_params` as Python floats for the usual case, a finite range strictly around 0
    (``min x < 0 < max x``, a nonzero scale); None otherwise (zeros, whose signs numpy's
    maximum/minimum/clip decide, infinities, NaN). Each float32 operation is made in float64
    and rounded once to float32, which is the float32 result: for +, -, * and / a double
    holds more than twice float32's precision, so the double rounding is innocuous. The
    extremes are read at ``argmax`` / ``argmin`` (a quarter of a ``maximum.reduce``'s call on
    a few hundred values; the index of a NaN if there is one, the same value otherwise, a zero
    of either sign only where the path is not taken) and a few Python operations instead of a
    dozen numpy scalar calls."""
    top, bottom = x.item(x.argmax()), x.item(x.argmin())     # a NaN's index, if any: its value
    if not (bottom < 0.0 < top < _INF and bottom > -_INF):       # (comparisons: no NaN, no inf)
        return None
    try:                            # (the rounding inline: a call was a fifth of this)
        span = _UNPACK_F32(_PACK_F32(top - bottom))[0]
    except OverflowError:           # the span is inf: numpy's path
        return None
    scale = _UNPACK_F32(_PACK_F32(span / 255.0))[0]
    if scale == 0.0:
        return None
    initial = -_UNPACK_F32(_PACK_F32(bottom / scale))[0]      # >= 0: bottom < 0 < scale
    return scale, float(round(initial)) if initial < 255.0 else 255.0   # round: half to even, as rint


def _params(x):
    top = np.maximum.reduce(x, axis=None) if x.size else _F32(-np.inf)
    bottom = np.minimum.reduce(x, axis=None) if x.size else _F32(np.inf)
    lo = np.minimum(bottom, _F32(0))
    span = np.subtract(np.maximum(top, _F32(0)), lo, dtype=_F32)
    scale = np.where(np.equal(span, _F32(0)), _F32(1), np.divide(span, _F32(255)))
    return scale, np.rint(np.clip(np.negative(np.divide(lo, scale)), _F32(0), _F32(255)))
