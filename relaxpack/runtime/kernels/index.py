"""Indexing: strided_slice, take (ONNX Gather), gather_elements.

Indices may be negative (counting from the end, as ONNX allows); an index
out of range is a :class:`~relaxpack.errors.ShapeError` naming the op.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..frozen import is_frozen
from ..kept import keep
from ..semantics import onnx_slice
from ._math import normalize_axis, out_of_range
from ._registry import register_kernel
from .manipulate import as_item_runs


def _ints(value) -> tuple[int, ...]:
    return (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)


@register_kernel("strided_slice")
def strided_slice(x, *, out, axes, begin, end, strides):
    """``x[begin:end:stride]`` along ``axes``, clamped like ONNX Slice."""
    np.copyto(out, x[_slice_index(x.shape, axes, begin, end, strides)])


def _specialize_strided_slice(attrs: dict, constant: tuple):
    """Per instruction: the index tuple worked out once per input shape (the attributes are fixed),
    so a call is one copy: a loop body slicing its state costs what the slice does. An input and
    output that are views (an arena's: the same objects run after run) keep the sliced view of
    the input too (silero's slices of a few values 0.85 -> ~0.45 us), as permute_dims does, its
    runs of channels as void items (:func:`.manipulate.as_item_runs`: a chunk of a channels-last
    value)."""
    index_of: dict[tuple, tuple] = {}
    copy = np.copyto
    seen = [None, None, None]     # the last x and out that are views, x sliced

    def call(x, *, out, workspace=None):
        if x is seen[0] and out is seen[1]:
            copy(*seen[2])
            return
        index = index_of.get(x.shape)
        if index is None:
            index = _slice_index(x.shape, **attrs)
            keep(index_of, x.shape, index)
        src = x[index]
        if x.base is not None and out.base is not None:     # (arrays owning memory are not held)
            seen[:] = x, out, as_item_runs(out, src)
            copy(*seen[2])
            return
        copy(out, src)
    return call


def _slice_index(shape: tuple, axes, begin, end, strides) -> tuple:
    """The index tuple of ``strided_slice`` on a tensor of ``shape``."""
    axes, begin, end = _ints(axes), _ints(begin), _ints(end)
    strides = (1,) * len(axes) if strides is None else _ints(strides)
    index = [slice(None)] * len(shape)
    for axis, b, e, s in zip(axes, begin, end, strides):
        ax = normalize_axis(axis, len(shape))
        index[ax] = onnx_slice(b, e, s, shape[ax])
    return tuple(index)


strided_slice.specialize_attrs = _specialize_strided_slice


@register_kernel("dynamic_strided_slice")
def dynamic_strided_slice(x, begin, end, *, out, axes, strides):
    """Like ``strided_slice``, with ``begin``/``end`` given at run time (non-negative ints)."""
    np.copyto(out, x[_dynamic_index(x.ndim, axes, begin, end, strides)])


def _dynamic_index(ndim: int, axes, begin, end, strides) -> tuple:
    """The index tuple of ``dynamic_strided_slice`` on a rank-``ndim`` tensor."""
    strides = strides or (1,) * len(axes)
    index = [slice(None)] * ndim
    for axis, b, e, s in zip(axes, begin, end, strides):
        index[axis % ndim] = slice(int(b), int(e), int(s))
    return tuple(index)


def _specialize_dynamic_strided_slice(attrs: dict, constant: tuple):
    """Per instruction: the index tuple kept per input shape and run-time bounds (Whisper's and
    GPT-2's position tables cut to the sequence length, the same length call after call), so
    a call is one copy (the general path rebuilds the index from the bounds every call)."""
    index_of: dict[tuple, tuple] = {}
    copy = np.copyto

    def call(x, begin, end, *, out, workspace=None):
        key = (x.shape, tuple(begin), tuple(end))
        index = index_of.get(key)
        if index is None:
            index = keep(index_of, key, _dynamic_index(x.ndim, attrs["axes"], begin, end, attrs.get("strides")))
        copy(out, x[index])
    return call


dynamic_strided_slice.specialize_attrs = _specialize_dynamic_strided_slice


def _index_error(name: str, indices: np.ndarray, size: int, axis: int) -> ShapeError:
    bad = indices[out_of_range(indices, size)]
    shown = int(bad.flat[0]) if bad.size else "?"
    return ShapeError(f"{name}: index {shown} is out of range for axis {axis} of size {size}")


@register_kernel("take")
def take(data, indices, *, out, axis, in_bounds):
    """numpy take / ONNX Gather: ``data.shape[:axis] + indices.shape + data.shape[axis+1:]``.
    ``in_bounds``: the compiler proved every index in ``[0, n)`` (a quantized model's table
    look-up): numpy's "wrap" mode, the same values without the bounds checks ("raise" costs
    1.5x: 71k float32 look-ups 34.9 -> 20.6 us, 6k 3.1 -> 1.9 us; measured, 1 thread)."""
    ax = normalize_axis(axis, data.ndim)
    try:
        data.take(indices, ax, out, "wrap" if in_bounds else "raise")   # the method: np.take's wrapper costs ~0.4 us
    except IndexError:
        raise _index_error("take", indices, data.shape[ax], ax) from None


@register_kernel("gather_elements")
def gather_elements(data, indices, *, out, axis):
    """ONNX GatherElements: ``out[i][j] = data[indices[i][j]][j]`` (axis 0).

    ``indices`` has the rank of ``data``; its other dims may be smaller.
    """
    ax = normalize_axis(axis, data.ndim)
    grid = list(np.indices(indices.shape, sparse=True))
    grid[ax] = indices
    try:
        out[...] = data[tuple(grid)]
    except IndexError:
        raise _index_error("gather_elements", indices, data.shape[ax], ax) from None


def _specialize_gather_elements(attrs: dict, constant: tuple):
    """Per instruction: the sparse index grid of the other axes kept for the last indices shape
    (``np.indices`` was ~2 us of a ~4.5 us call on DeBERTa's relative-position gathers); the
    same indexing expression, so the same values and errors (a first call of a shape runs the
    kernel, which checks the axis). Indices equal to the last call's, byte for byte (DeBERTa's
    are functions of the sequence length), into contiguous data of the same shape, take the flat
    positions kept from that call (:class:`_FlatGather`)."""
    axis = attrs["axis"]
    kept = [None, (), ()]           # the indices shape, the grid before and after the axis
    flat = _FlatGather()

    def call(data, indices, *, out, workspace=None):
        if indices.shape != kept[0] or data.ndim != indices.ndim:
            gather_elements(data, indices, out=out, axis=axis)
            ax = normalize_axis(axis, data.ndim)
            grid = tuple(np.indices(indices.shape, sparse=True))
            kept[:] = indices.shape, grid[:ax], grid[ax + 1:]
            flat.forget()
            return
        if flat.run(data, indices, out):
            return
        try:
            out[...] = data[kept[1] + (indices,) + kept[2]]
        except IndexError:
            raise _index_error("gather_elements", indices, data.shape[len(kept[1])], len(kept[1])) from None
        flat.seen(data, indices, out, kept[1], kept[2])
    return call


#: up to this many indices a specialized gather_elements compares them with the last call's bytes
#: (~0.1 us at 50, ~0.5 at 1734); frozen indices (a shape memo's table) are known by identity at
#: any size
FLAT_GATHER_MAX_SIZE = 1 << 12


class _FlatGather:
    """What a specialized ``gather_elements`` keeps for indices that repeat, and the flat positions
    they pick in a C-contiguous ``data`` of one shape (``ravel_multi_index`` of the grid and the
    indices made non-negative, made after the indexing expression accepted them). A call with
    those indices is then one ``take`` ("wrap": all are in range) of the flattened data: the same
    elements, so the same values. Indices are known as the same two ways: frozen ones (a shape
    memo's table, :mod:`..frozen`: DeBERTa's relative positions at any length) by identity from
    their first call; others by their bytes, compared every call (up to
    :data:`FLAT_GATHER_MAX_SIZE` values), once the same bytes came twice in a row. Frozen indices
    that repeat along their first dim (an expanded table) keep the positions of one slice, taken
    from each row of the data (``take`` along axis 1): positions the size of the table, not of
    its expansion (DeBERTa's two heads' (2, 128, 128) gathers 115 -> 15 us). The flattened arena
    views of the last data and out are kept; arrays owning their memory are never held."""

    __slots__ = ("key", "frozen", "shape", "positions", "rows", "views")

    def __init__(self):
        self.forget()

    def forget(self) -> None:
        self.key, self.frozen, self.shape, self.positions = None, None, None, None
        self.rows, self.views = 0, (None, None, None, None)

    def run(self, data, indices, out) -> bool:
        """The call by the kept positions when it applies (then True)."""
        if self.positions is None or data.shape != self.shape:
            return False
        if indices is not self.frozen and (self.key is None or indices.dtype != self.key[1]
                                           or indices.tobytes() != self.key[0]):
            return False
        rows, views = self.rows, self.views
        if data is views[0] and out is views[1]:
            views[2].take(self.positions, 1 if rows else 0, views[3], "wrap")
            return True
        if not (data.flags.c_contiguous and out.flags.c_contiguous and out.dtype == data.dtype
                and out.__class__ is np.ndarray):
            return False
        if rows:
            source, target = data.reshape(data.shape[0], -1)[:rows], out.reshape(rows, -1)
        else:
            source, target = data.reshape(-1), out.reshape(-1)
        source.take(self.positions, 1 if rows else 0, target, "wrap")
        if data.base is not None and out.base is not None:
            self.views = (data, out, source, target)
        return True

    def seen(self, data, indices, out, before: tuple, after: tuple) -> None:
        """After the indexing expression ran: frozen indices get their positions now; others are
        remembered by their bytes, and the second time in a row get them."""
        if not data.flags.c_contiguous:
            self.forget()
            return
        if is_frozen(indices):
            self.forget()
            self.frozen = indices
            self._positions(data, indices, before, after)
            return
        if indices.size > FLAT_GATHER_MAX_SIZE:
            self.forget()
            return
        key = (indices.tobytes(), indices.dtype)
        if key != self.key:
            self.forget()
            self.key = key
            return
        self._positions(data, indices, before, after)

    def _positions(self, data, indices, before: tuple, after: tuple) -> None:
        """The flat positions ``indices`` pick in ``data`` (of one slice of both along the first
        dim where the gather is along another and frozen indices repeat along it)."""
        n = data.shape[len(before)]
        chosen = np.where(indices < 0, indices + n, indices).astype(np.intp)
        if self.frozen is not None and before and indices.shape[0] > 1 and (chosen == chosen[:1]).all():
            # (the sparse grids of the other dims span one entry of the first already)
            first = (np.zeros(1, np.intp),) + before[1:] + (chosen[:1],) + after
            self.positions = np.ravel_multi_index(first, (1,) + data.shape[1:]).reshape(-1)
            self.rows = indices.shape[0]
        else:
            self.positions = np.ravel_multi_index(before + (chosen,) + after, data.shape).reshape(-1)
        self.shape = data.shape


gather_elements.specialize_attrs = _specialize_gather_elements


@register_kernel("reverse_sequence")
def reverse_sequence(x, sequence_lens, *, out, batch_axis, time_axis):
    """For each batch entry ``b``, the first ``sequence_lens[b]`` steps along
    ``time_axis`` reversed and the rest kept: one gather by the index
    ``len - 1 - t`` (for ``t < len``, else ``t``). A length outside
    ``[0, steps]`` is a ShapeError."""
    steps, batch = x.shape[time_axis], x.shape[batch_axis]
    lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
    if lens.shape != (batch,) or ((lens < 0) | (lens > steps)).any():
        raise ShapeError(f"reverse_sequence: sequence_lens {lens.tolist()} must hold {batch} lengths in "
                         f"[0, {steps}]")
    t = np.arange(steps)
    index = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)      # (batch, steps)
    if time_axis < batch_axis:
        index = index.T
    index = index.reshape(index.shape + (1,) * (x.ndim - 2))
    np.copyto(out, np.take_along_axis(x, index, axis=time_axis))
