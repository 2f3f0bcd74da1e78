"""The integer small-conv runner (kernels/conv_small_integer.py): a specialized integer
``nn.conv_bias_act`` with constant weight and bias runs the float32 small-conv runner when
``max|data|`` is within its exact limit, the generic kernel beyond it, and gives the exact
integers (Python-int reference) either way: odd sizes, strides, groups, pointwise, the stem's
7x7, uint8- and int8-range data, with and without bias, at and just past the limit."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir.op import get_op_def
from relaxpack.runtime.kernels import conv_small
from relaxpack.runtime.kernels.fused import conv_bias_act, declarer

from .test_kernels_integer_exact import _reference_conv


def _specialized(attrs, generic_calls: list):
    """The instruction's call (weight and bias bound values), counting generic-kernel calls."""
    def generic(*args, **kwargs):
        generic_calls.append(1)
        conv_bias_act(*args, **kwargs)
    return conv_small.specialize(generic, (False, True, True), declare=declarer((False, True, True)), **attrs)


def _attrs(stride, pad, groups, layout="NCHW"):
    return get_op_def("nn.conv_bias_act").full_attrs(dict(strides=stride, padding=pad, groups=groups,
                                                          data_layout=layout))


CONVS = [  # (data NCHW, weight OIHW, stride, pad, groups)
    ((1, 3, 9, 11), (4, 3, 3, 3), 1, 1, 1),
    ((2, 4, 7, 6), (6, 2, 3, 3), 2, 1, 2),
    ((1, 16, 5, 7), (24, 16, 3, 3), 2, 1, 1),
    ((1, 3, 13, 19), (8, 3, 7, 7), 2, 3, 1),        # a stem
    ((1, 7, 5, 5), (3, 7, 1, 1), 1, 0, 1),          # pointwise
    ((3, 9, 4, 3), (5, 9, 1, 1), 1, 0, 1),
    ((1, 6, 5, 5), (4, 6, 3, 3), 1, 0, 1),          # no padding: the columns read the data itself
    ((1, 5, 6, 7), (5, 1, 3, 3), 1, 1, 5),          # depthwise (channels last: its einsum runner)
    ((2, 6, 7, 5), (6, 1, 3, 3), 2, 1, 6),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("data, weight, stride, pad, groups", CONVS)
@pytest.mark.parametrize("source", ["uint8", "int8"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_integer_runner_exact(layout, data, weight, stride, pad, groups, source, with_bias):
    rng = np.random.default_rng(5)
    zp = 131 if source == "uint8" else -7
    lo, hi = (0, 256) if source == "uint8" else (-128, 128)
    w = rng.integers(-127, 128, weight).astype(np.int32)
    bias = rng.integers(-2**20, 2**20, weight[0]).astype(np.int32) if with_bias else None
    w_run = w if layout == "NCHW" else np.ascontiguousarray(w.transpose(2, 3, 1, 0))
    call, calls = None, []
    for seed in range(3):           # the prepared runner, reused
        x = np.random.default_rng(seed).integers(lo, hi, data).astype(np.int32) - zp
        want = _reference_conv(x, w, bias, stride, pad, groups)
        if layout == "NHWC":
            x, want = np.moveaxis(x, 1, -1).copy(), np.moveaxis(want, 1, -1)
        if call is None:
            call = _specialized(_attrs(stride, pad, groups, layout), calls)
        out = np.empty(want.shape, np.int32)
        call(x, w_run, bias, out=out)
        np.testing.assert_array_equal(out, want)
    # the runners: channels first strided (groups too) and pointwise; channels last pointwise, gemm
    # (groups 1), depthwise
    taken = not (layout == "NHWC" and 1 < groups < data[1])
    assert calls == ([] if taken else [1, 1, 1])


@pytest.mark.parametrize("pointwise", [False, True])
def test_limit_switches_to_the_generic_kernel(pointwise):
    """``max|x| * sum|w| + max|bias| <= 2**24``: at the limit the float runner, one past it the generic
    kernel (float64 there), both exact."""
    k = 1 if pointwise else 3
    w = np.full((2, 4, k, k), 255, np.int32)
    w[1] = -3
    bias = np.array([2**12, -5], np.int32)
    total = 255 * 4 * k * k
    limit = (2**24 - 2**12) // total
    calls = []
    call = _specialized(_attrs(1, k // 2, 1), calls)
    rng = np.random.default_rng(1)
    for peak, expected_calls in ((limit, 0), (-limit, 0), (limit + 1, 1), (-(limit + 1), 2), (3, 2)):
        x = rng.integers(-limit, limit + 1, (1, 4, 5, 6)).astype(np.int32)
        x[0, 1, 2, 3] = peak
        out = np.empty((1, 2, 5, 6), np.int32)
        call(x, w, bias, out=out)
        np.testing.assert_array_equal(out, _reference_conv(x, w, bias, 1, k // 2, 1))
        assert len(calls) == expected_calls, peak


def test_not_taken_without_constant_operands_or_with_an_activation():
    x = np.ones((1, 2, 4, 4), np.int32)
    w = np.ones((3, 2, 3, 3), np.int32)
    for flags, attrs in (((False, False, False), _attrs(1, 1, 1)),
                         ((False, True, True), {**_attrs(1, 1, 1), "activation": "relu"})):
        calls = []
        call = conv_small.specialize(lambda *a, **kw: (calls.append(1), conv_bias_act(*a, **kw)), flags, **attrs)
        out = np.empty((1, 3, 4, 4), np.int32)
        call(x - 2, w, None, out=out)
        np.testing.assert_array_equal(out, _reference_conv(x - 2, w, None, 1, 1, 1)
                                      if attrs["activation"] is None else
                                      np.maximum(_reference_conv(x - 2, w, None, 1, 1, 1), 0))
        assert calls == [1]


def test_empty_batch_and_zero_weight():
    calls = []
    call = _specialized(_attrs(1, 1, 1), calls)
    w = np.ones((3, 2, 3, 3), np.int32)
    out = np.empty((0, 3, 4, 4), np.int32)
    call(np.ones((0, 2, 4, 4), np.int32), w, None, out=out)
    assert calls == [1]
    zero = np.zeros((3, 2, 3, 3), np.int32)
    call = _specialized(_attrs(1, 1, 1), calls)
    out = np.empty((1, 3, 4, 4), np.int32)
    call(np.full((1, 2, 4, 4), 7, np.int32), zero, np.array([1, 2, 3], np.int32), out=out)
    np.testing.assert_array_equal(out, np.broadcast_to(np.array([1, 2, 3], np.int32)[:, None, None], (1, 3, 4, 4)))
