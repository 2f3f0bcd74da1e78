"""float16 <-> float32 by whole-array ufuncs (runtime/kernels/half_cast.py): numpy's cast, bit for bit.

The ufunc paths themselves (``widen_flat``, ``narrow_flat``) are checked on every finite float16 and
on every float32 rounding pattern of each exponent; the dispatching functions at their size bars,
on shapes, strided and overlapping arrays, and with infinities, NaNs and overflows (numpy's cast).
"""

import numpy as np
import pytest

from relaxpack.runtime.fpstate import quiet
from relaxpack.runtime.kernels import half_cast
from relaxpack.runtime.kernels._registry import KERNELS
from relaxpack.runtime.kernels.half_cast import (NARROW_MIN_SIZE, WIDEN_MIN_SIZE, as_float32, cast_into,
                                                 narrow, narrow_flat, widen, widen_flat)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _numpy16(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(np.float16)


ALL_HALVES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
FINITE_HALVES = ALL_HALVES[np.isfinite(ALL_HALVES)]


def _rounding_patterns() -> np.ndarray:
    """float32 values below 65520 in magnitude of every exponent (subnormals and zero included),
    every float16 significand, and the 13 dropped bits at each rounding boundary (0, just past 0,
    just below and at the half, just past it, all ones), both signs."""
    exponent = np.arange(0, 143, dtype=np.uint32) << 23
    kept = np.arange(1 << 10, dtype=np.uint32) << 13
    dropped = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x0800, 0x1800], np.uint32)
    bits = (exponent[:, None, None] | kept[None, :, None] | dropped[None, None, :]).reshape(-1)
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    values = bits.view(np.float32)
    return values[np.abs(values) < 65520.0]


def test_widen_flat_is_numpys_cast_on_every_finite_float16():
    out = np.empty(FINITE_HALVES.size, np.float32)
    assert widen_flat(FINITE_HALVES, out)
    assert _same_bits(out, FINITE_HALVES.astype(np.float32))


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_widen_flat_declines_infinities_and_nans(special):
    x = np.full(WIDEN_MIN_SIZE, 0.5, np.float16)
    x[WIDEN_MIN_SIZE // 2] = special
    assert not widen_flat(x, np.empty(x.size, np.float32))


def test_widen_is_numpys_cast_with_every_special_and_payload():
    out = np.empty(ALL_HALVES.size, np.float32)
    widen(ALL_HALVES, out)                  # NaNs with every payload, both infinities: numpy's cast
    assert _same_bits(out, ALL_HALVES.astype(np.float32))


def test_narrow_flat_is_numpys_cast_at_every_rounding_boundary():
    values = _rounding_patterns()
    out = np.empty(values.size, np.float16)
    assert narrow_flat(values, out)
    assert _same_bits(out, _numpy16(values))


def test_narrow_flat_on_random_bit_patterns():
    bits = np.random.default_rng(7).integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.abs(values) < 65520.0]           # (NaNs compare False: left out too)
    out = np.empty(values.size, np.float16)
    assert narrow_flat(values, out)
    assert _same_bits(out, _numpy16(values))


@pytest.mark.parametrize("special", [65520.0, -65520.0, 70000.0, np.inf, -np.inf, np.nan, 3e38])
def test_narrow_flat_declines_what_rounds_past_the_largest_float16(special):
    x = np.full(NARROW_MIN_SIZE, 0.25, np.float32)
    x[-1] = special
    out = np.zeros(x.size, np.float16)
    assert not narrow_flat(x, out)
    assert not out.any()                                # untouched


def test_narrow_flat_keeps_the_largest_value_below_the_overflow():
    below = np.nextafter(np.float32(65520.0), np.float32(0))
    x = np.array([below, -below, 65504.0, 65519.0, 2.0 ** -24, 2.0 ** -25, -2.0 ** -25, -0.0], np.float32)
    out = np.empty(x.size, np.float16)
    assert narrow_flat(x, out)
    assert _same_bits(out, _numpy16(x))


@pytest.mark.parametrize("size", [1, WIDEN_MIN_SIZE - 1, WIDEN_MIN_SIZE, WIDEN_MIN_SIZE + 1,
                                  NARROW_MIN_SIZE - 1, NARROW_MIN_SIZE, 3 * NARROW_MIN_SIZE + 7])
