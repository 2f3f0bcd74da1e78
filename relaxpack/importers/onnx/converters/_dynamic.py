"""Data-dependent ops: a packed kernel call bound to fresh symbolic dims.

When an op's shape-like operand (Reshape's shape, a Reduce's axes, TopK's K,
Resize's sizes, ...) is only known at run time, the output shape cannot be
inferred at import time. The converter then calls a packed runtime kernel
(``call_packed``: it returns a new array) and binds the result with a
``match_cast`` to fresh symbolic dims, as Relax does for ``R.unique`` or
``R.nonzero``. Everything downstream stays symbolic and checked:

    TopK(x: (n, 8), k)      ->  lv = R.call_packed("dyn.topk", x, k, axis=1, ...)
                                values = R.match_cast(lv[0], R.Tensor((n, topk_d0), "float32"))

Dims the converter does know (``None`` marks the unknown ones) are kept, so
the runtime checks them. When every input is a constant the kernel runs at
import time instead, as the other folds do.

>>> packed_call(ctx, "dyn.topk", [x, k], [((n, None), "float32"), ((n, None), "int64")],
...             "topk", axis=1, largest=True, sorted=True)      # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ....ir.dims import Dim, format_dim, free_vars
from ....ir.gradual import representative_order
from ....ir.expr import ExternFunc, ShapeExpr, TupleGetItem
from ....ir.struct_info import TensorStructInfo, TupleStructInfo
from ....ops.definitions.common import one_unless_empty
from ....ops.registry import get_op_def, make_call
from ....runtime.kernels import KERNELS
from ..value import Value
from ._shape_common import fresh_dims

#: an output's shape (``None`` for an unknown dim; ``None`` for the whole shape: an unknown rank) and dtype
OutputSpec = tuple[Sequence[Dim | None] | None, str]


def packed_call(ctx, kernel: str, inputs: Sequence[Value], outputs: Sequence[OutputSpec], hint: str,
                *, foldable: bool = True, **attrs) -> Value | list[Value]:
    """Call the packed kernel ``kernel`` on ``inputs`` with ``attrs``; one
    Value per entry of ``outputs`` (a single Value when there is one), each
    bound by ``match_cast`` to its declared shape with fresh dims for the
    ``None`` entries (an output declared with shape None keeps an unknown
    rank, unbound). Folded at import time when every input is constant,
    unless not ``foldable`` (a kernel whose cost the values can make unbounded).
    ``attrs`` not given take the defaults of the kernel's op (``ops/definitions/dynamic.py``)."""
    opdef = get_op_def(kernel)
    opdef.check_attrs(attrs)
    attrs = opdef.full_attrs(attrs)
    if foldable and all(v.const is not None for v in inputs):
        result = KERNELS[kernel].fn(*(v.const for v in inputs), **attrs)
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        values = [ctx.const(np.asarray(r)) for r in results]
        return values[0] if len(outputs) == 1 else values
    sinfos = [TensorStructInfo(None, dtype, ndim=-1 if shape is None else len(shape)) for shape, dtype in outputs]
    ret = sinfos[0] if len(sinfos) == 1 else TupleStructInfo(tuple(sinfos))
    call = make_call("call_packed", ExternFunc(kernel), *(ctx.expr(v) for v in inputs),
                     sinfo_args=(ret,), kernel_attrs=tuple(sorted(attrs.items())) or None)
    found = ctx.bb.emit(call, hint)
    values = []
    for i, (shape, dtype) in enumerate(outputs):
        part = found if len(outputs) == 1 else ctx.bb.emit(TupleGetItem(found, i), hint)
        if shape is None:
            values.append(Value(part.struct_info, expr=part))
            continue
        unknown = iter(fresh_dims(ctx, sum(d is None for d in shape), hint))
        dims = tuple(next(unknown) if d is None else d for d in shape)
        sinfo = TensorStructInfo(dims, dtype)
        values.append(Value(sinfo, expr=ctx.bb.match_cast(part, sinfo, hint)))
    return values[0] if len(outputs) == 1 else values


