"""Bit-level casts: BitCast (opset 26), the same bits as another dtype of the
same width; and Cast/CastLike from opset 24, whose ``round_mode`` says how a
cast to float8_e8m0fnu (an exponent alone) rounds. Other targets go the
ordinary way (``shape.py``)::

    BitCast(x: float32, to=INT32)                ->  R.bitcast(x, dtype="int32")
    Cast(x, to=FLOAT8E8M0, round_mode="up")      ->  R.to_float8_e8m0(x, saturate=True, round_mode="up")
"""

from __future__ import annotations

from ....ops.definitions.bitcast import E8M0_ROUND_MODES, bit_width
from ....ops.registry import make_call
from ..registry import register_converter
from ..tensors import onnx_dtype_name
from ._shape_common import shape_error, unsupported
from .shape import _cast, _like_dtype, _target_dtype


@register_converter("", "BitCast", since_opset=26)
def bitcast(ctx, x, *, to):
    dtype = onnx_dtype_name(int(to), f"{ctx.node_label()}'s target")
    if "string" in (dtype, x.dtype):
        raise unsupported(ctx, "BitCast to or from strings is not defined")
    if x.dtype is not None and bit_width(x.dtype) != bit_width(dtype):
        raise shape_error(ctx, f"cannot reinterpret {x.dtype} ({bit_width(x.dtype)} bits) as {dtype} "
                               f"({bit_width(dtype)} bits): the widths must be equal")
    if x.dtype == dtype:
        return x
    return make_call("bitcast", ctx.expr(x), dtype=dtype)


@register_converter("", "Cast", since_opset=24)
def cast_v24(ctx, x, *, to, saturate=1, round_mode="up"):
    return _cast_rounding(ctx, x, _target_dtype(ctx, to), saturate, round_mode)


@register_converter("", "CastLike", since_opset=24)
def cast_like_v24(ctx, x, target, *, saturate=1, round_mode="up"):
    return _cast_rounding(ctx, x, _like_dtype(ctx, target), saturate, round_mode)


def _cast_rounding(ctx, x, dtype: str, saturate: int, round_mode: str):
    if round_mode not in E8M0_ROUND_MODES:
        raise unsupported(ctx, f"round_mode must be one of {', '.join(E8M0_ROUND_MODES)}, got {round_mode!r}")
    if dtype != "float8_e8m0fnu" or x.dtype == dtype:
        return _cast(ctx, x, dtype, saturate)
    if x.dtype in ("string", "bool"):
        raise unsupported(ctx, f"casting {x.dtype} to float8_e8m0fnu is not supported")
    return make_call("to_float8_e8m0", ctx.expr(x), saturate=bool(saturate), round_mode=round_mode)
