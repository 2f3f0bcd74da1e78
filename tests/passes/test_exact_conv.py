"""The ``exact`` conv (an integer product in float, QLinearConv): no pass folds a scale, a batch
norm or a bias into it or moves it past a resize, ConvertLayout does not pick it for Winograd, and
its kernel runs a Winograd geometry by the direct fallback, giving the exact integers."""

from __future__ import annotations

import numpy as np

from relaxpack.ir import parse
from relaxpack.ir.op import get_op_def
from relaxpack.passes.core.rules import explain
from relaxpack.passes.fold_batch_norm import fold_batch_norm
from relaxpack.runtime.kernels.nn import _prepared_conv, conv_bias

from ..runtime.test_kernels_integer_exact import _reference_conv
from .helpers import assert_unchanged, program, run_pass, with_dce
from .test_fold_batch_norm import c


def _scaled(exact: bool) -> str:
    return program('x: R.Tensor(("n", 2, 4, 4), "float32")', '("n", 3, 4, 4)', f"""
lv = R.nn.conv(x, {c(np.arange(6.0).reshape(3, 2, 1, 1))}, exact={exact})
lv1 = R.add(lv, {c(np.ones((1, 3, 1, 1)))})
lv2 = R.multiply(lv1, {c([[[[0.5]], [[0.25]], [[2.0]]]])})
lv3 = R.nn.conv(x, {c(np.ones((3, 2, 1, 1)))}, exact={exact})
lv4 = R.multiply(lv3, {c(0.125)})
lv5 = R.add(lv2, lv4)
return lv5
""")


def test_nothing_folds_into_an_exact_conv():
    text = _scaled(True)
    assert_unchanged(fold_batch_norm, text)
    exact = "the R.nn.conv is exact (an integer product in float)"
    assert ("lv4", exact) in explain(parse(text), "fold_scale_weight")
    assert ("lv2", exact) in explain(parse(text), "fold_scale_through_bias")
    folded = run_pass(with_dce(fold_batch_norm), parse(_scaled(False)))     # the same without exact folds
    assert "R.multiply" not in folded.script()


def test_the_kernel_runs_a_winograd_geometry_by_sums_of_products():
    """Channels last, 3x3 stride 1, 64 channels: Winograd's plan; exact runs its fallback."""
    rng = np.random.default_rng(6)
    x = rng.integers(-255, 256, (1, 64, 12, 10))
    w = rng.integers(-40, 41, (8, 64, 3, 3))
    bias = rng.integers(-1000, 1000, 8)
    want = np.moveaxis(_reference_conv(x, w, bias, 1, 1, 1), 1, -1).astype(np.float32)
    x_nhwc = np.moveaxis(x, 1, -1).astype(np.float32).copy()
    w_nhwc = np.ascontiguousarray(w.transpose(2, 3, 1, 0)).astype(np.float32)
    attrs = {k: v for k, v in get_op_def("nn.conv").full_attrs(dict(padding=1, data_layout="NHWC")).items()
             if k != "exact"}
    plan = _prepared_conv(x_nhwc.shape, w_nhwc.shape, attrs["strides"], attrs["padding"], attrs["dilation"],
                          attrs["groups"], "NHWC")[0]
    assert plan.method == "winograd"
    out = np.empty(want.shape, np.float32)
    conv_bias(x_nhwc, w_nhwc, bias.astype(np.float32), out=out, exact=True, **attrs)
    np.testing.assert_array_equal(out, want)
