"""float16 <-> float32 conversions by whole-array integer and float ufuncs, numpy's values bit for bit.

numpy 2.4 converts float16 one value at a time (no F16C in its casts): ~1.4 ns a value float16 ->
float32 and ~2.5 ns float32 -> float16, where its integer and float32 ufuncs run SIMD loops at
~0.05 ns a value. A float16 model computed in float32 regions (docs/design-notes.md, "float16
regions in float32") pays these conversions at every region's edge. Past a size
(:data:`WIDEN_MIN_SIZE`, :data:`NARROW_MIN_SIZE`) the conversions here take whole-array calls:

- :func:`widen`: the float16 bits, sign-extended to int32, shifted left 13 and masked to sign,
  exponent and significand (``0x8FFFE000``) are a float32 equal to the value times ``2^-112``
  (a subnormal float16 becomes a subnormal float32 of the same significand); times ``2^112`` is
  exact. Infinities and NaNs (exponent 31) come out as finite values of magnitude 65536 or more:
  a sum of squares that reaches ``2^32`` (any such value does) sends the call to numpy's cast.
- :func:`narrow`: with ``E`` the float32 exponent field of ``|x|`` raised to float16's smallest
  normal exponent (113), ``M = 2^(E - 127 + 13)`` has float32 spacing equal to float16's at
  ``|x|``, so ``|x| + M`` rounds ``|x|`` to float16 (ties to even: ``M``'s significand is even);
  its bits less ``M``'s count float16 steps, plus ``(E - 113) << 10`` the exponent: the float16
  magnitude bits, subnormals included; the sign is OR-ed in from bit 31. Values that round past
  65504 (``|x| >= 65520``), infinities and NaNs (a float32 max over ``|x|``) go to numpy's cast.

Checked against numpy's casts on every float16 and every float32 bit pattern (the latter offline,
docs/design-notes.md; ``tests/runtime/test_half_cast.py`` checks all float16 values, every float32
rounding boundary pattern, and the fallbacks). No floating-point warnings: the cast's overflow
warning comes only from numpy's own path.
"""

from __future__ import annotations

import threading

import numpy as np

from ..fpstate import IGNORING, quiet, state_now
from ._gelu_table import kept_buffers
from ._math import scalar_array
from ._registry import register_kernel

#: from this many values a C-contiguous conversion takes the ufuncs; below, numpy's per-value loop
#: costs no more than the calls (measured, 1 thread, thread CPU time, paired medians: float16 ->
#: float32 at 3072 values 4.6 against 4.4 us, 5760 7.2 against 9.4, 8192 6.4 against 11.7, 25920
#: 12.2 against 36.6; float32 -> float16 at 5760 14.9 against 14.8, 8192 20.8 against 20.8, 17568
#: 32.6 against 44.6, 25920 44.6 against 66.3)
WIDEN_MIN_SIZE, NARROW_MIN_SIZE = 4096, 10240


def _bits(value: int) -> np.ndarray:
    return scalar_array(np.uint32(value).view(np.int32), np.int32)


_SIGNED_FIELDS = _bits(0x8FFFE000)          # sign (sign-extended to bit 31), exponent, significand
_SHIFT = scalar_array(13, np.int32)
_SCALE = scalar_array(2.0 ** 112, np.float32)
_SQUARES_LIMIT = 2.0 ** 32                   # (65536)^2: reached by any exponent-31 value

_ABS, _EXPONENT = _bits(0x7FFFFFFF), _bits(0x7F800000)
_LOWEST = _bits(113 << 23)                   # float16's smallest normal exponent field
_SMALLEST_NORMAL = scalar_array(2.0 ** -14, np.float32)
_TO_SPACING = scalar_array(2.0 ** 13, np.float32)
_ROUNDS_TO_INF = 65520.0                     # rounds (to even) past 65504
_HIGH_HALF, _SIGN = scalar_array(16, np.int32), scalar_array(0x8000, np.int32)


def _fits(x: np.ndarray, out: np.ndarray, least: int, overlap: bool = False) -> bool:
    """Whether the ufunc path applies: native little-endian, C-contiguous, at least ``least``
    values, apart (unless ``overlap`` is fine)."""
    return (x.size >= least and x.size == out.size and _LITTLE and x.flags.c_contiguous
            and out.flags.c_contiguous and x.dtype.byteorder in "=|" and out.dtype.byteorder in "=|"
            and (overlap or not np.may_share_memory(x, out)))


_LITTLE = np.little_endian


