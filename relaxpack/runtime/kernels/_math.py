"""Helpers the kernel families share: the error function, working precision
for low-precision floats, and attribute normalization.

``erf`` evaluates the rational approximations of fdlibm's ``s_erf.c``
(Sun Microsystems, 1993: "Permission to use, copy, modify, and distribute
this software is freely granted, provided that this notice is preserved")
vectorized in float64; the error of each approximation is below 2**-57, so
float64 results are within about one ulp of the true value (tests check two)
and float32/float16 results are correctly rounded except in rare near-ties
(none in a test of two million points). numpy has no ``erf`` and the runtime
may not depend on scipy.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from ...errors import ShapeError
from ..fpstate import quiet
from ._workspace import Scratch

# ---------------------------------------------------------------- clip


def _clip_ufunc():
    """numpy's clip ufunc: what ``np.clip`` calls after about 1 us of Python argument
    handling (most of a clip's cost below a few thousand values); ``np.clip`` if absent."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    fn = getattr(getattr(core, "umath", None), "clip", None)
    return fn if isinstance(fn, np.ufunc) else np.clip


#: ``CLIP(x, lo, hi, out=out)``: np.clip's result, without its Python layer
CLIP = _clip_ufunc()


def _c_einsum():
    """numpy's C einsum: what ``np.einsum`` (``optimize=False``) calls after its dispatcher and
    argument checks (~0.6 us of a small depthwise conv's ~3 us einsum); ``np.einsum`` if absent."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    fn = getattr(getattr(core, "multiarray", None), "c_einsum", None)
    return fn if callable(fn) else np.einsum


#: ``EINSUM(subscripts, *operands, out=out)``: np.einsum's result, without its Python layer
EINSUM = _c_einsum()


def scalar_array(value, dtype=np.float64) -> np.ndarray:
    """``value`` as a read-only 0-d array of ``dtype``: a ufunc takes it ~0.3 us faster than a
    Python float (which it converts on every call) and ~0.2 us faster than a numpy scalar, with
    the same value and, where ``dtype`` is the other operand's, the same result dtype."""
    array = np.array(value, dtype)
    array.setflags(write=False)
    return array


#: float32 scalars of the float32 erf passes, as :func:`scalar_array` makes them
_F32_ZERO, _F32_ONE = (scalar_array(c, np.float32) for c in (0.0, 1.0))
_ALL_BITS = scalar_array(0xFFFFFFFF, np.uint32)

# ---------------------------------------------------------------- erf

_ERX = 8.45062911510467529297e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)


def _poly(coefs: Sequence[float], t: np.ndarray) -> np.ndarray:
    """sum(coefs[i] * t**i) by Horner's rule."""
    acc = np.full_like(t, coefs[-1])
    for c in coefs[-2::-1]:
        acc *= t
        acc += c
    return acc


def erf64(x: np.ndarray) -> np.ndarray:
    """The error function of ``x``, computed and returned in float64.

    >>> erf64(np.array([0.0, 0.5, -2.0]))          # doctest: +SKIP
    array([ 0.        ,  0.52049988, -0.99532227])
    """
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1)
    ax = np.abs(x)
    res = np.copysign(np.ones_like(x), x)       # |x| >= 6 (and inf): erf rounds to +-1
    nan = np.isnan(x)
    if nan.any():
        res[nan] = np.nan
    # Each interval's elements are gathered by index (np.take / np.put are
    # much faster than boolean indexing on a mixed mask) and evaluated alone.
    idx = np.flatnonzero(ax < 0.84375)          # erf(x) = x + x * P(x^2)/Q(x^2)
    if idx.size:
        xs = np.take(x, idx)
        z = xs * xs
        y = _poly(_PP, z)
        y /= _poly(_QQ, z)
        y *= xs
        y += xs
        np.put(res, idx, y)
    idx = np.flatnonzero((ax >= 0.84375) & (ax < 1.25))     # erf(1 + s) = c + P(s)/Q(s)
    if idx.size:
        s = np.take(ax, idx) - 1.0
        y = _poly(_PA, s)
        y /= _poly(_QA, s)
        y += _ERX
        np.put(res, idx, np.copysign(y, np.take(x, idx)))
    idx = np.flatnonzero((ax >= 1.25) & (ax < 6.0))
    if idx.size:           # erfc(x) = exp(-x^2 - 0.5625 + R(1/x^2)/S(1/x^2)) / x
        a = np.take(ax, idx)
        s = 1.0 / (a * a)
        near = _poly(_RA, s)
        near /= _poly(_SA, s)
        far = _poly(_RB, s)
        far /= _poly(_SB, s)
        ratio = np.where(a < 1.0 / 0.35, near, far)
        # fdlibm splits exp(-a^2 ...) in two for the last bits of erfc; erf
        # = 1 - erfc (< 0.08 here) loses nothing from one exp.
        ratio -= 0.5625
        ratio -= a * a
        np.exp(ratio, out=ratio)
        ratio /= a
        np.subtract(1.0, ratio, out=ratio)
        np.put(res, idx, np.copysign(ratio, np.take(x, idx)))
    return res.reshape(shape)


