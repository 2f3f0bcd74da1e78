"""Where a value of unknown rank comes from, in words, for error messages.

An op that needs its operand's rank and meets a value whose rank nothing
fixed says why the rank is unknown, naming the ONNX node that made it so:
an If whose branches give different ranks, an input typed without a shape,
an op whose result's rank only the run knows (a Reshape to a shape computed
at run time). The walk follows the value's bindings back through the ops
that carry an unknown rank along (elementwise ops, ``dyn.apply``, tuple
fields, If branches) to the first binding that made it.

>>> rank_origin(lv, bb.lookup_binding)                 # doctest: +SKIP
"the If node '/decoder/If' returns values of different ranks from its branches (2 and 3)"
"""

from __future__ import annotations

from typing import Callable

from .expr import Binding, Call, ExternFunc, If, Op, SeqExpr, Tuple, TupleGetItem, Var
from .struct_info import TensorStructInfo, TupleStructInfo

Lookup = Callable[[Var], "Binding | None"]


def unknown_rank(sinfo) -> bool:
    return isinstance(sinfo, TensorStructInfo) and sinfo.ndim < 0


def rank_origin(expr, lookup: Lookup) -> str:
    """Why ``expr`` (a value of unknown rank) has no rank: a sentence naming
    the ONNX node or input it comes from."""
    index: int | None = None        # the tuple field followed, when the walk is inside a tuple
    for _ in range(100_000):        # a chain of bindings is finite; this bounds a malformed one
        if isinstance(expr, TupleGetItem):
            expr, index = expr.tuple_value, expr.index
            continue
        if isinstance(expr, Tuple) and index is not None:
            expr, index = expr.fields[index], None
            continue
        if isinstance(expr, SeqExpr):
            expr = expr.body
            continue
        if not isinstance(expr, Var):
            break
        binding = lookup(expr)
        if binding is None:
            return f"{expr.name_hint!r} is typed without a shape"
        value, node = binding.value, _node(binding)
        if isinstance(value, If):
            ranks = [_rank(b.struct_info, index) for b in (value.true_branch, value.false_branch)]
            if all(r is not None and r >= 0 for r in ranks):
                return (f"the If node {node} returns values of different ranks from its branches "
                        f"({ranks[0]} and {ranks[1]})")
            expr = value.true_branch if ranks[0] is None or ranks[0] < 0 else value.false_branch
            continue
        if isinstance(value, (Var, TupleGetItem, SeqExpr)) or (isinstance(value, Tuple) and index is not None):
            expr = value
            continue
        if isinstance(value, Call):
            operand = unknown_rank_operand(value)
            if operand is not None:
                expr, index = operand, None
                continue
            return f"the node {node} gives a result whose rank only the run knows ({_callee(value)})"
        break
    return "a value whose rank nothing in the model fixes"


def _rank(sinfo, index: int | None) -> int | None:
    if index is not None:
        if not isinstance(sinfo, TupleStructInfo) or index >= len(sinfo.fields):
            return None
        sinfo = sinfo.fields[index]
    return sinfo.ndim if isinstance(sinfo, TensorStructInfo) else None


def unknown_rank_operand(call: Call):
    """The first operand of ``call`` of unknown rank (looking into tuple literals), if any."""
    for arg in call.args:
        fields = arg.fields if isinstance(arg, Tuple) else (arg,)
        for f in fields:
            if unknown_rank(f.struct_info):
                return f
    return None


def _node(binding: Binding) -> str:
    return repr(str(binding.span)) if binding.span is not None else repr(binding.var.name_hint)


def _callee(call: Call) -> str:
    if isinstance(call.op, Op) and call.op.name.startswith("call_") and call.args \
            and isinstance(call.args[0], ExternFunc):
        return call.args[0].global_symbol
    return f"R.{call.op.name}" if isinstance(call.op, Op) else type(call.op).__name__
