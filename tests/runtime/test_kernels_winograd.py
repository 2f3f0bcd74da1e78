"""Channels-last 3x3 stride-1 convs by Winograd F(2x2, 3x3) (conv_winograd.py)
against onnxruntime (float32) and onnx's reference evaluator (float16/float64)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_winograd
from relaxpack.runtime.kernels.nn import _conv_geometry, _prepared_conv, conv_bias, conv_workspace

from .kernel_calls import op_attrs
from .test_kernels_nhwc import hwio, last
from .test_kernels_nn import conv_ref
from .test_kernels_registry import assert_close, rand, run_kernel

#: sums of 576+ products of normal values reach 100: errors relative to the largest output
SCALED_TOL = {"float32": 2e-6, "float64": 1e-13, "float16": 2e-3}


def assert_near(got, expected, dtype="float32"):
    scale = float(np.abs(expected.astype(np.float64)).max(initial=1.0))
    assert_close(got, expected, rtol=0, atol=SCALED_TOL[dtype] * scale)


@pytest.fixture
def any_size(monkeypatch):
    """Winograd for any plane: the kernel must be right on planes too small
    or too odd for the plan to pick it. Conv calls cache their plans per
    shape: cleared before (a plan made without the patch) and after."""
    monkeypatch.setattr(conv_winograd, "MIN_TILES", 1)
    monkeypatch.setattr(conv_winograd, "MIN_USE", 0.0)
    _prepared_conv.cache_clear()
    yield
    _prepared_conv.cache_clear()


# (data NCHW, weight OIHW, IR attrs): odd and even planes, every padding, a 1x1 plane, an empty batch
CASES = [
    ((1, 64, 8, 8), (16, 64, 3, 3), dict(padding=1)),
    ((2, 64, 7, 9), (5, 64, 3, 3), dict(padding=1)),
    ((1, 70, 5, 6), (3, 70, 3, 3), {}),
    ((1, 64, 9, 4), (7, 64, 3, 3), dict(padding=(1, 0, 0, 1))),
    ((1, 64, 4, 5), (2, 64, 3, 3), dict(padding=(2, 3, 2, 0))),
    ((3, 64, 1, 1), (4, 64, 3, 3), dict(padding=1)),
    ((0, 64, 6, 6), (4, 64, 3, 3), dict(padding=1)),
]


def _plan_method(data, weight, attrs) -> str:
    return _conv_geometry(data, weight, attrs.get("strides", 1), attrs.get("padding", 0),
                          attrs.get("dilation", 1), attrs.get("groups", 1), "NHWC")[0].method


@pytest.mark.parametrize("data, weight, attrs", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_winograd_conv(dtype, data, weight, attrs, any_size):
    assert _plan_method(data, weight, attrs) == "winograd"
    rng = np.random.default_rng(0)
    x, w = rand(rng, data, dtype), rand(rng, weight, dtype)
    expected = conv_ref(x, w, attrs, "ort" if dtype == "float32" else "ref")
    got = run_kernel("nn.conv", last(x), hwio(w), data_layout="NHWC", **attrs)
    assert_near(got, last(expected), dtype)


@pytest.mark.parametrize("data, weight, attrs", CASES[:5])
def test_winograd_conv_bias_act(data, weight, attrs, any_size):
    rng = np.random.default_rng(1)
    x, w, b = rand(rng, data, "float32"), rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    expected = np.maximum(conv_ref(x, w, attrs, "ort") + b.reshape(-1, 1, 1), 0)
    got = run_kernel("nn.conv_bias_act", last(x), hwio(w), b, data_layout="NHWC", activation="relu", **attrs)
    assert_near(got, last(expected))


def test_winograd_blocks_of_tile_rows(monkeypatch):
    """Blocks of one tile row (the last one short) give the one-block result
    (to rounding: OpenBLAS may sum a GEMM of few rows in another order)."""
    rng = np.random.default_rng(2)
    x, w = rand(rng, (2, 64, 11, 10), "float32"), rand(rng, (6, 64, 3, 3), "float32")
    b = rand(rng, (6,), "float32")
    whole = run_kernel("nn.conv_bias_act", last(x), hwio(w), b, data_layout="NHWC", padding=1)
    monkeypatch.setattr(conv_winograd, "BLOCK_BYTES", 1)
    monkeypatch.setattr(conv_winograd, "BLOCK_MIN_TILES", 1)
    plan = _conv_geometry(x.shape, w.shape, 1, 1, 1, 1, "NHWC")[0].winograd
    assert conv_winograd.block_rows(plan, 64, 6, 4) == 1 and plan.tiles == (6, 5)
    blocked = run_kernel("nn.conv_bias_act", last(x), hwio(w), b, data_layout="NHWC", padding=1)
    np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-6 * np.abs(whole).max())
    expected = conv_ref(x, w, dict(padding=1), "ort") + b.reshape(-1, 1, 1)
    assert_near(blocked, last(expected))


def test_winograd_weight_transform_follows_a_writeable_weight(any_size):
    """A read-only weight's transform is kept; a writeable one may change between calls."""
    rng = np.random.default_rng(3)
    x, w = last(rand(rng, (1, 64, 6, 6), "float32")), hwio(rand(rng, (4, 64, 3, 3), "float32"))
    out = np.empty((1, 6, 6, 4), np.float32)
    conv_bias(x, w, None, out=out, **op_attrs("nn.conv", padding=1, data_layout="NHWC"))
    w *= 2
    twice = np.empty_like(out)
    conv_bias(x, w, None, out=twice, **op_attrs("nn.conv", padding=1, data_layout="NHWC"))
    np.testing.assert_allclose(twice, 2 * out, rtol=1e-6, atol=1e-6)
    w.flags.writeable = False
    first = np.empty_like(out)
    conv_bias(x, w, None, out=first, **op_attrs("nn.conv", padding=1, data_layout="NHWC"))
    again = np.empty_like(out)
    conv_bias(x, w, None, out=again, **op_attrs("nn.conv", padding=1, data_layout="NHWC"))
    np.testing.assert_array_equal(first, twice)
    np.testing.assert_array_equal(again, twice)


