"""Symbolic dims, the algebra: canonical polynomials over a closed set of atoms.

A dim is a plain ``int`` or a :class:`DimExpr`, an immutable integer
polynomial over *atoms*: named variables (:class:`Sym`) and the opaque terms
``a // c`` (:class:`FloorDiv`), ``a % c`` (:class:`Mod`, ``c`` a positive
constant), ``min(a, b)`` and ``max(a, b)`` (:class:`Min`, :class:`Max`).
Every operation returns a normalized dim -- an ``int`` when the value is
constant -- so algebraically equal polynomials compare and hash equal::

    >>> n = sym("n")
    >>> 2 * n + n == 3 * n and (n + 1) * (n + 1) == n * n + 2 * n + 1
    True

The canonical form is public to the modules that read it: the text
(:mod:`~relaxpack.ir.dim_text`), range analysis
(:mod:`~relaxpack.ir.dim_analysis`) and exact relations
(:mod:`~relaxpack.ir.dim_relations`). Everyone else imports
:mod:`relaxpack.ir.dims`.
"""

from __future__ import annotations

import keyword
import math
import numbers
import operator
import unicodedata
from dataclasses import dataclass, field
from functools import reduce
from typing import Callable, Mapping

from ..errors import DimError

__all__ = [
    # the algebra
    "Dim", "DimExpr", "dim_max", "dim_min", "evaluate", "free_vars", "is_static", "normalize", "substitute",
    "sym",
    # the canonical form, for the text, range analysis and relations
    "Atom", "FloorDiv", "Max", "Min", "Mod", "Sym", "atom_dim", "check_divisor", "fold", "interval",
    "single_atom",
]


def _text(x) -> str:
    # the text imports the algebra; printing (str, errors) reaches back here only when it prints
    from .dim_text import format_dim
    return format_dim(x)


# --- atoms -------------------------------------------------------------------
# Each atom has a sort key (a tuple comparable with any other atom's key);
# sorting by it makes monomials, polynomials and min/max argument order
# canonical and printing deterministic.

@dataclass(frozen=True, slots=True)
class Sym:
    name: str


@dataclass(frozen=True, slots=True)
class FloorDiv:
    num: DimExpr
    c: int


@dataclass(frozen=True, slots=True)
class Mod:
    num: DimExpr
    c: int


@dataclass(frozen=True, slots=True)
class Min:
    a: Dim
    b: Dim


@dataclass(frozen=True, slots=True)
class Max:
    a: Dim
    b: Dim


Atom = Sym | FloorDiv | Mod | Min | Max
Monomial = tuple  # tuple[tuple[Atom, int], ...], sorted by atom key


def _dim_key(d: Dim) -> tuple:
    return (0, d._key) if isinstance(d, DimExpr) else (1, d)


def _atom_key(atom: Atom) -> tuple:
    if isinstance(atom, Sym):
        return (0, atom.name)
    if isinstance(atom, (FloorDiv, Mod)):
        return (1 if isinstance(atom, FloorDiv) else 2, atom.num._key, atom.c)
    return (3 if isinstance(atom, Min) else 4, _dim_key(atom.a), _dim_key(atom.b))


def _mono_key(mono: Monomial) -> tuple:
    return tuple((_atom_key(a), p) for a, p in mono)


# --- the expression ------------------------------------------------------------

def _operator(fn: Callable[[DimExpr, Dim], Dim]):
    """A binary dunder method: ints (also numpy's) and dims in, else NotImplemented."""
    def method(self, other):
        other = _coerce(other)
        return NotImplemented if other is None else fn(self, other)
    return method


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class DimExpr:
    """A symbolic integer dim in canonical form; build it with :func:`sym`
    and the operators ``+ - * // % **``, :func:`dim_min`, :func:`dim_max`.

    ``terms`` pairs each monomial (a sorted tuple of ``(atom, power)``) with
    its nonzero coefficient, highest degree first; ``const`` is the constant.
    Never construct one directly: the constructor does not normalize.

    >>> n = sym("n")
    >>> (n + 1) // 2 * 2 - 1
    DimExpr('2 * ((n + 1) // 2) - 1')
    """

    terms: tuple
    const: int
    _key: tuple = field(init=False)
    _hash: int = field(init=False)

    # numpy scalars must defer to our reflected operators.
    __array_ufunc__ = None

    def __post_init__(self):
        key = (tuple((_mono_key(m), k) for m, k in self.terms), self.const)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __eq__(self, other):
        if not isinstance(other, DimExpr):
            return NotImplemented
        return self is other or (self._hash == other._hash and self._key == other._key)

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        # str hashes differ between processes: unpickling must recompute _hash
        return DimExpr, (self.terms, self.const)

    def __str__(self):
        return _text(self)

    def __repr__(self):
        return f"DimExpr({_text(self)!r})"

    __add__ = __radd__ = _operator(lambda a, b: _add(a, b))
    __sub__ = _operator(lambda a, b: _sub(a, b))
    __rsub__ = _operator(lambda a, b: _sub(b, a))
    __mul__ = __rmul__ = _operator(lambda a, b: _mul(a, b))
    __floordiv__ = _operator(lambda a, c: _floordiv(a, check_divisor(c, "//")))
    __mod__ = _operator(lambda a, c: _mod(a, check_divisor(c, "%")))
    __rfloordiv__ = _operator(lambda a, b: check_divisor(a, "//"))     # always raises
    __rmod__ = _operator(lambda a, b: check_divisor(a, "%"))
    __pow__ = _operator(lambda a, p: _power(a, p))

    def __neg__(self):
        return _scale(self, -1)

    def __pos__(self):
        return self


