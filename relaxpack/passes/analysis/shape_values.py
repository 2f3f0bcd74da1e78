"""Which kernel outputs are functions of the input shapes alone (a causal mask from two
ranges, rotary tables from positions made by ``range``): PlanMemory gives them memory of
their own (an ``alloc_tensor`` with no arena buffer), so the compiled function's shape memo
(runtime/shape_memo.py) can compute them once per input shape and keep them.

A value is shape-only when it is bound, at the function's top level, to a ``call_tir`` of a
deterministic kernel (``runtime.shape_memo.MEMO_KERNELS``, the ones the memo runs) whose
arguments are constants, prim values, shapes or other shape-only values, at least one of
them symbolic (constants alone are FoldConstant's), and a ``match_cast`` of one (the
range of a shape cast to float asserts its bound). Tensors read from a parameter never are.
"""

from __future__ import annotations

from ...ir.expr import Call, Constant, ExternFunc, MatchCast, PrimValue, ShapeExpr, Tuple, Var
from ...runtime.shape_memo import MEMO_KERNELS



def shape_only_vars(body) -> set:
    """The vars of ``body``'s top-level bindings whose values are shape-only (the module doc)."""
    shape_only: set = set()
    for block in getattr(body, "blocks", ()):
        for b in block.bindings:
            call = b.value
            if isinstance(b, MatchCast) and isinstance(call, Var) and call in shape_only:
                shape_only.add(b.var)      # a cast that asserts dims (a range's bound) is the value itself
                continue
            if not (isinstance(call, Call) and getattr(call.op, "name", None) == "call_tir"):
                continue
            callee, args = call.args[:2]
            if not (isinstance(callee, ExternFunc) and callee.global_symbol in MEMO_KERNELS
                    and isinstance(args, Tuple) and all(_shape_only(a, shape_only) for a in args.fields)
                    and not all(_constant(a) for a in args.fields)):
                continue
            shape_only.add(b.var)
    return shape_only


def _constant(expr) -> bool:
    """A constant, or a prim value or shape of no symbolic dim."""
    if isinstance(expr, Tuple):
        return all(_constant(f) for f in expr.fields)
    if isinstance(expr, PrimValue):
        return isinstance(expr.value, (int, float, bool))
    if isinstance(expr, ShapeExpr):
        return all(isinstance(d, int) for d in expr.values)
    return isinstance(expr, Constant)


def _shape_only(expr, known: set) -> bool:
    if isinstance(expr, (Constant, PrimValue, ShapeExpr)):
        return True
    if isinstance(expr, Tuple):
        return all(_shape_only(f, known) for f in expr.fields)
    return isinstance(expr, Var) and expr in known
