"""Reductions: ReduceSum/Mean/Max/Min/Prod and the composed L1, L2,
LogSum, LogSumExp, SumSquare; ArgMax and ArgMin.

The reduced axes are an attribute up to one opset and an optional input
from it on (ReduceSum at 13, the others at 18); both resolve to the IR
ops' ``axis`` attribute when the input is a constant. With the input
form an empty ``axes`` reduces every axis, or with ``noop_with_empty_axes``
none: the plain reductions return the input, the composed ones keep their
elementwise steps (ReduceL2 gives ``|x|``, as the spec says).

An ``axes`` input known only at run time goes through the packed kernel
``dyn.reduce`` (see ``_dynamic.py``), with the composed ops' elementwise
steps around it as graph ops. The output's rank is still known: the input's
with ``keepdims``, else the input's less the axes tensor's static length;
its dims become fresh symbols (a dim of 1 stays 1 with ``keepdims``)::

    ReduceL2(x: (n, 4), axes)  ->  sq = R.square(x)
                                   lv = R.call_packed("dyn.reduce", sq, axes, kernel_attrs=(("keepdims", True),
                                                      ("noop_with_empty_axes", False), ("op", "sum")), ...)
                                   s = R.match_cast(lv, R.Tensor(("reduced_d1", "reduced_d2"), "float32"))
                                   y = R.sqrt(s)
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._dynamic import packed_call
from ._math_common import (
    astype, call, const_ints, is_int, is_low_float, kind, malformed, rounded, scalar, unsupported, working,
)


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
    """``finish(sum(unary(x)))``, in float32 for a low float ``x`` (its squares
    or its sum may overflow float16 where the result does not)."""
    def build(ctx, x, axis, keepdims):
        data = working(ctx, x)
        if unary is not None:
            data = call(ctx, unary, data)
        total = make_call("sum", data, axis=axis, keepdims=keepdims)
        if finish is not None:
            total = _via_float(ctx, finish, ctx.expr(ctx.emit(total)), data.struct_info.dtype)
        return rounded(ctx, total, x.dtype)
    return build


def _log_sum_exp(ctx, x, axis, keepdims):
    """``log(sum(exp(x - m))) + m`` with ``m`` the max (0 where it is infinite)."""
    data = astype(ctx, x, "float64") if is_int(x) else working(ctx, x)
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
        if _is_empty(axes):
            axis = ()
        elif _known_at_run_time(axes):
            return _reduce_at_run_time(ctx, op_type, x, axes, bool(keepdims), bool(noop_with_empty_axes))
        else:
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


# ---------------------------------------------------------------- axes known at run time

#: ONNX op -> (elementwise step before, dyn.reduce's op, float step after)
_AT_RUN_TIME = {
    "ReduceSum": (None, "sum", None),
    "ReduceMean": (None, "mean", None),
    "ReduceMax": (None, "max", None),
    "ReduceMin": (None, "min", None),
    "ReduceProd": (None, "prod", None),
    "ReduceL1": ("abs", "sum", None),
    "ReduceL2": ("square", "sum", "sqrt"),
    "ReduceLogSum": (None, "sum", "log"),
    "ReduceLogSumExp": (None, "log_sum_exp", None),
    "ReduceSumSquare": ("square", "sum", None),
}


def _is_empty(axes: Value | None) -> bool:
    """An axes input of static length 0: known to hold no axes, even as a graph input."""
    return axes is not None and axes.shape is not None and len(axes.shape) == 1 and axes.shape[0] == 0


def _known_at_run_time(axes: Value | None) -> bool:
    """An axes input whose contents are not ints at import time (data, or
    symbolic values computed from shapes)."""
    if axes is None:
        return False
    ints = axes.int_values()
    return ints is None or not all(isinstance(v, int) for v in ints)


def _reduce_at_run_time(ctx, op_type: str, x: Value, axes: Value, keepdims: bool, noop: bool):
    """``op_type`` over the run-time ``axes``: ``after(dyn.reduce(before(x)))``."""
    before, op, after = _AT_RUN_TIME[op_type]
    if x.shape is None:
        raise unsupported(ctx, "the input's shape must be known (rank and dims, symbolic is fine) when "
                               "the axes are computed at run time")
    if axes.shape is None or len(axes.shape) != 1:
        raise unsupported(ctx, "the axes input must be a 1-D tensor of known rank")
    if keepdims:
        # a reduced dim becomes 1; which ones is known only at run time
        dims = [1 if d == 1 else None for d in x.shape]
    elif not isinstance(axes.shape[0], int):
        dims = None     # as many axes as the run gives: the result's rank is the run's (tf2onnx's reduce_sum)
    elif axes.shape[0] > len(x.shape):
        raise malformed(ctx, f"{axes.shape[0]} axes for an input of rank {len(x.shape)} (each axis may "
                             f"be reduced once)")
    else:
        dims = [None] * (len(x.shape) - axes.shape[0])
    # the composed ops' steps in float32 for a low float (the plain ones accumulate in float32 anyway)
    composed = before is not None or after is not None or op == "log_sum_exp"
    data = ctx.emit(working(ctx, x)) if composed and is_low_float(x.dtype) else x
    if before is not None:
        data = ctx.emit(make_call(before, ctx.expr(data)), "lv")
    reduced = packed_call(ctx, "dyn.reduce", [data, axes], [(dims, data.dtype)], "reduced", op=op,
                          keepdims=keepdims, noop_with_empty_axes=noop)
    if after is not None:
        reduced = ctx.emit(_via_float(ctx, after, ctx.expr(reduced), data.dtype))
    return rounded(ctx, ctx.expr(reduced), x.dtype) if data.dtype != x.dtype else reduced


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
