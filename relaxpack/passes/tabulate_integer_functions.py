"""TabulateIntegerFunctions: an elementwise chain of a value with few integer values becomes a table look-up.

A quantized model runs float ops between a dequantizer and a quantizer; where
their input is a quantized value (``q = clip(round(x / s), -126, 129)``: 256
integers) and the ops between take nothing else (one-element constants
aside), the chain's result is a function of ``q`` alone::

    y = clip(round(gelu(q * s1) / s2), lo, hi)        # ~20 steps, erf's 35 passes
    ->
    y = take(T, astype(q + 126, int64))               # T: the chain on -126..129

``T`` is the same chain evaluated at conversion by the kernels the VM runs
(:func:`~relaxpack.ops.evaluate.evaluate_call`), on every integer of ``q``'s
range (:func:`~.analysis.float_values.value_range`: a NaN-saturating clip,
an integer type and constant shifts of those), so each element is what the
chain computes for it: the same bits where the kernels compute elementwise
(numpy's ufuncs and relaxpack's compositions of them do). A ``q`` that may be
-0.0 (``round(-0.3)``) looks up the +0.0 entry: the chain is also evaluated at
-0.0, and must give that entry's bits, or a zero of the other sign where
nothing reads the result's zero sign (:func:`~.analysis.float_values.sign_readers`). The float32
transcendental ufuncs (exp, tanh...) are numpy's, which may differ by an ulp
between numpy builds and CPUs: the table holds the converting machine's,
the chain would compute the running machine's.

A chain is tabulated when its elementwise passes cost at least
:data:`MIN_COST` adds (a look-up costs ~10-12 on large arrays) and ``q`` has at
most :data:`MAX_TABLE` values. BERT's
quantized GELU (QDQ and QOperator) is the case met in the zoo.
"""

from __future__ import annotations

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, Constant, DataflowBlock, DataflowVar, Function, SeqExpr, Var, VarBinding
from ..ir.op import make_call
from ..ir.visitor import ExprVisitor
from ..ops.evaluate import evaluate_call
from ..runtime.dtypes import numpy_dtype
from .analysis.float_values import Definitions, integer_valued, never_negative_zero, sign_readers, value_range
from .core.infra import function_pass
from .drop_zero_sign_round_trips import share_clips

#: the most values a tabulated input may have
MAX_TABLE = 1024
#: the least cost (in elementwise passes, :data:`ELEMENTWISE`) a chain must have to be worth a table:
#: numpy's take costs ~1.3 ns a value on large arrays (16 int64 index bytes read per value at
#: random), ~7x a float32 add, and the index takes a cast and maybe a subtract
MIN_COST = 20
#: elementwise ops a chain may hold (each element's result depends on that element alone), with
#: their cost in passes over the data (erf and GELU in float32 are compositions of ~35-40)
ELEMENTWISE = {
    "add": 1, "subtract": 1, "multiply": 1, "divide": 1, "round": 1, "clip": 2, "astype": 1, "negative": 1,
    "abs": 1, "floor": 1, "ceil": 1, "maximum": 1, "minimum": 1, "sqrt": 1, "nn.relu": 1,
    "exp": 3, "tanh": 4, "sigmoid": 5, "nn.silu": 6, "erf": 35, "nn.gelu": 40,
    "take": 10,     # from a constant 1-D table (QLinearSigmoid's), by an index of the chain
}


def _source(expr, defs: Definitions) -> tuple[float, float] | None:
    """The integer range of ``expr`` when it can be a table's input, else None."""
    bounds = value_range(expr, defs)
    if bounds is None or not integer_valued(expr, defs) or bounds[1] - bounds[0] + 1 > MAX_TABLE:
        return None
    if getattr(expr.struct_info, "ndim", -1) < 0 or getattr(expr.struct_info, "dtype", None) is None:
        return None
    return bounds


