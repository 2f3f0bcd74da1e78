"""DropNaNSaturation (passes/drop_nan_saturation.py): a NaN-saturating clip of a value proven finite
(analysis/magnitude.py) clips only; where NaN or an infinity may reach it (a function input, a
divisor with a zero, a weight computed at run time, a bound past the limit) it keeps its NaN check.
Each case runs before and after on values at the ties, the bounds, past 2**24, NaN and infinities
(the first quantizer saturates them): the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.analysis.float_values import Definitions
from relaxpack.passes.analysis.magnitude import LIMIT, magnitude_bound
from relaxpack.passes.drop_nan_saturation import drop_nan_saturation
from relaxpack.runtime import VirtualMachine

from .helpers import program, run_pass
from .test_quantize_rules import _values

PARAMS = 'x: R.Tensor(("n", 2, 3, 5), "float32")'
RET = '("n", 2, 3, 5)'
W = np.array([[[[1.0, -2.0, 3.0]] * 3, [[0.0, 4.0, -1.0]] * 3], [[[2.0, 2.0, -5.0]] * 3, [[1.0, 0.0, 1.0]] * 3]])


def c(values, dtype="float32") -> str:
    return f'R.const({np.asarray(values, dtype).tolist()}, "{dtype}")'


#: x quantized to uint8 (NaN saturated: lv2 is finite whatever x is), an exact conv of it, requantized
QUANTIZED = f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
lv3 = R.nn.conv_bias_act(lv2, {c(W)}, {c([3.0, -7.0])}, padding=1, exact=True)
lv4 = R.multiply(lv3, R.const(0.0625, "float32"))
lv5 = R.round(lv4)
lv6 = R.clip(lv5, min=0.0, max=255.0, saturate_nan=True)
return lv6
"""

#: the same as a QDQ model computes it: dequantized, a float conv, quantized again with a zero point
DEQUANTIZED = f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="uint8")
lv4 = R.astype(lv3, dtype="float32")
lv5 = R.subtract(lv4, R.const(128.0, "float32"))
lv6 = R.multiply(lv5, R.const(0.25, "float32"))
lv7 = R.nn.conv_bias_act(lv6, {c(W / 7)}, {c([0.5, -0.25])}, padding=1, activation="relu")
lv8 = R.divide(lv7, R.const(0.125, "float32"))
lv9 = R.round(lv8)
lv10 = R.add(lv9, R.const(3.0, "float32"))
lv11 = R.clip(lv10, min=0.0, max=255.0, saturate_nan=True)
lv12 = R.nn.max_pool(lv11, pool_size=3, padding=1)
lv13 = R.clip(lv12, min=0.0, max=128.0, saturate_nan=True)
return lv13
"""


def _clips(mod) -> list[bool]:
    """Each clip's saturate_nan, in binding order."""
    return [b.value.attrs["saturate_nan"] for block in mod["main"].body.blocks for b in block.bindings
            if getattr(getattr(b.value, "op", None), "name", None) == "clip"]


def _inputs() -> np.ndarray:
    values = _values()
    return np.resize(values, (len(values) // 30 + 1) * 30).reshape(-1, 2, 3, 5)


def _assert_same_bits(before, after):
    x = _inputs()
    want = VirtualMachine(relaxpack.build(before, opt_level=0)).run({"x": x})
    got = VirtualMachine(relaxpack.build(after, opt_level=0)).run({"x": x})
    for w, g in zip(want.values(), got.values(), strict=True):
        w, g = np.asarray(w), np.asarray(g)
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


@pytest.mark.parametrize("body, saturating", [
    (QUANTIZED, [True, False]),                         # the input's quantizer keeps it: x may be NaN
    (DEQUANTIZED, [True, False, False]),
])
def test_a_clip_of_a_finite_value_drops_its_nan_check(body, saturating):
    mod = parse(program(PARAMS, RET, body))
    out = run_pass(drop_nan_saturation, mod)
    assert _clips(out) == saturating
    assert _clips(run_pass(drop_nan_saturation, out)) == saturating         # idempotent
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, old, new", [
    ("a divisor with a zero", 'R.multiply(lv3, R.const(0.0625, "float32"))',
     f'R.divide(lv3, {c([[[[0.0625]], [[0.0]]]])})'),
    ("a product with an infinity", 'R.multiply(lv3, R.const(0.0625, "float32"))',
     f'R.multiply(lv3, {c([[[[0.0625]], [[np.inf]]]])})'),
    ("a bound past the limit", 'R.multiply(lv3, R.const(0.0625, "float32"))',
     'R.multiply(lv3, R.const(1e+30, "float32"))'),
    ("an activation that is not bounded by its input", "exact=True)", 'exact=True, activation="gelu")'),
    ("an unclipped input", "lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)",
     "lv2 = R.clip(lv1, min=-128.0, max=None, saturate_nan=True)"),
])
def test_lookalikes_keep_the_nan_check(case, old, new):
    text = program(PARAMS, RET, QUANTIZED.replace(old, new))
    assert new in text
    mod = parse(text)
    out = run_pass(drop_nan_saturation, mod)
    assert _clips(out) == [True, True], case
    _assert_same_bits(mod, out)


