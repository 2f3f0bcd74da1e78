"""An exact small conv run channels last inside its runner (kernels/conv_small_cl.py): which
convs take it (exact, ungrouped, undilated 2-d, >= 8 channels, a 2x2 kernel or larger, strided or
at most 96 output pixels, small planes and scratch), and that it gives the exact integers of the
sums (a Python-int reference), equal to the generic kernel, call after call, with new inputs and
with an arena's views, with and without bias (bound or not), activations, batch, float32/float64
and integer data."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_small, conv_small_cl, get_kernel
from relaxpack.runtime.kernels.nn import _prepared_conv

from .test_kernels_conv_small import full_attrs, out_for, workspace_for
from .test_kernels_integer_exact import _reference_conv

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn

# (data, weight, stride, padding): taken by the runner; direct GEMM (one image, <= 32 pixels) or not
TAKEN = [
    ((1, 16, 16, 24), (24, 16, 3, 3), 2, (1, 1, 1, 1)),          # 96 pixels: cols @ W, transposed out
    ((1, 64, 2, 3), (64, 64, 3, 3), 1, (1, 1, 1, 1)),            # 6 pixels: W @ cols^T into out
    ((1, 32, 4, 6), (32, 32, 3, 3), 1, (1, 1, 1, 1)),            # 24 pixels
    ((1, 16, 8, 12), (16, 16, 3, 3), 1, (1, 1, 1, 1)),           # 96 pixels: the stride-1 bar
    ((1, 8, 9, 11), (8, 8, 3, 3), 2, (1, 1, 1, 1)),              # 8 channels: the channel bar
    ((3, 24, 8, 12), (32, 24, 3, 3), 2, (1, 1, 1, 1)),           # a batch
    ((1, 16, 7, 9), (8, 16, 5, 5), 2, (2, 1, 0, 2)),             # odd sizes, uneven padding
    ((2, 17, 5, 4), (5, 17, 3, 2), (2, 1), (0, 1, 1, 0)),        # a 3x2 kernel, two strides
    ((1, 16, 5, 6), (4, 16, 2, 2), 2, (0, 0, 0, 0)),             # unpadded
    ((1, 16, 32, 32), (16, 16, 3, 3), 2, (1, 1, 1, 1)),          # the plane bar: 1024 pixels
]
# not taken: the strided method's own runner (or another method) runs them (exact or not: the
# float convs of the same geometry, tests/runtime/test_kernels_conv_small_float.py)
NOT_TAKEN = [
    (((1, 7, 4, 6), (16, 7, 3, 3), 1, (1, 1, 1, 1)), {}),                        # 7 channels
    (((1, 16, 7, 14), (16, 16, 3, 3), 1, (1, 1, 1, 1)), {}),                     # 98 pixels at stride 1
    (((1, 16, 16, 24), (24, 16, 1, 1), 2, (0, 0, 0, 0)), {}),                    # 1x1
    (((1, 16, 9, 9), (16, 16, 3, 1), 2, (1, 0, 1, 0)), {}),                      # one kernel column
    (((1, 16, 32, 33), (16, 16, 3, 3), 2, (1, 1, 1, 1)), {}),                    # a plane of 1056 pixels
    (((2, 64, 30, 30), (16, 64, 3, 3), 2, (1, 1, 1, 1)), {}),                    # 1.52 MiB of scratch
    (((1, 16, 4, 6), (16, 8, 3, 3), 1, (1, 1, 1, 1)), {"groups": 2}),
    (((1, 16, 8, 8), (16, 16, 3, 3), 2, (2, 2, 2, 2)), {"dilation": (2, 2)}),
]


def _exact_conv(x, w, b, strides, padding) -> np.ndarray:
    """The conv of integer-valued ``x`` and ``w`` in int64 (exact), plus ``b``; padding
    ``(top, left, bottom, right)``."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (padding[0], padding[2]), (padding[1], padding[3])))
    w = w.astype(np.int64)
    (sh, sw), (kh, kw) = strides, w.shape[2:]
    rows, cols = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    out = sum(np.einsum("nchw,oc->nohw", x[:, :, i:i + sh * rows:sh, j:j + sw * cols:sw], w[:, :, i, j])
              for i in range(kh) for j in range(kw))
    return out if b is None else out + b.astype(np.int64).reshape(-1, 1, 1)


