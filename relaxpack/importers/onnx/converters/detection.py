"""Detection: NonMaxSuppression.

How many boxes survive depends on the scores, so the converter calls the
packed kernel and binds its result to ``(n_selected, 3)`` with a fresh dim::

    NonMaxSuppression(boxes, scores, max_out, iou, score)
        ->  lv = R.call_packed("non_max_suppression", boxes, scores, max_out, iou, score,
                               center_point_box=0)
            selected = R.match_cast(lv, R.Tensor((nms_d0, 3), "int64"))

An omitted optional input is passed as an empty tensor, which the kernel
reads as "absent" (the spec's defaults: no box is selected without
max_output_boxes_per_class; no score filtering without score_threshold).
"""

from __future__ import annotations

import numpy as np

from ..registry import register_converter
from ._dynamic import packed_call
from ._shape_common import shape_error, unsupported


@register_converter("", "NonMaxSuppression", since_opset=10)
def non_max_suppression(ctx, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    if boxes is None or scores is None:
        raise shape_error(ctx, "needs the inputs boxes and scores")
    if center_point_box not in (0, 1):
        raise unsupported(ctx, f"center_point_box must be 0 or 1, got {center_point_box}")
    for name, v in (("boxes", boxes), ("scores", scores)):
        if v.ndim not in (-1, 3):
            raise shape_error(ctx, f"{name} must have rank 3, got rank {v.ndim}")
        if v.dtype is not None and not v.dtype.startswith(("float", "bfloat")):
            raise shape_error(ctx, f"{name} must be a float tensor, got {v.dtype}")
    if boxes.shape is not None and boxes.shape[2] != 4:
        raise shape_error(ctx, f"boxes must be (batches, boxes, 4), got last dim {boxes.shape[2]}")
    optional = [v if v is not None else ctx.const(np.empty(0, dtype))
                for v, dtype in ((max_output_boxes_per_class, np.int64), (iou_threshold, np.float32),
                                 (score_threshold, np.float32))]
    return packed_call(ctx, "non_max_suppression", [boxes, scores, *optional], [((None, 3), "int64")], "nms",
                       center_point_box=int(center_point_box))
