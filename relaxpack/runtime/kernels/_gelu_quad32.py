"""The float32 GELU (every size): ``x * Phi(x)`` in float32 from a table of quadratics.

The small path's grid (:mod:`._gelu_table`: intervals of width ``1 / K`` on [-14.5, 6], guard
rows 0 and 1 past the ends, the row found from ``x + M``'s bit pattern), with a quadratic in
``r = x - c`` per interval interpolating ``Phi`` at its three Chebyshev nodes, stored in float32
as ``(p, c0 - p, c1, c2)`` with ``p`` the power of two nearest ``c0``: a 16-byte row, one copy per
value in ``take``. Before rounding the quadratic is within ``|x|^3 5e-12`` of ``Phi`` relative.
The result is ``x p + x (Phi - p)``: ``x p`` is exact and ``|Phi - p| <= 0.42 p`` carries the
rounding errors of the float32 Horner steps only at its own (smaller) scale, so the sum is within
1.4 ulp of the exact GELU for x >= -10 (measured 1.36 on every 61st float32), 3.5 on [-13, -10)
and 15 subnormal spacings past -13, where ``x p`` is subnormal too (results below 1e-37). Past the
ends ``Phi - p`` is 0 and multiplies the clipped ``x``: inf gives inf, -inf NaN (``-inf * 0``).

13 float32 calls per chunk of up to ``CHUNK`` values (clip, ``x + M``, the center, ``r``, the row,
``take``, Horner's four on the gathered columns, ``x *`` twice, the sum): 0.64-0.85x the time of
the ~40-call float32 fit it replaced at 7k-200k values, 0.74-0.9x the float64 table's 15 calls
below 6144 values, which float32 no longer takes (docs/design-notes.md, "The float32 GELU's
contract"). Chunks keep the buffers (36 bytes a value) and the 336 KB table near the cache.
"""

from __future__ import annotations

import sys
import threading
from threading import get_ident

import numpy as np

from ..fpstate import IGNORING, quiet, state_now
from ._gelu_table import _FIRST, _K, _LAST, _Table, _build_table, kept_buffers
from ._math import CLIP, scalar_array

#: values per chunk (measured: 16384-32768 fastest at 8k-100k values; 4096 as slow as the old fit)
CHUNK = 1 << 15
#: sizes, and values over all sizes, whose buffers a thread keeps (~2.4 MB at most; 8 sizes since
#: small arrays come here too: a model's GELUs of several sizes, a chunk and a tail)
_SIZES_KEPT, _KEPT_VALUES = 8, 2 * CHUNK


def _build_table32() -> np.ndarray:
    """``(rows, 4)`` float32: the power of two ``p`` nearest the quadratic's ``c0`` (0 for the guard
    0), then ``c0 - p``, ``c1``, ``c2`` (guards 0 and 1 as in the float64 table)."""
    quadratics = _build_table(degree=2)
    c0 = quadratics[:, 0]
    table = np.zeros((c0.size, 4), np.float32)
    positive = c0 > 0
    table[positive, 0] = np.exp2(np.round(np.log2(c0[positive])))
    table[:, 1] = c0 - table[:, 0]
    table[:, 2:] = quadratics[:, 1:]
    table.setflags(write=False)
    return table


class _Table32(_Table):
    """The float32 table, made at first use (~8 ms, 336 KB; one per process)."""

    lock = threading.Lock()
    value = None
    build = staticmethod(_build_table32)


#: ``M = 1.5 * 2^23 / K`` has float32 spacing ``1 / K``: ``x + M`` rounds ``x`` to the grid and
#: its pattern less ``M``'s is the row once ``M`` is shifted by the first row's center
_M = 1.5 * 2.0 ** 23 / _K
_CLIP_LOW = scalar_array((_FIRST - 1) / _K, np.float32)
_CLIP_HIGH = scalar_array((_LAST + 1) / _K, np.float32)
_SHIFT = scalar_array(_M - (_FIRST - 1) / _K, np.float32)
_BASE_BITS = scalar_array(_M, np.float32).view(np.int32)
assert float(_SHIFT) == _M - (_FIRST - 1) / _K and _M + (_LAST + 1) / _K - (_FIRST - 1) / _K < 2 * _M


#: up to this many values the row is written as int32 into the low halves of the zeroed intp index
#: (a strided int32 subtract: 0.53 / 0.81 us at 480 / 960 values, where the subtract converting into
#: intp takes 1.08 / 1.24; 2.25 against 2.01 at 4096)
LOW_WORDS_MAX = 2048


class _Buffers:
    """A size's buffers: ``work``, ``s`` (and its int32 view), ``r``, the row index and the
    gathered rows' columns (36 bytes a value). ``low``: up to :data:`LOW_WORDS_MAX` values (a 64-bit
    intp), the index's low int32 halves, its high halves zero (a row is never negative but a NaN's,
    whose row is any: its result is NaN from ``x p``), else None."""

    __slots__ = ("work", "s", "bits", "r", "index", "low", "rows", "columns")

    def __init__(self, n: int):
        self.work, self.s, self.r = (np.empty(n, np.float32) for _ in range(3))
        self.bits = self.s.view(np.int32)
        self.index = np.zeros(n, np.intp)
        self.low = self.index.view(np.int32)[0 if sys.byteorder == "little" else 1::2] \
            if n <= LOW_WORDS_MAX and self.index.itemsize == 8 else None
        self.rows = np.empty((n, 4), np.float32)
        self.columns = tuple(self.rows[:, k] for k in range(4))


