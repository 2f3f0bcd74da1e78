"""com.microsoft Attention, QAttention and MultiHeadAttention as compositions of IR ops.

Attention is what onnxruntime's transformer optimizer fuses a BERT-style
self-attention into: one input projection to Q, K and V, heads, scaled dot
products, an optional padding mask, a softmax and the heads merged again::

    qkv = x @ weights + bias;  q, k, v = split(qkv)            # (B, S, N*h) each
    q, k, v = permute_dims(reshape(., (B, S, N, h)), (0, 2, 1, 3))
    scores = (q @ k^T) * scale + where(allowed, 0, mask_filter_value)
    out = reshape(permute_dims(softmax(scores) @ v, (0, 2, 1, 3)), (B, S, N*h))

QAttention (onnxruntime's dynamic quantization of a fused Attention) is
Attention with the projection an exact integer product scaled to float, as
MatMulIntegerToFloat. MultiHeadAttention takes Q, K and V already projected
(3-D, optionally with their bias) and a key padding mask. All take ``past``
keys and values (concatenated before the new ones; the ``present``
outputs), causal masking (``unidirectional``) and, but QAttention, an
additive ``attention_bias``. Masks: a 1-D
``mask_index`` of each row's length (keys at or after it are masked), or a
raw 0/1 mask of shape (B, T) or (B, S, T). Forms onnxruntime documents
beyond these (packed QKV, rotary embeddings, shared past buffers, 4-D
Megatron masks) are unsupported by name. RotaryEmbedding (the transformer
optimizer's, inputs in onnxruntime's order) is ONNX's opset-23 op of
``composite.py`` with its position ids read as onnxruntime reads them.
"""

from __future__ import annotations

import math

from ....ir.dims import Dim
from ....ir.expr import Expr, ShapeExpr, Tuple, TupleGetItem
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._composite_common import arange, outputs_used
from ._math_common import astype, call, malformed, scalar
from ._shape_common import shaped
from .composite import rotary_embedding
from .microsoft import MS, integer_matmul_to_float, ms_unsupported

_DEFAULT_MASK_FILTER = -10000.0


def _shape(expr: Expr) -> tuple[Dim, ...]:
    return tuple(expr.struct_info.shape)


@register_converter(MS, "Attention", since_opset=1)
def attention(ctx, x, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None, *, num_heads, qkv_hidden_sizes=None, scale=0.0, unidirectional=0,
              mask_filter_value=_DEFAULT_MASK_FILTER, do_rotary=0, past_present_share_buffer=0,
              rotary_embedding_dim=0):
    """Self-attention with the input projection fused in (see the module docstring)."""
    _check_self_attention(ctx, x, weights, do_rotary or past_present_share_buffer or past_sequence_length is not None)
    qkv = call(ctx, "matmul", ctx.expr(x), ctx.expr(weights), name="qkv")
    if bias is not None:
        qkv = call(ctx, "add", qkv, ctx.expr(bias), name="qkv")
    return _self_attention(ctx, qkv, _qkv_sizes(ctx, weights, qkv_hidden_sizes), num_heads, mask_index, past,
                           attention_bias, scale, unidirectional, mask_filter_value)


@register_converter(MS, "QAttention", since_opset=1)
def q_attention(ctx, x, weights, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
                weight_zero_point=None, past=None, *, num_heads, scale=0.0, unidirectional=0,
                mask_filter_value=_DEFAULT_MASK_FILTER, do_rotary=0, past_present_share_buffer=0):
    """Attention whose input projection is quantized (onnxruntime's dynamic quantization of
    a fused Attention): ``(x - x_zp) @ (w - w_zp)`` exact in int32, scaled by ``input_scale *
    weight_scale`` (per tensor or per column) plus the bias, then attention in float."""
    _check_self_attention(ctx, x, weights, do_rotary or past_present_share_buffer)
    qkv = integer_matmul_to_float(ctx, x, ctx.expr(input_scale), input_zero_point, weights, weight_scale,
                                  weight_zero_point, bias, input_scale.dtype)
    return _self_attention(ctx, qkv, _qkv_sizes(ctx, weights, None), num_heads, mask_index, past, None, scale,
                           unidirectional, mask_filter_value)


