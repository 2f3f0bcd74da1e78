"""ONNX semantics the compiler and the kernels must agree on, public.

Shape inference (``ops/``), shape simplification (``passes/``) and the
kernels compute the same index arithmetic; all of them import it from here,
so no compiler module reaches into a kernel module's private helpers.

>>> onnx_slice(-1, -4, -1, 5)
slice(4, 1, -1)
"""

from __future__ import annotations


def onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """The Python slice of ONNX Slice's ``start:end:step`` on a dim of ``dim``:
    negative bounds count from the end once, then clamp to ``[0, dim]``
    (``[0, dim - 1]`` and ``[-1, dim - 1]`` for a negative step, where an end
    of -1 means "through the first element"). Python clamps alike except for
    a negative step and a start before ``-dim``: empty there, element 0 here."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


__all__ = ["onnx_slice"]
