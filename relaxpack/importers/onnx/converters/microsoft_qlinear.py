"""The com.microsoft quantized ops onnxruntime's ``quantize_static`` writes in
its QOperator format (besides QLinearConv/QLinearMatMul/QLinearAdd/QLinearMul),
as compositions of IR ops that compute what onnxruntime's CPU kernels compute:

- QGemm: an int32 GEMM of the zero-point-shifted operands plus the int32
  bias (an exact float32 ``nn.gemm`` with the bias when a constant B and C
  bound it within float32's integers), scaled by
  ``((alpha * a_scale) * b_scale) / y_scale`` in float32 and rounded (or a
  float output when there is no ``y_zero_point``);
- QLinearGlobalAveragePool: the int32 sum less ``zero_point * n``, times
  ``x_scale / (y_scale * n)`` in float32, rounded;
- QLinearAveragePool: dequantize, float AveragePool, ``round(y / y_scale +
  y_zero_point)`` (and the global path when the window is the whole image; a
  ceil-mode window that counts its pads is divided by the whole kernel, as
  onnxruntime's kernel does, where AveragePool divides by its part inside);
- QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, QLinearWhere: onnxruntime
  maps each of the 256 input values through a table (dequantize, the float
  function, quantize); the IR builds the same table from the 256 values and
  ``take``s from it. Sigmoid is MLAS's rational approximation, not ``exp``;
- QLinearSoftmax: onnxruntime's own scheme (``softmax_table`` below);
- QLinearReduceMean (not written by quantize_static; no CPU kernel in
  onnxruntime): dequantize, float32 mean, quantize, as its schema says;
- QuantizeLinear / DequantizeLinear of the com.microsoft domain: the ONNX ops.

The arithmetic and its reasons are in docs/design-notes.md ("QOperator
models"); tests in tests/importers/onnx/test_convert_microsoft_qlinear.py.
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr, ShapeExpr, TupleGetItem
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from . import quantize as q
from ._dynamic import aligned_all_for_broadcast
from ._math_common import astype, call, malformed, scalar
from .microsoft import MS, _dequantized, _qlinear_output, ms_unsupported
from .nn import _pool_attrs
from .nn import avg_pool as _onnx_avg_pool
from .tensor import _concat as _onnx_concat

#: MLAS's logistic constants (the Eigen coefficients): clamp range, then p(x) / q(x) + 0.5
_LOGISTIC_RANGE = 18.0
_LOGISTIC_P = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05, 8.51377133304701e-03,
               2.48287947061529e-01)
_LOGISTIC_Q = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06, 1.70198817374094e-03,
               1.16817656904453e-01, 9.93151921023180e-01)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


# ---------------------------------------------------------------- helpers


def _int8(ctx, x: Value, what: str = "the input") -> str:
    if x.dtype not in ("uint8", "int8"):
        raise ms_unsupported(ctx, f"{what} must be uint8 or int8, got {x.dtype}")
    return x.dtype


def _per_tensor(ctx, value: Value | None, what: str) -> Expr | None:
    """A per-tensor scale or zero point as a 0-d expression (None when omitted)."""
    if value is None:
        return None
    if not q._single(ctx, value, what):
        raise ms_unsupported(ctx, f"{what} must be a scalar (per-tensor quantization)")
    return q._col_layout(ctx, value, what)


def _target(ctx, zero_point: Value | None, default: str) -> str:
    target = zero_point.dtype if zero_point is not None else default
    if target not in ("uint8", "int8"):
        raise ms_unsupported(ctx, f"output type {target} (uint8 and int8 only)")
    return target


def _dequantize(ctx, x: Value, scale: Value, zero_point: Value | None) -> Expr:
    """``x_scale * (x - x_zero_point)`` in float32, as onnxruntime's tables and pools compute it."""
    shifted, factor = _dequantized(ctx, x, scale, zero_point)
    return call(ctx, "multiply", shifted, factor, name="dequantized")


