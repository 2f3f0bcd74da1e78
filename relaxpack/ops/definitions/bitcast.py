"""Bit-level dtype changes: bitcast (the same bits read as another dtype of
the same width) and to_float8_e8m0 (the exponent of a float32, rounded as
asked: the MX scale type has no mantissa).

>>> make_call("bitcast", x, dtype="int32")       # x: float32  # doctest: +SKIP
>>> make_call("to_float8_e8m0", x, saturate=True, round_mode="up")   # doctest: +SKIP
"""

from __future__ import annotations

import re

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import REQUIRED, register_op
from .common import attr_error, dtype_attr, fmt_sinfo, shape_error, tensor_arg, with_shape


def bit_width(dtype: str) -> int | None:
    """The width in bits of an IR dtype (a bool is one byte, as ONNX stores
    it); None for a string.

    >>> bit_width("float8_e4m3fn"), bit_width("int4"), bit_width("complex64"), bit_width("bool")
    (8, 4, 64, 8)
    """
    if dtype == "bool":
        return 8
    found = re.match(r"(?:u?int|b?float|complex)(\d+)", dtype)
    return int(found.group(1)) if found else None


def _infer_bitcast(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    dtype = dtype_attr(call)
    if data.dtype is not None:
        src, dst = bit_width(data.dtype), bit_width(dtype)
        if src is None or dst is None or src != dst:
            raise shape_error(call, f"cannot reinterpret {fmt_sinfo(data)} as {dtype}: the bit widths "
                                    f"({src} and {dst}) must be equal and strings have none")
    return with_shape(data, data.shape, dtype, data.ndim)


register_op("bitcast", infer=_infer_bitcast, attrs={"dtype": REQUIRED}, num_args=1,
            doc="Reinterpret the bits (little endian) as dtype, of the same bit width; the shape is kept.")


E8M0_ROUND_MODES = ("up", "down", "nearest")


def _infer_to_float8_e8m0(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    if data.dtype is not None and not data.dtype.startswith(("float", "bfloat", "int", "uint")):
        raise shape_error(call, f"needs a numeric tensor, got {fmt_sinfo(data)}")
    if call.attrs["round_mode"] not in E8M0_ROUND_MODES:
        raise attr_error(call, f"round_mode must be one of {', '.join(E8M0_ROUND_MODES)}, "
                               f"got {call.attrs['round_mode']!r}")
    if not isinstance(call.attrs["saturate"], bool):
        raise attr_error(call, f"attribute saturate must be a bool, got {call.attrs['saturate']!r}")
    return with_shape(data, data.shape, "float8_e8m0fnu", data.ndim)


register_op("to_float8_e8m0", infer=_infer_to_float8_e8m0, attrs={"saturate": True, "round_mode": "up"},
            num_args=1,
            doc="ONNX Cast to float8_e8m0fnu: the float32 exponent, rounded up, down or to nearest by the "
                "mantissa; saturate keeps the largest finite exponent from rounding to NaN.")
