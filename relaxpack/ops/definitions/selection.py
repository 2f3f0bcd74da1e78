"""Selections whose result size depends on the data: unique, compress.

The importer calls their packed kernels with ``call_packed`` and binds the
results with ``match_cast`` to shapes with fresh symbolic dims for the
selected counts; these definitions give the ranks and dtypes.

>>> make_call("unique", x, axis=None, sorted=True)    # doctest: +SKIP
>>> make_call("compress", x, condition, axis=1)       # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..registry import register_op
from .common import BOOL, bool_attr, check_dtype_kind, int_attr, normalize_axis, shape_error, tensor_arg, with_shape


def _axis(call: Call, data: TensorStructInfo) -> int | None:
    axis = int_attr(call, "axis", allow_none=True)
    if axis is not None and data.ndim == 0:
        raise shape_error(call, "an axis needs a tensor of rank >= 1, got a scalar")
    if axis is not None and data.ndim > 0:
        normalize_axis(call, axis, data.ndim)
    return axis


def _infer_unique(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    data = tensor_arg(call, 0)
    bool_attr(call, "sorted")
    axis = _axis(call, data)
    y = with_shape(data, None, ndim=1 if axis is None else data.ndim)
    ints = with_shape(data, None, "int64", ndim=1)
    return TupleStructInfo((y, ints, ints, ints))


register_op("unique", data_dependent=True, infer=_infer_unique, attrs={"axis": None, "sorted": True}, num_args=1,
            doc="ONNX Unique: (unique values or slices along axis, first-occurrence indices, inverse "
                "indices, counts); sizes depend on the data (call the packed kernel).")


def _infer_compress(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, condition = tensor_arg(call, 0), tensor_arg(call, 1, "condition")
    check_dtype_kind(call, condition, BOOL, "condition")
    if condition.ndim not in (-1, 1):
        raise shape_error(call, f"condition must be 1-D, got rank {condition.ndim}")
    axis = _axis(call, data)
    return with_shape(data, None, ndim=1 if axis is None else data.ndim)


register_op("compress", data_dependent=True, infer=_infer_compress, attrs={"axis": None}, num_args=2,
            doc="numpy / ONNX Compress: the slices along axis (of the flattened tensor when None) where the "
                "1-D bool condition holds; the size depends on the data (call the packed kernel).")
