"""Symbolic dimensions: a small closed algebra with canonical forms.

A dim is a plain ``int`` or a :class:`DimExpr`, an immutable integer
polynomial over named variables and the opaque terms ``a // c``, ``a % c``
(``c`` a positive constant), ``min(a, b)`` and ``max(a, b)``; algebraically
equal dims compare and hash equal::

    >>> n, m = sym("n"), sym("m")
    >>> 2 * n + n == 3 * n and (n + 1) * (n + 1) == n * n + 2 * n + 1
    True
    >>> n - n, format_dim((4 * n + 2) // 2), format_dim(dim_min(n, 16) * m)
    (0, '2 * n + 1', 'm * min(n, 16)')

This module is the public face of three, one concept each: the algebra
(:mod:`~relaxpack.ir.dim_algebra`: rewrites that hold for *every* integer
value of the variables), the text (:mod:`~relaxpack.ir.dim_text`: print and
parse) and range analysis (:class:`DimAnalyzer`,
:mod:`~relaxpack.ir.dim_analysis`: reasoning with ranges such as
``1 <= seq <= 512``).
"""

from __future__ import annotations

from .dim_algebra import Dim, DimExpr, dim_max, dim_min, evaluate, free_vars, is_static, normalize, substitute, sym
from .dim_text import MAX_TEXT_BITS, MAX_TEXT_POWER, MAX_TEXT_TERMS, dim_identifier, format_dim, from_ast, parse_dim

__all__ = [
    "Dim", "DimAnalyzer", "DimExpr", "MAX_TEXT_BITS", "MAX_TEXT_POWER", "MAX_TEXT_TERMS", "dim_identifier", "dim_max",
    "dim_min",
    "evaluate", "format_dim", "free_vars", "from_ast", "is_static", "normalize", "parse_dim", "substitute", "sym",
]


def __getattr__(name):
    # DimAnalyzer lives in dim_analysis, which imports the algebra; loading
    # it lazily keeps either import order working.
    if name == "DimAnalyzer":
        from .dim_analysis import DimAnalyzer
        return DimAnalyzer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
