"""Local rewrites as data: patterns, checks that say why not, tables of rules.

A :class:`Rule` is ``(name, pattern, check, rewrite)``. The pattern matches
a binding's value in A-normal form, looking through vars to the values they
are bound to in the same function; ``check(match)`` returns ``None`` when
the rule applies and otherwise the reason it does not; ``rewrite(match)``
returns the new value (nested calls are emitted as new bindings before it).
A :class:`RewriteTable` applies its rules producer-first (binding order)
over each function until nothing fires, and :func:`explain` prints why a
rule did not fire where its root op appears::

    from relaxpack.passes.rewrite import Rule, RewriteTable, const, is_op, used_once, wildcard

    rule = Rule(
        "fuse_matmul_bias",
        is_op("add")(is_op("matmul")(wildcard("x"), wildcard("w"), name="mm"), wildcard("b"),
                     commutative=True),
        used_once("mm", "matmul output"),
        lambda m: make_call("nn.gemm", m["x"], m["w"], m["b"]))
    func = RewriteTable("Example", [rule]).apply(func)
    explain(mod, "fuse_matmul_bias")    # [("lv_3", "matmul output lv_2 is used twice")]

Rewrites only add bindings and change the value of the binding they fire
at: a matched intermediate that other bindings also use stays (and one no
longer used is left for DeadCodeElimination). Use counts are kept exact
while a table runs (live uses only: uses by dead bindings do not count),
so ``used_once`` checks see the program as it is after earlier rewrites.
A rule whose rewrite returns one of the vars it matched (``x * 1 -> x``)
replaces the uses of the binding's var by that var.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from ..errors import PassError, RelaxpackError
from ..ir.block_builder import BlockBuilder, is_pure_expr
from ..ir.dims import DimAnalyzer
from ..ir.expr import (
    Binding, BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, Function, If, MatchCast,
    Op, SeqExpr, Span, Tuple, TupleGetItem, Var, VarBinding,
)
from ..ir.module import IRModule
from ..ir.struct_info import TensorStructInfo, is_base_of
from ..ops.definitions.common import dtype_kind, fmt_sinfo
from ..ir.visitor import ExprMutator
from ..ir.well_formed import function_analyzer
from .infra import FunctionPass, PassInfo

log = logging.getLogger(__name__)

Check = Callable[["Match"], "str | None"]

# ---------------------------------------------------------------- patterns


class Pattern:
    """Matches an expression; ``match`` returns None, or why it does not match."""

    def match(self, expr: Expr, state: "_MatchState") -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Wildcard(Pattern):
    """Any expression, bound as written (a var is not looked through).

    The same name used twice in one pattern must match the same value.
    """

    name: str | None = None

    def match(self, expr, state):
        return state.bind(self.name, expr, expr if isinstance(expr, Var) else None)


@dataclass(frozen=True)
class ConstPattern(Pattern):
    """A :class:`Constant`, written inline or bound to a var."""

    name: str | None = None
    what: str | None = None

    def match(self, expr, state):
        value, var, _ = state.resolve(expr, for_call=False)
        if isinstance(value, Constant):
            return state.bind(self.name, value, var)
        return f"{self.what or 'operand'} {state.describe(expr)} is not a constant"


@dataclass(frozen=True)
class CallPattern(Pattern):
    """A call of one of ``ops`` whose arguments match ``args``, in order
    (either order of two when ``commutative``)."""

    ops: tuple[str, ...]
    args: tuple[Pattern, ...]
    name: str | None = None
    what: str | None = None
    commutative: bool = False

    @property
    def ops_text(self) -> str:
        names = [f"R.{op}" for op in self.ops]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]

    def match(self, expr, state):
        value, var, why = state.resolve(expr, for_call=True)
        label = f"{self.what or 'operand'} {state.describe(expr)}"
        if why is not None:
            return f"{label} {why}"
        if not (isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in self.ops):
            return f"{label} is {_describe_value(value)}, not {self.ops_text}"
        reason = self.match_call(value, var, state)
        if reason is None and var is not None:
            state.consumed.append(var)
        return reason

    def match_call(self, call: Call, var: Var | None, state) -> str | None:
        if len(call.args) != len(self.args):
            return f"R.{call.op.name} has {len(call.args)} arguments here, not {len(self.args)}"
        orders = [self.args]
        if self.commutative and len(self.args) == 2:
            orders.append(self.args[::-1])
        reasons = []
        for order in orders:
            saved = state.save()
            reason = next((r for r in (p.match(a, state) for p, a in zip(order, call.args)) if r), None)
            if reason is None:
                return state.bind(self.name, call, var)
            state.restore(saved)
            if reason not in reasons:
                reasons.append(reason)
        return "; and swapped: ".join(reasons)


@dataclass(frozen=True)
class OrPattern(Pattern):
    """The first of ``alternatives`` that matches."""

    alternatives: tuple[Pattern, ...]

    def match(self, expr, state):
        reasons = []
        for alt in self.alternatives:
            saved = state.save()
            reason = alt.match(expr, state)
            if reason is None:
                return None
            state.restore(saved)
            if reason not in reasons:
                reasons.append(reason)
        return "; or ".join(reasons)


def any_of(*alternatives: Pattern) -> OrPattern:
    """A pattern matching the first of ``alternatives`` that matches."""
    return OrPattern(tuple(alternatives))


def wildcard(name: str | None = None) -> Wildcard:
    """Any value, bound to ``name``."""
    return Wildcard(name)


def const(name: str | None = None, what: str | None = None) -> ConstPattern:
    """A constant bound to ``name``; ``what`` names it in reasons ("weight")."""
    return ConstPattern(name, what)


def is_op(*ops: str):
    """``is_op("add")(a, b, name="sum", commutative=True)``: a call pattern."""
    def build(*args: Pattern, name: str | None = None, what: str | None = None,
              commutative: bool = False) -> CallPattern:
        return CallPattern(tuple(ops), tuple(args), name, what, commutative)
    return build


def _describe_value(value: Expr) -> str:
    if isinstance(value, Call):
        op = value.op
        return f"R.{op.name}" if isinstance(op, Op) else "a call of a function"
    if isinstance(value, Constant):
        return "a constant"
    if isinstance(value, Var):
        return "a var"
    return f"a {type(value).__name__}"


# ---------------------------------------------------------------- the function being matched


@dataclass
class _Def:
    value: Expr
    block: int              # which block binds it
    dataflow: bool          # ... and whether that block is a dataflow block
    match_cast: bool
    span: Span | None = None


class _Scope:
    """What matching knows about one function: where each var is bound,
    how many live uses it has, how to name it."""

    def __init__(self, analyzer: DimAnalyzer, uses: dict[Var, int], names: dict[Var, str] | None = None):
        self.analyzer = analyzer
        self.uses = uses
        self.defs: dict[Var, _Def] = {}
        self.names = names

    def record(self, binding: Binding, block: int, dataflow: bool) -> None:
        self.defs[binding.var] = _Def(binding.value, block, dataflow, isinstance(binding, MatchCast),
                                      binding.span)

    def name(self, var: Var) -> str:
        if self.names is not None and var in self.names:
            return self.names[var]
        return var.name_hint

    # exact live use counts while rewriting
    def add_uses(self, expr: Expr, delta: int) -> None:
        for v in _vars_of(expr):
            self.uses[v] = self.uses.get(v, 0) + delta
            if delta < 0 and self.uses[v] == 0:
                self._release(v)

    def _release(self, var: Var) -> None:
        """``var`` lost its last use: its value's uses no longer count."""
        d = self.defs.get(var)
        if d is not None and not d.match_cast and not isinstance(d.value, If) and is_pure_expr(d.value):
            self.add_uses(d.value, -1)


