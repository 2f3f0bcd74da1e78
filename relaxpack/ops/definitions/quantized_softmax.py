"""onnxruntime's quantized softmax (com.microsoft QLinearSoftmax): its exponentials and row sums.

``qlinear_softmax_exp(x, shift, scale, axis=a)`` for an int8 / uint8 / int32 ``x`` and float64
scalars ``shift`` and ``scale`` is the tuple ``(t, total)``: with ``d = max(x, a) - x`` (in
int32), ``t = float32(exp((float64(-d) + shift) * scale))`` and ``total`` the sum of ``t`` along
``a`` added left to right in float32 (kept as a dim of 1), as onnxruntime adds. The importer
composed it of a max, a seven-step chain, a cumsum and a take of its last element; one kernel
makes the same values (``runtime/kernels/quantized_softmax.py``: ``t`` from a table of the 256
values ``d`` can take, the sum by rows without the cumsum).

>>> make_call("qlinear_softmax_exp", x, shift, scale, axis=-1)      # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import normalize_axis, shape_error, tensor_arg, with_shape


def _infer_qlinear_softmax_exp(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    x = tensor_arg(call, 0, "x")
    if x.dtype not in (None, "int8", "uint8", "int32"):
        raise shape_error(call, f"x must be int8, uint8 or int32, got {x.dtype}")
    for index, what in ((1, "shift"), (2, "scale")):
        s = tensor_arg(call, index, what)
        if s.dtype not in (None, "float64") or s.ndim not in (-1, 0):
            raise shape_error(call, f"{what} must be a float64 scalar")
    if x.ndim < 1:
        if x.ndim == 0:
            raise shape_error(call, "x must have rank 1 or more")
        return TupleStructInfo((with_shape(x, None, "float32", -1), with_shape(x, None, "float32", -1)))
    axis = normalize_axis(call, call.attrs["axis"], x.ndim)
    if x.shape is None:
        return TupleStructInfo((with_shape(x, None, "float32", x.ndim), with_shape(x, None, "float32", x.ndim)))
    rows = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    return TupleStructInfo((with_shape(x, x.shape, "float32"), with_shape(x, rows, "float32")))


register_op("qlinear_softmax_exp", infer=_infer_qlinear_softmax_exp, attrs={"axis": REQUIRED}, num_args=3,
            doc="QLinearSoftmax's float32 exponentials of max(x) - x and their left-to-right sums along axis.")