class _Kept(threading.local):
    def __init__(self):
        self.sizes: dict[int, _Buffers] = {}


_KEPT = _Kept()


def gelu_quad32_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x * Phi(x)`` (exact GELU) for float32 ``x`` and ``out`` of one shape, in chunks of
    up to ``CHUNK`` values (module docstring); ``out`` may be ``x``. A non-contiguous ``x`` is
    copied, a non-contiguous ``out`` written through a copy."""
    table = _Table32.get()
    flat = np.ascontiguousarray(x).reshape(-1)
    direct = out.flags.c_contiguous
    result = out.reshape(-1) if direct else np.empty(flat.size, np.float32)
    whole = flat.size - flat.size % CHUNK
    with quiet():
        if whole:
            buffers = kept_buffers(_KEPT.sizes, CHUNK, _Buffers, _SIZES_KEPT, _KEPT_VALUES)
            for start in range(0, whole, CHUNK):
                _chunk(table, flat[start:start + CHUNK], result[start:start + CHUNK], buffers)
        if whole < flat.size:
            buffers = kept_buffers(_KEPT.sizes, flat.size - whole, _Buffers, _SIZES_KEPT, _KEPT_VALUES)
            _chunk(table, flat[whole:], result[whole:], buffers)
    if not direct:
        np.copyto(out, result.reshape(out.shape))


def gelu_quad32_bound(x: np.ndarray, out: np.ndarray):
    """``run()``: :func:`gelu_quad32_into` ``(x, out)`` for two C-contiguous float32 arrays of one
    size, at most ``CHUNK`` values: one chunk, its calls bound to the flat views, the table and the
    thread's buffers (:func:`_bound_chunk`), made again only when another thread runs it; inside a
    VM run (floating-point errors ignored already) without :func:`quiet`'s ``with``. The same
    calls, bit for bit (~0.5 us less a call than :func:`_chunk` with its look-ups and the ``with``)."""
    flat, target = x.reshape(-1), out.reshape(-1)
    table, n = _Table32.get(), flat.size
    mine = [None, None]         # the thread that ran it last, the chunk bound to its buffers

    def run() -> None:
        ident = get_ident()
        if ident != mine[0]:
            mine[:] = ident, _bound_chunk(table, flat, target,
                                          kept_buffers(_KEPT.sizes, n, _Buffers, _SIZES_KEPT, _KEPT_VALUES))
        if state_now() is IGNORING:
            mine[1]()
        else:
            with quiet():
                mine[1]()
    return run


def _chunk(table: np.ndarray, x: np.ndarray, out: np.ndarray, kept: _Buffers) -> None:
    """The 13 calls on one chunk: 1-D ``x`` and ``out`` of ``kept``'s size, each call of one dtype
    but the row's (int32 less int32 into intp) and ``out`` positional. :func:`_bound_chunk` makes
    the same calls with its operands bound (making that closure costs ~1 us: more than its look-ups
    save on a call made once; tests/runtime/test_gelu_per_output.py holds the two to the same bits)."""
    work, s, r = kept.work, kept.s, kept.r
    power, c0, c1, c2 = kept.columns
    multiply, add = np.multiply, np.add
    CLIP(x, _CLIP_LOW, _CLIP_HIGH, work)            # (NaN stays NaN: its row is whatever, r NaN)
    add(work, _SHIFT, s)                            # rounded to the grid
    np.subtract(s, _SHIFT, r)                       # exact: the center i / K
    np.subtract(work, r, r)                         # exact: r = x - i / K, |r| <= 1 / 2K
    if kept.low is not None:
        np.subtract(kept.bits, _BASE_BITS, kept.low)                   # the row, as int32 into intp
    else:
        np.subtract(kept.bits, _BASE_BITS, kept.index, casting="unsafe")   # the row
    table.take(kept.index, 0, kept.rows, "clip")    # ("clip": a NaN's bits give row 0 or the last)
    multiply(c2, r, s)
    add(s, c1, s)
    multiply(s, r, s)
    add(s, c0, s)                                   # Phi(x) - p
    multiply(s, work, s)                            # times the clipped x: 0 past the ends, not NaN
    multiply(x, power, work)                        # exact but in the subnormal tail
    add(work, s, out)                               # x p + x (Phi - p), rounded once more


def _bound_chunk(table: np.ndarray, x: np.ndarray, out: np.ndarray, kept: _Buffers):
    """``chunk()``: :func:`_chunk`'s 13 calls on these arrays, every operand and ufunc bound (a bound
    GELU's, called run after run: no attribute or global look-ups per call)."""
    work, s, r, bits, index, low_words, rows = kept.work, kept.s, kept.r, kept.bits, kept.index, kept.low, \
        kept.rows
    power, c0, c1, c2 = kept.columns
    multiply, add, subtract, take, clip = np.multiply, np.add, np.subtract, table.take, CLIP
    low, high, shift, base = _CLIP_LOW, _CLIP_HIGH, _SHIFT, _BASE_BITS

    def chunk() -> None:
        clip(x, low, high, work)
        add(work, shift, s)
        subtract(s, shift, r)
        subtract(work, r, r)
        if low_words is not None:
            subtract(bits, base, low_words)
        else:
            subtract(bits, base, index, casting="unsafe")
        take(index, 0, rows, "clip")
        multiply(c2, r, s)
        add(s, c1, s)
        multiply(s, r, s)
        add(s, c0, s)
        multiply(s, work, s)
        multiply(x, power, work)
        add(work, s, out)
    return chunk
