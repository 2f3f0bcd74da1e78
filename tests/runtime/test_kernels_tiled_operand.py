"""A fused chain's binary step on a bound per-channel constant reads it as a tile of the step's
shape (``kernels/tiled_operand.py``): the ufunc's own results bit for bit, at each edge (one value,
the same shape, the size bar, operands that broadcast both ways, the constant first, a keyword-out
ufunc, NaN payloads, integer and mixed dtypes, shapes alternating past the kept few, a new
constant, a constant that does not broadcast)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import tiled_operand
from relaxpack.runtime.kernels._registry import BoundFlags, bound_value
from relaxpack.runtime.kernels.fused_specialized import specialize
from relaxpack.runtime.kernels.tiled_operand import TILE_MAX_SIZE, tile_of, tiled

from .test_kernels_fused_elementwise import P, S, step, unfused


def bits(a):
    return a.view(np.uint8) if a.dtype != bool else a


def check(ufunc, a, b, position, positional=True):
    want = ufunc(a, b)
    call = tiled(ufunc, position, positional)
    for _ in range(2):                              # the first call makes the tile, the second reads it
        out = np.full(want.shape, 7, want.dtype)
        call(a, b, out)
        np.testing.assert_array_equal(bits(out), bits(want))


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("x_shape, c_shape", [
    ((1, 31, 48, 16), (1, 1, 1, 16)),       # channels last, per channel
    ((3, 7, 5, 12), (12,)),                 # a batch, the constant of lower rank
    ((1, 16, 31, 48), (1, 16, 1, 1)),       # channels first
    ((2, 9, 1), (1, 1, 11)),                # both broadcast: out (2, 9, 11)
    ((5, 3), (5, 1)),                       # a column
])
@pytest.mark.parametrize("ufunc", [np.multiply, np.add, np.subtract, np.divide, np.less])
def test_the_ufuncs_results_at_per_channel_shapes(x_shape, c_shape, ufunc):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    c = RNG.standard_normal(c_shape).astype(np.float32)
    with np.errstate(all="ignore"):
        check(ufunc, x, c, 1)
        check(ufunc, c, x, 0)


def test_maximum_takes_out_by_keyword():
    x = RNG.standard_normal((4, 6, 8)).astype(np.float32)
    c = RNG.standard_normal((8,)).astype(np.float32)
    check(np.maximum, x, c, 1, positional=False)


def test_nan_payloads_and_signed_zeros_are_kept():
    c = np.array([np.nan, -0.0, 0.0, np.inf], np.float32)
    c.view(np.uint32)[0] |= 0x3FF             # a NaN with a payload
    x = np.array([[1.0, -0.0, 0.0, -np.inf]] * 3, np.float32)
    with np.errstate(all="ignore"):
        for ufunc in (np.multiply, np.add, np.subtract):
            check(ufunc, x, c, 1)
            check(ufunc, c, x, 0)


@pytest.mark.parametrize("x_dtype, c_dtype", [(np.int32, np.int32), (np.uint8, np.int64), (np.float32, np.int32),
                                              (np.float64, np.float32), (np.int8, np.float64)])
def test_integer_and_mixed_dtypes_promote_as_the_constant_does(x_dtype, c_dtype):
    x = RNG.integers(-100, 100, (2, 5, 6)).astype(x_dtype)
    c = RNG.integers(-100, 100, (6,)).astype(c_dtype)
    check(np.add, x, c, 1)
    check(np.multiply, c, x, 0)


def test_no_tile_for_one_value_the_same_shape_or_past_the_bar():
    out = np.empty((2, 3, 4), np.float32)
    assert tile_of(np.ones((1, 1, 4), np.float32), out) is not None
    assert tile_of(np.array(2.0, np.float32), out) is None
    assert tile_of(np.ones((1, 1, 1), np.float32), out) is None
    assert tile_of(np.ones((2, 3, 4), np.float32), out) is None
    assert tile_of(np.ones((5,), np.float32), out) is None          # does not broadcast
    at, past = np.empty((TILE_MAX_SIZE // 8, 8), np.float32), np.empty((TILE_MAX_SIZE // 8 + 1, 8), np.float32)
    assert tile_of(np.ones(8, np.float32), at) is not None
    assert tile_of(np.ones(8, np.float32), past) is None
    tile = tile_of(np.arange(4, dtype=np.float32), out)
    assert tile.shape == out.shape and tile.flags.c_contiguous and not tile.flags.writeable
    x = RNG.standard_normal(past.shape).astype(np.float32)
    check(np.multiply, x, RNG.standard_normal(8).astype(np.float32), 1)     # past the bar: the plain call


def test_shapes_alternating_past_the_kept_ones_and_a_new_constant():
    call = tiled(np.multiply, 1, True)
    c = RNG.standard_normal((1, 1, 4)).astype(np.float32)
    shapes = [(1, n, 4) for n in range(1, tiled_operand.KEPT_SHAPES + 3)] * 2
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        out = np.empty(shape, np.float32)
        call(x, c, out)
        np.testing.assert_array_equal(out, x * c)
    d = RNG.standard_normal((1, 1, 4)).astype(np.float32)     # another constant at a kept shape
    x = RNG.standard_normal(shapes[0]).astype(np.float32)
    out = np.empty(shapes[0], np.float32)
    call(x, d, out)
    np.testing.assert_array_equal(out, x * d)


def test_an_operand_that_does_not_broadcast_raises_the_ufuncs_error():
    call = tiled(np.add, 1, True)
    with pytest.raises(ValueError):
        call(np.ones((2, 3), np.float32), np.ones(5, np.float32), np.empty((2, 3), np.float32))


def test_bound_flags_carry_the_bound_values():
    c = np.ones(3)
    flags = BoundFlags((None, c, 2.0), (False, True, True))
    assert flags == (False, True, True) and tuple(flags[:2]) == (False, True)
    assert bound_value(flags, 0) is None and bound_value(flags, 1) is c and bound_value(flags, 2) == 2.0
    assert bound_value((False, True), 1) is None and bound_value(flags, 5) is None


# a quantized conv's epilogue without the conv: per-channel scale, round, clip; and a residual add
REQUANTIZE = (step("multiply", [P(0), P(1)], inplace=[True, False]), step("round", [S(0)]),
              step("clip", [S(1)], min=0.0, max=255.0, saturate_nan=False),
              step("add", [S(2), P(2)], inplace=[True, False]))


@pytest.mark.parametrize("scale_shape", [(1, 1, 1, 16), (1, 1, 1, 1), ()])
@pytest.mark.parametrize("bound", [True, False])
def test_specialized_chain_with_a_bound_per_channel_constant(scale_shape, bound, monkeypatch):
    """The VM passes BoundFlags: the multiply by a per-channel scale reads its tile; a one-value
    scale and a register keep the plain ufunc; every result is the unfused chain's."""
    tiles = []
    real = tiled_operand.tile_of
    monkeypatch.setattr(tiled_operand, "tile_of", lambda c, out, *limit: tiles.append(c.shape) or real(c, out, *limit))
    scale = (RNG.random(scale_shape) * 0.05).astype(np.float32)
    offset = RNG.standard_normal((16,)).astype(np.float32)
    call = specialize(REQUANTIZE, BoundFlags((None, scale, offset), (False, bound, bound)))
    for shape in [(1, 5, 7, 16), (1, 5, 7, 16), (2, 3, 4, 16), (1, 5, 7, 16)]:
        x = (RNG.standard_normal(shape) * 3000).astype(np.float32)
        args = (x, scale, offset)
        out = np.empty(shape, np.float32)
        call(*args, out=out)
        np.testing.assert_array_equal(bits(out), bits(unfused(REQUANTIZE, args)))
    # tiles made once per (step, shape): the offset's always when bound, the scale's when per channel
    per_channel = [(1, 1, 1, 16)] * (scale_shape == (1, 1, 1, 16))
    assert sorted(tiles) == (sorted((per_channel + [(16,)]) * 2) if bound else [])


