"""Bounds of a function's symbolic dims: its declared ranges and what its assumptions imply.

The importer assumes dim relations it cannot prove and records each as a ``match_cast``
(``ir/gradual.py``) that the run checks; a run whose inputs break one fails. BERT's position
embeddings slice a table of 64 rows by the sequence length, and the sum with the token embeddings
assumes ``min(sequence, 64) == sequence``: every run that gets past it has ``sequence <= 64``.
A relation asserted at the function's top level holds for every run that gives a result, so it
bounds the dims for the whole function, even for bindings before it (a run that breaks it
raises, whatever those computed). Casts inside an ``If`` branch run only sometimes: not read.

>>> analyzer = function_dims(func)          # doctest: +SKIP
>>> analyzer.upper_bound(sym("sequence"))   # doctest: +SKIP
64
"""

from __future__ import annotations

from ...ir.dim_algebra import Min, Sym, is_static, single_atom
from ...ir.dim_analysis import DimAnalyzer
from ...ir.expr import Function, MatchCast, SeqExpr
from ...ir.gradual import assumed_relations
from ...ir.well_formed import function_analyzer


def function_dims(func: Function) -> DimAnalyzer:
    """A DimAnalyzer with ``func``'s declared ranges (``dim_ranges``), each dim's upper bound
    lowered to ``c`` where a top-level cast asserts ``min(x, c) == x`` for a dim ``x``."""
    analyzer = function_analyzer(func)
    if not isinstance(func.body, SeqExpr):
        return analyzer
    for block in func.body.blocks:
        for b in block.bindings:
            if not isinstance(b, MatchCast):
                continue
            for relation in assumed_relations(b):
                bound = _min_bound(*relation) or _min_bound(*relation[::-1])
                if bound is not None:
                    name, hi = bound
                    lo, old = analyzer.range_of(name)
                    if lo <= hi and (old is None or hi < old):
                        analyzer.set_range(name, lo, hi)
    return analyzer


def _min_bound(lhs, rhs) -> tuple[str, int] | None:
    """``(x, c)`` when ``lhs`` is ``min(x, c)`` (either order) for a static ``c`` and ``rhs`` is
    the dim ``x``: then ``x <= c``. Else None."""
    atom = single_atom(lhs) if not is_static(lhs) else None
    var = single_atom(rhs) if not is_static(rhs) else None
    if not isinstance(atom, Min) or not isinstance(var, Sym):
        return None
    for x, c in ((atom.a, atom.b), (atom.b, atom.a)):
        if is_static(c) and not is_static(x) and single_atom(x) == var:
            return var.name, int(c)
    return None


__all__ = ["function_dims"]
