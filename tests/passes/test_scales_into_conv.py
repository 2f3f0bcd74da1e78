"""SimplifyAlgebra's quantizer-scale folds into float convs (passes/scales_into_conv.py): before /
after in the text format, the numerical check, and every kept case with its reason."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

X = 'x: R.Tensor(("n", 2, 5, 7), "float32")'
OUT = '("n", 3, 5, 7)'
W = ("R.const([[[[0.5]], [[-1.0]]], [[[0.25]], [[2.0]]], [[[-0.75]], [[1.5]]]], \"float32\")")
B = 'R.const([0.5, -1.0, 2.0], "float32")'


def _const_text(values: np.ndarray) -> str:
    return f'R.const({values.tolist()}, "{values.dtype}")'


def _over(values: list, c: float) -> str:
    return _const_text((np.asarray(values, np.float64) / c).astype(np.float32))


def _times(values: list, c: float) -> str:
    return _const_text((np.asarray(values, np.float64) * c).astype(np.float32))


W_VALUES = [[[[0.5]], [[-1.0]]], [[[0.25]], [[2.0]]], [[[-0.75]], [[1.5]]]]
B_VALUES = [0.5, -1.0, 2.0]


@pytest.mark.parametrize("activation", [None, "relu"])
def test_output_divide_folds_into_weight_and_bias(activation):
    act = "" if activation is None else f', activation="{activation}"'
    before = program(X, OUT, f"""
lv = R.nn.conv_bias_act(x, {W}, {B}{act})
lv1 = R.divide(lv, R.const(0.3, "float32"))
return lv1
""")
    expected = program(X, OUT, f"""
lv = R.nn.conv_bias_act(x, {_over(W_VALUES, float(np.float32(0.3)))}, {_over(B_VALUES, float(np.float32(0.3)))}{act})
return lv
""")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}], rtol=1e-6, atol=1e-6)


def test_input_scale_folds_into_weight():
    """The scale folds through a padded, strided conv: its zero padding scales to zero."""
    before = program(X, '("n", 3, 4, 5)', f"""
lv = R.multiply(R.const(0.125, "float32"), x)
lv1 = R.nn.conv_bias_act(lv, {W}, {B}, padding=1, strides=2)
return lv1
""")
    expected = program(X, '("n", 3, 4, 5)', f"""
lv1 = R.nn.conv_bias_act(x, {_times(W_VALUES, 0.125)}, {B}, padding=1, strides=2)
return lv1
""")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 2}], rtol=1e-6, atol=1e-6)


def test_a_dequantize_conv_quantize_chain_keeps_its_steps():
    """DQ -> conv -> Q with both scales folded: the quantized values agree with the unfolded
    chain's but where a sum lies within float32 rounding of a .5 tie (at most one step)."""
    body = f"""
lv = R.multiply(x, R.const(0.05, "float32"))
lv1 = R.nn.conv_bias_act(lv, {W}, {B}, padding=1)
lv2 = R.divide(lv1, R.const(0.07, "float32"))
lv3 = R.round(lv2)
lv4 = R.clip(lv3, min=-128.0, max=127.0, saturate_nan=False)
return lv4
"""
    mod = parse(program(X, '("n", 3, 7, 9)', body))
    out = with_dce(simplify_algebra)(mod)
    assert "multiply" not in out.script() and "divide" not in out.script()
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (4, 2, 5, 7)).astype(np.float32)
    want, got = (VirtualMachine(relaxpack.build(m, opt_level=0)).run({"x": x})["lv4"] for m in (mod, out))
    assert np.max(np.abs(got - want)) <= 1.0
    assert np.mean(got == want) > 0.99


def test_scales_that_do_not_fold_are_kept():
    params = X + ', w: R.Tensor((3, 2, 1, 1), "float32")'
    text = program(params, OUT, f"""
lv = R.nn.conv_bias_act(x, {W}, {B}, activation="relu")
lv1 = R.divide(lv, R.const(-0.5, "float32"))
lv2 = R.nn.conv_bias_act(x, {W}, {B}, exact=True)
lv3 = R.divide(lv2, R.const(0.5, "float32"))
lv4 = R.nn.conv_bias_act(x, {W}, {B}, activation="gelu")
lv5 = R.divide(lv4, R.const(0.5, "float32"))
lv6 = R.nn.conv_bias_act(x, w, {B})
lv7 = R.divide(lv6, R.const(0.5, "float32"))
lv8 = R.nn.conv_bias_act(x, {W}, {B})
lv9 = R.divide(lv8, R.const([[[0.5]], [[1.0]], [[2.0]]], "float32"))
lv10 = R.nn.conv_bias_act(x, {W}, {B})
lv11 = R.divide(lv10, R.const(5e-39, "float32"))
lv12 = R.nn.conv_bias_act(x, {W}, {B})
lv13 = R.divide(lv12, R.const(0.5, "float32"))
lv14 = R.add(lv12, lv13)
lv15 = R.add(lv1, lv3)
lv16 = R.add(lv15, lv5)
lv17 = R.add(lv16, lv7)
lv18 = R.add(lv17, lv9)
lv19 = R.add(lv18, lv11)
lv20 = R.add(lv19, lv14)
return lv20
""")
    assert_unchanged(simplify_algebra, text)
    reasons = dict(explain(parse(text), "fold_scales_into_conv"))
    assert reasons["lv1"] == "the divisor -0.5 is not positive and finite"
    assert reasons["lv3"].startswith("the conv is exact")
    assert reasons["lv5"] == "the conv's activation 'gelu' does not commute with a scale"
    assert reasons["lv7"] == "the conv's weight is not a constant"
    assert reasons["lv9"].startswith("the divisor has 3 elements")
    assert reasons["lv11"].startswith("the conv's weight over") and "overflows" in reasons["lv11"]
    assert reasons["lv13"].startswith("the conv output lv12 is used twice")


def test_input_scales_that_do_not_fold_are_kept():
    params = X + ', s: R.Tensor((), "float32")'
    text = program(params, OUT, f"""
lv = R.multiply(x, R.const(0.5, "float32"))
lv1 = R.nn.conv_bias_act(lv, {W}, {B})
lv2 = R.add(lv1, R.const(1.0, "float32"))
lv3 = R.multiply(x, R.const(0.0, "float32"))
lv4 = R.nn.conv_bias_act(lv3, {W}, {B})
lv5 = R.multiply(x, R.const(0.5, "float32"))
lv6 = R.nn.conv_bias_act(lv5, {W}, {B}, exact=True)
lv7 = R.multiply(x, s)
lv8 = R.nn.conv_bias_act(lv7, {W}, {B})
lv9 = R.multiply(x, R.const(1e-38, "float32"))
lv10 = R.nn.conv_bias_act(lv9, {W}, {B})
lv11 = R.nn.conv_bias_act(lv, {W}, {B})
lv12 = R.add(lv1, lv4)
lv13 = R.add(lv12, lv6)
lv14 = R.add(lv13, lv8)
lv15 = R.add(lv14, lv10)
lv16 = R.add(lv15, lv11)
return lv16
""", dims=("n",))
    assert_unchanged(simplify_algebra, text)
    reasons = dict(explain(parse(text), "fold_input_scale_into_conv"))
    assert reasons["lv1"].startswith("the scaled input lv is used twice")
    assert reasons["lv4"] == "the factor 0.0 is not finite and nonzero"
    assert reasons["lv6"] == "the conv is exact (integer sums)"
    assert reasons["lv8"].startswith("the factor s is not a constant")
    assert reasons["lv10"].startswith("the conv's weight times") and "subnormal" in reasons["lv10"]
