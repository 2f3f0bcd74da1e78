"""GELU whose divisor is sqrt(2) rounded to float16: ``nn.gelu`` of a scaled input, in float32.

onnxconverter-common's float16 conversion rounds the erf GELU's ``sqrt(2)`` to 1.4140625, so
``x * (erf(x / c) + 1) * 0.5`` is not ``nn.gelu`` (compose_gelu wants ``c`` within 1e-6 of
sqrt(2)); it stayed an erf chain, computed in float32 (widen_float16): a float32 erf of ~35
passes plus four more (ViT float16: ~23 of its ~46 us per fc1 call at 1088 values). With
``s = sqrt(2) / c``, ``x / c = (x s) / sqrt(2)``, so::

    x * (erf(x / c) + 1) * 0.5 = nn.gelu(x s) / s

which this rule writes as ``astype(multiply(nn.gelu(multiply(astype(x, float32), s)), 1 / s),
float16)`` (a float32 ``x`` without the casts; a float16 product ``x`` read only here as its float32
product, unrounded, as the widened chain read it): the same function, ``c`` as written (matching
sqrt(2) instead would move 5.5% of float16 results by up to 4 ulps, see the design notes), in
float32 like onnxruntime's chain; the roundings of the two scalings (2 of ~1e-7) and GELU's own
sit far below float16's, so a float16 result moves by one ulp only where float32 lands within a
few float32 ulps of a float16 rounding boundary. ``c`` must be within float16's rounding of
sqrt(2) (relative 2**-10) and not already sqrt(2) (compose_gelu's).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.expr import Call, Constant
from ..ops.registry import make_call
from .core.rules import Match

#: how far from sqrt(2) a divisor may be: float16's rounding (half an ulp at 1.4 is 2**-11 relative)
_TOLERANCE = 2.0 ** -10


def divisor_check(m: Match) -> str | None:
    """None when the erf's input is ``x / c`` with ``c`` sqrt(2) rounded (not sqrt(2) itself)."""
    if "sqrt2" not in m:
        return "the erf input is not a division"
    data = m.data("sqrt2")
    if data.size != 1 or data.dtype.kind != "f":
        return "the divisor is not one float value"
    c = float(data.reshape(-1)[0])
    if not math.isfinite(c) or abs(c / math.sqrt(2) - 1) > _TOLERANCE:
        return f"the divisor {c!r} is not sqrt(2) rounded"
    if math.isclose(c, math.sqrt(2), rel_tol=1e-6):
        return "the divisor is sqrt(2) (compose_gelu)"
    dtype = getattr(m["x"].struct_info, "dtype", None)
    if dtype not in ("float16", "float32"):
        return f"x is {dtype}, not float16 or float32"
    return None


def _widened(m: Match, x):
    """``x`` in float32: a float16 product read only by the chain (its two reads of ``x``) becomes
    the float32 product, unrounded, as widen_float16_regions keeps a product feeding float32 math
    and as onnxruntime computes it (no float16 kernel: the cast pair between the two removed);
    anything else is cast."""
    value, uses = m.producer(x)
    if uses == 2 and isinstance(value, Call) and getattr(value.op, "name", None) == "matmul" \
            and value.attrs.get("out_dtype") is None:
        return make_call("matmul", *value.args, out_dtype="float32")
    return make_call("astype", x, dtype="float32")


def rewrite(m: Match):
    """x * (erf(x / c) + 1) * 0.5 -> nn.gelu(x * s) / s in float32, s = sqrt(2) / c."""
    c = float(m.data("sqrt2").reshape(-1)[0])
    scale = math.sqrt(2) / c
    x = m["x"]
    low = x.struct_info.dtype == "float16"
    wide = _widened(m, x) if low else x
    scaled = make_call("multiply", wide, Constant(np.array(scale, np.float32)))
    gelu = make_call("nn.gelu", scaled, approximate="none")
    out = make_call("multiply", gelu, Constant(np.array(1 / scale, np.float32)))
    return make_call("astype", out, dtype="float16") if low else out
