"""FoldActivationScales (passes/fold_activation_scales.py): HardSigmoid's alpha and beta and
HardSwish's 1/6 folded into constant weights. Before / after in the text format, what is kept and
why, and the contract of these float rewrites: the results within float32 rounding of a float64
run of the program before the pass (the bound of docs/design-notes.md, "FoldActivationScales")."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.fold_activation_scales import fold_activation_scales
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, ops_of, program, random_inputs, run_pass, with_dce

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)         # a 3x3 conv, 3 -> 4 channels (OIHW)
B = RNG.standard_normal(4).astype(np.float32)
WR = RNG.standard_normal((5, 4, 1, 1)).astype(np.float32)        # its 1x1 reader, 4 -> 5
BR = RNG.standard_normal(5).astype(np.float32)
X = 'x: R.Tensor(("n", 3, 6, 7), "float32")'
HSIG = ("hard_sigmoid", 0.2, 0.5)
SHAPES = [{"n": 1}, {"n": 3}, {"n": 0}]


def _c(a: np.ndarray) -> str:
    return f'R.const({a.tolist()!r}, "{a.dtype}")'


def _times(a: np.ndarray, f: float, plus: float = 0.0) -> np.ndarray:
    return (a.astype(np.float64) * f + plus).astype(a.dtype)


def _sixth(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) / 6).astype(a.dtype)


def _float64(text: str) -> str:
    return text.replace('"float32"', '"float64"')


def assert_within_rounding(before_text: str, after, dims_list=SHAPES, rtol=2e-6):
    """``after`` (float32) against the program before the pass run in float64 on the same inputs:
    each output within ``rtol`` of the reference's largest magnitude, as float32 rounding of
    these short sums allows (the unfolded program is held to the same bound)."""
    before = parse(before_text)
    vm_ref = VirtualMachine(relaxpack.build(parse(_float64(before_text)), opt_level=0))
    vm_before = VirtualMachine(relaxpack.build(before, opt_level=0))
    vm_after = VirtualMachine(relaxpack.build(after, opt_level=0))
    for dims in dims_list:
        inputs = random_inputs(before, dims, seed=1)
        ref = vm_ref.run({k: v.astype(np.float64) for k, v in inputs.items()})
        for vm in (vm_before, vm_after):
            got = vm.run(inputs)
            for name, want in ref.items():
                want, value = np.asarray(want), np.asarray(got[name])
                assert value.shape == want.shape and value.dtype == np.float32
                scale = float(np.max(np.abs(want))) if want.size else 0.0
                np.testing.assert_allclose(value, want, rtol=0, atol=rtol * max(scale, 1.0))


# ---------------------------------------------------------------- HardSigmoid


def test_a_conv_hard_sigmoid_is_a_clip_of_the_affine_weights():
    before = program(X, '("n", 4, 6, 7)', f"""
lv = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation={HSIG!r})
return lv
""")
    expected = program(X, '("n", 4, 6, 7)', f"""
lv = R.nn.conv_bias_act(x, {_c(_times(W, 0.2))}, {_c(_times(B, 0.2, 0.5))}, padding=1, activation=("clip", 0.0, 1.0))
return lv
""")
    _, out = assert_rewrites(with_dce(fold_activation_scales), before, expected)
    assert_within_rounding(before, out)


def test_a_gemm_hard_sigmoid_with_a_broadcast_bias():
    w = RNG.standard_normal((7, 3)).astype(np.float32)
    b = RNG.standard_normal((1, 3)).astype(np.float32)
    params = 'x: R.Tensor(("n", 7), "float32")'
    before = program(params, '("n", 3)', f"""
lv = R.nn.gemm(x, {_c(w)}, {_c(b)}, activation=["hard_sigmoid", 0.25, -0.5])
return lv
""")
    expected = program(params, '("n", 3)', f"""
