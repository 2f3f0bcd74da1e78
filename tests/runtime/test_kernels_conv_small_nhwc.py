"""Channels-last convs specialized per instruction (conv_small_nhwc.py): bit for bit the generic
kernel, call after call, for each method the runner takes (pointwise, gemm, depthwise with and without
stride phases), with bound or per-call weights and biases, a planned workspace full of garbage or
scratch of its own; and the calls it leaves to the generic kernel."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_small_nhwc, get_kernel
from relaxpack.runtime.kernels.nn import _prepared_conv

from .test_kernels_conv_small import full_attrs, out_for, workspace_for
from .test_kernels_registry import rand

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn
CONV = get_kernel("nn.conv").fn

# (data NHWC, weight HWIO, attrs, the method the runner takes)
CASES = [
    ((1, 16, 24, 16), (1, 1, 16, 16), dict(), "pointwise"),
    ((2, 5, 7, 3), (1, 1, 3, 10), dict(), "pointwise"),
    ((1, 8, 12, 24), (3, 3, 24, 32), dict(padding=(1, 1, 1, 1)), "gemm"),
    ((2, 9, 11, 5), (3, 2, 5, 7), dict(strides=(2, 1), padding=(0, 1, 2, 0), dilation=(1, 2)), "gemm"),
    ((1, 7, 6, 4), (2, 2, 4, 5), dict(), "gemm"),                                      # no padding
    ((1, 6, 9, 4), (1, 1, 4, 6), dict(strides=(2, 2)), "gemm"),                         # 1x1 stride 2
    ((1, 5, 300, 5), (1, 5, 5, 8), dict(strides=(1, 3), padding=(0, 2, 0, 2)), "gemm"),  # a 1-d conv's shape
    ((1, 2, 3, 64), (3, 3, 64, 64), dict(padding=(1, 1, 1, 1)), "gemm"),                 # ResNet's last stage
    # a padded copy past OWN_PADDED_MAX_BYTES (256 KiB): the workspace's, its padding zeroed every call
    ((1, 50, 60, 24), (3, 3, 24, 8), dict(strides=(2, 2), padding=(1, 2, 1, 0)), "gemm"),
    ((1, 16, 24, 24), (3, 3, 1, 24), dict(groups=24, padding=(1, 1, 1, 1)), "depthwise"),
    ((1, 31, 48, 16), (3, 3, 1, 16), dict(groups=16, strides=(2, 2), padding=(1, 1, 1, 1)), "depthwise"),
    ((2, 8, 12, 48), (3, 3, 1, 48), dict(groups=48, strides=(2, 2), padding=(1, 1, 1, 1)), "depthwise"),
    ((1, 9, 13, 6), (5, 5, 1, 6), dict(groups=6, padding=(2, 2, 2, 2), dilation=(1, 2)), "depthwise"),
    ((1, 9, 13, 6), (3, 3, 1, 6), dict(groups=6), "depthwise"),                          # reads the input
    ((1, 11, 40, 200), (3, 3, 1, 200), dict(groups=200, strides=(2, 2), padding=(1, 1, 1, 1)), "depthwise"),
    # slots whose first columns read only padding; a 5x5 stride 2 (MobileNetV3's)
    ((1, 5, 7, 9), (3, 3, 1, 9), dict(groups=9, strides=(2, 2), padding=(1, 5, 2, 4)), "depthwise"),
    ((1, 8, 12, 36), (5, 5, 1, 36), dict(groups=36, strides=(2, 2), padding=(2, 2, 2, 2)), "depthwise"),
]
ACTIVATIONS = [None, "relu", ("clip", -0.5, 0.5), "silu", "sigmoid", "hard_swish", "hard_swish6",
               ("hard_sigmoid", 0.2, 0.5), ["hard_sigmoid", 0.25, 0.5]]


def nhwc_attrs(attrs, activation=None):
    return full_attrs({**attrs, "data_layout": "NHWC"}, activation)


def plan_of(data, weight, attrs):
    return _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
                          "NHWC")[0]


def check_calls(call, data, weight, attrs, dtype, rng, workspace, rounds=3, w=None, b=None, mutate=False):
    w = rand(rng, weight, dtype) if w is None else w
    b = rand(rng, (weight[-1],), dtype) if b is None else b
    out = out_for(data, weight, attrs, dtype)
    for round_ in range(rounds):
        if mutate:                                  # the same objects with new values (registers)
            w[...] = rand(rng, weight, dtype)
            b[...] = rand(rng, (weight[-1],), dtype)
        x = rand(rng, data, dtype)
        call(x, w, b, out=out, workspace=workspace)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        if workspace is not None:
            workspace[:] = 0xCD                     # another kernel used the workspace in between


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("data, weight, attrs, method", CASES, ids=lambda c: str(c) if isinstance(c, str) else None)
def test_the_runner_is_the_generic_kernel_bit_for_bit(data, weight, attrs, method, activation, dtype):
    attrs = nhwc_attrs(attrs, activation)
    plan = plan_of(data, weight, attrs)
    assert plan.method == method
    assert conv_small_nhwc.layouts(plan, data[0], data[-1], attrs["groups"], dtype) is not None
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    check_calls(call, data, weight, attrs, dtype, np.random.default_rng(0), workspace_for(data, weight, attrs, dtype))


@pytest.mark.parametrize("data, weight, attrs, method", CASES[::2], ids=lambda c: str(c) if isinstance(c, str) else None)
def test_weights_and_biases_in_registers_are_read_every_call(data, weight, attrs, method):
    """A weight or bias computed at run time is the same array object run after run with new values:
    no tiled copy of it is kept."""
    attrs = nhwc_attrs(attrs, "relu")
    rng = np.random.default_rng(1)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, False))
    check_calls(call, data, weight, attrs, "float32", rng, workspace_for(data, weight, attrs, "float32"),
                w=rand(rng, weight, "float32"), b=rand(rng, (weight[-1],), "float32"), mutate=True)


@pytest.mark.parametrize("data, weight, attrs, method", CASES[1::3], ids=lambda c: str(c) if isinstance(c, str) else None)
def test_without_a_workspace_or_a_bias(data, weight, attrs, method):
    attrs = nhwc_attrs(attrs)
    rng = np.random.default_rng(2)
    check_calls(CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True)), data, weight, attrs, "float32", rng,
                None)
    del attrs["activation"]
    call = CONV.specialize_attrs(attrs, (False, True))
    w = rand(rng, weight, "float32")
    for _ in range(2):
        x = rand(rng, data, "float32")
        out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
        call(x, w, out=out)
        CONV(x, w, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


def test_a_strided_input_view():
    """The input may be any view (a slice of a larger tensor): the taps read it through its strides."""
    data, weight, attrs, _ = CASES[4]
    attrs = nhwc_attrs(attrs, "relu")
    rng = np.random.default_rng(3)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[-1],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    big = rand(rng, (1, 7, 6, 9), "float32")
    x = big[..., 2:6]
    out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
    call(x, w, b, out=out)
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("case", ["grouped", "float16", "winograd", "empty", "nchw out"])
def test_other_channels_last_calls_go_to_the_generic_kernel(case, monkeypatch):
    prepared = []
    real = conv_small_nhwc.prepare
    monkeypatch.setattr(conv_small_nhwc, "prepare", lambda *a: prepared.append(1) or real(*a))
    data, weight, attrs, dtype = (1, 8, 12, 8), (3, 3, 8, 8), nhwc_attrs(dict(padding=(1, 1, 1, 1)), "relu"), "float32"
    if case == "grouped":
        weight, attrs = (3, 3, 4, 8), {**attrs, "groups": 2}
    elif case == "float16":
        dtype = "float16"
    elif case == "winograd":
        data, weight = (1, 20, 20, 64), (3, 3, 64, 64)
    elif case == "empty":
        data = (0, 8, 12, 8)
    rng = np.random.default_rng(4)
    if case == "nchw out":      # not a layout the NHWC engine writes: the generic kernel says so
        attrs = {**attrs, "out_layout": "NCHW"}
        call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
        with pytest.raises(Exception, match="out_layout"):
            call(rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (8,), dtype),
                 out=np.empty((1, 8, 8, 12), np.float32))
    else:
        call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
        check_calls(call, data, weight, attrs, dtype, rng, workspace_for(data, weight, attrs, dtype), rounds=2)
    assert prepared == []


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_silu_and_sigmoid_saturate_quietly(activation, dtype):
    """An SE block's 1-pixel conv whose sums reach +-800 (exp overflows to inf): the runner's in-place
    SiLU / sigmoid gives the kernel's values bit for bit (0, -0, 1, x), with no warning."""
    attrs = nhwc_attrs({}, activation)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    x = np.array([[[[1.0, -1.0, 0.5, 2.0]]]], dtype)
    w = np.full((1, 1, 4, 6), 100.0, dtype)
    b = np.array([-1000.0, 1000.0, 0.0, -0.0, 700.0, -700.0], dtype)
    out, want = np.full((1, 1, 1, 6), np.nan, dtype), np.full((1, 1, 1, 6), np.nan, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call(x, w, b, out=out)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("case", [CASES[7], CASES[8], CASES[-2]], ids=["stride 1", "slots", "slots, padding only"])
def test_depthwise_inputs_and_outputs_that_are_kept_views(case):
    """An arena's input and output are the same view objects run after run with new values: the
    runner keeps their views (and its padded copy's zero padding) and still reads every call's
    values, bit for bit the generic kernel's."""
    data, weight, attrs, _ = case
    attrs = nhwc_attrs(attrs, "hard_swish")
    rng = np.random.default_rng(4)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[-1],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    x_arena = np.empty(int(np.prod(data)) + 8, np.float32)
    x = x_arena[8:].reshape(data)
    want = out_for(data, weight, attrs, "float32")
    out = np.empty(want.size + 4, np.float32)[4:].reshape(want.shape)
    workspace = workspace_for(data, weight, attrs, "float32")
    for _ in range(3):
        x[...] = rand(rng, data, "float32")
        call(x, w, b, out=out, workspace=workspace)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
        if workspace is not None:
            workspace[:] = 0xCD


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[8]], ids=["pointwise", "gemm", "depthwise"])
def test_kept_views_with_another_weight_or_workspace(case):
    """The runner of the last call is reused unchecked only for the same views, weight, bias and
    workspace: another weight (or bias, or workspace) with the same views prepares again."""
    data, weight, attrs, _ = case
    attrs = nhwc_attrs(attrs, "relu")
    rng = np.random.default_rng(6)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    x = np.empty(int(np.prod(data)) + 8, np.float32)[8:].reshape(data)
    x[...] = rand(rng, data, "float32")
    want = out_for(data, weight, attrs, "float32")
    out = np.empty(want.size + 4, np.float32)[4:].reshape(want.shape)
    b = rand(rng, (weight[-1],), "float32")
    for _ in range(2):
        w = rand(rng, weight, "float32")
        for workspace in (workspace_for(data, weight, attrs, "float32"), None):
            for bias in (b, b.copy()):
                call(x, w, bias, out=out, workspace=workspace)
                CONV_BIAS_ACT(x, w, bias, out=want, **attrs)
                np.testing.assert_array_equal(out, want)


