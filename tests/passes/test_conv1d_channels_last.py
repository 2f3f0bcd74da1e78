"""Conv1dChannelsLast: a 1-d conv whose result is only transposed to (N, L, C) writes it so
(before/after texts, numerically equal up to rounding), and the places it must not fire."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.passes.conv1d_channels_last import conv1d_channels_last

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce
from .test_convert_layout import c

RNG = np.random.default_rng(0)
W = RNG.standard_normal((12, 8, 3)).astype(np.float32)         # 8 -> 12 channels, k3
BIAS = RNG.standard_normal(12).astype(np.float32)
W2D = RNG.standard_normal((12, 8, 3, 3)).astype(np.float32)

X = 'x: R.Tensor(("n", 8, "l"), "float32")'
DIMS = ("n", "l")
STRIDED = "strides=(2,), padding=(1, 1)"
OUT = '("n", "(l + 1) // 2", 12)'

CASES = {
    # Whisper's second conv: stride 2, padded, GELU, then the transpose for the encoder
    "conv_bias_act_gelu": (OUT, f"""
lv = R.nn.conv_bias_act(x, {c(W)}, {c(BIAS)}, {STRIDED}, activation="gelu")
lv1 = R.permute_dims(lv, axes=(0, 2, 1))
return lv1
""", f"""
lv1 = R.nn.conv_bias_act(x, {c(W)}, {c(BIAS)}, {STRIDED}, activation="gelu", out_layout="NHWC")
return lv1
"""),
    # a plain conv without padding (wav2vec2's feature extractor)
    "conv_unpadded": ('("n", "(l - 3) // 2 + 1", 12)', f"""
lv = R.nn.conv(x, {c(W)}, strides=(2,))
lv1 = R.permute_dims(lv, axes=(0, 2, 1))
return lv1
""", f"""
lv1 = R.nn.conv(x, {c(W)}, strides=(2,), out_layout="NHWC")
return lv1
"""),
}


@pytest.mark.parametrize("name", CASES)
def test_conv1d_channels_last(name):
    ret, before, expected = CASES[name]
    mod, out = assert_rewrites(with_dce(conv1d_channels_last), program(X, ret, before, dims=DIMS),
                               program(X, ret, expected, dims=DIMS))
    assert_same_results(mod, out, [{"n": 1, "l": 30}, {"n": 3, "l": 17}, {"n": 2, "l": 4}, {"n": 0, "l": 9}],
                        rtol=1e-5, atol=1e-5)


UNCHANGED = {
    # the channels-first result is read by something else too: the conv would run twice
    "read_twice": (X, '("n", 12, "(l + 1) // 2")', f"""
lv = R.nn.conv_bias_act(x, {c(W)}, {c(BIAS)}, {STRIDED})
lv1 = R.permute_dims(lv, axes=(0, 2, 1))
lv2 = R.add(lv, R.permute_dims(lv1, axes=(0, 2, 1)))
return lv2"""),
    # a transpose that keeps the channels where they are (swaps batch and channels)
    "other_axes": (X, '(12, "n", "(l + 1) // 2")', f"""
lv = R.nn.conv_bias_act(x, {c(W)}, {c(BIAS)}, {STRIDED})
lv1 = R.permute_dims(lv, axes=(1, 0, 2))
return lv1"""),
    # a 2-d conv: ConvertLayout's (its entry rule weighs the region after it)
    "conv2d": ('x: R.Tensor(("n", 8, "l", "l"), "float32")', '("n", "l", "l", 12)', f"""
lv = R.nn.conv(x, {c(W2D)}, padding=(1, 1, 1, 1))
lv1 = R.permute_dims(lv, axes=(0, 2, 3, 1))
return lv1"""),
    # an integer product in float (quantized models' exact convs) keeps its layout
    "exact": (X, '("n", "(l + 1) // 2", 12)', f"""
lv = R.nn.conv(x, {c(W)}, {STRIDED}, exact=True)
lv1 = R.permute_dims(lv, axes=(0, 2, 1))
return lv1"""),
    # float16: the channels-last runner takes float32/float64 only
    "float16": ('x: R.Tensor(("n", 8, "l"), "float16")', '("n", "(l + 1) // 2", 12)', f"""
lv = R.nn.conv(x, R.const({W.tolist()}, "float16"), {STRIDED})
lv1 = R.permute_dims(lv, axes=(0, 2, 1))
return lv1"""),
}


@pytest.mark.parametrize("name", UNCHANGED)
def test_conv1d_channels_last_leaves_alone(name):
    params, ret, body = UNCHANGED[name]
    dtype = "float16" if "float16" in params else "float32"
    assert_unchanged(conv1d_channels_last, program(params, ret, body, dtype=dtype, dims=DIMS))
