"""N-d gathers and scatters: gather_nd, scatter_nd, scatter_elements,
tensor_scatter (the KV-cache update).

Indices may be negative (counting from the end, as ONNX allows); one out of
range is a :class:`~relaxpack.errors.ShapeError` naming the op. The scatters
copy ``data`` into ``out`` and then write ``updates`` with numpy fancy
indexing (``reduction="none"``; of duplicate indices the last wins, as in
onnx's reference) or reduce them with the unbuffered ``ufunc.at``, which
applies every duplicate.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import ShapeError
from ._math import normalize_axis, out_of_range
from ._registry import register_kernel

_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _normalized(name: str, indices: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``indices`` (intp) with negative entries counted from the end of an axis of ``size``."""
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise ShapeError(f"{name}: indices must be integers, got {indices.dtype}")
    bad = out_of_range(indices, size)
    if bad.any():
        raise ShapeError(f"{name}: index {int(indices[bad].flat[0])} is out of range for axis {axis} "
                         f"of size {size}")
    indices = indices.astype(np.intp, copy=False)
    return np.where(indices < 0, indices + size, indices)


def _index_tuples(name: str, indices: np.ndarray, dims: tuple[int, ...], first_axis: int) -> tuple[np.ndarray, ...]:
    """The last axis of ``indices`` split into one normalized index array per data axis."""
    return tuple(_normalized(name, indices[..., j], dim, first_axis + j) for j, dim in enumerate(dims))


def _depth(name: str, data: np.ndarray, indices: np.ndarray, batch_dims: int) -> int:
    if indices.ndim < 1:
        raise ShapeError(f"{name}: indices must have rank >= 1, got shape {indices.shape}")
    k = indices.shape[-1]
    if not 1 <= k <= data.ndim - batch_dims:
        raise ShapeError(f"{name}: indices of shape {indices.shape} index {k} axes of data of shape "
                         f"{data.shape} (after {batch_dims} batch dims)")
    return k


@register_kernel("gather_nd")
def gather_nd(data, indices, *, out, batch_dims):
    """ONNX GatherND: ``out[b..., m...] = data[b..., *indices[b..., m..., :]]``."""
    b = int(batch_dims)
    k = _depth("gather_nd", data, indices, b)
    if data.shape[:b] != indices.shape[:b]:
        raise ShapeError(f"gather_nd: the {b} batch dims of data {data.shape} and indices {indices.shape} differ")
    batch = math.prod(data.shape[:b])
    per_batch = math.prod(indices.shape[b:-1])
    if out.size and indices.dtype.kind == "i" and _gather_nd_rows(data, indices, out, b, k, batch, per_batch):
        return
    flat = data.reshape((batch,) + data.shape[b:])
    index = indices.reshape(batch, per_batch, k)
    key = (np.arange(batch)[:, None],) + _index_tuples("gather_nd", index, data.shape[b:b + k], b)
    out[...] = flat[key].reshape(out.shape)


def _gather_nd_rows(data, indices, out, b: int, k: int, batch: int, per_batch: int) -> bool:
    """GatherND as one ``np.take`` of rows: the index tuples (signed ints) checked and
    normalized all at once (``remainder`` by the dims) and turned into row numbers by a
    product with the dims' strides; about eight numpy calls where a gather by one index
    array per axis makes seven per axis. False, having written nothing, when an index is
    out of range (the general path names it)."""
    dims = data.shape[b:b + k]
    limits, strides = _index_layout(dims)
    index = indices.reshape(batch, per_batch, k)
    if _ANY(np.greater_equal(index, limits), None) or _ANY(np.less(index, -limits), None):
        return False
    rows = np.dot(np.remainder(index, limits), strides)
    if batch > 1:
        rows += np.arange(0, batch * math.prod(dims), math.prod(dims))[:, None]
    rest = data.shape[b + k:]
    table = data.reshape((batch * math.prod(dims),) + rest)
    if out.flags.c_contiguous:
        np.take(table, rows.reshape(-1), axis=0, out=out.reshape((-1,) + rest), mode="clip")
    else:
        out[...] = np.take(table, rows.reshape(-1), axis=0).reshape(out.shape)
    return True


