"""com.microsoft ops that exporters and onnxruntime's transformer optimizer
emit, as compositions of IR ops (so they fuse and plan like any other).

Each follows onnxruntime's contrib-op documentation and its CPU kernel,
checked against onnxruntime in tests/importers/onnx/test_convert_microsoft.py:

- activations: Gelu (erf), FastGelu (tanh form, optional bias), BiasGelu,
  QuickGelu (``x * sigmoid(alpha * x)``);
- FusedMatMul: ``alpha * op(A) @ op(B)``, op a transpose of the last two dims;
  FusedGemm: Gemm then an activation; FusedConv: Conv (plus an optional Z)
  then an activation;
- layer norms: SkipLayerNormalization (``LN(input + skip + bias)``, also the
  sum as output 3), SkipSimplifiedLayerNormalization and
  SimplifiedLayerNormalization (RMS), the contrib LayerNormalization of the
  default domain before opset 17, EmbedLayerNormalization and its quantized
  QEmbedLayerNormalization;
- quantized: QLinearAdd, QLinearMul, MatMulIntegerToFloat,
  DynamicQuantizeMatMul;
- CDist (skl2onnx's ``optim="cdist"``): the distances of A's rows to B's, by
  onnxruntime's expansion ``(-2 A @ B.T + |a|^2) + |b|^2`` (a row 0 apart from
  another is then a rounding residue apart, as in onnxruntime).

Attention and MultiHeadAttention are in ``microsoft_attention.py``. BiasAdd
and BiasSplitGelu are left out: onnxruntime implements them for CUDA only, so
there is no CPU reference to check them against.

    SkipLayerNormalization(x, skip, gamma, beta, bias)
        ->  s = x + skip + bias;  y = R.nn.layer_norm(s, gamma, beta, axes=(2,))
"""

from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.expr import Expr, ShapeExpr
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from . import quantize as q
from ._composite_common import arange, outputs_used
from ._dynamic import aligned_for_broadcast
from ._math_common import astype, call, malformed, scalar
from ._shape_common import rank_unknown
from .nn import conv as _onnx_conv
from .nn import gemm as _onnx_gemm
from .nn import layer_norm as _onnx_layer_norm

MS = "com.microsoft"


def ms_unsupported(ctx, what: str) -> UnsupportedOpError:
    """An :class:`UnsupportedOpError` naming the node, the com.microsoft domain and its opset."""
    return UnsupportedOpError(f"{ctx.node_label()} (domain {MS}, opset {ctx.opsets.get(MS, 1)}): {what}")


def _rank(ctx, value: Value, what: str) -> int:
    if value.ndim < 0:
        raise ms_unsupported(ctx, rank_unknown(ctx, value, what))
    return value.ndim


def _float(ctx, value: Value, what: str = "the input") -> str:
    if value.dtype not in ("float32", "float16", "float64", "bfloat16"):
        raise ms_unsupported(ctx, f"{what} must be a float tensor, got {value.dtype}")
    return value.dtype


# ================================================================ activations


@register_converter(MS, "Gelu", since_opset=1)
def gelu(ctx, x):
    """``0.5 * x * (1 + erf(x / sqrt(2)))``."""
    _float(ctx, x)
    return make_call("nn.gelu", ctx.expr(x), approximate="none")


@register_converter(MS, "BiasGelu", since_opset=1)
def bias_gelu(ctx, a, b):
    """Gelu (erf) of ``a + b``."""
    _float(ctx, a)
    return make_call("nn.gelu", call(ctx, "add", ctx.expr(a), ctx.expr(b)), approximate="none")


@register_converter(MS, "FastGelu", since_opset=1)
def fast_gelu(ctx, x, bias=None):
    """The tanh approximation of Gelu of ``x (+ bias)``."""
    _float(ctx, x)
    data = ctx.expr(x) if bias is None else call(ctx, "add", ctx.expr(x), ctx.expr(bias))
    return make_call("nn.gelu", data, approximate="tanh")


@register_converter(MS, "QuickGelu", since_opset=1)
def quick_gelu(ctx, x, *, alpha=1.702):
    """``x * sigmoid(alpha * x)``."""
    dtype = _float(ctx, x)
    data = ctx.expr(x)
    gate = call(ctx, "sigmoid", call(ctx, "multiply", data, scalar(ctx, alpha, dtype)))
    return make_call("multiply", data, gate)


