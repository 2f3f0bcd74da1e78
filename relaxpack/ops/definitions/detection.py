"""Detection: non_max_suppression.

Its result size depends on the data: the importer calls the packed kernel
with ``call_packed`` and binds the result with ``match_cast`` to
``(n_selected, 3)`` where ``n_selected`` is a fresh symbolic dim.

>>> make_call("non_max_suppression", boxes, scores, max_out, iou, score_threshold)  # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import FLOAT, INT, check_dtype_kind, shape_error, tensor_arg, with_shape


def _infer_nms(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    boxes, scores = tensor_arg(call, 0, "boxes"), tensor_arg(call, 1, "scores")
    check_dtype_kind(call, boxes, FLOAT, "boxes")
    check_dtype_kind(call, scores, FLOAT, "scores")
    check_dtype_kind(call, tensor_arg(call, 2, "max_output_boxes_per_class"), INT, "max_output_boxes_per_class")
    for sinfo, what in ((boxes, "boxes"), (scores, "scores")):
        if sinfo.ndim not in (-1, 3):
            raise shape_error(call, f"{what} must have rank 3, got rank {sinfo.ndim}")
    return with_shape(boxes, None, "int64", ndim=2)


register_op("non_max_suppression", data_dependent=True, infer=_infer_nms, attrs={"center_point_box": 0}, num_args=5,
            doc="ONNX NonMaxSuppression: (n_selected, 3) int64 rows [batch, class, box]; n_selected depends "
                "on the data (call the packed kernel through call_packed and match_cast the result). An "
                "empty max_output_boxes_per_class, iou_threshold or score_threshold is absent.")
