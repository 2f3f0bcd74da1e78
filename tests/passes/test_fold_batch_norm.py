"""FoldBatchNorm: batch norms and per-channel scale/shift folded into constant weights."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples.onnx_models import small_cnn
from relaxpack.ir import parse
from relaxpack.passes.fold_batch_norm import RULES, SCALE_SHIFT, fold_batch_norm, scale_shift_batch_norm
from relaxpack.passes.core.rules import explain
from relaxpack.runtime import VirtualMachine

from .helpers import (
    assert_rewrites, assert_same_results, assert_unchanged, kernel_calls, ops_of, run_pass, with_dce,
)


def c(values, dtype="float32") -> str:
    """A constant in the text form."""
    return f'R.const({np.asarray(values, dtype).tolist()}, "{dtype}")'


def program(params: str, ret: str, body: str) -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return f'''
@I.ir_module
class Module:
    @R.function
    def main({params}) -> {ret}:
        n = T.int64()
{lines}
'''


# gamma / sqrt(var + 0) = [1, 3]; beta - mean * scale = [-0.5, -5]
GAMMA, BETA, MEAN, VAR = c([2, 3]), c([0.5, 1]), c([1, 2]), c([4, 1])
BN = f"{GAMMA}, {BETA}, {MEAN}, {VAR}, axis=1, epsilon=0.0"
W = c([[[[1]]], [[[2]]]])                         # conv weight (2, 1, 1, 1)
CONV_SIG = ('x: R.Tensor(("n", 1, 4, 4), "float32")', 'R.Tensor(("n", 2, 4, 4), "float32")')
MM_W = c([[1, 2], [3, 4], [5, 6]])
MM_SIG = ('x: R.Tensor(("n", 3), "float32")', 'R.Tensor(("n", 2), "float32")')


def per_channel(values):
    return c(np.reshape(values, (1, -1, 1, 1)))


@pytest.mark.parametrize("before, expected", [
    pytest.param(f"""
lv = R.nn.conv(x, {W})
lv1 = R.nn.batch_norm(lv, {BN})
return lv1
""", f"""
lv = R.nn.conv(x, {c([[[[1]]], [[[6]]]])})
lv1 = R.add(lv, {per_channel([-0.5, -5])})
return lv1
""", id="conv"),
    pytest.param(f"""
lv = R.nn.conv(x, {W})
lv1 = R.add(lv, {per_channel([1, 2])})
lv2 = R.nn.batch_norm(lv1, {BN})
return lv2
""", f"""
lv = R.nn.conv(x, {c([[[[1]]], [[[6]]]])})
lv1 = R.add(lv, {per_channel([0.5, 1])})
return lv1
""", id="conv_with_bias"),
    pytest.param(f"""
lv = R.nn.conv(x, {W})
lv1 = R.multiply(lv, {per_channel([2, 0.5])})
lv2 = R.add(lv1, {per_channel([3, 4])})
return lv2
""", f"""
lv = R.nn.conv(x, {c([[[[2]]], [[[1]]]])})
lv1 = R.add(lv, {per_channel([3, 4])})
return lv1
""", id="scale_shift"),
    pytest.param(f"""
lv = R.nn.conv(x, {W})
lv1 = R.add({per_channel([1, 2])}, lv)
lv2 = R.multiply({c([[[2]], [[0.5]]])}, lv1)
lv3 = R.add(lv2, {per_channel([3, 4])})
return lv3
""", f"""
lv = R.nn.conv(x, {c([[[[2]]], [[[1]]]])})
lv1 = R.add(lv, {per_channel([5, 5])})
return lv1
""", id="bias_scale_shift"),
])
def test_conv_folds(before, expected):
    mod, out = assert_rewrites(with_dce(fold_batch_norm), program(*CONV_SIG, before), program(*CONV_SIG, expected))
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}])


@pytest.mark.parametrize("before", [
    f"""
lv = R.matmul(x, {MM_W})
lv1 = R.nn.batch_norm(lv, {BN})
return lv1
""",
    f"""
lv = R.matmul(x, {MM_W})
lv1 = R.add(lv, {c([1, 2])})
lv2 = R.nn.batch_norm(lv1, {BN})
return lv2
"""], ids=["matmul", "gemm"])
def test_matmul_folds(before):
    shift = "[-0.5, -5]" if "add" not in before else "[0.5, 1]"
    expected = f"""
