"""cumprod: the cumulative product along an axis (``cumsum`` lives with the
algorithms). The axis is an attribute, or, when the model computes it, a
scalar int tensor operand read at run time: the result's shape is the
input's either way, so the call stays destination-passing.

>>> make_call("cumprod", x, axis=1, exclusive=False, reverse=True)   # doctest: +SKIP
>>> make_call("cumprod", x, axis_tensor)                             # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import (
    INT, NUMERIC, attr_error, bool_attr, check_dtype_kind, fmt_sinfo, int_attr, normalize_axis,
    shape_error, tensor_arg,
)


def _infer_cumprod(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, NUMERIC)
    bool_attr(call, "exclusive")
    bool_attr(call, "reverse")
    if data.ndim == 0:
        raise shape_error(call, "needs a tensor of rank >= 1, got a scalar")
    axis = int_attr(call, "axis", allow_none=True)
    if len(call.args) == 2:
        if axis is not None:
            raise attr_error(call, "takes the axis as an attribute or as an operand, not both")
        check_dtype_kind(call, tensor_arg(call, 1, "axis"), INT, "axis")
    elif axis is None:
        raise attr_error(call, "needs an axis: the attribute or a second operand")
    elif data.ndim > 0:
        normalize_axis(call, axis, data.ndim, fmt_sinfo(data))
    return data


register_op("cumprod", infer=_infer_cumprod, attrs={"axis": None, "exclusive": False, "reverse": False},
            num_args=(1, 2),
            doc="Cumulative product along axis (the attribute, or a scalar int operand read at run time); "
                "exclusive: without the element itself (the first product is 1); reverse: from the end.")
