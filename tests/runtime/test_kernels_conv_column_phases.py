"""A strided conv's im2col from the column phases of its input (conv_column_phases.py): the columns
are the strided window's values exactly, so the small-conv runners that take them stay the generic
kernel bit for bit (channels first and last out, float16/32/64, integers exactly), call after call;
where it applies and where it does not (each bar, at and one past it)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_column_phases, conv_small, conv_wide
from relaxpack.runtime.kernels.conv_strided import strided_layouts
from relaxpack.runtime.kernels.nn import _prepared_conv

from .test_kernels_conv_small import CONV_BIAS_ACT, full_attrs, out_for, workspace_for
from .test_kernels_conv_small_integer import _attrs, _specialized
from .test_kernels_integer_exact import _reference_conv
from .test_kernels_registry import rand

# (data, weight, attrs) the column phases take: stems, odd sizes, uneven padding, stride 3, dilated
# rows, a 1-d and a 3-d conv, a grouped one, a batch
APPLIES = [
    ((1, 3, 61, 96), (16, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),
    ((3, 3, 64, 45), (16, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),
    ((1, 3, 70, 101), (8, 3, 3, 3), dict(strides=(2, 2), padding=(0, 2, 1, 0))),
    ((2, 4, 40, 100), (6, 4, 3, 5), dict(strides=(2, 3), padding=(1, 2, 0, 1))),
    ((1, 3, 50, 150), (8, 3, 2, 4), dict(strides=(1, 3), padding=(0, 1, 1, 2))),
    ((1, 3, 40, 64), (8, 3, 3, 3), dict(strides=(2, 2), padding=(2, 1, 2, 1), dilation=(2, 1))),
    ((1, 3, 76, 31), (8, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),          # at both bars
    ((1, 2, 3000), (8, 2, 7), dict(strides=(2,), padding=(3, 3))),
    ((1, 2, 4, 20, 40), (4, 2, 2, 3, 3), dict(strides=(1, 2, 2), padding=(0, 1, 1, 0, 1, 1))),
    ((1, 4, 40, 64), (4, 1, 3, 3), dict(groups=4, strides=(2, 2), padding=(1, 1, 1, 1))),
    ((1, 2, 64, 100), (8, 2, 3, 3), dict(strides=(2, 2), padding=(3, 3, 3, 3))),         # wide padding
]
# ... and those it does not: a phase of one tap (4x4/4), a dilated width, one output column short of
# MIN_WIDTH, one output row short of MIN_COLUMN_VALUES, stride 1 along the width, a plan of wide rows
# (7x7/2: its runners leave them for the column phases through replaces_wide, REPLACES_WIDE below)
DOES_NOT = [
    ((1, 3, 61, 96), (16, 3, 4, 4), dict(strides=(4, 4))),
    ((1, 3, 40, 64), (8, 3, 3, 3), dict(strides=(2, 2), padding=(1, 2, 1, 2), dilation=(1, 2))),
    ((1, 3, 76, 29), (8, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),
    ((1, 3, 74, 31), (8, 3, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),
    ((1, 3, 61, 96), (16, 3, 3, 3), dict(strides=(2, 1), padding=(1, 1, 1, 1))),
    ((1, 3, 61, 96), (16, 3, 7, 7), dict(strides=(2, 2), padding=(3, 3, 3, 3))),
]


def _plan(data, weight, attrs):
    return _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
                          "NCHW")[0]


def _filler(data, weight, attrs, dtype=np.float32):
    plan = _plan(data, weight, attrs)
    if plan.method != "strided":
        return None, None
    cols = np.empty(strided_layouts(plan, data[0], data[1], weight[0], dtype)[-1][0], dtype)
    return conv_column_phases.column_filler(plan, data, cols), cols


@pytest.mark.parametrize("data, weight, attrs, applies",
                         [(*c, True) for c in APPLIES] + [(*c, False) for c in DOES_NOT], ids=str)
def test_the_columns_are_the_strided_windows_values(data, weight, attrs, applies):
    """Where it applies the filler's columns equal the strided method's own (its padded copy's
    window), every value and zero sign, for new inputs into the same planes; elsewhere it gives none."""
    from relaxpack.runtime.kernels.conv_strided import _columns
    attrs = full_attrs(attrs)
    fill, cols = _filler(data, weight, attrs)
    assert (fill is not None) == applies
    if fill is None:
        return
    plan = _plan(data, weight, attrs)
    rng = np.random.default_rng(1)
    for _ in range(2):
        x = rand(rng, data, np.float32)
        x[(0,) * x.ndim] = -0.0
        fill(x)
        want = [np.empty(shape, dtype) for shape, dtype in strided_layouts(plan, data[0], data[1], weight[0],
                                                                           np.float32)]
        np.testing.assert_array_equal(cols, _columns(plan, x, want))
        assert np.signbit(cols).sum() == np.signbit(_columns(plan, x, want)).sum()


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("activation", [None, "relu", "hard_swish"], ids=str)
@pytest.mark.parametrize("data, weight, attrs", APPLIES, ids=str)
def test_the_runner_on_column_phases_is_the_generic_kernel(data, weight, attrs, activation, dtype):
    attrs = full_attrs(attrs, activation)
    rng = np.random.default_rng(2)
    w, b = rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    x_view = np.empty(int(np.prod(data)) + 1, dtype)[1:].reshape(data)
    for round_ in range(3):          # a new input, then an arena's view with new values
        x = rand(rng, data, dtype)
        if round_:
            x_view[...] = x
            x = x_view
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        ws[:] = 0xCD


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("data, weight, attrs", [c for c in APPLIES if c[2].get("groups", 1) == 1], ids=str)
def test_a_conv_writing_channels_last_on_column_phases_is_the_generic_kernel(data, weight, attrs, dtype):
    attrs = {**full_attrs(attrs, "relu"), "out_layout": "NHWC"}
    rng = np.random.default_rng(3)
    w, b = rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    if len(data) == 4:      # (the runner writes channels last for 2-d convs: asserted there)
        assert conv_small._prepare(rand(rng, data, dtype), w, b, out, ws, attrs, True, True, None) is not None
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    for round_ in range(2):
        x = rand(rng, data, dtype)
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")


@pytest.mark.parametrize("source", ["uint8", "int8"])
def test_an_integer_stem_on_column_phases_is_exact(source):
    """An exact (integer) 3x3/2 stem through the integer runner: the phases convert the integers as
    they copy them; the Python-int conv's values."""
    data, weight = (1, 3, 61, 96), (16, 3, 3, 3)
    assert _filler(data, weight, full_attrs(dict(strides=(2, 2), padding=(1, 1, 1, 1))))[0] is not None
    rng = np.random.default_rng(4)
    zp = 131 if source == "uint8" else -7
    lo, hi = (0, 256) if source == "uint8" else (-128, 128)
    w = rng.integers(-127, 128, weight).astype(np.int32)
    bias = rng.integers(-2**20, 2**20, weight[0]).astype(np.int32)
    calls = []
    call = _specialized(_attrs(2, 1, 1), calls)
    for seed in range(2):
        x = np.random.default_rng(seed).integers(lo, hi, data).astype(np.int32) - zp
        out = np.empty((1, 16, 31, 48), np.int32)
        call(x, w, bias, out=out)
        np.testing.assert_array_equal(out, _reference_conv(x, w, bias, 2, 1, 1))
    assert calls == []


