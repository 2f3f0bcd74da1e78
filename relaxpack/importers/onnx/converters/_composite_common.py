"""Helpers shared by the composite converters (``composite.py``, ``loss.py``).

These ONNX ops have no IR op of their own: their converters emit the
composition their spec (and onnx's reference implementation) describes.
The helpers here build the recurring pieces: which outputs a node uses,
dtype promotion as numpy does it, ``0 / -inf`` masks, index ranges over
(possibly symbolic) dims, ONNX element types as IR dtypes.
"""

from __future__ import annotations

import numpy as np

from ....ir.dims import Dim
from ....ir.expr import Expr, PrimValue, ShapeExpr
from ....runtime.dtypes import numpy_dtype
from ..tensors import onnx_dtype_name
from ._math_common import call, kind, scalar, unsupported
from ._shape_common import dim_tensor

__all__ = [
    "arange", "dim_scalar", "float_dtype_attr", "masked_bias", "outputs_used", "promote", "require_float",
    "reshape",
]


def outputs_used(ctx, count: int) -> list[bool]:
    """For each of the node's first ``count`` outputs, whether the model names it."""
    names = list(ctx.node.output) if ctx.node is not None else ["y"]
    names += [""] * (count - len(names))
    return [bool(n) for n in names[:count]]


def promote(a: str, b: str) -> str:
    """numpy's result dtype of ``a`` and ``b`` (float32 where numpy has no rule,
    e.g. float16 with bfloat16)."""
    try:
        return np.promote_types(numpy_dtype(a), numpy_dtype(b)).name
    except TypeError:
        return "float32"


def require_float(ctx, value, what: str = "the input") -> str:
    """The dtype of ``value``, which must be a float."""
    if value.dtype is None or kind(value.dtype) != "f":
        raise unsupported(ctx, f"{what} must be a float tensor, got {value.dtype}")
    return value.dtype


def float_dtype_attr(ctx, elem_type: int, name: str) -> str:
    """A float ONNX element-type attribute (``stash_type``, ``softmax_precision``) as an IR dtype."""
    dtype = onnx_dtype_name(int(elem_type), f"{ctx.node_label()}'s attribute {name}")
    if kind(dtype) != "f":
        raise unsupported(ctx, f"attribute {name}={elem_type} must name a float type, got {dtype}")
    return dtype


def arange(ctx, stop: Dim) -> Expr:
    """``[0, 1, ..., stop - 1]`` as int64 (``stop`` may be symbolic)."""
    return call(ctx, "range", PrimValue(0), PrimValue(stop), PrimValue(1), dtype="int64", name="idx")


def dim_scalar(ctx, dim: Dim, dtype: str = "int64") -> Expr:
    """A 0-d tensor holding ``dim``."""
    return dim_tensor(ctx, dim, dtype)


def reshape(ctx, expr: Expr, dims) -> Expr:
    """``expr`` reshaped to ``dims`` (one may be -1)."""
    return call(ctx, "reshape", expr, ShapeExpr(tuple(dims)))


def masked_bias(ctx, allowed: Expr, dtype: str) -> Expr:
    """``where(allowed, 0, -inf)``: an additive bias that removes what is not allowed.

    A select, not ``(1 - allowed) * -inf``, which gives ``0 * -inf = NaN`` at
    the allowed positions."""
    return call(ctx, "where", allowed, scalar(ctx, 0, dtype), scalar(ctx, -np.inf, dtype), name="bias")
