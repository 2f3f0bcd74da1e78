"""Elementwise ONNX ops: unary math, broadcasting binary ops, variadic
Max/Min/Sum/Mean, comparisons, bitwise and logical ops, Where, Clip.
(Cast, CastLike and Identity live with the shape converters, ``shape.py``.)

Binary ops on values whose int contents are known at import time (a
``Shape`` output and what is computed from it) are evaluated with the dim
algebra instead of emitting IR, so shape subgraphs such as
``Shape -> Gather -> Mul -> Concat -> Reshape`` stay symbolic::

    Mul(Gather(Shape(x), 0), 64)   ->   a value whose contents are (64 * batch,)

Before opset 7 binary ops broadcast ONNX's legacy way (``broadcast=1``,
``axis``); from 7 on, numpy's way, which the IR ops implement.
"""

from __future__ import annotations

import numpy as np

from ....ir.dims import Dim, dim_max, dim_min
from ....ir.struct_info import TensorStructInfo
from ....ops.definitions.common import exact_div
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._dynamic import aligned_all_for_broadcast, aligned_for_broadcast
from ._math_common import (
    astype, call, const_scalar, is_float, is_int, is_low_float, kind, legacy_broadcast, rounded, scalar, unsupported,
    working,
)

# ---------------------------------------------------------------- unary

