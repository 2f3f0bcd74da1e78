"""QLinearSoftmax's exponentials and row sums in one kernel (``ops/definitions/quantized_softmax.py``).

The importer's composition ran four kernels: a max over the rows, a seven-step chain making
``float32(exp((float64(-d) + shift) * scale))`` for ``d = max - x``, a cumsum (onnxruntime adds
each row left to right in float32) and a take of its last element. Here:

- for int8 / uint8 ``x``, ``d`` is one of 256 integers: from :data:`TABLE_MIN` values the 256
  exponentials are made once per call, by the same float64 operations on the same values, and
  ``t`` is taken from them (exp on 256 values and a take instead of exp on every value);
- the sums: numpy reduces a contiguous axis pairwise (another order, other bits), but a reduction
  over the first axis of a C-contiguous ``(D, R)`` array with ``R >= 2`` adds row after row into
  the result, each element left to right, the order of the cumsum; the rows are copied into that
  layout when the axis is not first. A single row takes the accumulation itself.

>>> t, total = np.empty((2, 3), np.float32), np.empty((2, 1), np.float32)
>>> qlinear_softmax_exp(np.array([[1, 2, 3], [0, 0, 0]], np.uint8), np.float64(0.0), np.float64(1.0),
...                     out=(t, total), axis=1)
>>> total.ravel().tolist()
[1.5032147169113159, 3.0]
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ._math import normalize_axis
from ._registry import register_kernel

#: from this many values ``t`` comes from the 256 exponentials (exp of a float64 value costs about
#: three times a take's look-up; a table and its take cost ~2 us more than exp on 256 values)
TABLE_MIN = 768
#: ``float64(-d)`` for the 256 values of ``d``
_STEPS = -np.arange(256, dtype=np.float64)
_STEPS.setflags(write=False)


@register_kernel("qlinear_softmax_exp")
def qlinear_softmax_exp(x, shift, scale, *, out, axis):
    """``out = (t, total)`` (module docstring); an axis of length 0 with other values raises, as
    the composition's take of its last element did."""
    t, total = out
    ax = normalize_axis(axis, x.ndim)
    if x.shape[ax] == 0:
        if total.size:
            raise ShapeError(f"qlinear_softmax_exp: axis {axis} of the input (shape {x.shape}) is empty")
        return
    if x.size == 0:
        return
    top = np.maximum.reduce(x, axis=ax, keepdims=True)
    if x.dtype.itemsize == 1 and x.size >= TABLE_MIN:
        table = np.add(_STEPS, shift)
        np.multiply(table, scale, out=table)
        np.exp(table, out=table)
        np.take(table.astype(np.float32), np.subtract(top, x, dtype=np.intp), out=t)
    else:
        exponent = np.subtract(x, top, dtype=np.int32).astype(np.float64)     # -(max - x), as int32
        np.add(exponent, shift, out=exponent)
        np.multiply(exponent, scale, out=exponent)
        np.exp(exponent, out=exponent)
        np.copyto(t, exponent, casting="unsafe")
    _sum_left_to_right(t, total, ax)


def _sum_left_to_right(t: np.ndarray, total: np.ndarray, ax: int) -> None:
    """``total`` = ``t`` summed along ``ax`` left to right, keeping the axis (module docstring);
    ``total``'s values in C order are the rows' in the order of ``t``'s other axes."""
    length = t.shape[ax]
    rows = t.size // length
    sums = total.reshape(rows)          # a view: total is C-contiguous
    if rows < 2:
        sums[0] = np.add.accumulate(t.reshape(length))[-1]
        return
    if ax == t.ndim - 1:
        block = np.ascontiguousarray(t.reshape(rows, length).T)
    else:
        block = np.ascontiguousarray(np.moveaxis(t, ax, 0)).reshape(length, rows)
    np.add.reduce(block, axis=0, out=sums)