def _vars_of(expr: Expr) -> Iterable[Var]:
    if isinstance(expr, Var):
        yield expr
    elif isinstance(expr, Call):
        for a in expr.args:
            yield from _vars_of(a)
    elif isinstance(expr, Tuple):
        for f in expr.fields:
            yield from _vars_of(f)
    elif isinstance(expr, TupleGetItem):
        yield from _vars_of(expr.tuple_value)
    elif isinstance(expr, If):
        yield from _vars_of(expr.cond)
        for branch in (expr.true_branch, expr.false_branch):
            yield from _vars_of(branch)
    elif isinstance(expr, SeqExpr):
        yield from _seq_vars(expr)


def _seq_vars(seq: SeqExpr) -> Iterable[Var]:
    for block in seq.blocks:
        for b in block.bindings:
            yield from _vars_of(b.value)
    yield from _vars_of(seq.body)


def live_use_counts(func: Function) -> dict[Var, int]:
    """Uses of each var by the function's result and its live bindings (a
    pure binding whose var has no live use is dead and its uses do not count)."""
    counts: dict[Var, int] = {}

    def add(expr):
        for v in _vars_of(expr):
            counts[v] = counts.get(v, 0) + 1

    def seq(s: SeqExpr):
        add(s.body)
        for block in reversed(s.blocks):
            for b in reversed(block.bindings):
                if counts.get(b.var, 0) or isinstance(b, MatchCast) or not is_pure_expr(b.value):
                    if isinstance(b.value, If):
                        add(b.value.cond)
                        seq(b.value.true_branch)
                        seq(b.value.false_branch)
                    else:
                        add(b.value)
    seq(func.body)
    return counts


