"""FuseRotateHalf: rotary embeddings' ``rotate_half`` in one kernel call.

Llama, qwen2, mistral and phi rotate the query and key halves for their
rotary position embeddings as ``cat((-x[..., h:], x[..., :h]), dim=-1)``,
which the exporters write as four ops::

    lo = R.strided_slice(x, axes=(3,), begin=(0,), end=(h,), strides=(1,))
    hi = R.strided_slice(x, axes=(3,), begin=(h,), end=(BIG,), strides=(1,))
    neg = R.negative(hi)
    out = R.concat((neg, lo), axis=-1)

Rule ``fuse_rotate_half`` (table :data:`RULES`) makes that ``R.rotate_half(x)``
when the slices take the two halves of a float ``x``'s last axis (of a static
even length), the concat joins them along it, and the slices and the negation
are used only here. Negation and copies are exact: the result does not change.
"""

from __future__ import annotations

from ..ir.expr import Call, Op, Tuple
from ..ops.definitions.common import dtype_kind
from ..ops.registry import make_call
from ..runtime.semantics import onnx_slice
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, is_op, wildcard


def _op_call(expr, name: str) -> Call | None:
    return expr if isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == name else None


def _last_axis_range(call: Call, length: int, ndim: int) -> tuple[int, int] | None:
    """The ``(start, stop)`` a unit-stride strided_slice of only the last axis takes, else None."""
    attrs = call.attrs
    axes, begin, end, strides = attrs["axes"], attrs["begin"], attrs["end"], attrs["strides"]
    if len(axes) != 1 or axes[0] not in (-1, ndim - 1) or len(begin) != 1 or len(end) != 1:
        return None
    if strides is not None and tuple(strides) != (1,):
        return None
    start, stop, _ = onnx_slice(begin[0], end[0], 1, length).indices(length)
    return start, stop


def _halves(m: Match) -> tuple[object, str | None]:
    """``x`` when the concat's operands are ``-x[..., h:]`` and ``x[..., :h]`` (each used only
    here) of a float ``x`` whose last axis has the static length ``2h``, else why not."""
    parts = m["parts"]
    if not isinstance(parts, Tuple):
        parts = m.producer(parts)[0]
    if not isinstance(parts, Tuple) or len(parts.fields) != 2:
        return None, "the concat does not join two tensors"
    neg, neg_uses = m.producer(parts.fields[0])
    lower, lower_uses = m.producer(parts.fields[1])
    if _op_call(neg, "negative") is None or neg_uses != 1:
        return None, "the first part is not a negation used only here"
    upper, upper_uses = m.producer(neg.args[0])
    if _op_call(upper, "strided_slice") is None or _op_call(lower, "strided_slice") is None \
            or upper_uses != 1 or lower_uses != 1:
        return None, "the parts are not slices used only here"
    x = upper.args[0]
    if lower.args[0] is not x:
        return None, "the parts are slices of different tensors"
    sinfo = x.struct_info
    if getattr(sinfo, "dtype", None) is None or dtype_kind(sinfo.dtype) != "float" or sinfo.shape is None:
        return None, "the sliced tensor is not a float tensor of known shape"
    ndim, length = len(sinfo.shape), sinfo.shape[-1]
    if not isinstance(length, int) or length % 2 or length == 0:
        return None, f"the last axis of the sliced tensor has length {length}, not a static even length"
    axis = m["cat"].attrs["axis"]
    if axis not in (-1, ndim - 1):
        return None, f"the concat is along axis {axis}, not the last"
    h = length // 2
    if _last_axis_range(upper, length, ndim) != (h, length) or _last_axis_range(lower, length, ndim) != (0, h):
        return None, "the slices are not the upper and the lower half of the last axis"
    return x, None


def _is_rotate_half(m: Match) -> str | None:
    return _halves(m)[1]


def rotate_half_call(m: Match):
    """concat((-x[..., h:], x[..., :h]), axis=-1) -> rotate_half(x)."""
    return make_call("rotate_half", _halves(m)[0])


RULES = RewriteTable("FuseRotateHalf", [
    Rule("fuse_rotate_half", is_op("concat")(wildcard("parts"), name="cat"), _is_rotate_half, rotate_half_call),
])


@function_pass(name="FuseRotateHalf", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fuse_rotate_half(func, mod, ctx):
    """Fuse rotary embeddings' rotate_half chain into one op: rule fuse_rotate_half (see the module docstring)."""
    return RULES.apply(func)
