"""ONNX ops defined as compositions of other ops: Attention, RotaryEmbedding,
RMSNormalization, LpNormalization, GroupNormalization, Swish, SwiGLU, EyeLike.

No IR op stands for them: each converter emits the composition that ONNX's
spec (its function body) and onnx's reference implementation describe, step
by step, so every step rounds in the same dtype as the reference does. Where
the reference departs from the spec, the spec and onnxruntime win: Attention's
``qk_matmul_output_mode=0`` is the product before softcap, LpNormalization
with ``p=1`` sums ``|x|``. Symbolic dims stay symbolic: index ranges over a
sequence come from the ``range`` op, head splits reshape with ``-1``.

Attention(Q, K, V, is_causal=1) with 4-D inputs, for example, becomes::

    s = sqrt(scale)                                   # scale: 1/sqrt(head_size)
    scores = matmul(Q * s, permute_dims(K * s))
    allowed = range(q_len)[:, None] - range(kv_len) >= 0
    probs = softmax(scores + where(allowed, 0, -inf))  # all -inf rows give 0
    Y = matmul(probs, V)
"""

from __future__ import annotations

import numpy as np

from ....errors import ShapeError
from ....ir.dims import Dim
from ....ir.expr import Expr, ShapeExpr, Tuple, TupleGetItem
from ....ops.definitions.common import exact_div
from ....ops.definitions.index import HUGE
from ....ops.registry import make_call
from ....runtime.dtypes import numpy_dtype
from ..context import FOLD_LIMIT
from ..registry import register_converter
from ..tensors import onnx_dtype_name
from ._composite_common import (
    arange, dim_scalar, float_dtype_attr, masked_bias, outputs_used, promote, require_float, reshape,
)
from ._math_common import astype, call, rounded, scalar, unsupported, working
from ._shape_common import fmt_dims, norm_axis, shaped

_FLOAT = 1  # TensorProto.FLOAT, the default stash_type


def _shape(expr: Expr) -> tuple[Dim, ...]:
    return tuple(expr.struct_info.shape)


# ================================================================ Attention


class _Spec:
    """Attention's attributes, checked."""

    def __init__(self, ctx, is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale, softcap,
                 softmax_precision, left_window_size=-1, right_window_size=-1):
        if qk_matmul_output_mode not in (0, 1, 2, 3):
            raise unsupported(ctx, f"qk_matmul_output_mode={qk_matmul_output_mode} (0 to 3)")
        if left_window_size < -1 or right_window_size < -1:
            raise ShapeError(f"{ctx.node_label()}: window sizes must be -1 or nonnegative, got "
                             f"left {left_window_size}, right {right_window_size}")
        self.is_causal = bool(is_causal)
        self.q_heads, self.kv_heads = q_num_heads, kv_num_heads
        self.mode = int(qk_matmul_output_mode)
        self.scale = None if scale is None else float(scale)
        self.softcap = float(softcap)
        self.softmax_dtype = None if softmax_precision is None else \
            float_dtype_attr(ctx, softmax_precision, "softmax_precision")
        self.left, self.right = int(left_window_size), int(right_window_size)


@register_converter("", "Attention", since_opset=23)
def attention_v23(ctx, q, k, v, attn_mask=None, past_key=None, past_value=None, *, is_causal=0,
                  kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
                  softmax_precision=None):
    """Scaled dot-product attention (multi-head, grouped-query, with a KV cache)."""
    spec = _Spec(ctx, is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale, softcap,
                 softmax_precision)
    return _attention(ctx, q, k, v, attn_mask, past_key, past_value, None, spec)


@register_converter("", "Attention", since_opset=24)
def attention_v24(ctx, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
                  is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
                  softcap=0.0, softmax_precision=None):
    """Opset 24: ``nonpad_kv_seqlen`` (an external KV cache: per-batch valid
    key counts, and the causal frontier aligned to them)."""
    spec = _Spec(ctx, is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale, softcap,
                 softmax_precision)
    return _attention(ctx, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, spec)


@register_converter("", "Attention", since_opset=25)
def attention_v25(ctx, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
                  is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
                  softcap=0.0, softmax_precision=None, left_window_size=-1, right_window_size=-1):
    """Opset 25: sliding windows (``left_window_size``, ``right_window_size``)."""
    if q.ndim == 4 and (q_num_heads is not None or kv_num_heads is not None):
        raise ShapeError(f"{ctx.node_label()}: q_num_heads and kv_num_heads must not be given for 4-D inputs")
    spec = _Spec(ctx, is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale, softcap,
                 softmax_precision, left_window_size, right_window_size)
    return _attention(ctx, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, spec)