def _chains(bindings, defs: Definitions) -> dict[Var, Var]:
    """For each var computed elementwise from one table input alone (and one-element constants):
    that input."""
    source: dict[Var, Var] = {}
    sources: dict[Var, bool] = {}
    for b in bindings:
        call = defs.calls.get(b.var)
        if call is None or call.op.name not in ELEMENTWISE:
            continue
        found, ok = set(), True
        table = call.op.name == "take" and isinstance(call.args[0], Constant) and call.args[0].data.ndim == 1
        if call.op.name == "take" and not table:
            continue
        for i, arg in enumerate(call.args):
            if isinstance(arg, Constant):
                ok &= arg.data.size == 1 or (table and i == 0)
            elif isinstance(arg, Var):
                arg = defs.resolve(arg)
                found.add(source.get(arg, arg))
            else:
                ok = False
        if ok and len(found) == 1:
            q = found.pop()
            if q not in sources:
                sources[q] = _source(q, defs) is not None
            if sources[q]:
                if getattr(b.var.struct_info, "ndim", -2) == getattr(q.struct_info, "ndim", -1):
                    source[b.var] = q
    return source


def _closure(v: Var, q: Var, defs: Definitions, source: dict) -> list[Var]:
    """The chain's vars that ``v`` is computed from, in binding order (``v`` last)."""
    seen, order = set(), []

    def visit(x):
        if x is q or x in seen or source.get(x) is not q:
            return
        seen.add(x)
        for arg in defs.calls[x].args:
            if isinstance(arg, Var):
                visit(defs.resolve(arg))
        order.append(x)

    visit(v)
    return order


def _evaluate(chain: list[Var], q: Var, points: np.ndarray, defs: Definitions) -> np.ndarray | None:
    """The chain evaluated at ``points`` (values of ``q``) by the VM's kernels, or None."""
    builder = BlockBuilder()
    values = {q: Constant(points.astype(numpy_dtype(q.struct_info.dtype)))}
    for x in chain:
        call = defs.calls[x]
        args = [values.get(defs.resolve(a), a) for a in call.args]
        try:
            value = evaluate_call(builder.normalize(Call(call.op, tuple(args), call.attrs)), points.size)
        except Exception:  # noqa: BLE001 - a kernel refuses some value (a take out of range): no table
            return None
        if value is None:
            return None
        values[x] = Constant(value)
    return values[chain[-1]].data


def _table(chain: list[Var], q: Var, lo: float, hi: float, defs: Definitions, sign_free: bool) -> np.ndarray | None:
    """The chain on every integer of ``[lo, hi]``, or None. Where ``q`` may be -0.0 the chain's
    result there must be the table's at +0.0, or differ from it in a zero's sign only and
    ``sign_free`` (nothing reads the result's zero sign)."""
    table = _evaluate(chain, q, np.arange(lo, hi + 1), defs)
    if table is None or not lo <= 0 <= hi or never_negative_zero(q, defs):
        return table
    at_minus_zero = _evaluate(chain, q, np.array([-0.0]), defs)
    at_zero = table[int(-lo)]
    if at_minus_zero is None:
        return None
    same = at_minus_zero.view(np.uint8).tobytes() == at_zero.tobytes()
    zeros = table.dtype.kind == "f" and at_minus_zero[0] == 0 == at_zero
    return table if same or (sign_free and zeros) else None


def _read_outside(func: Function, source: dict, defs: Definitions) -> set[Var]:
    """The chain vars read by something other than a call of their own chain (another op, a
    tuple, the function's result), through aliases."""
    used: set[Var] = set()
    for b in (b for block in func.body.blocks for b in block.bindings):
        if isinstance(b.value, Var):          # an alias: its own uses are looked at through it
            continue
        if not isinstance(b.value, Call):
            used |= {defs.resolve(v) for v in _vars_in(b.value)}
            continue
        same = source.get(b.var)
        for a in b.value.args:
            if isinstance(a, Var):
                a = defs.resolve(a)
                if a in source and source[a] is not same:
                    used.add(a)
            elif not isinstance(a, Constant):
                used |= {defs.resolve(v) for v in _vars_in(a)}
    used |= {defs.resolve(v) for v in _vars_in(func.body.body)}
    return used & source.keys()


