"""WidenLookUpTables: a look-up index's clip taken into a table that covers the index's whole range.

A quantized value read through a table (QLinearSigmoid's, TabulateIntegerFunctions' look-ups)
is requantized first, ``q = clip(round(y) + z, lo, hi)``, then looked up,
``take(C, astype(q, I))``: the clip is a pass over the value (numpy's float32 clip ~0.14 ns a
value, 71k values ~10 us; EfficientNet QOperator has 25 such look-ups), there only to keep the
index within the table. Where :func:`~.analysis.magnitude.magnitude_bound` bounds ``|round(y)|``
by ``B`` (a requantized exact conv: a few hundred to a few thousand), the table can hold the
clip instead: with ``K`` an integer above ``B`` and the float rounding of ``y``'s operations
(:data:`MARGIN`), ``W[k] = C[clip(k - K + z, lo, hi)]`` for ``k`` in ``[0, 2K]``, and the look-up is
``take(W, astype(round(y) + K, I))``. ``round(y)`` is an integer in ``[-K, K]`` (finite: the bound
proves it), so ``round(y) + K`` is exact and in ``[0, 2K]`` and ``W`` at it is ``C`` at
``clip(round(y) + z, lo, hi)``: the same element (a zero's sign is dropped by the integer cast
either way). The index stays non-negative (numpy's ``take`` of a negative index in its
bounds-free ``"wrap"`` mode is ~6x slower: rotating the table by ``z`` and dropping the add
instead measured 1.13-1.15x EfficientNet's time). An ``int64`` index is cast through ``int32``
(NarrowIndexCasts' form, which its range analysis would not find through the add).

Applies where the add, the clip and the index are read only along this chain (every reader of
the index such a look-up of a 1-d table: each gets its own widened table), the clip's bounds
are integers within the table, ``2K + 1`` is at most :data:`MAX_ENTRIES` and the float type and
the cast's integer type hold ``2K + |z|``. Runs at -O2 after ShareLookUps (which compares the
tables of one index) and before NarrowIndexCasts and DropNaNSaturation.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, Constant, DataflowBlock, SeqExpr, Var, VarBinding
from ..ir.op import make_call
from .analysis.float_values import Definitions
from .analysis.magnitude import magnitude_bound
from .core.infra import function_pass
from .dead_code_elimination import count_uses
from .narrow_index_casts import through_int32

#: the largest widened table (entries): 64 KB of float32, beside the activations in cache
MAX_ENTRIES = 1 << 14
#: the bound's relative slack: magnitude_bound bounds the exact values, and a float conv's rounded
#: partial sums stay within ``1 + K * 2**-24`` of the sum of absolute products (a reduction of
#: up to 2**20 terms; an exact conv's are not rounded at all)
MARGIN = 2 ** -4
#: float types and the largest integer magnitude up to which they hold every integer
_FLOAT_EXACT = {"float16": 2 ** 11, "float32": 2 ** 24, "float64": 2 ** 53}
#: an index below this magnitude is cast to int64 through int32 (NarrowIndexCasts' bound)
_INT32_SAFE = 2 ** 30


def _op(call) -> str | None:
    return getattr(getattr(call, "op", None), "name", None)


def _look_up(call) -> tuple[np.ndarray, Var] | None:
    """``(table, index)`` of a bounds-free ``take`` along axis 0 of a constant 1-d table, else None."""
    if _op(call) != "take" or len(call.args) != 2 or call.attrs.get("axis") != 0 \
            or call.attrs.get("in_bounds") is not True:
        return None
    table, index = call.args
    if not isinstance(table, Constant) or table.data.ndim != 1 or not isinstance(index, Var):
        return None
    return table.data, index


def _zero_point(add: Call) -> tuple[Var, int] | None:
    """``(r, z)`` of ``add(r, z)`` (either order) for a var ``r`` and a one-element integral
    constant ``z`` of at most ``r``'s rank (the sum has ``r``'s shape)."""
    for r, c in (add.args, add.args[::-1]):
        if isinstance(r, Var) and isinstance(c, Constant) and c.data.size == 1 and c.data.dtype.kind in "fiu" \
                and c.data.ndim <= getattr(r.struct_info, "ndim", -1):
            value = float(c.data.reshape(-1)[0])
            if math.isfinite(value) and value.is_integer():
                return r, int(value)
    return None


def _widening(index: Var, defs: Definitions, uses, takes: dict, memo: dict) -> tuple | None:
    """``(clip var, add var or None, r, z, lo, hi, K)`` when ``index = astype(clip(round(y) [+ z],
    lo, hi), I)`` may be read through widened tables (see the module docstring), else None."""
    cast = defs.calls.get(index)
    if _op(cast) != "astype" or not isinstance(cast.args[0], Var) or uses[index] != len(takes[index]):
        return None
    clip_var = cast.args[0]
    clip = defs.calls.get(clip_var)
    if _op(clip) != "clip" or uses[clip_var] != 1 or not isinstance(clip.args[0], Var):
        return None
    operand = clip.args[0]
    add = defs.calls.get(operand)
    add_var, r, z = None, operand, 0
    if _op(add) == "add":
        found = _zero_point(add)
        if found is None or uses[operand] != 1 \
                or getattr(add.struct_info, "ndim", -2) != getattr(found[0].struct_info, "ndim", -1):
            return None
        add_var, (r, z) = operand, found
    if _op(defs.calls.get(r)) != "round" or defs.block.get(r) != defs.block.get(clip_var):
        return None
    lo, hi = clip.attrs.get("min"), clip.attrs.get("max")
    rows = {table.shape[0] for table in takes[index]}
    if lo is None or hi is None or len(rows) != 1 or not (float(lo).is_integer() and float(hi).is_integer()):
        return None
    n, lo, hi = rows.pop(), int(lo), int(hi)
    bound = magnitude_bound(r, defs, memo)
    if bound is None or not 0 <= lo <= hi < n or bound > MAX_ENTRIES:
        return None
    k = math.ceil(bound * (1 + MARGIN)) + 2      # past the float rounding of y's operations
    exact = _FLOAT_EXACT.get(getattr(clip.struct_info, "dtype", None))
    dtype = cast.attrs["dtype"]
    if 2 * k + 1 > MAX_ENTRIES or exact is None or 2 * k + abs(z) > exact or np.dtype(dtype).kind not in "iu" \
            or np.iinfo(dtype).max < 2 * k:
        return None
    return clip_var, add_var, r, z, lo, hi, k


def _widened(table: np.ndarray, z: int, lo: int, hi: int, k: int) -> np.ndarray:
    """``W[j] = table[clip(j - k + z, lo, hi)]`` for ``j`` in ``[0, 2k]``."""
    return np.ascontiguousarray(table[np.clip(np.arange(2 * k + 1) - k + z, lo, hi)])


def _index(binding: VarBinding, k: int, dataflow: bool) -> list[VarBinding]:
    """The index's cast; an int64 one through int32 (see the module docstring)."""
    if binding.value.attrs["dtype"] != "int64" or 2 * k >= _INT32_SAFE:
        return [binding]
    return through_int32(binding, dataflow)


