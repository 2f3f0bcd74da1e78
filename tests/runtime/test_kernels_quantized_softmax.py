"""qlinear_softmax_exp (runtime/kernels/quantized_softmax.py) against the composition the importer
wrote before it (a max, ``float32(exp((float64(-(max - x)) + shift) * scale))``, a cumsum and its last
element), bit for bit: uint8, int8 and int32 inputs, the table's threshold on both sides, rows of
one value, a single row, a row of 2, other axes, sums whose order shows (a wide range of
magnitudes), empty inputs, NaN and infinite parameters."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.runtime.kernels import quantized_softmax as kernel


def _composition(x, shift, scale, axis):
    wide = x.astype(np.int32)
    gap = np.max(wide, axis=axis, keepdims=True) - wide
    with np.errstate(all="ignore"):
        t = np.exp((np.negative(gap).astype(np.float64) + shift) * scale).astype(np.float32)
    total = np.take(np.cumsum(t, axis=axis), [-1], axis=axis)
    return t, total


def _run(x, shift, scale, axis):
    rows = list(x.shape)
    rows[axis] = 1
    t, total = np.empty(x.shape, np.float32), np.empty(rows, np.float32)
    with np.errstate(all="ignore"):
        kernel.qlinear_softmax_exp(x, np.float64(shift), np.float64(scale), out=(t, total), axis=axis)
    return t, total


def _assert_same(x, shift, scale, axis=-1):
    want, got = _composition(x, shift, scale, axis), _run(x, shift, scale, axis)
    for w, g in zip(want, got):
        assert w.shape == g.shape and g.dtype == np.float32
        assert g.tobytes() == w.tobytes()


def _values(shape, dtype, seed=0):
    info = np.iinfo(dtype)
    low, high = (info.min, info.max) if info.bits == 8 else (-300, 300)
    return np.random.default_rng(seed).integers(low, high, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("shape", [(3, 2, 17, 17), (2, 5), (1, 40), (5, 1), (1, 1), (7, 300), (2, 384),
                                   (1, 767), (1, 768), (3, 256), (4, 192)])
@pytest.mark.parametrize("shift, scale", [(80.0, 0.5), (3000.0, 0.02), (0.0, 1.0), (400.0, 0.21)])
def test_the_composition_bit_for_bit(dtype, shape, shift, scale):
    _assert_same(_values(shape, dtype, seed=sum(shape)), shift, scale)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_other_axes(axis):
    x = _values((9, 12, 10), np.uint8, seed=axis)
    _assert_same(x, 60.0, 0.4, axis)


def test_the_table_threshold():
    """Both sides of TABLE_MIN, with a scale that makes the sums' order show (terms across ~30
    binades): the same bits on either path."""
    for size in (kernel.TABLE_MIN - 1, kernel.TABLE_MIN):
        x = _values((size // 3, 3), np.uint8, seed=size)
        x[:, 0] = 255
        _assert_same(x, 80.0, 0.3)
        _assert_same(x.reshape(3, size // 3), 80.0, 0.3)


def test_the_order_of_the_sums_is_left_to_right():
    """A pairwise sum gives other bits on these rows: the kernel does not."""
    x = np.tile(np.arange(255, 255 - 64, -1, dtype=np.uint8), (6, 1))
    np.random.default_rng(1).shuffle(x, axis=1)
    t, total = _run(x, 90.0, 0.55, -1)
    assert not np.array_equal(np.add.reduce(t, axis=1, keepdims=True), total)   # the order shows here
    _assert_same(x, 90.0, 0.55)


@pytest.mark.parametrize("shift, scale", [(np.nan, 1.0), (0.0, np.nan), (np.inf, 1.0), (800.0, 1.0), (-np.inf, 1.0)])
def test_special_parameters(shift, scale):
    for shape in ((4, 5), (40, 30)):
        _assert_same(_values(shape, np.uint8), shift, scale)


def test_empty_inputs():
    t, total = _run(np.zeros((0, 5), np.uint8), 1.0, 1.0, -1)
    assert t.shape == (0, 5) and total.shape == (0, 1)
    with pytest.raises(ShapeError, match="empty"):
        _run(np.zeros((3, 0), np.uint8), 1.0, 1.0, -1)
    t, total = _run(np.zeros((0, 0), np.uint8), 1.0, 1.0, -1)
    assert t.shape == (0, 0) and total.shape == (0, 1)
