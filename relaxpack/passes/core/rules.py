"""Local rewrites as data: patterns, checks that say why not, tables of rules.

A :class:`Rule` is ``(name, pattern, check, rewrite)``. The pattern matches
a binding's value in A-normal form, looking through vars to the values they
are bound to in the same function; ``check(match)`` returns ``None`` when
the rule applies and otherwise the reason it does not; ``rewrite(match)``
returns the new value (nested calls are emitted as new bindings before it).
A :class:`RewriteTable` applies its rules producer-first (binding order)
over each function until nothing fires, and :func:`explain` prints why a
rule did not fire where its root op appears::

    from relaxpack.passes.core.rules import Rule, RewriteTable, const, is_op, used_once, wildcard

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
replaces the uses of the binding's var by that var (a var the function
returns, or one that leaves its dataflow block, is bound to it instead).
"""

from __future__ import annotations

import inspect
import itertools
import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from ...errors import PassError, RelaxpackError
from ...ir.block_builder import BlockBuilder, is_pure_expr
from ...ir.dims import DimAnalyzer
from ...ir.expr import (
    Binding, BindingBlock, Call, DataflowBlock, DataflowVar, Expr, Function, If, MatchCast, Op,
    SeqExpr, Span, Var, VarBinding,
)
from ...ir.module import IRModule
from ...ir.struct_info import TensorStructInfo, is_base_of
from ...ir.visitor import ExprMutator
from ...ir.well_formed import function_analyzer
from ...ops.definitions.common import dtype_kind, fmt_sinfo
from .infra import FunctionPass, PassInfo
from .patterns import (
    CallPattern, ConstPattern, Def, FunctionScope, Match, MatchState, OrPattern, Pattern, Wildcard,
    any_of, const, is_op, live_use_counts, printed_names, vars_of, wildcard,
)

log = logging.getLogger(__name__)

Check = Callable[[Match], "str | None"]


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
    """A local rewrite as data: ``name``, where it may apply (``pattern``),
    ``check`` (None, or the reason it does not apply) and ``rewrite``.
    ``doc`` defaults to the rewrite's docstring. The one rule shape of the
    passes, by what ``pattern`` is:

    - a call pattern (its op is the rule's root): a rule of a
      :class:`RewriteTable`, ``check(match)`` and ``rewrite(match)`` on a
      :class:`Match` of a tree of calls;
    - a predicate of the node: a binding rule (CanonicalizeBindings,
      FoldConstant, SimplifyShapes), ``check(node, state)`` and
      ``rewrite(node, state)`` with the pass's state (:func:`apply_rules`);
    - None: the pass picks the rules by op itself (ConvertLayout's
      ``LayoutRule``, which adds what a region needs to know).

    :func:`first_applicable` and :func:`reasons` select and explain the
    latter two alike; a table explains its rules with :func:`explain`.
    """

    name: str
    pattern: CallPattern | Callable[..., bool] | None
    check: Callable[..., "str | None"] | None
    rewrite: Callable[..., object]
    doc: str = ""

    def __post_init__(self):
        if isinstance(self.pattern, Pattern) and not isinstance(self.pattern, CallPattern):
            raise PassError(f"rule {self.name}: the pattern's root must be a call pattern")
        if not self.doc:
            object.__setattr__(self, "doc", inspect.getdoc(self.rewrite) or "")

    def reason(self, *subject) -> str | None:
        """None when the rule applies to ``subject`` (a node, then the pass's
        state), else why not; a rule whose predicate does not match says so."""
        if callable(self.pattern) and not isinstance(self.pattern, Pattern) and not self.pattern(subject[0]):
            return NOT_MATCHED
        return self.check(*subject) if self.check is not None else None

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""

    def try_match(self, binding: VarBinding, scope: FunctionScope, block: int) -> Match | str:
        """The match at ``binding``, or why the rule does not apply there."""
        state = MatchState(scope, block)
        reason = self.pattern.match_call(binding.value, binding.var, state)
        if reason is not None:
            return reason
        match = Match(binding, state)
        reason = self.check(match) if self.check is not None else None
        return match if reason is None else reason


#: the reason of a rule whose predicate does not match the node
NOT_MATCHED = "the pattern does not match"


def first_applicable(rules: Sequence[Rule], *subject) -> Rule | None:
    """The first of ``rules`` that applies to ``subject`` (a node, then the
    pass's state), or None; the reasons of those that matched but do not
    apply are logged at debug level."""
    for rule in rules:
        reason = rule.reason(*subject)
        if reason is None:
            return rule
        if reason is not NOT_MATCHED:
            log.debug("%s does not apply: %s", rule.name, reason)
    return None


