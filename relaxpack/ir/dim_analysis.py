"""Range reasoning over symbolic dims: bounds, proofs and simplification.

Every variable has a range ``[lo, hi]`` (``hi`` may be ``None``: unbounded);
variables without a declared range are dims, ``[0, None]``. Bounds come from
sound interval arithmetic over the canonical form, so a proof that succeeds
holds for every assignment within the ranges; a failed proof only means
"could not prove".

    >>> from relaxpack.ir.dims import dim_min, sym
    >>> seq = sym("seq")
    >>> ana = DimAnalyzer({"seq": (1, 512)})
    >>> ana.prove_le(seq, 512), ana.simplify(dim_min(seq, 1024)), ana.upper_bound(seq // 2)
    (True, DimExpr('seq'), 256)
"""

from __future__ import annotations

import math
from typing import Mapping

from ..errors import DimError
from .dim_algebra import (  # the canonical form: bounds come from its interval arithmetic
    Dim, FloorDiv, Max, Min, Mod, Sym, atom_dim, dim_max, dim_min, fold, free_vars, interval, is_static,
    normalize, sym,
)
from .dim_relations import decide_equal

__all__ = ["DimAnalyzer"]


class DimAnalyzer:
    """Bounds, proofs and simplification of dims under variable ranges.

    >>> ana = DimAnalyzer({"n": (1, 8)})
    >>> ana.lower_bound(sym("n") * 2 - 1), ana.prove_gt(sym("n"), 0)
    (1, True)
    """

    def __init__(self, ranges: Mapping[str, tuple[int, int | None]] | None = None):
        self._ranges: dict[str, tuple[int, int | None]] = {}
        self._decided: dict[tuple, bool | None] = {}
        for name, (lo, hi) in (ranges or {}).items():
            self.set_range(name, lo, hi)

    def set_range(self, name: str, lo: int, hi: int | None = None) -> None:
        """Declare ``lo <= name <= hi`` (``hi=None``: no upper bound)."""
        sym(name)  # validates the name
        if not is_static(lo) or not (hi is None or is_static(hi)):
            raise DimError(f"the range of {name!r} must be ints, got [{lo!r}, {hi!r}]")
        if hi is not None and lo > hi:
            raise DimError(f"empty range for {name!r}: {lo} > {hi}")
        self._ranges[name] = (int(lo), None if hi is None else int(hi))
        self._decided.clear()

    def range_of(self, name: str) -> tuple[int, int | None]:
        """The declared range of ``name``, ``(0, None)`` if none was declared."""
        return self._ranges.get(name, (0, None))

    def _var_interval(self, name: str):
        lo, hi = self.range_of(name)
        return lo, math.inf if hi is None else hi

    def _bounds(self, x) -> tuple:
        """Interval of ``x``, intersected with that of its simplified form."""
        x = normalize(x)
        lo, hi = interval(x, self._var_interval)
        s = self.simplify(x)
        if s != x:
            slo, shi = interval(s, self._var_interval)
            lo, hi = max(lo, slo), min(hi, shi)
        return lo, hi

    def lower_bound(self, x) -> int | None:
        """A lower bound of ``x`` over the ranges, ``None`` if unbounded or unknown."""
        lo = self._bounds(x)[0]
        return None if math.isinf(lo) else lo

    def upper_bound(self, x) -> int | None:
        """An upper bound of ``x`` over the ranges, ``None`` if unbounded or unknown."""
        hi = self._bounds(x)[1]
        return None if math.isinf(hi) else hi

    def prove_equal(self, a, b) -> bool:
        """Whether ``a == b`` for every value within the ranges."""
        if a is b or (type(a) is type(b) and a == b):     # canonical forms: equal is proved
            return True
        d = normalize(a) - normalize(b)
        return d == 0 or self._bounds(d) == (0, 0) or self._decide_zero(d) is True

    def prove_not_equal(self, a, b) -> bool:
        """Whether ``a != b`` for every value within the ranges.

        >>> DimAnalyzer({"h": (4, 7)}).prove_not_equal(2 * (sym("h") // 8), sym("h") // 4)
        True
        """
        d = normalize(a) - normalize(b)
        if is_static(d):
            return d != 0
        lo, hi = self._bounds(d)
        return lo > 0 or hi < 0 or self._decide_zero(d) is False

    def _decide_zero(self, d) -> bool | None:
        """Exactly whether ``d == 0`` always / never, for a difference over
        one variable (dim_relations.py); cached, since imports ask often."""
        if is_static(d):
            return d == 0
        key = (d, tuple(sorted((n, self.range_of(n)) for n in free_vars(d))))
        if key not in self._decided:
            self._decided[key] = decide_equal(d, 0, {n: r for n, r in key[1]})
        return self._decided[key]

    def prove_nonneg(self, x) -> bool:
        """Whether ``x >= 0`` for every value within the ranges."""
        return self._bounds(x)[0] >= 0

    def prove_ge(self, a, b) -> bool:
        """Whether ``a >= b`` for every value within the ranges."""
        return self.prove_nonneg(normalize(a) - normalize(b))

    def prove_gt(self, a, b) -> bool:
        """Whether ``a > b`` for every value within the ranges."""
        return self.prove_nonneg(normalize(a) - normalize(b) - 1)

    def prove_le(self, a, b) -> bool:
        """Whether ``a <= b`` for every value within the ranges."""
        return self.prove_ge(b, a)

    def prove_lt(self, a, b) -> bool:
        """Whether ``a < b`` for every value within the ranges."""
        return self.prove_gt(b, a)

    def trunc_div(self, a, c: int):
        """``a / c`` truncated toward zero (ONNX Div on ints) for a nonzero int ``c``, as a dim:
        floor division when ``a >= 0``; ``max(a, 0) // |c|`` (negated for ``c < 0``) when
        ``a > -|c|`` (the quotient of ``-|c| < a < 0`` is 0); None when ``a`` may be lower.

        >>> str(DimAnalyzer().trunc_div(sym("n") - 1, 2))
        'max(n - 1, 0) // 2'
        """
        k = abs(c)
        if self.prove_nonneg(a):
            q = a // k
        else:
            low = self.lower_bound(a)
            if low is None or low <= -k:
                return None
            q = dim_max(a, 0) // k
        return q if c > 0 else -q

    def simplify(self, x) -> Dim:
        """``x`` with min/max, ``//`` and ``%`` folded where the ranges decide them.

        >>> DimAnalyzer({"n": (0, 7)}).simplify(sym("n") // 8 + sym("n") % 8)
        DimExpr('n')
        """
        ops = {FloorDiv: self._floordiv, Mod: self._mod, Min: self._min, Max: self._max}
        return fold(normalize(x), lambda name: atom_dim(Sym(name)), ops)

    def _block(self, num: Dim, c: int) -> int | None:
        """``q`` if every value of ``num`` lies in ``[q*c, q*c + c - 1]``."""
        lo, hi = interval(num, self._var_interval)
        return lo // c if math.isfinite(lo) and math.isfinite(hi) and lo // c == hi // c else None

    def _floordiv(self, num: Dim, c: int) -> Dim:
        q = self._block(num, c)
        return num // c if q is None else q

    def _mod(self, num: Dim, c: int) -> Dim:
        q = self._block(num, c)
        return num % c if q is None else num - q * c

    def _le(self, a: Dim, b: Dim) -> bool:
        return interval(b - a, self._var_interval)[0] >= 0

    def _min(self, a: Dim, b: Dim) -> Dim:
        return a if self._le(a, b) else b if self._le(b, a) else dim_min(a, b)

    def _max(self, a: Dim, b: Dim) -> Dim:
        return b if self._le(a, b) else a if self._le(b, a) else dim_max(a, b)
