"""Symbolic dimensions: a small closed algebra with canonical forms.

A dim is a plain ``int`` or a :class:`DimExpr`, an immutable integer
polynomial over *atoms*: named variables and the opaque terms ``a // c``,
``a % c`` (``c`` a positive constant), ``min(a, b)`` and ``max(a, b)``.
Every operation returns a normalized dim -- an ``int`` when the value is
constant -- so algebraically equal polynomials compare and hash equal::

    >>> n, m = sym("n"), sym("m")
    >>> 2 * n + n == 3 * n and (n + 1) * (n + 1) == n * n + 2 * n + 1
    True
    >>> n - n, format_dim((4 * n + 2) // 2), format_dim(dim_min(n, 16) * m)
    (0, '2 * n + 1', 'm * min(n, 16)')

Rewrites applied while building hold for *every* integer value of the
variables; reasoning with ranges (``1 <= seq <= 512``) lives in
:class:`DimAnalyzer` (module :mod:`relaxpack.ir.dim_analysis`).
"""

from __future__ import annotations

import ast
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
    "Dim", "DimAnalyzer", "DimExpr", "dim_max", "dim_min", "evaluate", "format_dim", "free_vars",
    "from_ast", "is_static", "normalize", "parse_dim", "substitute", "sym",
]


# --- atoms -------------------------------------------------------------------
# Each atom has a sort key (a tuple comparable with any other atom's key);
# sorting by it makes monomials, polynomials and min/max argument order
# canonical and printing deterministic.

@dataclass(frozen=True, slots=True)
class _Sym:
    name: str


@dataclass(frozen=True, slots=True)
class _FloorDiv:
    num: DimExpr
    c: int


@dataclass(frozen=True, slots=True)
class _Mod:
    num: DimExpr
    c: int


@dataclass(frozen=True, slots=True)
class _Min:
    a: Dim
    b: Dim


@dataclass(frozen=True, slots=True)
class _Max:
    a: Dim
    b: Dim


_Atom = _Sym | _FloorDiv | _Mod | _Min | _Max
_Monomial = tuple  # tuple[tuple[_Atom, int], ...], sorted by atom key


def _dim_key(d: Dim) -> tuple:
    return (0, d._key) if isinstance(d, DimExpr) else (1, d)


def _atom_key(atom: _Atom) -> tuple:
    if isinstance(atom, _Sym):
        return (0, atom.name)
    if isinstance(atom, (_FloorDiv, _Mod)):
        return (1 if isinstance(atom, _FloorDiv) else 2, atom.num._key, atom.c)
    return (3 if isinstance(atom, _Min) else 4, _dim_key(atom.a), _dim_key(atom.b))


def _mono_key(mono: _Monomial) -> tuple:
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
        return format_dim(self)

    def __repr__(self):
        return f"DimExpr({format_dim(self)!r})"

    __add__ = __radd__ = _operator(lambda a, b: _add(a, b))
    __sub__ = _operator(lambda a, b: _sub(a, b))
    __rsub__ = _operator(lambda a, b: _sub(b, a))
    __mul__ = __rmul__ = _operator(lambda a, b: _mul(a, b))
    __floordiv__ = _operator(lambda a, c: _floordiv(a, _divisor(c, "//")))
    __mod__ = _operator(lambda a, c: _mod(a, _divisor(c, "%")))
    __rfloordiv__ = _operator(lambda a, b: _divisor(a, "//"))     # always raises
    __rmod__ = _operator(lambda a, b: _divisor(a, "%"))
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


def _divisor(c: Dim, op: str) -> int:
    if isinstance(c, DimExpr):
        raise DimError(f"cannot divide by the symbolic dim {format_dim(c)} ({op}): "
                       "only division by a positive integer constant is supported")
    if c <= 0:
        raise DimError(f"the divisor of {op} must be a positive integer, got {c}")
    return c


