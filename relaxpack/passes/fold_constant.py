"""FoldConstant: evaluate calls whose arguments are all constants.

A binding ``lv = R.op(c0, c1, ...)`` whose arguments are constants
(``Constant``, a static ``R.shape``, an int/float ``PrimValue``, tuples of
those) and whose op has a destination-passing kernel is evaluated with
:func:`~relaxpack.ops.evaluate.evaluate_call` -- the very kernel the VM
would run -- and becomes ``lv = R.const(...)``; uses of ``lv`` see the
constant, so chains fold in one run. A tuple result (``split``) becomes a
tuple of constants and indexing it gives the constant.

Folding never bloats the archive: a result is folded only when it has at
most ``max(limit, elements of the constant inputs)`` elements, where
``limit`` is ``PassContext.config["fold_constant.max_elements"]``
(default :data:`FOLD_MIN_ELEMENTS`). So ``broadcast_to``/``tile`` of a small
constant into a big tensor stays a call, while a transpose of a weight folds.

Not folded: impure calls, ops whose cost the input values can make unbounded
(``OpDef.foldable``: a regular expression's backtracking), ops without a DPS
kernel (data-dependent shapes),
results with symbolic shapes, calls whose kernel fails on the constants
(the failure is left for run time, where it names the binding). The folded
bindings stay (unused) for DeadCodeElimination; the function's returned
vars stay vars.

>>> with PassContext(config={"fold_constant.max_elements": 1 << 16}):   # doctest: +SKIP
...     mod = fold_constant(mod)
"""

from __future__ import annotations

import logging

from ..ir.block_builder import BlockBuilder, is_pure_expr
from ..ir.expr import Call, Constant, Expr, Op, PrimValue, SeqExpr, ShapeExpr, Tuple, TupleGetItem, Var, identical
from ..ir.visitor import ExprMutator
from ..ops.registry import get_op_def
from ..ir.well_formed import function_analyzer
from ..runtime.kernels import KERNELS
from .core.rules import Rule, apply_rules
from ..ops.evaluate import evaluate_call, output_size
from .core.infra import function_pass

log = logging.getLogger(__name__)

#: Results up to this many elements fold even when larger than their inputs.
FOLD_MIN_ELEMENTS = 1024
CONFIG_KEY = "fold_constant.max_elements"


def is_constant(expr: Expr) -> bool:
    """A value known at compile time: a Constant, a static shape, a number, a tuple of those."""
    if isinstance(expr, Constant):
        return True
    if isinstance(expr, ShapeExpr):
        return all(isinstance(v, int) for v in expr.values)
    if isinstance(expr, PrimValue):
        return isinstance(expr.value, (int, float, bool))
    if isinstance(expr, Tuple):
        return all(is_constant(f) for f in expr.fields)
    return False


def constant_elements(expr: Expr) -> int:
    """Elements of the tensor constants in ``expr`` (shapes and numbers count nothing)."""
    if isinstance(expr, Constant):
        return int(expr.data.size)
    if isinstance(expr, Tuple):
        return sum(constant_elements(f) for f in expr.fields)
    return 0


def fold_limit(call: Call, min_elements: int) -> int:
    """The most elements a folded result of ``call`` may have."""
    return max(min_elements, sum(constant_elements(a) for a in call.args))


def _check_fold(call: Call, min_elements: int) -> str | None:
    if not isinstance(call.op, Op):
        return "the callee is not an op"
    if not is_pure_expr(call):
        return f"R.{call.op.name} is impure"
    if not get_op_def(call.op).foldable:
        return f"R.{call.op.name}'s cost depends on its input values without bound (it runs at run time only)"
    kernel = KERNELS.get(call.op.name)
    if kernel is None or not kernel.dps:
        return f"R.{call.op.name} has no destination-passing kernel"
    for i, arg in enumerate(call.args):
        if not is_constant(arg):
            return f"argument {i} is not a constant"
    size = output_size(call.struct_info)
    if size is None:
        return f"the result {call.struct_info} has no static shape"
    limit = fold_limit(call, min_elements)
    if size > limit:
        return f"the result has {size} elements, more than the limit {limit} (it would bloat the archive)"
    return None


