"""nn.conv / nn.conv_bias_act specialized per instruction (conv_small.py): bit for bit the generic
kernel, call after call, whether the fast path runs (small NCHW float32/float16 convs, with a
planned workspace or scratch of its own) or the call falls back (float64, depthwise, large; channels last
has its own runner: test_kernels_conv_small_nhwc.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relaxpack.ir.op import get_op_def
from relaxpack.runtime.kernels import get_kernel
from relaxpack.runtime.kernels.nn import _prepared_conv, conv_workspace

from .test_kernels_registry import rand

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn
CONV = get_kernel("nn.conv").fn

# (data, weight, attrs): small enough for the strided method, odd sizes, groups, stride, dilation, 1-d, 3-d
SMALL = [
    ((1, 16, 16, 24), (16, 16, 3, 3), dict(strides=(1, 1), padding=(1, 1, 1, 1))),
    ((2, 8, 18, 25), (8, 1, 3, 3), dict(groups=8, strides=(2, 2), padding=(1, 1, 1, 1))),  # depthwise
    ((2, 9, 11, 13), (12, 3, 3, 2), dict(groups=3, strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2))),
    ((1, 24, 8, 12), (32, 24, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),
    ((3, 4, 7, 6), (5, 4, 2, 2), dict()),                                                   # no padding
    ((1, 5, 300), (8, 5, 5), dict(strides=(3,), padding=(2, 2))),                            # conv1d
    ((1, 4, 6, 7, 9), (6, 4, 2, 1, 3), dict(padding=(1, 0, 0, 0, 1, 2))),                    # conv3d
    # stride 1 and padded: wide rows (conv_wide.py), with dilation and uneven padding, at the pitch bar
    ((2, 6, 9, 11), (8, 6, 3, 3), dict(padding=(2, 1, 0, 2), dilation=(2, 1))),
    ((1, 8, 4, 4), (8, 8, 3, 3), dict(padding=(1, 1, 1, 1))),                                 # 22 -> 24 columns
    ((1, 16, 2, 3), (16, 16, 3, 3), dict(padding=(1, 1, 1, 1))),                              # 8 columns
    ((3, 8, 4, 6), (16, 8, 3, 3), dict(padding=(1, 1, 1, 1))),             # batch 3: 30 -> 32 columns
    ((2, 4, 1, 2), (8, 4, 3, 3), dict(padding=(1, 1, 1, 1))),             # 2 -> 8 columns of pitch 4: 2 zero rows
    ((1, 16, 8, 1), (16, 16, 3, 3), dict(padding=(1, 1, 1, 1))),                              # not wide
    # padded copies above OWN_PADDED_MAX_BYTES (256 KiB): zeroed every call, not the instruction's own
    ((1, 16, 60, 60), (8, 16, 1, 1), dict(padding=(3, 3, 3, 3))),                             # wide
    ((1, 16, 100, 100), (8, 16, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),          # one copy
    ((2, 16, 5, 7), (16, 1, 3, 3), dict(groups=16, padding=(1, 1, 1, 1))),                   # depthwise, wide
    # strided: wide rows from the stride's phases (2^15 im2col values and more)
    ((1, 3, 61, 96), (16, 3, 7, 7), dict(strides=(2, 2), padding=(3, 3, 3, 3))),
    ((2, 8, 33, 40), (8, 8, 3, 3), dict(strides=(2, 1), padding=(0, 1, 2, 0))),
    ((1, 6, 60, 30), (4, 6, 2, 7), dict(strides=(3, 1), padding=(0, 3, 1, 3))),              # a phase without taps
    # a 1x1 conv that does not read its input as it is (stride, padding): one strided copy, its GEMM
    ((1, 16, 16, 24), (24, 16, 1, 1), dict(strides=(2, 2))),
    ((2, 8, 7, 9), (4, 8, 1, 1), dict(strides=(2, 3), padding=(1, 0, 0, 1))),
    # narrow planes (CRNN at width 4): not wide; output rows of 2 values copied as runs, of 1 as values
    ((2, 16, 16, 2), (24, 16, 3, 3), dict(padding=(1, 1, 1, 1))),
    ((2, 24, 8, 1), (32, 24, 3, 3), dict(padding=(1, 1, 1, 1))),
]
# silu, sigmoid, hard_swish(6), hard_sigmoid: the runner's own in-place arithmetic at float32, the kernels' at float16
ACTIVATIONS = [None, "relu", ("leakyrelu", 0.1), ("clip", -0.5, 0.5), ("hard_sigmoid", 0.2, 0.5), "silu", "sigmoid",
               "hard_swish", "hard_swish6"]


def full_attrs(attrs, activation=None):
    """``nn.conv_bias_act``'s attributes as the bytecode passes them: every one, the op's defaults filled."""
    return get_op_def("nn.conv_bias_act").full_attrs({**attrs, "activation": activation})


def out_for(data, weight, attrs, dtype):
    _, _, shape = _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"],
                                 attrs["groups"], attrs["data_layout"], attrs["out_layout"])
    return np.full(shape, np.nan, dtype)


def workspace_for(data, weight, attrs, dtype):
    nbytes = conv_workspace(data, weight, dtype, **{k: v for k, v in attrs.items() if k != "activation"})
    return np.full(nbytes or 0, 0xAB, np.uint8)          # garbage: the kernel must zero its padding


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("data, weight, attrs", SMALL)
def test_the_fast_path_is_the_generic_kernel_bit_for_bit(data, weight, attrs, activation, dtype):
    assert _prepared_conv(data, weight, *(full_attrs(attrs)[k] for k in
                                          ("strides", "padding", "dilation", "groups")), "NCHW")[0].method == "strided"
    attrs = full_attrs(attrs, activation)
    rng = np.random.default_rng(0)
    w, b = rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    for round_ in range(4):
        x = rand(rng, data, dtype)                     # a new input object each call, as a model input
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        ws[:] = 0xCD                                   # another kernel used the workspace in between


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", [None, "relu", "silu", "hard_swish"], ids=str)
@pytest.mark.parametrize("data, weight, attrs", [c for c in SMALL if c[2].get("groups", 1) == 1] + [
    ((3, 3, 64, 45), (16, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),           # a stem, batch 3
    ((1, 3, 61, 96), (16, 3, 4, 4), dict(strides=(4, 4))),                                  # unpadded, patchify
    ((1, 2, 1, 1), (3, 2, 1, 1), dict(strides=(2, 2))),                                     # one pixel
], ids=str)
def test_a_channels_first_conv_writing_channels_last_is_the_generic_kernel(data, weight, attrs, activation, dtype):
    """``out_layout="NHWC"`` with NCHW data: the strided method's runner (its GEMM the other way
    round, straight into ``out``) is the generic kernel bit for bit, call after call; convs of
    other methods (wide rows) fall back to it."""
    from relaxpack.runtime.kernels import conv_small
    from relaxpack.runtime.kernels.conv_strided import transposes_in_gemm
    attrs = {**full_attrs(attrs, activation), "out_layout": "NHWC"}
    rng = np.random.default_rng(3)
    w, b = rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    plan = _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], 1, "NCHW")[0]
    runner = conv_small._prepare(rand(rng, data, dtype), w, b, out, ws, attrs, True, True, None)
    assert (runner is not None) == transposes_in_gemm(plan)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    # rounds 0-1: new arrays (model inputs); 2-4: the same views with new values (an arena's)
    x_view = np.empty(int(np.prod(data)) + 1, dtype)[1:].reshape(data)
    out_view = np.empty(out.size + 1, dtype)[1:].reshape(out.shape)
    for round_ in range(5):
        x = rand(rng, data, dtype)
        if round_ >= 2:
            x_view[...] = x
            x, out = x_view, out_view
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        ws[:] = 0xCD


POINTWISE = [((1, 16, 16, 24), (32, 16, 1, 1)), ((3, 5, 7, 2), (4, 5, 1, 1)), ((2, 8, 300), (6, 8, 1)),
             ((1, 64, 60, 80), (16, 64, 1, 1)),      # (a large one: not the strided method's; GEMM blocks)
             ((3, 16, 40, 50), (32, 16, 1, 1)),      # a batch, GEMM blocks (gemm_blocks.py)
             # one image is a 2-d np.dot, but not with a dim of 1 (one pixel, input or output channel)
             ((1, 8, 1, 1), (4, 8, 1, 1)), ((1, 1, 3, 5), (4, 1, 1, 1)), ((1, 8, 3, 5), (1, 8, 1, 1))]


@pytest.mark.parametrize("activation", ACTIVATIONS[:2], ids=str)
@pytest.mark.parametrize("data, weight", POINTWISE)
def test_a_pointwise_conv_is_its_gemm_bit_for_bit(data, weight, activation, monkeypatch):
    from relaxpack.runtime.kernels import conv_small
    runners = []
    real = conv_small._pointwise
    monkeypatch.setattr(conv_small, "_pointwise", lambda *a: runners.append(1) or real(*a))
    attrs = full_attrs({}, activation)
    rng = np.random.default_rng(6)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    for bias in (b, None):
        call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
        for _ in range(2):
            x = rand(rng, data, "float32")
            out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
            call(x, w, bias, out=out)
            CONV_BIAS_ACT(x, w, bias, out=want, **attrs)
            np.testing.assert_array_equal(out, want)
    assert len(runners) == 2
    x = rand(rng, (data[0], data[2], data[1], *data[3:]), "float32").swapaxes(1, 2)    # a strided input view
    out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
    call(x, w, b, out=out)
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", ACTIVATIONS + ["gelu"], ids=str)
@pytest.mark.parametrize("data, weight", [((1, 16, 1), (1, 16, 1)), ((1, 16, 1, 1), (1, 16, 1, 1)),
                                          ((1, 1, 1), (1, 1, 1)),           # one value in, one out
                                          ((2, 16, 1), (1, 16, 1)), ((1, 16, 2), (1, 16, 1))], ids=str)
def test_a_pointwise_conv_of_one_value_is_the_generic_kernel(data, weight, activation, dtype):
    """A pointwise conv whose result is one value (a 1-channel head on one pixel: silero's) adds its
    bias and runs its activation in a two-value buffer: the generic kernel's bits for a constant
    bias (negated for SiLU and sigmoid), a register bias with new values, none, call after call,
    its input and output arena views; two values (a batch of 2, 2 pixels): the plain path."""
    attrs = full_attrs({}, activation)
    rng = np.random.default_rng(13)
    w = rand(rng, weight, dtype)
    out_buffer = np.empty(8, dtype)
    for constant, bias in [((False, True, True), rand(rng, (1,), dtype)), ((False, True, False), rand(rng, (1,), dtype)),
                           ((False, True), None)]:
        call = CONV_BIAS_ACT.specialize_attrs(attrs, constant)
        shape = out_for(data, weight, attrs, dtype).shape
        out = out_buffer[3:3 + int(np.prod(shape))].reshape(shape)
        x_buffer = np.empty(int(np.prod(data)) + 2, dtype)
        for scale in (1, 40, -40, 0.001, 1):
            if bias is not None and not constant[2]:
                bias[...] = rand(rng, (1,), dtype)          # a register: the same object, new values
            x = x_buffer[2:].reshape(data)
            x[...] = rand(rng, data, dtype) * scale
            call(x, w, bias, out=out)
            want = np.full(shape, np.nan, dtype)
            CONV_BIAS_ACT(x.copy(), w, bias, out=want, **attrs)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("data, weight, attrs", SMALL[:3])
def test_conv_without_bias_and_changing_operands(data, weight, attrs):
    attrs = full_attrs(attrs)
    del attrs["activation"]
    rng = np.random.default_rng(1)
    call = CONV.specialize_attrs(attrs, (False, True))
    out, ws = out_for(data, weight, attrs, "float32"), workspace_for(data, weight, attrs, "float32")
    for w in (rand(rng, weight, "float32"), rand(rng, weight, "float32")):   # a new weight: prepared again
        x = rand(rng, data, "float32")
        for workspace in (ws, None):                                         # none: scratch of its own
            call(x, w, out=out, workspace=workspace)
            want = out_for(data, weight, attrs, "float32")
            CONV(x, w, out=want, **attrs)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("case", ["float64", "nhwc", "depthwise", "large"])
def test_other_calls_fall_back_to_the_generic_kernel(case):
    data, weight, attrs, dtype = (1, 16, 16, 24), (16, 16, 3, 3), full_attrs(
        dict(strides=(1, 1), padding=(1, 1, 1, 1)), "relu"), "float32"
    if case == "float64":
        dtype = case
    elif case == "nhwc":
        data, weight, attrs = (1, 16, 24, 16), (3, 3, 16, 16), {**attrs, "data_layout": "NHWC"}
    elif case == "depthwise":       # too large for the strided method (small depthwise convs take it)
        data, weight, attrs = (1, 16, 40, 40), (16, 1, 3, 3), {**attrs, "groups": 16}
    else:
        data = (2, 16, 64, 64)
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (16,), dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    for _ in range(2):
        call(x, w, b, out=out, workspace=ws)
    want = out_for(data, weight, attrs, dtype)
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_weight_computed_at_run_time_is_read_every_call(dtype):
    """A weight in a register (a dequantized or computed one) is the same array object run after run
    with new values: nothing derived from its values is kept (constant says it is not bound)."""
    data, weight, attrs = SMALL[0]
    attrs = full_attrs(attrs, "relu")
    rng = np.random.default_rng(3)
    w, b, x = rand(rng, weight, dtype), rand(rng, (weight[0],), dtype), rand(rng, data, dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, False))
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    for _ in range(3):
        w[...] = rand(rng, weight, dtype)           # same object, new values
        b[...] = rand(rng, (weight[0],), dtype)
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


def test_a_float16_product_by_a_register_reads_it_every_call():
    matmul = get_kernel("matmul").fn
    rng = np.random.default_rng(4)
    lhs, rhs = rand(rng, (3, 5, 8), "float16"), rand(rng, (8, 6), "float16")
    for constant in [(False, False), (False, True)]:
        call = matmul.specialize_attrs({"out_dtype": None}, constant)
        for _ in range(3):
            if not constant[1]:
                rhs[...] = rand(rng, (8, 6), "float16")
            out, want = np.empty((3, 5, 6), np.float16), np.empty((3, 5, 6), np.float16)
            call(lhs, rhs, out=out)
            matmul(lhs, rhs, out=want, out_dtype=None)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("case", ["fresh out", "view out", "generic"])
def test_a_call_is_prepared_once_whatever_its_output_array(case, monkeypatch):
    """An output of a data-dependent shape is a new array every call (and a fresh one is not held
    on to); a view is the same object; a conv the fast path does not take is not asked again."""
    from relaxpack.runtime.kernels import conv_small
    prepared = []
    real = conv_small._prepare
    monkeypatch.setattr(conv_small, "_prepare", lambda *a: prepared.append(1) or real(*a))
    data, weight, attrs = SMALL[0]
    if case == "generic":
        data = (2, 16, 64, 64)
    attrs = full_attrs(attrs, "relu")
    rng = np.random.default_rng(5)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    arena = np.empty(out_for(data, weight, attrs, "float32").size + 16, np.float32)
    for _ in range(3):
        x = rand(rng, data, "float32")
        want = out_for(data, weight, attrs, "float32")
        out = arena[16:].reshape(want.shape) if case == "view out" else out_for(data, weight, attrs, "float32")
        out[...] = np.nan
        call(x, w, b, out=out)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
    assert len(prepared) == 1


@pytest.mark.parametrize("data, weight, attrs", [SMALL[0], SMALL[3], SMALL[16], ((8, 16, 14, 14), (16, 16, 3, 3),
                                                   dict(padding=(1, 1, 1, 1)))], ids=str)
def test_a_fresh_workspace_of_the_same_size_keeps_the_prepared_call(data, weight, attrs, monkeypatch):
    """A workspace sized by the data (Mask R-CNN's mask head) is a new array every run: one of the
    same size serves the prepared call (bit for bit the generic kernel, garbage in it or not); a
    new size, or a planned view of another arena, prepares it again."""
    from relaxpack.runtime.kernels import conv_small
    prepared = []
    real = conv_small._prepare
    monkeypatch.setattr(conv_small, "_prepare", lambda *a: prepared.append(1) or real(*a))
    attrs = full_attrs(attrs, "relu")
    rng = np.random.default_rng(7)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    size = workspace_for(data, weight, attrs, "float32").size
    arena = np.zeros(size + 64, np.uint8)
    workspaces = [workspace_for(data, weight, attrs, "float32") for _ in range(3)] \
        + [np.full(size + 8, 0xEF, np.uint8), arena[64:]]
    for k, ws in enumerate(workspaces):
        x = rand(rng, data, "float32")
        out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
        call(x, w, b, out=out, workspace=ws)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"workspace {k}")
    assert len(prepared) == 3           # the first, the larger fresh one, the arena's view


def test_same_workspace():
    """Only the same object, or two arrays of their own of one size and dtype, count as the same."""
    from relaxpack.runtime.kernels._workspace import same_workspace
    a, b, c = np.empty(64, np.uint8), np.empty(64, np.uint8), np.empty(65, np.uint8)
    arena = np.empty(256, np.uint8)
    assert same_workspace(a, a) and same_workspace(a, b) and same_workspace(None, None)
    assert not same_workspace(a, c) and not same_workspace(a, None) and not same_workspace(None, a)
    assert not same_workspace(arena[:64], a) and not same_workspace(a, arena[:64])
    assert not same_workspace(arena[:64], arena[64:128])
    assert not same_workspace(a, np.empty(16, np.float32))      # 64 bytes too, another dtype


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_an_unpadded_conv_on_an_arena_view_reads_its_new_values(layout):
    """An unpadded conv reads its im2col straight from the input; the window of an input that is a
    view (an arena's: the same object run after run) is kept. New values in that view, another view
    in its place and an array of its own all give the generic kernel's result."""
    data, weight = ((1, 3, 40), (6, 3, 5)) if layout == "NCHW" else ((1, 6, 9, 4), (1, 1, 4, 6))
    attrs = full_attrs(dict(strides=(3,) if layout == "NCHW" else (2, 2), padding=(0,) * (2 * len(weight[2:]))
                            if layout == "NCHW" else (0, 0, 0, 0)), "relu")
    attrs = {**attrs, "data_layout": layout}
    rng = np.random.default_rng(4)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0] if layout == "NCHW" else weight[-1],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out = out_for(data, weight, attrs, "float32")
    size = int(np.prod(data))
    arena, other = np.empty(size + 7, np.float32), np.empty(size + 3, np.float32)
    view, moved = arena[5:5 + size].reshape(data), other[1:1 + size].reshape(data)
    for x in (view, view, moved, view, rand(rng, data, "float32")):
        x[...] = rand(rng, data, "float32")
        call(x, w, b, out=out, workspace=None)
        want = out_for(data, weight, attrs, "float32")
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


# 1-d convs (Whisper's front end): one image of an ungrouped conv takes a 2-d np.dot, a constant bias of
# at most BIAS_PLANE_MAX_SIZE values per image is added as a tile of the whole result up to that many
# values in all, past it as a (1, channels, length) plane (both sides of each bound)
CONV1D = [
    ((1, 16, 30), (32, 16, 3), dict(padding=(1, 1))),
    ((1, 32, 30), (32, 32, 3), dict(strides=(2,), padding=(1, 1))),
    ((3, 16, 17), (32, 16, 3), dict(padding=(1, 1))),                    # a batch: matmul
    ((1, 6, 11), (8, 3, 3), dict(groups=2, padding=(1, 1))),              # groups: matmul
    ((1, 2, 1024), (16, 2, 3), dict(padding=(1, 1))),                    # 16 x 1024 values: the whole tile
    ((1, 2, 1025), (16, 2, 3), dict(padding=(1, 1))),                    # 16 x 1025: the column
    ((2, 2, 1024), (16, 2, 3), dict(padding=(1, 1))),                    # 2 x 16 x 1024: a plane
    ((2, 2, 512), (16, 2, 3), dict(padding=(1, 1))),                     # 2 x 16 x 512: the whole tile
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("data, weight, attrs", CONV1D)
def test_a_1d_conv_is_the_generic_kernel_with_a_constant_or_register_bias(data, weight, attrs, activation, dtype,
                                                                          monkeypatch):
    attrs = full_attrs(attrs, activation)
    assert _prepared_conv(data, weight, *(attrs[k] for k in ("strides", "padding", "dilation", "groups")),
                          "NCHW")[0].method == "strided"
    _check_bias_operands(monkeypatch, data, weight, attrs, dtype, seed=7)


@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("data, weight, attrs", [
    ((1, 32, 30), (32, 32, 3), dict(strides=(2,), padding=(1, 1))),      # lengths 30 and 29: 15 outputs
    ((1, 5, 40), (6, 5, 5), dict(strides=(3,))),                         # unpadded: 40 and 39, 12 outputs
], ids=str)
def test_a_new_input_array_each_call_into_one_arena_view_is_the_generic_kernel(data, weight, attrs, activation):
    """A model input is a new array each run: a call on a new input of the last one's shape and dtype
    into the same ``out`` view runs the last runner (its shape the only check), an input of another
    length with the same output (a strided conv), another dtype, or an arena view in between each
    take their own path; every result the generic kernel's bit for bit."""
    attrs = full_attrs(attrs, activation)
    rng = np.random.default_rng(12)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    shape = out_for(data, weight, attrs, "float32").shape
    arena = np.empty(int(np.prod(shape)) + 5, np.float32)
    out = arena[5:].reshape(shape)
    shorter = data[:2] + (data[2] - 1,)
    assert out_for(shorter, weight, attrs, "float32").shape == shape
    view_buffer = np.empty(int(np.prod(data)) + 3, np.float32)
    view = view_buffer[3:].reshape(data)
    for x_shape, dtype, as_view in [(data, "float32", False)] * 3 + [(shorter, "float32", False), (data, "float32", False),
                                                                    (data, "float64", False), (data, "float32", True),
                                                                    (data, "float32", False), (shorter, "float32", False)]:
        x = rand(rng, x_shape, dtype)
        if as_view:
            view[...] = x
            x = view
        call(x, w, b, out=out, workspace=None)
        want = np.full(shape, np.nan, np.float32)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("activation", [None, "gelu", "relu"])
@pytest.mark.parametrize("data, weight, attrs", [c for c in CONV1D if c[2].get("groups", 1) == 1][:3] + [
    ((2, 8, 1), (4, 8, 3), dict(strides=(2,), padding=(1, 1))),          # one output position
    ((1, 3, 9), (5, 3, 4), dict(strides=(2,))),                          # unpadded: the input's window
], ids=str)
def test_a_1d_conv_writing_channels_last_is_the_generic_kernel(data, weight, attrs, activation):
    """A Conv1d written ``(N, L, O)`` (Conv1dChannelsLast: Whisper's, wav2vec2's before their
    transformer) by the channels-last-out runner: the generic kernel bit for bit, and the
    channels-first result transposed within rounding (the GEMM sums the other way round)."""
    from relaxpack.runtime.kernels import conv_small
    attrs = {**full_attrs(attrs, activation), "out_layout": "NHWC"}
    rng = np.random.default_rng(11)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    out, ws = out_for(data, weight, attrs, "float32"), workspace_for(data, weight, attrs, "float32")
    assert conv_small._prepare(rand(rng, data, "float32"), w, b, out, ws, attrs, True, True, None) is not None
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    for _ in range(3):
        x = rand(rng, data, "float32")
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, "float32")
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
        first = {**attrs, "out_layout": None}
        channels_first = out_for(data, weight, first, "float32")
        CONV_BIAS_ACT(x, w, b, out=channels_first, **first)
        np.testing.assert_allclose(out, channels_first.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data, weight, attrs", [SMALL[0], SMALL[3], SMALL[16], SMALL[8]], ids=str)
@pytest.mark.parametrize("view", ["rows", "columns", "contiguous"])
def test_padded_copies_by_rows_take_any_input_view(data, weight, attrs, view):
    """The wide and one-copy runners copy an input into their padded copy (and the wide one its result
    out) by rows as void items when no conversion is made: an input whose rows are apart, whose
    values are apart (every other column: the plain copy) or contiguous gives the generic kernel's
    result bit for bit."""
    attrs = full_attrs(attrs, None)
    rng = np.random.default_rng(8)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, ws = out_for(data, weight, attrs, "float32"), workspace_for(data, weight, attrs, "float32")
    for _ in range(2):
        wide = rand(rng, data[:-1] + (2 * data[-1] + 1,), "float32")
        x = {"rows": wide[..., 1:data[-1] + 1], "columns": wide[..., ::2][..., :data[-1]],
             "contiguous": rand(rng, data, "float32")}[view]
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, "float32")
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("data, weight, attrs, out_layout", [
    (*conv, layout) for conv in [
        ((1, 16, 30), (32, 16, 3), dict(padding=(1, 1))),                # 16 rows: a new array copied plainly
        ((1, 80, 12), (8, 80, 3), dict(strides=(2,), padding=(1, 1))),   # ROWS_VIEW_MIN rows: by rows
        ((2, 39, 12), (8, 39, 3), dict(padding=(2, 1))),                 # one row fewer: plainly
    ] for layout in (None, "NHWC")] + [
    ((1, 6, 12, 10), (8, 6, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1)), None),     # 2-d: the one-copy runner
], ids=str)
def test_the_padded_copy_of_a_kept_view_or_a_new_array_is_the_generic_kernel(data, weight, attrs, out_layout):
    """The strided and channels-last-out runners copy their input into the padded copy by rows of void
    items, keeping that view of an arena view (the same object, new values each run), and making it
    for a new array (a model input) from ROWS_VIEW_MIN rows on (a plain copy below); a view whose
    values are apart (every other column) copies plainly. Bit for bit the generic kernel, call
    after call, switching between them."""
    from relaxpack.runtime.kernels import conv_small
    attrs = {**full_attrs(attrs, "relu"), "out_layout": out_layout}
    assert conv_small.ROWS_VIEW_MIN == 80
    rng = np.random.default_rng(14)
    w, b = rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, ws = out_for(data, weight, attrs, "float32"), workspace_for(data, weight, attrs, "float32")
    arena = np.empty(int(np.prod(data)) + 4, np.float32)
    view = arena[4:].reshape(data)
    wide = np.empty(data[:-1] + (2 * data[-1],), np.float32)
    apart = wide[..., ::2]
    for kind in ("view", "view", "new", "view", "apart", "new", "view"):
        values = rand(rng, data, "float32")
        if kind == "new":
            x = values
        else:
            x = view if kind == "view" else apart
            x[...] = values
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, "float32")
        CONV_BIAS_ACT(values, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=kind)