def reasons(rules: Sequence[Rule], *subject) -> dict[str, str | None]:
    """For each of ``rules`` whose pattern matches ``subject``: None if it applies, else why not."""
    found = {rule.name: rule.reason(*subject) for rule in rules}
    return {name: why for name, why in found.items() if why is not NOT_MATCHED}


def apply_rules(rules: Sequence[Rule], node, state):
    """The rewrite of ``node`` by the first binding rule that applies, or None."""
    rule = first_applicable(rules, node, state)
    return None if rule is None else rule.rewrite(node, state)


#: rule name -> (its table, the rule): a table registers its rules when it is made,
#: i.e. when the pass module that uses it is imported (passes/pipeline.py imports them all)
_RULES: dict[str, tuple["RewriteTable", Rule]] = {}


class RewriteTable:
    """Named rules applied to a fixed point (at most ``max_iterations`` sweeps)."""

    def __init__(self, name: str, rules: Sequence[Rule], max_iterations: int = 16):
        self.name, self.rules, self.max_iterations = name, tuple(rules), max_iterations
        self._by_op: dict[str, list[Rule]] = {}
        for rule in self.rules:
            if not isinstance(rule.pattern, CallPattern):
                raise PassError(f"rule {rule.name}: a table's rule needs a call pattern")
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
        called = _called_ops(func.body)
        if not any(all(ops & called for ops in _required_ops(r.pattern)) for r in self.rules):
            return func     # every rule needs an op the function never calls: a cheap scan, not a sweep
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
            if func.attrs.get("Primitive"):
                continue
            names = printed_names(func)
            scope = FunctionScope(function_analyzer(func), live_use_counts(func), names)
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


def _required_ops(pattern) -> list[set[str]]:
    """What a match needs the function to call: one op of each set (the root's
    and its nested call patterns'; alternatives need nothing in particular)."""
    if not isinstance(pattern, CallPattern):
        return []
    out = [set(pattern.ops)]
    for arg in pattern.args:
        if arg is not Ellipsis:
            out += _required_ops(arg)
    return out


def _called_ops(seq: SeqExpr) -> set[str]:
    """The ops bindings of ``seq`` (and of its If branches) call."""
    ops, stack = set(), [seq]
    while stack:
        for block in stack.pop().blocks:
            for b in block.bindings:
                value = b.value
                if isinstance(value, Call) and isinstance(value.op, Op):
                    ops.add(value.op.name)
                elif isinstance(value, If):
                    stack += (value.true_branch, value.false_branch)
    return ops


def _bindings_with_blocks(func: Function, scope: FunctionScope) -> list[tuple[Binding, int, bool]]:
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
    """The table holding rule ``name`` and the rule, among the tables of the
    pass modules imported so far."""
    if name not in _RULES:
        raise PassError(f"no rewrite rule named {name!r} in the tables of the passes imported so far "
                        f"(relaxpack.passes.pipeline imports them all); known: {sorted(_RULES)}")
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
        self.scope = FunctionScope(analyzer, live_use_counts(func))
        # the function's results keep their vars (their names are the outputs' names)
        self.results = set(vars_of(func.body.body))
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
                if binding.var in self.results:
                    self.results.add(var)
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
        self.scope.defs[binding.var] = Def(binding.value, self._block, self._dataflow, True)

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
        if (isinstance(value, Var) and value.struct_info == var.struct_info and var not in self.results
                and not (isinstance(value, DataflowVar) and not isinstance(var, DataflowVar))):
            # x * 1 -> x: later uses of var use x; var's binding is left dead
            self.var_remap[var] = value
            scope.uses[value] = scope.uses.get(value, 0) + scope.uses.get(var, 0) - 1
            scope.uses[var] = 0
            scope.add_uses(binding.value, -1)
            return binding
        scope.add_uses(binding.value, -1)
        return VarBinding(var, value, span=span)


__all__ = [
    # the pattern language (patterns.py), importable from here
    "Pattern", "Wildcard", "ConstPattern", "CallPattern", "OrPattern", "wildcard", "const", "is_op",
    "any_of", "Match", "live_use_counts", "printed_names",
    # checks, rules, tables
    "Check", "used_once", "all_of", "same_type_as_output", "float_output", "Rule", "RewriteTable",
    "find_rule", "explain", "first_applicable", "reasons", "apply_rules", "NOT_MATCHED",
]