def test_channel_runs_copy_strided_pixels_as_void_items():
    rng = np.random.default_rng(3)
    x = rng.random((2, 5, 8, 6)).astype(np.float32)
    dst = np.zeros((2, 5, 4, 6), np.float32)
    for src in (x[:, :, ::2], x[:, ::2, 1::2], x[:, :, ::-2]):
        d, s = conv_small_nhwc.as_channel_runs(dst[:, :src.shape[1]], src)
        assert d.dtype.kind == s.dtype.kind == "V" and d.shape[-1] == s.shape[-1] == 1
        np.copyto(d, s)
        np.testing.assert_array_equal(dst[:, :src.shape[1]], src)
    # rows contiguous over pixels: as they are, or one void item per row (into a padded copy's interior)
    d, s = conv_small_nhwc.as_channel_runs(dst, x[:, :, :4])
    assert d is dst and s.base is x
    padded = np.zeros((2, 7, 6, 6), np.float32)
    for src, target in ((x[:, :, :4], dst), (x[:, :, 2:6], padded[:, 1:6, 1:5])):
        d, s = conv_small_nhwc.as_row_runs(target, src)
        assert d.dtype.itemsize == s.dtype.itemsize == 4 * 6 * 4 and d.shape == s.shape == (2, 5, 1)
        np.copyto(d, s)
        np.testing.assert_array_equal(target, src)
    assert not padded[:, 0].any() and not padded[:, 6].any() and not padded[..., 0, :].any() \
        and not padded[..., 5, :].any()
    # channels not contiguous, no channels, no pixels, wholly contiguous, other dtypes: as they are
    for src, target in ((x[..., ::2][:, :, :4], dst[..., :3]), (x[..., :0][:, :, ::2], dst[..., :0]),
                        (x[:, :, :0], dst[:, :, :0]), (x[:, :, :4].copy(), dst),
                        (x[:, :, :4], dst.astype(np.float64))):
        for runs in (conv_small_nhwc.as_channel_runs, conv_small_nhwc.as_row_runs):
            d, s = runs(target, src)
            assert d is target and s is src
    # channels first: rows of W
    planes = x.transpose(0, 3, 1, 2)[:, :, :, 1:7].copy()           # (2, 6, 5, 6)
    padded = np.zeros((2, 6, 7, 8), np.float32)
    d, s = conv_small_nhwc.as_row_runs(padded[:, :, 1:6, 1:7], planes, 1)
    assert d.shape == s.shape == (2, 6, 5, 1)
    np.copyto(d, s)
    np.testing.assert_array_equal(padded[:, :, 1:6, 1:7], planes)
    assert padded.sum() == planes.sum()