def _quantize(ctx, value: Expr, scale: Value, zero_point: Value | None, target: str) -> Expr:
    """MLAS's QuantizeLinear: ``saturate(round(value / scale) + zero_point)``, float32."""
    ratio = call(ctx, "divide", value, astype(ctx, _per_tensor(ctx, scale, "the output scale"), "float32"))
    zp = None if q._is_zero(zero_point) else _per_tensor(ctx, zero_point, "the output zero point")
    return q._saturate(ctx, ratio, zp, target)


def _lookup(ctx, x: Value, scale: Value, zero_point: Value | None, y_scale: Value, y_zero_point: Value | None,
            fn) -> Expr:
    """onnxruntime's 256-entry table: each value of x's type dequantized,
    mapped by ``fn`` (IR ops on float32), quantized; then ``take`` by x."""
    dtype = _int8(ctx, x)
    target = _target(ctx, y_zero_point, dtype)
    info = np.iinfo(dtype)
    values = ctx.const(np.arange(info.min, info.max + 1).astype(dtype))
    table = ctx.expr(ctx.emit(_quantize(ctx, fn(_dequantize(ctx, values, scale, zero_point)), y_scale,
                                        y_zero_point, target), "table"))
    index = astype(ctx, x, "int32")
    if info.min:
        index = call(ctx, "subtract", index, scalar(ctx, int(info.min), "int32"))
    return make_call("take", table, index, axis=0, in_bounds=True)     # x - min: 0..255, the table's 256


def _fma(ctx, a: Expr, b: Expr, c: Expr) -> Expr:
    """``a * b + c`` rounded once to float32 (an FMA): the product of two
    float32 values is exact in float64."""
    wide = call(ctx, "multiply", astype(ctx, a, "float64"), astype(ctx, b, "float64"))
    return astype(ctx, call(ctx, "add", wide, astype(ctx, c, "float64")), "float32")


def _polynomial(ctx, x2: Expr, coefficients) -> Expr:
    acc = _fma(ctx, x2, scalar(ctx, coefficients[0], "float32"), scalar(ctx, coefficients[1], "float32"))
    for c in coefficients[2:]:
        acc = _fma(ctx, acc, x2, scalar(ctx, c, "float32"))
    return acc


def mlas_logistic(ctx, v: Expr) -> Expr:
    """MLAS's logistic function (its FMA3 kernel, the one x86-64 CPUs with
    AVX2 run): clamp to [-18, 18], ``p(v) / q(v) + 0.5`` clamped to [0, 1]."""
    v = call(ctx, "clip", v, min=-_LOGISTIC_RANGE, max=_LOGISTIC_RANGE)
    x2 = call(ctx, "multiply", v, v)
    p = call(ctx, "multiply", _polynomial(ctx, x2, _LOGISTIC_P), v)
    ratio = call(ctx, "divide", p, _polynomial(ctx, x2, _LOGISTIC_Q))
    return call(ctx, "clip", call(ctx, "add", ratio, scalar(ctx, 0.5, "float32")), min=0.0, max=1.0)


# ---------------------------------------------------------------- lookup-table ops


@register_converter(MS, "QLinearSigmoid", since_opset=1)
def qlinear_sigmoid(ctx, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None):
    """The sigmoid of the dequantized input, requantized, through onnxruntime's table."""
    return _lookup(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point, lambda v: mlas_logistic(ctx, v))


@register_converter(MS, "QLinearLeakyRelu", since_opset=1)
def qlinear_leaky_relu(ctx, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, alpha=0.01):
    """``v if v >= 0 else alpha * v`` (float32) of the dequantized input, requantized."""
    def leaky(v):
        negative = call(ctx, "multiply", v, scalar(ctx, alpha, "float32"))
        return call(ctx, "where", call(ctx, "greater_equal", v, scalar(ctx, 0.0, "float32")), v, negative)
    return _lookup(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point, leaky)