def _attrs(stride, padding, activation=None, **extra):
    stride = stride if isinstance(stride, tuple) else (stride, stride)
    return {**full_attrs(dict(strides=stride, padding=padding), activation), "exact": True, **extra}


def _integers(rng, shape, bound, dtype):
    return rng.integers(-bound, bound + 1, shape).astype(dtype)


def check_exact_rounds(data, weight, attrs, dtype, bias, planned, rng, rounds=4):
    """A specialized exact conv against the generic kernel over ``rounds`` calls of new values (from
    the third on in the same views, as an arena's), its workspace full of other kernels' garbage
    before each call; with no activation, against the int64 sums too. ``bias``: None, "bound" (the
    specialization's bound bias) or any other value (a run-time bias), as large as the exact bound
    leaves room for (the conv's sums stay within 2**24)."""
    w = _integers(rng, weight, 127, dtype)
    b = None if bias is None else _integers(rng, (weight[0],), 2**24 - 255 * 127 * int(np.prod(weight[1:])), dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, bias == "bound"))
    workspace = workspace_for(data, weight, attrs, dtype) if planned else None
    x_view = np.empty(int(np.prod(data)) + 1, dtype)[1:].reshape(data)
    out = out_for(data, weight, attrs, dtype)
    out_view = np.empty(out.size + 1, dtype)[1:].reshape(out.shape)
    for round_ in range(rounds):
        x = _integers(rng, data, 255, dtype)
        if round_ >= 2:
            x_view[...] = x
            x, out = x_view, out_view
        if workspace is not None:
            workspace.fill(0xAB)
        call(x, w, b, out=out, workspace=workspace)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        if attrs["activation"] is None:
            np.testing.assert_array_equal(out, _exact_conv(x, w, b, attrs["strides"], attrs["padding"]),
                                          err_msg=f"round {round_}")


def _runner(data, weight, attrs, dtype="float32"):
    rng = np.random.default_rng(0)
    w = _integers(rng, weight, 127, dtype)
    out = out_for(data, weight, attrs, dtype)
    return conv_small._prepare(np.zeros(data, dtype), w, None, out, None, attrs, True, True, None)


@pytest.mark.parametrize("data, weight, stride, padding", TAKEN)
def test_the_runner_is_taken(data, weight, stride, padding):
    runner = _runner(data, weight, _attrs(stride, padding))
    assert runner is not None and runner.__module__ == conv_small_cl.__name__


@pytest.mark.parametrize("case, extra", NOT_TAKEN, ids=str)
def test_the_runner_is_not_taken(case, extra):
    data, weight, stride, padding = case
    runner = _runner(data, weight, _attrs(stride, padding, **extra))
    assert runner is None or runner.__module__ != conv_small_cl.__name__


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias", ["bound", "register", None])
@pytest.mark.parametrize("activation", [None, "relu", ("clip", -2.0**20, 2.0**20), "silu"], ids=str)
@pytest.mark.parametrize("data, weight, stride, padding", TAKEN)
def test_exact_sums_as_the_generic_kernel(data, weight, stride, padding, activation, bias, dtype):
    attrs = _attrs(stride, padding, activation)
    rng = np.random.default_rng(1)
    w = _integers(rng, weight, 127, dtype)
    b = None if bias is None else _integers(rng, (weight[0],), 2**20, dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, bias == "bound"))
    out = out_for(data, weight, attrs, dtype)
    # rounds 0-1: new arrays (model inputs); 2-4: the same views with new values (an arena's)
    x_view = np.empty(int(np.prod(data)) + 1, dtype)[1:].reshape(data)
    out_view = np.empty(out.size + 1, dtype)[1:].reshape(out.shape)
    for round_ in range(5):
        x = _integers(rng, data, 255, dtype)
        if round_ >= 2:
            x_view[...] = x
            x, out = x_view, out_view
        call(x, w, b, out=out)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        if activation is None:
            np.testing.assert_array_equal(out, _exact_conv(x, w, b, attrs["strides"], padding))