lv = R.nn.gemm(x, {_c(_times(w, 0.25))}, {_c(_times(b, 0.25, -0.5))}, activation=("clip", 0.0, 1.0))
return lv
""")
    _, out = assert_rewrites(with_dce(fold_activation_scales), before, expected)
    assert_within_rounding(before, out)


SE_X = 'x: R.Tensor(("n", 5, 4, 6), "float32")'
W1 = RNG.standard_normal((6, 3)).astype(np.float32)
B1 = RNG.standard_normal(3).astype(np.float32)
W2 = RNG.standard_normal((3, 6)).astype(np.float32)
B2 = RNG.standard_normal(6).astype(np.float32)


def _se(data: str, w1, b1, w2, b2, act1, act2, name: str = "y") -> str:
    return (f'{name} = R.nn.squeeze_excite({data}, {_c(w1)}, {_c(b1)}, {_c(w2)}, {_c(b2)}, act1={act1!r}, '
            f'act2={act2!r}, data_layout="NHWC")')


@pytest.mark.parametrize("act1", ["relu", ("hard_sigmoid", 1 / 6, 0.5)], ids=str)
def test_squeeze_excite_hard_sigmoids_fold_into_their_fc(act1):
    clip = ("clip", 0.0, 1.0)
    before = program(SE_X, '("n", 5, 4, 6)', f"{_se('x', W1, B1, W2, B2, act1, HSIG)}\nreturn y")
    w1, b1 = (W1, B1) if act1 == "relu" else (_times(W1, 1 / 6), _times(B1, 1 / 6, 0.5))
    expected = program(SE_X, '("n", 5, 4, 6)', f"""
{_se('x', w1, b1, _times(W2, 0.2), _times(B2, 0.2, 0.5), act1 if act1 == "relu" else clip, clip)}
return y
""")
    _, out = assert_rewrites(with_dce(fold_activation_scales), before, expected)
    assert_within_rounding(before, out, [{"n": 1}, {"n": 2}])


# ---------------------------------------------------------------- HardSwish's 1/6


@pytest.mark.parametrize("reader", ["conv_bias_act", "conv"])
def test_hard_swish_sixth_into_the_reading_conv(reader):
    """The sixfold HardSwish and the reader's weight over 6 (a padded reader: its zero padding is
    six times zero)."""
    bias = f", {_c(BR)}" if reader == "conv_bias_act" else ""
    act = ', activation="relu"' if reader == "conv_bias_act" else ""
    before = program(X, '("n", 5, 8, 9)', f"""
lv = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="hard_swish")
lv1 = R.nn.{reader}(lv, {_c(WR)}{bias}, padding=1{act})
return lv1
""")
    expected = program(X, '("n", 5, 8, 9)', f"""
lv = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="hard_swish6")
lv1 = R.nn.{reader}(lv, {_c(_sixth(WR))}{bias}, padding=1{act})
return lv1
""")
    _, out = assert_rewrites(with_dce(fold_activation_scales), before, expected)
    assert_within_rounding(before, out)


def test_hard_swish_sixth_into_a_gemm():
    w = RNG.standard_normal((7, 3)).astype(np.float32)
    params = 'x: R.Tensor(("n", 3, 6, 7), "float32")'
    before = program(params, '("n", 4, 6, 3)', f"""
lv = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="hard_swish")
lv1 = R.nn.gemm(lv, {_c(w)})
return lv1
""")
    expected = program(params, '("n", 4, 6, 3)', f"""
lv = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="hard_swish6")
lv1 = R.nn.gemm(lv, {_c(_sixth(w))})
return lv1
""")
    _, out = assert_rewrites(with_dce(fold_activation_scales), before, expected)
    assert_within_rounding(before, out)


def test_a_mobilenet_v3_block_takes_every_fold():
    """Expand (HardSwish) -> depthwise (HardSwish) -> SE (ReLU, HardSigmoid) -> project, channels
    last: the expand's 1/6 into the depthwise weight, the depthwise's through the SE into its first
    weight and the project's, the gate's alpha and beta into the SE's second weight."""
    we = RNG.standard_normal((1, 1, 3, 6)).astype(np.float32)       # HWIO
    be = RNG.standard_normal(6).astype(np.float32)
    wd = RNG.standard_normal((3, 3, 1, 6)).astype(np.float32)
    bd = RNG.standard_normal(6).astype(np.float32)
    wp = RNG.standard_normal((1, 1, 6, 4)).astype(np.float32)
    bp = RNG.standard_normal(4).astype(np.float32)
    params = 'x: R.Tensor(("n", 5, 4, 3), "float32")'
    nhwc = 'data_layout="NHWC"'
    def body(we_, wd_, w1_, w2_, b2_, wp_, swish, act2):
        return f"""
lv = R.nn.conv_bias_act(x, {_c(we_)}, {_c(be)}, activation={swish!r}, {nhwc})
lv1 = R.nn.conv_bias_act(lv, {_c(wd_)}, {_c(bd)}, padding=1, groups=6, activation={swish!r}, {nhwc})
{_se('lv1', w1_, B1, w2_, b2_, "relu", act2)}
lv2 = R.nn.conv_bias_act(y, {_c(wp_)}, {_c(bp)}, {nhwc})
return lv2
"""
    before = program(params, '("n", 5, 4, 4)', body(we, wd, W1, W2, B2, wp, "hard_swish", HSIG))
    expected = program(params, '("n", 5, 4, 4)', body(we, _sixth(wd), _sixth(W1), _times(W2, 0.2),
                                                      _times(B2, 0.2, 0.5), _sixth(wp), "hard_swish6",
                                                      ("clip", 0.0, 1.0)))
    _, out = assert_rewrites(with_dce(fold_activation_scales), before, expected)
    assert ops_of(out) == ["nn.conv_bias_act", "nn.conv_bias_act", "nn.squeeze_excite", "nn.conv_bias_act"]
    assert_within_rounding(before, out, [{"n": 1}, {"n": 2}])


