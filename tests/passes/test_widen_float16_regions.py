"""WidenFloat16Regions: a float16 value between two ops computed in float32 stays float32, as
onnxruntime's CPU provider keeps it (before/after texts; the result is the float32 chain rounded
once), and the roundings it keeps: a model's own Cast pair, a value read by a move or a float16
op outside :data:`OPS`. Against onnxruntime: tests/runtime/test_float16_contract.py."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.passes.widen_float16_regions import widen_float16_regions
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_unchanged, program, with_dce

RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 6)).astype(np.float16)
W2 = RNG.standard_normal((6, 4)).astype(np.float16)
B = RNG.standard_normal(6).astype(np.float16)


def c(values, dtype) -> str:
    return f'R.const({np.asarray(values).astype(dtype).tolist()}, "{dtype}")'


X = 'x: R.Tensor(("n", 8), "float16")'
GEMM_IN = f'''lv = R.astype(x, dtype="float32")  # span: /Gemm
lv1 = R.matmul(lv, {c(W, "float32")})  # span: /Gemm
lv2 = R.astype(lv1, dtype="float16")  # span: /Gemm'''

CASES = {
    # Gemm -> Relu -> Add -> Gemm: float32 from the first product to the last, rounded once
    "gemm_relu_add_gemm": ((X, '("n", 4)'), f"""
{GEMM_IN}
lv3 = R.nn.relu(lv2)  # span: /Relu
lv4 = R.add(lv3, {c(B, "float16")})  # span: /Add
lv5 = R.astype(lv4, dtype="float32")  # span: /Gemm_1
lv6 = R.matmul(lv5, {c(W2, "float32")})  # span: /Gemm_1
lv7 = R.astype(lv6, dtype="float16")  # span: /Gemm_1
return lv7
""", f"""
lv = R.astype(x, dtype="float32")
lv1 = R.matmul(lv, {c(W, "float32")})
lv3 = R.nn.relu(lv1)
lv4 = R.add(lv3, {c(B, "float32")})
lv6 = R.matmul(lv4, {c(W2, "float32")})
lv7 = R.astype(lv6, dtype="float16")
return lv7
"""),
    # an "isolated" move (GPT-2's views around its GELU): read only by float32 computations,
    # onnxruntime runs it in float32; so does the rewrite, rounding once at the end
    "gemm_reshape_tanh_gemm": ((X, '("n", 4)'), f"""
{GEMM_IN}
lv3 = R.reshape(lv2, R.shape([n, 2, 3]))  # span: /View
lv4 = R.tanh(lv3)  # span: /Tanh
lv5 = R.reshape(lv4, R.shape([n, 6]))  # span: /View_1
lv6 = R.astype(lv5, dtype="float32")  # span: /Gemm_1
lv7 = R.matmul(lv6, {c(W2, "float32")})  # span: /Gemm_1
lv8 = R.astype(lv7, dtype="float16")  # span: /Gemm_1
return lv8
""", f"""
lv = R.astype(x, dtype="float32")
lv1 = R.matmul(lv, {c(W, "float32")})
lv3 = R.reshape(lv1, R.shape([n, 2, 3]))
lv4 = R.tanh(lv3)
lv5 = R.reshape(lv4, R.shape([n, 6]))
lv7 = R.matmul(lv5, {c(W2, "float32")})
lv8 = R.astype(lv7, dtype="float16")
return lv8
"""),
}

CASES["gemm_softmax_of_reductions"] = ((X, '("n", 6)'), f"""
{GEMM_IN}
lv3 = R.max(lv2, axis=[1], keepdims=True)  # span: /Attention
lv4 = R.subtract(lv2, lv3)  # span: /Attention
lv5 = R.exp(lv4)  # span: /Attention
lv6 = R.sum(lv5, axis=[1], keepdims=True)  # span: /Attention
lv7 = R.divide(lv5, lv6)  # span: /Attention
return lv7
""", f"""
lv = R.astype(x, dtype="float32")
lv1 = R.matmul(lv, {c(W, "float32")})
lv3 = R.max(lv1, axis=[1], keepdims=True)
lv4 = R.subtract(lv1, lv3)
lv5 = R.exp(lv4)
lv6 = R.sum(lv5, axis=[1], keepdims=True)
lv7 = R.divide(lv5, lv6)
lv8 = R.astype(lv7, dtype="float16")
return lv8
""")

CHAINS = {    # each case's float32 chain, rounded once
    "gemm_relu_add_gemm": lambda f: (np.maximum(f["x"] @ W.astype(np.float32), 0) + B.astype(np.float32))
    @ W2.astype(np.float32),
    "gemm_reshape_tanh_gemm": lambda f: np.tanh(f["x"] @ W.astype(np.float32)) @ W2.astype(np.float32),
    # a composite converter's softmax (the Attention op's): the reductions too (onnxruntime has no
    # float16 ReduceSum/ReduceMax: it casts around them)
    "gemm_softmax_of_reductions": lambda f: (lambda e: e / e.sum(1, keepdims=True))(
        (lambda a: np.exp(a - a.max(1, keepdims=True)))(f["x"] @ W.astype(np.float32))),
}


@pytest.mark.parametrize("name", CASES)
def test_widen_float16_regions(name):
    (params, ret), before, expected = CASES[name]
    mod, out = assert_rewrites(with_dce(widen_float16_regions), program(params, ret, before, "float16"),
                               program(params, ret, expected, "float16"))
    # numerically: the rewritten program is the float32 chain rounded once (the text says so; the
    # VM agrees), and within float16's rounding of the program that rounds after each op
    x = (RNG.standard_normal((5, 8)) * 4).astype(np.float16)
    feeds = {"x": x}
    got = next(iter(VirtualMachine(relaxpack.build(out, opt_level=0)).run(feeds).values()))
    want = next(iter(VirtualMachine(relaxpack.build(mod, opt_level=0)).run(feeds).values()))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)
    chain = CHAINS[name]({k: v.astype(np.float32) for k, v in feeds.items()})
    np.testing.assert_allclose(got.astype(np.float32), chain.astype(np.float16).astype(np.float32), rtol=2e-3,
                               atol=1e-3)


UNCHANGED = {
    # a model's own Cast pair: onnxruntime rounds there too (the casts' spans are not the producer's)
    "explicit_cast_pair": ('("n", 6)', f"""
{GEMM_IN}
lv3 = R.astype(lv1, dtype="float16")  # span: /Cast
lv4 = R.astype(lv3, dtype="float32")  # span: /Cast_1
lv5 = R.sqrt(lv4)  # span: /Sqrt
lv6 = R.astype(lv5, dtype="float16")  # span: /Cast_2
return lv6"""),
    # a move read by a float32 op and by a float16 op outside OPS: onnxruntime rounds before it
    "move_not_isolated": ('(6, "n")', f"""
{GEMM_IN}
lv3 = R.permute_dims(lv2, axes=(1, 0))  # span: /Transpose
lv4 = R.astype(lv3, dtype="float32")  # span: /ReduceMean
lv5 = R.mean(lv4, axis=[1], keepdims=True)  # span: /ReduceMean
lv6 = R.astype(lv5, dtype="float16")  # span: /ReduceMean
lv7 = R.nn.layer_norm(lv3, {c(np.ones(6), "float16")}, {c(np.zeros(6), "float16")}, axes=[0], epsilon=1e-5)  # span: /LayerNorm
lv8 = R.multiply(lv7, lv7)  # span: /Mul
return lv8"""),
    # float16 ops reading no rounding (of model inputs): each kernel computes in float32 and
    # rounds once already; widened, the casts would be kernel calls of their own
    "no_rounding_read": ('("n", 8)', """