class _Vars(ExprVisitor):
    def __init__(self):
        self.found: set[Var] = set()

    def visit_var_(self, var: Var) -> None:
        self.found.add(var)


def _vars_in(expr) -> set[Var]:
    """The vars ``expr`` reads."""
    visitor = _Vars()
    visitor.visit_expr(expr)
    return visitor.found


@function_pass(name="TabulateIntegerFunctions", opt_level=2, requires=("import", "optimize"), produces="optimize")
def tabulate_integer_functions(func, mod, ctx):
    """Replace elementwise chains of a few-valued integer input by a look-up (see the module
    docstring); with a value clipped twice clipped once (:func:`.share_clips`) where that makes
    more look-ups (QLinearSigmoid's index and QLinearMul's operand: SiLU)."""
    if not isinstance(func.body, SeqExpr):
        return func
    plain, tables = _tabulated(func)
    shared, more = _tabulated(share_clips(func))
    return shared if more > tables else plain


def _tabulated(func: Function) -> tuple[Function, int]:
    """``func`` with its chains looked up, and how many."""
    defs = Definitions(func)
    bindings = [b for block in func.body.blocks for b in block.bindings]
    source = _chains(bindings, defs)
    if not source:
        return func, 0
    replace: dict[Var, tuple] = {}
    outside, reading = _read_outside(func, source, defs), sign_readers(func)
    for v in (v for v in source if v in outside):
        q = source[v]
        chain = _closure(v, q, defs, source)
        if sum(ELEMENTWISE[defs.calls[x].op.name] for x in chain) < MIN_COST or not defs.visible(q, v):
            continue
        lo, hi = _source(q, defs)
        table = _table(chain, q, lo, hi, defs, v not in reading)
        if table is not None:
            replace[v] = (q, lo, table)
    if not replace:
        return func, 0
    blocks = []
    for block in func.body.blocks:
        out, positions = [], {}
        for b in block.bindings:
            if b.var in replace:
                out.extend(_look_up(b, *replace[b.var], isinstance(block, DataflowBlock), positions))
            else:
                out.append(b)
        blocks.append(type(block)(tuple(out)))
    body = SeqExpr(tuple(blocks), func.body.body, struct_info=func.body.struct_info)
    return Function(func.params, body, func.ret_struct_info, func.is_pure, func.attrs), len(replace)


def _look_up(binding: VarBinding, q: Var, lo: float, table: np.ndarray, dataflow: bool,
             positions: dict) -> list[VarBinding]:
    """``var = take(table, astype(q - lo, int64))`` as bindings; the index is made once per ``(q, lo)``
    in a block (``positions``: a SiLU's sigmoid and product, a pool's sum read one value)."""
    builder, kind = BlockBuilder(), DataflowVar if dataflow else Var
    position = positions.get((q, lo))
    if position is not None:
        look_up = builder.normalize(make_call("take", Constant(table), position, axis=0, in_bounds=True))
        return [VarBinding(binding.var, look_up, span=binding.span)]
    out, index = [], q
    if lo != 0:
        shift = Constant(np.array(lo, dtype=numpy_dtype(q.struct_info.dtype)))
        value = builder.normalize(make_call("subtract", q, shift))
        index = kind(f"{binding.var.name_hint}_shifted", value.struct_info)
        out.append(VarBinding(index, value, span=binding.span))
    value = builder.normalize(make_call("astype", index, dtype="int64"))   # numpy's take reads intp
    position = kind(f"{binding.var.name_hint}_index", value.struct_info)
    out.append(VarBinding(position, value, span=binding.span))
    positions[(q, lo)] = position
    # (q is within [lo, hi] (value_range): every position is in the table)
    look_up = builder.normalize(make_call("take", Constant(table), position, axis=0, in_bounds=True))
    out.append(VarBinding(binding.var, look_up, span=binding.span))
    return out


__all__ = ["tabulate_integer_functions", "MAX_TABLE", "MIN_COST"]
