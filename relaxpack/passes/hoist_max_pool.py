"""HoistMaxPool: a max pool of a monotone elementwise chain pools the chain's input instead.

A quantized ResNet's stem requantizes its conv, then max-pools the quantized map: in a QDQ model
``max_pool(multiply(clip(round(y), lo, hi), s))`` (the conv's divide by the output scale folded
into its weights), four passes over the conv's map before a pool that keeps a quarter of it
(3x3/2). Each step is a non-decreasing function of its operand (``round``, ``clip``, a product
or quotient by a positive constant, a sum with a constant: IEEE rounding is monotone), so the
chain ``f`` is, and a window's largest ``f(y_i)`` is ``f`` of its largest ``y_i``:
``max_pool(f(y)) == f(max_pool(y))``, value for value, the chain then running on the pooled map.
Only a zero's sign may differ (``max(-0.0, +0.0)`` picks either, ``round(-0.3)`` is ``-0.0``), so
the rewrite is made where nothing reads it (:func:`~.analysis.float_values.sign_readers`).

Applies where ``y`` is finite (:func:`~.analysis.magnitude.magnitude_bound`: with a NaN the
pool's choice and the chain's NaN would interact), every window holds an input element (no ceil
mode: the op's padding is shorter than its dilated window), the chain's steps are float32/float64
of ``y``'s dtype, each read only by the next step (the pool last: they all go), and their other
operands one-value constants (positive and finite for a product or quotient). Runs at -O2 after
DropZeroSignRoundTrips (whose ``_pooled_back`` reads the pool of a dequantized value) and before
FuseOps, so the chain fuses on the pooled map. A QOperator stem's chain ends in a cast to uint8,
whose pool is cheaper than a float32 one: the cast is no step here, and that pool stays.
"""

from __future__ import annotations

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, DataflowBlock, DataflowVar, SeqExpr, Var, VarBinding
from ..ir.op import make_call
from .analysis.float_values import Definitions, one_value, sign_readers
from .analysis.magnitude import magnitude_bound
from .core.infra import function_pass
from .dead_code_elimination import count_uses

_FLOATS = ("float32", "float64")


def _dtype(expr) -> str | None:
    return getattr(getattr(expr, "struct_info", None), "dtype", None)


def _ndim(expr) -> int:
    return getattr(getattr(expr, "struct_info", None), "ndim", -1)


def _step_operand(call: Call):
    """The operand a monotone non-decreasing step ``call`` is a function of, else None: ``round``,
    ``clip``, ``multiply`` / ``divide`` by a positive finite one-value constant, ``add`` /
    ``subtract`` of a finite one-value constant (the constant second for the divide and subtract)."""
    name = call.op.name
    if name in ("round", "clip"):
        return call.args[0]
    if name not in ("multiply", "divide", "add", "subtract") or len(call.args) != 2:
        return None
    pairs = [call.args] if name in ("divide", "subtract") else [call.args, call.args[::-1]]
    for x, c in pairs:
        value = one_value(c)        # (finite)
        if value is None or _dtype(c) != _dtype(call) or _ndim(c) > _ndim(x) \
                or (name in ("multiply", "divide") and not value > 0):
            continue
        return x
    return None


def _chains(pool_input: Var, defs: Definitions, uses) -> list[tuple[list[Var], Var]]:
    """``(steps, y)`` for each monotone chain ending at the pool, shortest first: the steps' vars,
    last first, and the chain's input."""
    found, steps, var = [], [], pool_input
    while True:
        call = defs.calls.get(var)
        if not isinstance(call, Call) or not hasattr(call.op, "name") or uses.get(var, 0) != 1 \
                or _dtype(var) not in _FLOATS:
            return found
        operand = _step_operand(call)
        if not isinstance(operand, Var) or _dtype(operand) != _dtype(var):
            return found
        steps = [*steps, var]
        found.append((steps, operand))
        var = operand


def _hoisting(var: Var, call: Call, defs: Definitions, uses, reading: set, memo: dict):
    """``(steps, y)`` when ``var = call`` is a max pool to move before its chain (the longest
    whose input is finite), else None."""
    if call.op.name != "nn.max_pool" or call.attrs.get("ceil_mode", True) or var in reading \
            or not isinstance(call.args[0], Var):
        return None
    for steps, y in reversed(_chains(call.args[0], defs, uses)):
        if magnitude_bound(y, defs, memo) is not None:
            return steps, y
    return None


@function_pass(name="HoistMaxPool", opt_level=2, requires=("import", "optimize"), produces="optimize")
def hoist_max_pool(func, mod, ctx):
    """Max pools moved before the monotone chains they read (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs, uses, memo = Definitions(func), count_uses(func.body), {}
    reading = sign_readers(func)
    hoisted = {}
    for block in func.body.blocks:
        for b in block.bindings:
            call = defs.calls.get(b.var)
            if isinstance(b, VarBinding) and isinstance(call, Call) and call is b.value and hasattr(call.op, "name"):
                found = _hoisting(b.var, call, defs, uses, reading, memo)
                if found is not None:
                    hoisted[b.var] = found
    if not hoisted:
        return func
    dropped = {step for steps, _ in hoisted.values() for step in steps}
    builder, blocks = BlockBuilder(), []
    for block in func.body.blocks:
        make_var = DataflowVar if isinstance(block, DataflowBlock) else Var
        out = []
        for b in block.bindings:
            if b.var in dropped:
                continue
            if b.var not in hoisted:
                out.append(b)
                continue
            steps, y = hoisted[b.var]
            value = builder.normalize(make_call("nn.max_pool", y, **b.value.attrs))
            for name, step in zip([y, *reversed(steps)], reversed(steps)):
                current = make_var(f"{name.name_hint}_pooled", value.struct_info)
                out.append(VarBinding(current, value, span=b.span))
                old = defs.calls[step]
                operand = _step_operand(old)
                value = builder.normalize(make_call(old.op.name, *[current if a is operand else a for a in old.args],
                                                    **old.attrs))
            out.append(VarBinding(b.var, value, span=b.span))
        blocks.append(type(block)(tuple(out)))
    return func.replace(body=func.body.replace(blocks=tuple(blocks)))


__all__ = ["hoist_max_pool"]