def _to_expr(value) -> Expr:
    if isinstance(value, tuple):
        return Tuple(tuple(_to_expr(v) for v in value))
    return Constant(value)


def _fold(call: Call, min_elements: int) -> Expr | None:
    try:
        value = evaluate_call(call, fold_limit(call, min_elements))
    except Exception as err:  # the kernel rejects the constants: an error for run time
        log.debug("not folding R.%s: its kernel fails on the constants: %s", call.op.name, err)
        return None
    return None if value is None else _to_expr(value)


def _check_constant_tuple(item: TupleGetItem, env) -> str | None:
    return None if isinstance(item.tuple_value, Tuple) and is_constant(item.tuple_value) \
        else "the tuple is not a constant"


def fold_rules(min_elements: int) -> tuple[Rule, ...]:
    """The rules of FoldConstant for a size floor of ``min_elements``."""
    return (
        Rule("FoldCall", lambda e: isinstance(e, Call),
                    lambda call, env: _check_fold(call, min_elements),
                    lambda call, env: _fold(call, min_elements)),
        Rule("FoldTupleGetItem", lambda e: isinstance(e, TupleGetItem),
                    _check_constant_tuple, lambda item, env: item.tuple_value.fields[item.index]),
    )


class _Folder(ExprMutator):
    def __init__(self, func, min_elements: int):
        super().__init__(BlockBuilder(analyzer=function_analyzer(func)))
        self.rules = fold_rules(min_elements)
        self.known: dict[Var, Expr] = {}   # var -> the constant it is bound to
        self._in_body = False

    def visit_var_(self, var: Var) -> Expr:
        var = super().visit_var_(var)
        if self._in_body:   # the function returns vars, not constants: keep the names
            return var
        return self.known.get(var, var)

    def visit_seq_expr_(self, seq: SeqExpr) -> SeqExpr:
        # as ExprMutator's, but the result expression keeps its vars
        self.builder.begin_scope()
        blocks = [b for b in (self.visit_binding_block(block) for block in seq.blocks) if b.bindings]
        saved, self._in_body = self._in_body, True
        body = self.visit_expr(seq.body)
        self._in_body = saved
        new_seq = self.builder.end_scope(body)
        if identical(blocks, seq.blocks) \
                and new_seq.body is seq.body:
            return seq
        return SeqExpr(tuple(blocks), new_seq.body)

    def visit_tuple_getitem_(self, item: TupleGetItem) -> Expr:
        # also where a call takes ``t[i]`` as an argument directly
        item = super().visit_tuple_getitem_(item)
        folded = apply_rules(self.rules, item, None)
        return item if folded is None else folded

    def visit_var_binding_(self, binding) -> None:
        value = self.visit_expr(binding.value)
        if value is not binding.value:
            value = self.builder.normalize(value)
        folded = apply_rules(self.rules, value, None) if not is_constant(value) else value
        if folded is not None and folded is not value:
            log.debug("folded %s", binding.var.name_hint)
            value = self.builder.normalize(folded)
        if is_constant(value):
            self.known[binding.var] = value
        if value is binding.value:
            self.builder.emit_binding(binding)
        else:
            var = self._updated_var(binding.var, value.struct_info)
            if var is not binding.var and is_constant(value):
                self.known[var] = value
            self.builder.emit_binding(binding.replace(var=var, value=value))


@function_pass(name="FoldConstant", opt_level=1, requires=("import", "optimize"), produces="optimize")
def fold_constant(func, mod, ctx):
    min_elements = int(ctx.config.get(CONFIG_KEY, FOLD_MIN_ELEMENTS))
    return _Folder(func, min_elements).visit_expr(func)


__all__ = ["FOLD_MIN_ELEMENTS", "CONFIG_KEY", "fold_constant", "is_constant", "constant_elements"]