def printed_names(func: Function) -> dict[Var, str]:
    """The names the text printer gives the function's vars (unique, as in ``mod.script()``)."""
    from ..ir.printer import _FunctionPrinter, _Metadata
    printer = _FunctionPrinter(_Metadata())
    printer.function("main", func, 0)
    return dict(printer.namer.names)


# ---------------------------------------------------------------- matching


class _MatchState:
    def __init__(self, scope: _Scope, block: int):
        self.scope, self.block = scope, block
        self.exprs: dict[str, Expr] = {}
        self.vars: dict[str, Var | None] = {}
        self.consumed: list[Var] = []       # vars of the calls matched through them

    def save(self):
        return dict(self.exprs), dict(self.vars), list(self.consumed)

    def restore(self, saved) -> None:
        self.exprs, self.vars, self.consumed = dict(saved[0]), dict(saved[1]), list(saved[2])

    def bind(self, name: str | None, expr: Expr, var: Var | None) -> str | None:
        if name is None:
            return None
        if name in self.exprs:
            old = self.exprs[name]
            if old is expr or self._canonical(old) is self._canonical(expr):
                return None
            return f"{name} is {self.describe(old)} in one place and {self.describe(expr)} in another"
        self.exprs[name], self.vars[name] = expr, var
        return None

    def _canonical(self, expr: Expr) -> Expr:
        while isinstance(expr, Var):           # follow aliases (lv = x)
            d = self.scope.defs.get(expr)
            if d is None or d.match_cast or not isinstance(d.value, Var):
                break
            expr = d.value
        return expr

    def resolve(self, expr: Expr, for_call: bool) -> tuple[Expr, Var | None, str | None]:
        """The value ``expr`` stands for: a var is looked through to its
        binding. Returns (value, the var bound to it, why it cannot be looked through)."""
        var = None
        for _ in range(64):
            if not isinstance(expr, Var):
                return expr, var, None
            d = self.scope.defs.get(expr)
            if d is None:
                return expr, var, "is a function parameter"
            if d.match_cast:
                return expr, var, "is bound by a match_cast"
            if for_call and d.dataflow and d.block != self.block:
                # its operands may be DataflowVars this binding cannot see
                return expr, var, "is bound in another dataflow block"
            var, expr = expr, d.value
        return expr, var, "is bound through too long a chain of vars"

    def describe(self, expr: Expr | None) -> str:
        if isinstance(expr, Var):
            return self.scope.name(expr)
        return _describe_value(expr) if expr is not None else "?"


class Match:
    """A successful match: the named parts of the pattern.

    ``m["w"]`` is the matched expression (a :class:`Constant`'s node, a
    :class:`Call`, or a wildcard's value as written), ``m.var("mm")`` the var
    a call or constant was reached through, ``m.data("w")`` a constant's
    array, ``m.uses("mm")`` the live uses of that var.
    """

    def __init__(self, binding: VarBinding, state: _MatchState):
        self.binding = binding
        self._exprs, self._vars, self._scope = state.exprs, state.vars, state.scope
        self._consumed = state.consumed

    @property
    def span(self) -> Span | None:
        """The spans of the matched bindings (producers first) and of the
        binding the rule fires at: what the rewritten value was made from."""
        sources: list[str] = []
        for var in self._consumed:
            d = self._scope.defs.get(var)
            if d is not None and d.span is not None:
                sources.extend(d.span.sources)
        if self.binding.span is not None:
            sources.extend(self.binding.span.sources)
        sources = list(dict.fromkeys(sources))
        return Span(tuple(sources)) if sources else None

    def __getitem__(self, name: str) -> Expr:
        return self._exprs[name]

    def __contains__(self, name: str) -> bool:
        return name in self._exprs

    def var(self, name: str) -> Var | None:
        return self._vars.get(name)

    def data(self, name: str) -> np.ndarray:
        value = self._exprs[name]
        if not isinstance(value, Constant):
            raise PassError(f"pattern part {name!r} is a {type(value).__name__}, not a constant")
        return value.data

    def sinfo(self, name: str):
        return self._exprs[name].struct_info

    def uses(self, name: str) -> int:
        var = self._vars.get(name)
        return 0 if var is None else self._scope.uses.get(var, 0)

    def name_of(self, name: str) -> str:
        var = self._vars.get(name)
        return self._scope.name(var) if var is not None else _describe_value(self._exprs[name])

    @property
    def analyzer(self) -> DimAnalyzer:
        return self._scope.analyzer

    @property
    def out_sinfo(self):
        """The struct info of the var the rule fires at."""
        return self.binding.var.struct_info


