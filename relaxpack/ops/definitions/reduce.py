"""Reductions: sum, mean, max, min, prod over axes; argmax, argmin along one
axis; collapse_sum_like, the sum that undoes a broadcast.

``axis=None`` reduces every axis. Reduced axes disappear, or stay as 1s
with ``keepdims=True``. Negative axes count from the end.

>>> make_call("sum", x, axis=(-1,), keepdims=True)       # (b, s, 64) -> (b, s, 1)   # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import (
    ANY, NUMERIC, bool_attr, check_dtype_kind, fmt_sinfo, int_attr, int_tuple_attr,
    normalize_axes, shape_error, tensor_arg, with_shape,
)


def reduce_sinfo(call: Call, data: TensorStructInfo, axes: tuple[int, ...] | None, keepdims: bool,
                 dtype: str | None) -> TensorStructInfo:
    """The struct info of reducing ``data`` over ``axes`` (``None``: all axes)."""
    if data.ndim < 0:
        if axes is None and not keepdims:
            return with_shape(data, (), dtype)
        return with_shape(data, None, dtype, ndim=-1)
    axes = tuple(range(data.ndim)) if axes is None else normalize_axes(call, axes, data.ndim,
                                                                         fmt_sinfo(data))
    ndim = data.ndim if keepdims else data.ndim - len(axes)
    if data.shape is None:
        return with_shape(data, None, dtype, ndim=ndim)
    if keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape))
    else:
        shape = tuple(d for i, d in enumerate(data.shape) if i not in axes)
    return with_shape(data, shape, dtype)


def _reduce(kinds: frozenset[str]):
    def infer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
        data = tensor_arg(call, 0)
        check_dtype_kind(call, data, kinds)
        axes = int_tuple_attr(call, "axis", allow_none=True, allow_int=True)
        return reduce_sinfo(call, data, axes, bool_attr(call, "keepdims"), data.dtype)
    return infer


_REDUCE = {
    "sum": (NUMERIC, "Sum over axes."),
    "mean": (NUMERIC, "Arithmetic mean over axes."),
    "prod": (NUMERIC, "Product over axes."),
    "max": (frozenset(ANY - {"complex", "string"}), "Maximum over axes."),
    "min": (frozenset(ANY - {"complex", "string"}), "Minimum over axes."),
}

for _name, (_kinds, _doc) in _REDUCE.items():
    register_op(_name, infer=_reduce(_kinds), attrs={"axis": None, "keepdims": False}, num_args=1,
                doc=_doc)


def _infer_arg_reduce(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, NUMERIC)
    axis = int_attr(call, "axis", allow_none=True)
    bool_attr(call, "select_last_index")
    return reduce_sinfo(call, data, None if axis is None else (axis,), bool_attr(call, "keepdims"),
                        "int64")


_ARG_ATTRS = {"axis": None, "keepdims": False, "select_last_index": False}

register_op("argmax", infer=_infer_arg_reduce, attrs=_ARG_ATTRS, num_args=1,
            doc="Index (int64) of the maximum along axis (None: of the flattened tensor).")
register_op("argmin", infer=_infer_arg_reduce, attrs=_ARG_ATTRS, num_args=1,
            doc="Index (int64) of the minimum along axis (None: of the flattened tensor).")


def _infer_collapse_sum_like(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, like = tensor_arg(call, 0), tensor_arg(call, 1, "like")
    check_dtype_kind(call, data, NUMERIC)
    if data.ndim >= 0 and like.ndim >= 0 and like.ndim > data.ndim:
        raise shape_error(call, f"cannot collapse {fmt_sinfo(data)} to the higher rank of {fmt_sinfo(like)}")
    return with_shape(like, like.shape, data.dtype, ndim=like.ndim)


register_op("collapse_sum_like", infer=_infer_collapse_sum_like, num_args=2,
            doc="Sum data down to the shape of like, undoing a broadcast of like to data's shape (the "
                "gradient of a broadcast): over data's leading axes and where like has 1 (Relax's "
                "collapse_sum_like).")