def test_planes_past_the_byte_bar_keep_the_strided_copy(monkeypatch):
    data, weight = (1, 3, 61, 96), (16, 3, 3, 3)
    attrs = full_attrs(dict(strides=(2, 2), padding=(1, 1, 1, 1)))
    planes = 2 * 3 * 63 * (48 + 1) * 4         # phases x C x padded rows x (width + (3 - 1) // 2) floats
    monkeypatch.setattr(conv_column_phases, "MAX_PLANES_BYTES", planes)
    assert _filler(data, weight, attrs)[0] is not None
    monkeypatch.setattr(conv_column_phases, "MAX_PLANES_BYTES", planes - 1)
    assert _filler(data, weight, attrs)[0] is None


def test_an_empty_batch_takes_no_phases():
    attrs = full_attrs(dict(strides=(2, 2), padding=(1, 1, 1, 1)))
    plan = _plan((0, 3, 61, 96), (16, 3, 3, 3), attrs)
    assert conv_column_phases.column_filler(plan, (0, 3, 61, 96), np.empty((0, 3, 9, 31, 48), np.float32)) is None


def test_random_geometries_are_the_generic_kernel():
    """A seeded sweep of 2-d geometries (channels, sizes, kernels, strides along both axes, uneven
    padding, dilated rows): wherever the column phases apply, the runner is the generic kernel."""
    rng = np.random.default_rng(7)
    applied = 0
    for _ in range(100):
        channels, out_channels = int(rng.integers(1, 5)), int(rng.integers(1, 17))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(2, 6))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(2, min(kw, 3) + 1))
        pads = tuple(int(p) for p in rng.integers(0, 4, 4))
        dilation = (int(rng.integers(1, 3)), 1)
        data = (int(rng.integers(1, 3)), channels, int(rng.integers(kh * dilation[0], 90)), int(rng.integers(kw, 140)))
        weight = (out_channels, channels, kh, kw)
        attrs = full_attrs(dict(strides=(sh, sw), padding=pads, dilation=dilation), "relu")
        fill, _ = _filler(data, weight, attrs)
        if fill is None:
            continue
        applied += 1
        w, b = rand(rng, weight, np.float32), rand(rng, (out_channels,), np.float32)
        call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
        x = rand(rng, data, np.float32)
        out = out_for(data, weight, attrs, np.float32)
        call(x, w, b, out=out)
        want = out_for(data, weight, attrs, np.float32)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=str((data, weight, attrs)))
    assert applied >= 20, applied


