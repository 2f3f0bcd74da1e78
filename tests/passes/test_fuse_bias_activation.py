"""FuseBiasActivation: nn.gemm and nn.conv_bias_act from their unfused forms;
and the three rule-table passes together on the example and torch models."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples.onnx_models import small_cnn
from relaxpack.ir import parse
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.passes import PassContext, Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.fold_batch_norm import fold_batch_norm
from relaxpack.passes.fuse_bias_activation import RULES, fuse_bias_activation
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_same_results, kernel_calls, ops_of, program, with_dce

MODELS = Path(__file__).resolve().parents[1] / "models"


MM = ('x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 3), "float32"), b: R.Tensor((3,), "float32")',
      '("n", 3)')
CONV = ('x: R.Tensor(("n", 2, 5, 5), "float32"), w: R.Tensor((3, 2, 3, 3), "float32")', '("n", 3, 5, 5)')
CONV_BIAS = 'R.const([[[[0.5]], [[-1.0]], [[2.0]]]], "float32")'

CASES = {
    "matmul_bias": (MM, """
lv = R.matmul(x, w)
lv1 = R.add(lv, b)
return lv1
""", """
lv = R.nn.gemm(x, w, b)
return lv
"""),
    "bias_first_then_relu": (MM, """
lv = R.matmul(x, w)
lv1 = R.add(b, lv)
lv2 = R.nn.relu(lv1)
return lv2
""", """
lv = R.nn.gemm(x, w, b, activation="relu")
return lv
"""),
    "matmul_gelu_no_bias": (MM, """
lv = R.matmul(x, w)
lv1 = R.nn.gelu(lv, approximate="tanh")
return lv1
""", """
lv = R.nn.gemm(x, w, activation="gelu_tanh")
return lv
"""),
    "gemm_clip": (MM, """
lv = R.matmul(x, w)
lv1 = R.add(lv, b)
lv2 = R.clip(lv1, min=0.0, max=6.0)
return lv2
""", """
lv = R.nn.gemm(x, w, b, activation=("clip", 0.0, 6.0))
return lv
"""),
    "gemm_leakyrelu_full_bias": (
        ('x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 3), "float32"), '
         'b: R.Tensor(("n", 3), "float32")', '("n", 3)'), """
lv = R.matmul(x, w)
lv1 = R.add(lv, b)
lv2 = R.nn.leakyrelu(lv1, alpha=0.2)
return lv2
""", """
lv = R.nn.gemm(x, w, b, activation=("leakyrelu", 0.2))
return lv
"""),
    "conv_bias_relu": (CONV, f"""
lv = R.nn.conv(x, w, padding=1)
lv1 = R.add(lv, {CONV_BIAS})
lv2 = R.nn.relu(lv1)
return lv2
""", """
lv = R.nn.conv_bias_act(x, w, R.const([0.5, -1.0, 2.0], "float32"), padding=1, activation="relu")
return lv
"""),
    "conv_bias_silu": (CONV, """
lv = R.nn.conv(x, w, padding=1)
lv1 = R.add(R.const([[[0.5]], [[-1.0]], [[2.0]]], "float32"), lv)
lv2 = R.nn.silu(lv1)
return lv2
""", """
lv = R.nn.conv_bias_act(x, w, R.const([0.5, -1.0, 2.0], "float32"), padding=1, activation="silu")
return lv
"""),
    "conv_bias_hard_swish": (CONV, f"""
lv = R.nn.conv(x, w, padding=1)
lv1 = R.add(lv, {CONV_BIAS})
lv2 = R.nn.hard_swish(lv1)
return lv2
""", """
lv = R.nn.conv_bias_act(x, w, R.const([0.5, -1.0, 2.0], "float32"), padding=1, activation="hard_swish")
return lv
"""),
    "conv_hard_sigmoid_no_bias": (CONV, """
lv = R.nn.conv(x, w, padding=1)
lv1 = R.nn.hard_sigmoid(lv, alpha=0.25, beta=0.5)
return lv1
""", """
lv = R.nn.conv_bias_act(x, w, padding=1, activation=("hard_sigmoid", 0.25, 0.5))
return lv
"""),
    "conv_sigmoid_no_bias": (CONV, """
lv = R.nn.conv(x, w, padding=1)
lv1 = R.sigmoid(lv)
return lv1
""", """
lv = R.nn.conv_bias_act(x, w, padding=1, activation="sigmoid")
return lv
"""),
    "conv_scalar_bias_tanh": (CONV, """
lv = R.nn.conv(x, w, padding=1)
lv1 = R.add(lv, R.const([0.25], "float32"))
lv2 = R.tanh(lv1)
return lv2
""", """
lv = R.nn.conv_bias_act(x, w, R.const([0.25, 0.25, 0.25], "float32"), padding=1, activation="tanh")
return lv
"""),
}


@pytest.mark.parametrize("name", CASES)
def test_rewrites(name):
    (params, ret), before, expected = CASES[name]
    mod, out = assert_rewrites(with_dce(fuse_bias_activation), program(params, ret, before), program(params, ret, expected))
    assert kernel_calls(out) == 1
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}], rtol=0, atol=0)     # the same kernels, in place


def test_integer_gemm_with_relu():
    params = 'x: R.Tensor(("n", 4), "int32"), w: R.Tensor((4, 3), "int32")'
    mod, out = assert_rewrites(with_dce(fuse_bias_activation), program(params, '("n", 3)', """