# the runner's switches at their edges: the pixels-major GEMM as np.dot up to DOT_MAX_VALUES results
# (2^14) and never with a dim of 1; a bound bias tiled over all of an output of up to
# tiled_operand.TILE_MAX_SIZE (2^16) values, else over one row; batches, 1-pixel maps, an empty batch
EDGES = [
    ((1, 32, 32, 8), (1, 1, 8, 16), dict()),                    # 2^14 results: np.dot
    ((1, 33, 32, 8), (1, 1, 8, 16), dict()),                    # just over: np.matmul
    ((1, 64, 32, 8), (1, 1, 8, 16), dict()),                    # 2^15 values
    ((1, 65, 32, 8), (1, 1, 8, 16), dict()),                    # (the 2^16 tile bar: test_a_bound_bias_as_a_whole_tile_up_to_the_bar)
    ((3, 8, 12, 16), (1, 1, 16, 24), dict()),                   # a batch
    ((1, 1, 1, 16), (1, 1, 16, 8), dict()),                     # one pixel: np.matmul
    ((1, 4, 5, 1), (1, 1, 1, 6), dict()),                       # one input channel
    ((1, 4, 5, 6), (1, 1, 6, 1), dict()),                       # one output channel
    ((0, 4, 5, 6), (1, 1, 6, 3), dict()),                       # an empty batch: the generic kernel
    ((2, 7, 9, 5), (3, 3, 5, 7), dict(padding=(1, 1, 1, 1))),  # gemm, a batch
    ((1, 64, 32, 16), (3, 3, 1, 16), dict(groups=16, padding=(1, 1, 1, 1))),   # depthwise, 2^15 values
    ((3, 9, 7, 24), (3, 3, 1, 24), dict(groups=24, strides=(2, 2), padding=(1, 1, 1, 1))),
]


