"""The pattern language of the rewrite rules (see :mod:`.rules`).

Patterns match a binding's value in A-normal form; an argument that is a
var is looked through to the value it is bound to in the same function
(not through a ``match_cast``, a parameter, or into another dataflow
block, whose DataflowVars the rewrite could not use)::

    is_op("add")(is_op("matmul")(wildcard("x"), const("w", "the weight"), name="mm"),
                 wildcard("b"), commutative=True)

- :func:`wildcard` matches anything and binds it as written; one name used
  twice must match the same value;
- :func:`const` matches a :class:`Constant`, inline or bound to a var;
- :func:`is_op` matches a call of one of the ops, argument by argument
  (``commutative`` tries both orders of two; a last ``...`` allows more);
- :func:`any_of` matches the first alternative that matches.

A failed match returns its reason, written with the names the printer
gives the vars ("operand lv_2 is R.nn.relu, not R.matmul"). A successful
one is a :class:`Match`: the named parts, the vars they were reached
through and their live use counts (:class:`FunctionScope`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ...errors import PassError
from ...ir.block_builder import is_pure_expr
from ...ir.dims import DimAnalyzer
from ...ir.expr import (
    Binding, Call, Constant, Expr, Function, If, MatchCast, Op, SeqExpr, Span, Tuple, TupleGetItem,
    Var, VarBinding,
)

# ---------------------------------------------------------------- patterns


class Pattern:
    """Matches an expression; ``match`` returns None, or why it does not match."""

    def match(self, expr: Expr, state: "MatchState") -> str | None:
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
            state.progress += 1
            return state.bind(self.name, value, var)
        return f"{state.label(self.what, expr)} is not a constant"


@dataclass(frozen=True)
class CallPattern(Pattern):
    """A call of one of ``ops`` whose arguments match ``args``, in order
    (either order of two when ``commutative``). A last argument ``...``
    (Ellipsis) lets the call have any further arguments: ``is_op("nn.gemm")(...)``
    matches every ``nn.gemm``."""

    ops: tuple[str, ...]
    args: tuple  # of Pattern, the last may be Ellipsis
    name: str | None = None
    what: str | None = None
    commutative: bool = False

    @functools.cached_property
    def ops_text(self) -> str:
        names = [f"R.{op}" for op in self.ops]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]

    def match(self, expr, state):
        value, var, why = state.resolve(expr, for_call=True)
        label = state.label(self.what, expr)
        if why is not None:
            return f"{label} {why}"
        if not (isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in self.ops):
            return f"{label} is {_describe_value(value)}, not {self.ops_text}"
        reason = self.match_call(value, var, state)
        if reason is None and var is not None:
            state.consumed.append(var)
        return reason

    def match_call(self, call: Call, var: Var | None, state) -> str | None:
        patterns = self.args
        if patterns and patterns[-1] is Ellipsis:
            patterns = patterns[:-1]
            if len(call.args) < len(patterns):
                return f"R.{call.op.name} has {len(call.args)} arguments here, not {len(patterns)} or more"
        elif len(call.args) != len(patterns):
            return f"R.{call.op.name} has {len(call.args)} arguments here, not {len(patterns)}"
        orders = [patterns]
        if self.commutative and len(patterns) == 2:
            orders.append(patterns[::-1])
        failures = []      # (calls and constants matched before the failure, reason)
        for order in orders:
            saved, progress = state.save(), state.progress
            reason = next((r for r in (p.match(a, state) for p, a in zip(order, call.args)) if r), None)
            if reason is None:
                state.progress += 1
                return state.bind(self.name, call, var)
            failures.append((state.progress - progress, reason))
            state.restore(saved)
        # report the order that got furthest (both when neither matched anything)
        best = max(n for n, _ in failures)
        return "; and swapped: ".join(dict.fromkeys(r for n, r in failures if n == best))


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
class Def:
    """How a var is bound: its value and where."""

    value: Expr
    block: int              # which block binds it
    dataflow: bool          # ... and whether that block is a dataflow block
    match_cast: bool
    span: Span | None = None


class FunctionScope:
    """What matching knows about one function: where each var is bound,
    how many live uses it has, how to name it."""

    def __init__(self, analyzer: DimAnalyzer, uses: dict[Var, int], names: dict[Var, str] | None = None):
        self.analyzer = analyzer
        self.uses = uses
        self.defs: dict[Var, Def] = {}
        self.names = names

    def record(self, binding: Binding, block: int, dataflow: bool) -> None:
        self.defs[binding.var] = Def(binding.value, block, dataflow, isinstance(binding, MatchCast),
                                      binding.span)

    def name(self, var: Var) -> str:
        if self.names is not None and var in self.names:
            return self.names[var]
        return var.name_hint

    # exact live use counts while rewriting
    def add_uses(self, expr: Expr, delta: int) -> None:
        for v in vars_of(expr):
            self.uses[v] = self.uses.get(v, 0) + delta
            if delta < 0 and self.uses[v] == 0:
                self._release(v)

    def _release(self, var: Var) -> None:
        """``var`` lost its last use: its value's uses no longer count."""
        d = self.defs.get(var)
        if d is not None and not d.match_cast and not isinstance(d.value, If) and is_pure_expr(d.value):
            self.add_uses(d.value, -1)


