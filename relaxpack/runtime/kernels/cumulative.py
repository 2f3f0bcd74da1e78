"""The cumprod kernel (cumsum is in :mod:`.algorithm`).

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


@register_kernel("cumprod")
def cumprod(x, axis_tensor=None, *, out, axis=None, exclusive=False, reverse=False):
    """Cumulative product along ``axis``; ``exclusive`` leaves out the element
    itself (the first product is 1), ``reverse`` multiplies from the end.
    Integers wrap on overflow; low floats compute in float32 and round once."""
    ax = _axis_of(x, axis, axis_tensor)
    if is_low_float(out.dtype):
        buf = np.empty(out.shape, np.float32)
        cumprod(x.astype(np.float32), out=buf, axis=ax, exclusive=exclusive, reverse=reverse)
        np.copyto(out, buf, casting="unsafe")
        return
    x, = separate(out, x)
    src = np.flip(x, ax) if reverse else x
    dst = np.flip(out, ax) if reverse else out      # a view: writing it writes out
    if not exclusive:
        np.cumprod(src, axis=ax, dtype=out.dtype, out=dst)
        return
    if x.shape[ax] == 0:
        return
    head = [slice(None)] * x.ndim
    head[ax] = slice(0, 1)
    dst[tuple(head)] = 1
    rest, lead = list(head), list(head)
    rest[ax], lead[ax] = slice(1, None), slice(0, -1)
    np.cumprod(src[tuple(lead)], axis=ax, dtype=out.dtype, out=dst[tuple(rest)])
