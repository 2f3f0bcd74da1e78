"""Exact GELU of small float16/bfloat16 arrays: ``x * Phi(x)`` in float64 from a table of cubics,
rounded once (float32 takes :mod:`._gelu_quad32` at every size since: docs/design-notes.md).

``Phi`` is tabulated on intervals of width ``h = 1 / K`` (``K = 1024``) centered on ``c = i / K``
for ``x`` in ``[-14.5, 6]``: a cubic in ``r = x - c`` (``|r| <= h / 2``) interpolating ``Phi`` at
the interval's four Chebyshev nodes (``math.erfc`` there). Below -14.5 ``x * Phi(x)`` rounds to
-0 in float32, above 6 to ``x``: two guard rows past the ends hold the cubics 0 and 1, to which
clipping sends every other ``x`` (inf gives inf, -inf NaN as ``-inf * 0``, as onnxruntime; NaN
stays NaN). Within a relative 2.3e-15 of ``x Phi(x)`` on [-2, 6], 2e-13 on [-5, -2), 1.2e-12 on
[-8, -5), 3e-12 on [-10, -8) and 9e-12 on [-13.2, -10) (the cubic's error grows as ``x^4``
there, where ``|x Phi(x)| < 1e-22``; against mpmath), so float32, float16 and bfloat16 results
are correctly rounded but for near-ties.

Per call, 15 numpy calls of one dtype each (docs/design-notes.md): the copy into float64, the
clip, ``s = x + M`` (``M = 1.5 * 2^52 / K`` minus the first row's center: ``s`` is ``x`` rounded
to the grid, and its pattern less the pattern of ``1.5 * 2^52 / K`` is the row), the
center ``s - M`` and ``r``, the row as ``s``'s pattern less ``M``'s, one ``take`` of the rows (``(rows, 4)`` float64: numpy moves each
32-byte row in one copy, 5x faster than gathering four columns), Horner's six calls on the
row's columns, ``x`` times that, and the rounding copy.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..fpstate import quiet
from ._math import CLIP, scalar_array

#: intervals per unit of x, and the tabulated range
_K, _LOW, _HIGH = 1024, -14.5, 6.0
#: float16/bfloat16 arrays up to this many values take :func:`gelu_table_into`, larger ones the
#: float32 GELU (measured: docs/design-notes.md)
GELU64_MAX_SIZE = 6144
#: sizes, and values over all sizes, whose buffers a thread keeps (the oldest size goes first)
_GELU_SIZES_KEPT, _GELU_KEPT_VALUES = 8, 16384
#: the table's first and last interval (``i`` of the center ``i / K``)
_FIRST, _LAST = math.floor(_LOW * _K), math.ceil(_HIGH * _K)
#: interval ``i`` is row ``i - _FIRST + 1``: row 0 is the guard below, the last row the one above
_ROWS = _LAST - _FIRST + 3


def _interpolants(centers: np.ndarray, degree: int = 3) -> np.ndarray:
    """``(len(centers), degree + 1)`` coefficients of ``r^0 .. r^degree`` of the polynomials
    interpolating ``Phi`` at the ``degree + 1`` Chebyshev nodes of ``[c - h/2, c + h/2]``. Solved in
    ``rho = 2 K r`` in [-1, 1] (a well conditioned system) and scaled by powers of two;
    ``Phi(v) = erfc(-v / sqrt 2) / 2`` (the argument's rounding moves erfc by a relative
    ``2 z^2 2^-53``, under 3e-14 at z = 10.3)."""
    powers = np.arange(degree + 1)
    rho = np.cos((2 * powers + 1) * math.pi / (2 * degree + 2))
    points = (centers[:, None] + rho[None, :] / (2 * _K)).ravel() * -math.sqrt(0.5)
    values = 0.5 * np.fromiter(map(math.erfc, points.tolist()), np.float64, points.size)
    inverse = np.linalg.inv(rho[:, None] ** powers[None, :])
    return (values.reshape(-1, degree + 1) @ inverse.T) * (2.0 * _K) ** powers


def _build_table(degree: int = 3) -> np.ndarray:
    """The ``(_ROWS, degree + 1)`` table: the guard 0 in row 0, interval ``i`` in row
    ``i - _FIRST + 1``, the guard 1 last. Made in blocks of 2048 intervals (the erfc values' list
    stays ~0.3 MB)."""
    table = np.zeros((_ROWS, degree + 1))
    for start in range(_FIRST, _LAST + 1, 2048):
        stop = min(start + 2048, _LAST + 1)
        table[start - _FIRST + 1:stop - _FIRST + 1] = _interpolants(np.arange(start, stop) / _K, degree)
    table[-1, 0] = 1.0
    table.setflags(write=False)
    return table


class _Table:
    """The table, made at first use (~10 ms, 660 KB; one per process). A subclass with its own
    ``lock``, ``value`` and ``build`` keeps another table the same way."""

    lock = threading.Lock()
    value: np.ndarray | None = None
    build = staticmethod(_build_table)

    @classmethod
    def get(cls) -> np.ndarray:
        if cls.value is None:
            with cls.lock:
                if cls.value is None:
                    cls.value = cls.build()
        return cls.value


#: the clip's bounds (the guards' centers) and M: ``x + M`` rounds ``x`` to a multiple of 1 / K
#: (the spacing of floats in ``M``'s binade), and its pattern less ``1.5 * 2^52 / K``'s is the row
_CLIP_LOW = scalar_array((_FIRST - 1) / _K)
_CLIP_HIGH = scalar_array((_LAST + 1) / _K)
_SHIFT = scalar_array(1.5 * 2.0 ** 52 / _K - (_FIRST - 1) / _K)
_BASE_BITS = scalar_array(1.5 * 2.0 ** 52 / _K).view(np.int64)


class _GeluBuffers:
    """A size's buffers for :func:`gelu_table_into`: ``x``, ``work`` (the clipped ``x``, then the
    result), ``s`` (and its int64 view), ``r``, the row index, the gathered rows and their columns:
    72 bytes a value. Kept per thread and size: making them cost ~3 us a call, a
    third of a GELU of 960 values."""

    __slots__ = ("x", "work", "s", "bits", "r", "index", "rows", "columns")

    def __init__(self, n: int):
        self.x, self.work, self.s, self.r = (np.empty(n) for _ in range(4))
        self.rows = np.empty((n, 4))
        self.columns = tuple(self.rows[:, k] for k in range(4))
        self.bits = self.s.view(np.int64)
        self.index = np.empty(n, np.intp)


class _GeluKept(threading.local):
    def __init__(self):
        self.sizes: dict[int, _GeluBuffers] = {}


_GELU_KEPT = _GeluKept()


def kept_buffers(sizes: dict, n: int, make, most_sizes: int, most_values: int):
    """``sizes[n]`` (a thread's buffers for ``n`` values), made by ``make(n)`` on first use; the
    oldest sizes go while more than ``most_sizes`` sizes or ``most_values`` values would be kept."""
    kept = sizes.get(n)
    if kept is None:
        while sizes and (len(sizes) >= most_sizes or n + sum(sizes) > most_values):
            del sizes[next(iter(sizes))]
        kept = sizes[n] = make(n)
    return kept


def _gelu_buffers(n: int) -> _GeluBuffers:
    """This thread's buffers for ``n`` values (at most ``_GELU_SIZES_KEPT`` sizes and
    ``_GELU_KEPT_VALUES`` values kept, ~1 MB)."""
    return kept_buffers(_GELU_KEPT.sizes, n, _GeluBuffers, _GELU_SIZES_KEPT, _GELU_KEPT_VALUES)


def gelu_table_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x * Phi(x)`` (exact GELU) for a float ``x`` of ``out``'s shape, evaluated in float64
    from the table and rounded once (module docstring); ``out`` may be ``x``. Every call has one
    dtype (a ufunc that casts an operand runs a buffered loop, 0.5-1 us more) and ``out``
    positional (a keyword costs ~0.1 us)."""
    flat = x.reshape(-1)
    _evaluate(_Table.get(), flat, out.reshape(-1) if out.flags.c_contiguous else out, _gelu_buffers(flat.size))