def widen(x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = x`` for float16 ``x`` and float32 ``out`` of one shape (numpy's values)."""
    if not (_fits(x, out, WIDEN_MIN_SIZE) and widen_flat(x.reshape(-1), out.reshape(-1))):
        out[...] = x


def widen_flat(x: np.ndarray, out: np.ndarray) -> bool:
    """The ufunc path of :func:`widen` on 1-D contiguous arrays that do not overlap; False (``out``
    overwritten) where ``x`` holds an infinity or NaN."""
    bits = out.view(np.int32)
    np.copyto(bits, x.view(np.int16))                   # sign-extended: bit 15 also lands on bit 31
    np.left_shift(bits, _SHIFT, bits)
    np.bitwise_and(bits, _SIGNED_FIELDS, bits)
    np.multiply(out, _SCALE, out)
    return not (np.dot(out, out) >= _SQUARES_LIMIT and (out.max() >= 65536.0 or out.min() <= -65536.0))


class _Narrowing:
    """A thread's int32 buffers for :func:`narrow` at one size, with their float32 views."""

    __slots__ = ("magnitude", "exponent", "scratch", "magnitude_f", "powers", "steps")

    def __init__(self, n: int):
        self.magnitude, self.exponent, self.scratch = (np.empty(n, np.int32) for _ in range(3))
        self.magnitude_f, self.powers, self.steps = (a.view(np.float32) for a in
                                                     (self.magnitude, self.exponent, self.scratch))


class _Kept(threading.local):
    def __init__(self):
        self.sizes: dict[int, _Narrowing] = {}


_KEPT = _Kept()
#: sizes, and values over all sizes, whose buffers a thread keeps (12 bytes a value)
_SIZES_KEPT, _KEPT_VALUES = 8, 1 << 18


def narrow(x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = x`` (rounded to nearest, ties to even) for float32 ``x`` and float16 ``out`` of
    one shape (numpy's values)."""
    if not (_fits(x, out, NARROW_MIN_SIZE, overlap=True) and narrow_flat(x.reshape(-1), out.reshape(-1))):
        out[...] = x


def narrow_flat(x: np.ndarray, out: np.ndarray) -> bool:
    """The ufunc path of :func:`narrow` on 1-D contiguous arrays (``out`` is written last, so it
    may overlap ``x``); False (``out`` untouched) where a value rounds past 65504 or is NaN."""
    kept = kept_buffers(_KEPT.sizes, x.size, _Narrowing, _SIZES_KEPT, _KEPT_VALUES)
    magnitude, exponent, scratch = kept.magnitude, kept.exponent, kept.scratch
    source = x.view(np.int32)
    np.bitwise_and(source, _ABS, magnitude)
    if not kept.magnitude_f.max() < _ROUNDS_TO_INF:    # overflow, infinity or NaN (max is NaN)
        return False
    np.bitwise_and(magnitude, _EXPONENT, exponent)
    np.maximum(kept.powers, _SMALLEST_NORMAL, out=kept.powers)     # 2^(E - 127), E at least 113
    np.multiply(kept.powers, _TO_SPACING, kept.steps)   # M = 2^(E - 114): float16's spacing is M's
    np.add(kept.magnitude_f, kept.steps, kept.magnitude_f)          # |x| rounded
    np.subtract(magnitude, scratch, magnitude)          # float16 steps above M
    np.subtract(exponent, _LOWEST, exponent)
    np.right_shift(exponent, _SHIFT, exponent)          # (E - 113) << 10
    np.add(magnitude, exponent, magnitude)
    np.right_shift(source, _HIGH_HALF, scratch)         # the sign to bit 15 (contiguous: 0.5x a
    np.bitwise_and(scratch, _SIGN, scratch)             # strided read of the high halves)
    np.bitwise_or(magnitude, scratch, magnitude)
    np.copyto(out.view(np.int16), magnitude, casting="unsafe")
    return True


_SIGN_BIT, _EXPONENT_LIMIT = _bits(0x80000000), 142 << 23    # |x| >= 2^15: numpy's round trip
_TO_STEP = _bits(13 << 23)                   # 2^E -> M = 2^(E + 13)


class _Rounding:
    """A thread's int32 buffers for :func:`round_flat` at one size, with a float32 view."""

    __slots__ = ("exponent", "sign", "step")

    def __init__(self, n: int):
        self.exponent, self.sign = np.empty(n, np.int32), np.empty(n, np.int32)
        self.step = self.exponent.view(np.float32)


_ROUNDING = _Kept()


def round_to_float16(x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = x.astype(float16)`` for float32 ``x`` and ``out`` of one shape: ``x`` rounded to
    the nearest float16 value (ties to even, subnormals, overflow to inf, NaN), kept in float32
    (numpy's round trip's values, bit for bit). ``out`` may overlap ``x`` in any way: the ufunc path
    reads ``x`` in its first three calls, into its own buffers or (the add) as a ufunc reading an
    overlapping operand (numpy buffers it), and ``out`` after; ``dtype == float32`` is the native
    byte order's."""
    if not (x.dtype == _F32 and out.dtype == _F32 and x.size >= ROUND_MIN_SIZE and x.size == out.size
            and x.flags.c_contiguous and out.flags.c_contiguous and _LITTLE
            and round_flat(x.reshape(-1), out.reshape(-1))):
        _numpy_round_trip(x, out)


def _numpy_round_trip(x: np.ndarray, out: np.ndarray) -> None:
    """numpy's two casts, its overflow warning off as the astype kernel's (a VM run's are already)."""
    if state_now() is IGNORING:
        out[...] = x.astype(np.float16)
    else:
        with quiet():
            out[...] = x.astype(np.float16)


def round_flat(x: np.ndarray, out: np.ndarray) -> bool:
    """The ufunc path of :func:`round_to_float16` on 1-D contiguous float32 arrays (``out`` may
    overlap ``x``): with ``E`` the exponent of ``|x|`` floored at -14 (float16's smallest normal), ``M =
    2^(E + 13)`` carrying ``x``'s sign has float32 spacing equal to float16's at ``|x|``, so ``x + M``
    rounds ``x`` to float16 (ties to even: ``M``'s significand is even) and ``- M`` is exact; ``x``'s
    sign bit OR-ed in keeps a zero's sign. 9 calls. False (``out`` untouched) where ``|x| >= 2^15``,
    an infinity or NaN is present (numpy's round trip: overflow to inf, NaN payloads)."""
    kept = kept_buffers(_ROUNDING.sizes, x.size, _Rounding, _SIZES_KEPT, _KEPT_VALUES)
    exponent, sign, step = kept.exponent, kept.sign, kept.step
    source = x.view(np.int32)
    np.bitwise_and(source, _EXPONENT, exponent)
    if exponent.max() >= _EXPONENT_LIMIT:
        return False
    np.bitwise_and(source, _SIGN_BIT, sign)
    np.maximum(exponent, _LOWEST, out=exponent)         # 2^E, E at least -14
    np.add(exponent, _TO_STEP, exponent)
    np.bitwise_or(exponent, sign, exponent)             # M with x's sign
    np.add(x, step, out)
    np.subtract(out, step, out)
    np.bitwise_or(out.view(np.int32), sign, out.view(np.int32))
    return True


@register_kernel("round_to_float16")
def round_to_float16_kernel(x, *, out):
    """``out[...] = x.astype(float16)``: ``x`` rounded to float16, kept in its dtype (``out``'s): a
    float16 value every reader widens again, held in float32 (docs/design-notes.md, "float16
    roundings kept in float32")."""
    round_to_float16(x, out)


#: from this many values :func:`round_to_float16` takes the ufuncs (measured through the kernel's
#: call, 1 thread: 1024 values 6.9 against numpy's two casts 5.6 us, 1536 7.4 / 7.5, 1792 7.6 / 8.5,
#: 2048 7.9 / 9.5, 4096 9.8 / 17.4); below, numpy's two casts
ROUND_MIN_SIZE = 1536

_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)


def cast_into(out: np.ndarray, x: np.ndarray) -> None:
    """``out[...] = x``: float16 -> float32 by :func:`widen`, float32 -> float16 by :func:`narrow`
    (each past its size bar), anything else by numpy's assignment (the same values)."""
    if x.size < WIDEN_MIN_SIZE:                         # (the lower bar: small arrays at once)
        out[...] = x
    elif x.dtype == _F16 and out.dtype == _F32:
        widen(x, out)
    elif x.dtype == _F32 and out.dtype == _F16:
        narrow(x, out)
    else:
        out[...] = x


def as_float32(x: np.ndarray) -> np.ndarray:
    """``x.astype(np.float32)`` (a new array; a float16 one widened by :func:`widen`)."""
    if x.dtype != _F16 or x.size < WIDEN_MIN_SIZE or not x.flags.c_contiguous:
        return x.astype(np.float32)
    wide = np.empty(x.shape, np.float32)
    widen(x, wide)
    return wide
