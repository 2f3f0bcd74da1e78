"""Quantization ops as compositions of IR ops.

QuantizeLinear is ``saturate(round_half_even(x / scale) + zero_point)``:
``divide``, ``round``, ``add``, ``clip`` and a final ``astype`` (the cast
itself never saturates, so the value is clipped to the target's range
first). DequantizeLinear is ``(x - zero_point) * scale`` computed in
float32. Scales and zero points are laid out to broadcast against ``x``:
per tensor (a scalar or one element), per axis (1-D along ``axis``) or
blocked (each element repeated ``block_size`` times along ``axis``, with
``take``). The integer ops (MatMulInteger, ConvInteger) widen to int32 and
subtract the zero points before the IR ``matmul`` / ``nn.conv``, so the
products accumulate in int32; QLinearMatMul and QLinearConv then requantize
the int32 accumulator with the multiplier ``a_scale * b_scale / y_scale``.

The arithmetic follows onnx's reference implementation: the division runs
in the promoted type of ``x`` and the scale (or ``precision``), and the
requantization in float32 (onnxruntime's choice as well).
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr, PrimValue, ShapeExpr, TupleGetItem
from ....ops.registry import make_call
from ..registry import register_converter
from ..tensors import onnx_dtype_name
from ..value import Value
from ._math_common import astype, call, malformed, scalar, unsupported
from ._shape_common import rank_unknown
from .nn import conv as _conv, conv_call

#: Saturation ranges of the integer quantized types.
_INT_RANGES = {
    "uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
    "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1),
}

#: every partial sum of a float32 product of integers is exact while it stays within this magnitude
_FLOAT32_EXACT = 1 << 24

#: Largest finite value of the small float quantized types.
_FLOAT_MAX = {
    "float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0, "float8_e5m2": 57344.0,
    "float8_e5m2fnuz": 57344.0, "float4_e2m1fn": 6.0, "float6_e2m3fn": 7.5, "float6_e3m2fn": 28.0,
}

#: float4 has no inf or NaN encoding: a cast to it always saturates.
_ALWAYS_SATURATE = {"float4_e2m1fn"}


# ---------------------------------------------------------------- helpers


def _is_float(dtype: str | None) -> bool:
    return dtype is not None and dtype.startswith(("float", "bfloat"))


def _dtype_attr(ctx, elem_type: int, what: str) -> str:
    """The IR dtype of an ONNX element-type attribute (unsupported types name themselves)."""
    return onnx_dtype_name(int(elem_type), f"{ctx.node_label()}: {what}")


def _promote(*dtypes: str) -> str:
    """numpy's promotion of the operands of the division: an integer operand
    (int32 ``x``) promotes to float64, two different floats to float32."""
    if any(not _is_float(d) for d in dtypes):
        return "float64"
    if len(set(dtypes)) == 1:
        return dtypes[0]
    return "float64" if "float64" in dtypes else "float32"


def _is_zero(value: Value | None) -> bool:
    """True when an optional zero point is omitted or a constant zero."""
    if value is None:
        return True
    if value.const is None:
        return False
    return not np.asarray(value.const, dtype=np.float64).any()


def _rank(ctx, value: Value, what: str) -> int:
    if value.ndim < 0:
        raise unsupported(ctx, rank_unknown(ctx, value, what))
    return value.ndim


def _single(ctx, value: Value, what: str) -> bool:
    """True when ``value`` holds one element (a scalar, shape (1,), (1, 1)...)."""
    if _rank(ctx, value, what) == 0:
        return True
    if value.shape is None:
        raise unsupported(ctx, f"{what} must have a known shape")
    return all(isinstance(d, int) and d == 1 for d in value.shape)


def _axis(ctx, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise malformed(ctx, f"axis {axis} is out of range for an input of rank {ndim}")
    return axis % ndim


def _layout(ctx, param: Value, x: Value, axis: int, block_size: int, what: str) -> Expr:
    """``param`` (a scale or zero point) shaped to broadcast against ``x``."""
    expr = ctx.expr(param)
    if _single(ctx, param, what):
        return expr if param.ndim == 0 else call(ctx, "reshape", expr, ShapeExpr(()))
    ndim = _rank(ctx, x, "the input")
    axis = _axis(ctx, axis, ndim)
    length = x.shape[axis] if x.shape is not None else None
    if block_size <= 0:
        if param.ndim != 1:
            raise malformed(ctx, f"{what} of shape {tuple(param.shape)} must be a scalar or 1-D "
                                 f"(blocked quantization needs block_size)")
        n = param.shape[0]
        if isinstance(n, int) and isinstance(length, int) and n != length:
            raise malformed(ctx, f"{what} has {n} elements, the input's axis {axis} has {length}")
        trailing = ndim - axis - 1
        return call(ctx, "expand_dims", expr, axis=tuple(range(1, 1 + trailing))) if trailing else expr
    return _blocked(ctx, param, expr, x, axis, block_size, what)


def _blocked(ctx, param: Value, expr: Expr, x: Value, axis: int, block_size: int, what: str) -> Expr:
    """Each element of ``param`` repeated ``block_size`` times along ``axis``,
    cut to the input's length there (the last block may be short)."""
    if x.shape is None or param.shape is None:
        raise unsupported(ctx, f"blocked quantization needs the shapes of the input and {what}")
    if param.ndim != x.ndim:
        raise malformed(ctx, f"{what} must have the input's rank {x.ndim} for blocked quantization, "
                             f"got shape {tuple(param.shape)}")
    length, blocks = x.shape[axis], param.shape[axis]
    if isinstance(length, int) and isinstance(blocks, int) and -(-length // block_size) != blocks:
        raise malformed(ctx, f"{what} has {blocks} blocks along axis {axis}, an input of {length} "
                             f"with block_size {block_size} needs {-(-length // block_size)}")
    if isinstance(length, int):
        index = ctx.expr(ctx.const(np.arange(length, dtype=np.int64) // block_size))
    else:
        positions = call(ctx, "range", PrimValue(0), PrimValue(length), PrimValue(1), dtype="int64")
        index = call(ctx, "floor_divide", positions, scalar(ctx, block_size, "int64"))
    return call(ctx, "take", expr, index, axis=axis)


def _saturate(ctx, q: Expr, zero_point: Expr | None, target: str, saturate: bool = True) -> Expr:
    """The quantized value of ``q`` (``x / scale``, a float tensor) in ``target``.

    Integer targets: round half to even, add the zero point and clip to the
    type's range in float32 (float64 when ``q`` is float64; exact for every
    int16 value; NaN to the minimum), then cast. Float targets: add the zero point, clip to the
    finite range when saturating, cast (round to nearest even).
    """
    if target in _INT_RANGES:
        q = call(ctx, "round", q)
        wide = "float64" if q.struct_info.dtype == "float64" else "float32"
        q = astype(ctx, q, wide)
        if zero_point is not None:
            q = call(ctx, "add", q, astype(ctx, zero_point, wide))
        return saturate_int(ctx, q, target)
    q = astype(ctx, q, "float32") if q.struct_info.dtype not in ("float32", "float64") else q
    if zero_point is not None:
        q = call(ctx, "add", q, astype(ctx, zero_point, q.struct_info.dtype))
    if saturate or target in _ALWAYS_SATURATE:
        bound = _FLOAT_MAX[target]
        q = call(ctx, "clip", q, min=-bound, max=bound)
    return make_call("astype", q, dtype=target)


def saturate_int(ctx, q: Expr, target: str) -> Expr:
    """``q`` (rounded, in float) clipped to the range of the integer type
    ``target`` and cast to it. A NaN becomes the type's minimum, as in
    onnxruntime (MLAS clamps with max/min instructions that return the bound
    for NaN) and onnx's reference evaluator; the spec leaves it undefined."""
    lo, hi = _INT_RANGES[target]
    return make_call("astype", call(ctx, "clip", q, min=float(lo), max=float(hi), saturate_nan=True),
                     dtype=target)


def _check_target(ctx, target: str) -> str:
    if target not in _INT_RANGES and target not in _FLOAT_MAX:
        raise unsupported(ctx, f"quantizing to {target} is not supported (types: "
                               f"{', '.join([*_INT_RANGES, *_FLOAT_MAX])})")
    return target


# ---------------------------------------------------------------- QuantizeLinear


def _quantize(ctx, x: Value, scale: Value, zero_point: Value | None, axis: int = 1, saturate: int = 1,
              block_size: int = 0, output_dtype: int = 0, precision: int = 0) -> Expr:
    if zero_point is not None and zero_point.dtype is None:
        raise unsupported(ctx, "the zero point's type must be known (it names the output type)")
    target = zero_point.dtype if zero_point is not None else None
    if output_dtype:
        wanted = _dtype_attr(ctx, output_dtype, "output_dtype")
        if target is not None and target != wanted:
            raise malformed(ctx, f"output_dtype {wanted} differs from the zero point's type {target}")
        target = wanted
    target = _check_target(ctx, target or "uint8")
    if block_size < 0:
        raise malformed(ctx, f"block_size must be positive, got {block_size}")
    work = _dtype_attr(ctx, precision, "precision") if precision else _promote(x.dtype, scale.dtype)
    if not _is_float(work):
        raise unsupported(ctx, f"precision {work}: the division needs a float type")
    q = call(ctx, "divide", astype(ctx, x, work),
             astype(ctx, _layout(ctx, scale, x, axis, block_size, "the scale"), work))
    zp = None if _is_zero(zero_point) else _layout(ctx, zero_point, x, axis, block_size, "the zero point")
    return _saturate(ctx, q, zp, target, bool(saturate))


@register_converter("", "QuantizeLinear", since_opset=10)
def quantize_linear_v10(ctx, x, y_scale, y_zero_point=None):
    """Per-tensor quantization to uint8 / int8."""
    return _quantize(ctx, x, y_scale, y_zero_point)


@register_converter("", "QuantizeLinear", since_opset=13)
def quantize_linear_v13(ctx, x, y_scale, y_zero_point=None, *, axis=1):
    """Per-tensor or per-axis quantization."""
    return _quantize(ctx, x, y_scale, y_zero_point, axis=axis)


@register_converter("", "QuantizeLinear", since_opset=19)
def quantize_linear_v19(ctx, x, y_scale, y_zero_point=None, *, axis=1, saturate=1):
    """Adds the float8 targets; ``saturate`` clips to their finite range."""
    return _quantize(ctx, x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@register_converter("", "QuantizeLinear", since_opset=21)
def quantize_linear_v21(ctx, x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0,
                        saturate=1):
    """Adds blocked scales, (u)int16 and (u)int4 targets and ``output_dtype``."""
    return _quantize(ctx, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
                     output_dtype=output_dtype)


@register_converter("", "QuantizeLinear", since_opset=23)
def quantize_linear(ctx, x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0,
                    precision=0, saturate=1):
    """Adds float4 and ``precision`` (the division's type). Later opsets (24,
    25, 28) only add types: a float8e8m0 scale, int2/uint2 and float6 targets."""
    return _quantize(ctx, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
                     output_dtype=output_dtype, precision=precision)


# ---------------------------------------------------------------- DequantizeLinear


def _dequantize(ctx, x: Value, scale: Value, zero_point: Value | None, axis: int = 1,
                block_size: int = 0, output_dtype: int = 0) -> Expr:
    out = _dtype_attr(ctx, output_dtype, "output_dtype") if output_dtype else scale.dtype
    if not _is_float(out):
        raise unsupported(ctx, f"dequantizing to {out}: the output must be a float type")
    if block_size < 0:
        raise malformed(ctx, f"block_size must be positive, got {block_size}")
    work = "float32"
    value = astype(ctx, x, work)
    if not _is_zero(zero_point):
        zp = _layout(ctx, zero_point, x, axis, block_size, "the zero point")
        value = call(ctx, "subtract", value, astype(ctx, zp, work))
    factor = astype(ctx, _layout(ctx, scale, x, axis, block_size, "the scale"), work)
    if out == work:
        return make_call("multiply", value, factor)
    return make_call("astype", call(ctx, "multiply", value, factor), dtype=out)


@register_converter("", "DequantizeLinear", since_opset=10)
def dequantize_linear_v10(ctx, x, x_scale, x_zero_point=None):
    """Per-tensor dequantization of uint8 / int8 / int32."""
    return _dequantize(ctx, x, x_scale, x_zero_point)


@register_converter("", "DequantizeLinear", since_opset=13)
def dequantize_linear_v13(ctx, x, x_scale, x_zero_point=None, *, axis=1):
    """Per-tensor or per-axis; from opset 19 also float8 inputs and float16/bfloat16 scales."""
    return _dequantize(ctx, x, x_scale, x_zero_point, axis=axis)


@register_converter("", "DequantizeLinear", since_opset=21)
def dequantize_linear_v21(ctx, x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    """Adds blocked scales and (u)int16 / (u)int4 inputs."""
    return _dequantize(ctx, x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@register_converter("", "DequantizeLinear", since_opset=23)
def dequantize_linear(ctx, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """Adds ``output_dtype`` and float4 inputs (later opsets only add types)."""
    return _dequantize(ctx, x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                       output_dtype=output_dtype)


# ---------------------------------------------------------------- DynamicQuantizeLinear


@register_converter("", "DynamicQuantizeLinear", since_opset=11)
def dynamic_quantize_linear(ctx, x):
    """uint8 quantization with a scale and zero point from the data's range
    (widened to include 0): ``scale = (max(0, max x) - min(0, min x)) / 255``."""
    if x.dtype != "float32":
        raise unsupported(ctx, f"input type {x.dtype} (float32 only)")
    data = ctx.expr(x)
    # One kernel for the scalars (an all-zero input gets scale 1 as in onnxruntime; onnx's
    # reference gives 1/255): kernels/quantize.py makes the float32 operations one by one.
    params = ctx.expr(ctx.emit(make_call("dynamic_quantize_params", data)))
    y_scale = ctx.expr(ctx.emit(TupleGetItem(params, 0), "y_scale"))
    zp_float = ctx.expr(ctx.emit(TupleGetItem(params, 1)))
    y_zero_point = call(ctx, "astype", zp_float, dtype="uint8", name="y_zero_point")
    y = _saturate(ctx, call(ctx, "divide", data, y_scale), zp_float, "uint8")
    return y, y_scale, y_zero_point


# ---------------------------------------------------------------- integer matmul and conv


def _widen(ctx, value: Value, zero_point: Value | None, layout) -> Expr:
    """``value - zero_point`` in int32 (``layout`` shapes the zero point)."""
    wide = astype(ctx, value, "int32")
    if _is_zero(zero_point):
        return wide
    return call(ctx, "subtract", wide, astype(ctx, layout(zero_point), "int32"))


def _row_layout(ctx, param: Value, a: Value, what: str) -> Expr:
    """A per-tensor or per-row parameter of the left matmul operand: a 1-D
    parameter of a 2-D (or more) operand holds one value per row."""
    expr = ctx.expr(param)
    if _single(ctx, param, what):
        return expr if param.ndim == 0 else call(ctx, "reshape", expr, ShapeExpr(()))
    if param.ndim == 1 and _rank(ctx, a, "a") >= 2:
        return call(ctx, "expand_dims", expr, axis=(1,))
    return expr


def _col_layout(ctx, param: Value, what: str) -> Expr:
    """A per-tensor or per-column parameter of the right operand (numpy
    broadcasting already puts a 1-D or (..., 1, N) one on the columns)."""
    expr = ctx.expr(param)
    if _single(ctx, param, what):
        return expr if param.ndim == 0 else call(ctx, "reshape", expr, ShapeExpr(()))
    return expr


def _check_int8(ctx, *values: Value) -> None:
    for v in values:
        if v is not None and v.dtype not in ("int8", "uint8"):
            raise unsupported(ctx, f"operand type {v.dtype} (int8 and uint8 only)")


@register_converter("", "MatMulInteger", since_opset=10)
def matmul_integer(ctx, a, b, a_zero_point=None, b_zero_point=None):
    """``(a - a_zero_point) @ (b - b_zero_point)`` accumulated in int32; with a constant b whose
    column sums bound the product within float32's exact integers, an ``nn.gemm`` in float32 cast
    to int32 (the same integers, see :func:`_exact_float_weight`)."""
    _check_int8(ctx, a, b)
    weight = _exact_float_weight(ctx, a, b, b_zero_point)
    if weight is not None:
        return make_call("astype", _exact_gemm(ctx, a, a_zero_point, weight), dtype="int32")
    product = _exact_float_product(ctx, a, a_zero_point, b, b_zero_point)
    if product is not None:
        return make_call("astype", product, dtype="int32")
    lhs = _widen(ctx, a, a_zero_point, lambda zp: _row_layout(ctx, zp, a, "a_zero_point"))
    rhs = _widen(ctx, b, b_zero_point, lambda zp: _col_layout(ctx, zp, "b_zero_point"))
    return make_call("matmul", lhs, rhs)


def _quantized_operand(ctx, value: Value, zero_point: Value, layout) -> tuple[Expr, bool]:
    """``value - zero_point``: int32 for the integer types, float32 for float8."""
    if value.dtype in _INT_RANGES:
        return _widen(ctx, value, zero_point, layout), True
    if value.dtype not in _FLOAT_MAX:
        raise unsupported(ctx, f"operand type {value.dtype}")
    expr = astype(ctx, value, "float32")
    if not _is_zero(zero_point):
        expr = call(ctx, "subtract", expr, astype(ctx, layout(zero_point), "float32"))
    return expr, False


def _multiplier(ctx, *scales: tuple[Expr, Value]) -> Expr:
    """``s0 * s1 / s2`` in the scales' type, then as float32."""
    (s0, _), (s1, _), (s2, _) = scales
    dtype = _promote(*(v.dtype for _, v in scales))
    product = call(ctx, "multiply", astype(ctx, s0, dtype), astype(ctx, s1, dtype))
    return astype(ctx, call(ctx, "divide", product, astype(ctx, s2, dtype)), "float32")


def _requantize(ctx, acc: Expr, multiplier: Expr, y_zero_point: Value, layout) -> Expr:
    """``saturate(round(acc * multiplier) + y_zero_point)`` in the zero point's type."""
    scaled = call(ctx, "multiply", astype(ctx, acc, "float32"), multiplier)
    zp = None if _is_zero(y_zero_point) else layout(y_zero_point)
    return _saturate(ctx, scaled, zp, _check_target(ctx, y_zero_point.dtype))


def _exact_float_weight(ctx, a: Value, b: Value, b_zero_point: Value | None) -> Value | None:
    """The float32 ``b - b_zero_point`` of a QLinearMatMul whose product is exact in float32, or
    None: ``|a - a_zero_point| <= 255`` for int8 / uint8 values, so every partial sum is at most
    ``255 * max_j sum_k |b[k, j] - zp_j|``; at most 2**24 it is an exact float32 integer."""
    if b.const is None or (b_zero_point is not None and b_zero_point.const is None) \
            or a.dtype not in ("int8", "uint8") or b.dtype not in ("int8", "uint8") or b.ndim < 2:
        return None
    weight = np.asarray(b.const, np.int64)
    if b_zero_point is not None:
        weight = weight - np.asarray(b_zero_point.const, np.int64)     # per tensor or per column
    sums = np.abs(weight).sum(axis=-2)
    if weight.shape != np.shape(b.const) or 255 * (int(sums.max()) if sums.size else 0) > _FLOAT32_EXACT:
        return None
    return ctx.const(weight.astype(np.float32))


def _exact_gemm(ctx, a: Value, a_zero_point: Value | None, weight: Value) -> Expr:
    """``(a - a_zero_point) @ weight`` in float32, exact (:func:`_exact_float_weight`). nn.gemm, not
    matmul: FoldBatchNorm folds a per-column scale after a matmul into its weight, which would
    make the sums inexact; nothing folds into an nn.gemm."""
    lhs = astype(ctx, a, "float32")
    if not _is_zero(a_zero_point):
        zp = _row_layout(ctx, a_zero_point, a, "a_zero_point")
        lhs = call(ctx, "subtract", lhs, astype(ctx, zp, "float32"))
    return call(ctx, "nn.gemm", lhs, ctx.expr(weight))


def _exact_float_product(ctx, a: Value, a_zero_point: Value | None, b: Value, b_zero_point: Value | None) -> Expr | None:
    """``(a - a_zero_point) @ (b - b_zero_point)`` in float32 for int8 / uint8 operands (either
    computed at run time: attention's ``q @ k^T``) whose reduced dim ``K`` is static with
    ``255 * 255 * K <= 2**24`` (``K <= 258``), or None: a zero point has its operand's type, so
    ``|a - a_zero_point|, |b - b_zero_point| <= 255`` and every partial sum, in any order, is an
    integer of magnitude at most ``255 * 255 * K``, exact in float32. A ``matmul`` of run-time
    operands: FoldBatchNorm folds only into constant weights."""
    if a.dtype not in ("int8", "uint8") or b.dtype not in ("int8", "uint8") or a.ndim < 1 or b.ndim < 1 \
            or a.shape is None or b.shape is None:
        return None
    dims = [d for d in (a.shape[-1], b.shape[-2] if b.ndim >= 2 else b.shape[0]) if isinstance(d, int)]
    if not dims or 255 * 255 * dims[0] > _FLOAT32_EXACT:
        return None
    # each operand shifted in int32, then cast (exact): the rules that drop a producer's round
    # trips (QLinearMul's zero point put back in float) know that form
    lhs = _widen(ctx, a, a_zero_point, lambda zp: _row_layout(ctx, zp, a, "a_zero_point"))
    rhs = _widen(ctx, b, b_zero_point, lambda zp: _col_layout(ctx, zp, "b_zero_point"))
    return call(ctx, "matmul", astype(ctx, lhs, "float32"), astype(ctx, rhs, "float32"))


def _qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    weight = _exact_float_weight(ctx, a, b, b_zero_point)
    product = None if weight is not None else _exact_float_product(ctx, a, a_zero_point, b, b_zero_point)
    if weight is not None:
        acc = _exact_gemm(ctx, a, a_zero_point, weight)
    elif product is not None:
        acc = product
    else:
        lhs, lhs_int = _quantized_operand(ctx, a, a_zero_point,
                                          lambda zp: _row_layout(ctx, zp, a, "a_zero_point"))
        rhs, rhs_int = _quantized_operand(ctx, b, b_zero_point, lambda zp: _col_layout(ctx, zp, "b_zero_point"))
        if lhs_int != rhs_int:
            lhs, rhs = astype(ctx, lhs, "float32"), astype(ctx, rhs, "float32")
        acc = call(ctx, "matmul", lhs, rhs)
    multiplier = _multiplier(ctx, (_row_layout(ctx, a_scale, a, "a_scale"), a_scale),
                             (_col_layout(ctx, b_scale, "b_scale"), b_scale),
                             (_col_layout(ctx, y_scale, "y_scale"), y_scale))
    return _requantize(ctx, acc, multiplier, y_zero_point, lambda zp: _col_layout(ctx, zp, "y_zero_point"))


@register_converter("", "QLinearMatMul", since_opset=10)
def qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """int32 matmul of the zero-point-shifted operands, requantized with
    ``a_scale * b_scale / y_scale`` (per tensor, per row of a, per column of b);
    from opset 21 also float8 operands and float16/bfloat16 scales."""
    return _qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)


def _channel_layout(ctx, param: Value, ndim: int, axis: int, what: str) -> Expr:
    """A per-tensor or per-output-channel parameter laid out along ``axis``
    of a rank-``ndim`` tensor (0 for the weight, 1 for the conv's output)."""
    expr = ctx.expr(param)
    if _single(ctx, param, what):
        return expr if param.ndim == 0 else call(ctx, "reshape", expr, ShapeExpr(()))
    if param.ndim != 1:
        raise malformed(ctx, f"{what} must be a scalar or 1-D (per output channel), "
                             f"got shape {tuple(param.shape)}")
    return call(ctx, "expand_dims", expr, axis=tuple(i for i in range(ndim) if i != axis))


def _check_x_zero_point(ctx, x_zero_point: Value | None) -> None:
    if x_zero_point is not None and not _single(ctx, x_zero_point, "x_zero_point"):
        raise unsupported(ctx, "x_zero_point must be a scalar (per-tensor)")


def _conv_integer(ctx, x, w, x_zero_point, w_zero_point, bias, attrs) -> Expr:
    _check_int8(ctx, x, w)
    ndim = _rank(ctx, w, "the weight")
    _check_x_zero_point(ctx, x_zero_point)
    # Shifting by the zero point before the conv pads with the zero point, as the spec wants.
    lhs = _widen(ctx, x, x_zero_point, lambda zp: _channel_layout(ctx, zp, ndim, 1, "x_zero_point"))
    rhs = _widen(ctx, w, w_zero_point, lambda zp: _channel_layout(ctx, zp, ndim, 0, "w_zero_point"))
    return _conv(ctx, ctx.emit(lhs), ctx.emit(rhs), bias, **attrs)


@register_converter("", "ConvInteger", since_opset=10)
def conv_integer(ctx, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None,
                 group=1, kernel_shape=None, pads=None, strides=None):
    """Conv of the zero-point-shifted operands, accumulated in int32."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    return _conv_integer(ctx, x, w, x_zero_point, w_zero_point, None, attrs)


def _exact_float_operands(ctx, x: Value, w: Value, w_zero_point: Value | None, bias: Value | None):
    """The float32 weight ``w - w_zero_point`` and bias of a QLinearConv whose conv is exact in
    float32, or None. ``|x - x_zero_point| <= 255`` for any int8 / uint8 values, so every
    partial sum of the conv (plus the bias) is at most ``255 * max_o sum |w_o - zp_o| +
    max |bias|``: at most 2**24, it is an exact float32 integer (docs/design-notes.md)."""
    if w.const is None or (w_zero_point is not None and w_zero_point.const is None) \
            or (bias is not None and bias.const is None) or x.dtype not in ("int8", "uint8") \
            or w.dtype not in ("int8", "uint8") or w.ndim < 3:
        return None
    weight = np.asarray(w.const, np.int64)
    if w_zero_point is not None:
        zp = np.asarray(w_zero_point.const, np.int64).reshape(-1)
        if zp.size not in (1, weight.shape[0]):
            return None
        weight = weight - zp.reshape((-1,) + (1,) * (weight.ndim - 1))
    sums = np.abs(weight).reshape(weight.shape[0], -1).sum(axis=1)
    top = int(sums.max()) if sums.size else 0
    b = None if bias is None else np.asarray(bias.const, np.int64)
    if b is not None and (b.ndim != 1 or b.shape[0] != weight.shape[0]):
        return None
    if 255 * top + (int(np.abs(b).max()) if b is not None and b.size else 0) > _FLOAT32_EXACT:
        return None
    return ctx.const(weight.astype(np.float32)), None if b is None else ctx.const(b.astype(np.float32))


def _exact_float_conv(ctx, x, x_zero_point, operands, attrs) -> Expr:
    """The conv of ``x - x_zero_point`` (float32; the zero padding pads with the zero point, as
    the spec wants) by the float32 weight and bias of :func:`_exact_float_operands`, marked exact."""
    weight, bias = operands
    data = astype(ctx, x, "float32")
    if not _is_zero(x_zero_point):
        zp = _channel_layout(ctx, x_zero_point, weight.ndim, 1, "x_zero_point")
        data = call(ctx, "subtract", data, astype(ctx, zp, "float32"))
    return conv_call(ctx, ctx.emit(data), weight, bias, exact=True, **attrs)


@register_converter("", "QLinearConv", since_opset=10)
def qlinear_conv(ctx, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 B=None, *, auto_pad="NOTSET", dilations=None, group=1,  # noqa: N803 (the ONNX input name)
                 kernel_shape=None, pads=None, strides=None):
    """ConvInteger plus the int32 bias, requantized with ``x_scale * w_scale / y_scale``
    (``w_scale`` per tensor or per output channel). With a constant weight whose sums bound the
    conv within float32's exact integers, the conv is float32 (``exact``) on ``x - x_zero_point``
    in float32: the same integers, without the int32 round trips."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    _check_x_zero_point(ctx, x_zero_point)
    operands = _exact_float_operands(ctx, x, w, w_zero_point, B)
    if operands is not None:
        acc = ctx.expr(ctx.emit(_exact_float_conv(ctx, x, x_zero_point, operands, attrs)))
    else:
        acc = ctx.expr(ctx.emit(_conv_integer(ctx, x, w, x_zero_point, w_zero_point, B, attrs)))
    ndim = _rank(ctx, w, "the weight")
    multiplier = _multiplier(ctx, (_channel_layout(ctx, x_scale, ndim, 1, "x_scale"), x_scale),
                             (_channel_layout(ctx, w_scale, ndim, 1, "w_scale"), w_scale),
                             (_channel_layout(ctx, y_scale, ndim, 1, "y_scale"), y_scale))
    return _requantize(ctx, acc, multiplier, y_zero_point,
                       lambda zp: _channel_layout(ctx, zp, ndim, 1, "y_zero_point"))
