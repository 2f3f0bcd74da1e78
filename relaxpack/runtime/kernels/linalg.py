"""Linear algebra: matmul with numpy semantics."""

from __future__ import annotations

import numpy as np

from ._math import is_low_float
from ._registry import register_kernel


@register_kernel("matmul")
def matmul(lhs, rhs, *, out, out_dtype=None):
    """``lhs @ rhs`` (1-D operands and broadcast batch dims as in numpy).

    With ``out_dtype`` (e.g. int8 operands, int32 result) the operands are
    widened first, so products accumulate in the result's dtype. float16
    and bfloat16 go through float32 BLAS and round once, which is both
    faster and more accurate than numpy's float16 loops.
    """
    if is_low_float(out.dtype) or is_low_float(lhs.dtype):
        result = np.matmul(lhs.astype(np.float32), rhs.astype(np.float32))
        np.copyto(out, result, casting="unsafe")
        return
    if lhs.dtype != out.dtype or rhs.dtype != out.dtype:
        lhs, rhs = lhs.astype(out.dtype), rhs.astype(out.dtype)
    np.matmul(lhs, rhs, out=out)


@register_kernel("det")
def det(x, *, out):
    """Determinants of the ``(..., M, M)`` matrices (LU factorization);
    float16 and bfloat16 factor in float32 and round once."""
    work = x.astype(np.float32) if is_low_float(x.dtype) else x
    np.copyto(out, np.linalg.det(work), casting="unsafe")
