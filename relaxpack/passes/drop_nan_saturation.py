"""DropNaNSaturation: a quantizer's NaN-saturating clip of a value known finite clips only.

Every integer quantizer ends in ``clip(..., saturate_nan=True)`` (NaN becomes the type's
minimum, as onnxruntime's; docs/design-notes.md, "NaN quantizes to the type's minimum"), whose
kernel follows the clip with a read-only pass looking for NaN (45% of the clip's time on
quantized activations). Where the clipped value is finite by construction, a requantized exact
conv of clipped integers, a dequantized value through float convs of constant finite weights
(:func:`~.analysis.magnitude.magnitude_bound`), there is no NaN to find: the clip becomes
``saturate_nan=False``, the same values bit for bit (the clip itself is the same call).

Runs at -O2 last before FuseOps: the passes before it read a NaN-saturating clip's bounds as
its value's range (:func:`~.analysis.float_values.value_range`), which a plain clip does not
give without its operand's.
"""

from __future__ import annotations

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, SeqExpr
from ..ir.op import make_call
from .analysis.float_values import Definitions, rewrite_calls
from .analysis.magnitude import magnitude_bound
from .core.infra import function_pass


def _unsaturated(call: Call, defs: Definitions, memo: dict) -> Call | None:
    """``call`` without NaN saturation when it is a NaN-saturating float clip of a finite value."""
    if call.op.name != "clip" or not call.attrs["saturate_nan"] \
            or getattr(call.struct_info, "dtype", None) not in ("float32", "float64"):
        return None
    if magnitude_bound(call.args[0], defs, memo) is None:
        return None
    return BlockBuilder().normalize(make_call("clip", call.args[0], **{**call.attrs, "saturate_nan": False}))


@function_pass(name="DropNaNSaturation", opt_level=2, requires=("import", "optimize"), produces="optimize")
def drop_nan_saturation(func, mod, ctx):
    """Clip without the NaN pass where the clipped value is finite (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs, memo = Definitions(func), {}

    def unsaturated(var, call):
        new = _unsaturated(call, defs, memo)
        if new is not None:
            defs.calls[var] = new
        return new

    return rewrite_calls(func, defs, unsaturated)

__all__ = ["drop_nan_saturation"]