@pytest.mark.parametrize("data, weight, attrs", [
    ((1, 32, 8, 8), (16, 32, 3, 3), dict(padding=1)),                 # too few channels
    ((1, 64, 8, 8), (16, 64, 3, 3), dict(padding=1, strides=2)),
    ((1, 64, 8, 8), (16, 64, 3, 3), dict(padding=2, dilation=2)),
    ((1, 64, 8, 8), (16, 32, 3, 3), dict(padding=1, groups=2)),
    ((1, 64, 8, 8), (16, 64, 5, 5), dict(padding=2)),
    ((1, 64, 8, 8), (16, 64, 3, 1), dict(padding=(1, 0))),
])
def test_winograd_only_where_it_applies(data, weight, attrs):
    assert _plan_method(data, weight, attrs) != "winograd"


@pytest.mark.parametrize("plane, picked", [
    ((8, 8), True), ((10, 10), True), ((9, 9), True), ((56, 55), True),
    ((7, 7), False),            # 16 tiles, but 49 of their 64 outputs wanted
    ((6, 6), False),            # 9 tiles: too few GEMM rows
    ((4, 4), False), ((1, 1), False), ((2, 40), True), ((1, 40), False),
])
def test_winograd_needs_enough_tiles_mostly_used(plane, picked):
    assert (_plan_method((1, 64, *plane), (8, 64, 3, 3), dict(padding=1)) == "winograd") == picked
    assert conv_winograd.prefers_winograd((3, 3), (1, 1), (1, 1), 1, 64, None)    # unknown lengths: large
    assert conv_winograd.prefers_winograd((3, 3), (1, 1), (1, 1), 1, 64, ("h", 5))