@functools.lru_cache(maxsize=256)
def _index_layout(dims: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The dims as an int64 array, and the row-major strides (in rows) of a table of them."""
    strides = [math.prod(dims[j + 1:]) for j in range(len(dims))]
    limits, steps = np.array(dims, np.int64), np.array(strides, np.int64)
    limits.setflags(write=False)
    steps.setflags(write=False)
    return limits, steps


#: a bare ufunc reduction: whether any value is true
_ANY = np.logical_or.reduce


def _scatter(name: str, out: np.ndarray, key: tuple, updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[key] = updates
        return
    ufunc = _REDUCE.get(reduction)
    if ufunc is None:
        raise ShapeError(f"{name}: unknown reduction {reduction!r}")
    ufunc.at(out, key, updates)


@register_kernel("scatter_nd")
def scatter_nd(data, indices, updates, *, out, reduction):
    """ONNX ScatterND: a copy of ``data`` with ``updates[m...]`` written at
    (or reduced into) ``data[*indices[m..., :]]``."""
    k = _depth("scatter_nd", data, indices, 0)
    want = indices.shape[:-1] + data.shape[k:]
    if updates.shape != want:
        raise ShapeError(f"scatter_nd: updates have shape {updates.shape}, expected {want} for indices "
                         f"{indices.shape} into data {data.shape}")
    np.copyto(out, data)
    count = math.prod(indices.shape[:-1])
    key = _index_tuples("scatter_nd", indices.reshape(count, k), data.shape[:k], 0)
    _scatter("scatter_nd", out, key, updates.reshape((count,) + data.shape[k:]), reduction)


@register_kernel("scatter_elements")
def scatter_elements(data, indices, updates, *, out, axis, reduction):
    """ONNX ScatterElements: ``out[i][indices[i][j]] = updates[i][j]`` (axis 1), on a copy of ``data``."""
    ax = normalize_axis(axis, data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise ShapeError(f"scatter_elements: indices {indices.shape} and updates {updates.shape} must have "
                         f"the same shape, of the rank of data {data.shape}")
    if any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != ax):
        raise ShapeError(f"scatter_elements: indices {indices.shape} exceed data {data.shape} off axis {ax}")
    np.copyto(out, data)
    key = list(np.indices(indices.shape, sparse=True))
    key[ax] = _normalized("scatter_elements", indices, data.shape[ax], ax)
    _scatter("scatter_elements", out, tuple(key), updates, reduction)


@register_kernel("tensor_scatter")
def tensor_scatter(past_cache, update, write_indices=None, *, out, axis, mode):
    """ONNX TensorScatter: ``out`` is ``past_cache`` with, for each batch
    entry ``b``, ``update``'s steps written along ``axis`` from position
    ``write_indices[b]`` (0 without write_indices); ``mode="circular"`` wraps
    the positions modulo the cache length, ``"linear"`` must stay inside it."""
    ax = normalize_axis(axis, past_cache.ndim)
    steps, length, batch = update.shape[ax], past_cache.shape[ax], past_cache.shape[0]
    start = np.zeros(batch, np.int64) if write_indices is None \
        else np.asarray(write_indices, np.int64).reshape(-1)
    if start.shape != (batch,):
        raise ShapeError(f"tensor_scatter: write_indices must hold {batch} positions, got {start.shape[0]}")
    positions = start[:, None] + np.arange(steps)                     # (batch, steps)
    if mode == "circular":
        positions %= max(length, 1)
    elif steps and ((start < 0) | (positions[:, -1] >= length)).any():
        raise ShapeError(f"tensor_scatter: writing {steps} steps at {start.tolist()} overruns the cache "
                         f"length {length} (mode linear)")
    np.copyto(out, past_cache)
    if not steps or not update.size:
        return
    shape = [1] * update.ndim
    shape[0], shape[ax] = batch, steps
    index = np.broadcast_to(positions.reshape(shape), update.shape)
    np.put_along_axis(out, index, update, axis=ax)