@pytest.mark.parametrize("activation", [None, "relu", "silu"], ids=str)
@pytest.mark.parametrize("data, weight, attrs", EDGES, ids=str)
def test_the_runner_at_the_edges_of_its_switches(data, weight, attrs, activation):
    attrs = nhwc_attrs(attrs, activation)
    rng = np.random.default_rng(3)
    for constant in [(False, True, True), (False, False, False)]:
        call = CONV_BIAS_ACT.specialize_attrs(attrs, constant)
        check_calls(call, data, weight, attrs, "float32", rng, workspace_for(data, weight, attrs, "float32"),
                    mutate=not constant[1])


def test_rows_product_takes_dot_for_true_matrices_up_to_its_bar():
    bar = conv_small_nhwc.DOT_MAX_VALUES
    assert conv_small_nhwc.rows_product(bar // 16, 8, 16) is np.dot
    assert conv_small_nhwc.rows_product(bar // 16 + 1, 8, 16) is not np.dot
    for dims in [(1, 8, 16), (8, 1, 16), (8, 16, 1)]:
        assert conv_small_nhwc.rows_product(*dims) is not np.dot
    a, b = np.ones((3, 2), np.float32), np.ones((2, 4), np.float32)
    out = np.empty((3, 4), np.float32)
    conv_small_nhwc.rows_product(3, 2, 4)(a, b, out)
    conv_small_nhwc.rows_product(bar, 2, 4)(a, b, out)         # the matmul form takes the same arguments
    np.testing.assert_array_equal(out, np.full((3, 4), 2, np.float32))


@pytest.mark.parametrize("pixels, tiled", [(4096, True), (4097, False)])      # 16 channels: 2**16 values
def test_a_bound_bias_as_a_whole_tile_up_to_the_bar(pixels, tiled, monkeypatch):
    """A bound bias is added as a tile of ``out``'s whole shape up to TILE_MAX_SIZE values (made once
    per runner and shape), past it as rows; an arena view of ``out`` and fresh arrays of alternating
    shapes give the generic kernel's results bit for bit either way."""
    from relaxpack.runtime.kernels import tiled_operand
    made = []
    real = conv_small_nhwc.tile_of
    monkeypatch.setattr(conv_small_nhwc, "tile_of", lambda c, out: made.append(out.shape) or real(c, out))
    weight = (1, 1, 8, 16)
    attrs = nhwc_attrs({}, "relu")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    rng = np.random.default_rng(4)
    w, b = rand(rng, weight, "float32"), rand(rng, (16,), "float32")
    arena = np.zeros(2 * pixels * 16, np.float32)
    shapes = [(1, 1, pixels, 8), (1, 1, pixels, 8), (1, 3, 5, 8), (1, 1, pixels, 8)]
    workspace = workspace_for(shapes[0], weight, attrs, "float32")
    for i, data in enumerate(shapes):
        x = rand(rng, data, "float32")
        want = out_for(data, weight, attrs, "float32")
        out = arena[:want.size].reshape(want.shape) if i < 2 else np.empty(want.shape, np.float32)
        call(x, w, b, out=out, workspace=workspace)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
    # once per runner: not again for the same arena view; a new shape prepares a new runner
    assert made == [(1, 1, pixels, 16), (1, 3, 5, 16), (1, 1, pixels, 16)]
    assert (real(b, np.empty(made[0], np.float32)) is not None) == tiled
    assert pixels * 16 <= tiled_operand.TILE_MAX_SIZE or not tiled


# the tap-major depthwise runner (conv_small_nhwc._depthwise_taps) at the edges of its switches:
# a strided conv whose taps read runs of C values (output width below conv_depthwise.SLOTS_MIN_WIDTH)
# of fewer than SLOTS_MAX_CHANNELS channels, a bound weight, at most TAPS_MAX_COLUMN_VALUES columns
def _dw(data, kernel, strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1)):
    channels = data[-1]
    return data, (*kernel, 1, channels), dict(groups=channels, strides=strides, padding=padding, dilation=dilation)


TAPS_EDGES = [
    (_dw((1, 5, 5, 8), (3, 3)), True),                         # output width 3: runs of C
    (_dw((1, 5, 7, 8), (3, 3)), False),                        # width 4: slots
    (_dw((1, 4, 5, 159), (3, 3)), True),                       # 159 channels
    (_dw((1, 4, 5, 160), (3, 3)), False),                      # 160: runs long enough
    (_dw((1, 63, 3, 128), (2, 2), padding=(0, 0, 1, 1)), True),    # 4 taps x 32 x 2 x 128 = 2^15 columns
    (_dw((1, 63, 3, 129), (2, 2), padding=(0, 0, 1, 1)), False),   # 2^15 + 256
    (_dw((1, 64, 4, 8), (2, 2), padding=(0, 0, 0, 0)), False),     # unpadded: reads its input, not this runner
    (_dw((1, 9, 9, 8), (3, 3), dilation=(2, 2), padding=(2, 2, 2, 2)), False),   # width 5: slots
    (_dw((1, 9, 5, 8), (3, 3), dilation=(2, 2), padding=(2, 1, 2, 0)), True),    # dilated, uneven padding
    (_dw((3, 8, 6, 36), (5, 5), padding=(2, 2, 2, 2)), True),  # MobileNetV3's 5x5/2 at batch 3
    (_dw((2, 7, 5, 5), (3, 3), strides=(3, 3)), True),         # stride 3, a batch
    (_dw((1, 1, 1, 4), (3, 3)), True),                         # one pixel in, one out
    (_dw((1, 34, 34, 100), (3, 3), strides=(16, 16)), True),   # a padded copy past OWN_PADDED_MAX_BYTES
    (_dw((1, 5, 3, 8), (3, 3), strides=(1, 1)), False),        # stride 1: not this runner
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", [None, "relu", "silu", "hard_swish6"], ids=str)
@pytest.mark.parametrize("case, taken", TAPS_EDGES, ids=str)
def test_the_tap_major_depthwise_runner_at_its_edges(case, taken, activation, dtype, monkeypatch):
    """Taken exactly where its switches say, and bit for bit the generic kernel (whose einsum adds
    the same products in the same order from zero), new arrays or kept views, the workspace
    overwritten between calls; a weight in registers takes the plan's einsum."""
    data, weight, attrs = case
    attrs = nhwc_attrs(attrs, activation)
    took = []
    runner = conv_small_nhwc._depthwise_taps
    monkeypatch.setattr(conv_small_nhwc, "_depthwise_taps", lambda *a, **k: took.append(1) or runner(*a, **k))
    rng = np.random.default_rng(7)
    for constant in [(False, True, True), (False, False, False)]:
        took.clear()
        call = CONV_BIAS_ACT.specialize_attrs(attrs, constant)
        check_calls(call, data, weight, attrs, dtype, rng, workspace_for(data, weight, attrs, dtype),
                    mutate=not constant[1])
        assert bool(took) == (taken and constant[1])
    # kept views: the same input and output objects with new values
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    w, b = rand(rng, weight, dtype), rand(rng, (weight[-1],), dtype)
    x = np.empty(int(np.prod(data)) + 3, dtype)[3:].reshape(data)
    want = out_for(data, weight, attrs, dtype)
    out = np.empty(want.size + 2, dtype)[2:].reshape(want.shape)
    workspace = workspace_for(data, weight, attrs, dtype)
    for _ in range(3):
        x[...] = rand(rng, data, dtype)
        call(x, w, b, out=out, workspace=workspace)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
        if workspace is not None:
            workspace[:] = 0xCD


@pytest.mark.parametrize("data, weight, attrs, method", [
    ((1, 7, 7, 512), (1, 1, 512, 256), dict(), "pointwise"),                             # ResNet's 7x7 1x1s
    ((1, 9, 9, 64), (3, 3, 64, 130), dict(strides=(2, 2), padding=(1, 1, 1, 1)), "gemm"),  # a tail panel too
    ((1, 40, 40, 32), (1, 1, 32, 48), dict(), "pointwise"),          # many pixels by a small weight
    ((1, 30, 30, 16), (3, 3, 16, 32), dict(padding=(1, 1, 1, 1)), "gemm"),
], ids=["pointwise", "gemm", "small-pointwise", "small-gemm"])
@pytest.mark.parametrize("bound", [True, False], ids=["bound", "registers"])
def test_pixels_by_a_weight_take_panels_on_both_paths(monkeypatch, data, weight, attrs, method, bound):
    """The runner and the generic kernel make the GEMM by gemm_panels alike (a bound weight's packed
    copy, or views of a weight computed at run time, read anew each call): the same bits."""
    from relaxpack.runtime.kernels import gemm_panels
    monkeypatch.setattr(gemm_panels, "available", lambda: True)
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: 1)
    products = []
    real = gemm_panels.product
    monkeypatch.setattr(gemm_panels, "product", lambda *args: (products.append(1), real(*args))[1])
    attrs = nhwc_attrs(attrs, "relu")
    assert plan_of(data, weight, attrs).method == method
    rng = np.random.default_rng(4)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, bound, bound))
    check_calls(call, data, weight, attrs, "float32", rng, workspace_for(data, weight, attrs, "float32"),
                w=rand(rng, weight, "float32"), b=rand(rng, (weight[-1],), "float32"), mutate=not bound)
    assert len(products) == 6                      # 3 rounds, the runner's call and the generic kernel's