Dim = int | DimExpr
"""A dimension: a plain ``int`` or a symbolic :class:`DimExpr`."""


def _coerce(v) -> Dim | None:
    if isinstance(v, DimExpr):
        return v
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    return None


def check_divisor(c: Dim, op: str) -> int:
    if isinstance(c, DimExpr):
        raise DimError(f"cannot divide by the symbolic dim {_text(c)} ({op}): "
                       "only division by a positive integer constant is supported")
    if c <= 0:
        raise DimError(f"the divisor of {op} must be a positive integer, got {c}")
    return c


def atom_dim(atom: Atom) -> DimExpr:
    monomial = ((atom, 1),)
    return DimExpr(((monomial, 1),), 0)


def single_atom(e: DimExpr) -> Atom | None:
    """The atom when ``e`` is exactly one atom (coefficient 1, power 1)."""
    if e.const == 0 and len(e.terms) == 1:
        (mono, k), = e.terms
        if k == 1 and len(mono) == 1 and mono[0][1] == 1:
            return mono[0][0]
    return None


def _make(terms: dict, const: int) -> Dim:
    items = [(m, k) for m, k in terms.items() if k]
    if not items:
        return const
    items.sort(key=lambda mk: (-sum(p for _, p in mk[0]), _mono_key(mk[0])))  # by degree
    return DimExpr(tuple(items), const)


def _add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int):
        a, b = b, a
    terms = dict(a.terms)
    for m, k in () if isinstance(b, int) else b.terms:
        terms[m] = terms.get(m, 0) + k
    return _make(terms, a.const + (b if isinstance(b, int) else b.const))


def _sub(a: Dim, b: Dim) -> Dim:
    return _add(a, _scale(b, -1))


def _scale(a: Dim, k: int) -> Dim:
    if k == 0:
        return 0
    if isinstance(a, int):
        return a * k
    if k == 1:
        return a
    return DimExpr(tuple((m, c * k) for m, c in a.terms), a.const * k)


def _mono_mul(ma: Monomial, mb: Monomial) -> Monomial:
    powers = dict(ma)
    for atom, p in mb:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def _mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int):
        return _scale(b, a)
    if isinstance(b, int):
        return _scale(a, b)
    out: dict = {}
    for ma, ka in a.terms:
        for mb, kb in b.terms:
            m = _mono_mul(ma, mb)
            out[m] = out.get(m, 0) + ka * kb
        out[ma] = out.get(ma, 0) + ka * b.const
    for mb, kb in b.terms:
        out[mb] = out.get(mb, 0) + kb * a.const
    return _make(out, a.const * b.const)


def _power(x: Dim, p: Dim) -> Dim:
    if not isinstance(p, int) or p < 0:
        raise DimError(f"the exponent of ** must be a non-negative integer, got {_text(p)}")
    return x ** p if isinstance(x, int) else reduce(_mul, [x] * p, 1)


# Rewrites below hold for all integers (not only non-negative ones) and any
# positive divisor c: with q integer-valued, (c*q + r) // c == q + r // c,
# (c*q + r) % c == r % c, (g*y) // (g*d) == y // d, (g*y) % (g*d) == g*(y % d),
# (a // c1) // c2 == a // (c1*c2), and (a % c1) % c == a % c when c | c1.