def test_both_ways_at_the_size_bars(size):
    rng = np.random.default_rng(size)
    wide = (rng.standard_normal(size) * np.float32(10.0) ** rng.integers(-9, 5, size)).astype(np.float32)
    half = np.empty(size, np.float16)
    narrow(wide, half)
    assert _same_bits(half, _numpy16(wide))
    back = np.empty(size, np.float32)
    widen(half, back)
    assert _same_bits(back, half.astype(np.float32))


def test_empty_arrays():
    widen(np.empty((0, 3), np.float16), np.empty((0, 3), np.float32))
    narrow(np.empty(0, np.float32), np.empty(0, np.float16))


def test_shapes_strides_and_overflow_take_numpys_cast():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, NARROW_MIN_SIZE // 2)).astype(np.float32) * 100
    out = np.empty(x.shape, np.float16)
    narrow(x, out)                                      # 2-d, C-contiguous
    assert _same_bits(out, _numpy16(x))
    columns = np.empty((x.shape[1], 4), np.float16).T
    narrow(x, columns)                                  # a transposed out
    assert _same_bits(np.ascontiguousarray(columns), _numpy16(x))
    x[1, 5] = 1e6                                       # overflows to inf: numpy's cast
    with np.errstate(over="ignore"):
        narrow(x, out)
    assert _same_bits(out, _numpy16(x)) and np.isinf(out[1, 5])
    halves = out[:, ::2]                                # a strided float16 input
    wide = np.empty(halves.shape, np.float32)
    widen(halves, wide)
    assert _same_bits(wide, halves.astype(np.float32))


def test_widen_into_memory_overlapping_its_input_is_numpys_assignment():
    buffers = []
    for _ in range(2):
        buffer = np.zeros(4 * WIDEN_MIN_SIZE, np.uint8)
        buffer[:2 * WIDEN_MIN_SIZE].view(np.float16)[...] = np.linspace(-3, 3, WIDEN_MIN_SIZE)
        buffers.append(buffer)
    x, mine = buffers[0][:2 * WIDEN_MIN_SIZE].view(np.float16), buffers[1][:2 * WIDEN_MIN_SIZE].view(np.float16)
    buffers[0].view(np.float32)[...] = x                # numpy's assignment, out starting where x does
    widen(mine, buffers[1].view(np.float32))
    assert np.array_equal(buffers[0], buffers[1])


def test_narrow_into_memory_overlapping_its_input():
    x = np.linspace(-5, 5, NARROW_MIN_SIZE, dtype=np.float32)
    expected = _numpy16(x)
    out = x.view(np.float16)[:x.size]                   # the first half of x's bytes
    narrow(x, out)
    assert _same_bits(out, expected)


def test_cast_into_and_as_float32_other_dtypes_as_numpy():
    x = np.arange(WIDEN_MIN_SIZE, dtype=np.float64) / 7
    out = np.empty(x.size, np.float16)
    cast_into(out, x)                                   # float64 -> float16: numpy's assignment
    assert _same_bits(out, x.astype(np.float16))
    assert _same_bits(as_float32(out), out.astype(np.float32))
    assert _same_bits(as_float32(out[:5]), out[:5].astype(np.float32))
    assert _same_bits(as_float32(x), x.astype(np.float32))


@pytest.mark.parametrize("source, target", [(np.float16, np.float32), (np.float32, np.float16)])
def test_specialized_astype_in_a_vm_run(source, target):
    call = KERNELS["astype"].fn.specialize_attrs({"dtype": np.dtype(target).name}, ())
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, NARROW_MIN_SIZE // 3 + 1)) * 50).astype(source)
    x[0, 0] = 0.0
    x[0, 1] = -0.0
    out = np.empty(x.shape, target)
    with quiet():                                       # (as vm.run: warnings off)
        call(x, out=out)
    assert _same_bits(out, _numpy16(x) if target is np.float16 else x.astype(np.float32))


def test_kept_buffers_per_size_and_thread(monkeypatch):
    monkeypatch.setattr(half_cast, "_SIZES_KEPT", 2)
    for size in (NARROW_MIN_SIZE, NARROW_MIN_SIZE + 1, NARROW_MIN_SIZE + 2, NARROW_MIN_SIZE):
        x = np.linspace(-1, 1, size, dtype=np.float32)
        out = np.empty(size, np.float16)
        narrow(x, out)
        assert _same_bits(out, _numpy16(x))
    assert len(half_cast._KEPT.sizes) <= 2