def test_a_weight_computed_at_run_time_keeps_the_nan_check():
    params = PARAMS + ', w: R.Tensor((2, 2, 3, 3), "float32")'
    text = program(params, RET, QUANTIZED.replace(f"lv3 = R.nn.conv_bias_act(lv2, {c(W)},",
                                                  "lv3 = R.nn.conv_bias_act(lv2, w,"))
    out = run_pass(drop_nan_saturation, parse(text))
    assert _clips(out) == [True, True]


def test_the_bound_of_a_requantized_conv():
    """max|lv2| * max_o sum|w_o| + max|bias| = 128 * 33 + 7, times the scale, plus one for the rounding."""
    mod = parse(program(PARAMS, RET, QUANTIZED))
    defs = Definitions(mod["main"])
    by_name = {b.var.name_hint: b.var for block in mod["main"].body.blocks for b in block.bindings}
    memo: dict = {}
    assert magnitude_bound(by_name["lv3"], defs, memo) == 128 * 33 + 7
    assert magnitude_bound(by_name["lv5"], defs, memo) == (128 * 33 + 7) * 0.0625 + 1
    assert magnitude_bound(by_name["lv1"], defs, memo) is None              # x / 0.25: x is any float
    assert LIMIT < float(np.finfo(np.float32).max) / 1e6


# ---------------------------------------------------------------- layer norms, matmuls, bounded functions

#: x quantized (finite whatever x is), then ``{op}`` of it, quantized again
HEAD = """
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
"""
TAIL = """
lv4 = R.divide(lv3, R.const(0.03125, "float32"))
lv5 = R.round(lv4)
lv6 = R.clip(lv5, min=-128.0, max=127.0, saturate_nan=True)
return lv6
"""
GAMMA, BETA = c([0.5, -2.0, 1.0, 3.0, 0.25]), c([0.0, 1.0, -1.0, 0.5, 2.0])
WEIGHT = c(np.arange(20).reshape(5, 4) / 7 - 1)


@pytest.mark.parametrize("op, ret, dropped", [
    (f"R.nn.layer_norm(lv2, {GAMMA}, {BETA}, axes=[-1], epsilon=1e-05)", RET, True),
    (f"R.nn.layer_norm(lv2, {GAMMA}, {BETA}, axes=[-1], epsilon=0.0)", RET, False),     # 0 / 0 on a flat row
    (f"R.nn.layer_norm(lv1, {GAMMA}, {BETA}, axes=[-1], epsilon=1e-05)", RET, False),   # NaN in, NaN out
    (f"R.nn.layer_norm(lv2, {GAMMA}, {c([0.0, np.inf, 0.0, 0.0, 0.0])}, axes=[-1], epsilon=1e-05)", RET, False),
    (f"R.matmul(lv2, {WEIGHT})", '("n", 2, 3, 4)', True),
    (f"R.matmul(lv2, {c([[0.0, np.nan, 0.0, 0.0]] * 5)})", '("n", 2, 3, 4)', False),
    ("R.matmul(lv2, R.permute_dims(lv2, axes=[0, 1, 3, 2]))", '("n", 2, 3, 3)', True),   # K = 5, static
    ("R.matmul(lv1, R.permute_dims(lv2, axes=[0, 1, 3, 2]))", '("n", 2, 3, 3)', False),
    ("R.tanh(lv2)", RET, True), ("R.erf(lv2)", RET, True), ("R.nn.softmax(lv2, axis=-1)", RET, True),
    ("R.tanh(lv1)", RET, False), ("R.nn.softmax(lv1, axis=-1)", RET, False),
    ("R.take(lv2, R.const([0, 2], \"int64\"), axis=3)", '("n", 2, 3, 2)', True),
    ("R.take(lv1, R.const([0, 2], \"int64\"), axis=3)", '("n", 2, 3, 2)', False),
    ("R.where(R.greater(lv2, R.const(0.0, \"float32\")), lv2, R.const(-3.0, \"float32\"))", RET, True),
    ("R.where(R.greater(lv2, R.const(0.0, \"float32\")), lv1, lv2)", RET, False),
    # any integer is finite as a float, even one cast from NaN
    ("R.astype(R.astype(lv1, dtype=\"int32\"), dtype=\"float32\")", RET, True),
    ("R.astype(R.greater(lv1, R.const(0.0, \"float32\")), dtype=\"float32\")", RET, True),
    ("R.astype(R.astype(lv1, dtype=\"float16\"), dtype=\"float32\")", RET, False),
])
def test_bounded_ops_of_finite_values_drop_the_nan_check(op, ret, dropped):
    body = HEAD + (f"lvp = R.permute_dims(lv2, axes=[0, 1, 3, 2])\nlv3 = R.matmul({op[9:op.index(',')]}, lvp)"
                   if "permute_dims(lv2" in op else f"lv3 = {op}") + TAIL
    mod = parse(program(PARAMS, ret, body))
    out = run_pass(drop_nan_saturation, mod)
    assert _clips(out) == [True, not dropped]
    _assert_same_bits(mod, out)


def test_a_matmul_over_a_symbolic_k_keeps_the_nan_check():
    params = 'x: R.Tensor(("n", "k"), "float32")'
    body = HEAD + "lvp = R.permute_dims(lv2, axes=[1, 0])\nlv3 = R.matmul(lv2, lvp)" + TAIL
    out = run_pass(drop_nan_saturation, parse(program(params, '("n", "n")', body, dims=("n", "k"))))
    assert _clips(out) == [True, True]
