"""A transformer block built through BlockBuilder: inference end to end with
symbolic batch and sequence length."""

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.ir import BlockBuilder, Constant, ShapeExpr, TensorStructInfo, Var, sym
from relaxpack.ops import make_call as R

B, S = sym("batch"), sym("seq")
D, HEADS, FF, VOCAB = 64, 4, 256, 100
HD = D // HEADS


def T(shape, dtype="float32"):
    return TensorStructInfo(shape, dtype)


def const(*shape):
    return Constant(np.zeros(shape, dtype=np.float32))


def attention_heads(bb, x, w, order):
    """x @ w split into heads: (B, S, D) -> (B, HEADS, S, HD), or the key layout."""
    h = bb.emit(R("add", R("matmul", x, w), const(D)))
    h = bb.emit(R("reshape", h, ShapeExpr((B, S, HEADS, -1))))
    assert h.struct_info == T((B, S, HEADS, HD))
    return bb.emit(R("permute_dims", h, axes=order))


def build_block(mask_shape=(B, 1, 1, S)):
    ids = Var("input_ids", struct_info=T((B, S), "int64"))
    mask = Var("mask", struct_info=T(mask_shape))
    bb = BlockBuilder()
    with bb.function("main", [ids, mask]):
        with bb.dataflow():
            x = bb.emit(R("take", const(VOCAB, D), ids, axis=0))
            ln = bb.emit(R("nn.layer_norm", x, const(D), const(D), axes=(-1,), epsilon=1e-5))
            q = attention_heads(bb, ln, const(D, D), (0, 2, 1, 3))
            k = attention_heads(bb, ln, const(D, D), (0, 2, 3, 1))
            v = attention_heads(bb, ln, const(D, D), (0, 2, 1, 3))
            assert k.struct_info == T((B, HEADS, HD, S))
            scores = bb.emit(R("multiply", R("matmul", q, k), Constant(np.float32(0.25))))
            assert scores.struct_info == T((B, HEADS, S, S))
            with bb.span("/attn/Softmax"):
                probs = bb.emit(R("nn.softmax", R("add", scores, mask), axis=-1))
            ctx = bb.emit(R("permute_dims", R("matmul", probs, v), axes=(0, 2, 1, 3)))
            ctx = bb.emit(R("reshape", ctx, ShapeExpr((B, S, -1))))
            assert ctx.struct_info == T((B, S, D))
            h = bb.emit(R("add", x, R("matmul", ctx, const(D, D))))
            ff = bb.emit(R("nn.gelu", R("matmul", R("nn.layer_norm", h, const(D), const(D)), const(D, FF))))
            assert ff.struct_info == T((B, S, FF))
            out = bb.emit_output(R("add", h, R("matmul", ff, const(FF, D))))
        bb.emit_func_output(out)
    return bb.get()


def test_transformer_block_infers_final_shape():
    func = build_block().functions["main"]
    assert func.ret_struct_info == T((B, S, D))
    assert func.body.body.struct_info == T((B, S, D))
    # every binding got its struct info from inference, all with known shapes
    for binding in func.body.blocks[0].bindings:
        sinfo = binding.var.struct_info
        assert isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None


def test_mask_broadcasts_batch_with_one():
    assert build_block(mask_shape=(1, 1, S, S)).functions["main"].ret_struct_info == T((B, S, D))


def test_mask_with_wrong_length_fails_at_its_binding():
    with pytest.raises(ShapeError, match=r"R\.add: cannot broadcast shapes \(batch, 4, seq, seq\) and "
                                         r"\(batch, 1, 1, seq \+ 1\): dims seq and seq \+ 1 are not provably "
                                         r"equal or broadcastable \(use R\.match_cast\) \[at /attn/Softmax\]"):
        build_block(mask_shape=(B, 1, 1, S + 1))