@pytest.mark.parametrize("data, weight, tiled", [((1, 16, 16, 24), (16, 16, 3, 3), True),
                                                 ((1, 8, 60, 60), (32, 8, 3, 3), False)])   # 32 x 3720 > 2**16
def test_a_wide_conv_adds_a_bound_bias_as_a_tile_and_reads_a_register_bias_every_call(data, weight, tiled,
                                                                                     monkeypatch):
    """conv_wide: a bound bias is added to the wide result as a tile of its whole shape (up to
    TILE_MAX_SIZE values, else the column); a bias in a register (the same object, new values) is
    never tiled. Bit for bit the generic kernel either way."""
    from relaxpack.runtime.kernels import conv_wide
    made = []
    real = conv_wide.tile_of
    monkeypatch.setattr(conv_wide, "tile_of", lambda c, out: made.append(real(c, out)) or made[-1])
    attrs = full_attrs(dict(padding=(1, 1, 1, 1)), "relu")
    plan = _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
                          "NCHW")[0]
    assert plan.method == "strided" and plan.strided.wide is not None
    rng = np.random.default_rng(8)
    w = rand(rng, weight, "float32")
    for constant in [(False, True, True), (False, True, False)]:
        b = rand(rng, (weight[0],), "float32")
        call = CONV_BIAS_ACT.specialize_attrs(attrs, constant)
        out, ws = out_for(data, weight, attrs, "float32"), workspace_for(data, weight, attrs, "float32")
        for _ in range(3):
            if not constant[2]:
                b[...] = rand(rng, (weight[0],), "float32")     # a register: the same object, new values
            x = rand(rng, data, "float32")
            call(x, w, b, out=out, workspace=ws)
            want = out_for(data, weight, attrs, "float32")
            CONV_BIAS_ACT(x, w, b, out=want, **attrs)
            np.testing.assert_array_equal(out, want)
    assert len(made) == 1 and (made[0] is not None) == tiled    # the bound bias only, once


