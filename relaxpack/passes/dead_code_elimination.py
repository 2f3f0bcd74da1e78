"""DeadCodeElimination: drop what nothing uses.

- A binding of a pure value whose var is never used goes, and so, in the
  same run, does everything only it used (the bindings are walked backwards
  with use counts, which reaches the fixed point in one sweep). ``If``
  branches are walked too; an ``If`` whose result is unused goes when its
  branches have no side effects.
- Functions that ``main`` does not reach (directly or through other
  functions) are removed from the module. A module without ``main`` keeps
  all its functions.

Never removed: impure calls (``call_packed``, impure functions) and
``match_cast`` bindings, which are run-time checks -- SimplifyShapes or
CanonicalizeBindings turn a cast that provably succeeds into an alias first,
which this pass can then drop. Parameters are kept, unused or not.

Tuples built only to be indexed (``t = (a, b); c = t[0]``) are resolved by
CanonicalizeBindings (``c`` becomes ``a``); the tuple is then unused and
goes here.

>>> mod = dead_code_elimination(mod)                            # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter

from ..ir.block_builder import is_pure_expr
from ..ir.expr import (
    Call, Expr, Function, GlobalVar, If, MatchCast, SeqExpr, Var, VarBinding,
)
from ..ir.module import IRModule
from ..ir.visitor import ExprVisitor
from .core.infra import module_pass

ENTRY = "main"


class _UseCounter(ExprVisitor):
    """Counts the uses of every var (definitions are not uses)."""

    def __init__(self, counts: Counter | None = None, sign: int = 1):
        self.counts = Counter() if counts is None else counts
        self.sign = sign

    def visit_var_(self, var: Var) -> None:
        self.counts[var] += self.sign


def count_uses(expr: Expr) -> Counter:
    """How many times each var is used in ``expr``."""
    counter = _UseCounter()
    counter.visit_expr(expr)
    return counter.counts


class _SideEffects(ExprVisitor):
    def __init__(self):
        self.found = False

    def visit_call_(self, call: Call) -> None:
        if not is_pure_expr(call):
            self.found = True
        super().visit_call_(call)


def has_side_effects(expr: Expr) -> bool:
    """Whether evaluating ``expr`` may call something impure (also inside If branches)."""
    if isinstance(expr, Call):
        if not is_pure_expr(expr):
            return True
    elif not isinstance(expr, If):
        return False
    visitor = _SideEffects()
    visitor.visit_expr(expr)
    return visitor.found


def removable(binding) -> str | None:
    """None when ``binding`` may go once its var is unused, else why not."""
    if isinstance(binding, MatchCast):
        return "a match_cast is a run-time check"
    if has_side_effects(binding.value):
        return "the value has side effects"
    return None


def _sweep_seq(seq: SeqExpr, uses: Counter) -> SeqExpr:
    """``seq`` without dead bindings; ``uses`` is updated as bindings go."""
    blocks = []
    for block in reversed(seq.blocks):
        kept = []
        for binding in reversed(block.bindings):
            if uses[binding.var] == 0 and removable(binding) is None:
                _UseCounter(uses, -1).visit_expr(binding.value)
                continue
            if isinstance(binding, VarBinding) and isinstance(binding.value, If):
                binding = binding.replace(value=_sweep_if(binding.value, uses))
            kept.append(binding)
        kept.reverse()
        blocks.append(block.replace(bindings=tuple(kept)))
    blocks.reverse()
    return seq.replace(blocks=tuple(blocks))


def _sweep_if(node: If, uses: Counter) -> If:
    true_branch = _sweep_seq(node.true_branch, uses)
    false_branch = _sweep_seq(node.false_branch, uses)
    return node.replace(true_branch=true_branch, false_branch=false_branch)


def eliminate_dead_bindings(func: Function) -> Function:
    """``func`` without the pure bindings it never uses."""
    body = _sweep_seq(func.body, count_uses(func))
    return func.replace(body=body)


class _Callees(ExprVisitor):
    def __init__(self):
        self.names: set[str] = set()

    def visit_global_var_(self, g: GlobalVar) -> None:
        self.names.add(g.name_hint)


def reachable_functions(mod: IRModule, entry: str = ENTRY) -> set[str]:
    """Names of the functions ``entry`` reaches (itself included)."""
    seen, stack = set(), [entry]
    while stack:
        name = stack.pop()
        if name in seen or name not in mod:
            continue
        seen.add(name)
        callees = _Callees()
        callees.visit_expr(mod[name])
        stack.extend(callees.names - seen)
    return seen


@module_pass(name="DeadCodeElimination", opt_level=1, requires=("import", "optimize"), produces="optimize")
def dead_code_elimination(mod, ctx):
    swept = mod.with_functions({name: eliminate_dead_bindings(func) for name, func in mod.items()})
    if ENTRY not in swept:
        return swept
    keep = reachable_functions(swept)   # after the sweep: a call in dead code does not count
    return swept.with_functions({name: func for name, func in swept.items() if name in keep})


__all__ = ["count_uses", "dead_code_elimination", "eliminate_dead_bindings", "has_side_effects",
           "reachable_functions", "removable"]
