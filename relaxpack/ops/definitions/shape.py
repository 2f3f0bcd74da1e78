"""Shapes as data: ``shape_to_tensor`` turns a shape value into an int64 tensor.

The ONNX importer keeps shape computations symbolic (``Shape`` gives a
``ShapeExpr``); only when a real op consumes a shape as a tensor does it
become one:

>>> make_call("shape_to_tensor", ShapeExpr((batch, seq)))        # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import attr_error, bool_attr, shape_arg


def _infer_shape_to_tensor(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    shape = shape_arg(call, 0)
    scalar = bool_attr(call, "scalar")
    if scalar:
        if shape.ndim not in (-1, 1):
            raise attr_error(call, f"scalar=True needs a shape of one dim, got ndim={shape.ndim}")
        return TensorStructInfo((), "int64")
    if shape.ndim < 0:
        return TensorStructInfo(None, "int64", ndim=1)
    return TensorStructInfo((shape.ndim,), "int64")


register_op("shape_to_tensor", infer=_infer_shape_to_tensor, attrs={"scalar": False}, num_args=1,
            doc="The dims of a shape value as an int64 tensor (a 0-d one with scalar=True).")
