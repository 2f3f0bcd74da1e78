"""NarrowIndexCasts: a float cast to int64 of a value within int32's range goes through int32.

A table look-up's index is ``astype(q - lo, int64)`` (numpy's ``take`` reads intp indices; any
other index type it converts first, slower than the cast): TabulateIntegerFunctions' look-ups and
the QLinear* importer's 256-entry tables. numpy casts float32 to int64 without a vector loop,
~2.5x the time of float32 to int32 plus int32 to int64 (measured, 1 thread, numpy 2.4: 71k values
35 vs 13 us, 24k 12.7 vs 8.4 us, 6k 2.0 vs 1.6 us; at 1000 values and below the two casts cost
more, 0.6 vs 0.8 us). Where :func:`~.analysis.float_values.value_range` bounds the value (never
NaN) within ``[-2**30, 2**30]`` (clear of int32's ends, whatever float rounding a clip's bound
took), truncating it to int32 gives the int64 cast's integer, so ``astype(x, int64) ->
astype(astype(x, int32), int64)``: the same values; FuseOps puts both casts into the chain that
computes ``x``.

Runs at -O2 after TabulateIntegerFunctions (which makes the look-ups) and before
DropNaNSaturation (after which a clip's bounds no longer bound its value). Runs once, late: the
quantize rules of SimplifyAlgebra would fold the two casts back into one.
"""

from __future__ import annotations

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, DataflowBlock, DataflowVar, SeqExpr, Var, VarBinding
from ..ir.op import make_call
from .analysis.float_values import Definitions, value_range
from .core.infra import function_pass

#: bounds of at most this magnitude: well inside int32 even after a clip's bound is rounded to the
#: value's float type (float32 rounds 2**31 - 1 up to 2**31, past int32)
LIMIT = 2.0 ** 30


def _narrowed(call: Call, defs: Definitions) -> bool:
    """Whether ``call`` is ``astype(x, int64)`` of a float ``x`` known within int32's range."""
    if call.op.name != "astype" or call.attrs["dtype"] != "int64" \
            or getattr(call.args[0].struct_info, "dtype", None) not in ("float16", "float32", "float64"):
        return False
    bounds = value_range(call.args[0], defs)
    return bounds is not None and -LIMIT <= bounds[0] and bounds[1] <= LIMIT


def through_int32(binding: VarBinding, dataflow: bool) -> list[VarBinding]:
    """``var = astype(x, int64)`` as ``narrow = astype(x, int32); var = astype(narrow, int64)``."""
    builder = BlockBuilder()
    value = builder.normalize(make_call("astype", binding.value.args[0], dtype="int32"))
    narrow = (DataflowVar if dataflow else Var)(f"{binding.var.name_hint}_int32", value.struct_info)
    wide = builder.normalize(make_call("astype", narrow, dtype="int64"))
    return [VarBinding(narrow, value, span=binding.span), VarBinding(binding.var, wide, span=binding.span)]


@function_pass(name="NarrowIndexCasts", opt_level=2, requires=("import", "optimize"), produces="optimize")
def narrow_index_casts(func, mod, ctx):
    """Float-to-int64 casts of values within int32's range through int32 (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs = Definitions(func)
    changed, blocks = False, []
    for block in func.body.blocks:
        out = []
        for b in block.bindings:
            call = defs.calls.get(b.var)
            if call is not None and call is b.value and _narrowed(call, defs):
                out.extend(through_int32(b, isinstance(block, DataflowBlock)))
                changed = True
            else:
                out.append(b)
        blocks.append(type(block)(tuple(out)))
    return func.replace(body=func.body.replace(blocks=tuple(blocks))) if changed else func


__all__ = ["narrow_index_casts", "LIMIT"]
