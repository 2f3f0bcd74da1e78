"""A channels-first conv writing its result channels last (``out_layout="NHWC"``
with NCHW data): against onnxruntime (float32) or onnx's reference evaluator,
and bit for bit the channels-first result transposed, for every method of the
channels-first engine but one (the copy-out methods transpose in their copy,
the others through a staging buffer) and with the planned workspace. The
strided method without wide rows runs its GEMM the other way round
(``cols^T @ W^T``: channels last as it comes), whose sums are not the
channels-first ones' bits: it is checked against the references and a float64
conv, and its bias and activation bit for bit the unfused ops'."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels.conv_direct import writes_channels_last
from relaxpack.runtime.kernels.conv_strided import transposes_in_gemm
from relaxpack.runtime.kernels.nn import _prepared_conv, conv_workspace, copies_out

from .kernel_calls import call_kernel, op_attrs
from .test_kernels_nn import CONV_CASES, CONV_TOL, conv_ref
from .test_kernels_registry import assert_close, rand, run_kernel

# (data, weight, attrs, the engine's method): odd sizes, strides, padding, dilation, groups, 1-d and 3-d
METHOD_CASES = [
    ((1, 3, 124, 117), (16, 3, 7, 7), dict(strides=2, padding=3), "wide"),                  # a ResNet stem
    ((2, 6, 120, 111), (9, 2, 3, 3), dict(groups=3, padding=(1, 0, 2, 1)), "wide"),
    ((2, 16, 80, 60), (12, 16, 3, 3), dict(padding=1), "rows"),                              # YOLO's shallow conv
    ((1, 32, 61, 45), (16, 16, 3, 3), dict(groups=2, padding=(1, 2, 1, 0), dilation=(2, 1)), "rows"),
    ((1, 16, 140, 66), (8, 16, 3, 2), dict(dilation=(2, 1)), "rows"),                        # no padding: taps read x
    ((2, 16, 720, 22), (8, 16, 3, 3), dict(strides=2, padding=1), "compact"),
    ((2, 16, 56, 56), (16, 1, 3, 3), dict(groups=16, padding=1), "depthwise"),
    ((2, 160, 16, 14), (160, 1, 3, 3), dict(groups=160, strides=2, padding=1), "depthwise_cl"),
    ((2, 64, 8, 7), (64, 1, 3, 3), dict(groups=64, strides=2, padding=1), "strided"),        # a small depthwise
    ((1, 5, 30000), (8, 5, 5), dict(padding=2), "compact"),                                  # conv1d
    ((1, 4, 32, 34, 50), (6, 4, 1, 1, 3), {}, "wide"),                                        # conv3d
    ((0, 16, 80, 60), (12, 16, 3, 3), dict(padding=1), "rows"),                              # empty batch
    ((2, 9, 11, 13), (12, 3, 3, 2), dict(groups=3, strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2)),
     "strided"),
    ((1, 24, 8, 12), (24, 24, 3, 3), dict(padding=1), "strided"),                            # ResNet on a small image
    ((1, 5, 300), (8, 5, 5), dict(padding=2, strides=3), "strided"),                         # conv1d
    ((1, 4, 6, 7, 9), (6, 4, 2, 1, 3), dict(padding=(1, 0, 0, 0, 1, 2)), "strided"),         # conv3d
]


def last(a: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) -> (N, *spatial, C)."""
    return np.moveaxis(a, 1, -1)


def _plan(data, weight, attrs):
    return _prepared_conv(data, weight, attrs.get("strides", 1), attrs.get("padding", 0), attrs.get("dilation", 1),
                          attrs.get("groups", 1), "NCHW")[0]


def _method(data, weight, attrs) -> str:
    return _plan(data, weight, attrs).method


def transposed_gemm(data, weight, attrs) -> bool:
    """Whether the conv's channels-last result comes from the GEMM run the other way round."""
    return transposes_in_gemm(_plan(data, weight, attrs))


def f64_conv(x, w, attrs) -> np.ndarray:
    """The conv in float64 (onnx's reference evaluator on float64 operands), channels last."""
    return last(conv_ref(x.astype(np.float64), w.astype(np.float64), attrs, "ref"))


def test_cases_cover_every_method():
    assert {_method(d, w, a) for d, w, a, _ in METHOD_CASES} == {"wide", "rows", "compact", "strided",
                                                                  "depthwise", "depthwise_cl"}
    for data, weight, attrs, method in METHOD_CASES:
        assert _method(data, weight, attrs) == method