def _atom_dim(atom: _Atom) -> DimExpr:
    monomial = ((atom, 1),)
    return DimExpr(((monomial, 1),), 0)


def _single_atom(e: DimExpr) -> _Atom | None:
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


def _mono_mul(ma: _Monomial, mb: _Monomial) -> _Monomial:
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
        raise DimError(f"the exponent of ** must be a non-negative integer, got {format_dim(p)}")
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
    lo, hi = _interval(num, _unbounded)
    if math.isfinite(lo) and math.isfinite(hi) and lo // c == hi // c:
        return _add(whole, lo // c)
    inner = _single_atom(num)
    if isinstance(inner, _FloorDiv):
        return _add(whole, _floordiv(inner.num, inner.c * c))
    return _add(whole, _atom_dim(_FloorDiv(num, c)))


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
    if any(isinstance(a, _Mod) and a.c % c == 0 for m in rest for a, _ in m):
        def unwrap(a):
            return a.num if isinstance(a, _Mod) and a.c % c == 0 else _atom_dim(a)
        return _mod(_rebuild(num, unwrap), c)
    g = math.gcd(c, r0, *rest.values())
    if g > 1:
        return _scale(_mod(_make({m: k // g for m, k in rest.items()}, r0 // g), c // g), g)
    lo, hi = _interval(num, _unbounded)
    if math.isfinite(lo) and math.isfinite(hi) and lo // c == hi // c:
        return _add(num, -(lo // c) * c)
    return _atom_dim(_Mod(num, c))


def _min_max(a, b, is_min: bool) -> Dim:
    a, b = normalize(a), normalize(b)
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b) if is_min else max(a, b)
    lo, hi = _interval(_sub(a, b), _unbounded)
    if hi <= 0:                      # a <= b for every value
        return a if is_min else b
    if lo >= 0:
        return b if is_min else a
    a, b = sorted((a, b), key=_dim_key)
    return _atom_dim(_Min(a, b) if is_min else _Max(a, b))


def _rebuild(x: Dim, atom_fn: Callable[[_Atom], Dim]) -> Dim:
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


def _fold(x: Dim, leaf: Callable[[str], Dim], ops: Mapping[type, Callable]) -> Dim:
    """Rebuild ``x`` bottom-up: each variable becomes ``leaf(name)`` and each
    other atom ``ops[type](num, c)`` or ``ops[type](a, b)`` of rebuilt children."""
    def atom_fn(atom):
        if isinstance(atom, _Sym):
            return leaf(atom.name)
        if isinstance(atom, (_FloorDiv, _Mod)):
            return ops[type(atom)](_rebuild(atom.num, atom_fn), atom.c)
        return ops[type(atom)](_rebuild(atom.a, atom_fn), _rebuild(atom.b, atom_fn))
    return _rebuild(x, atom_fn)


_DIM_OPS = {_FloorDiv: _floordiv, _Mod: _mod, _Min: lambda a, b: _min_max(a, b, True),
            _Max: lambda a, b: _min_max(a, b, False)}
_INT_OPS = {_FloorDiv: operator.floordiv, _Mod: operator.mod, _Min: min, _Max: max}


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


def _atom_interval(atom: _Atom, var_range):
    if isinstance(atom, _Sym):
        return var_range(atom.name)
    if isinstance(atom, (_Min, _Max)):
        (la, ha), (lb, hb) = _interval(atom.a, var_range), _interval(atom.b, var_range)
        pick = min if isinstance(atom, _Min) else max
        return pick(la, lb), pick(ha, hb)
    lo, hi = _interval(atom.num, var_range)
    c = atom.c
    if isinstance(atom, _FloorDiv):
        return (lo if math.isinf(lo) else lo // c), (hi if math.isinf(hi) else hi // c)
    if math.isfinite(lo) and math.isfinite(hi) and lo // c == hi // c:
        return lo % c, hi % c
    return 0, (min(c - 1, hi) if lo >= 0 else c - 1)


def _interval(x: Dim, var_range) -> tuple:
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
    return _atom_dim(_Sym(unicodedata.normalize("NFKC", name)))


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
                if isinstance(atom, _Sym):
                    names.add(atom.name)
                elif isinstance(atom, (_FloorDiv, _Mod)):
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
    return _fold(normalize(x), lambda name: values.get(name, _atom_dim(_Sym(name))), _DIM_OPS)


def evaluate(x, env: Mapping[str, int]) -> int:
    """The value of ``x`` when each variable takes its value from ``env``.

    >>> evaluate((sym("n") + 1) // 2, {"n": 6})
    3
    """
    x = normalize(x)

    def value(name):
        if name not in env:
            raise DimError(f"cannot evaluate {format_dim(x)}: no value for {name!r}")
        if not is_static(env[name]):
            raise DimError(f"the value of {name!r} must be an int, got {env[name]!r}")
        return int(env[name])

    return _fold(x, value, _INT_OPS)


# --- text -------------------------------------------------------------------------------

def format_dim(x) -> str:
    """``x`` in Python syntax, readable by :func:`parse_dim`.

    >>> format_dim((sym("n") + 1) // 2 - sym("n") * sym("n"))
    '-n ** 2 + (n + 1) // 2'
    """
    x = normalize(x)
    return str(x) if isinstance(x, int) else _format_poly(x)


def _format_poly(e: DimExpr) -> str:
    out = ""
    for i, (mono, k) in enumerate(e.terms):
        # a lone `a // c` factor needs no parentheses except after unary minus
        body = _format_monomial(mono, bare=abs(k) == 1 and (i > 0 or k > 0))
        term = body if abs(k) == 1 else f"{abs(k)} * {body}"
        if i == 0:
            out = term if k > 0 else f"-{term}"
        else:
            out += f" + {term}" if k > 0 else f" - {term}"
    if e.const:
        out += f" + {e.const}" if e.const > 0 else f" - {-e.const}"
    return out


def _format_monomial(mono: _Monomial, bare: bool) -> str:
    alone = bare and len(mono) == 1 and mono[0][1] == 1
    factors = []
    for atom, p in mono:
        s = _format_atom(atom)
        if isinstance(atom, (_FloorDiv, _Mod)) and not alone:
            s = f"({s})"
        factors.append(s if p == 1 else f"{s} ** {p}")
    return " * ".join(factors)


def _format_atom(atom: _Atom) -> str:
    if isinstance(atom, _Sym):
        return atom.name
    if isinstance(atom, (_Min, _Max)):
        name = "min" if isinstance(atom, _Min) else "max"
        return f"{name}({format_dim(atom.a)}, {format_dim(atom.b)})"
    text = _format_poly(atom.num)
    if not isinstance(_single_atom(atom.num), (_Sym, _Min, _Max)):
        text = f"({text})"
    return f"{text} {'//' if isinstance(atom, _FloorDiv) else '%'} {atom.c}"


def parse_dim(text: str) -> Dim:
    """Read a dim written in Python syntax (what :func:`format_dim` prints).

    >>> parse_dim("min(seq, 512) * 2 + (n + 1) // 2")
    DimExpr('(n + 1) // 2 + 2 * min(seq, 512)')
    """
    if not isinstance(text, str):
        raise DimError(f"parse_dim expects a string, got {text!r}")
    shown = text if len(text) <= 80 else text[:77] + "..."
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as e:
        raise DimError(f"cannot parse dim {shown!r}: {getattr(e, 'msg', e)}") from None
    except (RecursionError, MemoryError):
        raise DimError(f"cannot parse dim {shown!r}: nested too deeply") from None
    try:
        return from_ast(tree.body)
    except DimError as e:
        raise DimError(f"cannot parse dim {shown!r}: {e}") from None


_BINOPS: dict[type, Callable[[Dim, Dim], Dim]] = {
    ast.Add: _add,
    ast.Sub: _sub,
    ast.Mult: _mul,
    ast.FloorDiv: lambda a, b: _floordiv(a, _divisor(b, "//")),
    ast.Mod: lambda a, b: _mod(a, _divisor(b, "%")),
    ast.Pow: _power,
}

# Dim text comes from files (archives, the IR text format): bounded work for
# bounded text. A power takes a small exponent, and no step may build a
# polynomial of more terms or an integer of more bits than any real shape has.
MAX_TEXT_POWER = 64
MAX_TEXT_TERMS = 256
MAX_TEXT_BITS = 256


def _bounded_binop(op: ast.operator, a: Dim, b: Dim) -> Dim:
    """``a op b`` for dim text, refused before it could blow up."""
    if isinstance(op, ast.Pow):
        if not isinstance(b, int) or not 0 <= b <= MAX_TEXT_POWER:
            raise DimError(f"the exponent of ** must be an integer in 0..{MAX_TEXT_POWER}, got {format_dim(b)}")
        if isinstance(a, int) and a.bit_length() * b > MAX_TEXT_BITS:
            raise DimError(f"{a} ** {b} has more than {MAX_TEXT_BITS} bits")
        out: Dim = 1
        for _ in range(b):       # term by term, each product checked
            out = _bounded_binop(ast.Mult(), out, a)
        return out
    if isinstance(op, ast.Mult) and not isinstance(a, int) and not isinstance(b, int) \
            and len(a.terms) * len(b.terms) > MAX_TEXT_TERMS * 4:
        raise DimError(f"a product of {len(a.terms)}- and {len(b.terms)}-term dims is too large")
    return _checked(_BINOPS[type(op)](a, b))


def _checked(d: Dim) -> Dim:
    numbers = [d] if isinstance(d, int) else [d.const, *(k for _, k in d.terms)]
    if not isinstance(d, int) and len(d.terms) > MAX_TEXT_TERMS:
        raise DimError(f"a dim of {len(d.terms)} terms (at most {MAX_TEXT_TERMS})")
    if any(abs(k).bit_length() > MAX_TEXT_BITS for k in numbers):
        raise DimError(f"a dim with a number of more than {MAX_TEXT_BITS} bits")
    return d


def from_ast(node: ast.expr, lookup: Callable[[str], Dim] | None = None) -> Dim:
    """The dim written by the Python expression ``node``; identifiers are
    resolved by ``lookup`` (default :func:`sym`). Powers, sizes of
    polynomials and of numbers are bounded (``MAX_TEXT_*``): text is data.

    >>> from_ast(ast.parse("n * 2", mode="eval").body, {"n": 5}.__getitem__)
    10
    """
    lookup = sym if lookup is None else lookup

    def walk(n: ast.expr) -> Dim:
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return _checked(n.value)
        if isinstance(n, ast.Name):
            return normalize(lookup(n.id))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = walk(n.operand)
            return _scale(v, -1) if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            if isinstance(n.op, ast.Div):
                raise DimError(f"true division in {_short(n)!r}: dims use '//'")
            if type(n.op) in _BINOPS:
                return _bounded_binop(n.op, walk(n.left), walk(n.right))
        if isinstance(n, ast.Call) and _callee(n.func) in ("min", "max") and not n.keywords \
                and len(n.args) >= 2:
            is_min = _callee(n.func) == "min"
            return reduce(lambda a, b: _checked(_min_max(a, b, is_min)), [walk(a) for a in n.args])
        raise DimError(f"unsupported syntax in a dim: {_short(n)!r}")

    try:
        return walk(node)
    except RecursionError:
        raise DimError("a dim nested too deeply") from None


def _short(node: ast.expr) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == "T":
        return func.attr                # TVM's T.min / T.max spelling
    return None


def __getattr__(name):
    # DimAnalyzer lives in dim_analysis, which imports this module; loading
    # it lazily keeps either import order working.
    if name == "DimAnalyzer":
        from .dim_analysis import DimAnalyzer
        return DimAnalyzer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
