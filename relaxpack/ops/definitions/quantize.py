"""Quantization ops that are not compositions of others.

``dynamic_quantize_params(x)``: DynamicQuantizeLinear's scale and (rounded,
float32) zero point from the range of float32 ``x`` widened to include 0, as
two float32 scalars. The importer's composition computed them in seven
scalar instructions per quantized activation; the kernel makes the same
float32 operations in the same order (results bit for bit the composition's).

``dynamic_quantize(x)``: the same two scalars and, third, ``x`` quantized to
uint8 with its zero point taken off, in float32 (``clip(round(x / scale) +
zp, 0, 255) - zp``): the whole DynamicQuantizeLinear as an integer product
reads it (FuseDynamicQuantize), in one kernel call instead of three. Its
``scales`` attribute (float32 values) adds ``y_scale * c`` for each ``c`` as
further items: the scales of the products that read ``y``, which were one
scalar multiply kernel each. With ``any_zero_sign`` (set where nothing reads
the sign of ``y``'s zeros) ``y`` may hold -0.0 where the composition makes
+0.0: the kernel then clips ``round(x / scale)`` to ``[-zp, 255 - zp]``.

>>> make_call("dynamic_quantize_params", x)          # doctest: +SKIP
>>> make_call("dynamic_quantize", x)                 # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TupleStructInfo
from ..registry import register_op
from .common import shape_error, tensor_arg, with_shape


def _infer_dynamic_quantize_params(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    x = tensor_arg(call, 0, "x")
    if x.dtype not in (None, "float32"):
        raise shape_error(call, f"x must be float32, got {x.dtype}")
    scalar = with_shape(x, (), "float32")
    return TupleStructInfo((scalar, scalar))


register_op("dynamic_quantize_params", infer=_infer_dynamic_quantize_params, num_args=1,
            doc="DynamicQuantizeLinear's (y_scale, zero point as a rounded float32) from the range of x.")


def _infer_dynamic_quantize(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    scale, zero_point = _infer_dynamic_quantize_params(call, analyzer).fields
    x = tensor_arg(call, 0, "x")
    scales = call.attrs["scales"]
    if not isinstance(scales, tuple) or not all(isinstance(c, float) for c in scales):
        raise shape_error(call, f"scales must be a tuple of floats, got {scales!r}")
    if not isinstance(call.attrs["any_zero_sign"], bool):
        raise shape_error(call, f"any_zero_sign must be a bool, got {call.attrs['any_zero_sign']!r}")
    return TupleStructInfo((scale, zero_point, with_shape(x, x.shape, "float32", x.ndim), *(scale,) * len(scales)))


register_op("dynamic_quantize", infer=_infer_dynamic_quantize, num_args=1, attrs={"scales": (), "any_zero_sign": False},
            doc="DynamicQuantizeLinear's (y_scale, zero point, y - zero point), the last two as float32; then "
                "y_scale times each float32 of scales (the products' scales). any_zero_sign: y's zeros may "
                "be -0.0 (nothing reads their sign).")
