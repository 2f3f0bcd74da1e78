"""Channels-last (data_layout="NHWC") conv and pooling kernels against onnxruntime:
the inputs are given channels last (weights HWIO), the NCHW reference is transposed."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels.conv_depthwise import (PHASES_MAX_CHANNELS, PHASES_MIN_WIDTH, SLOTS_MAX_CHANNELS,
                                                      SLOTS_MIN_WIDTH, depthwise_plan)
from relaxpack.runtime.kernels.conv_nhwc import nhwc_plan, prefers_taps
from relaxpack.runtime.kernels.conv_transpose_nhwc import UNFOLD_DIRECT_MIN_WIDTH
from relaxpack.runtime.kernels.nn import conv_workspace

from .kernel_calls import op_attrs
from .test_kernels_nn import CONV_CASES, CONV_T_CASES, CONV_TOL, POOL_CASES, conv_ref, onnx_window_attrs, pool_onnx_attrs
from .test_kernels_registry import assert_close, rand, run_kernel, run_onnx, tolerance

EXTRA_CASES = [
    ((2, 32, 9, 9), (32, 1, 3, 3), dict(groups=32, strides=2, padding=1)),  # depthwise, stride 2
    ((1, 16, 6, 5), (16, 1, 3, 3), dict(groups=16)),                         # depthwise, no padding
    ((1, 3, 15, 15), (8, 3, 7, 7), dict(strides=2, padding=3)),              # ResNet's stem
    # large planes run by per-tap GEMMs ("taps"): odd sizes, padding, dilation, no padding, 1-d
    ((2, 5, 83, 81), (7, 5, 3, 3), dict(padding=1)),
    ((1, 4, 85, 90), (6, 4, 3, 5), dict(padding=(2, 1, 2, 3), dilation=(1, 2))),
    ((1, 3, 84, 84), (5, 3, 3, 3), {}),
    ((2, 3, 7000), (4, 3, 5), dict(padding=2)),
    ((1, 8, 5, 6), (12, 2, 1, 1), dict(groups=4)),                         # grouped 1x1: not the plain GEMM
    ((2, 9, 7, 11), (6, 3, 1, 1), dict(groups=3, strides=2, padding=(0, 1, 1, 0))),   # grouped 1x1 by columns
    # grouped stride-1 convs by per-tap GEMMs batched over the groups ("taps"): group widths 1 in / 2
    # out, 2, 4 (ResNeXt's) and 8 (RegNet's), odd sizes, dilation, uneven padding, no padding, 1-d,
    # batch 2 and an empty batch
    ((2, 12, 9, 11), (12, 4, 3, 3), dict(groups=3, padding=1)),
    ((1, 32, 13, 10), (32, 4, 3, 3), dict(groups=8, padding=1)),
    ((1, 16, 7, 7), (24, 8, 3, 3), dict(groups=2, padding=1)),
    ((1, 6, 11, 9), (12, 1, 3, 3), dict(groups=6, padding=1)),
    ((1, 8, 12, 15), (8, 2, 3, 5), dict(groups=4, padding=(2, 1, 0, 3), dilation=(2, 1))),
    ((2, 8, 9, 9), (8, 4, 3, 3), dict(groups=2)),
    ((2, 12, 31), (6, 4, 5), dict(groups=3, padding=2)),
    ((0, 8, 9, 9), (8, 4, 3, 3), dict(groups=2, padding=1)),
    # strided grouped convs by taps over the input's phase planes: stride 2 at even and odd sizes,
    # strides (1, 3) and (3, 2), dilation with a stride, a 4x4/4 patchify (one tap per phase), 1-d
    ((2, 16, 12, 14), (16, 4, 3, 3), dict(groups=4, strides=2, padding=1)),
    ((1, 12, 13, 11), (24, 4, 3, 3), dict(groups=3, strides=2, padding=1)),
    ((1, 8, 10, 17), (8, 2, 3, 5), dict(groups=4, strides=(1, 3), padding=(1, 2, 0, 1))),
    ((1, 8, 14, 13), (16, 4, 3, 3), dict(groups=2, strides=(3, 2), dilation=(1, 2), padding=2)),
    ((1, 8, 16, 12), (8, 4, 4, 4), dict(groups=2, strides=4)),
    ((2, 6, 23), (6, 2, 3), dict(groups=3, strides=2, padding=1)),
]


def last(a: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) -> (N, *spatial, C)."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def hwio(w: np.ndarray) -> np.ndarray:
    """(O, I, *kernel) -> (*kernel, I, O)."""
    return np.ascontiguousarray(np.moveaxis(w, (0, 1), (-1, -2)))


@pytest.mark.parametrize("data, weight, attrs", CONV_CASES + EXTRA_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_nhwc(dtype, data, weight, attrs):
    rng = np.random.default_rng(0)
    x, w = rand(rng, data, dtype), rand(rng, weight, dtype)
    expected = conv_ref(x, w, attrs, "ort" if dtype == "float32" else "ref")
    got = run_kernel("nn.conv", last(x), hwio(w), data_layout="NHWC", **attrs)
    assert_close(got, last(expected), **CONV_TOL[dtype])


# outputs of at least BIAS_ROWS_MIN_SIZE values: the bias is added to whole rows
LARGE_BIAS_CASES = [
    ((1, 16, 64, 70), (24, 16, 1, 1), {}),
    ((2, 5, 14001), (8, 5, 3), dict(strides=2, padding=1)),
    ((1, 32, 41, 60), (32, 1, 3, 3), dict(groups=32, padding=1)),
]


@pytest.mark.parametrize("data, weight, attrs", CONV_CASES[2:8] + EXTRA_CASES + LARGE_BIAS_CASES)
def test_conv_bias_act_nhwc(data, weight, attrs):
    rng = np.random.default_rng(1)
    x, w = rand(rng, data, "float32"), rand(rng, weight, "float32")
    b = rand(rng, (weight[0],), "float32")
    expected = np.maximum(conv_ref(x, w, attrs, "ort") + b.reshape(-1, *(1,) * (x.ndim - 2)), 0)
    got = run_kernel("nn.conv_bias_act", last(x), hwio(w), b, data_layout="NHWC", activation="relu", **attrs)
    assert_close(got, last(expected), **CONV_TOL["float32"])


# depthwise channels last: strides 1-3, copied into slots (below
# SLOTS_MAX_CHANNELS channels, from SLOTS_MIN_WIDTH output columns), split into
# phases or runs of C values; dilation with stride (a phase's taps a dilation
# apart), dilation equal to the stride (one phase), uneven and oversized
# padding (slots that read only padding), no padding (the taps read the input),
# 1-d and 3-d, empty batch; odd sizes
DEPTHWISE_CASES = [
    ((2, 8, 31, 29), (8, 1, 3, 3), dict(groups=8, strides=2, padding=1)),
    ((1, 5, 33, 46), (5, 1, 3, 5), dict(groups=5, strides=(1, 3), padding=(1, 2, 0, 1))),
    ((1, 6, 20, 37), (6, 1, 3, 3), dict(groups=6, strides=2, dilation=(1, 3), padding=2)),
    ((1, 4, 9, 40), (4, 1, 3, 4), dict(groups=4, strides=2, dilation=2, padding=1)),
    ((1, PHASES_MAX_CHANNELS, 9, 30), (PHASES_MAX_CHANNELS, 1, 3, 3), dict(groups=PHASES_MAX_CHANNELS, strides=2,
                                                                          padding=1)),
    ((2, 12, 7, 9), (12, 1, 3, 3), dict(groups=12, strides=2, padding=1)),
    # output widths PHASES_MIN_WIDTH (phases) and one less (runs of C values)
    ((1, 16, 9, 2 * PHASES_MIN_WIDTH - 1), (16, 1, 3, 3), dict(groups=16, strides=2, padding=1)),
    ((1, 16, 9, 2 * PHASES_MIN_WIDTH - 3), (16, 1, 3, 3), dict(groups=16, strides=2, padding=1)),
    ((1, 7, 12, 13), (7, 1, 3, 3), dict(groups=7)),
    ((1, 7, 12, 13), (7, 1, 3, 3), dict(groups=7, padding=(0, 0, 2, 1))),
    ((1, 3, 2, 30), (3, 1, 3, 3), dict(groups=3, strides=2, padding=3)),
    ((0, 8, 30, 30), (8, 1, 3, 3), dict(groups=8, strides=2, padding=1)),
    ((2, 6, 40), (6, 1, 5), dict(groups=6, strides=2, padding=2)),
    ((1, 6, 9, 31), (6, 1, 1, 1), dict(groups=6, strides=2)),
    ((1, 5, 6, 7, 30), (5, 1, 3, 2, 3), dict(groups=5, strides=(2, 1, 2), padding=1)),
    # output widths SLOTS_MIN_WIDTH (slots) and one less (runs of C values)
    ((1, 9, 5, 2 * SLOTS_MIN_WIDTH - 1), (9, 1, 3, 3), dict(groups=9, strides=2, padding=1)),
    ((1, 9, 5, 2 * SLOTS_MIN_WIDTH - 3), (9, 1, 3, 3), dict(groups=9, strides=2, padding=1)),
    ((2, 3, 1), (3, 1, 3), dict(groups=3, strides=2, padding=(3, 5))),       # slots 0 and 2 read only padding
    ((1, 4, 3, 11), (4, 1, 2, 3), dict(groups=4, strides=3, dilation=(1, 2), padding=(0, 4, 1, 0))),
]


@pytest.mark.parametrize("data, weight, attrs", DEPTHWISE_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_depthwise_nhwc(dtype, data, weight, attrs):
    """Against onnxruntime (float32) or onnx's reference evaluator, with a bias
    and ReLU6 as MobileNet runs it."""
    rng = np.random.default_rng(8)
    x, w, b = rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    expected = conv_ref(x, w, attrs, "ort" if dtype == "float32" else "ref")
    got = run_kernel("nn.conv", last(x), hwio(w), data_layout="NHWC", **attrs)
    assert_close(got, last(expected), **CONV_TOL[dtype])
    if dtype != "float16":
        biased = (expected.astype(np.float64) + b.reshape(-1, *(1,) * (x.ndim - 2))).astype(dtype)
        got = run_kernel("nn.conv_bias_act", last(x), hwio(w), b, data_layout="NHWC", activation=("clip", 0.0, 6.0),
                         **attrs)
        assert_close(got, last(np.clip(biased, 0, 6)), **CONV_TOL[dtype])


def test_depthwise_plans_split_phases_where_documented():
    """Stride-2 depthwise convs: slots below SLOTS_MAX_CHANNELS channels from SLOTS_MIN_WIDTH
    output columns (MobileNet's 96 and 144 channels at 56 and 28 columns, the zoo's 61x96 CNNs
    at 3-24 columns), phases at the slots' channel bar from PHASES_MIN_WIDTH columns, runs of C
    values otherwise (192 and 576 channels at 14 and 7 columns, 3 columns)."""
    def plan(channels, size, stride=2):
        out = (size + 2 - 3) // stride + 1
        return nhwc_plan((size, size), (3, 3), (stride, stride), (1, 1), (1, 1), (out, out), True,
                         channels=channels).dw
    for channels, size in [(96, 112), (144, 56), (16, 24), (72, 24), (32, 16), (96, 12), (16, 2 * SLOTS_MIN_WIDTH)]:
        p = plan(channels, size)
        assert p.slots and p.row_step == 1 and len(p.groups) == 1 and p.buffer[-2:] == (3, size // 2)
    for channels, size in [(192, 28), (576, 14), (16, 2 * SLOTS_MIN_WIDTH - 2)]:
        assert not plan(channels, size).slots and plan(channels, size).row_step == 2
        assert len(plan(channels, size).groups) == 1
    assert SLOTS_MAX_CHANNELS <= PHASES_MAX_CHANNELS
    if SLOTS_MAX_CHANNELS < PHASES_MAX_CHANNELS:
        assert len(plan(SLOTS_MAX_CHANNELS, 2 * PHASES_MIN_WIDTH).groups) == 2
    stride_one = plan(32, 112, stride=1)
    assert not stride_one.slots and stride_one.row_step == 1 and len(stride_one.groups) == 1
    unpadded = depthwise_plan((12, 13), (3, 3), (1, 1), (1, 1), (0, 0), (10, 11), 7)
    assert unpadded.reads_input and not depthwise_plan((12, 13), (3, 3), (1, 1), (1, 1), (0, 0), (10, 11), 7,
                                                       False).reads_input


@pytest.mark.parametrize("data, weight, attrs, method", [
    ((1, 8, 5, 6), (4, 8, 1, 1), {}, "pointwise"),
    ((1, 8, 5, 6), (4, 8, 1, 1), dict(strides=2), "gemm"),
    ((1, 8, 5, 6), (4, 8, 3, 3), dict(padding=1), "gemm"),
    ((1, 8, 5, 6), (8, 1, 3, 3), dict(padding=1, groups=8), "depthwise"),
    ((1, 8, 81, 80), (4, 8, 3, 3), dict(padding=1), "taps"),
    ((1, 8, 81, 80), (4, 8, 3, 3), dict(padding=1, strides=2), "gemm"),
    ((1, 8, 81, 80), (8, 4, 3, 3), dict(padding=1, groups=2), "taps"),
    ((1, 8, 5, 6), (8, 4, 3, 3), dict(padding=1, groups=2), "taps"),       # grouped: taps at any size
    ((1, 8, 81, 80), (8, 4, 3, 3), dict(padding=1, groups=2, strides=2), "taps"),     # on phase planes
])
def test_nhwc_plan_method_and_workspace(data, weight, attrs, method):
    """The plan picks the method its docstring names; only the pointwise GEMM
    needs no workspace, and it grows with the batch."""
    n, c, h, w_ = data
    o, i, kh, kw = weight
    s, p = attrs.get("strides", 1), attrs.get("padding", 0)
    lengths = ((h + 2 * p - kh) // s + 1, (w_ + 2 * p - kw) // s + 1)
    groups = attrs.get("groups", 1)
    plan = nhwc_plan((h, w_), (kh, kw), (s, s), (1, 1), (p, p), lengths, groups == c,
                     prefers_taps(groups, lengths[0] * lengths[1]), strided_taps=1 < groups < c)
    assert plan.method == method
    one = conv_workspace((1, h, w_, c), (kh, kw, i, o), "float32", **op_attrs("nn.conv", data_layout="NHWC", **attrs))
    three = conv_workspace((3, h, w_, c), (kh, kw, i, o), "float32", **op_attrs("nn.conv", data_layout="NHWC", **attrs))
    assert (one is None) == (method == "pointwise") and (one is None or three > one)


@pytest.mark.parametrize("data, attrs", [case for case in POOL_CASES if len(case[0]) == 4])
def test_max_pool_nhwc(data, attrs):
    rng = np.random.default_rng(4)
    x = rand(rng, data, "float32")
    expected, = run_onnx("MaxPool", [x], pool_onnx_attrs(x, attrs), backend="ort")
    assert_close(run_kernel("nn.max_pool", last(x), data_layout="NHWC", **attrs), last(expected))


@pytest.mark.parametrize("data, attrs", [case for case in POOL_CASES if len(case[0]) == 4])
def test_avg_pool_nhwc(data, attrs):
    rng = np.random.default_rng(5)
    x = rand(rng, data, "float32")
    expected, = run_onnx("AveragePool", [x], pool_onnx_attrs(x, attrs, count_include_pad=1), backend="ort")
    got = run_kernel("nn.avg_pool", last(x), data_layout="NHWC", count_include_pad=True, **attrs)
    assert_close(got, last(expected))


@pytest.mark.parametrize("name, op", [("nn.global_avg_pool", "GlobalAveragePool"),
                                      ("nn.global_max_pool", "GlobalMaxPool")])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 16, 31, 48), (2, 5, 1, 1), (1, 4, 3), (1, 3, 2, 3, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_global_pool_nhwc(name, op, shape, dtype):
    """float32 channels last sums by a product with ones; float16 by numpy's reduction."""
    x = rand(np.random.default_rng(6), shape, dtype)
    expected, = run_onnx(op, [x], backend="ort")
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == "float16" else {}
    assert_close(run_kernel(name, last(x), data_layout="NHWC"), last(expected), **tol)


