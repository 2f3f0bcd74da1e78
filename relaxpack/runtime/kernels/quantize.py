"""Quantization kernels that are not compositions of others: ``dynamic_quantize_params``.

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

import numpy as np

from ..fpstate import quiet
from ._registry import register_kernel

_F32 = np.float32


@register_kernel("dynamic_quantize_params")
def dynamic_quantize_params(x, *, out):
    """``out = (y_scale, zero point)``: ``scale = (max(max x, 0) - min(min x, 0)) / 255``
    (1 when that span is 0, as onnxruntime), zero point ``round(clip(-min / scale, 0, 255))``
    as float32 (an empty ``x`` has the range (-inf, inf) of the reductions' identities: scale 1, 0)."""
    scale_out, zero_point_out = out
    with quiet():
        scale, zero_point = _params(x)
    np.copyto(scale_out, scale, casting="unsafe")
    np.copyto(zero_point_out, zero_point, casting="unsafe")


def _params(x):
    top = np.maximum.reduce(x, axis=None) if x.size else _F32(-np.inf)
    bottom = np.minimum.reduce(x, axis=None) if x.size else _F32(np.inf)
    lo = np.minimum(bottom, _F32(0))
    span = np.subtract(np.maximum(top, _F32(0)), lo, dtype=_F32)
    scale = np.where(np.equal(span, _F32(0)), _F32(1), np.divide(span, _F32(255)))
    return scale, np.rint(np.clip(np.negative(np.divide(lo, scale)), _F32(0), _F32(255)))