def _floordiv(x: Dim, c: int) -> Dim:
    if isinstance(x, int):
        return x // c
    if c == 1:
        return x
    quotient = {m: k // c for m, k in x.terms if k % c == 0}
    rest = {m: k for m, k in x.terms if k % c}
    q0, r0 = divmod(x.const, c)
    whole = _make(quotient, q0)
    if not rest:
        return whole
    g = math.gcd(c, r0, *rest.values())
    if g > 1:
        rest, r0, c = {m: k // g for m, k in rest.items()}, r0 // g, c // g
    num = _make(rest, r0)
    lo, hi = interval(num, _unbounded)
    if math.isfinite(lo) and math.isfinite(hi) and lo // c == hi // c:
        return _add(whole, lo // c)
    inner = single_atom(num)
    if isinstance(inner, FloorDiv):
        return _add(whole, _floordiv(inner.num, inner.c * c))
    return _add(whole, atom_dim(FloorDiv(num, c)))


def _mod(x: Dim, c: int) -> Dim:
    if isinstance(x, int):
        return x % c
    if c == 1:
        return 0
    rest = {m: k % c for m, k in x.terms if k % c}
    r0 = x.const % c
    if not rest:
        return r0
    num = _make(rest, r0)
    if any(isinstance(a, Mod) and a.c % c == 0 for m in rest for a, _ in m):
        def unwrap(a):
            return a.num if isinstance(a, Mod) and a.c % c == 0 else atom_dim(a)
        return _mod(_rebuild(num, unwrap), c)
    g = math.gcd(c, r0, *rest.values())
    if g > 1:
        return _scale(_mod(_make({m: k // g for m, k in rest.items()}, r0 // g), c // g), g)
    lo, hi = interval(num, _unbounded)
    if math.isfinite(lo) and math.isfinite(hi) and lo // c == hi // c:
        return _add(num, -(lo // c) * c)
    return atom_dim(Mod(num, c))


def _min_max(a, b, is_min: bool) -> Dim:
    a, b = normalize(a), normalize(b)
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b) if is_min else max(a, b)
    lo, hi = interval(_sub(a, b), _unbounded)
    if hi <= 0:                      # a <= b for every value
        return a if is_min else b
    if lo >= 0:
        return b if is_min else a
    a, b = sorted((a, b), key=_dim_key)
    return atom_dim(Min(a, b) if is_min else Max(a, b))


def _rebuild(x: Dim, atom_fn: Callable[[Atom], Dim]) -> Dim:
    """``x`` with every atom replaced by ``atom_fn(atom)``, renormalized."""
    if isinstance(x, int):
        return x
    total: Dim = x.const
    for mono, k in x.terms:
        term: Dim = k
        for atom, p in mono:
            term = _mul(term, _power(atom_fn(atom), p))
        total = _add(total, term)
    return total


def fold(x: Dim, leaf: Callable[[str], Dim], ops: Mapping[type, Callable]) -> Dim:
    """Rebuild ``x`` bottom-up: each variable becomes ``leaf(name)`` and each
    other atom ``ops[type](num, c)`` or ``ops[type](a, b)`` of rebuilt children."""
    def atom_fn(atom):
        if isinstance(atom, Sym):
            return leaf(atom.name)
        if isinstance(atom, (FloorDiv, Mod)):
            return ops[type(atom)](_rebuild(atom.num, atom_fn), atom.c)
        return ops[type(atom)](_rebuild(atom.a, atom_fn), _rebuild(atom.b, atom_fn))
    return _rebuild(x, atom_fn)


_DIM_OPS = {FloorDiv: _floordiv, Mod: _mod, Min: lambda a, b: _min_max(a, b, True),
            Max: lambda a, b: _min_max(a, b, False)}
_INT_OPS = {FloorDiv: operator.floordiv, Mod: operator.mod, Min: min, Max: max}


# --- interval arithmetic ---------------------------------------------------------
# Bounds are ints or +-math.inf; they are sound for every assignment of the
# variables within var_range. Used with unbounded variables while building
# (so mod-bounded terms fold) and with ranges by DimAnalyzer.

def _unbounded(name: str) -> tuple[float, float]:
    return -math.inf, math.inf


def _mul_ext(x, y):
    if x == 0 or y == 0:             # endpoint convention: 0 * inf == 0
        return 0
    if math.isinf(x) or math.isinf(y):
        return math.inf if (x > 0) == (y > 0) else -math.inf
    return x * y


def _mul_interval(a, b, c, d):
    products = (_mul_ext(a, c), _mul_ext(a, d), _mul_ext(b, c), _mul_ext(b, d))
    return min(products), max(products)


def _pow_interval(lo, hi, p: int):
    if p % 2 or lo >= 0:
        return lo ** p, hi ** p
    if hi <= 0:
        return hi ** p, lo ** p
    return 0, max(-lo, hi) ** p


def _atom_interval(atom: Atom, var_range):
    if isinstance(atom, Sym):
        return var_range(atom.name)
    if isinstance(atom, (Min, Max)):
        (la, ha), (lb, hb) = interval(atom.a, var_range), interval(atom.b, var_range)
        pick = min if isinstance(atom, Min) else max
        return pick(la, lb), pick(ha, hb)
    lo, hi = interval(atom.num, var_range)
    c = atom.c
    if isinstance(atom, FloorDiv):
        return (lo if math.isinf(lo) else lo // c), (hi if math.isinf(hi) else hi // c)
    if math.isfinite(lo) and math.isfinite(hi) and lo // c == hi // c:
        return lo % c, hi % c
    return 0, (min(c - 1, hi) if lo >= 0 else c - 1)


def interval(x: Dim, var_range) -> tuple:
    if isinstance(x, int):
        return x, x
    lo = hi = x.const
    for mono, k in x.terms:
        mlo, mhi = k, k
        for atom, p in mono:
            alo, ahi = _pow_interval(*_atom_interval(atom, var_range), p)
            mlo, mhi = _mul_interval(mlo, mhi, alo, ahi)
        lo, hi = lo + mlo, hi + mhi
    return lo, hi


# --- public functions --------------------------------------------------------------

def sym(name: str) -> DimExpr:
    """The symbolic dim variable ``name`` (vars are identified by name).

    >>> sym("batch") == sym("batch")
    True
    """
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise DimError(f"a dim variable name must be a Python identifier, got {name!r}")
    # Python reads identifiers in NFKC form; so do we, or a name would not
    # survive printing and parsing
    return atom_dim(Sym(unicodedata.normalize("NFKC", name)))


def normalize(x) -> Dim:
    """``x`` as a dim: ints (also numpy integers) become ``int``, a
    :class:`DimExpr` is returned as is; bools and anything else are an error.

    >>> normalize(3), normalize(sym("n"))
    (3, DimExpr('n'))
    """
    if isinstance(x, DimExpr):
        return x
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    raise DimError(f"not a dim: {x!r} (expected an int or a DimExpr)")


def dim_min(a, b) -> Dim:
    """``min(a, b)``; folded when the order is the same for every value.

    >>> dim_min(sym("n"), sym("n") + 1)
    DimExpr('n')
    """
    return _min_max(a, b, is_min=True)


def dim_max(a, b) -> Dim:
    """``max(a, b)``; folded when the order is the same for every value."""
    return _min_max(a, b, is_min=False)


def is_static(x) -> bool:
    """Whether ``x`` is a known integer (not symbolic)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def free_vars(x) -> frozenset[str]:
    """The names of the variables ``x`` uses: ``free_vars(n * m + 1) == {"n", "m"}``."""
    names: set[str] = set()
    stack = [normalize(x)]
    while stack:
        e = stack.pop()
        if isinstance(e, int):
            continue
        for mono, _ in e.terms:
            for atom, _ in mono:
                if isinstance(atom, Sym):
                    names.add(atom.name)
                elif isinstance(atom, (FloorDiv, Mod)):
                    stack.append(atom.num)
                else:
                    stack.extend((atom.a, atom.b))
    return frozenset(names)


def substitute(x, mapping: Mapping[str, Dim]) -> Dim:
    """``x`` with each variable named in ``mapping`` replaced, renormalized.

    >>> substitute(sym("n") * 2 + 1, {"n": 3}), substitute(sym("n") // 2, {"n": sym("m") * 4})
    (7, DimExpr('2 * m'))
    """
    values = {name: normalize(v) for name, v in mapping.items()}
    return fold(normalize(x), lambda name: values.get(name, atom_dim(Sym(name))), _DIM_OPS)


def evaluate(x, env: Mapping[str, int]) -> int:
    """The value of ``x`` when each variable takes its value from ``env``.

    >>> evaluate((sym("n") + 1) // 2, {"n": 6})
    3
    """
    x = normalize(x)

    def value(name):
        if name not in env:
            raise DimError(f"cannot evaluate {_text(x)}: no value for {name!r}")
        if not is_static(env[name]):
            raise DimError(f"the value of {name!r} must be an int, got {env[name]!r}")
        return int(env[name])

    return fold(x, value, _INT_OPS)
