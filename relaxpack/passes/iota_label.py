"""A label read from an iota table by an argmax, cast back to the argmax's type, is the argmax.

skl2onnx writes a classifier's label as ``ArgMax`` then ``ArrayFeatureExtractor(classes, index)``,
a reshape and a ``Cast``: with the classes ``0 .. n-1`` (scikit-learn's usual) stored as int32,
``astype(reshape(expand_dims(take(arange(n), argmax(p, axis)))), int64)``. An argmax over an axis
of at most ``n`` values is in ``[0, n)``, so the take returns the index itself (the int32 table
holds it exactly) and the cast back to int64 restores the argmax's own values: the whole chain is
the argmax reshaped to the label's shape, two kernel calls (take, cast) fewer (a table of the
index's own type needs no cast: the take alone is the index). Exact: the same
integers, the same dtype. The argmax's axis must be statically known and at most ``n`` long; the
shape-only ops between (reshape, expand_dims, squeeze) are looked through on both sides.

:func:`check` says why a cast is not one; :func:`rewrite` is SimplifyAlgebra's rule
``label_of_iota_table`` (and ``take_of_iota_table``).
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant, ShapeExpr
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.rules import Match
from .iota_gather import op_name

#: ops that only reshape their operand (its values in row-major order, unchanged)
_SHAPE_ONLY = ("reshape", "expand_dims", "squeeze")


def _through_shapes(m: Match, expr):
    """The value ``expr`` reshapes (following reshape/expand_dims/squeeze back) and its producer."""
    value = m.producer(expr)[0]
    while op_name(value) in _SHAPE_ONLY:
        expr = value.args[0]
        value = m.producer(expr)[0]
    return expr, value


def _iota_length(value) -> int | None:
    """``n`` when ``value`` is a 1-d integer constant ``0, 1, ..., n-1``, else None."""
    if not isinstance(value, Constant):
        return None
    data = np.asarray(value.data)
    if data.ndim != 1 or data.dtype.kind not in "iu" or not np.array_equal(data, np.arange(data.size)):
        return None
    return data.size


def _index_length(m: Match, expr) -> int | None:
    """The static length of the axis an argmax/argmin behind ``expr`` reduces, else None."""
    _, value = _through_shapes(m, expr)
    if op_name(value) not in ("argmax", "argmin"):
        return None
    src, axis = value.args[0].struct_info, value.attrs.get("axis")
    if not isinstance(src, TensorStructInfo) or src.shape is None or src.ndim < 1 or not isinstance(axis, int):
        return None
    dim = src.shape[axis % src.ndim]
    return dim if isinstance(dim, int) else None


def _plan(m: Match):
    """The argmax's (reshaped) index feeding the take, or why the cast (or take) is not one."""
    outer, out = m["outer"], m["outer"].struct_info
    if op_name(outer) == "take":
        take, dtype = outer, getattr(out, "dtype", None)
    else:
        _, take = _through_shapes(m, outer.args[0])
        dtype = outer.attrs["dtype"]
    if op_name(take) != "take" or take.attrs.get("axis", 0) != 0:
        return "the cast's operand is not a take along axis 0 (through reshapes)"
    table, index = m.producer(take.args[0])[0], take.args[1]
    n = _iota_length(table)
    if n is None:
        return "the take's data is not a constant 0, 1, ..., n-1"
    if getattr(index.struct_info, "dtype", None) != dtype:
        return "the cast does not restore the index's dtype"
    length = _index_length(m, index)
    if length is None or not 0 < length <= n:
        return "the index is not an argmax/argmin over a known axis of at most n values"
    if not isinstance(out, TensorStructInfo) or out.shape is None:
        return "the label's shape is not known"
    return index


def check(m: Match) -> str | None:
    plan = _plan(m)
    return plan if isinstance(plan, str) else None


def rewrite(m: Match):
    """astype(reshape*(take(arange(n), argmax(...))), int64) -> reshape(argmax index, label shape);
    a take from a table of the index's own dtype likewise without the cast."""
    return make_call("reshape", _plan(m), ShapeExpr(tuple(m["outer"].struct_info.shape)))