@pytest.mark.parametrize("out_layout", [None, "NHWC"])
def test_an_unpadded_conv_reads_any_new_input(out_layout):
    """An unpadded conv reads its im2col window from the input itself, made every call for a new
    array: a contiguous one's by the ndarray constructor over its buffer (after the first, by the
    window geometry kept from it: one constructor call), any other's by ``as_strided`` (every
    other column, a transposed copy's view); the generic kernel's result bit for bit each time
    (ConvNeXt's 4x4/4 stem, ViT's patch embedding on the model input), contiguous inputs in a row,
    a read-only one, between strided ones; no input is held past its call."""
    import weakref
    data, weight = (1, 3, 13, 17), (16, 3, 4, 4)
    attrs = {**full_attrs(dict(strides=(4, 4)), None), "out_layout": out_layout}
    rng = np.random.default_rng(11)
    w, b = rand(rng, weight, "float32"), rand(rng, (16,), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out = out_for(data, weight, attrs, "float32")
    read_only = rand(rng, data, "float32")
    read_only.flags.writeable = False
    inputs = [rand(rng, data, "float32"), rand(rng, (1, 3, 13, 34), "float32")[..., ::2],
              np.ascontiguousarray(rand(rng, (1, 17, 13, 3), "float32").transpose(0, 3, 2, 1)).transpose(0, 1, 2, 3),
              rand(rng, (1, 17, 13, 3), "float32").transpose(0, 3, 2, 1), rand(rng, data, "float32"),
              rand(rng, data, "float32"), rand(rng, data, "float32"), read_only,
              rand(rng, (1, 3, 13, 34), "float32")[..., ::2], rand(rng, data, "float32")]
    for x in inputs:
        assert x.shape == data
        call(x, w, b, out=out, workspace=None)
        want = out_for(data, weight, attrs, "float32")
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
    ref = weakref.ref(inputs[-1])
    del inputs, x, read_only
    assert ref() is None


def test_im2col_rows_are_copied_as_runs_only_where_contiguous():
    """``as_runs``: a window whose last axis is one contiguous run of at least two values (stride 1)
    and its C-contiguous destination are viewed as void items of that run, the same bytes; a strided
    or one-value last axis is left as it is."""
    from relaxpack.runtime.kernels.conv_small import as_runs
    padded = np.arange(2 * 3 * 6 * 7, dtype=np.float32).reshape(2, 3, 6, 7)
    s = padded.strides
    for strides, width, runs in [((1, 1), 5, True), ((1, 2), 3, False), ((1, 1), 1, False)]:
        window = np.lib.stride_tricks.as_strided(
            padded, (2, 3, 3, 3, 4, width), s[:2] + (s[2], s[3], s[2] * strides[0], s[3] * strides[1]), writeable=False)
        dst = np.empty(window.shape, np.float32)
        src_view, dst_view = as_runs(window, dst)
        assert (src_view.dtype.kind == "V") == runs and (dst_view.dtype.kind == "V") == runs
        np.copyto(dst_view, src_view)
        np.testing.assert_array_equal(dst, window)
    ints = np.lib.stride_tricks.as_strided(padded.astype(np.int32), (2, 3, 3, 3, 4, 5), window.strides)
    dst = np.empty(ints.shape, np.float32)      # an integer conv's window converts as it is copied
    src_view, dst_view = as_runs(ints, dst)
    assert src_view is ints and dst_view is dst


# 2-d convs: a constant bias of at most BIAS_PLANE_MAX_SIZE values per image is added as a (1, channels, H, W)
# plane by the strided and the pointwise runners, or a tile of the whole result up to that many values in all
# (both sides of the bound; a batch larger than the tile broadcasts the plane)
CONV2D_BIAS = [
    ((1, 3, 64, 96), (8, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),      # 8 x 32 x 48: a plane
    ((1, 3, 130, 96), (8, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),     # 8 x 65 x 48: the column
    ((2, 3, 31, 47), (8, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),      # a batch, odd sizes
    ((1, 16, 32, 32), (16, 16, 1, 1), dict()),                                      # pointwise, at the bound
    ((1, 16, 32, 33), (16, 16, 1, 1), dict()),                                      # one column past it
    ((3, 24, 5, 7), (12, 24, 1, 1), dict()),                                        # a batch: matmul
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", [None, "relu", "silu"])
@pytest.mark.parametrize("data, weight, attrs", CONV2D_BIAS)
def test_a_2d_conv_adds_a_constant_bias_as_a_plane_and_is_the_generic_kernel(data, weight, attrs, activation,
                                                                             dtype, monkeypatch):
    _check_bias_operands(monkeypatch, data, weight, full_attrs(attrs, activation), dtype, seed=3)


def _check_bias_operands(monkeypatch, data, weight, attrs, dtype, seed: int):
    """A conv with a constant bias, then one with a register bias (the same object, new values each
    call), is the generic kernel bit for bit call after call; the operands ``_bias_operand`` made:
    for the constant bias a read-only tile of the whole result up to ``BIAS_PLANE_MAX_SIZE`` values,
    past it a ``(1, C, *lengths)`` plane up to that many values per image, else (and for the
    register) a ``(1, C, 1, ..)`` column, all of ``out``'s rank."""
    from relaxpack.runtime.kernels import conv_small
    operands = []
    real = conv_small._bias_operand
    monkeypatch.setattr(conv_small, "_bias_operand", lambda *a: operands.append(real(*a)) or operands[-1])
    rng = np.random.default_rng(seed)
    w = rand(rng, weight, dtype)
    for constant in [(False, True, True), (False, True, False)]:
        b = rand(rng, (weight[0],), dtype)
        call = CONV_BIAS_ACT.specialize_attrs(attrs, constant)
        out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
        for _ in range(3):
            if not constant[2]:
                b[...] = rand(rng, (weight[0],), dtype)     # a register: the same object, new values
            x = rand(rng, data, dtype)
            call(x, w, b, out=out, workspace=ws)
            want = out_for(data, weight, attrs, dtype)
            CONV_BIAS_ACT(x, w, b, out=want, **attrs)
            np.testing.assert_array_equal(out, want)
    bound, column = conv_small.BIAS_PLANE_MAX_SIZE, (1, weight[0]) + (1,) * (len(out.shape) - 2)
    plane = out.shape if out.size <= bound else (1,) + out.shape[1:] \
        if math.prod(out.shape[1:]) <= bound else column
    assert [op.shape for op in operands] == [plane, column]
    assert operands[0].flags.writeable == (plane == column)     # a kept plane is read-only
