"""Kernels for shapes as data."""

from __future__ import annotations

from ._registry import register_kernel


@register_kernel("shape_to_tensor")
def shape_to_tensor(shape, *, scalar, out):
    out[...] = shape[0] if scalar else shape