def _attention(ctx, q, k, v, mask, past_k, past_v, nonpad, spec: _Spec):
    dtype = require_float(ctx, q, "Q")
    ranks = {x.ndim for x in (q, k, v)}
    if min(ranks) < 0:
        raise unsupported(ctx, "the ranks of Q, K and V must be known")
    if len(ranks) != 1 or ranks.pop() not in (3, 4):
        raise ShapeError(f"{ctx.node_label()}: Q, K and V must all be 3-D or all 4-D, got ranks "
                         f"{q.ndim}, {k.ndim}, {v.ndim}")
    if (past_k is None) != (past_v is None):
        raise ShapeError(f"{ctx.node_label()}: past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise ShapeError(f"{ctx.node_label()}: nonpad_kv_seqlen cannot be combined with past_key/past_value")
    three_d = q.ndim == 3
    if three_d:
        if not spec.q_heads or not spec.kv_heads:
            raise ShapeError(f"{ctx.node_label()}: 3-D Q, K, V need the q_num_heads and kv_num_heads attributes")
        query, key, value = (split_heads(ctx, x, h) for x, h in
                             ((q, spec.q_heads), (k, spec.kv_heads), (v, spec.kv_heads)))
    else:
        query, key, value = (ctx.expr(shaped(ctx, x)) for x in (q, k, v))
    if past_k is not None:
        key = call(ctx, "concat", Tuple([ctx.expr(past_k), key]), axis=2, name="present_key")
        value = call(ctx, "concat", Tuple([ctx.expr(past_v), value]), axis=2, name="present_value")
    batch, q_heads, q_len, head_size = _shape(query)
    kv_heads, total = _shape(key)[1], _shape(key)[2]
    past = shaped(ctx, past_k).shape[2] if past_k is not None else 0
    reps = _group_size(ctx, q_heads, kv_heads)

    # scores: (Q * sqrt(scale)) @ (K * sqrt(scale))^T, softcapped
    root = _sqrt_scale(ctx, spec.scale, head_size, dtype)
    scaled_k = call(ctx, "multiply", key, root)
    raw = grouped_matmul(ctx, call(ctx, "multiply", query, root),
                          call(ctx, "permute_dims", scaled_k, axes=(0, 1, 3, 2)), reps)
    capped = raw
    if spec.softcap > 0:
        cap = scalar(ctx, spec.softcap, dtype)
        capped = call(ctx, "multiply", call(ctx, "tanh", call(ctx, "divide", raw, cap)), cap)

    bias = _bias(ctx, mask, nonpad, spec, dtype, q_len, total, past)
    scores = capped
    if bias is not None:
        both = promote(dtype, bias.struct_info.dtype)
        scores = call(ctx, "add", astype(ctx, capped, both), astype(ctx, bias, both), name="scores")
    probs = _softmax(ctx, astype(ctx, scores, spec.softmax_dtype) if spec.softmax_dtype else scores)
    if bias is not None:
        # a query row whose bias disallows every key is zero (decided on the
        # bias, so NaN logits in such a row do not leak)
        peak = call(ctx, "max", bias, axis=-1, keepdims=True)
        empty = call(ctx, "equal", peak, scalar(ctx, -np.inf, bias.struct_info.dtype))
        probs = call(ctx, "where", empty, scalar(ctx, 0, probs.struct_info.dtype), probs, name="probs")

    pv_dtype = promote(dtype, value.struct_info.dtype)
    y = grouped_matmul(ctx, astype(ctx, astype(ctx, probs, dtype), pv_dtype), astype(ctx, value, pv_dtype), reps)
    y = astype(ctx, y, dtype)
    if three_d:
        y = call(ctx, "permute_dims", y, axes=(0, 2, 1, 3))
        y = reshape(ctx, y, (batch, q_len, q_heads * _shape(value)[3]))
    used = outputs_used(ctx, 4)
    qk_out = None
    if used[3]:
        qk_out = astype(ctx, (raw, capped, scores, probs)[spec.mode], dtype)
    return y, key if used[1] else None, value if used[2] else None, qk_out


def split_heads(ctx, x, heads: int) -> Expr:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, seq, _ = shaped(ctx, x).shape
    split = reshape(ctx, ctx.expr(x), (batch, seq, heads, -1))
    return call(ctx, "permute_dims", split, axes=(0, 2, 1, 3))


def _group_size(ctx, q_heads: Dim, kv_heads: Dim) -> Dim:
    """How many query heads share one key/value head (grouped-query attention)."""
    analyzer = ctx.bb.analyzer
    if q_heads == kv_heads or analyzer.prove_equal(q_heads, kv_heads):
        return 1
    if isinstance(q_heads, int) and isinstance(kv_heads, int):
        if kv_heads == 0 or q_heads % kv_heads:
            raise ShapeError(f"{ctx.node_label()}: {q_heads} query heads are not a multiple of "
                             f"{kv_heads} key/value heads")
        return q_heads // kv_heads
    reps = exact_div(q_heads, kv_heads, analyzer)
    if reps is None:
        raise unsupported(ctx, f"cannot tell how {fmt_dims((q_heads,))} query heads group over "
                               f"{fmt_dims((kv_heads,))} key/value heads at import time")
    return reps


def grouped_matmul(ctx, a: Expr, b: Expr, reps: Dim) -> Expr:
    """``a @ b`` where each head of ``b`` serves ``reps`` consecutive heads of
    ``a``: ``a`` is viewed as (batch, b_heads, reps, ...) and ``b`` broadcast
    over ``reps``, so K and V are never repeated in memory."""
    if reps == 1:
        return call(ctx, "matmul", a, b)
    batch, heads, rows, inner = _shape(a)
    grouped = reshape(ctx, a, (batch, _shape(b)[1], reps, rows, inner))
    product = call(ctx, "matmul", grouped, call(ctx, "expand_dims", b, axis=(2,)))
    return reshape(ctx, product, (batch, heads, rows, _shape(product)[-1]))


def _sqrt_scale(ctx, scale: float | None, head_size: Dim, dtype: str) -> Expr:
    """``sqrt(scale)`` (default ``scale = 1/sqrt(head_size)``), computed in
    float64 and rounded to ``dtype`` as the reference does."""
    if scale is not None:
        return scalar(ctx, np.sqrt(scale), dtype)
    if isinstance(head_size, int):
        return scalar(ctx, np.sqrt(1 / np.sqrt(head_size)), dtype) if head_size else scalar(ctx, 1, dtype)
    size = astype(ctx, dim_scalar(ctx, head_size), "float64")
    return astype(ctx, call(ctx, "power", size, scalar(ctx, -0.25, "float64")), dtype)


def _bias(ctx, mask, nonpad, spec: _Spec, dtype: str, q_len: Dim, total: Dim, past: Dim):
    """The additive (q_len, total)-broadcastable bias: the float mask plus
    ``where(allowed, 0, -inf)`` for the boolean mask, the causal frontier,
    the sliding window and the padding of an external cache. None if nothing
    is masked."""
    allowed, additive, bias_dtype = [], None, dtype
    if mask is not None:
        padded = _padded_mask(ctx, shaped(ctx, mask, "attn_mask"), total)
        if mask.dtype == "bool":
            allowed.append(padded)
        else:
            if mask.dtype is not None and mask.dtype.startswith(("float", "bfloat")):
                bias_dtype = promote(dtype, mask.dtype)
            additive = astype(ctx, padded, bias_dtype)
    keys = None
    if spec.is_causal or spec.left >= 0 or spec.right >= 0:
        # rel[i, j] = i + offset - j: query i (at absolute position i + offset) vs key j
        keys = arange(ctx, total)
        rows = call(ctx, "expand_dims", arange(ctx, q_len), axis=(1,))
        rel = call(ctx, "subtract", rows, keys, name="rel")
        if nonpad is not None:
            offset = call(ctx, "subtract", ctx.expr(nonpad), dim_scalar(ctx, q_len))
            rel = call(ctx, "add", rel, reshape(ctx, offset, (-1, 1, 1, 1)), name="rel")
        elif not (isinstance(past, int) and past == 0):
            rel = call(ctx, "add", rel, dim_scalar(ctx, past), name="rel")
        if spec.is_causal:
            allowed.append(call(ctx, "greater_equal", rel, scalar(ctx, 0, "int64")))
        if spec.left >= 0:
            allowed.append(call(ctx, "less_equal", rel, scalar(ctx, spec.left, "int64")))
        if spec.right >= 0:
            allowed.append(call(ctx, "greater_equal", rel, scalar(ctx, -spec.right, "int64")))
    if nonpad is not None:
        keys = arange(ctx, total) if keys is None else keys
        valid = reshape(ctx, astype(ctx, nonpad, "int64"), (-1, 1, 1, 1))
        allowed.append(call(ctx, "less", keys, valid, name="valid"))
    bias = None
    if allowed:
        both = allowed[0]
        for more in allowed[1:]:
            both = call(ctx, "logical_and", both, more, name="allowed")
        bias = masked_bias(ctx, both, bias_dtype)
    if additive is not None:
        bias = additive if bias is None else call(ctx, "add", additive, bias, name="bias")
    return bias


def _padded_mask(ctx, mask, total: Dim) -> Expr:
    """The mask with its last dim extended to ``total`` keys: the extra keys
    are masked out (False, or -inf for a float mask)."""
    expr = ctx.expr(mask)
    if mask.ndim == 0:
        return expr
    missing = ctx.bb.analyzer.simplify(total - mask.shape[-1])
    if isinstance(missing, int) and missing <= 0:
        if missing < 0:
            raise ShapeError(f"{ctx.node_label()}: attn_mask {fmt_dims(mask.shape)} has more keys than "
                             f"the {total} of K")
        return expr
    fill = False if mask.dtype == "bool" else (-np.inf if mask.dtype.startswith(("float", "bfloat")) else 0)
    filler = call(ctx, "broadcast_to", scalar(ctx, fill, mask.dtype),
                  ShapeExpr((*mask.shape[:-1], missing)))
    return call(ctx, "concat", Tuple([expr, filler]), axis=-1, name="mask")


def _softmax(ctx, x: Expr) -> Expr:
    """Softmax over the last axis, the reference's way: an all ``-inf`` row
    gives zeros instead of NaN, and each step rounds in ``x``'s dtype."""
    dtype = x.struct_info.dtype
    zero = scalar(ctx, 0, dtype)
    peak = call(ctx, "max", x, axis=-1, keepdims=True)
    peak = call(ctx, "where", call(ctx, "equal", peak, scalar(ctx, -np.inf, dtype)), zero, peak)
    exps = call(ctx, "exp", call(ctx, "subtract", x, peak))
    total = call(ctx, "sum", exps, axis=-1, keepdims=True)
    total = call(ctx, "where", call(ctx, "equal", total, zero), scalar(ctx, 1, dtype), total)
    return call(ctx, "divide", exps, total, name="probs")


# ================================================================ RotaryEmbedding


@register_converter("", "RotaryEmbedding", since_opset=23)
def rotary_embedding(ctx, x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0):
    """Rotate the first ``rotary_embedding_dim`` features of each head by the
    cached angles: halves (or even/odd pairs with ``interleaved``) as the
    real and imaginary parts. 4-D input is (batch, heads, seq, size), 3-D
    (batch, seq, heads * size) with ``num_heads``."""
    require_float(ctx, x, "X")
    x = shaped(ctx, x, "X")
    if x.ndim == 4:
        data, head_axis = ctx.expr(x), 1
    elif x.ndim == 3:
        if not num_heads:
            raise ShapeError(f"{ctx.node_label()}: a 3-D input needs the num_heads attribute")
        data = reshape(ctx, ctx.expr(x), (*x.shape[:2], num_heads, -1))
        head_axis = 2
    else:
        raise ShapeError(f"{ctx.node_label()}: X must be 3-D or 4-D, got shape {fmt_dims(x.shape)}")
    size = _shape(data)[-1]
    rot = int(rotary_embedding_dim) or size
    if isinstance(rot, int) and rot % 2:
        raise ShapeError(f"{ctx.node_label()}: rotary_embedding_dim {rot} must be even")
    rotate, keep = data, None
    if rotary_embedding_dim and not (isinstance(size, int) and rot == size):
        rotate = _slice_last(ctx, data, 0, rot)
        keep = _slice_last(ctx, data, rot, HUGE)

    def angles(cache):
        table = ctx.expr(cache)
        if position_ids is not None:
            table = call(ctx, "take", table, ctx.expr(position_ids), axis=0)
        return astype(ctx, call(ctx, "expand_dims", table, axis=(head_axis,)), x.dtype)

    cos, sin = angles(cos_cache), angles(sin_cache)
    if interleaved:
        x1, x2 = _slice_last(ctx, rotate, 0, HUGE, 2), _slice_last(ctx, rotate, 1, HUGE, 2)
    else:
        halves = ctx.emit(make_call("split", rotate, indices_or_sections=2, axis=-1), "halves")
        x1, x2 = (ctx.expr(ctx.emit(TupleGetItem(ctx.expr(halves), i), "half")) for i in (0, 1))
    real = call(ctx, "subtract", call(ctx, "multiply", cos, x1), call(ctx, "multiply", sin, x2))
    imag = call(ctx, "add", call(ctx, "multiply", sin, x1), call(ctx, "multiply", cos, x2))
    if interleaved:
        pairs = call(ctx, "concat", Tuple([call(ctx, "expand_dims", part, axis=(-1,)) for part in (real, imag)]),
                     axis=-1)
        rotated = reshape(ctx, pairs, _shape(rotate))
    else:
        rotated = call(ctx, "concat", Tuple([real, imag]), axis=-1)
    out = rotated if keep is None else call(ctx, "concat", Tuple([rotated, keep]), axis=-1)
    return out if x.ndim == 4 else make_call("reshape", out, ShapeExpr(tuple(x.shape)))


def _slice_last(ctx, expr: Expr, begin: int, end: int, step: int = 1) -> Expr:
    return call(ctx, "strided_slice", expr, axes=(-1,), begin=(begin,), end=(end,), strides=(step,))


# ================================================================ normalizations


@register_converter("", "RMSNormalization", since_opset=23)
def rms_normalization(ctx, x, scale, *, axis=-1, epsilon=1e-5, stash_type=_FLOAT):
    """``x / sqrt(mean(x**2) + epsilon)`` over the dims from ``axis`` on (in
    ``stash_type``), back in x's dtype, times ``scale`` (whose dtype Y has)."""
    require_float(ctx, x, "X")
    ndim = shaped(ctx, x, "X").ndim
    axes = tuple(range(norm_axis(ctx, axis, ndim), ndim))
    stash = float_dtype_attr(ctx, stash_type, "stash_type")
    data = astype(ctx, x, stash)
    mean_sq = call(ctx, "mean", call(ctx, "multiply", data, data), axis=axes, keepdims=True)
    rms = call(ctx, "sqrt", call(ctx, "add", mean_sq, scalar(ctx, epsilon, stash)))
    normalized = astype(ctx, astype(ctx, call(ctx, "divide", data, rms), x.dtype), scale.dtype)
    return make_call("multiply", normalized, ctx.expr(scale))


@register_converter("", "LpNormalization", since_opset=1)
def lp_normalization(ctx, x, *, axis=-1, p=2):
    """``x / ||x||_p`` along ``axis`` (p 1 or 2); 0 where the norm is 0."""
    require_float(ctx, x)
    if p not in (1, 2):
        raise unsupported(ctx, f"p={p} (only 1 and 2 are defined)")
    ax = norm_axis(ctx, axis, shaped(ctx, x).ndim)
    data = working(ctx, x)   # float32 for float16: the squares overflow where the result does not
    dtype = data.struct_info.dtype
    magnitude = call(ctx, "square" if p == 2 else "abs", data)
    norm = call(ctx, "sum", magnitude, axis=(ax,), keepdims=True)
    if p == 2:
        norm = call(ctx, "sqrt", norm)
    # a zero norm means a zero slice: dividing it by 1 gives the 0 the spec asks for
    safe = call(ctx, "where", call(ctx, "equal", norm, scalar(ctx, 0, dtype)), scalar(ctx, 1, dtype), norm)
    return rounded(ctx, make_call("divide", data, safe), x.dtype)


def _group_norm(ctx, x, scale, bias, num_groups, epsilon, stash: str, per_channel: bool):
    require_float(ctx, x, "X")
    x = shaped(ctx, x, "X")
    if x.ndim < 2:
        raise ShapeError(f"{ctx.node_label()}: X must be (N, C, ...), got shape {fmt_dims(x.shape)}")
    groups = int(num_groups)
    channels = x.shape[1]
    if groups <= 0 or (isinstance(channels, int) and channels % groups):
        raise ShapeError(f"{ctx.node_label()}: {channels} channels do not split into num_groups={groups}")
    grouped = reshape(ctx, astype(ctx, x, stash), (x.shape[0], groups, -1))
    if per_channel:
        # the function body scales in X's type; a float16/bfloat16 X with a float32 stash scales in
        # float32 and rounds once, as onnxruntime does (the float16 contract: one rounding per op)
        work = stash if x.dtype in ("float16", "bfloat16") and stash == "float32" else x.dtype
        ones, zeros = (ctx.expr(ctx.const(np.full(groups, v, numpy_dtype(stash)))) for v in (1, 0))
        normalized = call(ctx, "nn.instance_norm", grouped, ones, zeros, epsilon=float(epsilon))
        normalized = astype(ctx, reshape(ctx, normalized, x.shape), work)
        laid_out = (-1,) + (1,) * (x.ndim - 2)
        scaled = call(ctx, "multiply", normalized, reshape(ctx, astype(ctx, scale, work), laid_out))
        shifted = make_call("add", scaled, reshape(ctx, astype(ctx, bias, work), laid_out))
        return shifted if work == x.dtype else rounded(ctx, shifted, x.dtype)
    normalized = call(ctx, "nn.instance_norm", grouped, astype(ctx, scale, stash), astype(ctx, bias, stash),
                      epsilon=float(epsilon))
    return make_call("astype", reshape(ctx, normalized, x.shape), dtype=x.dtype)


@register_converter("", "GroupNormalization", since_opset=18)
def group_normalization_v18(ctx, x, scale, bias, *, num_groups, epsilon=1e-5):
    """Opset 18: ``scale`` and ``bias`` hold one value per group."""
    return _group_norm(ctx, x, scale, bias, num_groups, epsilon, x.dtype, per_channel=False)


@register_converter("", "GroupNormalization", since_opset=21)
def group_normalization(ctx, x, scale, bias, *, num_groups, epsilon=1e-5, stash_type=_FLOAT):
    """Normalize each group of channels (statistics in ``stash_type``), then
    scale and shift per channel."""
    stash = float_dtype_attr(ctx, stash_type, "stash_type")
    return _group_norm(ctx, x, scale, bias, num_groups, epsilon, stash, per_channel=True)


# ================================================================ activations, EyeLike


def _swish(ctx, x, alpha: float) -> Expr:
    if alpha == 1.0:
        return call(ctx, "nn.silu", ctx.expr(x))
    gate = call(ctx, "sigmoid", call(ctx, "multiply", ctx.expr(x), scalar(ctx, alpha, x.dtype)))
    return call(ctx, "multiply", ctx.expr(x), gate)


@register_converter("", "Swish", since_opset=24)
def swish(ctx, x, *, alpha=1.0):
    """``x * sigmoid(alpha * x)``."""
    require_float(ctx, x)
    return _swish(ctx, x, float(alpha))


@register_converter("", "SwiGLU", since_opset=28)
def swiglu(ctx, a, b, *, alpha=1.0):
    """``swish_alpha(A) * B`` (equal shapes, no broadcasting)."""
    require_float(ctx, a, "A")
    if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
        analyzer = ctx.bb.analyzer
        if any(isinstance(d, int) and isinstance(e, int) and d != e or analyzer.prove_lt(d, e)
               or analyzer.prove_gt(d, e) for d, e in zip(a.shape, b.shape)):
            raise ShapeError(f"{ctx.node_label()}: A {fmt_dims(a.shape)} and B {fmt_dims(b.shape)} differ")
    elif a.ndim >= 0 and b.ndim >= 0 and a.ndim != b.ndim:
        raise ShapeError(f"{ctx.node_label()}: A and B have ranks {a.ndim} and {b.ndim}")
    return make_call("multiply", _swish(ctx, a, float(alpha)), ctx.expr(b))


@register_converter("", "EyeLike", since_opset=9)
def eye_like(ctx, x, *, dtype=None, k=0):
    """Ones on diagonal ``k`` of a matrix shaped like the 2-D input: a
    constant for a small static shape (at most the import's fold limit, as
    ConstantOfShape), else ``range(rows)[:, None] + k == range(cols)`` at run
    time (a 20000 x 20000 identity is not 1.6 GB of archive)."""
    x = shaped(ctx, x)
    if x.ndim != 2:
        raise ShapeError(f"{ctx.node_label()}: the input must be 2-D, got shape {fmt_dims(x.shape)}")
    out = x.dtype if dtype is None else onnx_dtype_name(int(dtype), f"{ctx.node_label()}'s dtype")
    rows, cols = x.shape
    if isinstance(rows, int) and isinstance(cols, int) and rows * cols <= FOLD_LIMIT:
        return ctx.const(np.eye(rows, cols, int(k), dtype=numpy_dtype(out)))
    row = call(ctx, "add", call(ctx, "expand_dims", arange(ctx, rows), axis=(1,)), scalar(ctx, int(k), "int64"))
    return make_call("astype", call(ctx, "equal", row, arange(ctx, cols)), dtype=out)