# erf in float32: two polynomials fitted (weighted minimax, in float64) for
# this evaluation, coefficients rounded to float32. Both are evaluated on every
# element (no gathers) and blended: about 35 float32 passes, ~15x faster than
# erf64. Within 1.5 ulp of erf on a dense sweep (tests check 2 ulp).
_ERF32_SPLIT = scalar_array(0.921875, np.float32)
_ERF32_TOP = scalar_array(3.925, np.float32)       # beyond it erf rounds to +-1 and erfc is taken as 0
#: erf(x) = x + x * P(x^2) for |x| < split
_ERF32_SMALL = tuple(scalar_array(c, np.float32) for c in (
    0.12837916612625122, -0.37612634897232056, 0.11283701658248901, -0.026859702542424202,
    0.005201715510338545, -0.000814979721326381, 8.397756755584851e-05))
#: erfc(t) = exp(R(t)) for split <= t < top (minimax in R: erfc to a relative 1e-8)
_ERF32_BIG = tuple(scalar_array(c, np.float32) for c in (
    0.00030720786890015006, -1.130185604095459, -0.6318997144699097, -0.11001824587583542,
    0.026390234008431435, -0.004750197287648916, 0.0005951114580966532, -4.589359014062211e-05,
    1.6306507859553676e-06))


def _horner_into(acc: np.ndarray, coefs: Sequence, t: np.ndarray) -> np.ndarray:
    """``acc = sum(coefs[i] * t**i)``, in ``acc`` (which must not be ``t``);
    a leading coefficient of 1 saves a pass."""
    mul, add = np.multiply, np.add          # (``out`` positional: ~0.1 us a call less than ``*=``)
    if coefs[-1] == 1:
        add(t, coefs[-2], acc)
    else:
        mul(t, coefs[-1], acc)
        add(acc, coefs[-2], acc)
    for c in coefs[-3::-1]:
        mul(acc, t, acc)
        add(acc, c, acc)
    return acc


