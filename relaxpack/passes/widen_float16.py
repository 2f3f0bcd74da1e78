"""float16 fused chains computed in float32, rounded once where the chain's value leaves it.

onnxruntime's CPU provider has no float16 kernel for most elementwise ops:
it casts their inputs to float32, and its cast transformer removes the
float32 -> float16 -> float32 pairs between two such nodes, so a chain of
them (``MatMul -> Add -> Tanh``, the Erf form of GELU) runs in float32 and
rounds once, at its end (bit for bit, measured: docs/design-notes.md). numpy's
float16 loops convert every element on its own, 5-30x slower than float32.

:func:`widen_float16` rewrites a fused recipe the same way: its float16
arithmetic steps (:data:`WIDENED`, and a leading ``matmul`` /
``permute_matmul`` with ``out_dtype="float32"``) compute in float32; a
float16 input is cast up once where a widened step first reads it; a
rounding cast ``astype(float16)`` of a float32 value that only widened steps
read is dropped (the float32 value goes on), an ``astype(float32)`` of a
widened value is that value; a step that stays float16 (a comparison, a
cast to an integer) reads its widened input rounded to float16; the result
is rounded once at the end. Recipes with fewer than two widened steps are
left alone (each op's kernel already computes in float32 and rounds once).
"""

from __future__ import annotations

from typing import Sequence

from ..ir.struct_info import TensorStructInfo
from ..ops.definitions.fused_elementwise import same_shape

F16, F32 = "float16", "float32"

#: float16 elementwise ops whose float32 kernel is the same function of the float32 values
WIDENED = frozenset({
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "negative", "abs", "exp",
    "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "erf", "sin", "cos", "square", "where",
    "nn.relu", "nn.gelu", "nn.silu", "nn.leakyrelu", "nn.softplus", "nn.hard_sigmoid", "nn.hard_swish", "clip",
})
#: producers that may write their float32 product (``out_dtype``) for the chain
PRODUCERS = frozenset({"matmul", "permute_matmul"})


def widen_float16(recipe: tuple, params: Sequence[TensorStructInfo], result: TensorStructInfo) -> tuple:
    """``recipe`` with its float16 arithmetic in float32 (see the module docstring), or ``recipe``
    itself when it has fewer than two float16 steps to widen. ``params``: the struct infos of the
    call's arguments; ``result``: the call's."""
    widened = [_widens(j, step) for j, step in enumerate(recipe)]
    if sum(widened) < 2:
        return recipe
    readers: dict[int, list[int]] = {}
    for j, step in enumerate(recipe):
        for kind, i in step[1]:
            if kind == "s":
                readers.setdefault(i, []).append(j)
    out: list[tuple] = []
    wide: dict[tuple, tuple] = {}      # an old value -> its float32 value in the new recipe
    narrow: dict[tuple, tuple] = {}    # an old value -> its value in the new recipe at its own dtype
    fulls = {("p", i): same_shape(p, result) for i, p in enumerate(params)}

    def emit(step) -> tuple:
        out.append(step)
        return ("s", len(out) - 1)

    def as_wide(ref: tuple) -> tuple:
        if ref not in wide:            # a float16 parameter or step: cast up once
            wide[ref] = emit(("astype", (narrow[ref],), (("dtype", F32),), F32, fulls[ref], (False,)))
        return wide[ref]

    def as_narrow(ref: tuple) -> tuple:
        if ref not in narrow:          # a widened value read by a float16 step: round it
            narrow[ref] = emit(("astype", (wide[ref],), (("dtype", F16),), F16, fulls[ref], (False,)))
        return narrow[ref]

    for i, p in enumerate(params):
        (wide if p.dtype == F32 else narrow)[("p", i)] = ("p", i)
    last = len(recipe) - 1
    for j, (op, inputs, attrs, dtype, full, inplace) in enumerate(recipe):
        me = ("s", j)
        fulls[me] = full
        if widened[j]:
            if op in PRODUCERS:       # the first step: it reads parameters, of any dtype
                args, attrs = tuple(inputs), tuple((k, F32 if k == "out_dtype" else v) for k, v in attrs)
            else:
                args = tuple(as_wide(r) if _float16(r, recipe, params) else narrow.get(r, wide.get(r))
                             for r in inputs)
            wide[me] = emit((op, args, attrs, F32, full, inplace))
        elif j < last and _drops_rounding(op, attrs, inputs, wide, readers.get(j, ()), widened):
            wide[me] = wide[inputs[0]]
        elif op == "astype" and dict(attrs).get("dtype") == F32 and inputs[0] in wide \
                and all(widened[k] for k in readers.get(j, ())):
            wide[me] = wide[inputs[0]]              # (the last step too: the float32 value is the result)
        else:
            args = tuple(as_narrow(r) if r in wide and r not in narrow and _float16(r, recipe, params)
                         else narrow.get(r, wide.get(r)) for r in inputs)
            narrow[me] = emit((op, args, attrs, dtype, full, inplace))
            if dtype == F32:
                wide[me] = narrow[me]
    final, dtype = ("s", last), recipe[last][3]
    if final not in narrow and not (dtype == F32 and wide[final] == ("s", len(out) - 1)):
        emit(("astype", (wide[final],), (("dtype", dtype),), dtype, True, (False,)))    # rounded once, into out
    return tuple(out)


def _widens(j: int, step: tuple) -> bool:
    op, _, attrs, dtype, _, _ = step
    if dtype != F16:
        return False
    if op in PRODUCERS:
        return j == 0 and dict(attrs).get("out_dtype") is None
    return op in WIDENED


def _float16(ref: tuple, recipe: tuple, params) -> bool:
    kind, i = ref
    return (params[i].dtype if kind == "p" else recipe[i][3]) == F16


def _drops_rounding(op: str, attrs: tuple, inputs: tuple, wide: dict, readers, widened) -> bool:
    """A cast to float16 of a float32 value that only widened steps read: those read the float32 value."""
    return (op == "astype" and dict(attrs).get("dtype") == F16 and inputs[0] in wide and bool(readers)
            and all(widened[k] for k in readers))


__all__ = ["widen_float16", "WIDENED"]