# ---------------------------------------------------------------- checks


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def used_once(name: str, what: str) -> Check:
    """A check: the var ``name`` was reached through has no other use.

    Fusing a value used elsewhere would compute it twice.
    """
    def check(m: Match) -> str | None:
        n = m.uses(name)
        return None if n <= 1 else f"{what} {m.name_of(name)} is used {_times(n)}"
    check.__name__ = f"used_once_{name}"
    return check


def all_of(*checks: Check | None) -> Check:
    """A check that runs ``checks`` in order and reports the first reason."""
    def check(m: Match) -> str | None:
        for c in checks:
            reason = c(m) if c is not None else None
            if reason:
                return reason
        return None
    return check


def same_type_as_output(name: str) -> Check:
    """A check: ``m[name]`` has the binding's dtype and provably its shape, so
    replacing the binding's value by it changes neither (no broadcasting)."""
    def check(m: Match) -> str | None:
        src, out = m.sinfo(name), m.out_sinfo
        what = m.name_of(name)
        if not isinstance(src, TensorStructInfo) or not isinstance(out, TensorStructInfo):
            return f"{what} is not a tensor"
        if src.dtype != out.dtype:
            return f"{what} is {src.dtype}, the result {out.dtype}"
        if src.shape is None or out.shape is None:
            return f"the shape of {what} or of the result is not known"
        if len(src.shape) != len(out.shape) or not all(
                a == b or m.analyzer.prove_equal(a, b) for a, b in zip(src.shape, out.shape)):
            return (f"the result's shape {fmt_sinfo(out)} is not provably the shape {fmt_sinfo(src)} "
                    f"of {what} (the op broadcasts)")
        return None
    check.__name__ = f"same_type_as_output_{name}"
    return check


def float_output(m: Match) -> str | None:
    """A check: the binding's value is a float tensor (the rewrite changes rounding only)."""
    dtype = getattr(m.out_sinfo, "dtype", None)
    return None if dtype is not None and dtype_kind(dtype) == "float" else \
        f"the result is {dtype or 'of unknown dtype'}, not a float tensor"


# ---------------------------------------------------------------- rules and tables


@dataclass(frozen=True)
class Rule:
    """``pattern`` (a call pattern: its op is the rule's root), ``check``
    (None or ``match -> reason | None``) and ``rewrite`` (``match -> Expr``).
    ``doc`` defaults to the rewrite's docstring."""

    name: str
    pattern: CallPattern
    check: Check | None
    rewrite: Callable[[Match], Expr]
    doc: str = ""

    def __post_init__(self):
        if not isinstance(self.pattern, CallPattern):
            raise PassError(f"rule {self.name}: the pattern's root must be a call pattern")
        if not self.doc:
            object.__setattr__(self, "doc", inspect.getdoc(self.rewrite) or "")

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""

    def try_match(self, binding: VarBinding, scope: _Scope, block: int) -> Match | str:
        """The match at ``binding``, or why the rule does not apply there."""
        state = _MatchState(scope, block)
        reason = self.pattern.match_call(binding.value, binding.var, state)
        if reason is not None:
            return reason
        match = Match(binding, state)
        reason = self.check(match) if self.check is not None else None
        return match if reason is None else reason


_RULES: dict[str, tuple["RewriteTable", Rule]] = {}
#: modules that define rule tables, imported when explain() meets an unknown rule name
_TABLE_MODULES = ("fold_batch_norm", "simplify_algebra", "fuse_bias_activation")


