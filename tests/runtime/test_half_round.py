"""float32 rounded to float16 and kept in float32 (runtime/kernels/half_cast.py, ``round_to_float16``):
numpy's round trip ``x.astype(float16).astype(float32)``, bit for bit.

The ufunc path (``round_flat``) is checked on every float32 rounding pattern of each exponent below
2^15 (the float16 subnormals, zeros and both signs included); the kernel at its size bar, in place,
on shapes, strides and overlaps, with what goes to numpy's casts (past 2^15, past 65504, infinities, NaN
payloads), and on float64 / float16 data.
"""

import numpy as np
import pytest

from relaxpack.runtime.kernels._registry import KERNELS
from relaxpack.runtime.kernels.half_cast import ROUND_MIN_SIZE, round_flat, round_to_float16

ROUND = KERNELS["round_to_float16"].fn


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _round_trip(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(np.float16).astype(x.dtype)


def _rounding_patterns() -> np.ndarray:
    """float32 values below 2^15 in magnitude of every exponent (float32 subnormals and zeros
    included), every float16 significand, the 13 dropped bits at each rounding boundary (0, just
    past 0, below, at and past the half, all ones), both signs."""
    exponent = np.arange(0, 142, dtype=np.uint32) << 23
    kept = np.arange(1 << 10, dtype=np.uint32) << 13
    dropped = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x0800, 0x1800], np.uint32)
    bits = (exponent[:, None, None] | kept[None, :, None] | dropped[None, None, :]).reshape(-1)
    return np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)


def test_round_flat_is_numpys_round_trip_at_every_rounding_boundary():
    values = _rounding_patterns()
    out = np.empty_like(values)
    assert round_flat(values, out)
    assert _same_bits(out, _round_trip(values))
    assert np.signbit(out[values == 0]).sum() == np.signbit(values[values == 0]).sum() > 0


def test_round_flat_on_random_bit_patterns_in_place():
    bits = np.random.default_rng(3).integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.abs(values) < 32768.0]           # (NaNs compare False: left out too)
    want = _round_trip(values)
    assert round_flat(values, values)                   # out is x
    assert _same_bits(values, want)


@pytest.mark.parametrize("special", [32768.0, -40000.0, 65519.0, 65520.0, -65536.0, 3e38, np.inf, -np.inf, np.nan])
def test_round_flat_declines_past_two_to_the_fifteen_infinities_and_nans(special):
    x = np.full(ROUND_MIN_SIZE, 0.25, np.float32)
    x[7] = special
    out = np.full_like(x, 9.0)
    assert not round_flat(x, out)
    assert (out == 9.0).all()                           # untouched
    ROUND(x, out=out)                                   # the kernel: numpy's round trip
    assert _same_bits(out, _round_trip(x))


def test_the_kernel_keeps_nan_payloads_and_overflows_as_numpy():
    bits = np.array([0x7FC00001, 0xFFA00000, 0x7F800001, 0x7F812345], np.uint32)
    x = np.concatenate([np.full(ROUND_MIN_SIZE, -1e-30, np.float32), bits.view(np.float32),
                        np.array([65504.0, 65519.99, 65520.0, -70000.0, 5.9e-8, -2.9e-8, 3e-8], np.float32)])
    out = np.empty_like(x)
    ROUND(x, out=out)
    assert _same_bits(out, _round_trip(x))


@pytest.mark.parametrize("size", [1, ROUND_MIN_SIZE - 1, ROUND_MIN_SIZE, ROUND_MIN_SIZE + 1, 3 * ROUND_MIN_SIZE + 7])
def test_the_kernel_at_its_size_bar_in_place_and_on_shapes(size):
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * np.exp2(rng.integers(-30, 14, size))).astype(np.float32)
    x[::5] *= -1
    x[::11] = 0.0
    x[1::13] = -0.0
    want = _round_trip(x)
    out = np.empty((1, size), np.float32)
    ROUND(x.reshape(1, size), out=out)
    assert _same_bits(out.reshape(-1), want)
    ROUND(x, out=x)
    assert _same_bits(x, want)


def test_the_kernel_on_strided_arrays_and_other_dtypes():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((64, 130)) * 300).astype(np.float32)
    out = np.empty((130, 64), np.float32).T
    ROUND(x[:, ::2].repeat(2, axis=1), out=out)
    assert _same_bits(np.ascontiguousarray(out), _round_trip(x[:, ::2].repeat(2, axis=1)))
    strided = x[:, ::2]
    out = np.empty(strided.shape, np.float32)
    round_to_float16(strided, out)
    assert _same_bits(out, _round_trip(strided))
    wide = x.astype(np.float64) * 1.0000001
    out = np.empty_like(wide)
    ROUND(wide, out=out)                                # float64: rounded once, to float16
    assert _same_bits(out, _round_trip(wide))
    half = x.astype(np.float16)
    out = np.empty_like(half)
    ROUND(half, out=out)
    assert _same_bits(out, half)


def test_empty():
    out = np.empty((0, 3), np.float32)
    ROUND(np.empty((0, 3), np.float32), out=out)
    assert out.shape == (0, 3)


@pytest.mark.parametrize("shift", [64, -64, 1, -1])
def test_an_overlap_other_than_in_place_bit_for_bit(shift):
    """``out`` starting inside ``x`` or before it: the ufunc path reads ``x`` before it writes
    ``out`` (numpy buffers the one ufunc reading an overlapping operand)."""
    rng = np.random.default_rng(4)
    buffer = (rng.standard_normal(ROUND_MIN_SIZE + 64) * 100).astype(np.float32)
    start = max(0, -shift)
    x = buffer[start:start + ROUND_MIN_SIZE]
    want = _round_trip(x)
    out = buffer[start + shift:start + shift + ROUND_MIN_SIZE]
    round_to_float16(x, out)
    assert _same_bits(out, want)


def test_an_overlap_starting_inside_the_first_value_bit_for_bit():
    raw = np.zeros(4 * ROUND_MIN_SIZE + 8, np.uint8)
    x = np.ndarray((ROUND_MIN_SIZE,), np.float32, raw, 0)
    x[...] = np.random.default_rng(5).standard_normal(ROUND_MIN_SIZE) * 100
    want = _round_trip(x)
    out = np.ndarray((ROUND_MIN_SIZE,), np.float32, raw, 2)     # two bytes in
    round_to_float16(x, out)
    assert _same_bits(out, want)