def test_what_is_kept_and_why():
    wr = _c(WR)
    body = f"""
a = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="hard_swish")
a1 = R.nn.conv_bias_act(a, {wr})
a2 = R.nn.conv_bias_act(a, {wr})
b = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="hard_swish")
b1 = R.nn.conv_bias_act(b, w)
c = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="relu")
c1 = R.nn.conv_bias_act(c, {wr})
d = R.nn.conv_bias_act(x, {_c(W)}, padding=1, activation={HSIG!r})
e = R.nn.conv_bias_act(x, {_c(W)}, bias, padding=1, activation={HSIG!r})
s = R.add(a1, a2)
s1 = R.add(s, b1)
s2 = R.add(s1, c1)
s3 = R.add(d, e)
t = R.concat((s2, s3), axis=1)
return t
"""
    params = f'{X}, w: R.Tensor((5, 4, 1, 1), "float32"), bias: R.Tensor((4,), "float32")'
    mod = parse(program(params, '("n", 9, 6, 7)', body))
    out = run_pass(with_dce(fold_activation_scales), mod)
    assert "hard_swish6" not in str(out) and '"clip"' not in str(out)
    sixth = dict(explain(mod, "hard_swish_sixth_into_conv"))
    assert sixth["a1"] == "the HardSwish's result a is used twice"
    assert sixth["b1"] is not None and "weight" in sixth["b1"]
    assert sixth["c1"] == "the producer's activation is 'relu', not a HardSwish"
    sigmoid = dict(explain(mod, "hard_sigmoid_into_weights"))
    assert sigmoid["d"] == "the activation HardSigmoid has no bias to take its beta"
    assert sigmoid["e"] == "the weight or bias before activation is not a constant"


def test_float16_and_exact_products_are_kept():
    params = 'x: R.Tensor(("n", 3, 6, 7), "float16")'
    body = f"""
lv = R.nn.conv_bias_act(x, {_c(W.astype(np.float16))}, {_c(B.astype(np.float16))}, padding=1, activation="hard_swish")
lv1 = R.nn.conv_bias_act(lv, {_c(WR.astype(np.float16))}, padding=1, activation={HSIG!r})
return lv1
"""
    mod = parse(program(params, '("n", 5, 8, 9)', body, dtype="float16"))
    out = run_pass(with_dce(fold_activation_scales), mod)
    assert "hard_swish6" not in str(out) and '"clip"' not in str(out)
    assert dict(explain(mod, "hard_sigmoid_into_weights"))["lv1"] == "the result is float16, not float32/float64"


def test_a_returned_hard_swish_keeps_its_values():
    """A HardSwish the function also returns (``check``'s exposed intermediates) is a second use:
    it stays a HardSwish, its reader's weight as it was."""
    text = program(X, '("n", 5, 6, 7)', f"""
lv = R.nn.conv_bias_act(x, {_c(W)}, {_c(B)}, padding=1, activation="hard_swish")
lv1 = R.nn.conv_bias_act(lv, {_c(WR)})
return lv1
""").replace('-> R.Tensor(("n", 5, 6, 7), "float32")',
             '-> R.Tuple(R.Tensor(("n", 4, 6, 7), "float32"), R.Tensor(("n", 5, 6, 7), "float32"))')
    mod = parse(text.replace("return lv1", "return (lv, lv1)"))
    out = run_pass(with_dce(fold_activation_scales), mod)
    assert "hard_swish6" not in str(out)
    assert dict(explain(mod, "hard_swish_sixth_into_conv"))["lv1"] == "the HardSwish's result lv is used twice"
