"""A large-kernel depthwise conv by banded products per channel (conv_depthwise_banded.py): which
channels-last convs take it (at the edges of its bounds), its results within float32's (float64's)
rounding of the float64 (exact-ish) sum call after call, with each activation and with or without a
bias, and a result that is not finite computed again by the direct method, bit for bit the generic
kernel's."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_depthwise_banded, get_kernel

from .test_kernels_conv_small import out_for, workspace_for
from .test_kernels_conv_small_nhwc import ACTIVATIONS, nhwc_attrs
from .test_kernels_registry import rand

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn
CONV = get_kernel("nn.conv").fn


def depthwise(data, kernel, padding, **attrs):
    channels = data[-1]
    return (data, (*kernel, 1, channels), dict(groups=channels, padding=padding, **attrs))


# ConvNeXt's first stage at 61x96 (batch 1) and 64x40 (batch 3); odd sizes, uneven padding, no padding,
# a 5x5 and a 7x5 kernel, a single channel
TAKEN = [
    depthwise((1, 15, 24, 16), (7, 7), (3, 3, 3, 3)),
    depthwise((3, 16, 10, 16), (7, 7), (3, 3, 3, 3)),
    depthwise((2, 13, 17, 5), (7, 7), (3, 3, 3, 3)),
    depthwise((1, 15, 24, 8), (5, 5), (2, 2, 2, 2)),
    depthwise((2, 12, 21, 3), (7, 5), (1, 2, 4, 2)),
    depthwise((1, 20, 40, 2), (7, 7), (0, 0, 0, 0)),
    depthwise((1, 14, 30, 1), (7, 7), (3, 3, 3, 3)),
]


def float64_conv(x, w, b, attrs):
    """The depthwise conv in float64 and the sum of the magnitudes of its products (the error bound's scale)."""
    (pt, pl, pb, pr), (kh, kw) = attrs["padding"], w.shape[:2]
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    ho, wo = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
    total = np.zeros((x.shape[0], ho, wo, x.shape[-1]))
    size = np.zeros_like(total)
    for i in range(kh):
        for j in range(kw):
            term = xp[:, i:i + ho, j:j + wo] * w[i, j, 0].astype(np.float64)
            total += term
            size += np.abs(term)
    if b is not None:
        total += b
        size += np.abs(b.astype(np.float64))
    return total, size


def taken(monkeypatch):
    calls = []
    real = conv_depthwise_banded.prepare
    monkeypatch.setattr(conv_depthwise_banded, "prepare", lambda *a: calls.append(a[0]) or real(*a))
    return calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("data, weight, attrs", TAKEN)
def test_within_rounding_of_the_float64_sum_call_after_call(data, weight, attrs, dtype, monkeypatch):
    calls = taken(monkeypatch)
    attrs = nhwc_attrs(attrs)
    assert conv_depthwise_banded.applies(data, weight, dtype, attrs["strides"], attrs["padding"], attrs["dilation"],
                                         attrs["groups"])
    rng = np.random.default_rng(0)
    w, b = rand(rng, weight, dtype), rand(rng, (weight[-1],), dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    workspace = workspace_for(data, weight, attrs, dtype)
    eps = np.finfo(dtype).eps
    out = out_for(data, weight, attrs, dtype)
    for round_ in range(3):
        x = rand(rng, data, dtype)
        call(x, w, b, out=out, workspace=workspace)
        want, size = float64_conv(x, w, b, attrs)
        # a sum of kh * kw + 1 terms, each step rounded: within that many roundings of its magnitudes
        bound = (weight[0] * weight[1] + 2) * eps * size
        assert np.all(np.abs(out - want) <= bound), f"round {round_}"
        workspace[:] = 0xCD
    assert calls == [data]          # prepared once, for the first call


@pytest.mark.parametrize("activation", ACTIVATIONS[1:], ids=str)
def test_bias_and_activation_as_the_direct_runner_applies_them(activation, monkeypatch):
    """The products' result gets the bias and the activation the direct runner would: the same
    finish on an equal sum (checked by feeding the banded sum to the generic kernel's finish: a
    1x1 conv is exact)."""
    calls = taken(monkeypatch)
    data, weight, attrs = TAKEN[0]
    attrs = nhwc_attrs(attrs, activation)
    rng = np.random.default_rng(1)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[-1],), "float32")
    x = rand(rng, data, "float32")
    out = out_for(data, weight, attrs, "float32")
    CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))(x, w, b, out=out)
    assert calls
    plain = out_for(data, weight, attrs, "float32")
    CONV.specialize_attrs({k: v for k, v in attrs.items() if k != "activation"}, (False, True))(x, w, out=plain)
    # the same activation and bias by the generic kernel, as a 1x1 depthwise conv of weight 1 (exact)
    one = dict(nhwc_attrs(dict(groups=data[-1]), activation))
    want = out_for(data, (1, 1, 1, data[-1]), one, "float32")
    CONV_BIAS_ACT(plain, np.ones((1, 1, 1, data[-1]), np.float32), b, out=want, **one)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_result_that_is_not_finite_is_the_direct_methods(bad, monkeypatch):
    """A zero of the band times an inf is NaN where the true sum is finite: such a call is computed
    again directly, bit for bit the generic kernel (outputs away from the inf stay finite)."""
    calls = taken(monkeypatch)
    data, weight, attrs = TAKEN[0]
    attrs = nhwc_attrs(attrs, "relu")
    rng = np.random.default_rng(2)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[-1],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    for round_ in range(2):
        x = rand(rng, data, "float32")
        x[0, 0, 0, 3] = bad
        out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
        call(x, w, b, out=out)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        assert np.isfinite(out[0, 10:, 10:]).all()
        x[0, 0, 0, 3] = 1.0                         # then a finite input again: the products
        call(x, w, b, out=out)
        expected, size = float64_conv(x, w, b, attrs)
        assert np.all(np.abs(out - np.maximum(expected, 0)) <= 51 * np.finfo(np.float32).eps * size)
    assert calls