def test_winograd_workspace_grows_with_the_batch():
    one = conv_workspace((1, 40, 40, 128), (3, 3, 128, 64), "float32", **op_attrs("nn.conv", padding=1, data_layout="NHWC"))
    two = conv_workspace((2, 40, 40, 128), (3, 3, 128, 64), "float32", **op_attrs("nn.conv", padding=1, data_layout="NHWC"))
    padded = 42 * 42 * 128 * 4
    assert one > padded and two - one >= padded


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 3e38])
@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_winograd_redoes_a_call_whose_result_is_not_finite(bad):
    """An inf or NaN input (or one so large the transforms overflow) gives
    what the direct conv gives: Winograd's transforms subtract values, and
    inf - inf would be NaN where the direct sums are +-inf (found by the
    differential campaign: a sigmoid of such a conv was NaN, not 1)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 64, 8, 8)).astype(np.float32)
    x[0, 3, 4, 4] = bad
    w = np.abs(rng.standard_normal((4, 64, 3, 3))).astype(np.float32)      # one sign: no inf - inf in a sum
    assert _plan_method(x.shape, w.shape, dict(padding=1)) == "winograd"
    got = run_kernel("nn.conv", last(x), hwio(w), data_layout="NHWC", padding=1)
    expected = last(conv_ref(x, w, dict(padding=1), "ort"))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    assert_near(got[finite], expected[finite])
    assert not finite.all()


@pytest.mark.parametrize("data, weight, by_panels", [
    ((1, 512, 7, 7), (512, 512, 3, 3), True),      # ResNet's last stage: 16 tiles, 49 of 64 outputs wanted
    ((2, 256, 5, 6), (256, 256, 3, 3), True),      # 9 tiles a image
    ((1, 128, 2, 2), (512, 128, 3, 3), True),      # one tile
    ((1, 256, 7, 7), (128, 256, 3, 3), False),     # 128 KiB matrices: below gemm_panels.MIN_RHS_BYTES
    ((1, 512, 7, 9), (512, 512, 3, 3), False),     # 20 tiles: more GEMM rows than panels take on 2 threads
    ((1, 512, 8, 8), (512, 512, 3, 3), False),     # Winograd anyway (prefers_winograd)
])
def test_small_maps_of_large_matrices_plan_winograd_by_panels(data, weight, by_panels):
    plan = _conv_geometry(data, weight, 1, 1, 1, 1, "NHWC")[0]
    assert plan.by_panels is by_panels
    assert (plan.method == "winograd") is (by_panels or data[2:] == (8, 8))


@pytest.fixture
def winograd_calls(monkeypatch):
    """The calls that ran by Winograd (the plan cache cleared before and after)."""
    calls = []
    real = conv_winograd.run_winograd
    monkeypatch.setattr(conv_winograd, "run_winograd", lambda *args: (calls.append(args[1].dtype), real(*args))[1])
    _prepared_conv.cache_clear()
    yield calls
    _prepared_conv.cache_clear()


@pytest.mark.parametrize("available, threads, dtype, taken", [
    (True, 1, "float32", True), (True, 2, "float32", False), (False, 1, "float32", False),
    (True, 1, "float64", False)])
def test_winograd_by_panels_runs_only_where_its_gemms_take_panels(monkeypatch, winograd_calls, available, threads,
                                                                  dtype, taken):
    from relaxpack.runtime.kernels import gemm_panels
    monkeypatch.setattr(gemm_panels, "available", lambda: available)
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: threads)
    rng = np.random.default_rng(3)
    x, w = rand(rng, (1, 256, 3, 5), dtype), rand(rng, (256, 256, 3, 3), dtype)
    got = run_kernel("nn.conv", last(x), hwio(w), data_layout="NHWC", padding=1)
    assert bool(winograd_calls) is taken
    assert_near(got, last(conv_ref(x, w, dict(padding=1), "ort" if dtype == "float32" else "ref")), dtype)


def test_winograd_by_panels_has_room_for_either_method():
    attrs = op_attrs("nn.conv", padding=1, data_layout="NHWC")
    both = conv_workspace((1, 7, 7, 512), (3, 3, 512, 512), "float32", **attrs)
    plan = _conv_geometry((1, 512, 7, 7), (512, 512, 3, 3), 1, 1, 1, 1, "NHWC")[0]
    from relaxpack.runtime.kernels import conv_nhwc
    from relaxpack.runtime.kernels._workspace import scratch_nbytes
    for method in (plan, plan.fallback):
        assert both >= scratch_nbytes(conv_nhwc.scratch_layouts(method, 1, 512, 512, np.float32, direct=True))


def test_winograd_by_panels_drops_its_transformed_weight_and_makes_it_again_when_needed(monkeypatch,
                                                                                         winograd_calls):
    """A bound weight's transformed ``U`` is dropped once its panels are packed (the 16 GEMMs read
    the panels, the same bits call after call); a call the panels do not take (no small-matrix
    kernel) makes ``U`` again and keeps it from then on."""
    from relaxpack.runtime.kernels import gemm_panels, get_kernel
    monkeypatch.setattr(gemm_panels, "available", lambda: True)
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: 1)
    rng = np.random.default_rng(6)
    x, w = rand(rng, (1, 256, 3, 5), "float32"), rand(rng, (256, 256, 3, 3), "float32")
    data, weight = last(x), hwio(w)
    weight.setflags(write=False)
    attrs = op_attrs("nn.conv", padding=1, data_layout="NHWC")
    conv = get_kernel("nn.conv").fn
    expected = last(conv_ref(x, w, dict(padding=1), "ort"))

    def run():
        out = np.empty(expected.shape, np.float32)
        conv(data, weight, out=out, **attrs)
        return out
    first = run()
    holder, slot = conv_winograd._WEIGHTS.get(weight)
    assert winograd_calls and slot[0] is not None and holder[0] is None      # panels kept, U dropped
    for _ in range(2):
        np.testing.assert_array_equal(run(), first)
    assert holder[0] is None
    assert_near(first, expected)
    monkeypatch.setattr(gemm_panels, "available", lambda: False)        # np.matmul reads U: made again
    monkeypatch.setattr(conv_winograd, "panels_pay", lambda dtype: True)  # (Winograd still planned)
    assert_near(run(), expected)
    assert holder[0] is not None and holder[1]
    monkeypatch.setattr(gemm_panels, "available", lambda: True)
    np.testing.assert_array_equal(run(), first)                           # the kept panels again
    assert holder[0] is not None                                          # and U stays
