"""An upper bound of a float value's magnitude, proving it finite (so never NaN).

A quantizer ends in a NaN-saturating clip (NaN becomes the type's minimum), which costs a
read-only pass over the clipped values on top of the clip; where its operand is known finite
that pass finds nothing. :func:`magnitude_bound` bounds ``|x|`` from the values a quantized
model computes on: clipped and integer-cast values (:func:`.float_values.value_range`), finite
constants, sums, products, quotients by constants, roundings, pools, gathers, selections, convs
(gemms, matmuls) with constant finite weights, products of bounded operands over a static or bounded ``K``,
layer norms of finite values with constant ``gamma`` and ``beta`` (:func:`_layer_norm_bound`) and
functions bounded by 1 of finite values (tanh, sigmoid, erf, softmax, sin, cos), and casts from
integer types (any integer is finite). Each bound is of the exact values; the rounded float operations stay
within a small factor of it (a conv's rounded partial sums within ``1 + K * 2**-24`` of the sum
of absolute products), so a bound below :data:`LIMIT` leaves the float32 values far from
overflow, finite, never NaN.
"""

from __future__ import annotations

import numpy as np

from ...ir.expr import Constant
from .float_values import Definitions, value_range

#: bounds above this prove nothing (float32's largest value is 3.4e38: far enough that rounding
#: never carries a value bounded by this to an infinity)
LIMIT = 1e30

_SAME = frozenset({"negative", "abs", "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool", "nn.global_max_pool",
                   "mean", "max", "min", "reshape", "permute_dims", "flatten", "squeeze", "expand_dims",
                   "broadcast_to", "nn.relu"})
_INTEGER_TYPES = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"})
#: activations of a fused conv/gemm that never grow a magnitude
_SHRINKING = frozenset({None, "relu", "clip"})


def magnitude_bound(expr, defs: Definitions, memo: dict, depth: int = 32) -> float | None:
    """A bound of ``|v|`` for every value ``v`` of ``expr`` (then finite, never NaN), or None."""
    key = defs.resolve(expr)
    if not isinstance(key, Constant) and key in memo:
        return memo[key]
    bound = _bound(expr, defs, memo, depth)
    bound = bound if bound is not None and bound <= LIMIT else None
    if not isinstance(key, Constant):
        memo[key] = bound
    return bound


def _constant_bound(data: np.ndarray, axes=None) -> float | None:
    if data.dtype.kind not in "fiub" or not np.all(np.isfinite(data)):
        return None
    if data.size == 0:
        return 0.0
    magnitude = np.abs(data.astype(np.float64))
    return float(magnitude.max() if axes is None else magnitude.sum(axis=axes).max(initial=0.0))


def _bound(expr, defs: Definitions, memo: dict, depth: int) -> float | None:
    if isinstance(expr, Constant):
        return _constant_bound(expr.data)
    bounds = value_range(expr, defs)
    if bounds is not None:
        return max(abs(bounds[0]), abs(bounds[1]))
    call = defs.get(expr)
    if call is None or depth == 0 or getattr(expr.struct_info, "dtype", None) not in ("float32", "float64"):
        return None
    name, args = call.op.name, call.args

    def arg(i: int) -> float | None:
        return magnitude_bound(args[i], defs, memo, depth - 1)

    if name in _SAME:
        return arg(0)
    if name in ("round", "floor", "ceil"):
        b = arg(0)
        return None if b is None else b + 1.0
    if name == "astype":
        source = getattr(args[0].struct_info, "dtype", None)
        if source in ("float32", "float64"):
            return arg(0)
        if source in _INTEGER_TYPES:        # an integer (any, wrapped or not) is finite as a float
            info = np.iinfo(source)
            return float(max(-int(info.min), int(info.max)))
        return 1.0 if source == "bool" else None
    if name in ("add", "subtract", "multiply") and len(args) == 2:
        a, b = arg(0), arg(1)
        if a is None or b is None:
            return None
        return a * b if name == "multiply" else a + b
    if name == "divide" and isinstance(args[1], Constant):
        a, divisor = arg(0), args[1].data
        if a is None or divisor.dtype.kind != "f" or divisor.size == 0 or not np.all(np.isfinite(divisor)):
            return None
        least = float(np.abs(divisor.astype(np.float64)).min())
        return a / least if least > 0 else None
    if name == "clip":
        a, lo, hi = arg(0), call.attrs["min"], call.attrs["max"]
        if a is not None and lo is not None and hi is not None:
            return min(a, max(abs(lo), abs(hi)))
        return a
    if name == "take":              # elements of its data (an index out of range raises)
        return _constant_bound(args[0].data) if isinstance(args[0], Constant) else arg(0)
    if name == "where" and len(args) == 3:      # elements of either branch, whatever the condition
        a, b = arg(1), arg(2)
        return None if a is None or b is None else max(a, b)
    if name in ("nn.conv", "nn.conv_bias_act", "nn.gemm"):
        return _product_bound(call, arg)
    if name == "matmul":
        return _matmul_bound(call, arg, defs)
    if name in _UNIT and len(args) == 1:       # |f(x)| <= 1 for every finite x
        return None if arg(0) is None else 1.0
    if name == "nn.layer_norm":
        return _layer_norm_bound(call, arg)
    return None