def test_global_avg_pool_of_a_strided_view_and_of_nonfinite_values():
    """A view that is not C-contiguous takes numpy's reduction; a NaN or an inf stays in its channel."""
    x = rand(np.random.default_rng(7), (2, 8, 6, 5), "float32")
    x[0, 3, 2, 1], x[1, 5, 0, 0] = np.nan, np.inf
    view = last(x)[:, :, ::2]
    expected = view.mean(axis=(1, 2), keepdims=True)
    got = run_kernel("nn.global_avg_pool", view, data_layout="NHWC")
    assert_close(got, expected)
    got = run_kernel("nn.global_avg_pool", last(x), data_layout="NHWC").reshape(2, 8)
    assert np.isnan(got[0, 3]) and got[1, 5] == np.inf
    assert np.isfinite(np.delete(got.reshape(-1), [3, 8 + 5])).all()


# kernel == stride without padding ("unfold": UNet's 2x2 stride 2), on narrow
# planes (one GEMM + an interleaving copy) and wide ones (a GEMM per kernel row
# straight into out), 1-d and 3-d; odd sizes
CONV_T_EXTRA = [
    ((2, 8, 5, 7), (8, 4, 2, 2), dict(strides=2)),
    ((2, 8, 3, UNFOLD_DIRECT_MIN_WIDTH + 1), (8, 5, 2, 3), dict(strides=(2, 3))),
    ((1, 3, 11), (3, 2, 4), dict(strides=4)),
    ((1, 4, 3, 2, 5), (4, 2, 2, 2, 2), dict(strides=2)),
    ((2, 6, 5, 7), (6, 2, 3, 3), dict(strides=2, padding=(1, 0, 1, 2), output_padding=1, groups=3)),
    ((2, 4, 6, 6), (4, 3, 2, 2), dict(strides=2, groups=2)),
]