@pytest.mark.parametrize("x_shape, c_shape, tile_shape", [
    ((1, 31, 48, 96), (1, 1, 1, 96), (48, 96)),         # channels last past the bar: a (W, C) row tile
    ((3, 32, 23, 96), (96,), (23, 96)),                 # a batch, the constant of lower rank
    ((1, 61, 96, 16), (1, 1, 1, 16), (96, 16)),
    ((2, 5, 3000, 8), (1, 1, 3000, 8), None),           # its trailing block past ROW_TILE_MAX_SIZE
    ((1, 16, 80, 80), (1, 16, 1, 1), None),             # channels first: c's channels before the block
    ((300, 300), (300,), None),                         # the tile would be c itself
])
@pytest.mark.parametrize("ufunc", [np.multiply, np.add, np.subtract, np.divide])
def test_past_the_bar_a_row_tile_of_the_trailing_dims(x_shape, c_shape, tile_shape, ufunc):
    """A step past TILE_MAX_SIZE reads the constant as a tile of the largest block of the trailing
    dims of at most ROW_TILE_MAX_SIZE values where the constant's leading dims are 1s (numpy then
    loops over runs of W * C values): the ufunc's own results; none where there is no such block."""
    x = RNG.standard_normal(x_shape).astype(np.float32)
    c = RNG.standard_normal(c_shape).astype(np.float32)
    out = np.empty(np.broadcast_shapes(x_shape, c_shape), np.float32)
    assert out.size > TILE_MAX_SIZE
    tile = tiled_operand.row_tile_of(c, out)
    if tile_shape is None:
        assert tile is None
    else:
        assert tile.shape == tile_shape and tile.flags.c_contiguous and not tile.flags.writeable
        assert tile.size <= tiled_operand.ROW_TILE_MAX_SIZE
    with np.errstate(all="ignore"):
        check(ufunc, x, c, 1)
        check(ufunc, c, x, 0)
    assert tiled_operand.row_tile_of(np.array([2.0], np.float32), out) is None
    assert tiled_operand.row_tile_of(np.ones((5, 2), np.float32), out) is None      # does not broadcast
