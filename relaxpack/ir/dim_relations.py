"""Equalities of dims over one variable: decided exactly, said in plain words.

Interval arithmetic (:class:`~relaxpack.ir.dim_analysis.DimAnalyzer`) cannot
see that ``2 * (h // 8) == h // 4`` holds exactly when ``h % 8 < 4``, or
that it fails for every ``h`` in ``4..7``. Over a single variable both
questions have exact answers:

- a bounded range of at most :data:`ENUMERATE_LIMIT` values is enumerated;
- otherwise, when the difference has no ``min``/``max``, it is a
  quasi-polynomial: with ``h = P*q + r`` (``P`` a common period of its
  ``//`` and ``%`` terms) it is, for each residue ``r``, a polynomial in ``q`` of the
  degree of ``h`` in it, so ``degree + 1`` values of ``q`` decide whether it
  is zero for every ``q``, for none, or for some.

>>> from relaxpack.ir.dims import sym
>>> h = sym("h")
>>> describe_equal(2 * (h // 8), h // 4), decide_equal(2 * (h // 8), h // 4, {"h": (4, 7)})
('h % 8 < 4', False)
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from .dim_algebra import (  # the canonical form: this module reads it
    Dim, DimExpr, FloorDiv, Max, Min, Mod, Sym, free_vars, normalize, single_atom,
)
from .dim_text import format_dim

#: A bounded range of at most this many values is decided by enumeration.
ENUMERATE_LIMIT = 1024
#: Residue analysis gives up on a period larger than this.
PERIOD_LIMIT = 4096

Ranges = Mapping[str, tuple[int, int | None]]


def decide_equal(a, b, ranges: Ranges | None = None) -> bool | None:
    """``True`` when ``a == b`` for every value in the ranges (a variable
    without one ranges over ``0..``), ``False`` when for none, ``None`` when
    it depends on the value or the question is out of this module's reach
    (several variables, a large period).

    >>> from relaxpack.ir.dims import sym
    >>> decide_equal(sym("n") % 4, 0, {"n": (0, 3)}), decide_equal(sym("n") % 4, 0, {"n": (0, 4)})
    (None, None)
    """
    diff = normalize(a) - normalize(b)
    if isinstance(diff, int):
        return diff == 0
    names = free_vars(diff)
    if len(names) != 1:
        return None
    (name,) = names
    lo, hi = (ranges or {}).get(name, (0, None))
    fn = compile_dim(diff)
    if hi is not None and hi - lo + 1 <= ENUMERATE_LIMIT:
        zeros = [fn({name: v}) == 0 for v in range(lo, hi + 1)]
        return True if all(zeros) else False if not any(zeros) else None
    classes = _residue_classes(diff, name, lo)
    if classes is None:
        return None
    period, always, never = classes
    if hi is not None and hi - lo + 1 < period:      # only some residues occur: enumerate them
        return None
    if len(always) == period:
        return True
    if len(never) == period:
        return False
    return None


def describe_equal(a, b) -> str:
    """``a == b`` in the plainest words this module finds: ``"seq <= 512"``
    for ``min(seq, 512) == seq``, ``"h % 8 < 4"`` for ``2 * (h // 8) == h // 4``,
    else the equality itself."""
    a, b = normalize(a), normalize(b)
    plain = f"{format_dim(a)} == {format_dim(b)}"
    bound = _min_max_bound(a, b) or _min_max_bound(b, a)
    if bound is not None:
        return bound
    diff = a - b
    names = free_vars(diff) if not isinstance(diff, int) else frozenset()
    if len(names) != 1:
        return plain
    (name,) = names
    classes = _residue_classes(diff, name, 0)
    if classes is None:
        return plain
    period, always, never = classes
    if len(always) + len(never) != period or not always or not never:
        return plain
    period, always = _smallest_period(period, always)
    return _residue_words(name, period, always)


# ---------------------------------------------------------------- plain words


def _min_max_bound(a: Dim, b: Dim) -> str | None:
    """``min(x, c) == x`` is ``x <= c``; ``max(x, c) == x`` is ``x >= c``."""
    atom = single_atom(a) if isinstance(a, DimExpr) else None
    if not isinstance(atom, (Min, Max)):
        return None
    for this, that in ((atom.a, atom.b), (atom.b, atom.a)):
        if normalize(this) == b:
            return f"{format_dim(b)} {'<=' if isinstance(atom, Min) else '>='} {format_dim(that)}"
    return None


def _smallest_period(period: int, members: frozenset[int]) -> tuple[int, frozenset[int]]:
    """The smallest divisor ``p`` of ``period`` for which membership depends on ``r % p`` only."""
    for p in range(1, period + 1):
        if period % p == 0 and all((r in members) == (r % p in members) for r in range(period)):
            return p, frozenset(r for r in members if r < p)
    return period, members


def _residue_words(name: str, period: int, members: frozenset[int]) -> str:
    ordered = sorted(members)
    if len(ordered) == 1:
        return f"{name} % {period} == {ordered[0]}"
    if ordered == list(range(len(ordered))):
        return f"{name} % {period} < {len(ordered)}"
    if ordered == list(range(ordered[0], period)):
        return f"{name} % {period} >= {ordered[0]}"
    return f"{name} % {period} in {{{', '.join(_runs(ordered))}}}"


def _runs(ordered: list[int]) -> list[str]:
    """Sorted residues with each run of three or more written ``a..b``: ``0, 17..31``."""
    parts, start = [], 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            run = ordered[start:i]
            parts += [f"{run[0]}..{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
            start = i
    return parts


# ---------------------------------------------------------------- residues


def _residue_classes(diff: Dim, name: str, lo: int) -> tuple[int, frozenset[int], frozenset[int]] | None:
    """``(P, residues where diff is 0 for every q, residues where it never is)``
    with the variable ``P*q + r`` (``q`` from ``lo``'s block on); None when
    the difference has min/max or its period is too large."""
    parts = _period_and_degree(diff, name)
    if parts is None:
        return None
    period, degree = parts
    if period > PERIOD_LIMIT:
        return None
    fn = compile_dim(diff)
    start = (max(lo, 0) + period - 1) // period     # whole periods within the range
    always, never = set(), set()
    for r in range(period):
        values = [fn({name: period * (start + q) + r}) for q in range(degree + 2)]
        if all(v == 0 for v in values):
            always.add(r)
        elif len(set(values)) == 1:                  # a polynomial constant at degree + 1 points
            never.add(r)
    return period, frozenset(always), frozenset(never)


def _period_and_degree(x: Dim, name: str) -> tuple[int, int] | None:
    """A period ``P`` such that with ``name = P*q + r`` every atom of ``x`` is a
    polynomial in ``q`` (``num // c`` needs ``c`` times the period of
    ``num``), and the degree of ``name`` in ``x``; None if ``x`` has min/max."""
    if isinstance(x, int):
        return 1, 0
    period, degree = 1, 0
    for mono, _ in x.terms:
        mono_degree = 0
        for atom, power in mono:
            if isinstance(atom, Sym):
                inner = 1 if atom.name == name else 0
            elif isinstance(atom, (FloorDiv, Mod)):
                sub = _period_and_degree(atom.num, name)
                if sub is None or sub[0] * atom.c > PERIOD_LIMIT:
                    return None
                period = math.lcm(period, sub[0] * atom.c)
                inner = sub[1]
            else:
                return None
            mono_degree += inner * power
        degree = max(degree, mono_degree)
    return period, degree


def compile_dim(x: Dim) -> Callable[[Mapping[str, int]], int]:
    """A closure computing ``x`` from variable values (Python ints, exact)."""
    x = normalize(x)
    if isinstance(x, int):
        return lambda env, v=x: v
    terms = [(k, [(_compile_atom(atom), p) for atom, p in mono]) for mono, k in x.terms]
    const = x.const

    def value(env):
        total = const
        for k, factors in terms:
            term = k
            for fn, p in factors:
                term *= fn(env) ** p
            total += term
        return total
    return value


def _compile_atom(atom) -> Callable[[Mapping[str, int]], int]:
    if isinstance(atom, Sym):
        return lambda env, n=atom.name: env[n]
    if isinstance(atom, (FloorDiv, Mod)):
        num, c = compile_dim(atom.num), atom.c
        if isinstance(atom, FloorDiv):
            return lambda env: num(env) // c
        return lambda env: num(env) % c
    fa, fb = compile_dim(atom.a), compile_dim(atom.b)
    pick = min if isinstance(atom, Min) else max
    return lambda env: pick(fa(env), fb(env))


__all__ = ["ENUMERATE_LIMIT", "PERIOD_LIMIT", "compile_dim", "decide_equal", "describe_equal"]