def iohw_last(w: np.ndarray) -> np.ndarray:
    """(C, O/groups, *kernel) -> (C, *kernel, O/groups)."""
    return np.ascontiguousarray(np.moveaxis(w, 1, -1))


@pytest.mark.parametrize("data, weight, attrs", CONV_T_CASES + CONV_T_EXTRA)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_transpose_nhwc(dtype, data, weight, attrs):
    """Against onnxruntime (float32) or the channels-first kernel (float16:
    neither onnxruntime nor onnx's reference runs it with groups)."""
    rng = np.random.default_rng(7)
    x, w = rand(rng, data, dtype), rand(rng, weight, dtype)
    n = x.ndim - 2
    if dtype == "float32":
        onnx_attrs = onnx_window_attrs(n, attrs.get("strides", 1), attrs.get("padding", 0), attrs.get("dilation", 1),
                                       group=attrs.get("groups", 1), kernel_shape=list(w.shape[2:]))
        if "output_padding" in attrs:
            onnx_attrs["output_padding"] = [attrs["output_padding"]] * n
        expected, = run_onnx("ConvTranspose", [x, w], onnx_attrs, backend="ort")
    else:
        expected = run_kernel("nn.conv_transpose", x, w, **attrs)
    got = run_kernel("nn.conv_transpose", last(x), iohw_last(w), data_layout="NHWC", **attrs)
    assert_close(got, last(expected), **CONV_TOL[dtype])


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_padded_nhwc_avg_pool_sums_channels_last(count_include_pad, dtype):
    """Inception's 3x3/1 pools of channels-last maps: the zero-padded copy the taps are summed from
    lies channels last, as the data and the sum do (a channels-first one made every add stride across
    the channels: 1.2 ms for 17x17x288), and the pool is the reference's."""
    from relaxpack.runtime.kernels.nn import _avg_pool_calls
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 7, 9, 40)).astype(dtype)
    out = np.empty_like(x)
    calls = _avg_pool_calls(x, out, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, count_include_pad, "NHWC")
    padded_inner = calls[0][1][0]                   # the copy of the data into the padded buffer
    assert padded_inner.base is not None and padded_inner.strides[1] == padded_inner.itemsize   # channels innermost
    got = run_kernel("nn.avg_pool", x, data_layout="NHWC", count_include_pad=count_include_pad, ceil_mode=False,
                     pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    want, = run_onnx("AveragePool", [np.ascontiguousarray(x.transpose(0, 3, 1, 2))],
                     dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=int(count_include_pad)))
    assert_close(got.transpose(0, 3, 1, 2), want, **tolerance(dtype))