class RewriteTable:
    """Named rules applied to a fixed point (at most ``max_iterations`` sweeps)."""

    def __init__(self, name: str, rules: Sequence[Rule], max_iterations: int = 16):
        self.name, self.rules, self.max_iterations = name, tuple(rules), max_iterations
        self._by_op: dict[str, list[Rule]] = {}
        for rule in self.rules:
            owner = _RULES.get(rule.name)
            if owner is not None and owner[0].name != name:
                raise PassError(f"rule {rule.name!r} is in tables {owner[0].name} and {name}")
            _RULES[rule.name] = (self, rule)
            for op in rule.pattern.ops:
                self._by_op.setdefault(op, []).append(rule)

    def rule(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise PassError(f"table {self.name} has no rule {name!r}; it has {[r.name for r in self.rules]}")

    def describe(self) -> str:
        """One line per rule: its name and the first line of its doc."""
        return "\n".join(f"{r.name}: {r.summary}" for r in self.rules)

    def apply(self, func: Function) -> Function:
        """``func`` with the rules applied until none fires (``func`` itself if none does)."""
        for _ in range(self.max_iterations):
            rewriter = _Rewriter(self, func)
            new = rewriter.visit_expr(func)
            if not rewriter.fired:
                return func
            func = new
        log.warning("%s: no fixed point after %d sweeps", self.name, self.max_iterations)
        return func

    def apply_module(self, mod: IRModule) -> IRModule:
        return mod.with_functions({name: f if f.attrs.get("Primitive") else self.apply(f)
                                   for name, f in mod.items()})

    def as_pass(self, name: str | None = None, opt_level: int = 2,
                requires: Sequence[str] = ("import", "optimize"), produces: str | None = "optimize"
                ) -> FunctionPass:
        """This table as a function pass."""
        p = FunctionPass(lambda func, mod, ctx: self.apply(func),
                         PassInfo(name or self.name, opt_level, tuple(requires), produces))
        p.__doc__ = f"{p.name}: the rules of table {self.name}:\n" + self.describe()
        return p

    def explain(self, mod: IRModule, rule_name: str) -> list[tuple[str, str]]:
        """``(binding name, reason)`` for every binding whose value is a call
        of the rule's root op and where the rule does not fire."""
        rule = self.rule(rule_name)
        out = []
        for fname, func in mod.items():
            names = printed_names(func)
            scope = _Scope(function_analyzer(func), live_use_counts(func), names)
            for binding, block, dataflow in _bindings_with_blocks(func, scope):
                value = binding.value
                if not (isinstance(binding, VarBinding) and isinstance(value, Call)
                        and isinstance(value.op, Op) and value.op.name in rule.pattern.ops):
                    continue
                where = names.get(binding.var, binding.var.name_hint)
                where = where if fname == "main" else f"{fname}.{where}"
                if not scope.uses.get(binding.var):
                    out.append((where, "the binding is dead (nothing uses its var)"))
                    continue
                result = rule.try_match(binding, scope, block)
                if isinstance(result, str):
                    out.append((where, result))
                    continue
                rewritten = _tentative(rule, result, binding, scope.analyzer, dataflow)
                if isinstance(rewritten, str):
                    out.append((where, rewritten))
        return out


def _bindings_with_blocks(func: Function, scope: _Scope) -> list[tuple[Binding, int, bool]]:
    """Every binding with its block's number and kind (all recorded in ``scope``)."""
    found = []
    numbers = itertools.count(1)

    def seq(s: SeqExpr):
        for block in s.blocks:
            number, dataflow = next(numbers), isinstance(block, DataflowBlock)
            for b in block.bindings:
                scope.record(b, number, dataflow)
                found.append((b, number, dataflow))
                if isinstance(b.value, If):
                    seq(b.value.true_branch)
                    seq(b.value.false_branch)
    seq(func.body)
    return found


def find_rule(name: str) -> tuple[RewriteTable, Rule]:
    """The table holding rule ``name`` and the rule."""
    if name not in _RULES:
        import importlib
        for module in _TABLE_MODULES:
            try:
                importlib.import_module(f"{__package__}.{module}")
            except ImportError:             # a table module not written yet
                continue
    if name not in _RULES:
        raise PassError(f"no rewrite rule named {name!r}; known: {sorted(_RULES)}")
    return _RULES[name]


def explain(mod: IRModule, rule_name: str) -> list[tuple[str, str]]:
    """Why rule ``rule_name`` does not fire: ``(binding name, reason)`` for
    each binding whose value calls the rule's root op and where it does not.

    >>> explain(mod, "fuse_matmul_bias")        # doctest: +SKIP
    [('lv_3', 'matmul output lv_2 is used twice')]
    """
    table, _ = find_rule(rule_name)
    return table.explain(mod, rule_name)


# ---------------------------------------------------------------- applying a table


def _tentative(rule: Rule, match: Match, binding: VarBinding, analyzer: DimAnalyzer,
               dataflow: bool) -> tuple[tuple[Binding, ...], Expr] | str:
    """The rewrite normalized without emitting anything: (new bindings, new
    value), or why it cannot replace the binding's value."""
    try:
        expr = rule.rewrite(match)
        builder = BlockBuilder(analyzer=analyzer)
        builder.begin_scope()
        builder.begin_block(is_dataflow=dataflow)
        span = match.span
        with builder.span(*(span.sources if span is not None else ())):
            value = builder.normalize(expr)
        helpers = builder.end_block().bindings
        builder.end_scope(value)
    except RelaxpackError as err:
        log.debug("rule %s failed to rewrite %s: %s", rule.name, binding.var.name_hint, err)
        return f"the rewrite fails: {err}"
    old, new = binding.var.struct_info, value.struct_info
    if not is_base_of(old, new, analyzer):
        return f"the rewrite would change the value's struct info from {old} to {new}"
    return helpers, value


class _Rewriter(ExprMutator):
    """One sweep of a table over a function."""

    MAX_PER_BINDING = 8

    def __init__(self, table: RewriteTable, func: Function):
        analyzer = function_analyzer(func)
        super().__init__(BlockBuilder(analyzer=analyzer))
        self.table = table
        self.scope = _Scope(analyzer, live_use_counts(func))
        self.fired = 0
        self._blocks = 0
        self._block, self._dataflow = 0, False

    def visit_binding_block_(self, block: BindingBlock) -> BindingBlock:
        saved = self._block, self._dataflow
        self._blocks += 1
        self._block, self._dataflow = self._blocks, isinstance(block, DataflowBlock)
        try:
            return super().visit_binding_block_(block)
        finally:
            self._block, self._dataflow = saved

    def visit_var_binding_(self, binding: VarBinding) -> None:
        value = self.visit_expr(binding.value)
        if value is not binding.value:
            value = self.builder.normalize(value)
            var = self._updated_var(binding.var, value.struct_info)
            if var is not binding.var:
                self.scope.uses[var] = self.scope.uses.pop(binding.var, 0)
            binding = VarBinding(var, value, span=binding.span)
        for _ in range(self.MAX_PER_BINDING):
            new = self._rewrite_once(binding)
            if new is None:
                break
            binding = new
            if binding.var in self.var_remap:    # its uses now use another var
                break
        self.builder.emit_binding(binding)
        self.scope.record(binding, self._block, self._dataflow)

    def visit_match_cast_(self, binding: MatchCast) -> None:
        super().visit_match_cast_(binding)
        self.scope.defs[binding.var] = _Def(binding.value, self._block, self._dataflow, True)

    def _rewrite_once(self, binding: VarBinding) -> VarBinding | None:
        value = binding.value
        if not (isinstance(value, Call) and isinstance(value.op, Op)):
            return None
        rules = self.table._by_op.get(value.op.name)
        if not rules or not self.scope.uses.get(binding.var) or not is_pure_expr(value):
            return None
        for rule in rules:
            match = rule.try_match(binding, self.scope, self._block)
            if isinstance(match, str):
                continue
            result = _tentative(rule, match, binding, self.scope.analyzer, self._dataflow)
            if isinstance(result, str):
                continue
            log.debug("%s: rule %s fires at %s", self.table.name, rule.name, binding.var.name_hint)
            self.fired += 1
            return self._commit(binding, match.span, *result)
        return None

    def _commit(self, binding: VarBinding, span: Span | None, helpers: tuple[Binding, ...],
                value: Expr) -> VarBinding:
        var, scope = binding.var, self.scope
        for h in helpers:
            self.builder.emit_binding(h)
            scope.record(h, self._block, self._dataflow)
            scope.uses.setdefault(h.var, 0)
        # count the new uses before releasing the old ones, so a value the
        # rewrite still uses is never released on the way
        scope.add_uses(value, +1)
        for h in helpers:
            scope.add_uses(h.value, +1)
        if (isinstance(value, Var) and value.struct_info == var.struct_info
                and not (isinstance(value, DataflowVar) and not isinstance(var, DataflowVar))):
            # x * 1 -> x: later uses of var use x; var's binding is left dead
            self.var_remap[var] = value
            scope.uses[value] = scope.uses.get(value, 0) + scope.uses.get(var, 0) - 1
            scope.uses[var] = 0
            scope.add_uses(binding.value, -1)
            return binding
        scope.add_uses(binding.value, -1)
        return VarBinding(var, value, span=span)