def erf32_parts(x: np.ndarray, t: np.ndarray, small: np.ndarray, square: np.ndarray, inside: np.ndarray,
                is_small: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For float32 ``x``, given scratch arrays of its shape (four float32, two
    bool): ``(small, erfc_abs, is_small)``, where ``small`` is erf(|x|)
    where ``is_small`` (|x| < 0.921875) and ``erfc_abs`` (in ``square``) is
    erfc(|x|) elsewhere (0 from 3.925 on, nan for nan); ``t`` ends up free.

    Kept apart so that GELU can take ``erfc(|x|)`` itself in its negative
    tail, without the cancellation of ``1 + erf(x)``.
    """
    with quiet():
        np.abs(x, out=t)
        np.less(t, _ERF32_TOP, out=inside)
        np.less(t, _ERF32_SPLIT, out=is_small)
        np.multiply(t, t, out=square)
        _horner_into(small, _ERF32_SMALL, square)
        small *= t
        small += t
        CLIP(t, _F32_ZERO, _ERF32_TOP, out=t)          # clip: one fast pass
        erfc_abs = _horner_into(square, _ERF32_BIG, t)        # the square is dead: reuse it
        np.exp(erfc_abs, out=erfc_abs)
        np.multiply(erfc_abs, inside, out=erfc_abs)           # nan * 0 stays nan
    return small, erfc_abs, is_small


def erf32_scratch(shape) -> Scratch:
    """Scratch for :func:`erf32_parts` and :func:`select_into` at ``shape``:
    four float32 arrays, two bool, one uint32."""
    return Scratch([(shape, np.float32)] * 4 + [(shape, np.bool_)] * 2 + [(shape, np.uint32)])


def select_into(mask: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray, ones: np.ndarray) -> None:
    """``out = where(mask, a, b)`` for float32 arrays of one shape, by bit
    operations (numpy's masked copies are ~8x slower on a random mask).
    ``a`` and the uint32 scratch ``ones`` are overwritten; ``out`` may be ``a`` or ``b``."""
    select_bits(mask, a.view(np.uint32), b.view(np.uint32), out.view(np.uint32), ones)


def select_bits(mask: np.ndarray, a_bits: np.ndarray, b_bits: np.ndarray, out_bits: np.ndarray,
                ones: np.ndarray) -> None:
    """:func:`select_into` on the uint32 views of its float32 operands (a caller that keeps its
    arrays keeps the views too)."""
    np.multiply(mask, _ALL_BITS, out=ones, dtype=np.uint32)
    np.bitwise_xor(a_bits, b_bits, a_bits)
    np.bitwise_and(a_bits, ones, a_bits)
    np.bitwise_xor(b_bits, a_bits, out_bits)


def erf32(x: np.ndarray, out: np.ndarray) -> None:
    """erf of float32 ``x`` into float32 ``out`` of its shape (``out`` may be ``x``)."""
    with erf32_scratch(x.shape) as (t, small, square, _, inside, is_small, bits):
        small, erfc_abs, is_small = erf32_parts(x, t, small, square, inside, is_small)
        sign = np.bitwise_and(x.view(np.uint32), np.uint32(0x80000000), out=t.view(np.uint32))
        np.subtract(_F32_ONE, erfc_abs, out=erfc_abs)
        select_into(is_small, small, erfc_abs, out, bits)
        out_bits = out.view(np.uint32)
        out_bits |= sign


def python_max(values: np.ndarray):
    """The max of a few float values by Python (a fifth of np.maximum.reduce's cost on a few
    values; the same value: a max is exact, and the sign a zero max has never changes ``x - max``),
    or None when there are none, or an inf or NaN among them or their sum overflows: then the
    reduction decides (what a NaN gives, its payload)."""
    flat = values.ravel().tolist()
    return max(flat) if flat and math.isfinite(sum(flat)) else None


# ---------------------------------------------------------------- working precision

_LOW_FLOATS = ("float16", "bfloat16", "float8", "float4")


@functools.lru_cache(maxsize=256)
def is_low_float(dtype: np.dtype) -> bool:
    """True for float16, bfloat16 and the 8- and 4-bit floats: numpy computes
    them slowly or not at all, so kernels work in float32 and round once.
    (Cached: ``dtype.name`` costs microseconds, and every kernel asks.)"""
    return np.dtype(dtype).name.startswith(_LOW_FLOATS)


@functools.lru_cache(maxsize=256)
def work_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to compute in for results of ``dtype``."""
    return np.dtype(np.float32) if is_low_float(dtype) else np.dtype(dtype)


def scratch(out: np.ndarray) -> np.ndarray:
    """``out`` itself, or a float32 buffer of its shape when ``out`` is a low float."""
    return np.empty(out.shape, np.float32) if is_low_float(out.dtype) else out


def commit(buf: np.ndarray, out: np.ndarray) -> None:
    """Store ``buf`` (from :func:`scratch`) into ``out``, rounding once."""
    if buf is not out:
        np.copyto(out, buf, casting="unsafe")


def load(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``x`` copied into :func:`scratch` of ``out`` (``x`` may broadcast):
    a buffer the caller may then transform in place."""
    buf = scratch(out)
    np.copyto(buf, x, casting="unsafe")
    return buf


def upcast(x: np.ndarray) -> np.ndarray:
    """``x`` in its working precision (a float32 copy for low floats, else ``x``)."""
    return x.astype(np.float32) if is_low_float(x.dtype) else x


# ---------------------------------------------------------------- attributes


def per_spatial(value: Any, n: int, name: str) -> tuple[int, ...]:
    """An int-or-tuple window attribute expanded to ``n`` ints."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    values = tuple(int(v) for v in value)
    if len(values) != n:
        raise ShapeError(f"attribute {name}={value!r} needs {n} values (one per spatial dim)")
    return values


def pads(value: Any, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Padding as (begins, ends) from an int, ``n`` values or ONNX's ``2n``."""
    if isinstance(value, (int, np.integer)):
        values = (int(value),) * n
    else:
        values = tuple(int(v) for v in value)
    if len(values) == n:
        values = values + values
    if len(values) != 2 * n:
        raise ShapeError(f"attribute padding={value!r} needs {n} or {2 * n} values")
    return values[:n], values[n:]


def axis_tuple(axis: Any, ndim: int) -> tuple[int, ...]:
    """``None`` (all axes), an int or a sequence of ints, normalized to ``[0, ndim)``."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(normalize_axis(a, ndim) for a in axes)


def normalize_axis(axis: int, ndim: int) -> int:
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis + ndim if axis < 0 else axis


def out_of_range(indices: np.ndarray, size: int) -> np.ndarray:
    """Where integer ``indices`` fall outside ``[-size, size)``: unsigned ones are compared with
    ``size`` only (numpy 2.0-2.1 crash comparing a strided unsigned array with a negative int)."""
    if indices.dtype.kind == "u":
        return indices >= size
    return (indices < -size) | (indices >= size)


def separate(out: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``arrays``, each copied if it may share memory with ``out``.

    The memory planner may let an elementwise kernel write into an input
    that dies there; a kernel that reads an input after it started writing
    ``out`` passes that input through here first.
    """
    return tuple(a.copy() if np.may_share_memory(a, out) else a for a in arrays)
