"""Evaluate a call on constant arguments with the runtime's own kernels.

One implementation of each op's semantics: constant folding (at import and
in the FoldConstant pass) runs exactly the kernel the VM would run. It sits
with the ops, below both the importer and the passes, which both use it.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant, Op, PrimValue, ShapeExpr, Tuple
from ..ir.struct_info import TensorStructInfo, TupleStructInfo
from ..runtime.dtypes import numpy_dtype
from ..runtime.kernels import KERNELS
from .registry import get_op_def

_NOT_CONSTANT = object()


def constant_args(call: Call) -> list | None:
    """The call's arguments as kernel inputs, or None if one is not constant."""
    values = [_constant(a) for a in call.args]
    return None if any(v is _NOT_CONSTANT for v in values) else values


def _constant(expr):
    if isinstance(expr, Constant):
        return expr.data
    if isinstance(expr, ShapeExpr) and all(isinstance(v, int) for v in expr.values):
        return tuple(expr.values)
    if isinstance(expr, PrimValue) and isinstance(expr.value, (int, float, bool)):
        return expr.value
    if isinstance(expr, Tuple):
        fields = [_constant(f) for f in expr.fields]
        return _NOT_CONSTANT if any(f is _NOT_CONSTANT for f in fields) else tuple(fields)
    return _NOT_CONSTANT


def output_size(sinfo) -> int | None:
    """Elements of a static tensor (or tuple of tensors) result; None if not static."""
    if isinstance(sinfo, TupleStructInfo):
        sizes = [output_size(f) for f in sinfo.fields]
        return None if None in sizes else sum(sizes)
    if isinstance(sinfo, TensorStructInfo) and sinfo.is_static and sinfo.dtype is not None:
        return int(np.prod(sinfo.shape, dtype=np.int64))
    return None


def evaluate_call(call: Call, max_elements: int):
    """The value of ``call`` (normalized, with struct info) when its arguments
    are constants, its op may be folded (``OpDef.foldable``: its cost is bounded
    by its inputs' sizes), it has a DPS kernel and its result has at most
    ``max_elements`` elements; otherwise None."""
    if not isinstance(call.op, Op) or call.op.name not in KERNELS or not get_op_def(call.op).foldable:
        return None
    kernel = KERNELS[call.op.name]
    size = output_size(call.struct_info)
    if not kernel.dps or size is None or size > max_elements:
        return None
    args = constant_args(call)
    if args is None:
        return None
    out = _allocate(call.struct_info)
    kernel.fn(*args, out=out, **dict(call.attrs))
    return out


def _allocate(sinfo):
    if isinstance(sinfo, TupleStructInfo):
        return tuple(_allocate(f) for f in sinfo.fields)
    return np.empty(sinfo.shape, numpy_dtype(sinfo.dtype))