#: functions of a finite value whose magnitude is at most 1 (softmax: each row's values in [0, 1])
_UNIT = frozenset({"tanh", "sigmoid", "erf", "nn.softmax", "cos", "sin"})


def _static_dim(dim) -> int | None:
    return int(dim) if isinstance(dim, (int, np.integer)) else None


def _matmul_bound(call, arg, defs: Definitions) -> float | None:
    """``max|a| * max_j sum_k |b[k, j]|`` for a constant finite ``b``, else ``max|a| * max|b| * K``
    with ``K`` static or bounded (the function's ranges and assumptions): every product's sum,
    rounded, stays within a small factor of it."""
    a, b = call.args[0], call.args[1]
    x = arg(0)
    if x is None:
        return None
    if isinstance(b, Constant):
        data = b.data
        w = _constant_bound(data, (data.ndim - 2,) if data.ndim >= 2 else None)
        if data.ndim < 2 and w is not None:
            w = float(np.abs(data.astype(np.float64)).sum()) if data.size else 0.0
        return None if w is None else x * w
    shape = getattr(a.struct_info, "shape", None)
    k = None if not shape else _static_dim(shape[-1])
    if k is None and shape:
        k = defs.dim_upper_bound(shape[-1])
    y = arg(1)
    return None if k is None or y is None else x * y * k


def _layer_norm_bound(call, arg) -> float | None:
    """``2 * sqrt(d) * max|gamma| + max|beta|`` over ``d`` normalized values of a finite ``x``, with
    ``epsilon > 0``: the kernel scales each centered value ``c_i`` by ``sqrt(d) / sqrt(S + d * eps)``,
    ``S`` the (rounded) sum of the squares of the ``c_j``, at least ``(1 - d * 2**-24) * c_i**2``, so
    ``|c_i| * scale <= sqrt(d) * 1.04`` for ``d <= 2**20`` (the factor 2 covers the roundings of the
    root, the quotient and the products); ``S + d * eps > 0`` rules out 0 / 0, and an ``S`` that
    overflows makes the scale 0, not NaN."""
    x = call.args[0]
    epsilon = call.attrs.get("epsilon")
    shape = getattr(x.struct_info, "shape", None)
    axes = call.attrs.get("axes")
    if arg(0) is None or shape is None or axes is None or not isinstance(epsilon, (int, float)):
        return None
    dims = [_static_dim(shape[a]) for a in axes]
    if None in dims:
        return None
    d = int(np.prod(dims))
    if not (0 < d <= 1 << 20) or not d * float(epsilon) > 1e-30:
        return None
    gamma = call.args[1]
    beta = call.args[2] if len(call.args) > 2 else None
    g = _constant_bound(gamma.data) if isinstance(gamma, Constant) else None
    b = 0.0 if beta is None else (_constant_bound(beta.data) if isinstance(beta, Constant) else None)
    if g is None or b is None:
        return None
    return 2.0 * float(np.sqrt(d)) * g + b


def _product_bound(call, arg) -> float | None:
    """``max|x| * max_o sum|w_o| + max|bias|`` of a conv (or gemm) of constant finite weights, whose
    activation never grows a magnitude."""
    activation = call.attrs.get("activation")
    if (activation[0] if isinstance(activation, (tuple, list)) else activation) not in _SHRINKING:
        return None
    weight = call.args[1]
    if not isinstance(weight, Constant) or weight.data.ndim < 2:
        return None
    if call.op.name == "nn.gemm":       # (..., K, N): each output column sums over K
        axes = (weight.data.ndim - 2,)
    elif call.attrs.get("data_layout") == "NHWC":       # HWIO: each output channel is the last axis
        axes = tuple(range(weight.data.ndim - 1))
    else:                                               # OIHW
        axes = tuple(range(1, weight.data.ndim))
    x, w = arg(0), _constant_bound(weight.data, axes)
    if x is None or w is None:
        return None
    bias = call.args[2] if len(call.args) > 2 else None
    b = 0.0 if bias is None else (_constant_bound(bias.data) if isinstance(bias, Constant) else None)
    return None if b is None else x * w + b