@function_pass(name="WidenLookUpTables", opt_level=2, requires=("import", "optimize"), produces="optimize")
def widen_look_up_tables(func, mod, ctx):
    """Look-up indices without their clip, the tables widened (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs = Definitions(func)
    uses = count_uses(func.body)
    takes: dict = {}
    for block in func.body.blocks:
        for b in block.bindings:
            found = _look_up(b.value) if isinstance(b, VarBinding) else None
            if found is not None:
                takes.setdefault(found[1], []).append(found[0])
    memo: dict = {}
    widenings = {index: w for index in takes if (w := _widening(index, defs, uses, takes, memo)) is not None}
    if not widenings:
        return func
    clips = {w[0]: w for w in widenings.values()}
    dropped = {w[1] for w in widenings.values() if w[1] is not None}
    builder, blocks = BlockBuilder(), []
    for block in func.body.blocks:
        out = []
        for b in block.bindings:
            if b.var in dropped:
                continue
            if b.var in clips:
                r, k = clips[b.var][2], clips[b.var][6]
                dtype = r.struct_info.dtype
                value = builder.normalize(make_call("add", r, Constant(np.array(k, dtype))))
                out.append(VarBinding(b.var, value, span=b.span))
            elif b.var in widenings:
                out.extend(_index(b, widenings[b.var][6], isinstance(block, DataflowBlock)))
            elif isinstance(b, VarBinding) and (found := _look_up(b.value)) is not None and found[1] in widenings:
                _, _, _, z, lo, hi, k = widenings[found[1]]
                table = Constant(_widened(found[0], z, lo, hi, k))
                out.append(VarBinding(b.var, builder.normalize(make_call("take", table, found[1], **b.value.attrs)),
                                      span=b.span))
            else:
                out.append(b)
        blocks.append(type(block)(tuple(out)))
    return func.replace(body=func.body.replace(blocks=tuple(blocks)))


__all__ = ["widen_look_up_tables", "MAX_ENTRIES"]