lv = R.matmul(x, w)
lv1 = R.add(lv, R.const([1, 2, 3], "int32"))
lv2 = R.nn.relu(lv1)
return lv2
""", "int32"), program(params, '("n", 3)', """
lv = R.nn.gemm(x, w, R.const([1, 2, 3], "int32"), activation="relu")
return lv
""", "int32"))
    assert_same_results(mod, out, [{"n": 2}, {"n": 5}], rtol=0, atol=0)


def test_what_does_not_fuse_and_why():
    params = ('x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 3), "float32"), '
              'b: R.Tensor((2, 1, 3), "float32"), y: R.Tensor(("n", 2, 5, 5), "float32"), '
              'cw: R.Tensor((3, 2, 3, 3), "float32"), cb: R.Tensor((1, 3, 1, 1), "float32")')
    text = program(params, '("n", 3)', """
lv = R.matmul(x, w)
lv1 = R.add(lv, R.const([1.0, 2.0, 3.0], "float32"))
lv2 = R.nn.relu(lv)
lv3 = R.matmul(x, w)
lv4 = R.add(lv3, b)
lv5 = R.nn.conv(y, cw, padding=1)
lv6 = R.add(lv5, cb)
lv7 = R.nn.conv(y, cw, padding=1)
lv8 = R.add(lv7, R.const(np_ones, "float32"))
lv9 = R.matmul(x, w)
lv10 = R.nn.relu(lv9)
lv11 = R.nn.relu(lv10)
lv12 = R.add(lv1, lv2)
lv13 = R.sum(lv4, axis=0)
lv14 = R.add(lv12, lv13)
lv15 = R.add(lv6, lv8)
lv16 = R.sum(lv15, axis=(1, 2, 3))
lv17 = R.expand_dims(lv16, axis=1)
lv18 = R.add(lv14, lv17)
lv19 = R.add(lv18, lv11)
return lv19
""").replace("np_ones", str(np.ones((1, 1, 5, 5)).tolist()))
    mod = parse(text)
    out = Sequential([fuse_bias_activation, dead_code_elimination])(mod)
    # only relu(matmul) at lv10 fuses; relu(gemm with relu) stays
    assert ops_of(out).count("nn.gemm") == 1 and ops_of(out).count("nn.relu") == 2
    reasons = dict(explain(mod, "fuse_matmul_bias"))
    assert reasons["lv1"] == "the matmul output lv is used twice"
    assert reasons["lv4"] == ("the result's shape (2, n, 3) is not provably the shape (n, 3) of lv3 "
                              "(the op broadcasts)")
    reasons = dict(explain(mod, "fuse_conv_bias"))
    assert reasons["lv6"] == "the bias cb is not a constant"
    assert reasons["lv8"] == "the bias of shape (1, 1, 5, 5) is not one value per output channel (3) of the R.nn.conv"
    reasons = dict(explain(out, "fuse_activation"))
    assert reasons["lv2"] == "the input lv is used twice"
    assert reasons["lv11"] == "the R.nn.gemm already applies 'relu'"
    assert_same_results(mod, out, [{"n": 1}, {"n": 2}])


def test_nan_saturating_clip_does_not_fuse():
    """A quantizer's clip (saturate_nan) stays apart: the fused activation propagates NaN."""
    params, ret = MM
    mod = parse(program(params, ret, """
lv = R.matmul(x, w)
lv1 = R.clip(lv, min=0.0, max=6.0, saturate_nan=True)
return lv1
"""))
    assert "nn.gemm" not in ops_of(fuse_bias_activation(mod))
    assert dict(explain(mod, "fuse_activation"))["lv1"] == "the clip saturates NaN; a fused clip propagates it"


def test_rules_are_documented():
    doc = sys.modules["relaxpack.passes.fuse_bias_activation"].__doc__
    assert [r.name for r in RULES.rules] == ["fuse_matmul_bias", "fuse_conv_bias", "fuse_activation"]
    for rule in RULES.rules:
        assert f"``{rule.name}``" in doc and rule.summary


# ---------------------------------------------------------------- the three passes on models

PIPELINE = [fold_batch_norm, simplify_algebra, fuse_bias_activation, dead_code_elimination]


def optimize(mod):
    with PassContext(opt_level=2, check_well_formed=True) as ctx:
        out = Sequential(PIPELINE)(mod)
    assert ctx.history == [p.name for p in PIPELINE]
    return out


def feeds_for(name, rng):
    if name == "gpt_small":
        return [{"ids": rng.integers(0, 128, (b, s)).astype(np.int64)} for b, s in [(1, 5), (2, 16)]]
    return [{"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)} for b in (1, 3)]


@pytest.mark.parametrize("name, before, after", [
    ("small_cnn", 13, 6),         # conv+bias+bn+relu twice, matmul+bias
    ("resnet_small", 32, 18),     # the exporter folded its batch norms; conv+bias(+relu)
    ("gpt_small", 66, 48),        # GELU's five ops, matmul+bias (+gelu); reshapes of split pieces: views
])
def test_models_use_fewer_kernel_calls_and_match_onnxruntime(name, before, after):
    model = small_cnn() if name == "small_cnn" else onnx.load(str(MODELS / f"{name}.onnx"))
    mod = relaxpack.from_onnx(model)
    out = optimize(mod)
    assert (kernel_calls(mod), kernel_calls(out)) == (before, after)
    assert_structural_equal(optimize(out), out)       # one run is a fixed point
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    vm = VirtualMachine(relaxpack.build(out, opt_level=0))
    for feeds in feeds_for(name, np.random.default_rng(5)):
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-4, 1e-4)
        assert all(d.passed for d in diffs), diffs
