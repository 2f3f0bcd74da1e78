"""ShareLookUps: a table look-up that another one's result gives by a cast and a shift is computed so.

A quantized EfficientNet's SiLU is read twice through one index: by the squeeze-excite pool,
as integers (an int32 table of the quantized SiLU), and by the squeeze-excite product (QLinearMul),
as the same values less the zero point (a float32 table). Each ``take`` costs ~0.3 ns a value
in numpy's bounds-free mode (71k values: 22 us), a cast and an add of a constant ~0.06-0.13 ns
each (4-5 us), and FuseOps puts them into the chain that reads them.

Where two ``take``s read one index, with the same attributes, from constant 1-d tables ``A``
and ``B`` of one length, and ``B`` holds, bit for bit, ``astype(A, B.dtype) + c`` for one
constant ``c`` (computed as the kernels do: numpy's cast, then a float add of ``c`` in
``B``'s type; an integer ``B`` takes the add in its own type, which cannot round), the later
``take(B, i)`` becomes ``astype(take(A, i), B.dtype) + c``: the same element for every index,
in range or not (both tables read the same position, and raise alike). The cast or the add goes
when it changes nothing. Runs at -O2 after TabulateIntegerFunctions (whose look-ups share one
index per quantized value) and DeadCodeElimination, before FuseOps.
"""

from __future__ import annotations

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, Constant, DataflowBlock, DataflowVar, SeqExpr, Var, VarBinding
from ..ir.op import make_call
from .core.infra import function_pass

#: tables compared entry by entry at conversion, at most this long (the 256 or 1024 of a quantized value)
MAX_TABLE = 65536


def _table_look_up(call) -> tuple | None:
    """``(table, index, attrs)`` of a ``take`` from a constant 1-d numeric table, else None."""
    if not isinstance(call, Call) or getattr(call.op, "name", None) != "take" or len(call.args) != 2:
        return None
    table, index = call.args
    if not isinstance(table, Constant) or table.data.ndim != 1 or not 0 < table.data.size <= MAX_TABLE \
            or table.data.dtype.kind not in "iuf" or not isinstance(index, Var):
        return None
    return table.data, index, tuple(sorted(call.attrs.items()))


def shift_between(a: np.ndarray, b: np.ndarray):
    """``c`` (a 0-d array of ``b``'s dtype) with ``astype(a, b.dtype) + c`` equal to ``b`` bit for bit,
    None when ``astype(a, b.dtype)`` alone is ``b`` (no add), False when there is no such ``c``;
    ``a`` and ``b`` 1-d of one length."""
    if a.shape != b.shape or (b.dtype.kind != "f" and a.dtype.kind == "f"):
        return False
    cast = a.astype(b.dtype)
    if cast.tobytes() == b.tobytes():
        return None
    if b.dtype.kind == "f" and not np.all(np.isfinite(cast)):
        return False
    with np.errstate(all="ignore"):
        c = (b[:1] - cast[:1]).reshape(())        # (an integer one may wrap: so does the kernel's add)
        shifted = np.add(cast, c, dtype=b.dtype)
    return c if shifted.tobytes() == b.tobytes() else False


def _derived(binding: VarBinding, source: Var, source_dtype, dtype, c, dataflow: bool) -> list[VarBinding]:
    """``var = astype(source, dtype) + c`` as bindings, without the steps that change nothing
    (``c`` None: no add)."""
    builder, kind = BlockBuilder(), DataflowVar if dataflow else Var
    value = source
    out = []
    if np.dtype(source_dtype) != np.dtype(dtype):
        cast = builder.normalize(make_call("astype", source, dtype=str(np.dtype(dtype))))
        if c is None:
            return [VarBinding(binding.var, cast, span=binding.span)]
        value = kind(f"{binding.var.name_hint}_cast", cast.struct_info)
        out.append(VarBinding(value, cast, span=binding.span))
    elif c is None:
        return [VarBinding(binding.var, source, span=binding.span)]
    out.append(VarBinding(binding.var, builder.normalize(make_call("add", value, Constant(c))), span=binding.span))
    return out


@function_pass(name="ShareLookUps", opt_level=2, requires=("import", "optimize"), produces="optimize")
def share_look_ups(func, mod, ctx):
    """Look-ups that an earlier one's result gives by a cast and a shift (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    changed, blocks = False, []
    for block in func.body.blocks:
        seen: dict = {}         # (index, attrs) -> [(var, table)] of this block's kept look-ups
        out = []
        dataflow = isinstance(block, DataflowBlock)
        for b in block.bindings:
            look_up = _table_look_up(b.value) if isinstance(b, VarBinding) else None
            if look_up is None:
                out.append(b)
                continue
            table, index, attrs = look_up
            kept = seen.setdefault((index, attrs), [])
            for var, earlier in kept:
                c = shift_between(earlier, table)
                if c is not False:
                    out.extend(_derived(b, var, earlier.dtype, table.dtype, c, dataflow))
                    changed = True
                    break
            else:
                kept.append((b.var, table))
                out.append(b)
        blocks.append(type(block)(tuple(out)))
    return func.replace(body=func.body.replace(blocks=tuple(blocks))) if changed else func


__all__ = ["share_look_ups", "shift_between"]
