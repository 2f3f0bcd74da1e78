"""ConvertLayout's cast rule: a float16 model's conv reads ``astype(permute_dims(v, to NCHW),
float32)`` of a channels-last ``v`` (ConvNeXt float16's depthwise convs after their layer norm);
channels last that is ``astype(v)``, no transpose in, so the conv runs channels last as in the
float32 model; the transpose back to channels last after it is the region's value itself. A cast of a plain channels-first value still does not start a region."""

from __future__ import annotations

import numpy as np

from relaxpack.passes.convert_layout import convert_layout

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce
from .test_convert_layout import c, hwio

RNG = np.random.default_rng(1)
DW = RNG.standard_normal((16, 1, 3, 3)).astype(np.float32)


NHWC_X = 'x: R.Tensor(("n", 9, 7, 16), "float16")'
DW_ATTRS = 'groups=16, padding=1'


def test_a_cast_of_a_transpose_out_of_channels_last_joins_the_region():
    before = program(NHWC_X, '("n", 9, 7, 16)', f"""
lv = R.permute_dims(x, axes=(0, 3, 1, 2))
lv1 = R.astype(lv, dtype="float32")
lv2 = R.nn.conv(lv1, {c(DW)}, {DW_ATTRS})
lv3 = R.astype(lv2, dtype="float16")
lv4 = R.permute_dims(lv3, axes=(0, 2, 3, 1))
return lv4
""", "float16")
    expected = program(NHWC_X, '("n", 9, 7, 16)', f"""
lv1_nhwc = R.astype(x, dtype="float32")
lv2_nhwc = R.nn.conv(lv1_nhwc, {c(hwio(DW))}, {DW_ATTRS}, data_layout="NHWC")
lv3_nhwc = R.astype(lv2_nhwc, dtype="float16")
lv4 = lv3_nhwc
return lv4
""", "float16")
    mod, out = assert_rewrites(with_dce(convert_layout), before, expected)
    # channels last the conv sums its taps in another order (float32): a float16 rounding may flip
    # by one ulp (2**-10 relative), as in any float16 region ConvertLayout makes
    assert_same_results(mod, out, [{"n": 1}, {"n": 2}], rtol=2 ** -10, atol=2 ** -24)


def test_a_cast_of_a_channels_first_value_does_not_start_a_region():
    text = program('x: R.Tensor(("n", 16, 9, 7), "float16")', '("n", 16, 9, 7)', f"""
lv1 = R.astype(x, dtype="float32")
lv2 = R.nn.conv(lv1, {c(DW)}, {DW_ATTRS})
lv3 = R.astype(lv2, dtype="float16")
return lv3
""", "float16")
    assert_unchanged(convert_layout, text)
