"""The cumprod kernel and the accumulation cumsum (:mod:`.algorithm`) shares.

>>> out = np.empty(4, np.int32)
>>> cumprod(np.array([1, 2, 3, 4], np.int32), out=out, axis=0, exclusive=True, reverse=True); out
array([24, 12,  4,  1], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ._math import is_low_float, normalize_axis, separate
from ._registry import register_kernel


def _axis_of(x: np.ndarray, axis, axis_tensor) -> int:
    """The axis from the attribute, or from the scalar operand read at run time."""
    if axis_tensor is not None:
        axis_tensor = np.asarray(axis_tensor)
        if axis_tensor.size != 1 or axis_tensor.dtype.kind not in "iu":
            raise ShapeError(f"cumprod: the axis operand must hold one integer, got {axis_tensor!r}")
        axis = int(axis_tensor.reshape(()))
    return normalize_axis(axis, x.ndim)


def accumulate_into(accumulate, identity, x, out, ax: int, exclusive: bool, reverse: bool) -> None:
    """``accumulate`` (np.cumsum or np.cumprod) of ``x`` along ``ax`` into
    ``out``; ``exclusive`` leaves out the element itself (the first result is
    ``identity``), ``reverse`` runs from the end. Low floats compute in
    float32 and round once; integers wrap on overflow."""
    if is_low_float(out.dtype):
        buf = np.empty(out.shape, np.float32)
        accumulate_into(accumulate, identity, x.astype(np.float32), buf, ax, exclusive, reverse)
        np.copyto(out, buf, casting="unsafe")
        return
    x, = separate(out, x)
    src = np.flip(x, ax) if reverse else x
    dst = np.flip(out, ax) if reverse else out      # a view: writing it writes out
    if not exclusive:
        accumulate(src, axis=ax, dtype=out.dtype, out=dst)
        return
    if x.shape[ax] == 0:
        return
    head = [slice(None)] * x.ndim
    head[ax] = slice(0, 1)
    dst[tuple(head)] = identity
    rest, lead = list(head), list(head)
    rest[ax], lead[ax] = slice(1, None), slice(0, -1)
    accumulate(src[tuple(lead)], axis=ax, dtype=out.dtype, out=dst[tuple(rest)])


@register_kernel("cumprod")
def cumprod(x, axis_tensor=None, *, out, axis, exclusive, reverse):
    """Cumulative product along ``axis``; ``exclusive`` leaves out the element
    itself (the first product is 1), ``reverse`` multiplies from the end."""
    accumulate_into(np.cumprod, 1, x, out, _axis_of(x, axis, axis_tensor), exclusive, reverse)