lv = R.matmul(x, {c([[1, 6], [3, 12], [5, 18]])})
lv1 = R.add(lv, {c(eval(shift))})
return lv1
"""
    mod, out = assert_rewrites(with_dce(fold_batch_norm), program(*MM_SIG, before), program(*MM_SIG, expected))
    assert_same_results(mod, out, [{"n": 1}, {"n": 4}])


def test_random_weights_conv_transpose_and_grouped_conv():
    rng = np.random.default_rng(0)
    wt = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)     # conv_transpose, groups=2: 6 out channels
    wg = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)     # grouped conv: 6 -> 6 channels, groups=3

    def bn(k):
        return ", ".join(c(v) for v in (rng.uniform(0.5, 2, k), rng.standard_normal(k),
                                         rng.standard_normal(k), rng.uniform(0.1, 3, k))) + ", epsilon=1e-3"
    before = program('x: R.Tensor(("n", 4, 5, 5), "float32")', 'R.Tensor(("n", 6, 11, 11), "float32")', f"""
lv = R.nn.conv_transpose(x, {c(wt)}, groups=2, strides=2)
lv1 = R.nn.batch_norm(lv, {bn(6)})
lv2 = R.nn.conv(lv1, {c(wg)}, groups=3, padding=1)
lv3 = R.add(lv2, {c(rng.standard_normal((6, 1, 1)))})
lv4 = R.nn.batch_norm(lv3, {bn(6)})
return lv4
""")
    mod = parse(before)
    out = run_pass(with_dce(fold_batch_norm), mod)
    assert ops_of(out) == ["nn.conv_transpose", "add", "nn.conv", "add"]
    assert_same_results(mod, out, [{"n": 1}, {"n": 2}], rtol=1e-4, atol=1e-4)


def test_negative_cases_explain_why():
    params = ('x: R.Tensor(("n", 1, 4, 4), "float32"), w: R.Tensor((2, 1, 1, 1), "float32"), '
              'g: R.Tensor((2,), "float32")')
    text = program(params, 'R.Tensor(("n", 2, 4, 4), "float32")', f"""
lv = R.nn.conv(x, w)
lv1 = R.nn.batch_norm(lv, {BN})
lv2 = R.nn.conv(x, {W})
lv3 = R.nn.batch_norm(lv2, {BN})
lv4 = R.nn.conv(x, {W})
lv5 = R.nn.batch_norm(lv4, g, {BETA}, {MEAN}, {VAR})
lv6 = R.multiply(lv4, {c(np.ones((1, 1, 4, 4)))})
lv7 = R.add(lv1, lv3)
lv8 = R.add(lv7, lv2)
lv9 = R.add(lv8, lv5)
lv10 = R.add(lv9, lv6)
return lv10
""")
    assert_unchanged(fold_batch_norm, text)
    mod = parse(text)
    assert explain(mod, "fold_bn_weight") == [
        ("lv1", "the weight w is not a constant"),
        ("lv3", "the producer's output lv2 is used twice"),
        ("lv5", "gamma g is not a constant"),
    ]
    assert explain(mod, "fold_scale_weight") == [
        ("lv6", "the producer's output lv4 is used twice")]


def test_scale_and_axis_must_be_per_channel():
    text = program('x: R.Tensor(("n", 4, 3), "float32")', 'R.Tensor(("n", 4, 4), "float32")', f"""
lv = R.matmul(x, {c(np.ones((3, 4)))})
lv1 = R.nn.batch_norm(lv, {c([1, 2, 3, 4])}, {c(np.zeros(4))}, {c(np.zeros(4))}, {c(np.ones(4))}, axis=1)
lv2 = R.matmul(x, {c(np.ones((3, 4)))})
lv3 = R.multiply(lv2, {c(np.arange(16).reshape(4, 4))})
lv4 = R.add(lv1, lv3)
return lv4
""")
    assert_unchanged(fold_batch_norm, text)
    mod = parse(text)
    assert explain(mod, "fold_bn_weight") == [
        ("lv1", "batch_norm normalizes axis 1, the R.matmul output's channels are axis 2")]
    assert explain(mod, "fold_scale_weight") == [
        ("lv3", "constant s of shape (4, 4) is not one value per channel along axis 2 (4 channels) "
                "of the R.matmul output")]


def test_rules_are_documented():
    names = [r.name for r in RULES.rules]
    assert names == ["fold_bn_bias", "fold_bn_weight", "fold_scale_weight", "fold_scale_through_bias",
                     "merge_bias_adds"]
    doc = sys.modules[RULES.rules[0].rewrite.__module__].__doc__
    for rule in RULES.rules:
        assert f"``{rule.name}``" in doc and rule.summary
    assert fold_batch_norm.info.opt_level == 2 and fold_batch_norm.info.produces == "optimize"


def test_small_cnn_batch_norms_fold_and_match_onnxruntime():
    model = small_cnn()
    mod = relaxpack.from_onnx(model)
    assert ops_of(mod).count("nn.batch_norm") == 2
    out = run_pass(with_dce(fold_batch_norm), mod)
    assert "nn.batch_norm" not in ops_of(out)
    assert kernel_calls(mod) == 13 and kernel_calls(out) == 11     # the flatten is a view
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    vm = VirtualMachine(relaxpack.build(out, opt_level=0))
    rng = np.random.default_rng(4)
    for batch in (1, 3):
        feeds = {"input": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-4, 1e-4)
        assert all(d.passed for d in diffs), diffs


def test_a_batch_norm_left_becomes_a_scale_and_shift():
    """Not after a producer (DenseNet's concat -> batch_norm -> relu): x * s + t, s = gamma / sqrt(var +
    eps) = [1, 3], t = beta - mean * s = [-0.5, -5]; along another axis too."""
    params = 'x: R.Tensor(("n", 1, 4, 4), "float32"), y: R.Tensor(("n", 2, 3), "float64")'
    before = program(params, 'R.Tensor(("n", 2, 4, 4), "float32")', f"""
