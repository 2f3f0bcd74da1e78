"""An exact stride-1 conv on flat rows of the output's width (kernels/conv_flat_rows.py): which convs
take it (exact, a bound weight and bias or none, one group, stride and dilation 1, a horizontal
padding of the kernel's width less one, wide rows planned), and that they give the exact integers of
the sums (an int64 reference), equal to the generic kernel, call after call, with new inputs and an
arena's views, a planned workspace full of garbage or none, activations, batches, odd sizes, uneven
padding, the wrapped row ends, the exact bound reached, float32/float64 and integer data."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_flat_rows, get_kernel
from relaxpack.runtime.kernels.nn import _prepared_conv

from .test_kernels_conv_small import out_for, workspace_for
from .test_kernels_conv_small_exact import _attrs, _exact_conv, _integers, check_exact_rounds

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn

# (data, weight, padding (top, left, bottom, right)) of stride-1 convs that take flat rows
TAKEN = [
    ((1, 16, 16, 24), (16, 16, 3, 3), (1, 1, 1, 1)),        # ResNet's 16-channel 3x3
    ((3, 16, 16, 12), (16, 16, 3, 3), (1, 1, 1, 1)),        # its batch of 3 at 64x45
    ((2, 5, 13, 17), (7, 5, 3, 3), (1, 1, 1, 1)),           # a batch, odd sizes
    ((1, 4, 9, 10), (3, 4, 5, 5), (2, 2, 2, 2)),            # a 5x5 kernel: two wrapped columns a side
    ((1, 6, 11, 13), (5, 6, 3, 3), (2, 0, 0, 2)),           # uneven: no left padding, two on the right
    ((1, 6, 11, 13), (5, 6, 3, 3), (0, 2, 2, 0)),           # two on the left, none on the right
    ((1, 8, 12, 9), (4, 8, 3, 1), (1, 0, 1, 0)),            # one kernel column: nothing wraps
    ((1, 3, 40, 4), (4, 3, 3, 3), (1, 1, 1, 1)),            # rows of four values
    ((1, 16, 2, 1200), (8, 16, 3, 3), (1, 1, 1, 1)),        # a flat buffer past the own bar: zeroed each call
]
# not taken, with the attributes and operands that send them elsewhere
NOT_TAKEN = [
    (((1, 16, 16, 24), (16, 16, 3, 3), (1, 1, 1, 1)), {"exact": False}, "bound"),   # a float conv
    (((1, 16, 16, 24), (16, 16, 3, 3), (1, 1, 1, 1)), {}, "register"),             # a run-time bias
    (((1, 16, 16, 24), (16, 8, 3, 3), (1, 1, 1, 1)), {"groups": 2}, "bound"),
    (((1, 16, 16, 24), (16, 16, 3, 3), (2, 2, 2, 2)), {"dilation": (2, 2)}, "bound"),
    (((1, 4, 9, 10), (3, 4, 3, 3), (1, 0, 1, 1)), {}, "bound"),                      # an output narrower
    (((1, 16, 8, 12), (16, 16, 3, 3), (1, 1, 1, 1)), {}, "bound"),                   # channels last inside
    (((1, 8, 12, 1), (4, 8, 3, 3), (1, 1, 1, 1)), {}, "bound"),                      # no wide rows planned
]


def _recorded(monkeypatch) -> list:
    """One entry per flat-rows runner prepared from now on."""
    seen = []
    prepare = conv_flat_rows.prepare

    def recording(*args, **kwargs):
        seen.append(True)
        return prepare(*args, **kwargs)
    monkeypatch.setattr(conv_flat_rows, "prepare", recording)
    return seen


def _run_rounds(data, weight, padding, activation, dtype, bias, planned, rounds=4, seed=0):
    check_exact_rounds(data, weight, _attrs(1, padding, activation), dtype, bias, planned,
                       np.random.default_rng(seed), rounds)


@pytest.mark.parametrize("planned", [True, False])
@pytest.mark.parametrize("bias", ["bound", None])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", [None, "relu", "silu"], ids=str)
@pytest.mark.parametrize("data, weight, padding", TAKEN)
def test_exact_sums_on_flat_rows(monkeypatch, data, weight, padding, activation, dtype, bias, planned):
    seen = _recorded(monkeypatch)
    _run_rounds(data, weight, padding, activation, dtype, bias, planned)
    assert seen == [True]


@pytest.mark.parametrize("case, extra, bias", NOT_TAKEN, ids=str)
def test_flat_rows_not_taken(monkeypatch, case, extra, bias):
    seen = _recorded(monkeypatch)
    data, weight, padding = case
    attrs = {**_attrs(1, padding), **extra}
    rng = np.random.default_rng(4)
    w = _integers(rng, weight, 127, "float32")
    b = _integers(rng, (weight[0],), 2**10, "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, bias == "bound"))
    x = _integers(rng, data, 255, "float32")
    out = out_for(data, weight, attrs, "float32")
    call(x, w, b, out=out, workspace=workspace_for(data, weight, attrs, "float32"))
    want = out_for(data, weight, attrs, "float32")
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)
    assert seen == []


def test_a_weight_computed_at_run_time_is_not_taken(monkeypatch):
    seen = _recorded(monkeypatch)
    data, weight, padding = TAKEN[0]
    attrs = _attrs(1, padding)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, False))
    rng = np.random.default_rng(6)
    x, w = _integers(rng, data, 255, "float32"), _integers(rng, weight, 127, "float32")
    out = out_for(data, weight, attrs, "float32")
    call(x, w, None, out=out)
    np.testing.assert_array_equal(out, _exact_conv(x, w, None, (1, 1), padding))
    assert seen == []


@pytest.mark.parametrize("data, weight, padding", TAKEN)
def test_the_bound_reached(monkeypatch, data, weight, padding):
    """The largest sums the exact bound allows, ``+-255 * 127 * K`` plus the largest bias left, all
    of one sign (``+-2**24`` in the plane's interior), and the wrapped entries: a plane whose values
    are all at the bound would give other sums at the row ends if a neighbouring row's value were
    read there instead of the padding's zero."""
    seen = _recorded(monkeypatch)
    attrs = _attrs(1, padding)
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
        want = _exact_conv(x, w, b, (1, 1), padding)
        np.testing.assert_array_equal(out, want)
        assert np.abs(want).max() <= 2**24
    assert seen == [True]


def test_the_wrapped_columns():
    """Which output columns each kernel column reads past a row's end at."""
    def plan(weight, padding, width=7):
        return _prepared_conv((1, 2, 5, width), weight, (1, 1), padding, (1, 1), 1, "NCHW")[0]
    assert conv_flat_rows.wrapped(plan((2, 2, 3, 3), (1, 1, 1, 1))) == [(0, slice(0, 1)), (2, slice(6, 7))]
    assert conv_flat_rows.wrapped(plan((2, 2, 5, 5), (2, 2, 2, 2))) == [
        (0, slice(0, 2)), (1, slice(0, 1)), (3, slice(6, 7)), (4, slice(5, 7))]
    assert conv_flat_rows.wrapped(plan((2, 2, 3, 3), (1, 0, 1, 2))) == [(1, slice(6, 7)), (2, slice(5, 7))]
    assert conv_flat_rows.wrapped(plan((2, 2, 3, 1), (1, 0, 1, 0))) == []
    assert conv_flat_rows.wrapped(plan((2, 2, 3, 5), (1, 2, 1, 2), width=1)) == [
        (0, slice(0, 1)), (1, slice(0, 1)), (3, slice(0, 1)), (4, slice(0, 1))]


def test_integer_data_is_converted_by_the_copy_in(monkeypatch):
    """An integer conv marked exact (int32 data and result) runs this float runner inside the
    integer runner (kernels/conv_small_integer.py): the copy into the flat buffer converts."""
    seen = _recorded(monkeypatch)
    data, weight, padding = TAKEN[0]
    attrs = _attrs(1, padding)
    rng = np.random.default_rng(2)
    w = _integers(rng, weight, 127, np.int32)
    b = _integers(rng, (16,), 2**12, np.int32)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    for _ in range(3):
        x = _integers(rng, data, 255, np.int32)
        out = np.empty((1, 16, 16, 24), np.int32)
        call(x, w, b, out=out)
        np.testing.assert_array_equal(out, _exact_conv(x, w, b, (1, 1), padding))
    assert seen == [True]


def test_an_empty_batch():
    data, weight, padding = (0, 16, 16, 24), (16, 16, 3, 3), (1, 1, 1, 1)
    attrs = _attrs(1, padding)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out = out_for(data, weight, attrs, "float32")
    call(np.zeros(data, np.float32), np.ones(weight, np.float32), np.ones(16, np.float32), out=out)
    assert out.shape == (0, 16, 16, 24)


def test_the_layouts_fit_the_wide_rows_workspace():
    """The flat buffer and the columns (with the ones row) take no more than the wide rows' scratch
    the compiler plans (a workspace short of them sends the runner to scratch of its own)."""
    from relaxpack.runtime.kernels import conv_wide
    from relaxpack.runtime.kernels._workspace import scratch_nbytes
    for data, weight, padding in TAKEN:
        plan = _prepared_conv(data, weight, (1, 1), padding, (1, 1), 1, "NCHW")[0]
        flat = conv_flat_rows.flat_layouts(plan, data[0], data[1], True, np.float32)
        wide = conv_wide.bias_row_layouts(plan, conv_wide.wide_layouts(plan, data[0], data[1], weight[0], np.float32),
                                          data[1], weight[0])
        assert scratch_nbytes(flat) <= scratch_nbytes(wide)
        assert conv_flat_rows.applies(plan, 1, data[1])
        assert not conv_flat_rows.applies(plan, 2, data[1])
