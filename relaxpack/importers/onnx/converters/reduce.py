"""Reductions: ReduceSum/Mean/Max/Min/Prod and the composed L1, L2,
LogSum, LogSumExp, SumSquare; ArgMax and ArgMin.

The reduced axes are an attribute up to one opset and an optional input
from it on (ReduceSum at 13, the others at 18); both resolve to the IR
ops' ``axis`` attribute, so the input must be a constant. With the input
form an empty ``axes`` reduces every axis, or with ``noop_with_empty_axes``
none: the plain reductions return the input, the composed ones keep their
elementwise steps (ReduceL2 gives ``|x|``, as the spec says).
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ._math_common import astype, call, const_ints, is_int, kind, scalar


def _via_float(ctx, op: str, expr, dtype: str):
    """``op(expr)`` for a float-only op; integers go through float64 and back."""
    if kind(dtype) not in "iu":
        return make_call(op, expr)
    result = call(ctx, op, astype(ctx, expr, "float64"))
    return make_call("astype", result, dtype=dtype)


def _plain(op: str):
    def build(ctx, x, axis, keepdims):
        if axis == ():
            return x  # reducing no axis: the identity
        return make_call(op, ctx.expr(x), axis=axis, keepdims=keepdims)
    return build


def _sum_of(unary: str | None, finish: str | None = None):
    """``finish(sum(unary(x)))``."""
    def build(ctx, x, axis, keepdims):
        data = ctx.expr(x) if unary is None else call(ctx, unary, ctx.expr(x))
        total = make_call("sum", data, axis=axis, keepdims=keepdims)
        if finish is None:
            return total
        return _via_float(ctx, finish, ctx.expr(ctx.emit(total)), x.dtype)
    return build


def _log_sum_exp(ctx, x, axis, keepdims):
    """``log(sum(exp(x - m))) + m`` with ``m`` the max (0 where it is infinite)."""
    data = astype(ctx, x, "float64") if is_int(x) else ctx.expr(x)
    dtype = data.struct_info.dtype
    peak = call(ctx, "max", data, axis=axis, keepdims=True)
    peak = call(ctx, "where", call(ctx, "isinf", peak), scalar(ctx, 0, dtype), peak)
    shifted = call(ctx, "exp", call(ctx, "subtract", data, peak))
    total = call(ctx, "log", call(ctx, "sum", shifted, axis=axis, keepdims=keepdims))
    if not keepdims:
        peak = call(ctx, "squeeze", peak, axis=axis)  # None: every (reduced, now 1) axis
    result = make_call("add", total, peak)
    return result if dtype == x.dtype else make_call("astype", ctx.expr(ctx.emit(result)), dtype=x.dtype)


#: ONNX op -> (builder, the opset where axes became an input)
_REDUCE = {
    "ReduceSum": (_plain("sum"), 13),
    "ReduceMean": (_plain("mean"), 18),
    "ReduceMax": (_plain("max"), 18),
    "ReduceMin": (_plain("min"), 18),
    "ReduceProd": (_plain("prod"), 18),
    "ReduceL1": (_sum_of("abs"), 18),
    "ReduceL2": (_sum_of("square", "sqrt"), 18),
    "ReduceLogSum": (_sum_of(None, "log"), 18),
    "ReduceLogSumExp": (_log_sum_exp, 18),
    "ReduceSumSquare": (_sum_of("square"), 18),
}


def _reduce_attr(op_type: str, build):
    def convert(ctx, x, *, axes=(), keepdims=1):
        axis = tuple(int(a) for a in axes) if axes else None
        return build(ctx, x, axis, bool(keepdims))
    convert.__name__ = convert.__qualname__ = f"convert_{op_type.lower()}"
    convert.__doc__ = f"ONNX {op_type} with the axes attribute (default: every axis)."
    return convert


def _reduce_input(op_type: str, build):
    def convert(ctx, x, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        axis = const_ints(ctx, axes, "axes")
        if not axis:
            # no axes: every axis, or none (the composed ops keep their
            # elementwise steps: ReduceL2 gives |x|, ReduceLogSum log(x))
            axis = () if noop_with_empty_axes else None
        return build(ctx, x, axis, bool(keepdims))
    convert.__name__ = convert.__qualname__ = f"convert_{op_type.lower()}"
    convert.__doc__ = (f"ONNX {op_type} with an optional constant axes input (empty: every axis, or "
                       f"the input itself with noop_with_empty_axes).")
    return convert


for _op, (_build, _input_since) in _REDUCE.items():
    register_converter("", _op, 1, _reduce_attr(_op, _build))
    register_converter("", _op, _input_since, _reduce_input(_op, _build))


def _arg(op: str):
    def convert(ctx, x, *, axis=0, keepdims=1, select_last_index=0):
        return make_call(op, ctx.expr(x), axis=int(axis), keepdims=bool(keepdims),
                         select_last_index=bool(select_last_index))
    convert.__name__ = convert.__qualname__ = f"convert_{op}"
    convert.__doc__ = f"ONNX {op.capitalize()}: int64 index along axis (first, or last with select_last_index)."
    return convert


register_converter("", "ArgMax", 1, _arg("argmax"))
register_converter("", "ArgMin", 1, _arg("argmin"))