def _requantized(ctx, x: Value, scale: Value, zero_point: Value | None, y_scale: Value,
                 y_zero_point: Value | None) -> Expr:
    """``x`` moved to the output's scale and zero point (onnxruntime's identity table)."""
    if _same_constant(scale, y_scale) and _same_constant(zero_point, y_zero_point):
        return ctx.expr(x)   # the table would map every value to itself
    return ctx.expr(ctx.emit(_lookup(ctx, x, scale, zero_point, y_scale, y_zero_point, lambda v: v)))


def _same_constant(a: Value | None, b: Value | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.const is not None and b.const is not None and a.dtype == b.dtype and \
        np.array_equal(np.ravel(a.const), np.ravel(b.const))


@register_converter(MS, "QLinearConcat", since_opset=1)
def qlinear_concat(ctx, y_scale, y_zero_point, *tuples, axis):
    """Each ``(x, x_scale, x_zero_point)`` moved to the output's quantization, then Concat."""
    if not tuples or len(tuples) % 3:
        raise malformed(ctx, f"needs (tensor, scale, zero point) triples after Y_scale and Y_zero_point, "
                             f"got {len(tuples)} inputs")
    parts = []
    for i in range(0, len(tuples), 3):
        x, scale, zp = tuples[i:i + 3]
        if y_zero_point is not None and x.dtype != y_zero_point.dtype:
            raise malformed(ctx, f"input {i // 3} is {x.dtype}, the output zero point {y_zero_point.dtype}")
        parts.append(ctx.emit(_requantized(ctx, x, scale, zp, y_scale, y_zero_point), "requantized"))
    return _onnx_concat(ctx, parts, axis)


@register_converter(MS, "QLinearWhere", since_opset=1)
def qlinear_where(ctx, condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale, z_zero_point):
    """``where(condition, x, y)`` with ``x`` and ``y`` moved to z's quantization."""
    condition, x, y = aligned_all_for_broadcast(ctx, condition, x, y)
    lhs = _requantized(ctx, x, x_scale, x_zero_point, z_scale, z_zero_point)
    rhs = _requantized(ctx, y, y_scale, y_zero_point, z_scale, z_zero_point)
    return make_call("where", ctx.expr(condition), lhs, rhs)


# ---------------------------------------------------------------- pools


def _spatial_axes(ctx, x: Value, channels_last: int) -> tuple[int, ...]:
    ndim = q._rank(ctx, x, "the input")
    if ndim < 3:
        raise malformed(ctx, f"the input must have rank 3 or more (N, C, spatial...), got rank {ndim}")
    return tuple(range(1, ndim - 1)) if channels_last else tuple(range(2, ndim))


def _global_average(ctx, x: Value, x_scale: Value, x_zero_point: Value | None, y_scale: Value,
                    y_zero_point: Value | None, axes: tuple[int, ...]) -> Expr:
    """MLAS's integer global average: ``acc = sum(x) - x_zero_point * n`` in int32, then
    ``round(acc * (x_scale / (y_scale * n)))`` in float32, plus y_zero_point, saturated."""
    target = _target(ctx, y_zero_point, _int8(ctx, x))
    size = 1
    for axis in axes:
        size = size * x.shape[axis]
    n = ctx.expr(ctx.sym_value([size], scalar=True))
    total = call(ctx, "sum", astype(ctx, x, "int32"), axis=axes, keepdims=True)
    if not q._is_zero(x_zero_point):
        zp = astype(ctx, _per_tensor(ctx, x_zero_point, "x_zero_point"), "int32")
        total = call(ctx, "subtract", total, call(ctx, "multiply", zp, astype(ctx, n, "int32")))
    denominator = call(ctx, "multiply", astype(ctx, _per_tensor(ctx, y_scale, "y_scale"), "float32"),
                       astype(ctx, n, "float32"))
    factor = call(ctx, "divide", astype(ctx, _per_tensor(ctx, x_scale, "x_scale"), "float32"), denominator)
    scaled = call(ctx, "multiply", astype(ctx, total, "float32"), factor)
    zp = None if q._is_zero(y_zero_point) else _per_tensor(ctx, y_zero_point, "y_zero_point")
    return q._saturate(ctx, scaled, zp, target)


@register_converter(MS, "QLinearGlobalAveragePool", since_opset=1)
def qlinear_global_average_pool(ctx, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                                channels_last=0):
    """The mean over the spatial dims in onnxruntime's integer arithmetic."""
    return _global_average(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point,
                           _spatial_axes(ctx, x, channels_last))


@register_converter(MS, "QLinearAveragePool", since_opset=1)
def qlinear_average_pool(ctx, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                         auto_pad="NOTSET", ceil_mode=0, channels_last=0, count_include_pad=0, kernel_shape=None,
                         pads=None, strides=None):
    """Dequantize, AveragePool in float32, ``round(y / y_scale + y_zero_point)``.
    A window that is the whole (static) image with no padding takes onnxruntime's
    global-average path instead, as its kernel does."""
    axes = _spatial_axes(ctx, x, channels_last)
    spatial = [x.shape[a] for a in axes] if x.shape is not None else []
    if kernel_shape and list(kernel_shape) == spatial and not any(pads or ()) and auto_pad in ("NOTSET", "VALID"):
        return _global_average(ctx, x, x_scale, x_zero_point, y_scale, y_zero_point, axes)
    _target(ctx, y_zero_point, _int8(ctx, x))
    data = _dequantize(ctx, x, x_scale, x_zero_point)
    ndim = x.ndim
    if channels_last:
        data = call(ctx, "permute_dims", data, axes=(0, ndim - 1, *range(1, ndim - 1)))
    data = ctx.emit(data, "dequantized")
    if ceil_mode and count_include_pad and auto_pad in ("NOTSET", "VALID"):
        data, ceil_mode = _ceil_windows_padded(ctx, data, auto_pad, kernel_shape, pads, strides), 0
    pooled = ctx.expr(ctx.emit(_onnx_avg_pool(ctx, data, auto_pad=auto_pad,
                                              ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                              kernel_shape=kernel_shape, pads=pads, strides=strides)))
    if channels_last:
        pooled = call(ctx, "permute_dims", pooled, axes=(0, *range(2, ndim), 1))
    ratio = call(ctx, "divide", pooled, astype(ctx, _per_tensor(ctx, y_scale, "y_scale"), "float32"))
    return _qlinear_output(ctx, ratio, y_zero_point, x)    # the zero point added before rounding


def _ceil_windows_padded(ctx, data: Value, auto_pad: str, kernel_shape, pads, strides) -> Value:
    """``data`` (float, channels first) with ``stride - 1`` zeros after each spatial dim, for a
    floor-mode pool in place of a ceil-mode one that counts its pads: onnxruntime's
    QLinearAveragePool divides a window that runs past the (padded) input by the whole kernel,
    where AveragePool divides by the part inside. The floor-mode windows over the extended data
    are the ceil-mode windows (``floor((n + s - 1 - k) / s) = ceil((n - k) / s)``), each whole.
    A ceil-mode window that would start past the input and its begin padding, which onnxruntime
    drops, needs end padding above ``kernel - stride``: refused by name. The attributes are read
    (and checked) as AveragePool reads them (:func:`.nn._pool_attrs`)."""
    attrs = _pool_attrs(ctx, data, auto_pad, kernel_shape, pads, strides, None, 1)
    kernel, strides, padding = attrs["pool_size"], attrs["strides"], attrs["padding"]
    n = len(kernel)
    if any(padding[n + i] > kernel[i] - strides[i] for i in range(n)):
        raise ms_unsupported(ctx, "ceil_mode with count_include_pad and end pads above kernel - stride "
                                  "(windows onnxruntime may drop)")
    extra = tuple(s - 1 for s in strides)
    if not any(extra):
        return data
    return ctx.emit(call(ctx, "pad", ctx.expr(data), name="ceil_pad", pads=(0, 0, *[0] * n, 0, 0, *extra),
                         pad_value=0.0), "ceil_padded")


@register_converter(MS, "QLinearReduceMean", since_opset=1)
def qlinear_reduce_mean(ctx, data, data_scale, data_zero_point=None, reduced_scale=None,
                        reduced_zero_point=None, *, axes, keepdims):
    """Dequantize, the float32 mean over ``axes``, quantize (the contrib schema's
    meaning; onnxruntime runs it only in its NNAPI provider, not on CPU)."""
    target = _target(ctx, reduced_zero_point, _int8(ctx, data))
    ndim = q._rank(ctx, data, "the input")
    if any(not -ndim <= a < ndim for a in axes):
        raise malformed(ctx, f"axes {list(axes)} are out of range for an input of rank {ndim}")
    mean = call(ctx, "mean", _dequantize(ctx, data, data_scale, data_zero_point),
                axis=tuple(sorted({a % ndim for a in axes})), keepdims=bool(keepdims))
    return _quantize(ctx, mean, reduced_scale, reduced_zero_point, target)


# ---------------------------------------------------------------- softmax


@register_converter(MS, "QLinearSoftmax", since_opset=1)
def qlinear_softmax(ctx, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, axis=None,
                    opset=None):
    """onnxruntime's quantized softmax (``opset`` is the model's, which picks the
    softmax's meaning: before 13 over the dims from ``axis`` on, flattened).

    For each row of ``D`` values along the axis, with ``d = max(x) - x`` (the
    zero point cancels): ``t = float32(exp((shift - d) * x_scale))`` in float64,
    where ``shift = max(0, logf(FLT_MAX / D) - 5) / x_scale`` (the log in float32) keeps the row's
    sum finite; ``s`` is the sum of the row's ``t`` in float32, added left to
    right (both one ``qlinear_softmax_exp``); ``y = round(t * floor(1 / y_scale) / s) + y_zero_point``, kept at most
    the type's maximum. ``axis`` defaults to -1 at every opset (the schema's
    default, which onnxruntime reads even before opset 13)."""
    dtype = _int8(ctx, x)
    target = _target(ctx, y_zero_point, dtype)
    if opset is None:
        raise malformed(ctx, "needs the attribute opset (the model's opset, which picks the softmax's axes)")
    ndim = q._rank(ctx, x, "the input")
    if axis is None:
        axis = -1
    if not -ndim <= axis < ndim:
        raise malformed(ctx, f"axis {axis} is out of range for an input of rank {ndim}")
    axis %= ndim
    data, shape = ctx.expr(x), x.shape
    if opset < 13 and axis != ndim - 1:   # softmax over the flattened trailing dims
        size = 1
        for d in shape[axis:]:
            size = size * d
        data = call(ctx, "reshape", data, ShapeExpr((*shape[:axis], size)))
        length, reduce_axis = size, axis
    else:
        length, reduce_axis = shape[axis], axis
    y = _softmax_rows(ctx, data, reduce_axis, length, x_scale, y_scale, y_zero_point, target)
    if data is not ctx.expr(x):
        y = make_call("reshape", ctx.expr(ctx.emit(y)), ShapeExpr(tuple(shape)))
    return y


def _softmax_rows(ctx, data: Expr, axis: int, length, x_scale: Value, y_scale: Value,
                  y_zero_point: Value | None, target: str) -> Expr:
    scale64 = astype(ctx, _per_tensor(ctx, x_scale, "x_scale"), "float64")
    n = astype(ctx, ctx.expr(ctx.sym_value([length], scalar=True)), "float32")
    # onnxruntime's log(FLT_MAX / D) takes a float and resolves to the float overload: the
    # headroom is rounded to float32 before the float64 shift (qlinear_softmax.cc)
    headroom = astype(ctx, call(ctx, "log", call(ctx, "divide", scalar(ctx, _FLOAT32_MAX, "float32"), n)),
                      "float64")
    shift = call(ctx, "divide", call(ctx, "maximum", call(ctx, "subtract", headroom, scalar(ctx, 5.0, "float64")),
                                     scalar(ctx, 0.0, "float64")), scale64)
    # t = float32(exp((float64(-(max - x)) + shift) * scale)) and its sums, left to right in
    # float32 as onnxruntime adds, in one kernel (ops/definitions/quantized_softmax.py)
    parts = call(ctx, "qlinear_softmax_exp", data, shift, scale64, axis=axis)
    t = ctx.expr(ctx.emit(TupleGetItem(parts, 0), "t"))
    total = ctx.expr(ctx.emit(TupleGetItem(parts, 1), "total"))
    inverse = call(ctx, "floor", call(ctx, "divide", scalar(ctx, 1.0, "float32"),
                                      astype(ctx, _per_tensor(ctx, y_scale, "y_scale"), "float32")))
    ratio = call(ctx, "round", call(ctx, "divide", call(ctx, "multiply", t, inverse), total))
    value = astype(ctx, ratio, "int32")
    if not q._is_zero(y_zero_point):
        value = call(ctx, "add", value, astype(ctx, _per_tensor(ctx, y_zero_point, "y_zero_point"), "int32"))
    top = int(np.iinfo(target).max)   # the sum is at least the zero point: only the top can overflow
    return make_call("astype", call(ctx, "minimum", value, scalar(ctx, top, "int32")), dtype=target)


# ---------------------------------------------------------------- QGemm


@register_converter(MS, "QGemm", since_opset=1)
def qgemm(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None, *,
          alpha=1.0, transA=0, transB=0):  # noqa: N803 (the ONNX attribute names)
    """``acc = (op(a) - a_zp) @ (op(b) - b_zp) + c`` in int32 (``c`` the int32
    bias, b's scale and zero point per tensor or per column), scaled by
    ``((alpha * a_scale) * b_scale) [/ y_scale]`` in float32: a float output
    without ``y_zero_point``, else rounded and saturated as QLinearMatMul does."""
    q._check_int8(ctx, a, b)
    for v, what in ((a, "A"), (b, "B")):
        if q._rank(ctx, v, what) != 2:
            raise malformed(ctx, f"{what} must be 2-D, got rank {v.ndim}")
    if c is not None and c.dtype != "int32":
        raise malformed(ctx, f"C must be int32 (the bias in a_scale * b_scale units), got {c.dtype}")
    acc = _exact_qgemm(ctx, a, a_zero_point, b, b_zero_point, c, transA, transB)
    if acc is None:
        acc = astype(ctx, _integer_qgemm(ctx, a, a_zero_point, b, b_zero_point, c, transA, transB), "float32")
    factor = call(ctx, "multiply", scalar(ctx, alpha, "float32"),
                  astype(ctx, _per_tensor(ctx, a_scale, "a_scale"), "float32"))
    factor = call(ctx, "multiply", factor, astype(ctx, _column(ctx, b_scale, "b_scale"), "float32"))
    if y_scale is not None:
        factor = call(ctx, "divide", factor, astype(ctx, _per_tensor(ctx, y_scale, "y_scale"), "float32"))
    scaled = call(ctx, "multiply", acc, factor)
    if y_zero_point is None:
        return scaled
    target = _target(ctx, y_zero_point, a.dtype)
    zp = None if q._is_zero(y_zero_point) else _per_tensor(ctx, y_zero_point, "y_zero_point")
    return q._saturate(ctx, scaled, zp, target)


def _exact_qgemm(ctx, a: Value, a_zero_point: Value | None, b: Value, b_zero_point: Value | None,
                 c: Value | None, trans_a: int, trans_b: int) -> Expr | None:
    """QGemm's ``acc`` as an exact float32 ``nn.gemm`` of ``a - a_zero_point`` by the constant
    ``op(b) - b_zero_point`` plus the constant bias ``c``, or None. ``|a - a_zero_point| <= 255``,
    so every partial sum (the bias included, wherever the GEMM adds it) is an integer of magnitude
    at most ``255 * max_j sum_k |w[k, j]| + max |c|``; at most 2**24 it is exact in float32, in
    any order: the int32 product plus the bias, without its casts and integer add (as
    QLinearMatMul's :func:`~.quantize._exact_gemm`; nothing folds into an nn.gemm)."""
    if trans_a or b.const is None or (b_zero_point is not None and b_zero_point.const is None) \
            or (c is not None and c.const is None) or (a_zero_point is not None and a_zero_point.dtype != a.dtype):
        return None
    weight = np.asarray(b.const, np.int64)
    weight = weight.T if trans_b else weight
    if b_zero_point is not None:
        zp = np.asarray(b_zero_point.const, np.int64).reshape(-1)       # per tensor or per column
        if zp.size not in (1, weight.shape[1]):
            return None
        weight = weight - zp
    bias = None if c is None else np.asarray(c.const, np.int64)
    if bias is not None and (bias.ndim > 1 or bias.size not in (1, weight.shape[1])):
        return None
    sums = np.abs(weight).sum(axis=0)
    top = 255 * (int(sums.max()) if sums.size else 0) + (int(np.abs(bias).max()) if bias is not None else 0)
    if top > q._FLOAT32_EXACT:
        return None
    lhs = astype(ctx, a, "float32")
    if not q._is_zero(a_zero_point):
        lhs = call(ctx, "subtract", lhs, astype(ctx, _per_tensor(ctx, a_zero_point, "a_zero_point"), "float32"))
    operands = [lhs, ctx.expr(ctx.const(weight.astype(np.float32)))]
    if bias is not None:
        operands.append(ctx.expr(ctx.const(bias.astype(np.float32))))
    return call(ctx, "nn.gemm", *operands)


def _integer_qgemm(ctx, a: Value, a_zero_point: Value | None, b: Value, b_zero_point: Value | None,
                   c: Value | None, trans_a: int, trans_b: int) -> Expr:
    """QGemm's ``acc`` in int32: the product of the zero-point-shifted operands plus ``c``."""
    lhs = astype(ctx, a, "int32")
    if not q._is_zero(a_zero_point):
        lhs = call(ctx, "subtract", lhs, astype(ctx, _per_tensor(ctx, a_zero_point, "a_zero_point"), "int32"))
    if trans_a:
        lhs = call(ctx, "permute_dims", lhs, axes=(1, 0))
    rhs = astype(ctx, b, "int32")
    if trans_b:
        rhs = call(ctx, "permute_dims", rhs, axes=(1, 0))
    if not q._is_zero(b_zero_point):
        rhs = call(ctx, "subtract", rhs, astype(ctx, _column(ctx, b_zero_point, "b_zero_point"), "int32"))
    acc = call(ctx, "matmul", lhs, rhs, name="acc")
    return acc if c is None else call(ctx, "add", acc, ctx.expr(c))


def _column(ctx, value: Value, what: str) -> Expr:
    """A per-tensor parameter (0-d) or one per output column (1-D, broadcasting on the columns)."""
    if q._single(ctx, value, what):
        return q._col_layout(ctx, value, what)
    if value.ndim != 1:
        raise malformed(ctx, f"{what} must be a scalar or 1-D (one per column), got shape {tuple(value.shape)}")
    return ctx.expr(value)


# ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear


@register_converter(MS, "QuantizeLinear", since_opset=1)
def ms_quantize_linear(ctx, x, y_scale, y_zero_point=None, *, axis=1):
    """The contrib QuantizeLinear: ONNX's, per tensor or per axis."""
    return q._quantize(ctx, x, y_scale, y_zero_point, axis=axis)


@register_converter(MS, "DequantizeLinear", since_opset=1)
def ms_dequantize_linear(ctx, x, x_scale, x_zero_point=None, *, axis=1):
    """The contrib DequantizeLinear: ONNX's, per tensor or per axis."""
    return q._dequantize(ctx, x, x_scale, x_zero_point, axis=axis)
