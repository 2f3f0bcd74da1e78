"""Helpers shared by the math converters (elementwise, activation, nn, reduce).

They build small compositions step by step: :func:`call` emits one op and
returns its IR expression, so calls on constants fold at import time
(``ctx.emit``) and every intermediate gets its own binding.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir.dims import Dim
from ....ir.expr import Call, Expr
from ....ops.registry import make_call
from ....runtime.dtypes import numpy_dtype
from ..value import Value
from ._shape_common import rank_unknown


def unsupported(ctx, what: str) -> UnsupportedOpError:
    """An :class:`UnsupportedOpError` naming the node, its domain and opset."""
    return UnsupportedOpError(f"{ctx.node_label()} (domain ai.onnx, opset {ctx.opset}): {what}")


def malformed(ctx, what: str) -> ShapeError:
    """A :class:`ShapeError` for a node whose attributes or shapes do not fit together."""
    return ShapeError(f"{ctx.node_label()}: {what}")


def call(ctx, op: str, *args: Expr, name: str = "lv", **attrs) -> Expr:
    """Emit ``op(*args, **attrs)`` and return the bound expression."""
    return ctx.expr(ctx.emit(make_call(op, *args, **attrs), name))


def scalar(ctx, value, dtype: str) -> Expr:
    """A 0-d constant of ``dtype`` holding ``value``."""
    return ctx.expr(ctx.const(np.array(value, dtype=numpy_dtype(dtype))))


def kind(dtype: str | None) -> str:
    """numpy's kind letter of an IR dtype (``f`` for bfloat16 and the small floats)."""
    if dtype is None:
        return "?"
    if dtype.startswith(("float", "bfloat")):
        return "f"
    if dtype == "string":
        return "O"
    return numpy_dtype(dtype).kind


def is_float(value: Value) -> bool:
    return kind(value.dtype) == "f"


def is_int(value: Value) -> bool:
    return kind(value.dtype) in "iu"


def astype(ctx, value: Value | Expr, dtype: str) -> Expr:
    """``value`` cast to ``dtype`` (itself when it already has that dtype)."""
    expr = ctx.expr(value) if isinstance(value, Value) else value
    if expr.struct_info.dtype == dtype:
        return expr
    return call(ctx, "astype", expr, dtype=dtype)


#: dtypes numpy computes slowly and with a small range: ops that accumulate
#: (sums, products of matrices, norms) compute them in float32 and round once,
#: as onnxruntime does (it casts them to float32 around such ops), so an
#: intermediate that overflows float16 does not turn a finite result into inf.
_LOW_FLOATS = ("float16", "bfloat16", "float8", "float4")


def is_low_float(dtype: str | None) -> bool:
    return dtype is not None and dtype.startswith(_LOW_FLOATS)


def working(ctx, value: Value) -> Expr:
    """``value`` in the precision to accumulate in: float32 for a low float, else itself."""
    return astype(ctx, value, "float32") if is_low_float(value.dtype) else ctx.expr(value)


def rounded(ctx, result: Expr, dtype: str) -> Expr:
    """``result`` (a call, emitted or not, on :func:`working` values) back in
    ``dtype``, unemitted (a converter's result); ``result`` itself unless
    ``dtype`` is a low float."""
    if not is_low_float(dtype):
        return result
    bound = ctx.expr(ctx.emit(result)) if isinstance(result, Call) else result
    return make_call("astype", bound, dtype=dtype)


def known_shape(ctx, value: Value, what: str = "the input") -> tuple[Dim, ...]:
    """The (possibly symbolic) shape of ``value``; unsupported when unknown."""
    if value.ndim < 0:
        raise unsupported(ctx, rank_unknown(ctx, value, what))
    if value.shape is None:
        raise unsupported(ctx, f"{what} must have a known shape (rank and dims, symbolic is fine)")
    return tuple(value.shape)


def known_rank(ctx, value: Value, what: str = "the input") -> int:
    if value.ndim < 0:
        raise unsupported(ctx, rank_unknown(ctx, value, what))
    return value.ndim


def const_ints(ctx, value: Value | None, what: str) -> tuple[int, ...] | None:
    """The contents of an int input that must be known at import time
    (``None`` when the optional input is omitted)."""
    if value is None:
        return None
    ints = value.int_values()
    if ints is None or not all(isinstance(v, int) for v in ints):
        raise unsupported(ctx, f"input {what} must be a constant (it is computed at run time)")
    return tuple(ints)


def const_scalar(ctx, value: Value | None, what: str):
    """The single element of an optional constant input as a Python number,
    ``None`` when omitted; ``NotImplemented`` when it is only known at run time."""
    if value is None:
        return None
    if value.const is None:
        return NotImplemented
    data = np.asarray(value.const)
    if data.size != 1:
        raise unsupported(ctx, f"input {what} must hold one value, got shape {data.shape}")
    return data.reshape(()).item()


def legacy_broadcast(ctx, a: Value, b: Value, broadcast: int, axis: int | None) -> Expr | None:
    """The second operand of a binary op before opset 7, aligned for numpy
    broadcasting: with ``broadcast=1`` and an ``axis`` its dims line up with
    the first operand's from ``axis`` on (trailing 1s are added); ``None``
    when numpy's suffix alignment already matches (no axis, or none needed)."""
    if not broadcast or axis is None or b.ndim < 0 or a.ndim < 0:
        return None
    axis = axis + a.ndim if axis < 0 else axis
    trailing = a.ndim - axis - b.ndim
    if trailing < 0:
        raise malformed(ctx, f"broadcast axis {axis} does not fit operand ranks {a.ndim} and {b.ndim}")
    if trailing == 0:
        return None
    return call(ctx, "expand_dims", ctx.expr(b), axis=tuple(range(b.ndim, b.ndim + trailing)))


def spatial_attr(ctx, values: Sequence[int] | None, n: int, default: int, name: str) -> tuple[int, ...]:
    """A per-spatial-dim attribute (strides, dilations, kernel_shape...)."""
    if values is None or len(values) == 0:
        return (default,) * n
    values = tuple(int(v) for v in values)
    if len(values) != n:
        raise malformed(ctx, f"attribute {name}={list(values)} needs {n} values (one per spatial dim)")
    return values
