"""Shape manipulation: reshape, permute_dims, concat, split, astype,
broadcast_to, expand_dims, squeeze, flatten; rotate_half.

``out`` is C-contiguous, so a reshape of ``out`` is always a view: the
reshaping kernels copy the input into ``out`` viewed in the input's shape
and never materialize a reshaped copy of a strided input.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..fpstate import IGNORING, quiet, state_now
from ._math import normalize_axis
from ._registry import register_kernel
from .half_cast import WIDEN_MIN_SIZE, cast_into
from .string_cast import format_numbers, parse_numbers


def _copy_reshaped(name: str, x: np.ndarray, out: np.ndarray) -> None:
    if x.size != out.size:
        raise ShapeError(f"{name}: cannot reshape {x.shape} ({x.size} elements) into {out.shape} "
                         f"({out.size} elements)")
    np.copyto(out.reshape(x.shape), x)


@register_kernel("reshape")
def reshape(x, shape, *, out):
    """``x`` with the shape ``shape`` (one dim may be -1; ``out`` has the result's shape)."""
    _copy_reshaped("reshape", x, out)


@register_kernel("flatten")
def flatten(x, *, out, axis):
    """ONNX Flatten: 2-D ``(prod(shape[:axis]), prod(shape[axis:]))``."""
    _copy_reshaped("flatten", x, out)


@register_kernel("expand_dims")
def expand_dims(x, *, out, axis):
    """``x`` with 1-dims inserted at ``axis`` of the output."""
    _copy_reshaped("expand_dims", x, out)


@register_kernel("squeeze")
def squeeze(x, *, out, axis):
    """``x`` without the 1-dims at ``axis`` (``None``: all of them)."""
    _copy_reshaped("squeeze", x, out)


def _specialize_copy_reshaped(name: str):
    """``specialize_attrs`` of a reshaping kernel: the view of ``out`` in the input's shape kept
    for an ``out`` that is a view (an arena's: the same object run after run) and the input shape
    it was made for, so a call is the copy alone (silero's squeezes of a few values, ~1 us each,
    were mostly the size check and the reshape of ``out``)."""
    def specialize(attrs: dict, constant: tuple):
        copy = np.copyto
        seen = [None, None, None]     # the last out that is a view, the input shape, out in that shape

        def call(x, *rest, out, workspace=None):
            if out is seen[0] and x.shape == seen[1]:
                copy(seen[2], x)
                return
            if x.size != out.size:
                _copy_reshaped(name, x, out)        # raises its ShapeError
            view = out.reshape(x.shape)
            if out.base is not None:                # (arrays owning memory are not held)
                seen[:] = out, x.shape, view
            copy(view, x)
        return call
    return specialize


for _kernel in (reshape, flatten, expand_dims, squeeze):
    _kernel.specialize_attrs = _specialize_copy_reshaped(_kernel.__name__)


@register_kernel("permute_dims")
def permute_dims(x, *, out, axes):
    """Transpose: output dim i is input dim ``axes[i]`` (``None`` reverses)."""
    for dst, src in _permute_copies(x.transpose(None if axes is None else tuple(axes)), out):
        np.copyto(dst, src)


#: a transpose whose output's last axis is at most this long, gathered from a strided input axis,
#: copies each of its positions apart (measured: ShuffleNet's (2, 16, 8, 12) -> (8, 12, 16, 2)
#: channel shuffle 3.8 -> 1.7 us, at 16x24 15.9 -> 4.6; numpy's single copy loops over runs of 2)
_SPLIT_LAST_MAX = 4


def _permute_copies(view: np.ndarray, out: np.ndarray) -> list:
    """The ``(dst, src)`` copies of a transposed ``view`` into ``out``: one, or for a short last axis
    read with a stride (a channel shuffle ending in its groups) one per position of that axis."""
    last = out.shape[-1] if out.ndim >= 2 else 0
    if 2 <= last <= _SPLIT_LAST_MAX and view.strides[-1] != view.itemsize and out.size >= 64 * last:
        return [(out[..., i], view[..., i]) for i in range(last)]
    return [(out, view)]


def _specialize_permute_dims(attrs: dict, constant: tuple):
    """Per instruction: the copies (:func:`_permute_copies`) of an input and output that are views
    (an arena's: the same objects run after run) kept, the copies alone each call (a small CNN's
    layout changes are ~1 us copies)."""
    axes = attrs["axes"]
    axes = None if axes is None else tuple(axes)
    copy = np.copyto
    seen = [None, None, None]     # the last x and out that are views, their copies

    def call(x, *, out, workspace=None):
        if x is seen[0] and out is seen[1]:
            copies = seen[2]
        else:
            copies = _permute_copies(x.transpose(axes), out)
            if x.base is not None and out.base is not None:     # (arrays owning memory are not held)
                seen[:] = x, out, copies
        for dst, src in copies:
            copy(dst, src)
    return call


permute_dims.specialize_attrs = _specialize_permute_dims


@register_kernel("broadcast_to")
def broadcast_to(x, shape, *, out):
    """``x`` broadcast to ``shape`` (numpy rules, unidirectional)."""
    np.copyto(out, x)


@register_kernel("astype")
def astype(x, *, out, dtype):
    """Cast to ``out``'s dtype (``dtype`` names it). Floats to integers
    truncate; out-of-range values are undefined in ONNX (numpy wraps). To
    float8 the cast does not saturate (overflow gives NaN or inf): the
    importer clamps first for ONNX Cast's default ``saturate=1``.
    Strings (object arrays of ``str``) format and parse as ONNX Cast says
    (see ``string_cast.py``)."""
    if out.dtype == object and x.dtype != object:
        x = format_numbers(x)
    elif x.dtype == object and out.dtype != object:
        x = parse_numbers(x, out.dtype)
    with quiet():
        np.copyto(out, x, casting="unsafe")


def _specialize_astype(attrs: dict, constant: tuple):
    """Per instruction: a cast between array types other than object is an assignment alone (the
    kernel's dtype tests and ``quiet`` cost more than the copy on a small array; a quantized
    model's chains cast each tensor two or three times); anything else goes to :func:`astype`.
    ``out[...] = x`` casts as ``copyto(..., casting="unsafe")`` does (the same values and
    warnings) at a third of its cost on a few values. float16 <-> float32 of many values is
    :func:`.half_cast.cast_into` in a VM run (numpy's values)."""
    ndarray, copy, bar = np.ndarray, np.copyto, WIDEN_MIN_SIZE

    def call(x, *, out, workspace=None):
        if x.__class__ is ndarray and x.dtype.kind != "O" and out.dtype.kind != "O":
            if state_now() is IGNORING:         # a VM run: warnings are off already
                if x.size >= bar and x.dtype in _HALF_PAIR and out.dtype in _HALF_PAIR:
                    cast_into(out, x)           # float16 <-> float32 by whole-array ufuncs
                else:
                    out[...] = x
                return
            with quiet():
                copy(out, x, casting="unsafe")
            return
        astype(x, out=out, **attrs)
    return call


astype.specialize_attrs = _specialize_astype

#: the dtypes :func:`.half_cast.cast_into` converts between (either way)
_HALF_PAIR = (np.dtype(np.float16), np.dtype(np.float32))


@register_kernel("to_float8e8m0")
def to_float8e8m0(x, *, out, round_mode, saturate):
    """ONNX Cast to FLOAT8E8M0: the float32 exponent, rounded ``up`` (when
    any mantissa bit is set), ``down`` (dropped) or to ``nearest`` (ties to
    even); NaN and infinities become NaN (0xFF), the sign is dropped. With
    ``saturate`` a rounding never carries past the largest value (2**127)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "up":
        carry = (bits & 0x7FFFFF) > 0
    elif round_mode == "nearest":
        guard, rest = (bits & 0x400000) > 0, (bits & 0x3FFFFF) > 0
        carry = guard & (rest | (exponent > 0))
    else:
        carry = np.zeros(bits.shape, dtype=bool)
    carry &= ~special
    if saturate:
        carry &= exponent != 0xFE
    codes = np.where(special, 0xFF, exponent + carry).astype(np.uint8)
    out[...] = codes.view(out.dtype)


@register_kernel("concat")
def concat(tensors, *, out, axis):
    """Concatenate the tuple ``tensors`` along ``axis``."""
    np.concatenate(tensors, axis=normalize_axis(axis, out.ndim), out=out)


def _specialize_concat(attrs: dict, constant: tuple):
    """Per instruction: for parts and an output that are the last call's views (an arena's: the same
    objects run after run; the tuple of parts is made anew each run) their slices of the output
    kept, so a call is one ``np.copyto`` per part, the copies ``np.concatenate`` makes (the same
    values; ShuffleNet's interleaving concats 2.1 -> 1.7 us at 8x12x16x2); anything else goes to
    :func:`concat`."""
    axis, copy = attrs["axis"], np.copyto
    state = [None, (), ()]      # out, the parts, their (slice of out, part) pairs

    def call(tensors, *, out, workspace=None):
        kept = state[1]
        if out is state[0] and len(tensors) == len(kept) and all(a is b for a, b in zip(tensors, kept)):
            for dst, src in state[2]:
                copy(dst, src)
            return
        concat(tensors, out=out, axis=axis)
        if out.base is not None and all(isinstance(t, np.ndarray) and t.base is not None for t in tensors):
            state[:] = out, tuple(tensors), _concat_slices(tensors, out, normalize_axis(axis, out.ndim))
    return call


def _concat_slices(tensors, out: np.ndarray, ax: int) -> tuple:
    """``(slice of out, part)`` for each part of a concatenation along ``ax`` into ``out``, each as
    :func:`_as_runs`."""
    pairs, start, index = [], 0, [slice(None)] * out.ndim
    for t in tensors:
        index[ax] = slice(start, start + t.shape[ax])
        pairs.append(_as_runs(out[tuple(index)], t, ax))
        start += t.shape[ax]
    return tuple(pairs)


def _as_runs(dst: np.ndarray, src: np.ndarray, ax: int) -> tuple:
    """``(dst, src)`` as arrays of one void item per index before ``ax``: the part's values from
    ``ax`` on are one contiguous run in both (``src`` C-contiguous, ``dst`` a slice of a
    C-contiguous output along ``ax``), so numpy copies whole runs instead of looping over the last
    axis (a channels-last concat: runs of a pixel's channels; DenseNet's 56x56 parts of 32 channels
    168 -> 112 us for seven). The same bytes; as they are where that does not hold (objects, a
    strided part, an empty one)."""
    run = src.itemsize * int(np.prod(src.shape[ax:]))
    if src.dtype.hasobject or not src.size or not src.flags.c_contiguous or dst.dtype != src.dtype \
            or dst.strides[ax:] != src.strides[ax:] or run == src.itemsize:
        return dst, src
    item = np.dtype((np.void, run))
    whole = dst.base            # (numpy keeps the array that owns the memory: the output, or its arena)
    if not (isinstance(whole, np.ndarray) and whole.flags.c_contiguous and whole.flags.writeable):
        return dst, src
    offset = dst.__array_interface__["data"][0] - whole.__array_interface__["data"][0]
    raw = whole.reshape(-1).view(np.uint8)[offset:]
    runs = np.lib.stride_tricks.as_strided(raw, dst.shape[:ax] + (run,), dst.strides[:ax] + (1,))
    return runs.view(item)[..., 0], src.reshape(src.shape[:ax] + (-1,)).view(item)[..., 0]


concat.specialize_attrs = _specialize_concat


@register_kernel("rotate_half")
def rotate_half(x, *, out):
    """``concat(-x[..., h:], x[..., :h])`` for a last axis of ``2h``: two numpy calls into the halves
    of ``out`` (the chain it replaces made two slices, a negation and a concatenation)."""
    h = x.shape[-1] // 2
    if 2 * h != x.shape[-1]:
        raise ShapeError(f"rotate_half: the last axis of {x.shape} has an odd length")
    if np.may_share_memory(x, out):
        x = x.copy()
    np.negative(x[..., h:], out[..., :h])
    out[..., h:] = x[..., :h]


def _specialize_rotate_half(attrs: dict, constant: tuple):
    """Per instruction: the halves of an input and output that are views apart (an arena's: the
    same objects run after run) kept, so a call is the negation and the copy alone (rotary
    embeddings' q and k: the overlap check and four slices were ~1.3 us of ~2.5)."""
    seen = [None] * 6     # x, out, x's halves, out's halves
    negative, copy = np.negative, np.copyto

    def call(x, *, out, workspace=None):
        if x is seen[0] and out is seen[1]:
            negative(seen[3], seen[4])
            copy(seen[5], seen[2])
            return
        rotate_half(x, out=out)
        if x.__class__ is np.ndarray and out.__class__ is np.ndarray and x.base is not None \
                and out.base is not None and x.shape == out.shape and x.dtype == out.dtype \
                and not np.may_share_memory(x, out):
            h = x.shape[-1] // 2        # (an odd length raised above)
            seen[:] = x, out, x[..., :h], x[..., h:], out[..., :h], out[..., h:]
    return call


rotate_half.specialize_attrs = _specialize_rotate_half


def split_points(length: int, spec, name: str = "split") -> list[int]:
    """The boundaries ``[0, ..., length]`` of the pieces of a dim of ``length``:
    ``spec`` sections of ``ceil(length / spec)`` (the last may be smaller), or
    numpy split indices clamped to the dim."""
    if isinstance(spec, (int, np.integer)):
        sections = int(spec)
        chunk = -(-length // sections)
        points = [min(i * chunk, length) for i in range(sections)] + [length]
        if sections > 1 and (sections - 1) * chunk > length:
            raise ShapeError(f"{name}: cannot split a dim of {length} into {sections} sections")
        return points
    return [0] + [min(max(int(i), 0), length) for i in spec] + [length]


@register_kernel("split")
def split(x, *, out, indices_or_sections, axis):
    """Split along ``axis`` into a tuple of pieces (``out`` is a tuple)."""
    ax = normalize_axis(axis, x.ndim)
    points = split_points(x.shape[ax], indices_or_sections)
    if len(points) - 1 != len(out):
        raise ShapeError(f"split: {len(points) - 1} pieces but {len(out)} outputs")
    for piece, part in zip(out, _split_parts(x, ax, points)):
        np.copyto(piece, part)


def _split_parts(x: np.ndarray, ax: int, points: list) -> list:
    """The views of ``x``'s pieces along ``ax`` between consecutive ``points``."""
    index = [slice(None)] * x.ndim
    parts = []
    for start, stop in zip(points, points[1:]):
        index[ax] = slice(start, stop)
        parts.append(x[tuple(index)])
    return parts


def _specialize_split(attrs: dict, constant: tuple):
    """Per instruction: for an input and pieces that are views (an arena's: the same objects run
    after run; the tuple of pieces is made anew each run) the pieces' views kept, their copies
    alone each call; anything else goes to :func:`split`."""
    copy = np.copyto
    state = [None, (), ()]      # x, the pieces, their (piece, view of x) copies (as_item_runs)

    def call(x, *, out, workspace=None):
        kept = state[1]
        if x is state[0] and len(out) == len(kept) and all(a is b for a, b in zip(out, kept)):
            for dst, src in state[2]:
                copy(dst, src)
            return
        split(x, out=out, **attrs)
        if x.base is not None and all(isinstance(p, np.ndarray) and p.base is not None for p in out):
            ax = normalize_axis(attrs["axis"], x.ndim)
            parts = _split_parts(x, ax, split_points(x.shape[ax], attrs["indices_or_sections"]))
            state[:] = x, tuple(out), tuple(as_item_runs(p, q) for p, q in zip(out, parts))
    return call


def as_item_runs(dst: np.ndarray, src: np.ndarray) -> tuple:
    """``(dst, src)`` for ``np.copyto``: where ``src`` holds its last axis as runs of two or more
    contiguous values apart from each other (a slice of the channels of a channels-last value: a
    split's or a chunk's piece) and ``dst`` is C-contiguous of the same shape and dtype, both viewed
    with one void item per run, so numpy's copy loops over runs, not values (ShuffleNet's split of
    8x12 pixels of 32 channels in two: 2.1 -> 1.3 us; the same bytes); else as they are."""
    item = src.itemsize
    if (src.ndim < 2 or src.shape != dst.shape or src.dtype != dst.dtype or src.dtype.hasobject
            or src.shape[-1] < 2 or src.strides[-1] != item or src.strides[-2] == src.shape[-1] * item
            or not dst.flags.c_contiguous or 0 in src.shape):
        return dst, src
    run = np.dtype((np.void, src.shape[-1] * item))
    return dst.view(run), src.view(run)


split.specialize_attrs = _specialize_split