# ================================================================ FusedMatMul


@register_converter(MS, "FusedMatMul", since_opset=1)
def fused_matmul(ctx, a, b, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """``alpha * op(A) @ op(B)``. ``op`` first moves the leading dim of an operand of rank 3 or more
    behind its batch dims when ``transBatch*`` asks (onnxruntime's MatmulTransposeFusion folds a
    Transpose such as ``(1, 2, 0, 3)`` into it: ``A[m, b1, .., k]`` read as ``[b1, .., m, k]``),
    then swaps the last two dims when ``trans*`` asks; one ``permute_dims`` per operand. As in
    onnxruntime, batch transposes need two operands of one rank, 3 or more."""
    if transBatchA or transBatchB:
        ranks = _rank(ctx, a, "A"), _rank(ctx, b, "B")
        if ranks[0] != ranks[1] or ranks[0] < 3:
            raise malformed(ctx, f"transBatchA/transBatchB need A and B of one rank, 3 or more; got ranks "
                                 f"{ranks[0]} and {ranks[1]}")
    lhs, rhs = (_operand(ctx, v, t, tb, name)
                for v, t, tb, name in ((a, transA, transBatchA, "A"), (b, transB, transBatchB, "B")))
    product = call(ctx, "matmul", lhs, rhs)
    if alpha == 1.0:
        return product
    return make_call("multiply", product, scalar(ctx, alpha, product.struct_info.dtype))


def _operand(ctx, value: Value, transpose: int, batch_transpose: int, what: str) -> Expr:
    """``value`` as FusedMatMul reads it (see :func:`fused_matmul`)."""
    expr = ctx.expr(value)
    if not (transpose or batch_transpose):
        return expr
    ndim = _rank(ctx, value, what)
    if ndim < 2:
        raise malformed(ctx, f"trans{what} needs {what} of rank 2 or more, got rank {ndim}")
    axes = list(range(ndim))
    if batch_transpose:
        axes = axes[1:ndim - 1] + [0, ndim - 1]
    if transpose:
        axes[-2:] = axes[-1], axes[-2]
    return call(ctx, "permute_dims", expr, axes=tuple(axes))


#: FusedGemm's activations (onnxruntime's names) -> (IR op, its attributes from activation_alpha)
_GEMM_ACTIVATIONS = {
    "Relu": ("nn.relu", lambda alpha: {}), "Tanh": ("tanh", lambda alpha: {}),
    "Sigmoid": ("sigmoid", lambda alpha: {}),
    "LeakyRelu": ("nn.leakyrelu", lambda alpha: {"alpha": 0.01 if alpha is None else float(alpha)}),
}


def _activation_name(activation) -> str | None:
    return activation.decode() if isinstance(activation, bytes) else activation


@register_converter(MS, "FusedGemm", since_opset=1)
def fused_gemm(ctx, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, activation=None,
               activation_alpha=None, activation_beta=None, activation_gamma=None):
    """``activation(Gemm(a, b, c))``, the Gemm + activation onnxruntime's graph optimizer fuses."""
    name = _activation_name(activation)
    if name not in _GEMM_ACTIVATIONS:
        raise ms_unsupported(ctx, f"activation {name!r} (supported: {', '.join(_GEMM_ACTIVATIONS)})")
    op, attrs = _GEMM_ACTIVATIONS[name]
    product = ctx.expr(ctx.emit(_onnx_gemm(ctx, a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB)))
    return make_call(op, product, **attrs(activation_alpha))


#: FusedConv's activations (onnxruntime's MLAS activation kinds) -> (IR op, attributes from activation_params)
_CONV_ACTIVATIONS = {
    "Relu": ("nn.relu", 0, lambda p: {}), "Tanh": ("tanh", 0, lambda p: {}),
    "Sigmoid": ("sigmoid", 0, lambda p: {}),
    "LeakyRelu": ("nn.leakyrelu", 1, lambda p: {"alpha": p[0]}),
    "Clip": ("clip", 2, lambda p: {"min": p[0], "max": p[1]}),
    "HardSigmoid": ("nn.hard_sigmoid", 2, lambda p: {"alpha": p[0], "beta": p[1]}),
}


@register_converter(MS, "FusedConv", since_opset=1)
def fused_conv(ctx, x, w, b=None, z=None, *, activation=None, activation_params=None, auto_pad="NOTSET",
               dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """``activation(Conv(x, w, b) + z)``: the Conv + activation (and the Add of
    ``z`` before it) that onnxruntime's graph optimizer fuses at
    ORT_ENABLE_EXTENDED; ``activation_params`` holds LeakyRelu's alpha, Clip's
    min and max, HardSigmoid's alpha and beta."""
    name = _activation_name(activation)
    if name not in _CONV_ACTIVATIONS:
        raise ms_unsupported(ctx, f"activation {name!r} (supported: {', '.join(_CONV_ACTIVATIONS)})")
    op, count, attrs = _CONV_ACTIVATIONS[name]
    params = [float(p) for p in (activation_params or ())]
    if len(params) < count:
        raise malformed(ctx, f"activation {name} needs {count} activation_params, got {len(params)}")
    out = ctx.expr(ctx.emit(_onnx_conv(ctx, x, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
                                       kernel_shape=kernel_shape, pads=pads, strides=strides)))
    if z is not None:
        out = call(ctx, "add", out, ctx.expr(z), name="conv_sum")
    return make_call(op, out, **attrs(params))


# ================================================================ layer norms


def _last_axis(ctx, x: Value) -> tuple[int, ...]:
    return (_rank(ctx, x, "the input") - 1,)


def _training_outputs(ctx, used: list[bool]) -> None:
    if used[1] or used[2]:
        raise ms_unsupported(ctx, "the mean and inv_std_var outputs (training only)")


@register_converter(MS, "SkipLayerNormalization", since_opset=1)
def skip_layer_norm(ctx, x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """``LN(x + skip + bias)`` over the last dim; output 3 is the sum."""
    _float(ctx, x)
    _training_outputs(ctx, outputs_used(ctx, 4))
    total = _skip_sum(ctx, x, skip, bias)
    args = [total, ctx.expr(gamma)] + ([] if beta is None else [ctx.expr(beta)])
    y = call(ctx, "nn.layer_norm", *args, axes=_last_axis(ctx, x), epsilon=float(epsilon), name="skip_ln")
    return y, None, None, total


@register_converter(MS, "SkipSimplifiedLayerNormalization", since_opset=1)
def skip_simplified_layer_norm(ctx, x, skip, gamma, bias=None, *, epsilon=1e-12):
    """``RMSNorm(x + skip + bias) * gamma``; output 3 is the sum."""
    _float(ctx, x)
    _training_outputs(ctx, outputs_used(ctx, 4))
    total = _skip_sum(ctx, x, skip, bias)
    return _rms_norm(ctx, total, gamma, epsilon), None, None, total


def _skip_sum(ctx, x: Value, skip: Value, bias: Value | None) -> Expr:
    total = call(ctx, "add", ctx.expr(x), ctx.expr(skip), name="skip_sum")
    return total if bias is None else call(ctx, "add", total, ctx.expr(bias), name="skip_sum")


def _rms_norm(ctx, data: Expr, gamma: Value, epsilon: float) -> Expr:
    dtype = data.struct_info.dtype
    wide = astype(ctx, data, "float32")     # statistics in float32, as onnxruntime keeps them
    mean_square = call(ctx, "mean", call(ctx, "square", wide), axis=(-1,), keepdims=True)
    inv = call(ctx, "rsqrt", call(ctx, "add", mean_square, scalar(ctx, epsilon, "float32")))
    normed = astype(ctx, call(ctx, "multiply", wide, inv), dtype)
    return call(ctx, "multiply", normed, ctx.expr(gamma), name="rms_norm")


@register_converter("", "SimplifiedLayerNormalization", since_opset=1)
def simplified_layer_norm(ctx, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """onnxruntime's RMS norm in the default domain: ``x / sqrt(mean(x^2) + eps) * scale``."""
    _float(ctx, x)
    ndim = _rank(ctx, x, "the input")
    if axis not in (-1, ndim - 1):
        raise ms_unsupported(ctx, f"axis={axis} (only the last axis)")
    if any(outputs_used(ctx, 2)[1:]):
        raise ms_unsupported(ctx, "the inv_std_var output (training only)")
    return _rms_norm(ctx, ctx.expr(x), scale, epsilon)


@register_converter("", "LayerNormalization", since_opset=1)
def contrib_layer_norm(ctx, x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """onnxruntime's LayerNormalization in the default domain before ONNX
    standardized it (opset 17): the same op, the same attributes."""
    return _onnx_layer_norm(ctx, x, scale, bias, axis=axis, epsilon=epsilon, stash_type=stash_type)


@register_converter(MS, "EmbedLayerNormalization", since_opset=1)
def embed_layer_norm(ctx, input_ids, segment_ids=None, word_embedding=None, position_embedding=None,
                     segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *,
                     epsilon=1e-12, mask_index_type=1):
    """``LN(word[ids] + position[pos] + segment[segment_ids])``; the mask
    index (output 1) counts each row's mask entries equal to 1 (int32: what
    onnxruntime counts; a 2 or a -1 is not counted); output 2 is the sum
    before the norm."""
    if word_embedding is None or position_embedding is None or gamma is None or beta is None:
        raise malformed(ctx, "needs word_embedding, position_embedding, gamma and beta")
    tables = [None if t is None else ctx.expr(t) for t in (word_embedding, position_embedding, segment_embedding,
                                                            gamma, beta)]
    return _embed_layer_norm(ctx, input_ids, segment_ids, *tables, mask, position_ids, epsilon)


@register_converter(MS, "QEmbedLayerNormalization", since_opset=1)
def q_embed_layer_norm(ctx, input_ids, segment_ids=None, word_embedding=None, position_embedding=None,
                       segment_embedding=None, gamma=None, beta=None, mask=None, word_embedding_scale=None,
                       position_embedding_scale=None, segment_embedding_scale=None, gamma_scale=None,
                       beta_scale=None, word_embedding_zero_point=None, position_embedding_zero_point=None,
                       segment_embedding_zero_point=None, gamma_zero_point=None, beta_zero_point=None, *,
                       epsilon=1e-12):
    """EmbedLayerNormalization of tables, gamma and beta quantized per tensor (onnxruntime's
    dynamic quantization of a fused BERT embedding): each dequantized as ``(q - zp) * scale``
    in float32, then as EmbedLayerNormalization (no position ids, no output 2)."""
    quantized = ((word_embedding, word_embedding_scale, word_embedding_zero_point),
                 (position_embedding, position_embedding_scale, position_embedding_zero_point),
                 (segment_embedding, segment_embedding_scale, segment_embedding_zero_point),
                 (gamma, gamma_scale, gamma_zero_point), (beta, beta_scale, beta_zero_point))
    tables = []
    for i, (table, scale, zero_point) in enumerate(quantized):
        if table is None or scale is None:
            if i != 2 or table is not None or scale is not None:
                raise malformed(ctx, "needs each table, gamma and beta with its scale (the segment "
                                     "embedding's only with segment ids)")
            tables.append(None)
            continue
        shifted, factor = _dequantized(ctx, table, scale, zero_point)
        tables.append(call(ctx, "multiply", shifted, factor))
    y, mask_index, _ = _embed_layer_norm(ctx, input_ids, segment_ids, *tables, mask, None, epsilon)
    return y, mask_index


def _embed_layer_norm(ctx, input_ids: Value, segment_ids: Value | None, word: Expr, position: Expr,
                      segment: Expr | None, gamma: Expr, beta: Expr, mask: Value | None,
                      position_ids: Value | None, epsilon: float) -> tuple[Expr, Expr | None, Expr]:
    """The normalized sum of the three embeddings, the mask index (when used) and the sum."""
    if (segment_ids is None) != (segment is None):
        raise malformed(ctx, "segment_ids and segment_embedding must be given together")
    if _rank(ctx, input_ids, "input_ids") != 2:
        raise malformed(ctx, f"input_ids must be 2-D (batch, sequence), got rank {input_ids.ndim}")
    ids = ctx.expr(input_ids)
    total = call(ctx, "take", word, ids, axis=0, name="word")
    positions = ctx.expr(position_ids) if position_ids is not None else arange(ctx, input_ids.shape[1])
    total = call(ctx, "add", total, call(ctx, "take", position, positions, axis=0))
    if segment_ids is not None:
        total = call(ctx, "add", total, call(ctx, "take", segment, ctx.expr(segment_ids), axis=0))
    y = call(ctx, "nn.layer_norm", total, gamma, beta, axes=(2,), epsilon=float(epsilon), name="embed_ln")
    used = outputs_used(ctx, 3)
    mask_index = _mask_index(ctx, mask, input_ids) if used[1] else None
    return y, mask_index, total


def _mask_index(ctx, mask: Value | None, input_ids: Value) -> Expr:
    if mask is None:   # onnxruntime outputs zeros then
        return call(ctx, "broadcast_to", scalar(ctx, 0, "int32"), ShapeExpr((input_ids.shape[0],)), name="mask_index")
    ones = call(ctx, "equal", ctx.expr(mask), scalar(ctx, 1, mask.dtype))
    return call(ctx, "sum", call(ctx, "astype", ones, dtype="int32"), axis=(1,), name="mask_index")


# ================================================================ quantized


def _dequantized(ctx, x: Value, scale: Value, zero_point: Value | None) -> tuple[Expr, Expr]:
    """``(x - zero_point)`` in float32 and the float32 scale (per tensor)."""
    q._check_int8(ctx, x)
    for v, what in ((scale, "the scale"), (zero_point, "the zero point")):
        if v is not None and not q._single(ctx, v, what):
            raise ms_unsupported(ctx, f"{what} must be a scalar (per-tensor quantization)")
    shifted = astype(ctx, q._widen(ctx, x, zero_point, lambda zp: q._col_layout(ctx, zp, "zero point")),
                     "float32")
    return shifted, astype(ctx, q._col_layout(ctx, scale, "scale"), "float32")


def _qlinear_output(ctx, value: Expr, c_zero_point: Value | None, a: Value) -> Expr:
    """``clip(round(value + c_zero_point))`` in float32: onnxruntime adds the zero
    point before rounding (ties then round to even in the shifted value)."""
    target = q._check_target(ctx, c_zero_point.dtype if c_zero_point is not None else a.dtype)
    if target not in ("uint8", "int8"):
        raise ms_unsupported(ctx, f"output type {target} (uint8 and int8 only)")
    if not q._is_zero(c_zero_point):
        value = call(ctx, "add", value, astype(ctx, q._col_layout(ctx, c_zero_point, "C_zero_point"), "float32"))
    return q.saturate_int(ctx, call(ctx, "round", value), target)


@register_converter(MS, "QLinearAdd", since_opset=1)
def qlinear_add(ctx, a, a_scale, a_zero_point=None, b=None, b_scale=None, b_zero_point=None, c_scale=None,
                c_zero_point=None):
    """``quantize((a - a_zp) * a_scale / c_scale + (b - b_zp) * b_scale / c_scale)``
    in float32, as onnxruntime's kernel computes it (two scale ratios)."""
    a, b = aligned_for_broadcast(ctx, a, b)
    (ra, sa), (rb, sb) = _dequantized(ctx, a, a_scale, a_zero_point), _dequantized(ctx, b, b_scale, b_zero_point)
    sc = astype(ctx, ctx.expr(c_scale), "float32")
    ratio_a, ratio_b = call(ctx, "divide", sa, sc), call(ctx, "divide", sb, sc)
    value = call(ctx, "add", call(ctx, "multiply", ra, ratio_a), call(ctx, "multiply", rb, ratio_b))
    return _qlinear_output(ctx, value, c_zero_point, a)


@register_converter(MS, "QLinearMul", since_opset=1)
def qlinear_mul(ctx, a, a_scale, a_zero_point=None, b=None, b_scale=None, b_zero_point=None, c_scale=None,
                c_zero_point=None):
    """``quantize((a - a_zp) * (b - b_zp) * (a_scale * b_scale / c_scale))`` in
    float32, as onnxruntime's kernel computes it (one scale ratio)."""
    a, b = aligned_for_broadcast(ctx, a, b)
    (ra, sa), (rb, sb) = _dequantized(ctx, a, a_scale, a_zero_point), _dequantized(ctx, b, b_scale, b_zero_point)
    ratio = call(ctx, "divide", call(ctx, "multiply", sa, sb), astype(ctx, ctx.expr(c_scale), "float32"))
    value = call(ctx, "multiply", call(ctx, "multiply", ra, rb), ratio)
    return _qlinear_output(ctx, value, c_zero_point, a)


@register_converter(MS, "MatMulIntegerToFloat", since_opset=1)
def matmul_integer_to_float(ctx, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    """``((a - a_zp) @ (b - b_zp)) * (a_scale * b_scale) + bias``: an int32
    product scaled to float (b_scale and b_zero_point per tensor or per column)."""
    return integer_matmul_to_float(ctx, a, ctx.expr(a_scale), a_zero_point, b, b_scale, b_zero_point, bias,
                                   a_scale.dtype)


@register_converter(MS, "DynamicQuantizeMatMul", since_opset=1)
def dynamic_quantize_matmul(ctx, a, b, b_scale, b_zero_point=None, bias=None):
    """``a`` quantized to uint8 as DynamicQuantizeLinear does (scale and zero
    point from its range), then MatMulIntegerToFloat."""
    qa, a_scale, a_zp = q.dynamic_quantize_linear(ctx, a)
    return integer_matmul_to_float(ctx, ctx.emit(qa, "qa"), a_scale, ctx.emit(a_zp), b, b_scale, b_zero_point,
                                   bias, b_scale.dtype)


def integer_matmul_to_float(ctx, a: Value, a_scale: Expr, a_zero_point, b: Value, b_scale: Value,
                            b_zero_point, bias, dtype: str) -> Expr:
    """``((a - a_zp) @ (b - b_zp)) * (a_scale * b_scale) + bias`` in ``dtype``, the product exact
    in int32 (also QAttention's input projection)."""
    q._check_int8(ctx, a, b)
    lhs = q._widen(ctx, a, a_zero_point, lambda zp: q._row_layout(ctx, zp, a, "a_zero_point"))
    rhs = q._widen(ctx, b, b_zero_point, lambda zp: q._col_layout(ctx, zp, "b_zero_point"))
    product = astype(ctx, call(ctx, "matmul", lhs, rhs), dtype)
    scale = call(ctx, "multiply", astype(ctx, a_scale, dtype),
                 astype(ctx, q._col_layout(ctx, b_scale, "b_scale"), dtype))
    y = call(ctx, "multiply", product, scale)
    return y if bias is None else make_call("add", y, ctx.expr(bias))


# ================================================================ CDist


@register_converter(MS, "CDist", since_opset=1)
def cdist(ctx, a, b, *, metric="sqeuclidean"):
    """``(M, N)`` distances of A's ``(M, K)`` rows to B's ``(N, K)``, squared (``sqeuclidean``) or
    not, as onnxruntime computes them: one product and the rows' squared norms added in its
    order, then the absolute value (a residue below zero) and for ``euclidean`` its root."""
    metric = _activation_name(metric)
    if metric not in ("sqeuclidean", "euclidean"):
        raise ms_unsupported(ctx, f"metric {metric!r} (onnxruntime computes sqeuclidean and euclidean)")
    for value, what in ((a, "A"), (b, "B")):
        _float(ctx, value, what)
        if _rank(ctx, value, what) != 2:
            raise malformed(ctx, f"{what} must be a matrix, got rank {value.ndim}")
    dtype = a.dtype
    products = call(ctx, "matmul", ctx.expr(a), call(ctx, "permute_dims", ctx.expr(b), axes=(1, 0)))
    scaled = call(ctx, "multiply", products, scalar(ctx, -2.0, dtype))
    norms_a = call(ctx, "sum", call(ctx, "square", ctx.expr(a)), axis=(1,), keepdims=True)
    norms_b = call(ctx, "sum", call(ctx, "square", ctx.expr(b)), axis=(1,), keepdims=False)
    squared = call(ctx, "abs", call(ctx, "add", call(ctx, "add", scaled, norms_a), norms_b))
    return make_call("sqrt", squared) if metric == "euclidean" else squared


__all__ = ["MS", "ms_unsupported"]