def _check_self_attention(ctx, x: Value, weights: Value, unsupported_form) -> None:
    if unsupported_form:
        raise ms_unsupported(ctx, "rotary embeddings and shared past/present buffers")
    if x.ndim != 3 or weights.ndim != 2 or weights.shape is None:
        raise malformed(ctx, "input must be 3-D (batch, sequence, hidden) and weights 2-D with a known shape")


def _self_attention(ctx, qkv: Expr, sizes: tuple[int, int, int], num_heads: int, mask_index: Value | None,
                    past: Value | None, attention_bias: Value | None, scale: float, unidirectional: int,
                    mask_filter_value: float):
    """Attention and the ``present`` keys and values from the projected ``qkv`` (B, S, Q+K+V)."""
    parts = ctx.emit(make_call("split", qkv, indices_or_sections=(sizes[0], sizes[0] + sizes[1]), axis=2), "qkv")
    q, k, v = (_heads(ctx, ctx.expr(ctx.emit(TupleGetItem(ctx.expr(parts), i), n)), num_heads, s)
               for i, (n, s) in enumerate(zip("qkv", sizes)))
    past_k = past_v = None
    if past is not None:
        past_k, past_v = (call(ctx, "take", ctx.expr(past), scalar(ctx, i, "int64"), axis=0) for i in (0, 1))
    out, k, v = _attend(ctx, q, k, v, past_k, past_v, mask_index, attention_bias, scale, unidirectional,
                        mask_filter_value)
    present = None
    if outputs_used(ctx, 2)[1]:
        present = make_call("concat", Tuple([call(ctx, "expand_dims", t, axis=(0,)) for t in (k, v)]), axis=0)
    return out, present


@register_converter(MS, "MultiHeadAttention", since_opset=1)
def multi_head_attention(ctx, query, key=None, value=None, bias=None, key_padding_mask=None,
                         attention_bias=None, past_key=None, past_value=None, past_sequence_length=None,
                         cache_indirection=None, *, num_heads, scale=0.0, unidirectional=0,
                         mask_filter_value=_DEFAULT_MASK_FILTER):
    """Attention over projected Q, K, V (3-D, with an optional bias of Q|K|V)."""
    if key is None or value is None or query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
        raise ms_unsupported(ctx, "packed QKV/KV or 4-D keys (only 3-D query, key and value)")
    if past_sequence_length is not None or cache_indirection is not None:
        raise ms_unsupported(ctx, "past_sequence_length and cache_indirection (beam search)")
    if (past_key is None) != (past_value is None):
        raise malformed(ctx, "past_key and past_value must be given together")
    exprs = [ctx.expr(t) for t in (query, key, value)]
    widths = [t.shape[2] for t in (query, key, value)]
    if bias is not None:
        if not all(isinstance(w, int) for w in widths):
            raise ms_unsupported(ctx, "a bias needs the hidden sizes of query, key and value")
        pieces = ctx.emit(make_call("split", ctx.expr(bias), indices_or_sections=(widths[0], widths[0] + widths[1]),
                                    axis=0), "bias")
        exprs = [call(ctx, "add", e, ctx.expr(ctx.emit(TupleGetItem(ctx.expr(pieces), i), "bias")))
                 for i, e in enumerate(exprs)]
    q, k, v = (_heads(ctx, e, num_heads, w) for e, w in zip(exprs, widths))
    past_k, past_v = (None, None) if past_key is None else (ctx.expr(past_key), ctx.expr(past_value))
    out, k, v = _attend(ctx, q, k, v, past_k, past_v, key_padding_mask, attention_bias, scale, unidirectional,
                        mask_filter_value)
    used = outputs_used(ctx, 4)
    if used[3]:
        raise ms_unsupported(ctx, "the qk output")
    return out, (k if used[1] else None), (v if used[2] else None)