@pytest.mark.parametrize("data, weight, attrs, expected", [
    (*TAKEN[0], True),
    # products per channel n * wo * kw * hp * ho: 16 * 7 * 13 * 7 = 10192 taken, 15 columns 9555 not
    (*depthwise((1, 7, 16, 32), (7, 7), (3, 3, 3, 3)), True),
    (*depthwise((1, 7, 15, 32), (7, 7), (3, 3, 3, 3)), False),
    (*depthwise((1, 7, 12, 32), (7, 7), (3, 3, 3, 3)), False),          # ConvNeXt's second stage
    # waste hp / kh at most 4: 28 padded rows of a 7-row kernel taken, 29 not (long planes)
    (*depthwise((1, 22, 24, 16), (7, 7), (3, 3, 3, 3)), True),
    (*depthwise((1, 23, 24, 16), (7, 7), (3, 3, 3, 3)), False),
    (*depthwise((1, 15, 24, 16), (6, 4), (2, 1, 3, 2)), False),         # 24 taps
    (*depthwise((1, 15, 24, 16), (5, 5), (2, 2, 2, 2)), True),          # 25
    (*depthwise((1, 15, 24, 16), (7, 7), (3, 3, 3, 3), strides=(2, 2)), False),
    (*depthwise((1, 15, 24, 16), (7, 7), (6, 6, 6, 6), dilation=(2, 2)), False),
    ((1, 15, 24, 16), (7, 7, 1, 32), dict(groups=16, padding=(3, 3, 3, 3)), False),    # a channel multiplier
    ((1, 15, 24, 16), (7, 7, 2, 8), dict(groups=8, padding=(3, 3, 3, 3)), False),      # grouped
])
def test_which_convs_take_it(data, weight, attrs, expected):
    attrs = nhwc_attrs(attrs)
    assert conv_depthwise_banded.applies(data, weight, "float32", attrs["strides"], attrs["padding"],
                                         attrs["dilation"], attrs["groups"]) is expected


def test_not_float16_nor_past_its_memory():
    data, weight, attrs = TAKEN[0]
    args = ((1, 1), (3, 3, 3, 3), (1, 1), 16)
    assert not conv_depthwise_banded.applies(data, weight, "float16", *args)
    assert not conv_depthwise_banded.applies((30, 15, 24, 16), weight, "float32", *args)  # ~7 MB of copies


def test_a_weight_computed_at_run_time_keeps_the_direct_runner(monkeypatch):
    """The band matrices are made once from a bound weight; a weight in a register is not banded."""
    calls = taken(monkeypatch)
    data, weight, attrs = TAKEN[0]
    attrs = nhwc_attrs(attrs)
    rng = np.random.default_rng(3)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[-1],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, False))
    for _ in range(2):
        w[...] = rand(rng, weight, "float32")
        x = rand(rng, data, "float32")
        out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
        call(x, w, b, out=out)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
    assert not calls


def test_a_bias_in_a_register_is_read_every_call(monkeypatch):
    """A bound weight with a bias computed at run time: banded, the bias's new values added each call."""
    calls = taken(monkeypatch)
    data, weight, attrs = TAKEN[1]
    attrs = nhwc_attrs(attrs, "relu")
    rng = np.random.default_rng(4)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[-1],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, False))
    out = out_for(data, weight, attrs, "float32")
    for _ in range(3):
        b[...] = rand(rng, (weight[-1],), "float32")
        x = rand(rng, data, "float32")
        call(x, w, b, out=out)
        want, size = float64_conv(x, w, b, attrs)
        assert np.all(np.abs(out - np.maximum(want, 0)) <= 51 * np.finfo(np.float32).eps * size)
    assert calls == [data]