def aligned_for_broadcast(ctx, a: Value, b: Value, hint: str = "bcast") -> tuple[Value, Value]:
    """``a`` and ``b`` ready for an elementwise op.

    Per pair of dims (aligned from the right): provably equal or one of them
    1 is decided; two dims over a common input dim that the algebra cannot
    relate (``seq`` and ``min(seq, 512)``) are assumed equal, a run-time
    check the op's gradual inference records (ir/gradual.py). Otherwise only
    the run can tell which is 1: a dim that is at most 1 (a last cell,
    ``x[..., -1:]``, against ``x[..., :-1]``) is never assumed equal to the
    other, a static dim other than 1 against a
    symbolic one is that static dim, two unrelated symbolic dims (a
    loop-carried ``(n,)`` against a sliced ``(m,)``) a fresh dim, and both
    operands are broadcast at run time by ``dyn.broadcast_pair`` and bound
    to that shape. Dims that provably differ are left for the op to report.
    """
    if a.shape is None or b.shape is None:
        return a, b
    decided = _broadcast_dims(ctx, tuple(a.shape), tuple(b.shape))
    if decided is None or not decided[1]:
        return a, b
    dims = decided[0]
    fresh = iter(fresh_dims(ctx, dims.count(None), hint))
    shape = tuple(next(fresh) if d is None else d for d in dims)
    named = tuple(tuple(format_dim(d) for d in v.shape) for v in (a, b))
    return tuple(packed_call(ctx, "dyn.broadcast_pair", [a, b], [(shape, a.dtype), (shape, b.dtype)], hint,
                             dims=named))


def aligned_all_for_broadcast(ctx, *values: Value, hint: str = "bcast") -> list[Value]:
    """:func:`aligned_for_broadcast` of several operands (Where's three), pair by pair: each
    later operand against every earlier one, so that a pair only the run can relate is broadcast
    at run time whichever operands it joins; the op's own inference relates the rest (dims the run
    then finds equal). Operands whose dims the import relates are returned as they are."""
    aligned = list(values)
    for i in range(1, len(aligned)):
        for j in range(i):
            aligned[j], aligned[i] = aligned_for_broadcast(ctx, aligned[j], aligned[i], hint)
    return aligned


def batch_aligned_for_matmul(ctx, a: Value, b: Value, hint: str = "bcast") -> tuple[Value, Value]:
    """MatMul's operands (both of rank 3 or more) with their batch dims broadcast at run time
    where only the run relates a pair of them (:func:`aligned_for_broadcast`'s rules on the
    batch dims alone): each operand is expanded (``dyn.expand``) to the other's batch dims
    followed by two 1s, which keeps its own matrix dims; else both as they are."""
    if a.shape is None or b.shape is None or a.ndim < 3 or b.ndim < 3:
        return a, b
    decided = _broadcast_dims(ctx, tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    if decided is None or not decided[1]:
        return a, b
    rank = len(decided[0])

    def expanded(v: Value, other: Value) -> Value:
        target = ctx.emit(make_call("shape_to_tensor", ShapeExpr((*other.shape[:-2], 1, 1)), scalar=False),
                          "batch_shape")
        return packed_call(ctx, "dyn.expand", [v, target], [((None,) * rank + tuple(v.shape[-2:]), v.dtype)], hint)
    return expanded(a, b), expanded(b, a)


def _broadcast_dims(ctx, left: tuple, right: tuple) -> tuple[list, bool] | None:
    """Per pair of dims of two shapes aligned from the right, :func:`_broadcast_pair_dim`'s
    result dim (None: a fresh one), and whether only the run can broadcast some pair; None when
    a pair provably cannot broadcast (the op reports it)."""
    rank = max(len(left), len(right))
    left, right = (1,) * (rank - len(left)) + left, (1,) * (rank - len(right)) + right
    dims, at_run_time = [], False
    for x, y in zip(left, right):
        decided = _broadcast_pair_dim(ctx, x, y)
        if decided is _CONFLICT:
            return None
        dims.append(decided[0])
        at_run_time |= decided[1]
    return dims, at_run_time


_CONFLICT = object()


def _broadcast_pair_dim(ctx, x, y):
    """``(result dim, only the run can broadcast)`` for two dims (a None
    result: a fresh dim), or :data:`_CONFLICT` when they provably cannot
    broadcast."""
    analyzer = ctx.bb.analyzer
    if x == y or y == 1:
        return x, False
    if x == 1:
        return y, False
    if isinstance(x, int) and isinstance(y, int):
        return _CONFLICT
    if analyzer.prove_equal(x, y):
        return (x if isinstance(x, int) else y), False
    if analyzer.prove_equal(x, 1):
        return y, False
    if analyzer.prove_equal(y, 1):
        return x, False
    if one_unless_empty(x, y, analyzer):       # x[-1:] against x: a broadcast, never an equality
        return y, False
    if one_unless_empty(y, x, analyzer):
        return x, False
    if analyzer.prove_le(x, 1) or analyzer.prove_le(y, 1):
        return None, True       # 0 or 1 (a last cell, x[..., -1:]): a broadcast the run decides, never an equality
    if not isinstance(x, int) and not isinstance(y, int) and free_vars(x) & free_vars(y):
        rep, _ = representative_order(x, y, ctx.bb.entry_dims())[0]
        return rep, False
    for static, other in ((x, y), (y, x)):
        if isinstance(static, int) and static != 0 and not analyzer.prove_equal(other, 1):
            return static, True
    return None, True
