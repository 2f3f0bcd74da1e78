"""com.microsoft GroupQueryAttention as a composition of IR ops.

GroupQueryAttention (GQA) is the decoder self-attention that onnxruntime-genai's model builder
and onnxruntime's transformer optimizer write for LLaMA/Mistral/Phi/Qwen-style models:
``num_heads`` query heads share ``kv_num_heads`` key/value heads (query head i reads key/value
head ``i // (num_heads / kv_num_heads)``), with a KV cache in (B, Nkv, length, h) layout::

    q, k, v = heads(query, key, value)       # or split from one packed QKV query
    q, k = rotary(q, k, positions)           # do_rotary, from cos_cache / sin_cache
    present = past[:past_b] | k | zeros      # per row b, then the same for v
    scores = softcap(q @ present^T * scale) + attention_bias, causal, local window
    out = softmax(scores [, sink]) @ present_value, heads merged

Rows follow onnxruntime's CPU kernel. Row b holds ``seqlens_k[b] + 1`` tokens (keys at or after
that are masked: a right-padded prompt). A first prompt (``S == total_sequence_length``) has no
past; otherwise row b's past is the first ``seqlens_k[b] + 1 - S`` entries of ``past_key``,
whose length may exceed it (a buffer). ``present_*`` is ``max(total_sequence_length,
past length)`` long, data-dependent (a fresh dim, see ``_dynamic``); S long without a past.
Rotary positions are each row's past length plus the token's index, or ``position_ids``
(whose first element starts every row of a first prompt). Quantized KV caches, the window-sized
cache (``sliding_window_cache``), Q/K RMS norms and the ``output_qk`` output are refused.
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.dims import Dim
from ....ir.expr import Expr, ShapeExpr, Tuple, TupleGetItem
from ....ops.definitions.index import HUGE
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._composite_common import arange, dim_scalar, outputs_used, require_float, reshape
from ._dynamic import packed_call
from ._math_common import astype, call, is_low_float, malformed, scalar
from ._shape_common import shaped
from .composite import grouped_matmul, rotary_embedding, split_heads
from .microsoft import MS, ms_unsupported


def _shape(expr: Expr) -> tuple[Dim, ...]:
    return tuple(expr.struct_info.shape)


@register_converter(MS, "GroupQueryAttention", since_opset=1)
def group_query_attention(ctx, query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, *, num_heads, kv_num_heads, scale=0.0, softcap=0.0,
                          local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=0, causal=1,
                          qk_output=0, sliding_window_cache=0, kv_cache_bit_width=0, k_quant_type="NONE",
                          v_quant_type="NONE", qk_norm_epsilon=1e-6):
    """Grouped-query self-attention with a KV cache (see the module docstring)."""
    _refuse(ctx, query, past_key, k_scale is not None or v_scale is not None,
            q_norm_weight is not None or k_norm_weight is not None, qk_output, sliding_window_cache,
            kv_cache_bit_width, (k_quant_type, v_quant_type))
    _check(ctx, key, value, past_key, past_value, seqlens_k, total_sequence_length, num_heads, kv_num_heads,
           causal, local_window_size)
    dtype = require_float(ctx, query, "query")
    q, k, v = _qkv_heads(ctx, shaped(ctx, query, "query"), key, value, num_heads, kv_num_heads)
    seq = _shape(q)[2]
    totals, past, first = _rows(ctx, seqlens_k, total_sequence_length, seq)
    if do_rotary:
        positions = _positions(ctx, past, first, position_ids, seq)
        q, k = (_rotate(ctx, x, cos_cache, sin_cache, positions, rotary_interleaved) for x in (q, k))
    if past_key is not None:
        slots = _present_slots(ctx, total_sequence_length, shaped(ctx, past_key, "past_key").shape[2], past, seq)
        k, v = (_present(ctx, ctx.expr(p), x, slots) for p, x in ((past_key, k), (past_value, v)))
    work = "float32" if is_low_float(dtype) else dtype
    allowed = _allowed(ctx, totals, past, seq, _shape(k)[2], causal, local_window_size)
    out = _attend(ctx, *(astype(ctx, x, work) for x in (q, k, v)), allowed, attention_bias, head_sink,
                  smooth_softmax, scale, softcap)
    batch, heads, _, head_size = _shape(q)
    merged = reshape(ctx, call(ctx, "permute_dims", out, axes=(0, 2, 1, 3)), (batch, seq, heads * head_size))
    return astype(ctx, merged, dtype), k, v


# ---------------------------------------------------------------- checks


def _refuse(ctx, query: Value, past_key: Value | None, kv_scales: bool, qk_norms: bool, qk_output: int,
            sliding_window_cache: int, kv_cache_bit_width: int, quant_types: tuple[str, str]) -> None:
    """Forms onnxruntime documents that relaxpack does not implement, refused by name."""
    quantized = past_key is not None and past_key.dtype != query.dtype
    if kv_scales or quantized or kv_cache_bit_width or any(t != "NONE" for t in quant_types):
        raise ms_unsupported(ctx, "a quantized KV cache (k_scale/v_scale, kv_cache_bit_width, k/v_quant_type, "
                                  "a past of another type than the query)")
    if qk_norms:
        raise ms_unsupported(ctx, "q_norm_weight/k_norm_weight (Q/K RMS normalization)")
    if qk_output or outputs_used(ctx, 4)[3]:
        raise ms_unsupported(ctx, "the output_qk output (qk_output)")
    if sliding_window_cache:
        raise ms_unsupported(ctx, "sliding_window_cache=1 (a window-sized KV cache)")


def _check(ctx, key, value, past_key, past_value, seqlens_k, total_sequence_length, num_heads: int,
           kv_num_heads: int, causal: int, local_window_size: int) -> None:
    if (key is None) != (value is None):
        raise malformed(ctx, "key and value must be given together (or neither: a packed QKV query)")
    if (past_key is None) != (past_value is None):
        raise malformed(ctx, "past_key and past_value must be given together")
    if seqlens_k is None or total_sequence_length is None:
        raise malformed(ctx, "seqlens_k and total_sequence_length are required")
    if num_heads <= 0 or kv_num_heads <= 0 or num_heads % kv_num_heads:
        raise malformed(ctx, f"num_heads {num_heads} must be a positive multiple of kv_num_heads {kv_num_heads}")
    if causal not in (0, 1) or local_window_size < -1 or (not causal and local_window_size != -1):
        raise malformed(ctx, f"causal={causal} with local_window_size={local_window_size} (a local window "
                             f"needs causal=1; -1 means none)")


# ---------------------------------------------------------------- inputs


def _qkv_heads(ctx, query: Value, key: Value | None, value: Value | None, num_heads: int,
               kv_num_heads: int) -> tuple[Expr, Expr, Expr]:
    """Q as (B, N, S, h), K and V as (B, Nkv, S, h), from three inputs or one packed QKV."""
    if query.ndim != 3:
        raise malformed(ctx, f"query must be 3-D (batch, sequence, hidden), got rank {query.ndim}")
    width = query.shape[2]
    if key is None:
        parts = num_heads + 2 * kv_num_heads
        if not isinstance(width, int) or width % parts:
            raise malformed(ctx, f"a packed QKV width {width} is not (num_heads + 2 * kv_num_heads) * head_size")
        size = width // parts
        packed = ctx.emit(make_call("split", ctx.expr(query), axis=2, indices_or_sections=(
            num_heads * size, (num_heads + kv_num_heads) * size)), "qkv")
        exprs = [ctx.expr(ctx.emit(TupleGetItem(ctx.expr(packed), i), n)) for i, n in enumerate("qkv")]
        inputs = [Value(e.struct_info, expr=e) for e in exprs]
    else:
        if not isinstance(width, int) or width % num_heads:
            raise malformed(ctx, f"query width {width} is not a multiple of num_heads {num_heads}")
        inputs = [query, shaped(ctx, key, "key"), shaped(ctx, value, "value")]
    return tuple(split_heads(ctx, x, h) for x, h in zip(inputs, (num_heads, kv_num_heads, kv_num_heads)))


def _rows(ctx, seqlens_k: Value, total_sequence_length: Value, seq: Dim) -> tuple[Expr, Expr, Expr]:
    """Per row (int64, (B,)): its token count and its past length; and whether this is a first
    prompt (``S == total_sequence_length``: no row has a past), a 0-d bool."""
    totals = call(ctx, "add", astype(ctx, seqlens_k, "int64"), scalar(ctx, 1, "int64"), name="totals")
    total = reshape(ctx, astype(ctx, total_sequence_length, "int64"), ())
    first = call(ctx, "equal", total, dim_scalar(ctx, seq), name="first_prompt")
    past = call(ctx, "where", first, scalar(ctx, 0, "int64"), call(ctx, "subtract", totals, dim_scalar(ctx, seq)),
                name="past_lengths")
    return totals, past, first


def _positions(ctx, past: Expr, first: Expr, position_ids: Value | None, seq: Dim) -> Expr:
    """Rotary positions (B, S): each row's past length plus the token's index; or
    ``position_ids``, but for a first prompt onnxruntime reads only its first element and
    counts on from it in every row."""
    steps = call(ctx, "expand_dims", arange(ctx, seq), axis=(0,))
    if position_ids is None:
        return call(ctx, "add", call(ctx, "expand_dims", past, axis=(1,)), steps, name="positions")
    ids = ctx.expr(position_ids)
    start = call(ctx, "take", reshape(ctx, ids, (-1,)), scalar(ctx, 0, "int64"), axis=0)
    return call(ctx, "where", first, call(ctx, "add", steps, start), ids, name="positions")


def _rotate(ctx, x: Expr, cos_cache: Value | None, sin_cache: Value | None, positions: Expr,
            interleaved: int) -> Expr:
    """ONNX's RotaryEmbedding (``composite.py``) of (B, heads, S, h) ``x``: the first
    ``2 * cos_cache.shape[1]`` features of each head."""
    if cos_cache is None or sin_cache is None:
        raise malformed(ctx, "do_rotary=1 needs cos_cache and sin_cache")
    half, size = shaped(ctx, cos_cache, "cos_cache").shape[-1], _shape(x)[3]
    if not isinstance(half, int):
        raise ms_unsupported(ctx, "a cos_cache whose width is not static")
    rotary_dim = 0 if 2 * half == size else 2 * half
    rotated = rotary_embedding(ctx, Value(x.struct_info, expr=x), cos_cache, sin_cache,
                               Value(positions.struct_info, expr=positions), interleaved=interleaved,
                               rotary_embedding_dim=rotary_dim)
    return ctx.expr(ctx.emit(rotated, "rotated"))


# ---------------------------------------------------------------- the cache


def _present_slots(ctx, total_sequence_length: Value, past_length: Dim, past: Expr,
                   seq: Dim) -> tuple[Expr, Expr]:
    """Where each slot of the present comes from: (B, T') indices into ``concat(past, new)``
    along the sequence and whether the slot is filled (else 0). T' = ``max(total_sequence_length,
    past_length)``, as onnxruntime sizes it, is only known at run time: a fresh dim."""
    total = reshape(ctx, astype(ctx, total_sequence_length, "int64"), ())
    limit = call(ctx, "maximum", total, dim_scalar(ctx, past_length), name="present_length")
    zero, one = (ctx.const(np.array(v, np.int64)) for v in (0, 1))
    slot = packed_call(ctx, "dyn.range", [zero, Value(limit.struct_info, expr=limit), one],
                       [((None,), "int64")], "slot")
    slot = call(ctx, "expand_dims", ctx.expr(slot), axis=(0,))
    rows = call(ctx, "expand_dims", past, axis=(1,))
    # slot j of row b: past[j] below the row's past length, then new[j - past_b]; the rest unfilled
    from_new = call(ctx, "add", call(ctx, "subtract", slot, rows), dim_scalar(ctx, past_length))
    index = call(ctx, "where", call(ctx, "less", slot, rows), slot, from_new)
    index = call(ctx, "minimum", index, dim_scalar(ctx, past_length + seq - 1), name="slot_index")
    filled = call(ctx, "less", slot, call(ctx, "add", rows, dim_scalar(ctx, seq)), name="filled")
    return index, filled


def _present(ctx, past: Expr, new: Expr, slots: tuple[Expr, Expr]) -> Expr:
    """(B, Nkv, T', h): each row's past, its new tokens after it, zeros after them."""
    index, filled = slots
    batch, heads, _, size = _shape(new)
    both = call(ctx, "concat", Tuple([past, new]), axis=2)
    shape = ShapeExpr((batch, heads, _shape(index)[1], size))
    wide = call(ctx, "broadcast_to", call(ctx, "expand_dims", index, axis=(1, 3)), shape)
    taken = call(ctx, "gather_elements", both, wide, axis=2)
    mask = call(ctx, "expand_dims", filled, axis=(1, 3))
    return call(ctx, "where", mask, taken, scalar(ctx, 0, new.struct_info.dtype), name="present")


# ---------------------------------------------------------------- attention


def _allowed(ctx, totals: Expr, past: Expr, seq: Dim, length: Dim, causal: int, window: int) -> Expr:
    """(B, 1, S, T') booleans: the keys each query sees. Those of its row (``j < totals[b]``),
    causal up to its own position (``past_b + s``), and the ``window`` keys ending there."""
    keys = arange(ctx, length)
    allowed = call(ctx, "less", keys, reshape(ctx, totals, (-1, 1, 1, 1)), name="allowed")
    if not causal:
        return allowed
    ends = call(ctx, "add", reshape(ctx, past, (-1, 1, 1, 1)),
                call(ctx, "expand_dims", call(ctx, "add", arange(ctx, seq), scalar(ctx, 1, "int64")), axis=(1,)))
    allowed = call(ctx, "logical_and", allowed, call(ctx, "less", keys, ends), name="allowed")
    if window >= 0:
        starts = call(ctx, "subtract", ends, scalar(ctx, window, "int64"))
        allowed = call(ctx, "logical_and", allowed, call(ctx, "greater_equal", keys, starts), name="allowed")
    return allowed


def _attend(ctx, q: Expr, k: Expr, v: Expr, allowed: Expr, attention_bias: Value | None, head_sink: Value | None,
            smooth_softmax: int, scale: float, softcap: float) -> Expr:
    """(B, N, S, h): softmax over the allowed keys of ``softcap(q @ k^T * scale) + bias``, with
    a sink logit per head (``head_sink``, or 0 for ``smooth_softmax``), times v. A query that
    sees no key (a local window of 0) is 0, as in onnxruntime."""
    dtype = q.struct_info.dtype
    batch, heads, seq, head_size = _shape(q)
    length = _shape(k)[2]
    reps = heads // _shape(k)[1]
    factor = scale if scale else 1.0 / math.sqrt(head_size)
    scores = call(ctx, "multiply", grouped_matmul(ctx, q, call(ctx, "permute_dims", k, axes=(0, 1, 3, 2)), reps),
                  scalar(ctx, factor, dtype), name="scores")
    if softcap > 0:
        cap = scalar(ctx, softcap, dtype)
        scores = call(ctx, "multiply", call(ctx, "tanh", call(ctx, "divide", scores, cap)), cap, name="scores")
    if attention_bias is not None:
        scores = call(ctx, "add", scores, _bias_columns(ctx, attention_bias, length, dtype), name="scores")
    scores = call(ctx, "where", allowed, scores, scalar(ctx, -np.inf, dtype), name="scores")
    sink = _sink(ctx, head_sink, smooth_softmax, (batch, heads, seq, 1), dtype)
    if sink is not None:
        scores = call(ctx, "concat", Tuple([sink, scores]), axis=-1, name="scores")
    probs = call(ctx, "nn.safe_softmax", scores, axis=-1, name="probs")
    if sink is not None:
        probs = call(ctx, "strided_slice", probs, axes=(-1,), begin=(1,), end=(HUGE,), strides=(1,))
    return grouped_matmul(ctx, probs, v, reps)


def _bias_columns(ctx, attention_bias: Value, length: Dim, dtype: str) -> Expr:
    """``attention_bias`` (B or 1, N or 1, S, total_sequence_length) over the T' keys of the
    present: its columns are absolute key positions, and the keys past its last (at or after
    total_sequence_length, masked in every row) repeat that column."""
    bias = shaped(ctx, attention_bias, "attention_bias")
    if bias.ndim != 4:
        raise malformed(ctx, f"attention_bias must be 4-D, got rank {bias.ndim}")
    expr = astype(ctx, bias, dtype)
    columns = bias.shape[3]
    if columns == length:
        return expr
    index = call(ctx, "minimum", arange(ctx, length), dim_scalar(ctx, columns - 1))
    return call(ctx, "take", expr, index, axis=3, name="bias")


def _sink(ctx, head_sink: Value | None, smooth_softmax: int, shape: tuple, dtype: str) -> Expr | None:
    """The extra softmax logit of each head, broadcast to (B, N, S, 1), or None."""
    if head_sink is not None:
        logits = reshape(ctx, astype(ctx, head_sink, dtype), (1, -1, 1, 1))
    elif smooth_softmax:
        logits = scalar(ctx, 0.0, dtype)
    else:
        return None
    return call(ctx, "broadcast_to", logits, ShapeExpr(shape), name="sink")