# strided convs whose taps would read wide phase planes (conv_wide: four taps a phase or more) and
# that take the column phases instead: stems, odd sizes and uneven padding, a batch, a grouped conv
REPLACES_WIDE = [
    ((1, 3, 61, 96), (16, 3, 7, 7), dict(strides=(2, 2), padding=(3, 3, 3, 3))),      # ResNet's stem
    ((3, 3, 64, 45), (16, 3, 7, 7), dict(strides=(2, 2), padding=(3, 3, 3, 3))),
    ((1, 3, 61, 96), (16, 3, 5, 5), dict(strides=(2, 2), padding=(2, 2, 2, 2))),
    ((2, 4, 37, 71), (6, 4, 7, 5), dict(strides=(2, 2), padding=(3, 1, 2, 2))),
    ((1, 4, 40, 64), (8, 2, 5, 5), dict(groups=2, strides=(2, 2), padding=(2, 2, 2, 2))),
]


def _replaces(data, weight, attrs, itemsize=4):
    plan = _plan(data, weight, full_attrs(attrs))
    assert plan.method == "strided" and plan.strided.wide is not None and plan.strided.wide.phases != (1, 1)
    return conv_column_phases.replaces_wide(plan, data, itemsize)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("activation", [None, "relu", "hard_swish"], ids=str)
@pytest.mark.parametrize("data, weight, attrs", REPLACES_WIDE, ids=str)
def test_a_conv_of_wide_phases_takes_the_column_phases_as_the_generic_kernel(data, weight, attrs, activation,
                                                                              dtype, monkeypatch):
    """The runner and the generic kernel both leave the wide phases for the column phases (the same
    columns, one GEMM of the output's pixels): the same bits, call after call; the results within
    float rounding of a wider reference."""
    from .test_kernels_conv_small_float import _assert_within_rounding
    assert _replaces(data, weight, attrs, np.dtype(dtype).itemsize if dtype != "float16" else 4)
    wide_runs = []
    monkeypatch.setattr(conv_wide, "run_wide", lambda *args: wide_runs.append(args))
    attrs = full_attrs(attrs, activation)
    rng = np.random.default_rng(8)
    w, b = rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    for round_ in range(2):
        x = rand(rng, data, dtype)
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        ws[:] = 0xCD
    assert wide_runs == []
    if activation is None and dtype != "float16" and attrs["groups"] == 1:
        _assert_within_rounding(out, x, w, b, attrs["strides"], attrs["padding"], weight)


def test_past_the_planes_byte_bar_a_conv_keeps_its_wide_phases(monkeypatch):
    """Planes over MAX_PLANES_BYTES (a larger batch) keep the wide phases, in the runner and the
    generic kernel alike; a stride-1 conv's wide rows are never replaced."""
    data, weight, attrs = REPLACES_WIDE[0]
    planes = 2 * 3 * (61 + 6) * (48 + 3) * 4      # column phases x C x padded rows x (width + (7 - 1) // 2)
    monkeypatch.setattr(conv_column_phases, "MAX_PLANES_BYTES", planes)
    assert _replaces(data, weight, attrs)
    monkeypatch.setattr(conv_column_phases, "MAX_PLANES_BYTES", planes - 1)
    assert not _replaces(data, weight, attrs)
    attrs = full_attrs(attrs, "relu")
    rng = np.random.default_rng(9)
    x, w, b = rand(rng, data, "float32"), rand(rng, weight, "float32"), rand(rng, (16,), "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
    call(x, w, b, out=out, workspace=workspace_for(data, weight, attrs, "float32"))
    runs, inner = [], conv_wide.run_wide
    monkeypatch.setattr(conv_wide, "run_wide", lambda *args: runs.append(args) or inner(*args))
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    assert len(runs) == 1
    np.testing.assert_array_equal(out, want)
    stride1 = _plan((1, 16, 16, 24), (16, 16, 3, 3), full_attrs(dict(padding=(1, 1, 1, 1))))
    assert stride1.strided.wide is not None
    assert not conv_column_phases.replaces_wide(stride1, (1, 16, 16, 24), 4)


@pytest.mark.parametrize("data, weight, attrs", [c for c in REPLACES_WIDE if c[2].get("groups", 1) == 1], ids=str)
def test_a_conv_of_wide_phases_writing_channels_last_is_its_channels_first_result(data, weight, attrs):
    """Channels-last out (staged channels first, then transposed): the channels-first bits."""
    attrs = full_attrs(attrs, "relu")
    rng = np.random.default_rng(10)
    x, w, b = rand(rng, data, "float32"), rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    first = out_for(data, weight, attrs, "float32")
    CONV_BIAS_ACT(x, w, b, out=first, **attrs)
    attrs = {**attrs, "out_layout": "NHWC"}
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out = out_for(data, weight, attrs, "float32")
    call(x, w, b, out=out, workspace=workspace_for(data, weight, attrs, "float32"))
    np.testing.assert_array_equal(out, np.moveaxis(first, 1, -1))
