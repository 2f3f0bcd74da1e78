"""SinkResize: a 1x1 conv of a resized image runs before the resize (before/after
texts, numerically equal up to rounding), and the places it must not fire."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.passes.sink_resize import sink_resize

from .test_convert_layout import c, program
from .helpers import assert_rewrites, assert_same_results, assert_unchanged, with_dce

RNG = np.random.default_rng(0)
HALVE = RNG.standard_normal((4, 8, 1, 1)).astype(np.float32)        # 8 -> 4 channels, 1x1
BIAS = RNG.standard_normal(4).astype(np.float32)
DOUBLE = RNG.standard_normal((16, 8, 1, 1)).astype(np.float32)      # 8 -> 16 channels
WIDE = RNG.standard_normal((4, 8, 3, 3)).astype(np.float32)         # 3x3

X = 'x: R.Tensor(("n", 8, 5, 7), "float32")'
LINEAR = 'axes=(2, 3), scales=(2.0, 2.0), method="linear", coordinate_transformation_mode="pytorch_half_pixel"'
NEAREST = 'axes=(2, 3), scales=(2.0, 2.0), coordinate_transformation_mode="asymmetric", rounding_method="floor"'

CASES = {
    # UNet's decoder: the conv (bias included) on the small image, the resize of its 4 channels
    "linear_conv_bias": ((X, '("n", 4, 10, 14)'), f"""
lv = R.image.resize(x, R.shape([10, 14]), {LINEAR})
lv1 = R.nn.conv_bias_act(lv, {c(HALVE)}, {c(BIAS)})
return lv1
""", f"""
lv1_1 = R.nn.conv_bias_act(x, {c(HALVE)}, {c(BIAS)})
lv1 = R.image.resize(lv1_1, R.shape([10, 14]), {LINEAR})
return lv1
"""),
    # a plain conv after a nearest resize of one axis
    "nearest_conv": ((X, '("n", 4, 5, 21)'), f"""
lv = R.image.resize(x, R.shape([21]), axes=(3,), scales=(3.0,), coordinate_transformation_mode="asymmetric")
lv1 = R.nn.conv(lv, {c(HALVE)})
return lv1
""", f"""
lv1_1 = R.nn.conv(x, {c(HALVE)})
lv1 = R.image.resize(lv1_1, R.shape([21]), axes=(3,), scales=(3.0,), coordinate_transformation_mode="asymmetric")
return lv1
"""),
}


@pytest.mark.parametrize("name", CASES)
def test_sink_resize(name):
    (params, ret), before, expected = CASES[name]
    mod, out = assert_rewrites(with_dce(sink_resize), program(params, ret, before), program(params, ret, expected))
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}, {"n": 0}])


UNCHANGED = {
    "activation": ('("n", 4, 10, 14)', f"""
lv = R.image.resize(x, R.shape([10, 14]), {LINEAR})
lv1 = R.nn.conv_bias_act(lv, {c(HALVE)}, {c(BIAS)}, activation="relu")
return lv1"""),
    "kernel_3x3": ('("n", 4, 10, 14)', f"""
lv = R.image.resize(x, R.shape([10, 14]), {NEAREST})
lv1 = R.nn.conv(lv, {c(WIDE)}, padding=1)
return lv1"""),
    "more_channels": ('("n", 16, 10, 14)', f"""
lv = R.image.resize(x, R.shape([10, 14]), {NEAREST})
lv1 = R.nn.conv(lv, {c(DOUBLE)})
return lv1"""),
    "cubic": ('("n", 4, 10, 14)', f"""
lv = R.image.resize(x, R.shape([10, 14]), axes=(2, 3), scales=(2.0, 2.0), method="cubic")
lv1 = R.nn.conv(lv, {c(HALVE)})
return lv1"""),
    "resize_read_twice": ('("n", 4, 10, 14)', f"""
lv = R.image.resize(x, R.shape([10, 14]), {NEAREST})
lv1 = R.nn.conv(lv, {c(HALVE)})
lv2 = R.add(lv1, R.sum(lv, axis=[1], keepdims=True))
return lv2"""),
    "channels_resized": ('("n", 4, 5, 7)', f"""
lv = R.image.resize(x, R.shape([16]), axes=(1,), scales=(2.0,))
lv1 = R.nn.conv(lv, {c(RNG.standard_normal((4, 16, 1, 1)).astype(np.float32))})
return lv1"""),
    "extrapolating": ('("n", 4, 10, 14)', f"""
lv = R.image.resize(x, R.shape([10, 14]), axes=(2, 3), scales=(2.0, 2.0), roi=(0.0, 0.0, 1.0, 1.0), method="linear", coordinate_transformation_mode="tf_crop_and_resize")
lv1 = R.nn.conv(lv, {c(HALVE)})
return lv1"""),
}


@pytest.mark.parametrize("name", UNCHANGED)
def test_sink_resize_leaves_alone(name):
    ret, body = UNCHANGED[name]
    assert_unchanged(sink_resize, program(X, ret, body))