lv = R.concat((x, x), axis=1)
lv1 = R.nn.batch_norm(lv, {BN})
lv2 = R.nn.batch_norm(y, {c([2, 3, 1], "float64")}, {c([0, 0, 1], "float64")}, {c([1, 0, 0], "float64")}, \
{c([4, 1, 1], "float64")}, axis=2, epsilon=0.0)
return lv1
""")
    mod = parse(before)
    out = run_pass(with_dce(scale_shift_batch_norm), mod)
    assert ops_of(out) == ["concat", "multiply", "add"]
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}], rtol=1e-6, atol=1e-6)
    text = out.script()
    assert "[[[[1.0]], [[3.0]]]]" in text and "[[[[-0.5]], [[-5.0]]]]" in text


def test_a_producers_or_a_float16_batch_norm_stays_whole():
    params = 'x: R.Tensor(("n", 1, 4, 4), "float32"), w: R.Tensor((2, 1, 1, 1), "float32"), ' \
             'h: R.Tensor(("n", 2, 4, 4), "float16")'
    text = program(params, 'R.Tensor(("n", 2, 4, 4), "float32")', f"""
lv = R.nn.conv(x, w)
lv1 = R.nn.batch_norm(lv, {BN})
lv2 = R.nn.batch_norm(h, {c([2, 3], "float16")}, {c([0.5, 1], "float16")}, {c([1, 2], "float16")}, \
{c([4, 1], "float16")}, axis=1, epsilon=0.0)
lv3 = R.astype(lv2, dtype="float32")
lv4 = R.add(lv1, lv3)
return lv4
""")
    assert_unchanged(scale_shift_batch_norm, text)
    assert explain(parse(text), "bn_scale_shift") == [
        ("lv1", "its input is an R.nn.conv"),
        ("lv2", "the result is float16: its batch norm computes in float32 and rounds once"),
    ]
    assert [r.name for r in SCALE_SHIFT.rules] == ["bn_scale_shift"]
    assert "``bn_scale_shift``" in sys.modules[SCALE_SHIFT.rules[0].rewrite.__module__].__doc__


def test_densenet_blocks_fuse_their_scale_shift_and_relu_and_match_onnxruntime():
    """concat -> batch_norm -> relu -> conv (pre-activation): one fused kernel for the batch norm and
    the relu at -O2, results as onnxruntime's."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("g", rng.uniform(0.5, 2, 8)), ("b", rng.standard_normal(8)), ("m", rng.standard_normal(8)),
        ("v", rng.uniform(0.5, 2, 8)), ("w", rng.standard_normal((4, 8, 3, 3)))]]
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"], epsilon=1e-5),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 9, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 9, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    exe = relaxpack.build(relaxpack.from_onnx(model), opt_level=2)
    session = onnxruntime_session(model)
    vm = VirtualMachine(exe)
    for batch in (1, 2):
        feeds = {"x": rng.standard_normal((batch, 4, 9, 7)).astype(np.float32)}
        diffs = compare_outputs(["y"], vm.run(feeds), session.run(None, feeds), 1e-5, 1e-5)
        assert all(d.passed for d in diffs), diffs
    assert exe.kernel_call_count() == 3     # concat, the fused scale/shift/relu, the conv
