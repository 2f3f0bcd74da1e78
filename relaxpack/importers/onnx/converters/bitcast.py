"""BitCast (opset 26): the same bits as another dtype of the same width.

    BitCast(x: float32, to=INT32)  ->  R.bitcast(x, dtype="int32")
"""

from __future__ import annotations

from ....ops.definitions.bitcast import bit_width
from ....ops.registry import make_call
from ..registry import register_converter
from ..tensors import onnx_dtype_name
from ._shape_common import shape_error, unsupported


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