#: ONNX op -> (IR op, first opset). Ops whose opset 1 had ``consumed_inputs``
#: get a second registration at 6 without it.
_UNARY = {
    "Abs": ("abs", 1), "Neg": ("negative", 1), "Exp": ("exp", 1), "Log": ("log", 1),
    "Sqrt": ("sqrt", 1), "Reciprocal": ("reciprocal", 1), "Floor": ("floor", 1), "Ceil": ("ceil", 1),
    "Round": ("round", 11), "Sign": ("sign", 9), "Sin": ("sin", 7), "Cos": ("cos", 7), "Tan": ("tan", 7),
    "Asin": ("asin", 7), "Acos": ("acos", 7), "Atan": ("atan", 7), "Sinh": ("sinh", 9),
    "Cosh": ("cosh", 9), "Asinh": ("asinh", 9), "Acosh": ("acosh", 9), "Atanh": ("atanh", 9),
    "Erf": ("erf", 9), "IsNaN": ("isnan", 9), "Not": ("logical_not", 1), "BitwiseNot": ("bitwise_not", 18),
}
_CONSUMED_INPUTS = {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil"}


def _unary(op_type: str, ir_op: str, legacy: bool):
    if legacy:
        def convert(ctx, x, *, consumed_inputs=()):
            return _unary_call(ctx, ir_op, x)
    else:
        def convert(ctx, x):
            return _unary_call(ctx, ir_op, x)
    convert.__name__ = convert.__qualname__ = f"convert_{op_type.lower()}"
    convert.__doc__ = f"ONNX {op_type} -> R.{ir_op}."
    return convert


def _unary_call(ctx, ir_op: str, x: Value):
    if ir_op == "negative" and x.sym is not None:
        return _sym_result(ctx, tuple(-d for d in x.sym), x.ndim == 0, x.dtype)
    return make_call(ir_op, ctx.expr(x))


for _op, (_ir, _since) in _UNARY.items():
    register_converter("", _op, _since, _unary(_op, _ir, legacy=_op in _CONSUMED_INPUTS))
    if _op in _CONSUMED_INPUTS:
        register_converter("", _op, 6, _unary(_op, _ir, legacy=False))


@register_converter("", "IsInf", since_opset=10)
def is_inf(ctx, x, *, detect_negative=1, detect_positive=1):
    """``isinf``, narrowed to one sign with a comparison against that infinity."""
    if detect_negative and detect_positive:
        return make_call("isinf", ctx.expr(x))
    if detect_negative or detect_positive:
        return make_call("equal", ctx.expr(x), scalar(ctx, -np.inf if detect_negative else np.inf, x.dtype))
    return make_call("logical_and", call(ctx, "isinf", ctx.expr(x)), scalar(ctx, False, "bool"))


# ---------------------------------------------------------------- known int contents (shape arithmetic)

def _sym_operands(values) -> tuple[list[tuple[Dim, ...]], bool] | None:
    """The broadcast int contents of 0-d/1-d operands when one of them is
    symbolic, and whether the result is 0-d; ``None`` when not applicable."""
    if not any(v.sym is not None and any(not isinstance(d, int) for d in v.sym) for v in values):
        return None
    if any(v.ndim not in (0, 1) or v.int_values() is None for v in values):
        return None
    contents = [v.int_values() for v in values]
    lengths = {len(c) for c, v in zip(contents, values) if v.ndim == 1 and len(c) != 1}
    if len(lengths) > 1:
        return None  # not broadcastable: the IR op reports it
    n = lengths.pop() if lengths else 1
    return [c * n if len(c) == 1 else c for c in contents], all(v.ndim == 0 for v in values)


def _sym_result(ctx, dims: tuple[Dim, ...], is_scalar: bool, dtype: str) -> Value:
    """A value with contents ``dims`` and ``dtype`` (int64 stays lazy; other int
    dtypes are materialized now but keep their known contents)."""
    dims = tuple(ctx.bb.analyzer.simplify(d) for d in dims)
    if dtype == "int64" or all(isinstance(d, int) for d in dims):
        value = ctx.sym_value(dims, scalar=is_scalar)
        if dtype == "int64":
            return value
        return ctx.const(value.const.astype(np.dtype(dtype)))
    tensor = astype(ctx, ctx.sym_value(dims, scalar=is_scalar), dtype)
    return Value(TensorStructInfo(() if is_scalar else (len(dims),), dtype), expr=tensor, sym=dims)


def _try_sym(ctx, fn, *values: Value, boolean: bool = False) -> Value | None:
    """``fn`` applied elementwise to the known int contents, or ``None``.

    ``fn`` returns a dim, a bool (comparisons, ``boolean``: the result is
    bool even when empty) or ``None`` when the result is not decidable at
    import time (the IR op then computes it).
    """
    operands = _sym_operands(values)
    if operands is None or len({v.dtype for v in values}) != 1:
        return None
    contents, is_scalar = operands
    results = [fn(*elems) for elems in zip(*contents)]
    if any(r is None for r in results):
        return None
    if boolean:
        data = np.array(results, dtype=bool)
        return ctx.const(data.reshape(()) if is_scalar else data)
    return _sym_result(ctx, tuple(results), is_scalar, values[0].dtype)


def _sym_div(ctx):
    analyzer = ctx.bb.analyzer

    def div(a: Dim, b: Dim) -> Dim | None:
        if isinstance(a, int) and isinstance(b, int):
            if b == 0:
                return None
            q = abs(a) // abs(b)
            return q if (a < 0) == (b < 0) else -q
        quotient = exact_div(a, b, analyzer)
        if quotient is not None:
            return quotient
        # truncation is floor division of a dividend known >= 0 (or > -|b|: then max(a, 0))
        if isinstance(b, int) and b != 0:
            return analyzer.trunc_div(a, b)
        return None
    return div


def _sym_mod(ctx, fmod: int):
    analyzer = ctx.bb.analyzer

    def mod(a: Dim, b: Dim) -> Dim | None:
        if not isinstance(b, int) or b <= 0:
            return None
        if fmod and not analyzer.prove_nonneg(a):
            return None  # C fmod differs from % for a negative dividend
        return a % b
    return mod


def _sym_compare(ctx, op: str):
    analyzer = ctx.bb.analyzer
    decide = {
        "equal": lambda a, b: True if analyzer.prove_equal(a, b) else
        False if analyzer.prove_not_equal(a, b) else None,
        "less": lambda a, b: True if analyzer.prove_lt(a, b) else False if analyzer.prove_ge(a, b) else None,
        "less_equal": lambda a, b: True if analyzer.prove_le(a, b) else False if analyzer.prove_gt(a, b) else None,
        "greater": lambda a, b: True if analyzer.prove_gt(a, b) else False if analyzer.prove_le(a, b) else None,
        "greater_equal": lambda a, b: True if analyzer.prove_ge(a, b) else False if analyzer.prove_lt(a, b)
        else None,
    }
    return decide[op]


_COMPARISONS = ("equal", "less", "less_equal", "greater", "greater_equal")
_SYM_BINARY = {
    "add": lambda ctx: lambda a, b: a + b,
    "subtract": lambda ctx: lambda a, b: a - b,
    "multiply": lambda ctx: lambda a, b: a * b,
    "maximum": lambda ctx: lambda a, b: dim_max(a, b),
    "minimum": lambda ctx: lambda a, b: dim_min(a, b),
    "divide": _sym_div,
    **{op: (lambda op: lambda ctx: _sym_compare(ctx, op))(op)
       for op in _COMPARISONS},
}


def _binary_value(ctx, ir_op: str, a: Value, b: Value):
    """``ir_op(a, b)``: evaluated on known int contents when possible, else the IR call."""
    if ir_op in _SYM_BINARY and (ir_op != "divide" or is_int(a)):
        known = _try_sym(ctx, _SYM_BINARY[ir_op](ctx), a, b, boolean=ir_op in _COMPARISONS)
        if known is not None:
            return known
    a, b = aligned_for_broadcast(ctx, a, b)
    return make_call(ir_op, ctx.expr(a), ctx.expr(b))


# ---------------------------------------------------------------- binary

#: ONNX op -> (IR op, first opset, has a legacy-broadcast version before 7)
_BINARY = {
    "Add": ("add", 1, True), "Sub": ("subtract", 1, True), "Mul": ("multiply", 1, True),
    "Div": ("divide", 1, True), "And": ("logical_and", 1, True), "Or": ("logical_or", 1, True),
    "Xor": ("logical_xor", 1, True), "Equal": ("equal", 1, True), "Less": ("less", 1, True),
    "Greater": ("greater", 1, True), "LessOrEqual": ("less_equal", 12, False),
    "GreaterOrEqual": ("greater_equal", 12, False), "BitwiseAnd": ("bitwise_and", 18, False),
    "BitwiseOr": ("bitwise_or", 18, False), "BitwiseXor": ("bitwise_xor", 18, False),
}


def _binary(op_type: str, ir_op: str, legacy: bool):
    if legacy:
        def convert(ctx, a, b, *, broadcast=0, axis=None, consumed_inputs=()):
            rhs = legacy_broadcast(ctx, a, b, broadcast, axis)
            if rhs is None:
                return _binary_value(ctx, ir_op, a, b)
            return make_call(ir_op, ctx.expr(a), rhs)
    else:
        def convert(ctx, a, b):
            return _binary_value(ctx, ir_op, a, b)
    convert.__name__ = convert.__qualname__ = f"convert_{op_type.lower()}"
    convert.__doc__ = f"ONNX {op_type} -> R.{ir_op}" + (" (legacy broadcasting)" if legacy else "") + "."
    return convert


for _op, (_ir, _since, _legacy) in _BINARY.items():
    register_converter("", _op, _since, _binary(_op, _ir, legacy=_legacy))
    if _legacy:
        register_converter("", _op, 7, _binary(_op, _ir, legacy=False))


@register_converter("", "Pow", since_opset=1)
def pow_legacy(ctx, x, y, *, broadcast=0, axis=None):
    rhs = legacy_broadcast(ctx, x, y, broadcast, axis)
    return make_call("power", ctx.expr(x), ctx.expr(y) if rhs is None else rhs)


@register_converter("", "Pow", since_opset=7)
def pow_(ctx, x, y):
    """``x ** y``; the result has the base's dtype. An integer base with a
    float exponent is computed in float64 and truncated (like onnxruntime);
    otherwise the exponent is cast to the base's dtype."""
    x, y = aligned_for_broadcast(ctx, x, y)
    if is_int(x) and is_float(y):
        result = call(ctx, "power", astype(ctx, x, "float64"), astype(ctx, y, "float64"))
        return make_call("astype", result, dtype=x.dtype)
    return make_call("power", ctx.expr(x), astype(ctx, y, x.dtype))


@register_converter("", "Mod", since_opset=10)
def mod(ctx, a, b, *, fmod=0):
    """Remainder: the divisor's sign (``fmod=0``) or the dividend's (``fmod=1``)."""
    if is_int(a):
        known = _try_sym(ctx, _sym_mod(ctx, fmod), a, b)
        if known is not None:
            return known
    a, b = aligned_for_broadcast(ctx, a, b)
    return make_call("mod", ctx.expr(a), ctx.expr(b), fmod=bool(fmod))


@register_converter("", "BitShift", since_opset=11)
def bit_shift(ctx, x, y, *, direction):
    """``x << y`` or ``x >> y``; unsigned ints from opset 11, signed ones
    (arithmetic right shift) from 28. A shift by a negative amount or by
    the bit width or more leaves the sign fill (-1 or 0), as opset 28 says."""
    if direction not in ("LEFT", "RIGHT"):
        raise unsupported(ctx, f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    if kind(x.dtype) not in "iu" or (kind(x.dtype) == "i" and ctx.opset < 28):
        raise unsupported(ctx, f"BitShift takes {'integers' if ctx.opset >= 28 else 'unsigned integers'}, "
                               f"got {x.dtype}")
    x, y = aligned_for_broadcast(ctx, x, y)
    return make_call("left_shift" if direction == "LEFT" else "right_shift", ctx.expr(x), ctx.expr(y))


# ---------------------------------------------------------------- variadic

def _variadic(op_type: str, ir_op: str | None, mean: bool = False):
    def convert(ctx, *inputs, consumed_inputs=()):
        values = [v for v in inputs if v is not None]
        if not values:
            raise unsupported(ctx, f"{op_type} needs at least one input")
        dtype = values[0].dtype
        if ir_op == "add" and len(values) > 1 and is_low_float(dtype):
            # a low float sums in float32 and rounds once: a partial sum may overflow float16
            values = [ctx.emit(working(ctx, v)) for v in values]
        acc = values[0]
        for v in values[1:]:
            step = _binary_value(ctx, ir_op, acc, v)
            acc = step if isinstance(step, Value) else ctx.emit(step)
        if mean and len(values) > 1:
            acc = ctx.emit(make_call("divide", ctx.expr(acc), scalar(ctx, len(values), acc.dtype)))
        return ctx.emit(rounded(ctx, ctx.expr(acc), dtype)) if acc.dtype != dtype else acc
    convert.__name__ = convert.__qualname__ = f"convert_{op_type.lower()}"
    convert.__doc__ = f"ONNX {op_type}: R.{ir_op} folded over the inputs (numpy broadcasting)."
    return convert


for _op, _ir, _mean in (("Max", "maximum", False), ("Min", "minimum", False), ("Sum", "add", False),
                        ("Mean", "add", True)):
    register_converter("", _op, 1, _variadic(_op, _ir, _mean))


# ---------------------------------------------------------------- where, clip

@register_converter("", "Where", since_opset=9)
def where(ctx, condition, x, y):
    """Select ``x`` where ``condition`` else ``y``; a constant condition
    over known int contents selects at import time."""
    if condition.const is not None and condition.ndim <= 1 and x.dtype == y.dtype:
        # the condition joins the elementwise walk as 0/1 contents
        flags = tuple(int(bool(c)) for c in np.asarray(condition.const).reshape(-1))
        cond = Value(TensorStructInfo(condition.shape, x.dtype), sym=flags)
        known = _try_sym(ctx, lambda c, a, b: a if c else b, cond, x, y)
        if known is not None:
            return known
    condition, x, y = aligned_all_for_broadcast(ctx, condition, x, y)
    return make_call("where", ctx.expr(condition), ctx.expr(x), ctx.expr(y))


@register_converter("", "Clip", since_opset=1)
def clip_attrs(ctx, x, *, min=-3.4028234663852886e38, max=3.4028234663852886e38,  # noqa: A002
               consumed_inputs=()):
    """Clip before opset 11: the bounds are attributes (ONNX's defaults are +-FLT_MAX)."""
    return make_call("clip", ctx.expr(x), min=float(min), max=float(max))


@register_converter("", "Clip", since_opset=11)
def clip(ctx, x, min=None, max=None):  # noqa: A002 (the ONNX input names)
    """Clip with optional bound inputs: constant bounds become the op's
    attributes; a bound known only at run time is a maximum / minimum. An
    absent bound is the dtype's lowest / highest value (so a float +-inf
    becomes +-max, as the spec's defaults say)."""
    lo, hi = const_scalar(ctx, min, "min"), const_scalar(ctx, max, "max")
    if x.dtype in ("float16", "float32", "float64"):
        info = np.finfo(np.dtype(x.dtype))
        lo = float(info.min) if min is None else lo
        hi = float(info.max) if max is None else hi
    expr = ctx.expr(x)
    if lo is NotImplemented:
        expr, lo = call(ctx, "maximum", expr, ctx.expr(min)), None
    if hi is NotImplemented:
        if lo is not None:
            expr, lo = call(ctx, "clip", expr, min=lo), None
        return make_call("minimum", expr, ctx.expr(max))
    if lo is None and hi is None:
        return expr
    return make_call("clip", expr, min=lo, max=hi)
