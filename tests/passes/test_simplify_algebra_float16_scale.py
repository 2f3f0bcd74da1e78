"""SimplifyAlgebra's fold_scale_into_weight on float16: a power-of-two factor folds into the
weight (rounding commutes with it), any other factor, or one that overflows the weight, stays."""

from __future__ import annotations

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

X = 'x: R.Tensor(("n", 4), "float16")'
W = '[[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.25, 8.0], [2.0, 2.0, -2.0, 1.0], [0.0, 1.0, 3.0, -4.0]]'
HALF_W = '[[0.5, 1.0, 1.5, 2.0], [-0.5, 0.25, 0.125, 4.0], [1.0, 1.0, -1.0, 0.5], [0.0, 0.5, 1.5, -2.0]]'


def scaled(factor: str, weight: str = W) -> str:
    """bias + x @ W (the bias first, as torch.onnx writes it), split in heads, times ``factor``."""
    return program(X, '("n", 2, 2)', f"""
lv = R.matmul(x, R.const({weight}, "float16"))
lv1 = R.add(R.const([0.5, -1.0, 2.0, 0.25], "float16"), lv)
lv2 = R.reshape(lv1, R.shape([n, 2, 2]))
lv3 = R.multiply(lv2, R.const({factor}, "float16"))
return lv3
""", dtype="float16")


def test_a_power_of_two_folds_into_a_float16_weight_and_bias():
    expected = program(X, '("n", 2, 2)', f"""
lv = R.matmul(x, R.const({HALF_W}, "float16"))
lv1 = R.add(lv, R.const([0.25, -0.5, 1.0, 0.125], "float16"))
lv3 = R.reshape(lv1, R.shape([n, 2, 2]))
return lv3
""", dtype="float16")
    mod, out = assert_rewrites(with_dce(simplify_algebra), scaled("0.5"), expected)
    # round(x @ W) * 2**-1 is round(x @ (W * 2**-1)) outside float16's subnormal range: bit for bit
    assert_same_results(mod, out, [{"n": 1}, {"n": 5}, {"n": 64}], rtol=0, atol=0)


def test_other_float16_factors_stay():
    for factor, reason in (("0.3", "the float16 factor 0.300048828125 is not a power of two"),
                           ("2.0", "the float16 weight or bias times the factor overflows")):
        weight = W.replace("8.0", "60000.0")
        text = scaled(factor, weight)
        assert_unchanged(simplify_algebra, text)
        assert dict(explain(parse(text), "fold_scale_into_weight"))["lv3"] == reason
