"""Quantizer scales next to a float conv fold into its constant weight (and bias).

A QDQ model dequantizes each conv's input, ``conv(q * s, W) + b``, and quantizes its output,
``round((conv(x, W) + b) / t)``, then clips and dequantizes. The conv is a float conv
(``exact=False``: its sums are float32 in an order of the kernel's choosing, Winograd's
included), so ``conv(q, W * s)`` and ``conv(x, W / t) + b / t`` are the same values up to that
rounding (the zero padding scales to zero), and the multiply and the divide, each one pass over
the conv's input or output, go. The new weights are computed in float64 and rounded once. A ReLU
inside the conv commutes with a positive ``t``.

Exact convs (a QLinearConv's integer sums, ``exact=True``) keep their divide: their sums are
exact integers and the divide is the quantizer's own, rounded as onnxruntime rounds it. Where
``round`` follows, a result within float32 rounding of a ``.5`` tie may land on the other side of
it: one quantization step, as a different summation order gives (docs/design-notes.md,
"Quantization").
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant
from ..ops.registry import make_call
from .core.rules import Match

#: the fused activations that commute with dividing by a positive factor
_HOMOGENEOUS = (None, "relu")
_FLOATS = ("float32", "float64")


def check(m: Match) -> str | None:
    """None when ``divide(conv, c)`` folds: ``c`` one positive finite value of the conv's float
    dtype, the conv inexact, with no activation or a ReLU, its weight and bias constants whose
    quotients stay finite and normal (or zero)."""
    c, conv = m.data("c"), m["conv"]
    if c.size != 1 or c.ndim > len(m.out_sinfo.shape or ()):
        return f"the divisor has {c.size} elements or more dims than the conv's output"
    if str(c.dtype) not in _FLOATS or str(c.dtype) != str(m.out_sinfo.dtype):
        return f"the divisor is {c.dtype}, not the conv's float32/float64"
    factor = float(c.reshape(-1)[0])
    if not (np.isfinite(factor) and factor > 0):
        return f"the divisor {factor} is not positive and finite"
    if conv.attrs["exact"]:
        return "the conv is exact (integer sums): its divide is the quantizer's own"
    if conv.attrs["activation"] not in _HOMOGENEOUS:
        return f"the conv's activation {conv.attrs['activation']!r} does not commute with a scale"
    for k, arg in enumerate(conv.args[1:3], 1):
        data = m.constant_of(arg)
        if data is None:
            return f"the conv's {'weight' if k == 1 else 'bias'} is not a constant"
        if str(data.dtype) != str(c.dtype):
            return f"the conv's {'weight' if k == 1 else 'bias'} is {data.dtype}"
        if not _stays_normal(data, _scaled(data, np.divide, factor)):
            return f"the conv's {'weight' if k == 1 else 'bias'} over {factor} overflows or turns subnormal"
    return None


def _scaled(data: np.ndarray, op, factor: float) -> np.ndarray:
    """``op(data, factor)`` (np.divide or np.multiply) computed in float64 and rounded once to
    ``data``'s dtype, contiguous: the new weight or bias, as the check tests it and the rewrite
    binds it."""
    with np.errstate(over="ignore", under="ignore"):
        return np.ascontiguousarray(op(data.astype(np.float64), factor).astype(data.dtype))


def _stays_normal(data: np.ndarray, scaled: np.ndarray) -> bool:
    """Whether ``scaled`` is finite and zero exactly where ``data`` is, normal elsewhere."""
    tiny = np.finfo(data.dtype).tiny
    return bool(np.all(np.isfinite(scaled)) and np.all((scaled == 0) == (data == 0))
                and np.all((scaled == 0) | (np.abs(scaled) >= tiny)))


def rewrite(m: Match):
    """divide(nn.conv_bias_act(x, W[, b]), c) -> nn.conv_bias_act(x, W / c[, b / c])."""
    conv, factor = m["conv"], float(m.data("c").reshape(-1)[0])
    args = [conv.args[0]] + [Constant(_scaled(m.constant_of(a), np.divide, factor)) for a in conv.args[1:3]]
    return make_call("nn.conv_bias_act", *args, **dict(conv.attrs))


def check_input(m: Match) -> str | None:
    """None when ``conv(multiply(q, c), W, b)`` folds: ``c`` one finite nonzero value of the conv's
    float dtype, the multiply used by this conv alone, the conv inexact with a constant weight whose
    products stay finite and normal (or zero)."""
    c, conv = m.data("c"), m["conv"]
    if c.size != 1 or c.ndim > len(m.sinfo("q").shape or ()):
        return f"the factor has {c.size} elements or more dims than the conv's input"
    if str(c.dtype) not in _FLOATS or str(c.dtype) != str(m.out_sinfo.dtype):
        return f"the factor is {c.dtype}, not the conv's float32/float64"
    factor = float(c.reshape(-1)[0])
    if not (np.isfinite(factor) and factor != 0):
        return f"the factor {factor} is not finite and nonzero"
    if conv.attrs["exact"]:
        return "the conv is exact (integer sums)"
    weight = m.constant_of(conv.args[1])
    if weight is None or str(weight.dtype) != str(c.dtype):
        return "the conv's weight is not a constant of the factor's dtype"
    if not _stays_normal(weight, _scaled(weight, np.multiply, factor)):
        return f"the conv's weight times {factor} overflows or turns subnormal"
    return None


def rewrite_input(m: Match):
    """nn.conv_bias_act(multiply(q, c), W[, b]) -> nn.conv_bias_act(q, W * c[, b])."""
    conv, factor = m["conv"], float(m.data("c").reshape(-1)[0])
    scaled = Constant(_scaled(m.constant_of(conv.args[1]), np.multiply, factor))
    return make_call("nn.conv_bias_act", m["q"], scaled, *conv.args[2:], **dict(conv.attrs))
