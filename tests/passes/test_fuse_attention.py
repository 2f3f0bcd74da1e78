"""FuseAttention: attention's products, scale, mask and softmax become one nn.attention,
the unfused results bit for bit on small scores, within rounding by blocks on large ones;
and what does not fuse, with its reason."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.fuse_attention import fuse_attention
from relaxpack.runtime.kernels import attention as attention_kernel

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, ops_of, program, run_pass, with_dce

#: BERT as the dynamo exporter writes it after FoldPermuteMatmul: head-split projections, a mask
#: of one head broadcast over both, torch's safe softmax, the heads merged by the second product
BERT_PARAMS = ('q: R.Tensor(("b", "s", 2, 4), "{dtype}"), k: R.Tensor(("b", "s", 2, 4), "{dtype}"), '
               'v: R.Tensor(("b", "s", 2, 4), "{dtype}"), mask: R.Tensor(("b", 1, "s", "s"), "{dtype}")')
BERT_RET = '("b", "s", 2, 4)'
BERT = """
lv = R.permute_matmul(q, k, lhs_axes=[0, 2, 1, 3], rhs_axes=[0, 2, 3, 1])
lv1 = R.multiply(lv, R.const(0.5, "{dtype}"))
lv2 = R.add(lv1, mask)
lv3 = R.nn.safe_softmax(lv2, axis=-1)
lv4 = R.permute_matmul(lv3, v, rhs_axes=[0, 2, 1, 3], out_axes=[0, 2, 1, 3])
return lv4
"""
BERT_FUSED = """
lv4 = R.nn.attention(q, k, v, mask, lhs_axes=[0, 2, 1, 3], rhs_axes=[0, 2, 3, 1], v_axes=[0, 2, 1, 3],
                     out_axes=[0, 2, 1, 3], steps=[["scale", 0.5, False], ["add", 3]], softmax="safe_softmax")
return lv4
"""

#: GPT-style: plain matmuls of head-major operands, the scale divided, a plain softmax, no mask
PLAIN_PARAMS = ('q: R.Tensor(("b", 3, "n", 8), "float32"), k: R.Tensor(("b", 3, 8, "m"), "float32"), '
                'v: R.Tensor(("b", 3, "m", 5), "float32")')
PLAIN_RET = '("b", 3, "n", 5)'
PLAIN = """
lv = R.matmul(q, k)
lv1 = R.divide(lv, R.const(2.8284271, "float32"))
lv2 = R.nn.softmax(lv1, axis=3)
lv3 = R.matmul(lv2, v)
return lv3
"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bert_attention_becomes_one_call_with_the_same_bits(dtype):
    params = BERT_PARAMS.format(dtype=dtype)
    mod, out = assert_rewrites(with_dce(fuse_attention),
                               program(params, BERT_RET, BERT.format(dtype=dtype), dtype, ("b", "s")),
                               program(params, BERT_RET, BERT_FUSED, dtype, ("b", "s")))
    assert ops_of(out) == ["nn.attention"]
    # small scores: the kernel makes the unfused calls, so exactly their results; odd sizes and
    # empty batches and sequences too
    assert_same_results(mod, out, [{"b": 1, "s": 1}, {"b": 3, "s": 7}, {"b": 0, "s": 5}, {"b": 2, "s": 0}],
                        rtol=0, atol=0)


def test_plain_products_a_divided_scale_and_no_mask_fuse():
    fused = f"""
lv3 = R.nn.attention(q, k, v, steps=[["scale", {float(np.float32(2.8284271))!r}, True]])
return lv3
"""
    mod, out = assert_rewrites(with_dce(fuse_attention), program(PLAIN_PARAMS, PLAIN_RET, PLAIN, dims=("b", "n", "m")),
                               program(PLAIN_PARAMS, PLAIN_RET, fused, dims=("b", "n", "m")))
    assert_same_results(mod, out, [{"b": 1, "n": 1, "m": 1}, {"b": 2, "n": 5, "m": 9}, {"b": 1, "n": 3, "m": 0}],
                        rtol=0, atol=0)


#: GPT-Neo (TorchScript): a causal select of the scores, then the padding mask added; T5: a
#: position bias and the mask added, no scale; each read where the chain has them
NEO_PARAMS = ('q: R.Tensor(("b", 2, "s", 4), "float32"), k: R.Tensor(("b", 2, 4, "s"), "float32"), '
              'v: R.Tensor(("b", 2, "s", 4), "float32"), causal: R.Tensor((1, 1, "s", "s"), "bool"), '
              'mask: R.Tensor(("b", 1, 1, "s"), "float32"), bias: R.Tensor((1, 2, "s", "s"), "float32")')
NEO_RET = '("b", 2, "s", 4)'
NEO = """
lv = R.matmul(q, k)
lv1 = R.where(causal, lv, R.const(-3.4028234663852886e+38, "float32"))
lv2 = R.add(lv1, mask)
lv3 = R.nn.softmax(lv2, axis=-1)
lv4 = R.matmul(lv3, v)
lv5 = R.matmul(q, k)
lv6 = R.add(bias, lv5)
lv7 = R.add(lv6, mask)
lv8 = R.nn.softmax(lv7, axis=-1)
lv9 = R.matmul(lv8, v)
lv15 = R.matmul(q, k)
lv10 = R.where(causal, R.const(0.0, "float32"), lv15)
lv11 = R.nn.safe_softmax(lv10, axis=-1)
lv12 = R.matmul(lv11, v)
lv13 = R.add(lv4, lv9)
lv14 = R.add(lv13, lv12)
return lv14
"""
NEO_FUSED = """
lv4 = R.nn.attention(q, k, v, causal, R.const(-3.4028234663852886e+38, "float32"), mask,
                     steps=[["where", 3, 4, True], ["add", 5]])
lv9 = R.nn.attention(q, k, v, bias, mask, steps=[["add", 3], ["add", 4]])
lv12 = R.nn.attention(q, k, v, causal, R.const(0.0, "float32"), steps=[["where", 3, 4, False]],
                      softmax="safe_softmax")
lv13 = R.add(lv4, lv9)
lv14 = R.add(lv13, lv12)
return lv14
"""


