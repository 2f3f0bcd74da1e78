"""Kernels for shapes as data: ``shape_to_tensor`` and its inverse, ``dyn.tensor_to_shape``."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..kept import keep
from ._registry import register_kernel, register_packed


@register_kernel("shape_to_tensor")
def shape_to_tensor(shape, *, scalar, out):
    out[...] = shape[0] if scalar else shape


@register_packed("dyn.tensor_to_shape")
def tensor_to_shape(x, *, indices, what):
    """The elements ``indices`` of the 0-d/1-D int tensor ``x`` as a shape value
    (a tuple of ints), for a ``match_cast`` that binds symbolic dims to them:
    the importer lifts data-dependent sizes into dims this way. Each must be a
    valid dim (``>= 0``); ``what`` names the value in the error.

    >>> tensor_to_shape(np.array([2, 3, 4, 5]), indices=(0, 2), what="size")
    (2, 4)
    """
    a = np.asarray(x)
    if a.dtype.kind not in "iu" or a.ndim > 1:
        raise ShapeError(f"{what}: expected a 0-d or 1-D integer tensor to use as dims, got "
                         f"{a.dtype} of shape {a.shape}")
    flat = a.reshape(-1).tolist()           # Python ints: one call, not one numpy scalar per element
    if any(not 0 <= i < len(flat) for i in indices):
        raise ShapeError(f"{what}: has {len(flat)} elements, the model uses element(s) {tuple(indices)}")
    dims = tuple(flat[i] for i in indices)
    if dims and min(dims) < 0:
        i, d = next((i, d) for i, d in zip(indices, dims) if d < 0)
        raise ShapeError(f"{what}: element {i} is {d}, but the model uses it as a dim (must be >= 0)")
    return dims


def _specialize_tensor_to_shape(attrs: dict, constant: tuple):
    """Per instruction lifting one element (the importer's ConstantOfShape / Range sizes: Mask
    R-CNN's paste lifts four a detection): a 0-d or 1-D int array's element read as a Python int
    and returned when it is a valid dim (1.4 -> 0.25 us); anything else, errors included, takes
    :func:`tensor_to_shape`."""
    indices = attrs.get("indices")
    if set(attrs) != {"indices", "what"} or not isinstance(indices, tuple) or len(indices) != 1 \
            or type(indices[0]) is not int:
        return lambda x, workspace=None: tensor_to_shape(x, **attrs)
    (i,) = indices

    def call(x, workspace=None):
        if type(x) is np.ndarray and x.ndim <= 1 and x.dtype.kind in "iu" and 0 <= i < x.size:
            d = x.item(i)
            if d >= 0:
                return (d,)
        return tensor_to_shape(x, **attrs)
    return call


tensor_to_shape.specialize_attrs = _specialize_tensor_to_shape


@register_packed("dyn.shape")
def shape_of(x, *, start, end):
    """ONNX Shape of a tensor whose rank the import could not know: the
    dims ``start:end`` (clamped as Shape clamps them) as a 1-D int64 tensor.

    >>> shape_of(np.zeros((2, 3, 4)), start=1)
    array([3, 4])
    """
    rank = np.ndim(x)

    def clamp(i):
        return min(max(i + rank if i < 0 else i, 0), rank)
    return np.array(np.shape(x)[clamp(start):rank if end is None else clamp(end)], dtype=np.int64)


def _specialize_shape_of(attrs: dict, constant: tuple):
    """Per instruction: the result kept per input shape (at most 64) and a copy of it returned
    each call, never the kept array itself (silero's Shape of a value of unknown rank, 1 -> 0.3 us;
    its clamps and ``np.array`` of a tuple ran every call)."""
    kept: dict = {}
    ndarray = np.ndarray

    def call(x, workspace=None):
        if type(x) is not ndarray:
            return shape_of(x, **attrs)
        result = kept.get(x.shape)
        if result is None:
            result = shape_of(x, **attrs)
            keep(kept, x.shape, result)
        return result.copy()
    return call


shape_of.specialize_attrs = _specialize_shape_of


@register_packed("dyn.size")
def size_of(x):
    """ONNX Size of a tensor whose rank the import could not know (a 0-d int64)."""
    return np.array(np.size(x), dtype=np.int64)
