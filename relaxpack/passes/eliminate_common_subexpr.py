"""EliminateCommonSubexpr: compute each value once.

Two pure bindings that compute the same value -- the same op, the same
attributes, structurally equal arguments (vars by identity) -- are merged:
the second becomes an alias of the first, which CanonicalizeBindings then
removes::

    a = R.exp(x); b = R.exp(x); c = R.add(a, b)   ->   a = R.exp(x); b = a; c = R.add(a, b)

Constants equal by content (dtype, shape, bytes, device) become one
constant first, so calls on equal weights merge too. Constants are bucketed
by dtype, shape, struct info and a sample of their elements, and compared
in full only within a bucket: a model's ~100 MB of distinct weights are not
hashed on every run.

Scoping is respected: a value computed inside an ``If`` branch is not reused
after the ``If`` or in the other branch, and a DataflowVar is not reused
outside its block. Never merged: impure calls (``call_packed``: each call
may differ), ``match_cast`` bindings (run-time checks), and a value whose
first var is less precisely typed than the second (the merge would lose
shape information).

>>> mod = eliminate_common_subexpr(mod)                          # doctest: +SKIP
"""

from __future__ import annotations

from collections import ChainMap

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.equality import structural_key
from ..ir.expr import Call, Constant, DataflowVar, Expr, SeqExpr, Tuple, Var, VarBinding
from ..ir.struct_info import is_base_of
from ..ir.visitor import ExprMutator
from ..ir.well_formed import function_analyzer
from .dead_code_elimination import has_side_effects
from .core.infra import function_pass


class _CommonSubexpr(ExprMutator):
    def __init__(self, func):
        super().__init__(BlockBuilder(analyzer=function_analyzer(func)))
        self.available: ChainMap = ChainMap()        # value key -> the var that holds it
        self.constants: dict = {}                    # bucket key -> the distinct Constants in it
        self.same_as: dict[Var, Var] = {}            # alias -> the var it aliases (for keys)

    # ------------------------------------------------------------ keys
    def visit_constant_(self, c: Constant) -> Expr:
        bucket = self.constants.setdefault(_bucket_key(c), [])
        for seen in bucket:
            if seen is c or np.array_equal(seen.data, c.data, equal_nan=c.data.dtype.kind in "fc"):
                return seen
        bucket.append(c)
        return c

    def value_key(self, expr: Expr):
        """The structural key of ``expr``; constants (already made unique by
        content) and vars count by identity, so nothing is hashed twice."""
        if isinstance(expr, Var):
            return ("var", id(self.same_as.get(expr, expr)))
        if isinstance(expr, Constant):
            return ("const", id(expr))
        if isinstance(expr, Tuple):
            return ("tuple", tuple(self.value_key(f) for f in expr.fields))
        if isinstance(expr, Call):
            head = structural_key(expr.replace(args=()))     # op, attrs, sinfo_args
            return (head, tuple(self.value_key(a) for a in expr.args))
        return structural_key(expr)

    # ------------------------------------------------------------ scopes
    def visit_seq_expr_(self, seq: SeqExpr) -> SeqExpr:
        self.available = self.available.new_child()
        try:
            return super().visit_seq_expr_(seq)
        finally:
            self.available = self.available.parents

    def visit_dataflow_block_(self, block):
        new_block = super().visit_dataflow_block_(block)
        scope = self.available.maps[0]
        for key in [k for k, v in scope.items() if isinstance(v, DataflowVar)]:
            del scope[key]
        return new_block

    # ------------------------------------------------------------ bindings
    def visit_var_binding_(self, binding: VarBinding) -> None:
        value = self.visit_expr(binding.value)
        if value is not binding.value:
            value = self.builder.normalize(value)
        if isinstance(value, Var):
            var = self._emit(binding, value)
            self.same_as[var] = self.same_as.get(value, value)
            return
        if has_side_effects(value):
            self._emit(binding, value)
            return
        key = self.value_key(value)
        first = self.available.get(key)
        if first is not None and is_base_of(binding.var.struct_info, first.struct_info, self.builder.analyzer):
            # an alias (CanonicalizeBindings removes it); later keys see through it
            self.builder.emit_binding(VarBinding(binding.var, first, span=binding.span))
            self.same_as[binding.var] = first
            return
        var = self._emit(binding, value)
        if first is None:
            self.available[key] = var

    def _emit(self, binding: VarBinding, value: Expr) -> Var:
        if value is binding.value:
            self.builder.emit_binding(binding)
            return binding.var
        var = self._updated_var(binding.var, value.struct_info)
        self.builder.emit_binding(VarBinding(var, value, span=binding.span))
        return var


#: elements sampled (evenly spaced) into a constant's bucket key
_SAMPLE = 64


def _bucket_key(c: Constant):
    data = c.data
    flat = data.reshape(-1)
    step = max(1, flat.size // _SAMPLE)
    sample = flat[::step][:_SAMPLE]
    content = repr(sample.tolist()) if data.dtype == object else sample.tobytes()
    return (data.dtype.str, data.shape, c.struct_info, content)


@function_pass(name="EliminateCommonSubexpr", opt_level=1, requires=("import", "optimize"), produces="optimize")
def eliminate_common_subexpr(func, mod, ctx):
    return _CommonSubexpr(func).visit_expr(func)


__all__ = ["eliminate_common_subexpr"]
