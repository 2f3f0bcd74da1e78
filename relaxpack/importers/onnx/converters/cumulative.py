"""CumProd (opset 26): a constant axis becomes the op's attribute; an axis
the model computes is passed as an operand and read at run time (the shape
does not depend on it)::

    CumProd(x, axis=1)       ->  R.cumprod(x, axis=1, exclusive=False, reverse=False)
    CumProd(x, axis: input)  ->  R.cumprod(x, axis)
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ._shape_common import norm_axis, shape_error


@register_converter("", "CumProd", since_opset=26)
def cumprod(ctx, x, axis, *, exclusive=0, reverse=0):
    if x is None or axis is None:
        raise shape_error(ctx, "needs the inputs x and axis")
    if axis.dtype not in (None, "int32", "int64"):
        raise shape_error(ctx, f"axis must be int32 or int64, got {axis.dtype}")
    if axis.shape is not None and len(axis.shape) > 1:
        raise shape_error(ctx, f"axis must be a scalar or hold one value, got rank {len(axis.shape)}")
    flags = {"exclusive": bool(exclusive), "reverse": bool(reverse)}
    ints = axis.int_values()
    if ints is None or not all(isinstance(i, int) for i in ints):
        return make_call("cumprod", ctx.expr(x), ctx.expr(axis), **flags)
    if len(ints) != 1:
        raise shape_error(ctx, f"axis must hold one value, got {len(ints)}")
    ax = int(ints[0])
    if x.ndim >= 0:
        ax = norm_axis(ctx, ax, x.ndim)
    return make_call("cumprod", ctx.expr(x), axis=ax, **flags)
