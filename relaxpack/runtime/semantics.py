"""ONNX semantics the compiler and the kernels must agree on, public.

Shape inference (``ops/``), shape simplification (``passes/``) and the
kernels compute the same index arithmetic; they import it from here rather
than from a kernel module's private helpers, so a kernel file may move or
change its internals without reaching into the compiler.

>>> onnx_slice(-1, -4, -1, 5)
slice(4, 1, -1)
"""

from .kernels._math import onnx_slice

__all__ = ["onnx_slice"]