def _evaluate(table: np.ndarray, flat: np.ndarray, target: np.ndarray, kept: _GeluBuffers) -> None:
    """The 15 calls: ``target`` (flat, or ``out`` itself when it is not C-contiguous) from the flat
    ``x`` with ``kept``'s buffers for its size."""
    x64, work, s, r = kept.x, kept.work, kept.s, kept.r
    c0, c1, c2, c3 = kept.columns
    multiply, add = np.multiply, np.add
    with quiet():
        x64[...] = flat
        CLIP(x64, _CLIP_LOW, _CLIP_HIGH, work)      # (NaN stays NaN: its row is whatever, r NaN)
        add(work, _SHIFT, s)                        # rounded to the grid
        np.subtract(s, _SHIFT, r)                   # exact: the center i / K
        np.subtract(work, r, r)                     # exact: r = x - i / K, |r| <= 1 / 2K
        np.subtract(kept.bits, _BASE_BITS, kept.index)  # the row (an intp index: take converts no other)
        table.take(kept.index, 0, kept.rows, "clip")    # ("clip": a NaN's bits give row 0 or the last)
        multiply(c3, r, work)
        add(work, c2, work)
        multiply(work, r, work)
        add(work, c1, work)
        multiply(work, r, work)
        add(work, c0, work)                         # Phi(x)
        multiply(work, x64, work)                   # -0.0 * Phi(0) stays -0.0
        np.copyto(target, work if target.ndim == 1 else work.reshape(target.shape), casting="unsafe")  # rounded once
