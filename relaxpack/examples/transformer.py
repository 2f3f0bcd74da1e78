"""A transformer encoder block with symbolic batch and sequence length.

Self-attention (heads split by reshape/permute), residual connections,
layer norm and a ReLU feed-forward network, with seeded random weights.
"""

from __future__ import annotations

import numpy as np

from ..ir import BlockBuilder, Constant, IRModule, ShapeExpr, TensorStructInfo, Var, sym
from ..ops import make_call


def transformer_block(d_model: int = 64, heads: int = 4, d_ff: int = 128, seed: int = 0,
                      max_seq: int | None = 512) -> IRModule:
    """The IR of one encoder block: ``main(x: (batch, seq, d_model)) -> same shape``."""
    if d_model % heads:
        raise ValueError(f"d_model={d_model} is not a multiple of heads={heads}")
    rng = np.random.default_rng(seed)
    batch, seq = sym("batch"), sym("seq")
    d_head = d_model // heads

    def weight(*shape):
        return Constant((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))

    def bias(n):
        return Constant((0.1 * rng.standard_normal(n)).astype(np.float32))

    bb = BlockBuilder()
    if max_seq is not None:
        bb.analyzer.set_range("seq", 1, max_seq)
    x = Var("x", TensorStructInfo((batch, seq, d_model), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            def linear(v, n_in, n_out, name):
                return bb.emit(make_call("add", bb.emit(make_call("matmul", v, weight(n_in, n_out))),
                                         bias(n_out)), name)

            def split_heads(v, axes, name):
                v4 = bb.emit(make_call("reshape", v, ShapeExpr((batch, seq, heads, d_head))))
                return bb.emit(make_call("permute_dims", v4, axes=axes), name)

            q = split_heads(linear(x, d_model, d_model, "q"), (0, 2, 1, 3), "qh")
            k = split_heads(linear(x, d_model, d_model, "k"), (0, 2, 3, 1), "kt")
            v = split_heads(linear(x, d_model, d_model, "v"), (0, 2, 1, 3), "vh")
            scores = bb.emit(make_call("matmul", q, k), "scores")
            scale = Constant(np.array(1.0 / np.sqrt(d_head), dtype=np.float32))
            probs = bb.emit(make_call("nn.softmax", bb.emit(make_call("multiply", scores, scale)), axis=-1),
                            "probs")
            attn = bb.emit(make_call("permute_dims", bb.emit(make_call("matmul", probs, v)), axes=(0, 2, 1, 3)))
            merged = bb.emit(make_call("reshape", attn, ShapeExpr((batch, seq, d_model))), "merged")
            h = bb.emit(make_call("add", x, linear(merged, d_model, d_model, "o")), "h")

            def layer_norm(v, name):
                gamma = Constant(np.ones(d_model, np.float32))
                beta = Constant(np.zeros(d_model, np.float32))
                return bb.emit(make_call("nn.layer_norm", v, gamma, beta, axes=(-1,), epsilon=1e-5), name)

            y = layer_norm(h, "ln1")
            ff = bb.emit(make_call("nn.relu", linear(y, d_model, d_ff, "ff1")))
            out = layer_norm(bb.emit(make_call("add", y, linear(ff, d_ff, d_model, "ff2"))), "ln2")
            gv = bb.emit_output(out, "out")
        bb.emit_func_output(gv)
    return bb.get()