def test_grouped_tap_weights_are_kept_per_read_only_weight():
    """A constant (read-only) grouped weight's per-tap matrices are made once and dropped with it;
    a writable weight's are made per call, so a changed weight gives the changed result."""
    import gc

    from relaxpack.runtime.kernels import conv_nhwc
    from relaxpack.runtime.kernels.nn import conv
    rng = np.random.default_rng(5)
    x, w = rand(rng, (1, 8, 9, 10), "float32"), rand(rng, (8, 4, 3, 3), "float32")
    expected = last(conv_ref(x, w, dict(groups=2, padding=1), "ort"))
    attrs = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=2, data_layout="NHWC",
                 out_layout=None, exact=False)
    out = np.empty_like(expected)

    def run(weight):
        conv(last(x), weight, out=out, **attrs)
        return out.copy()
    constant = hwio(w)
    constant.flags.writeable = False
    before = len(conv_nhwc._GROUPED)
    for _ in range(2):
        assert_close(run(constant), expected, **CONV_TOL["float32"])
    assert len(conv_nhwc._GROUPED) == before + 1
    del constant
    gc.collect()
    assert len(conv_nhwc._GROUPED) == before
    writable = hwio(w)
    run(writable)
    writable *= 2
    assert_close(run(writable), 2 * expected, **CONV_TOL["float32"])
    assert len(conv_nhwc._GROUPED) == before
