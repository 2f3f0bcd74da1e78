"""Gradual shape checking: what the algebra cannot decide is assumed, and checked at run time.

An op that needs two dims equal (matmul's inner dims, concat's other axes,
broadcasting, a norm's weight against the normalized axes) raises
:class:`~relaxpack.errors.UnprovenDimsError` when the :class:`DimAnalyzer`
can neither prove nor refute the equality. A :class:`BlockBuilder` made with
``gradual=True`` (the ONNX importer's) does not give up there: it picks one
of the two dims as the representative, ``match_cast``s every operand that
holds the other one to the representative, and infers again::

    lv = R.concat((up, skip), axis=1)     # up: (n, 8, 2 * (h // 8)), skip: (n, 4, h // 4)
    # becomes
    skip1 = R.match_cast(skip, R.Tensor((n, 4, 2 * (h // 8)), "float32"))
    lv = R.concat((up, skip1), axis=1)

The cast is the recorded assumption, at the binding of the ONNX node that
needs it (its span). It is a plain ``MatchCast``: printed, parsed, kept by
every pass like any run-time check, and turned by codegen into a check of
the two dims (packager/assumptions.py). A relation that provably fails is
never assumed: the op's ShapeError stands and the model is refused.

>>> bb = BlockBuilder(gradual=True)                     # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable

from ..errors import UnprovenDimsError
from .dims import Dim, format_dim, free_vars, is_static
from .expr import Call, DataflowVar, Expr, MatchCast, ShapeExpr, Tuple, Var, identical
from .struct_info import ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo

#: No call assumes more relations than this (each round makes one).
MAX_ASSUMPTIONS = 32


def infer_assuming(call: Call, infer: Callable[[Call], StructInfo], entry_dims: frozenset[str],
                   in_dataflow: bool) -> tuple[Call, StructInfo, list[MatchCast]]:
    """``call``'s struct info, assuming unproven dim equalities.

    Returns the call (its operands replaced by their casts), its struct info
    and the ``MatchCast`` bindings to emit before it (none when inference
    needed no assumption). ``entry_dims`` are the dims the function's
    parameters define: a representative over them can be checked once per
    input shape. An error no assumption can lift is raised as it is.
    """
    casts = _Casts(in_dataflow)
    tried: set[tuple] = set()
    while True:
        try:
            return call, infer(call), casts.bindings()
        except UnprovenDimsError as err:
            pair = (err.lhs, err.rhs)
            if err.lhs is None or pair in tried or len(tried) >= MAX_ASSUMPTIONS:
                raise
            tried.add(pair)
            new = _assume(call, err.lhs, err.rhs, entry_dims, casts)
            if new is None:
                raise
            call = new


def representative_order(a: Dim, b: Dim, entry_dims: frozenset[str]) -> list[tuple[Dim, Dim]]:
    """``(representative, other)`` candidates, the better representative
    first: a static dim, then one over the function's input dims (its check
    runs once per input shape), then the shorter expression, then ``a``."""
    def rank(d: Dim) -> tuple:
        return (not is_static(d), not free_vars(d) <= entry_dims, len(format_dim(d)))
    return sorted([(a, b), (b, a)], key=lambda pair: rank(pair[0]))


def _assume(call: Call, a: Dim, b: Dim, entry_dims: frozenset[str], casts: "_Casts") -> Call | None:
    """``call`` with every operand holding the non-representative dim cast
    to the representative; None when no tensor operand holds either whole."""
    for rep, other in representative_order(a, b, entry_dims):
        if any(_holds(arg, other) for arg in call.args):
            args = tuple(_replace(arg, other, rep, casts) for arg in call.args)
            return call.replace(args=args, struct_info=None)
    return None


def _holds(expr: Expr, dim: Dim) -> bool:
    """Whether a tensor operand (or a tuple field) of ``expr`` has ``dim`` as a whole dim."""
    if isinstance(expr, Tuple):
        return any(_holds(f, dim) for f in expr.fields)
    if isinstance(expr, ShapeExpr):
        return False
    sinfo = expr.struct_info
    return isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and dim in sinfo.shape


def _replace(expr: Expr, other: Dim, rep: Dim, casts: "_Casts") -> Expr:
    if isinstance(expr, Tuple):
        fields = tuple(_replace(f, other, rep, casts) for f in expr.fields)
        if identical(fields, expr.fields):
            return expr
        return Tuple(fields, struct_info=TupleStructInfo(tuple(f.struct_info for f in fields)))
    if isinstance(expr, ShapeExpr):       # a shape operand follows the assumption, unchecked
        if other not in expr.values:
            return expr
        values = tuple(rep if d == other else d for d in expr.values)
        return ShapeExpr(values, struct_info=ShapeStructInfo(values))
    if _holds(expr, other):
        return casts.cast(expr, other, rep)
    return expr


class _Casts:
    """The casts one call's inference asked for: each original operand is
    cast once, to all the representatives its dims were assumed equal to."""

    def __init__(self, in_dataflow: bool):
        self.var_type = DataflowVar if in_dataflow else Var
        self.source: dict[Var, Expr] = {}      # cast var -> the original operand
        self.latest: dict[int, Var] = {}       # id(original) -> its latest cast var
        self.order: list[Expr] = []
        self.made: dict[tuple, Var] = {}        # (id(expr), other, rep) -> its cast: one per round

    def cast(self, expr: Expr, other: Dim, rep: Dim) -> Var:
        """A var of ``expr`` cast with ``other`` read as ``rep``; the same var for every operand
        that is ``expr`` (``S @ S``: one cast, bound once)."""
        key = (id(expr), other, rep)
        if key in self.made:
            return self.made[key]
        original = self.source.get(expr, expr) if isinstance(expr, Var) else expr
        sinfo = expr.struct_info
        shape = tuple(rep if d == other else d for d in sinfo.shape)
        cast_sinfo = TensorStructInfo(shape, sinfo.dtype, vdevice=sinfo.vdevice)
        hint = getattr(original, "name_hint", "lv")
        var = self.var_type(hint, struct_info=cast_sinfo)
        if id(original) not in self.latest:
            self.order.append(original)
        self.latest[id(original)] = var
        self.source[var] = original
        self.made[key] = var
        return var

    def bindings(self) -> list[MatchCast]:
        out = []
        for original in self.order:
            var = self.latest[id(original)]
            out.append(MatchCast(var, original, var.struct_info))
        return out


def assumed_relations(binding: MatchCast) -> list[tuple[Dim, Dim]]:
    """The dim equalities a ``match_cast`` asserts without defining a dim:
    ``(value's dim, cast's dim)`` per axis where they differ. Empty for a
    cast whose value's shape is unknown (it binds or checks the tensor)."""
    value, cast = binding.value.struct_info, binding.struct_info
    if not (isinstance(value, TensorStructInfo) and isinstance(cast, TensorStructInfo)):
        return []
    if value.shape is None or cast.shape is None or len(value.shape) != len(cast.shape):
        return []
    return [(v, c) for v, c in zip(value.shape, cast.shape) if v != c]


__all__ = ["MAX_ASSUMPTIONS", "assumed_relations", "infer_assuming", "representative_order"]