lv = R.tanh(x)  # span: /Tanh
lv1 = R.add(lv, x)  # span: /Add
return lv1"""),
    "no_region": ('("n", 8)', f"""
lv = R.tanh(x)  # span: /Tanh
lv1 = R.nn.layer_norm(lv, {c(np.ones(8), "float16")}, {c(np.zeros(8), "float16")}, axes=[-1], epsilon=1e-5)  # span: /LayerNorm
lv2 = R.sigmoid(lv1)  # span: /Sigmoid
return lv2"""),
    # a float16 op outside OPS (layer norm: onnxruntime has a float16 kernel, its input is rounded)
    "layer_norm": ('("n", 6)', f"""
{GEMM_IN}
lv3 = R.nn.layer_norm(lv2, {c(np.ones(6), "float16")}, {c(np.zeros(6), "float16")}, axes=[-1], epsilon=1e-5)  # span: /LayerNorm
return lv3"""),
}


@pytest.mark.parametrize("name", UNCHANGED)
def test_widen_float16_regions_keeps(name):
    ret, body = UNCHANGED[name]
    assert_unchanged(widen_float16_regions, program(X, ret, body, "float16"))


ATTENTION = 'q: R.Tensor(("n", 3, 4), "float16"), k: R.Tensor(("n", 4, 3), "float16"), v: R.Tensor(("n", 3, 5), "float16")'


@pytest.mark.parametrize("softmax", ["nn.softmax", "nn.safe_softmax"])
def test_attention_scores_softmax_and_probs_stay_float32(softmax):
    """q @ k -> softmax -> @ v (ViT's attention; GPT-2's dynamo export's safe softmax): the scores
    and the probabilities stay float32 (as onnxruntime keeps them), the product by the float16 ``v``
    reads both as they are and rounds its own result (its transpose is no float32 computation: the
    region ends there, no cast call)."""
    before = program(ATTENTION, '("n", 5, 3)', """
lv = R.matmul(q, k, out_dtype=None)  # span: /MatMul
lv1 = R.nn.softmax(lv, axis=-1)  # span: /Softmax
lv2 = R.matmul(lv1, v, out_dtype=None)  # span: /MatMul_1
lv3 = R.permute_dims(lv2, axes=(0, 2, 1))  # span: /Transpose
return lv3""".replace("nn.softmax", softmax), "float16")
    expected = program(ATTENTION, '("n", 5, 3)', """
lv = R.matmul(q, k, out_dtype="float32")
lv1 = R.nn.softmax(lv, axis=-1)
lv2 = R.matmul(lv1, v, out_dtype="float16")
lv3 = R.permute_dims(lv2, axes=(0, 2, 1))
return lv3""".replace("nn.softmax", softmax), "float16")
    mod, out = assert_rewrites(with_dce(widen_float16_regions), before, expected)
    feeds = {name: (RNG.standard_normal(shape) * 3).astype(np.float16)
             for name, shape in (("q", (2, 3, 4)), ("k", (2, 4, 3)), ("v", (2, 3, 5)))}
    got = next(iter(VirtualMachine(relaxpack.build(out, opt_level=0)).run(feeds).values()))
    f = {name: a.astype(np.float32) for name, a in feeds.items()}
    scores = f["q"] @ f["k"]
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = (probs @ f["v"]).transpose(0, 2, 1).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=1e-3)


def test_attention_probs_read_by_a_float32_op_stay_in_the_region():
    """probs @ v read by an add (in OPS): the product writes its float32 value (the float16 ``v``
    read as it is, no cast call) and the add reads it."""
    before = program(ATTENTION, '("n", 3, 5)', f"""
lv = R.matmul(q, k, out_dtype=None)  # span: /MatMul
lv1 = R.nn.softmax(lv, axis=-1)  # span: /Softmax
lv2 = R.matmul(lv1, v, out_dtype=None)  # span: /MatMul_1
lv3 = R.add(lv2, {c(np.ones(5), "float16")})  # span: /Add
return lv3""", "float16")
    expected = program(ATTENTION, '("n", 3, 5)', f"""
lv = R.matmul(q, k, out_dtype="float32")
lv1 = R.nn.softmax(lv, axis=-1)
lv2 = R.matmul(lv1, v, out_dtype="float32")
lv3 = R.add(lv2, {c(np.ones(5), "float32")})
lv4 = R.astype(lv3, dtype="float16")
return lv4""", "float16")
    assert_rewrites(with_dce(widen_float16_regions), before, expected)


UNCHANGED_ATTENTION = {
    # the scores read by a layer norm too (a float16 kernel: onnxruntime rounds before it): they
    # are rounded where the model rounds them, and the softmax reads the rounding
    "scores_read_by_a_layer_norm": ('("n", 3, 3)', f"""
lv = R.matmul(q, k, out_dtype=None)  # span: /MatMul
lv1 = R.nn.softmax(lv, axis=-1)  # span: /Softmax
lv2 = R.nn.layer_norm(lv, {c(np.ones(3), "float16")}, {c(np.zeros(3), "float16")}, axes=[-1], epsilon=1e-5)  # span: /LayerNorm
lv3 = R.add(lv1, lv2)  # span: /Add
return lv3"""),
    # a product that is a result too: rounded there
    "product_returned": ('("n", 3, 3)', """
lv = R.matmul(q, k, out_dtype=None)  # span: /MatMul
lv1 = R.tanh(lv)  # span: /Tanh
lv2 = R.add(lv1, lv)  # span: /Add
return lv"""),
}


def test_float16_product_read_by_float32_ops_starts_a_region():
    """A float16 product whose readers all compute in float32 (a tanh, an add; onnxruntime casts
    around both) writes its float32 value: the region runs to the end, rounded once."""
    before = program(ATTENTION, '("n", 3, 3)', """
lv = R.matmul(q, k, out_dtype=None)  # span: /MatMul
lv1 = R.tanh(lv)  # span: /Tanh
lv2 = R.add(lv1, lv)  # span: /Add
return lv2""", "float16")
    expected = program(ATTENTION, '("n", 3, 3)', """
lv = R.matmul(q, k, out_dtype="float32")
lv1 = R.tanh(lv)
lv2 = R.add(lv1, lv)
lv3 = R.astype(lv2, dtype="float16")
return lv3""", "float16")
    assert_rewrites(with_dce(widen_float16_regions), before, expected)


def test_layer_norm_between_two_products_computes_in_float32():
    """Gemm -> LayerNormalization -> Gemm: onnxruntime runs the "isolated" float16 layer norm in
    float32 (ViT's layernorm_after); so does the rewrite, its gamma and beta widened exactly."""
    gamma, beta = RNG.standard_normal(6).astype(np.float16), RNG.standard_normal(6).astype(np.float16)
    before = program(X, '("n", 4)', f"""
{GEMM_IN}
lv3 = R.nn.layer_norm(lv2, {c(gamma, "float16")}, {c(beta, "float16")}, axes=[-1], epsilon=1e-5)  # span: /LayerNorm
lv4 = R.astype(lv3, dtype="float32")  # span: /Gemm_1
lv5 = R.matmul(lv4, {c(W2, "float32")})  # span: /Gemm_1
lv6 = R.astype(lv5, dtype="float16")  # span: /Gemm_1
return lv6""", "float16")
    expected = program(X, '("n", 4)', f"""
lv = R.astype(x, dtype="float32")
lv1 = R.matmul(lv, {c(W, "float32")})
lv3 = R.nn.layer_norm(lv1, {c(gamma, "float32")}, {c(beta, "float32")}, axes=[-1], epsilon=1e-5)
lv5 = R.matmul(lv3, {c(W2, "float32")})
lv6 = R.astype(lv5, dtype="float16")
return lv6""", "float16")
    assert_rewrites(with_dce(widen_float16_regions), before, expected)


@pytest.mark.parametrize("name", UNCHANGED_ATTENTION)
def test_widen_float16_regions_keeps_attention(name):
    ret, body = UNCHANGED_ATTENTION[name]
    assert_unchanged(widen_float16_regions, program(ATTENTION, ret, body, "float16"))
