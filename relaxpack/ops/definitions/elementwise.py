"""Elementwise ops: unary math and activations, broadcasting binary ops, where.

Unary ops keep the shape; binary ops broadcast their operands numpy/ONNX
style (see :func:`~.common.broadcast_shapes`), which must share one dtype.

>>> make_call("add", x, y)                    # doctest: +SKIP
>>> make_call("nn.leakyrelu", x, alpha=0.1)   # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import (
    ANY, BOOL, FLOAT, INT, NUMERIC, attr_error, bool_attr, broadcast_sinfo, check_broadcastable_to,
    check_dtype_kind, float_attrs, same_dtype, tensor_arg, with_shape,
)

SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


# ---------------------------------------------------------------- unary

def _unary(kinds: frozenset[str], out_dtype: str | None = None, check_attrs=None):
    def infer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
        data = tensor_arg(call, 0)
        check_dtype_kind(call, data, kinds)
        if check_attrs is not None:
            check_attrs(call)
        if out_dtype is None:
            return data
        return with_shape(data, data.shape, out_dtype, data.ndim)
    return infer


def _floats(*names: str, allow_none: bool = False):
    return lambda call: float_attrs(call, *names, allow_none=allow_none)


def _check_clip(call: Call) -> None:
    float_attrs(call, "min", "max", allow_none=True)
    bool_attr(call, "saturate_nan")


def _check_gelu(call: Call) -> None:
    if call.attrs["approximate"] not in ("none", "tanh"):
        raise attr_error(call, f"attribute approximate must be 'none' or 'tanh', "
                               f"got {call.attrs['approximate']!r}")


# name: (accepted dtype kinds, output dtype or None for "same", attrs, attr check, doc)
_UNARY = {
    "abs": (NUMERIC, None, {}, None, "Absolute value."),
    "negative": (NUMERIC, None, {}, None, "Negation, -x."),
    "exp": (FLOAT, None, {}, None, "Exponential, e**x."),
    "log": (FLOAT, None, {}, None, "Natural logarithm."),
    "sqrt": (FLOAT, None, {}, None, "Square root."),
    "rsqrt": (FLOAT, None, {}, None, "Reciprocal square root, 1/sqrt(x)."),
    "sin": (FLOAT, None, {}, None, "Sine."),
    "cos": (FLOAT, None, {}, None, "Cosine."),
    "tan": (FLOAT, None, {}, None, "Tangent."),
    "tanh": (FLOAT, None, {}, None, "Hyperbolic tangent."),
    "asin": (FLOAT, None, {}, None, "Arc sine."),
    "acos": (FLOAT, None, {}, None, "Arc cosine."),
    "atan": (FLOAT, None, {}, None, "Arc tangent."),
    "sinh": (FLOAT, None, {}, None, "Hyperbolic sine."),
    "cosh": (FLOAT, None, {}, None, "Hyperbolic cosine."),
    "asinh": (FLOAT, None, {}, None, "Inverse hyperbolic sine."),
    "acosh": (FLOAT, None, {}, None, "Inverse hyperbolic cosine."),
    "atanh": (FLOAT, None, {}, None, "Inverse hyperbolic tangent."),
    "sigmoid": (FLOAT, None, {}, None, "Logistic sigmoid, 1/(1+exp(-x))."),
    "erf": (FLOAT, None, {}, None, "Gauss error function."),
    "floor": (FLOAT, None, {}, None, "Round toward -inf."),
    "ceil": (FLOAT, None, {}, None, "Round toward +inf."),
    "round": (FLOAT, None, {}, None, "Round half to even (ONNX Round)."),
    "round_to_float16": (FLOAT, None, {}, None, "x rounded to the nearest float16 value (ties to even, "
                         "past 65504 an infinity) in x's own dtype: astype(astype(x, float16), x.dtype)."),
    "sign": (NUMERIC, None, {}, None, "Sign: -1, 0 or 1."),
    "reciprocal": (FLOAT, None, {}, None, "Reciprocal, 1/x."),
    "square": (NUMERIC, None, {}, None, "Square, x*x."),
    "logical_not": (BOOL, None, {}, None, "Logical negation of a bool tensor."),
    "bitwise_not": (INT, None, {}, None, "Bitwise complement of an integer tensor."),
    "isnan": (FLOAT, "bool", {}, None, "True where x is NaN."),
    "isinf": (FLOAT, "bool", {}, None, "True where x is +-inf."),
    "isfinite": (FLOAT, "bool", {}, None, "True where x is neither NaN nor +-inf."),
    "nn.relu": (NUMERIC, None, {}, None, "Rectified linear unit, max(x, 0)."),
    "nn.gelu": (FLOAT, None, {"approximate": "none"}, _check_gelu,
                "GELU; approximate='tanh' uses the tanh approximation."),
    "nn.silu": (FLOAT, None, {}, None, "SiLU (swish), x*sigmoid(x)."),
    "nn.leakyrelu": (FLOAT, None, {"alpha": 0.01}, _floats("alpha"),
                     "Leaky ReLU: x if x >= 0 else alpha*x."),
    "nn.elu": (FLOAT, None, {"alpha": 1.0}, _floats("alpha"), "ELU: x if x > 0 else alpha*(exp(x)-1)."),
    "nn.selu": (FLOAT, None, {"alpha": SELU_ALPHA, "gamma": SELU_GAMMA}, _floats("alpha", "gamma"),
                "SELU: gamma*(x if x > 0 else alpha*(exp(x)-1)), ONNX defaults."),
    "nn.softplus": (FLOAT, None, {}, None, "Softplus, log(1+exp(x))."),
    "nn.softsign": (FLOAT, None, {}, None, "Softsign, x/(1+|x|)."),
    "nn.mish": (FLOAT, None, {}, None, "Mish, x*tanh(softplus(x))."),
    "nn.hard_sigmoid": (FLOAT, None, {"alpha": 0.2, "beta": 0.5}, _floats("alpha", "beta"),
                        "Hard sigmoid, max(0, min(1, alpha*x + beta))."),
    "nn.hard_swish": (FLOAT, None, {}, None, "Hard swish, x*max(0, min(1, x/6 + 1/2))."),
    "clip": (NUMERIC, None, {"min": None, "max": None, "saturate_nan": False}, _check_clip,
             "Clamp to [min, max]; None leaves that side open. NaN stays NaN (ONNX Clip) unless "
             "saturate_nan, which makes it min (max when min is None), as C's fmax/fmin do."),
}

for _name, (_kinds, _out, _attrs, _check, _doc) in _UNARY.items():
    register_op(_name, infer=_unary(_kinds, _out, _check), attrs=_attrs, num_args=1, doc=_doc,
                elementwise=True)


# ---------------------------------------------------------------- binary

def _binary(kinds: frozenset[str], out_dtype: str | None = None, check_attrs=None):
    def infer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
        lhs, rhs = tensor_arg(call, 0, "lhs"), tensor_arg(call, 1, "rhs")
        dtype = same_dtype(call, (lhs, rhs), ("lhs", "rhs"))
        check_dtype_kind(call, lhs, kinds, "lhs")
        check_dtype_kind(call, rhs, kinds, "rhs")
        if check_attrs is not None:
            check_attrs(call)
        return broadcast_sinfo(call, (lhs, rhs), analyzer, out_dtype or dtype)
    return infer


def _check_fmod(call: Call) -> None:
    if not isinstance(call.attrs["fmod"], bool):
        raise attr_error(call, f"attribute fmod must be a bool, got {call.attrs['fmod']!r}")


_COMPARABLE = frozenset(ANY - {"complex"})

_BINARY = {
    "add": (NUMERIC, None, {}, None, "Addition, with broadcasting."),
    "subtract": (NUMERIC, None, {}, None, "Subtraction, with broadcasting."),
    "multiply": (NUMERIC, None, {}, None, "Multiplication, with broadcasting."),
    "divide": (NUMERIC, None, {}, None, "Division (integer division truncates, like ONNX Div)."),
    "floor_divide": (NUMERIC, None, {}, None, "Floor division, with broadcasting."),
    "power": (NUMERIC, None, {}, None, "Power, lhs**rhs, with broadcasting."),
    "mod": (NUMERIC, None, {"fmod": False}, _check_fmod,
            "Remainder; fmod=True takes the dividend's sign (C fmod), else the divisor's."),
    "maximum": (NUMERIC, None, {}, None, "Elementwise maximum, with broadcasting."),
    "minimum": (NUMERIC, None, {}, None, "Elementwise minimum, with broadcasting."),
    "equal": (_COMPARABLE, "bool", {}, None, "lhs == rhs, as bool."),
    "not_equal": (_COMPARABLE, "bool", {}, None, "lhs != rhs, as bool."),
    "less": (NUMERIC, "bool", {}, None, "lhs < rhs, as bool."),
    "less_equal": (NUMERIC, "bool", {}, None, "lhs <= rhs, as bool."),
    "greater": (NUMERIC, "bool", {}, None, "lhs > rhs, as bool."),
    "greater_equal": (NUMERIC, "bool", {}, None, "lhs >= rhs, as bool."),
    "logical_and": (BOOL, None, {}, None, "Logical and of bool tensors."),
    "logical_or": (BOOL, None, {}, None, "Logical or of bool tensors."),
    "logical_xor": (BOOL, None, {}, None, "Logical xor of bool tensors."),
    "bitwise_and": (INT, None, {}, None, "Bitwise and of integer tensors."),
    "bitwise_or": (INT, None, {}, None, "Bitwise or of integer tensors."),
    "bitwise_xor": (INT, None, {}, None, "Bitwise xor of integer tensors."),
    "left_shift": (INT, None, {}, None,
                   "lhs << rhs; bits past the top (and the sign bit) are dropped; a shift < 0 or >= the "
                   "bit width gives 0."),
    "right_shift": (INT, None, {}, None,
                    "lhs >> rhs, arithmetic (sign-extending) for signed ints; a shift < 0 or >= the bit "
                    "width gives the sign fill alone: -1 for a negative lhs, else 0."),
}

for _name, (_kinds, _out, _attrs, _check, _doc) in _BINARY.items():
    register_op(_name, infer=_binary(_kinds, _out, _check), attrs=_attrs, num_args=2, doc=_doc,
                elementwise=True)


def _infer_prelu(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, slope = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "slope")
    dtype = same_dtype(call, (data, slope), ("data", "slope"))
    check_dtype_kind(call, data, FLOAT)
    if data.shape is not None and slope.shape is not None:
        # ONNX PRelu: slope broadcasts unidirectionally to the data's shape.
        check_broadcastable_to(call, slope.shape, data.shape, analyzer, "slope")
    return with_shape(data, data.shape, dtype, data.ndim)


register_op("nn.prelu", infer=_infer_prelu, num_args=2,
            doc="Parametric ReLU: x if x >= 0 else slope*x (slope broadcasts to x).")


def _infer_where(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    cond = tensor_arg(call, 0, "condition")
    x, y = tensor_arg(call, 1, "x"), tensor_arg(call, 2, "y")
    check_dtype_kind(call, cond, BOOL, "condition")
    dtype = same_dtype(call, (x, y), ("x", "y"))
    return broadcast_sinfo(call, (cond, x, y), analyzer, dtype)


register_op("where", infer=_infer_where, num_args=3,
            doc="Select x where condition else y; the three operands broadcast together.")
