"""A two-operand einsum that is a batched matrix product, run as ``np.matmul``.

numpy's einsum of two operands (without its path search) multiplies in its own C loops, not BLAS:
MaxViT's attention writes ``q @ k^T`` and ``probs @ v`` as ``BGHID,BGHJD->BGHIJ`` and
``BGHIJ,BGHJD->BGHID``, and 44 such einsums took 48 ms of its run where onnxruntime's take 9.
Each label of such an equation is a batch label (in both operands and the result), a contracted
one (in both operands, not the result), or a free one (in one operand and the result): the
operands transposed to ``(batch, free, contracted)`` and ``(batch, contracted, free)`` and
reshaped to three dims are one ``np.matmul``, its result transposed into ``out``. Equations with
anything else (an ellipsis, a label repeated in an operand, a label summed in one operand only,
dims that differ) keep numpy's einsum. The sums run in BLAS's order, not einsum's.
"""

from __future__ import annotations

import functools
import math

import numpy as np


@functools.lru_cache(maxsize=256)
def plan(equation: str, lhs_shape: tuple, rhs_shape: tuple):
    """``(lhs axes, lhs 3-d shape, rhs axes, rhs 3-d shape, product's shape by labels, out axes)``
    for the matmul form of ``equation`` on operands of these shapes, or None where it has none."""
    if "..." in equation or "->" not in equation:
        return None
    inputs, result = equation.split("->")
    operands = inputs.split(",")
    if len(operands) != 2:
        return None
    a, b = operands
    if len(a) != len(lhs_shape) or len(b) != len(rhs_shape) or any(len(set(s)) != len(s) for s in (a, b, result)):
        return None
    size = {}
    for labels, shape in ((a, lhs_shape), (b, rhs_shape)):
        for label, dim in zip(labels, shape):
            if size.setdefault(label, dim) != dim:
                return None                     # a dim that differs (or broadcasts): numpy's einsum
    if set(result) - set(a) - set(b):
        return None
    batch = [c for c in result if c in a and c in b]
    contracted = [c for c in a if c in b and c not in result]
    left = [c for c in result if c in a and c not in b]
    right = [c for c in result if c in b and c not in a]
    if len(batch) + len(contracted) + len(left) != len(a) or len(batch) + len(contracted) + len(right) != len(b):
        return None                             # a label summed in one operand only
    order = batch + left + right
    dims = (lambda labels: math.prod(size[c] for c in labels))
    lhs_axes = tuple(a.index(c) for c in batch + left + contracted)
    rhs_axes = tuple(b.index(c) for c in batch + contracted + right)
    return (lhs_axes, (dims(batch), dims(left), dims(contracted)),
            rhs_axes, (dims(batch), dims(contracted), dims(right)),
            tuple(size[c] for c in order), tuple(order.index(c) for c in result))


def run(equation: str, lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray) -> bool:
    """``out[...] = einsum(equation, lhs, rhs)`` by ``np.matmul`` (float32/float64 operands of
    ``out``'s dtype); False, writing nothing, where the equation has no matmul form (the caller
    runs numpy's einsum)."""
    if not (lhs.dtype == rhs.dtype == out.dtype and out.dtype.kind == "f" and out.dtype.itemsize >= 4):
        return False
    try:
        form = plan(equation, lhs.shape, rhs.shape)
    except TypeError:
        return False
    if form is None:
        return False
    lhs_axes, lhs_shape, rhs_axes, rhs_shape, shape, out_axes = form
    a = lhs.transpose(lhs_axes).reshape(lhs_shape)
    b = rhs.transpose(rhs_axes).reshape(rhs_shape)
    product = np.matmul(a, b).reshape(shape)
    np.copyto(out, product.transpose(out_axes))
    return True
