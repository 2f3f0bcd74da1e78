"""Selections whose result size depends on the data: Unique, Compress.

Each calls its packed kernel and binds the results with ``match_cast``: the
selected count is a fresh dim, every other dim stays what it was::

    Unique(x: (n, 4), axis=1)   ->  lv = R.call_packed("unique", x, axis=1, sorted=True)
                                    y = R.match_cast(lv[0], R.Tensor((n, unique_d0), "float32"))
                                    inverse: (4,), first, counts: (unique_d1,)
    Compress(x: (n, 4), c)      ->  R.match_cast(R.call_packed("compress", x, c, axis=None),
                                                 R.Tensor((compress_d0,), "float32"))

Unique's second, third and fourth outputs share the count of the first; the
match_casts give each its own dim, and the runtime checks each.
"""

from __future__ import annotations

from ....ir.expr import ShapeExpr
from ....ops.definitions.common import prod
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._dynamic import packed_call
from ._shape_common import norm_axis, rank_unknown, shape_error, shaped, unsupported


def _axis_dims(ctx, x: Value, axis: int | None, what: str):
    """The normalized axis, or None; an error if the rank does not allow it."""
    if axis is None:
        return None
    if x.ndim < 0:
        raise unsupported(ctx, f"{what} along an axis " + rank_unknown(ctx, x))
    if x.ndim == 0:
        raise shape_error(ctx, "an axis needs an input of rank >= 1, got a scalar")
    return norm_axis(ctx, axis, x.ndim)


@register_converter("", "Unique", since_opset=11)
def unique(ctx, x, *, axis=None, sorted=1):  # noqa: A002 (ONNX's attribute name)
    if x is None:
        raise shape_error(ctx, "needs the input X")
    if x.dtype == "string":
        raise unsupported(ctx, "Unique of strings is not supported")
    ax = _axis_dims(ctx, x, axis, "Unique")
    if ax is None:
        y_shape, inverse_len = (None,), (prod(x.shape) if x.shape is not None else None)
    else:
        y_shape = tuple(None if i == ax else d for i, d in enumerate(x.shape)) if x.shape is not None \
            else (None,) * x.ndim
        inverse_len = x.shape[ax] if x.shape is not None else None
    outputs = [(y_shape, x.dtype), ((None,), "int64"), ((inverse_len,), "int64"), ((None,), "int64")]
    return packed_call(ctx, "unique", [x], outputs, "unique", axis=ax, sorted=bool(sorted))


@register_converter("", "Compress", since_opset=9)
def compress(ctx, x, condition, *, axis=None):
    if x is None or condition is None:
        raise shape_error(ctx, "needs the inputs input and condition")
    if axis is None and condition.ndim > 1:
        # onnxruntime reads an N-D condition without axis flattened, as numpy's x[mask]
        # (paddle2onnx's masked_select); the spec says 1-D
        condition = shaped(ctx, condition, "condition")
        condition = ctx.emit(make_call("reshape", ctx.expr(condition), ShapeExpr((prod(condition.shape),))),
                             "condition")
    if condition.ndim not in (-1, 1):
        raise shape_error(ctx, f"condition must be 1-D, got rank {condition.ndim}")
    if condition.dtype not in (None, "bool"):
        raise shape_error(ctx, f"condition must be bool, got {condition.dtype}")
    if x.ndim < 0 and axis is not None:     # the kernel counts the axis in the rank the run meets
        return packed_call(ctx, "compress", [x, condition], [(None, x.dtype)], "compress", axis=axis)
    ax = _axis_dims(ctx, x, axis, "Compress")
    if ax is None:
        shape = (None,)
    elif x.shape is None:
        shape = (None,) * x.ndim
    else:
        shape = tuple(None if i == ax else d for i, d in enumerate(x.shape))
    return packed_call(ctx, "compress", [x, condition], [(shape, x.dtype)], "compress", axis=ax)
