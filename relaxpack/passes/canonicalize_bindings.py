"""CanonicalizeBindings: aliases, trivial tuples and redundant match casts go away.

Rewrites, each in one place::

    b = a; f(b)                     ->  f(a)           (var-to-var chains collapse)
    c = R.const(...); f(c)          ->  f(R.const(...)) (so do constants, shapes, prim values)
    t = (a, b); c = t[1]; f(c)      ->  f(b)           (indexing a tuple literal)
    t2 = (t[0], t[1])               ->  t              (rebuilding a whole tuple)
    y = R.match_cast(x, S); f(y)    ->  f(x)           (x is provably of S already)

The names a function returns survive: when the returned var is an alias of a
value bound in the same scope, that binding takes the returned var's name
(``lv = exp(x); gv = lv; return gv`` becomes ``gv = exp(x); return gv``); a
returned alias of a parameter stays a binding. A DataflowVar aliased by a
Var (the block's output) is replaced the same way, since a DataflowVar may
not leave its block.

The pass does not delete anything that becomes unused (the tuple ``t``
above): that is DeadCodeElimination's job, which runs after it.

>>> mod = canonicalize_bindings(mod)                             # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.block_builder import BlockBuilder
from ..ir.dims import DimAnalyzer
from ..ir.expr import (
    Constant, DataflowVar, Expr, Function, MatchCast, PrimValue, SeqExpr, ShapeExpr, Tuple, TupleGetItem,
    Var, VarBinding,
)
from ..ir.struct_info import StructInfo, TupleStructInfo, is_base_of
from ..ir.visitor import ExprMutator, ExprVisitor
from ..ir.well_formed import function_analyzer
from .core.rules import Rule, apply_rules
from .core.infra import function_pass

#: A pass repeats its rewrite until nothing changes; this bounds the rounds.
MAX_ROUNDS = 8


# ---------------------------------------------------------------- shared analyses
def function_outputs(func: Function) -> set[Var]:
    """The vars the function returns (its body's result, through tuples)."""
    out: set[Var] = set()

    def walk(expr):
        if isinstance(expr, Var):
            out.add(expr)
        elif isinstance(expr, Tuple):
            for f in expr.fields:
                walk(f)

    walk(func.body.body)
    return out


def new_dims(sinfo: StructInfo, defined) -> frozenset[str]:
    """The symbolic dims ``sinfo`` mentions that are not yet ``defined``."""
    return sinfo.dim_vars() - set(defined)


def match_cast_is_redundant(binding: MatchCast, analyzer: DimAnalyzer, defined) -> str | None:
    """None when the cast provably succeeds without binding a new dim, else why not."""
    fresh = new_dims(binding.struct_info, defined)
    if fresh:
        return f"the cast defines the dim(s) {sorted(fresh)}"
    if not is_base_of(binding.struct_info, binding.value.struct_info, analyzer):
        return f"{binding.value.struct_info} is not provably {binding.struct_info}"
    return None


def is_constant_leaf(expr: Expr) -> bool:
    """A value that may stand wherever a var does: a constant, a shape of
    dims, a prim value (their binding is as trivial as an alias)."""
    return isinstance(expr, (Constant, ShapeExpr, PrimValue))


class _Scopes(ExprVisitor):
    """Records, for every binding, the SeqExpr it belongs to."""

    def __init__(self):
        self.seq_of: dict[Var, SeqExpr] = {}
        self.aliases: list[tuple[Var, Var, SeqExpr]] = []   # (alias, target, seq of the alias)
        self._seq: list[SeqExpr] = []

    def visit_seq_expr_(self, seq):
        self._seq.append(seq)
        super().visit_seq_expr_(seq)
        self._seq.pop()

    def visit_var_binding_(self, binding):
        super().visit_var_binding_(binding)
        self.seq_of[binding.var] = self._seq[-1]
        if isinstance(binding.value, Var):
            self.aliases.append((binding.var, binding.value, self._seq[-1]))

    def visit_match_cast_(self, binding):
        super().visit_match_cast_(binding)
        self.seq_of[binding.var] = self._seq[-1]


def _plan_takeovers(func: Function) -> dict[Var, Var]:
    """Which aliases must take over the binding of their target.

    ``{target: alias}`` when ``alias = target`` must keep existing as a name:
    it is returned by the function, or it is a Var aliasing a DataflowVar.
    """
    scopes = _Scopes()
    scopes.visit_expr(func)
    outputs = function_outputs(func)
    direct = {alias: target for alias, target, _ in scopes.aliases}

    def root(var):
        seen = set()
        while var in direct and var not in seen:
            seen.add(var)
            var = direct[var]
        return var

    takeovers: dict[Var, Var] = {}
    for alias, _, seq in scopes.aliases:
        target = root(alias)
        must_keep = alias in outputs or (isinstance(target, DataflowVar) and not isinstance(alias, DataflowVar))
        if not must_keep or target in takeovers or target in outputs:
            continue
        if scopes.seq_of.get(target) is not seq:   # a parameter, or bound in another scope
            continue
        if isinstance(alias, DataflowVar) and not isinstance(target, DataflowVar):
            continue
        takeovers[target] = alias
    return takeovers


# ---------------------------------------------------------------- the rules
@dataclass
class _Env:
    bound: dict = field(default_factory=dict)    # var -> its (rewritten) bound value


def _tuple_literal(expr, env: _Env):
    if isinstance(expr, Tuple):
        return expr
    value = env.bound.get(expr) if isinstance(expr, Var) else None
    return value if isinstance(value, Tuple) else None


def _check_getitem(item: TupleGetItem, env: _Env) -> str | None:
    return None if _tuple_literal(item.tuple_value, env) is not None else "the tuple is not a tuple literal"


def _rewrite_getitem(item: TupleGetItem, env: _Env) -> Expr:
    return _tuple_literal(item.tuple_value, env).fields[item.index]


def _rebuilt_source(tup: Tuple, env: _Env):
    """``t`` when the fields of ``tup`` are ``t[0], t[1], ...`` of all of ``t``."""
    sources = set()
    for i, f in enumerate(tup.fields):
        item = env.bound.get(f) if isinstance(f, Var) else f
        if not isinstance(item, TupleGetItem) or item.index != i:
            return None
        sources.add(item.tuple_value)
    if len(sources) != 1:
        return None
    (source,) = sources
    sinfo = source.struct_info
    if not isinstance(sinfo, TupleStructInfo) or len(sinfo.fields) != len(tup.fields):
        return None
    return source


def _check_rebuilt(tup: Tuple, env: _Env) -> str | None:
    if not tup.fields:
        return "the tuple is empty"
    return None if _rebuilt_source(tup, env) is not None else "the fields are not all items of one tuple, in order"


RULES = (
    Rule("TupleGetItemOfTupleLiteral", lambda e: isinstance(e, TupleGetItem), _check_getitem, _rewrite_getitem),
    Rule("TupleOfAllItems", lambda e: isinstance(e, Tuple), _check_rebuilt, lambda t, env: _rebuilt_source(t, env)),
)


# ---------------------------------------------------------------- the mutator
class _Canonicalizer(ExprMutator):
    def __init__(self, func: Function):
        super().__init__(BlockBuilder(analyzer=function_analyzer(func)))
        self.outputs = function_outputs(func)
        self.takeovers = _plan_takeovers(func)
        self.absorbed = set(self.takeovers.values())   # alias bindings that disappear
        self.env = _Env()
        self.defined_dims: set[str] = set()
        for p in func.params:
            self.defined_dims |= p.struct_info.dim_vars()

    def _rewrite_value(self, value: Expr) -> Expr:
        new = apply_rules(RULES, value, self.env)
        while new is not None and new is not value:
            value = new
            new = apply_rules(RULES, value, self.env)
        return value

    def visit_tuple_getitem_(self, item: TupleGetItem) -> Expr:
        # also where a call takes ``t[i]`` as an argument directly
        item = super().visit_tuple_getitem_(item)
        return self._rewrite_value(item)

    def visit_var_binding_(self, binding: VarBinding) -> None:
        value = self._rewrite_value(self.visit_expr(binding.value))
        if value is not binding.value:
            value = self.builder.normalize(value)
        self._bind(binding, value)

    def visit_match_cast_(self, binding: MatchCast) -> None:
        value = self.visit_expr(binding.value)
        if value is not binding.value:
            value = self.builder.normalize(value)
            binding = MatchCast(binding.var, value, binding.struct_info, span=binding.span)
        reason = match_cast_is_redundant(binding, self.builder.analyzer, self.defined_dims)
        if reason is None:       # the cast always succeeds: an alias (or a plain binding)
            binding = VarBinding(binding.var, value, span=binding.span)
        else:
            self.defined_dims |= binding.struct_info.dim_vars()
        self._bind(binding, value)

    def _bind(self, binding, value: Expr) -> None:
        """Emit ``binding`` with ``value`` (remapped, rewritten), as an alias
        to forward, under a taken-over name, or as it is."""
        var = binding.var
        is_cast = isinstance(binding, MatchCast)
        if var in self.absorbed:          # its target's binding took its name
            return
        if not is_cast and var not in self.takeovers and (
                isinstance(value, Var) and self._can_forward(var, value)
                or is_constant_leaf(value) and var not in self.outputs):
            self.var_remap[var] = value
            return
        if var in self.takeovers:
            alias = self.takeovers[var]
            sinfo = binding.struct_info if is_cast else self._var_sinfo(var, value)
            new_var = type(alias)(alias.name_hint, struct_info=sinfo)
            self.var_remap[var] = self.var_remap[alias] = new_var
        elif not is_cast and value is not binding.value and var.struct_info != value.struct_info:
            # a rewritten value: the var takes its (possibly more precise) struct info
            new_var = type(var)(var.name_hint, struct_info=value.struct_info)
            self.var_remap[var] = new_var
        else:
            new_var = var
        if new_var is not var or value is not binding.value:
            if is_cast:
                binding = MatchCast(new_var, value, binding.struct_info, span=binding.span)
            else:
                binding = VarBinding(new_var, value, span=binding.span)
        self.builder.emit_binding(binding)
        self.env.bound[new_var] = value

    def _var_sinfo(self, var: Var, value: Expr) -> StructInfo:
        if is_base_of(var.struct_info, value.struct_info, self.builder.analyzer):
            return var.struct_info
        return value.struct_info

    def _can_forward(self, var: Var, target: Var) -> bool:
        if var in self.outputs:
            return False
        # a DataflowVar may only replace another DataflowVar (it cannot leave its block)
        return isinstance(var, DataflowVar) or not isinstance(target, DataflowVar)


def canonicalize_function(func: Function) -> Function:
    """``func`` with its bindings canonicalized (repeated until nothing changes)."""
    for _ in range(MAX_ROUNDS):
        new = _Canonicalizer(func).visit_expr(func)
        if new is func:
            break
        func = new
    return func


@function_pass(name="CanonicalizeBindings", opt_level=1, requires=("import", "optimize"), produces="optimize")
def canonicalize_bindings(func, mod, ctx):
    return canonicalize_function(func)


__all__ = ["RULES", "function_outputs", "is_constant_leaf",
           "match_cast_is_redundant", "canonicalize_bindings", "canonicalize_function"]