def vars_of(expr: Expr) -> Iterable[Var]:
    """Every use of a var in ``expr`` (If branches included), with repeats."""
    if isinstance(expr, Var):
        yield expr
    elif isinstance(expr, Call):
        for a in expr.args:
            yield from vars_of(a)
    elif isinstance(expr, Tuple):
        for f in expr.fields:
            yield from vars_of(f)
    elif isinstance(expr, TupleGetItem):
        yield from vars_of(expr.tuple_value)
    elif isinstance(expr, If):
        yield from vars_of(expr.cond)
        for branch in (expr.true_branch, expr.false_branch):
            yield from vars_of(branch)
    elif isinstance(expr, SeqExpr):
        yield from _seq_vars(expr)


def _seq_vars(seq: SeqExpr) -> Iterable[Var]:
    for block in seq.blocks:
        for b in block.bindings:
            yield from vars_of(b.value)
    yield from vars_of(seq.body)


def live_use_counts(func: Function) -> dict[Var, int]:
    """Uses of each var by the function's result and its live bindings (a
    pure binding whose var has no live use is dead and its uses do not count)."""
    counts: dict[Var, int] = {}

    def add(expr):
        for v in vars_of(expr):
            counts[v] = counts.get(v, 0) + 1

    def seq(s: SeqExpr):
        add(s.body)
        for block in reversed(s.blocks):
            for b in reversed(block.bindings):
                # an If is kept whatever its branches do: counting too many uses is safe
                if (counts.get(b.var, 0) or isinstance(b, MatchCast) or isinstance(b.value, If)
                        or not is_pure_expr(b.value)):
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
    from ...ir.printer import _FunctionPrinter, _Metadata
    printer = _FunctionPrinter(_Metadata())
    printer.function("main", func, 0)
    return dict(printer.namer.names)


# ---------------------------------------------------------------- matching


class MatchState:
    """The parts bound so far while one rule's pattern is matched at one binding."""

    def __init__(self, scope: FunctionScope, block: int):
        self.scope, self.block = scope, block
        self.exprs: dict[str, Expr] = {}
        self.vars: dict[str, Var | None] = {}
        self.consumed: list[Var] = []       # vars of the calls matched through them
        self.progress = 0                   # calls and constants matched so far (for reasons)

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

    def label(self, what: str | None, expr: Expr) -> str:
        """How a reason names an argument: ``"the weight w"``, or ``"operand"`` when it is no var."""
        what = what or "operand"
        return f"{what} {self.scope.name(expr)}" if isinstance(expr, Var) else what

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

    def __init__(self, binding: VarBinding, state: MatchState):
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

    def bound_value(self, name: str) -> Expr:
        """The value the var matched as ``name`` is bound to in the function (the matched
        expression itself when it is not a bound var)."""
        expr = self._exprs[name]
        d = self._scope.defs.get(expr) if isinstance(expr, Var) else None
        return expr if d is None else d.value

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

    def producer(self, expr: Expr) -> tuple[Expr, int]:
        """What ``expr`` is beyond the pattern: the value a var (not a match cast) is bound to in
        the function and the var's live uses, or ``(expr, 0)`` for anything else. Lets a check walk
        a chain of any length (a pattern has a fixed depth)."""
        d = self._scope.defs.get(expr) if isinstance(expr, Var) else None
        if d is None or d.match_cast:
            return expr, 0
        return d.value, self._scope.uses.get(expr, 0)

    def block_of(self, expr: Expr) -> int | None:
        """The index of the block that binds ``expr`` (a var of the function), else None: a
        check's test that a var found beyond the pattern may be read where the rule fires."""
        d = self._scope.defs.get(expr) if isinstance(expr, Var) else None
        return None if d is None else d.block

    def constant_of(self, expr: Expr) -> np.ndarray | None:
        """The array of ``expr`` when it is a constant or a var bound to one (:meth:`producer`),
        else None: a check's test that an operand beyond the pattern is constant."""
        value = self.producer(expr)[0]
        return value.data if isinstance(value, Constant) else None

    def span_of(self, expr: Expr) -> Span | None:
        """The span of the binding of ``expr`` (a var of the function), else ``None``."""
        d = self._scope.defs.get(expr) if isinstance(expr, Var) else None
        return None if d is None else d.span

    def name_of(self, name: str) -> str:
        var = self._vars.get(name)
        return self._scope.name(var) if var is not None else _describe_value(self._exprs[name])

    def consume(self, var: Var) -> None:
        """Count the binding of ``var`` (a var beyond the pattern a rewrite folds in: a chain a
        check walked by :meth:`producer`) among the matched ones: :attr:`span` names its sources,
        before the pattern's own."""
        if var not in self._consumed:
            self._consumed.insert(0, var)

    def scope_name(self, expr: Expr) -> str:
        """How a reason names ``expr``, an expression beyond the pattern (:meth:`producer`): a
        var by its printed name, anything else by what it is."""
        return self._scope.name(expr) if isinstance(expr, Var) else _describe_value(expr)

    @property
    def analyzer(self) -> DimAnalyzer:
        return self._scope.analyzer

    @property
    def out_sinfo(self):
        """The struct info of the var the rule fires at."""
        return self.binding.var.struct_info