def test_integer_data_is_converted_by_the_copy_in():
    """An integer conv marked exact (int32 data and result) runs the float runner of this module
    inside the integer runner: the copy into the padded copy converts its data."""
    data, weight = (1, 32, 4, 6), (32, 32, 3, 3)
    attrs = _attrs(1, (1, 1, 1, 1))
    rng = np.random.default_rng(2)
    w = _integers(rng, weight, 127, np.int32)
    b = _integers(rng, (32,), 2**12, np.int32)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    for _ in range(3):
        x = _integers(rng, data, 255, np.int32)
        out = np.empty((1, 32, 4, 6), np.int32)
        call(x, w, b, out=out)
        np.testing.assert_array_equal(out, _reference_conv(x, w, b, 1, 1, 1))


def test_the_plan_is_the_strided_methods():
    """The runner stands in for the strided method's (the small convs'), nothing else."""
    for data, weight, stride, padding in TAKEN:
        attrs = _attrs(stride, padding)
        plan = _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], 1, "NCHW")[0]
        assert plan.method == "strided"


@pytest.mark.parametrize("data, weight, stride, padding", TAKEN)
def test_bias_in_gemm_at_the_bound(data, weight, stride, padding):
    """An exact conv's bound bias as its GEMM's last term (``bias_in_gemm``: not into ``out``
    directly, one image of at most 32 pixels) gives the int64 sums with the largest bias the exact
    bound leaves: every product of a window inside the plane is ``+-255 * 127``, all of one sign,
    so those sums are ``+-2**24`` with the bias; as the generic kernel does."""
    attrs = _attrs(stride, padding)
    rng = np.random.default_rng(5)
    signs = rng.choice([-1.0, 1.0], weight[1]).astype(np.float32).reshape(1, -1, 1, 1)
    w = np.broadcast_to(127 * signs, weight).astype(np.float32)
    top = 2**24 - 255 * 127 * int(np.prod(weight[1:]))
    b = np.resize(np.array([top, -top, 0], np.float32), weight[0])
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    for sign in (1, -1):
        x = np.broadcast_to(sign * 255 * signs, data).astype(np.float32)
        out = out_for(data, weight, attrs, "float32")
        call(x, w, b, out=out)
        np.testing.assert_array_equal(out, _exact_conv(x, w, b, attrs["strides"], padding))
        want = out_for(data, weight, attrs, "float32")
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


def test_bias_in_gemm_where():
    """Exact convs with a bound bias, but for the GEMM straight into ``out`` (one image of at
    most 32 pixels: the bar on both sides, a batch past it)."""
    def plan(data, weight, stride):
        return _prepared_conv(data, weight, (stride, stride), (1, 1, 1, 1), (1, 1), 1, "NCHW")[0]
    wide = plan((1, 24, 8, 12), (24, 24, 3, 3), 1)              # 96 pixels
    at_bar = plan((1, 32, 8, 8), (32, 32, 3, 3), 2)             # 16 pixels... and 32:
    past = plan((1, 32, 8, 12), (32, 32, 3, 3), 2)              # 4x6 = 24
    thirty_three = plan((1, 16, 3, 11), (16, 16, 3, 3), 1)      # 3x11 = 33
    assert conv_small_cl.bias_in_gemm(wide, 1, True, True)
    assert not conv_small_cl.bias_in_gemm(wide, 1, False, True)          # a float conv
    assert not conv_small_cl.bias_in_gemm(wide, 1, True, False)          # no bound bias
    assert not conv_small_cl.bias_in_gemm(at_bar, 1, True, True)
    assert not conv_small_cl.bias_in_gemm(past, 1, True, True)
    assert conv_small_cl.bias_in_gemm(past, 2, True, True)               # a batch
    assert conv_small_cl.bias_in_gemm(thirty_three, 1, True, True)
    assert not conv_small_cl.bias_in_gemm(plan((1, 16, 4, 8), (16, 16, 3, 3), 1), 1, True, True)  # 32
