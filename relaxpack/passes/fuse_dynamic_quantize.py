"""FuseDynamicQuantize: a DynamicQuantizeLinear read by an integer product in one kernel call.

The importer writes DynamicQuantizeLinear as its scalars and a quantizer chain; MatMulInteger
then takes the zero point off the quantized operand in float32 (``converters/quantize.py``)::

    p = R.dynamic_quantize_params(x)
    s = p[0]
    z = p[1]
    c = R.clip(R.add(R.round(R.divide(x, s)), z), min=0.0, max=255.0, saturate_nan=True)
    y = R.subtract(c, R.astype(R.astype(z, dtype="uint8"), dtype="float32"))

Three kernel calls (the scalars, the zero point's cast, the fused chain), ~9 us on a BERT-sized
activation. Where the chain's steps are used only by the next, ``p`` becomes
``R.dynamic_quantize(x)``, whose third item is ``y``: one call making the same numpy calls in the
same order (``runtime/kernels/quantize.py``), bit for bit the chain's. Runs at -O2 after
TabulateIntegerFunctions (the analyses up to there read ``dynamic_quantize_params``); the
DeadCodeElimination after it drops the chain. The products' scales ``multiply(s, c)`` of the scale
by a float32 constant (each weight's scale) were one scalar kernel call each: they become further
items of ``dynamic_quantize`` (its ``scales`` attribute), the same float32 products. Where
nothing reads the sign of ``y``'s zeros (:func:`~.analysis.float_values.sign_readers`: the
product's result reaches only casts to integers, compares, sums with a constant without -0.0, or
ops that pass zero signs on to such readers), the call says ``any_zero_sign=True`` and the kernel
clips ``round(x / s)`` to ``[-z, 255 - z]`` instead of adding and taking off the zero point: two
numpy calls fewer, and -0.0 where the chain makes +0.0.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, Constant, Function, SeqExpr, TupleGetItem, Var, VarBinding
from ..ops.registry import make_call
from .analysis.float_values import Definitions, sign_readers
from .core.infra import function_pass
from .dead_code_elimination import count_uses


def _chain(y: Var, defs: Definitions, uses: Counter) -> Var | None:
    """The ``dynamic_quantize_params`` var ``p`` whose chain (module docstring) ``y`` ends, its
    steps read once each, else None."""
    call = defs.calls.get(y)
    if call is None or call.op.name != "subtract":
        return None
    c, zero_point = call.args
    clip = _step(c, "clip", defs, uses)
    if clip is None or (clip.attrs["min"], clip.attrs["max"], clip.attrs["saturate_nan"]) != (0.0, 255.0, True):
        return None
    add = _step(clip.args[0], "add", defs, uses)
    widened = _step(zero_point, "astype", defs, uses)
    narrowed = None if widened is None else defs.get(widened.args[0])
    if add is None or narrowed is None or narrowed.op.name != "astype" or narrowed.attrs["dtype"] != "uint8" \
            or widened.attrs["dtype"] != "float32":
        return None
    p = _params_of(narrowed.args[0], 1, defs)
    for r, z in (add.args, add.args[::-1]):
        rounded = _step(r, "round", defs, uses)
        quotient = None if rounded is None else _step(rounded.args[0], "divide", defs, uses)
        if p is None or quotient is None or _params_of(z, 1, defs) is not p:
            continue
        if _params_of(quotient.args[1], 0, defs) is p and defs.resolve(quotient.args[0]) is \
                defs.resolve(defs.calls[p].args[0]):
            return p if defs.block[p] == defs.block[y] else None
    return None


def _step(expr, op: str, defs: Definitions, uses: Counter) -> Call | None:
    """The ``op`` call bound to ``expr``, a var read once, else None."""
    call = defs.calls.get(expr) if isinstance(expr, Var) else None
    return call if call is not None and call.op.name == op and uses[expr] == 1 else None


def _params_of(expr, index: int, defs: Definitions) -> Var | None:
    """``p`` when ``expr`` is ``p[index]`` of ``p = dynamic_quantize_params(x)``, else None."""
    item = defs.items.get(defs.resolve(expr)) if isinstance(expr, Var) else None
    if item is None or item[1] != index:
        return None
    call = defs.calls.get(item[0])
    return item[0] if call is not None and call.op.name == "dynamic_quantize_params" else None


def _items_only(p: Var, func: Function, uses: Counter) -> bool:
    """Whether ``p`` is read only as ``v = p[i]`` bindings at the top level."""
    items = sum(1 for block in func.body.blocks for b in block.bindings
                if isinstance(b, VarBinding) and isinstance(b.value, TupleGetItem) and b.value.tuple_value is p)
    return items == uses[p]


def _scale_products(func: Function, defs: Definitions, fused: dict) -> dict[Var, list[tuple[Var, float]]]:
    """For each fused ``p``: the top-level ``v = multiply(s, c)`` (either order) of its scale
    ``s = p[0]`` by a float32 0-d constant ``c`` in ``p``'s block (a product's scale, ``y_scale *
    w_scale``), as ``(v, c)``: the kernel makes them as further items."""
    found: dict[Var, list[tuple[Var, float]]] = {}
    for var, call in defs.calls.items():
        if call.op.name != "multiply" or len(call.args) != 2 or getattr(var.struct_info, "dtype", None) != "float32":
            continue
        for s, c in (call.args, call.args[::-1]):
            p = _params_of(s, 0, defs)
            if p in fused and isinstance(c, Constant) and c.data.dtype == np.float32 and c.data.ndim == 0 \
                    and defs.block[var] == defs.block[p] and getattr(var.struct_info, "ndim", None) == 0:
                found.setdefault(p, []).append((var, float(c.data)))
                break
    return found


@function_pass(name="FuseDynamicQuantize", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fuse_dynamic_quantize(func, mod, ctx):
    """``dynamic_quantize_params`` and the quantizer chain an integer product reads as one
    ``dynamic_quantize`` (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs, uses = Definitions(func), count_uses(func.body)
    fused: dict[Var, Var] = {}      # p -> the chain's end y
    for block in func.body.blocks:
        for b in block.bindings:
            p = _chain(b.var, defs, uses) if isinstance(b, VarBinding) else None
            if p is not None and p not in fused and _items_only(p, func, uses):
                fused[p] = b.var
    if not fused:
        return func
    products, reading = _scale_products(func, defs, fused), sign_readers(func)
    calls = {p: BlockBuilder().normalize(make_call("dynamic_quantize", defs.calls[p].args[0],
                                                   scales=tuple(c for _, c in products.get(p, ())),
                                                   any_zero_sign=y not in reading))
             for p, y in fused.items()}
    tuples = {p: type(p)(p.name_hint, call.struct_info) for p, call in calls.items()}
    ends = {y: p for p, y in fused.items()}
    items = {var: (p, 3 + k) for p, found in products.items() for k, (var, _) in enumerate(found)}
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            value = b.value
            if b.var in tuples:
                bindings.append(VarBinding(tuples[b.var], calls[b.var], span=b.span))
                continue
            if b.var in items:
                value = TupleGetItem(tuples[items[b.var][0]], items[b.var][1])
            elif b.var in ends:
                value = TupleGetItem(tuples[ends[b.var]], 2)
            elif isinstance(value, TupleGetItem) and value.tuple_value in tuples:
                value = TupleGetItem(tuples[value.tuple_value], value.index)
            bindings.append(b if value is b.value else VarBinding(b.var, value, span=b.span))
        blocks.append(type(block)(tuple(bindings)))
    return func.replace(body=func.body.replace(blocks=tuple(blocks)))


__all__ = ["fuse_dynamic_quantize"]