@pytest.mark.parametrize("data, weight, attrs", [c[:3] for c in METHOD_CASES] + CONV_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_conv_out_layout_nhwc(dtype, data, weight, attrs):
    rng = np.random.default_rng(0)
    x, w = rand(rng, data, dtype), rand(rng, weight, dtype)
    expected = conv_ref(x, w, attrs, "ort" if dtype == "float32" else "ref")
    got = run_kernel("nn.conv", x, w, out_layout="NHWC", **attrs)
    assert got.shape == last(expected).shape
    assert_close(got, last(expected), **CONV_TOL[dtype])
    if transposed_gemm(data, weight, attrs):
        # other sums than channels first's: as close to a float64 conv as it is
        first = last(run_kernel("nn.conv", x, w, **attrs))
        exact = f64_conv(x, w, attrs)
        err = np.abs(got - exact).max(initial=0)
        assert err <= 2 * np.abs(first - exact).max(initial=0) + 4 * np.finfo(dtype).eps * np.abs(exact).max(initial=1)
        return
    np.testing.assert_array_equal(got, last(run_kernel("nn.conv", x, w, **attrs)))


@pytest.mark.parametrize("data, weight, attrs", [c[:3] for c in METHOD_CASES])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_bias_act_out_layout_nhwc(dtype, data, weight, attrs):
    """The bias and activation as channels first (the rows method applies
    them per block), bit for bit; float16 adds the bias in float16 after the
    rounded conv, as the unfused ops."""
    rng = np.random.default_rng(1)
    x, w, b = rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    got = run_kernel("nn.conv_bias_act", x, w, b, out_layout="NHWC", activation="silu", **attrs)
    if transposed_gemm(data, weight, attrs):
        # its own sums: the unfused ops on them (the conv, the bias, the SiLU kernel)
        conv = run_kernel("nn.conv", x, w, out_layout="NHWC", **attrs)
        unfused = run_kernel("nn.silu", run_kernel("add", conv, b))
        np.testing.assert_array_equal(got, unfused)
    else:
        first = run_kernel("nn.conv_bias_act", x, w, b, activation="silu", **attrs)
        np.testing.assert_array_equal(got, last(first))
    if dtype == "float32":
        conv = conv_ref(x, w, attrs, "ort") + b.reshape(-1, *(1,) * (x.ndim - 2))
        assert_close(got, last(conv / (1 + np.exp(-conv))), **CONV_TOL[dtype])


@pytest.mark.parametrize("data, weight, attrs, method", METHOD_CASES)
def test_planned_workspace_is_enough(data, weight, attrs, method):
    """The declared workspace (a staging buffer for the methods that do not
    copy out) is all the kernel takes: it runs in exactly that many bytes."""
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, data, "float32"), rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    first = run_kernel("nn.conv_bias_act", x, w, b, activation="relu", **attrs)
    nbytes = conv_workspace(data, weight, "float32", **op_attrs("nn.conv", out_layout="NHWC", **attrs))
    plain = conv_workspace(data, weight, "float32", **op_attrs("nn.conv", **attrs))
    if data[0]:
        staging = 4 * weight[0] * int(np.prod(first.shape[2:])) * data[0]
        assert nbytes >= (plain or 0) + (0 if writes_channels_last(_plan(data, weight, attrs)) else staging)
    out = np.full(last(first).shape, np.nan, np.float32)
    workspace = None if nbytes is None else np.zeros(nbytes, np.uint8)
    call_kernel("nn.conv_bias_act", x, w, b, out=out, activation="relu", out_layout="NHWC", workspace=workspace,
                **attrs)
    if transposed_gemm(data, weight, attrs):      # (its own sums: as it runs without a workspace)
        first = run_kernel("nn.conv_bias_act", x, w, b, activation="relu", out_layout="NHWC", **attrs)
        np.testing.assert_array_equal(out, first)
    else:
        np.testing.assert_array_equal(out, last(first))


def test_copies_out_names_the_copy_out_methods():
    """What ConvertLayout asks: ResNet's stem and YOLO's 32-channel 160x160 conv copy out, a small
    ungrouped conv (the strided method: a MobileNet's 3-channel stem) writes channels last by its
    GEMM; a small grouped or depthwise one (the strided method too) and a large depthwise one do not."""
    assert copies_out((1, 3, 224, 224), (64, 3, 7, 7), strides=2, padding=3, dilation=1, groups=1)
    assert copies_out((1, 32, 160, 160), (32, 32, 3, 3), strides=1, padding=1, dilation=1, groups=1)
    assert copies_out((1, 8, 9, 7), (16, 8, 3, 3), strides=2, padding=1, dilation=1, groups=1)
    assert copies_out((1, 3, 61, 96), (16, 3, 3, 3), strides=2, padding=1, dilation=1, groups=1)
    assert not copies_out((1, 8, 9, 7), (16, 4, 3, 3), strides=2, padding=1, dilation=1, groups=2)
    assert not copies_out((1, 16, 9, 7), (16, 1, 3, 3), strides=2, padding=1, dilation=1, groups=16)
    assert not copies_out((1, 16, 56, 56), (16, 1, 3, 3), strides=1, padding=1, dilation=1, groups=16)
    assert not copies_out((1, 3, "h", 224), (64, 3, 7, 7), strides=2, padding=3, dilation=1, groups=1)      # a symbolic dim


def test_unsupported_layouts_fail():
    from relaxpack.errors import ShapeError
    x = np.zeros((1, 6, 5, 3), np.float32)
    with pytest.raises(ShapeError, match="out_layout 'NCHW' with data_layout 'NHWC' is not supported"):
        call_kernel("nn.conv", x, np.zeros((3, 3, 3, 4), np.float32), out=np.zeros((1, 4, 4, 1), np.float32),
                    data_layout="NHWC", out_layout="NCHW")