def test_causal_selects_and_added_biases_fuse_in_their_order():
    mod, out = assert_rewrites(with_dce(fuse_attention), program(NEO_PARAMS, NEO_RET, NEO, dims=("b", "s")),
                               program(NEO_PARAMS, NEO_RET, NEO_FUSED, dims=("b", "s")))
    assert_same_results(mod, out, [{"b": 1, "s": 1}, {"b": 2, "s": 6}, {"b": 1, "s": 0}],
                        rtol=0, atol=0)


def test_scores_past_the_block_size_run_by_blocks_within_rounding(monkeypatch):
    """With 256-byte blocks every case below runs by blocks, some of a part of a row group, the
    last of each short: the unfused results within float32 rounding."""
    monkeypatch.setattr(attention_kernel, "BLOCK_BYTES", 256)
    blocked, calls = attention_kernel._blocked, []
    monkeypatch.setattr(attention_kernel, "_blocked", lambda *args: calls.append(1) or blocked(*args))
    params = BERT_PARAMS.format(dtype="float32")
    mod, out = assert_rewrites(with_dce(fuse_attention),
                               program(params, BERT_RET, BERT.format(dtype="float32"), "float32", ("b", "s")),
                               program(params, BERT_RET, BERT_FUSED, "float32", ("b", "s")))
    assert_same_results(mod, out, [{"b": 1, "s": 9}, {"b": 3, "s": 13}, {"b": 2, "s": 70}], rtol=1e-5, atol=1e-6)
    plain = parse(program(PLAIN_PARAMS, PLAIN_RET, PLAIN, dims=("b", "n", "m")))
    assert_same_results(plain, run_pass(with_dce(fuse_attention), plain),
                        [{"b": 2, "n": 11, "m": 3}, {"b": 1, "n": 2, "m": 100}], rtol=1e-5, atol=1e-6)
    assert len(calls) == 5


def test_what_does_not_fuse_and_why():
    params = ('q: R.Tensor((2, 4, 8), "float32"), k: R.Tensor((2, 8, 4), "float32"), '
              'v: R.Tensor((2, 4, 8), "float32"), h: R.Tensor((2, 4, 8), "float16"), '
              'hk: R.Tensor((2, 8, 4), "float16")')
    body = """
lv = R.matmul(q, k)
lv1 = R.nn.softmax(lv, axis=-1)
lv2 = R.matmul(lv1, v)
lv3 = R.matmul(lv, v)
lv4 = R.add(lv3, lv2)
lv10 = R.matmul(q, k)
lv11 = R.nn.softmax(lv10, axis=1)
lv12 = R.matmul(lv11, v)
lv20 = R.matmul(h, hk)
lv21 = R.nn.softmax(lv20, axis=-1)
lv22 = R.matmul(lv21, h)
lv23 = R.astype(lv22, dtype="float32")
lv30 = R.matmul(q, k)
lv31 = R.multiply(lv30, R.const([1.0, 2.0, 3.0, 4.0], "float32"))
lv32 = R.nn.softmax(lv31, axis=-1)
lv33 = R.matmul(lv32, v)
lv40 = R.matmul(q, k)
lv41 = R.nn.softmax(lv40, axis=-1)
lv42 = R.matmul(lv41, v, out_dtype="float32")
lv50 = R.add(lv4, lv12)
lv51 = R.add(lv50, lv23)
lv52 = R.add(lv51, lv33)
lv53 = R.add(lv52, lv42)
return lv53
"""
    mod = parse(program(params, "(2, 4, 8)", body, dims=()))
    out = run_pass(with_dce(fuse_attention), mod)
    assert "nn.attention" not in ops_of(out)
    reasons = dict(explain(mod, "fuse_attention"))
    assert reasons["lv2"] == "the scores lv are used twice"
    assert reasons["lv12"] == "the softmax is over axis 1, not the last"
    assert reasons["lv22"] == "the operands are float16, not one of float32, float64"
    assert reasons["lv33"] == "the scores lv31 are R.multiply by a value that is not one float constant"
    assert reasons["lv42"] == "a product names its out_dtype"
    assert_same_results(mod, out, [{}])


def test_a_float16_attention_stays_unfused_at_o2():
    """The kernel computes in float32/float64 only: float16 scores keep their ops."""
    params = ('q: R.Tensor((1, 4, 8), "float16"), k: R.Tensor((1, 8, 4), "float16"), '
              'v: R.Tensor((1, 4, 8), "float16")')
    text = program(params, "(1, 4, 8)", """
lv = R.matmul(q, k)
lv1 = R.nn.softmax(lv, axis=-1)
lv2 = R.matmul(lv1, v)
return lv2
""", dtype="float16", dims=())
    assert_unchanged(with_dce(fuse_attention), text)