# ---------------------------------------------------------------- shared


def _qkv_sizes(ctx, weights: Value, qkv_hidden_sizes) -> tuple[int, int, int]:
    if qkv_hidden_sizes:
        sizes = tuple(int(s) for s in qkv_hidden_sizes)
        if len(sizes) != 3 or sum(sizes) != weights.shape[1]:
            raise malformed(ctx, f"qkv_hidden_sizes {list(sizes)} must be three sizes adding up to the "
                                 f"weights' {weights.shape[1]} columns")
        return sizes
    width = weights.shape[1]
    if not isinstance(width, int) or width % 3:
        raise malformed(ctx, f"the weights' {width} columns do not split into Q, K and V")
    return (width // 3,) * 3


def _heads(ctx, x: Expr, num_heads: int, width) -> Expr:
    """(B, S, N*h) -> (B, N, S, h)."""
    if not isinstance(width, int) or width % num_heads:
        raise malformed(ctx, f"hidden size {width} is not a multiple of num_heads {num_heads}")
    batch, seq = _shape(x)[:2]
    split = call(ctx, "reshape", x, ShapeExpr((batch, seq, num_heads, width // num_heads)))
    return call(ctx, "permute_dims", split, axes=(0, 2, 1, 3))


def _attend(ctx, q: Expr, k: Expr, v: Expr, past_k, past_v, mask: Value | None, attention_bias: Value | None,
            scale: float, unidirectional: int, mask_filter_value: float) -> tuple[Expr, Expr, Expr]:
    """softmax(q @ k^T * scale + masks) @ v, heads merged; also the keys and
    values including the past (the present)."""
    dtype = q.struct_info.dtype
    if past_k is not None:
        k = call(ctx, "concat", Tuple([past_k, k]), axis=2, name="present_key")
        v = call(ctx, "concat", Tuple([past_v, v]), axis=2, name="present_value")
    batch, heads, seq, head_size = _shape(q)
    total = _shape(k)[2]
    factor = scale if scale else 1.0 / math.sqrt(head_size)
    scores = call(ctx, "multiply", call(ctx, "matmul", q, call(ctx, "permute_dims", k, axes=(0, 1, 3, 2))),
                  scalar(ctx, factor, dtype), name="scores")
    # float16 scores are masked and softmaxed in float32, as onnxruntime does: its mask value
    # (optimum keeps float32's lowest, -3.4e38) is -inf in float16, and a row whose keys are all
    # masked softmaxes to NaN there, where onnxruntime's weighs every key alike
    wide = "float32" if dtype == "float16" else dtype
    scores = astype(ctx, scores, wide)
    allowed = _allowed(ctx, mask, batch, seq, total, unidirectional)
    if allowed is not None:
        scores = call(ctx, "add", scores, call(ctx, "where", allowed, scalar(ctx, 0.0, wide),
                                               scalar(ctx, mask_filter_value, wide)), name="scores")
    if attention_bias is not None:
        scores = call(ctx, "add", scores, astype(ctx, attention_bias, wide), name="scores")
    probs = astype(ctx, call(ctx, "nn.softmax", scores, axis=-1, name="probs"), dtype)
    context = call(ctx, "permute_dims", call(ctx, "matmul", probs, v), axes=(0, 2, 1, 3))
    out = make_call("reshape", context, ShapeExpr((batch, seq, heads * _shape(v)[3])))
    return out, k, v


def _allowed(ctx, mask: Value | None, batch: Dim, seq: Dim, total: Dim, unidirectional: int) -> Expr | None:
    """A boolean (B or 1, 1, S or 1, T) of the keys each query may see, or None for all."""
    allowed = None
    if mask is not None:
        allowed = _padding(ctx, mask, batch, total)
    if unidirectional:
        # query i (after the past's total - seq keys) sees the keys up to its own position
        rows = call(ctx, "add", call(ctx, "expand_dims", arange(ctx, seq), axis=(1,)),
                    _dim_value(ctx, total - seq))
        causal = call(ctx, "less_equal", arange(ctx, total), rows, name="causal")
        allowed = causal if allowed is None else call(ctx, "logical_and", allowed, causal)
    return allowed


def _padding(ctx, mask: Value, batch: Dim, total: Dim) -> Expr:
    expr = ctx.expr(mask)
    if mask.ndim == 1:
        if mask.shape[0] != batch:
            raise ms_unsupported(ctx, f"a 1-D mask of {mask.shape[0]} entries for batch {batch} (only one end "
                                      f"position per row; start positions are not supported)")
        ends = call(ctx, "expand_dims", astype(ctx, expr, "int64"), axis=(1, 2, 3))
        return call(ctx, "less", arange(ctx, total), ends, name="allowed")
    if mask.ndim == 2:
        return call(ctx, "expand_dims", _nonzero(ctx, expr, mask), axis=(1, 2))
    if mask.ndim == 3:
        return call(ctx, "expand_dims", _nonzero(ctx, expr, mask), axis=(1,))
    raise ms_unsupported(ctx, f"a mask of rank {mask.ndim} (1-D lengths, 2-D or 3-D 0/1 masks)")


def _nonzero(ctx, expr: Expr, mask: Value) -> Expr:
    return call(ctx, "greater", expr, scalar(ctx, 0, mask.dtype), name="allowed")


def _dim_value(ctx, dim: Dim) -> Expr:
    if isinstance(dim, int):
        return scalar(ctx, dim, "int64")
    return call(ctx, "shape_to_tensor", ShapeExpr((dim,)), scalar=True)


# ================================================================ RotaryEmbedding


@register_converter(MS, "RotaryEmbedding", since_opset=1)
def ms_rotary_embedding(ctx, x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                        rotary_embedding_dim=0, scale=1.0, is_packed_batching=0):
    """ONNX's RotaryEmbedding (opset 23, ``composite.py``) with its inputs in onnxruntime's order,
    as its transformer optimizer writes it (optimum's -O4 Llama). ``position_ids`` of one element
    is the first position, the others following it; a 3-D input without ``num_heads`` has heads
    of twice the cache's width. ``scale`` is not used by onnxruntime's CPU kernel."""
    if is_packed_batching:
        raise ms_unsupported(ctx, "is_packed_batching=1")
    x, position_ids = shaped(ctx, x, "input"), shaped(ctx, position_ids, "position_ids")
    if rotary_embedding_dim and not num_heads:
        raise malformed(ctx, "rotary_embedding_dim needs num_heads")
    if x.ndim == 3 and not num_heads:
        hidden, width = x.shape[-1], cos_cache.shape[-1] if cos_cache.ndim == 2 else None
        if not (isinstance(hidden, int) and isinstance(width, int) and width and hidden % (2 * width) == 0):
            raise ms_unsupported(ctx, "a 3-D input without num_heads whose hidden size the cache's width does not "
                                      "divide into heads")
        num_heads = hidden // (2 * width)
    positions = position_ids
    if position_ids.ndim == 1:
        if position_ids.shape != (1,):
            raise malformed(ctx, f"position_ids must be (batch, sequence) or one start position, got shape "
                                 f"{position_ids.shape}")
        seq = x.shape[2 if x.ndim == 4 else 1]
        start = call(ctx, "reshape", ctx.expr(position_ids), ShapeExpr((1, 1)))
        positions = ctx.emit(make_call("add", start, call(ctx, "expand_dims", arange(ctx, seq), axis=(0,))),
                             "positions")
    return rotary_embedding(ctx, x, cos_cache, sin_cache, positions, interleaved=interleaved, num_heads=num_heads,
                            rotary_embedding_dim=rotary_embedding_dim)
