"""The max (min) of a few one-element tensors joined by concat is their elementwise maximum (minimum).

torch.onnx writes Python's ``max(a, b)`` of tensors as ``ReduceMax(Concat(Unsqueeze(a), b))``:
torchvision's mask paste clamps each box corner to the image that way, six times per detection
inside its Loop. Each is a concat and a reduction of two values, two kernel calls of ~2 µs;
``maximum(a, b)`` is one elementwise call, and FuseOps joins it to the box arithmetic around it.
The rewrite is exact: ``np.max`` of a vector is ``np.maximum`` applied along it (the same NaN and
signed-zero results in the same order); ``keepdims=False`` reshapes the (1,) result to ``()``.

:func:`reduce_of_concat_check` and :func:`reduce_of_concat` are SimplifyAlgebra's rule
``reduce_of_one_element_concat``.
"""

from __future__ import annotations

from ..ir.expr import Call, ShapeExpr, Tuple
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.rules import Match

#: reduction -> the elementwise op folding two of its operands
ELEMENTWISE = {"max": "maximum", "min": "minimum"}


def _parts(m: Match) -> tuple | None:
    parts = m["parts"]
    return tuple(parts.fields) if isinstance(parts, Tuple) else None


def _one_element_vector(expr) -> bool:
    sinfo = expr.struct_info
    return isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and tuple(sinfo.shape) == (1,)


def reduce_of_concat_check(m: Match) -> str | None:
    """None when ``m["reduce"]`` reduces a concat (axis 0) of two or more (1,) tensors of its dtype
    over all of its one axis."""
    reduce, concat = m["reduce"], m["concat"]
    parts = _parts(m)
    if parts is None or len(parts) < 2:
        return "the concat's operand is not a tuple of two or more tensors"
    if concat.attrs.get("axis") not in (0, -1):
        return f"the concat joins axis {concat.attrs.get('axis')}, not 0"
    if not all(_one_element_vector(p) for p in parts):
        return "a part of the concat is not a tensor of shape (1,)"
    dtype = reduce.struct_info.dtype if isinstance(reduce.struct_info, TensorStructInfo) else None
    if any(p.struct_info.dtype != dtype for p in parts):
        return "a part of the concat has another dtype than the result"
    axis = reduce.attrs.get("axis")
    if axis is not None and tuple(axis if isinstance(axis, (list, tuple)) else (axis,)) not in ((0,), (-1,)):
        return f"the reduction is over axes {axis}, not the concat's one axis"
    return None


def reduce_of_concat(m: Match):
    """max(concat((a, b, ...)), keepdims=k) -> maximum(maximum(a, b), ...) (reshaped to () unless k)."""
    reduce = m["reduce"]
    parts = _parts(m)
    result = parts[0]
    for part in parts[1:]:
        result = make_call(ELEMENTWISE[reduce.op.name], result, part)
    if not reduce.attrs.get("keepdims", False):
        result = make_call("reshape", result, ShapeExpr(()))
    return result


__all__ = ["ELEMENTWISE", "reduce_of_concat", "reduce_of_concat_check"]
