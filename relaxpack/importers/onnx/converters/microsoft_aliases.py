"""com.microsoft ops that are ONNX ops under another name or in an older form.

onnxruntime kept these contrib ops from before ONNX standardized them, and
older exporters and its own tools still write them: TransposeMatMul (the
optimizer's name for FusedMatMul before 1.6), GridSample (torch's custom
export for opsets below 16), Trilu, Range, ExpandDims, GatherND, Pad and
Unique. Each is converted by the ONNX op's converter after its inputs are
put in that op's form:

- Range's delta is optional (1);
- ExpandDims takes one axis as an int32 input (Unsqueeze's axes);
- Pad's pads may be 2-D (1, 2 * rank);
- Unique is 1-D in order of first occurrence and outputs (uniques, the
  index of each input element among them, counts): ONNX Unique unsorted,
  its outputs 0, 2 and 3.
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import ShapeExpr
from ..registry import register_converter
from ._math_common import call, malformed
from .algorithm import range_v11, trilu
from .image import pad_v11
from .microsoft import MS, fused_matmul
from .sampling import grid_sample_v16
from .scatter import gather_nd_v11
from .selection import unique
from .tensor import unsqueeze_v13


@register_converter(MS, "TransposeMatMul", since_opset=1)
def transpose_matmul(ctx, a, b, *, alpha=1.0, transA=0, transB=0):
    """FusedMatMul's former name (without its batch transposes)."""
    return fused_matmul(ctx, a, b, alpha=alpha, transA=transA, transB=transB)


@register_converter(MS, "GridSample", since_opset=1)
def ms_grid_sample(ctx, x, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    """GridSample-16 (4-D input; modes bilinear, nearest, bicubic)."""
    return grid_sample_v16(ctx, x, grid, align_corners=align_corners, mode=mode, padding_mode=padding_mode)


@register_converter(MS, "Trilu", since_opset=1)
def ms_trilu(ctx, x, k=None, *, upper=1):
    return trilu(ctx, x, k, upper=upper)


@register_converter(MS, "Range", since_opset=1)
def ms_range(ctx, start, limit, delta=None):
    """ONNX Range with delta 1 when it is omitted."""
    if delta is None:
        delta = ctx.const(np.array(1, dtype=start.dtype))
    return range_v11(ctx, start, limit, delta)


@register_converter(MS, "ExpandDims", since_opset=1)
def expand_dims(ctx, x, axis):
    """Unsqueeze at one axis (negative counts from the end of the result)."""
    if axis.shape is not None and axis.shape not in ((), (1,)):
        raise malformed(ctx, f"axis must be a scalar, got shape {axis.shape}")
    return unsqueeze_v13(ctx, x, axis)


@register_converter(MS, "GatherND", since_opset=1)
def ms_gather_nd(ctx, data, indices):
    return gather_nd_v11(ctx, data, indices)


@register_converter(MS, "Pad", since_opset=1)
def ms_pad(ctx, data, pads, value=None, *, mode="constant"):
    """Pad-11 with pads given 1-D or as one row (1, 2 * rank)."""
    if pads.ndim == 2:
        if pads.shape is None or pads.shape[0] != 1:
            raise malformed(ctx, f"2-D pads must be one row (1, 2 * rank), got shape {pads.shape}")
        pads = ctx.emit(call(ctx, "reshape", ctx.expr(pads), ShapeExpr((pads.shape[1],))), "pads")
    return pad_v11(ctx, data, pads, value, mode=mode)


@register_converter(MS, "Unique", since_opset=1)
def ms_unique(ctx, x):
    """ONNX Unique unsorted: (uniques, each element's index among them, counts)."""
    if x.ndim != 1:
        raise malformed(ctx, f"the input must be 1-D, got rank {x.ndim}")
    values = unique(ctx, x, sorted=0)
    return values[0], values[2], values[3]
