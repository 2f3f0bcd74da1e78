"""A constant broadcast only to meet an operand of the result's shape need not be broadcast.

torch.onnx's dynamo exporter writes ``zeros_like`` / ``full_like`` / ``torch.zeros`` of a
symbolic shape as ``broadcast_to(c, shape)``, which no fold can evaluate (the shape is
known at run time only) and which runs as a kernel filling a tensor: T5's relative
position buckets (``minimum(x, zeros_like(x))``, ``where(.., full_like(x, 7))``) and its
cross-attention bias (``scores + zeros``). When the binary elementwise op's other operand
already has the result's shape, ``op(x, broadcast_to(c, s)) = op(x, c)``: numpy broadcasts
``c`` itself to the same positions (exact). Then ``x + 0`` and friends go too.
"""

from __future__ import annotations

from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.rules import Match

#: binary elementwise ops whose operands broadcast together (ops/definitions/elementwise.py)
OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "equal", "not_equal", "less",
       "less_equal", "greater", "greater_equal", "logical_and", "logical_or")


def _same_shape(m: Match, sinfo) -> bool:
    out = m.out_sinfo
    return (isinstance(sinfo, TensorStructInfo) and isinstance(out, TensorStructInfo) and sinfo.shape is not None
            and out.shape is not None and len(sinfo.shape) == len(out.shape)
            and all(a == b or m.analyzer.prove_equal(a, b) for a, b in zip(sinfo.shape, out.shape)))


def check(m: Match) -> str | None:
    if m.data("c").ndim > len(m.out_sinfo.shape or ()):
        return "the constant has more dims than the result"
    if not _same_shape(m, m.sinfo("x")):
        return f"{m.name_of('x')} does not have the result's shape"
    return None


def rewrite(m: Match):
    """op(x, broadcast_to(c, s)) -> op(x, c) (either operand order)."""
    call = m["op"]
    first_is_x = call.args[0] is m["x"] and m.producer(call.args[0])[0] is not m["b"]
    args = [m["x"], m["c"]] if first_is_x else [m["c"], m["x"]]
    return make_call(call.op.name, *args, **dict(call.attrs))
