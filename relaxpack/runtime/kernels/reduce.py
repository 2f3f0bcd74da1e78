"""Reductions over axes (sum, mean, prod, max, min) and argmax/argmin.

``axis=None`` reduces every axis; reduced axes disappear, or stay as 1s with
``keepdims``. Low floats accumulate in float32. Empty reductions give the
identity (sum 0, prod 1), the dtype's lowest / highest value for max / min
(ONNX's rule for an empty ReduceMax / ReduceMin), and NaN for a float mean.
"""

from __future__ import annotations

import functools

import numpy as np

from ...errors import ShapeError
from ..fpstate import quiet
from ._math import axis_tuple, is_low_float, normalize_axis, scalar_array
from ._registry import register_kernel


def _accumulator(out: np.ndarray) -> np.dtype:
    return np.dtype(np.float32) if is_low_float(out.dtype) else out.dtype


def _reduce_into(ufunc_reduce, x, out, axes, keepdims, **kwargs) -> None:
    if is_low_float(out.dtype):
        result = ufunc_reduce(x, axis=axes, dtype=np.float32, keepdims=keepdims, **kwargs)
        np.copyto(out, result, casting="unsafe")
        return
    ufunc_reduce(x, axis=axes, dtype=out.dtype, out=out, keepdims=keepdims, **kwargs)


@register_kernel("sum")
def sum_(x, *, out, axis, keepdims):
    """Sum over ``axis`` (accumulating in the dtype, so integers wrap)."""
    axes = axis_tuple(axis, x.ndim)
    if out.dtype.kind in "iu" and _integer_inner_run_sum(x, axes, out):
        return
    _reduce_into(np.add.reduce, x, out, axes, keepdims)


#: an integer sum over a block of axes before the last runs as a float64 GEMM from this many rows
#: (numpy's reduction: ~20 ns a row to 384 rows of 48 values (5.8 us against 4.7), then 44 us for
#: 1488 rows of 16; the GEMM and its conversion ~2 us from 128 rows; measured, 1 thread) ...
INTEGER_RUN_MIN_ROWS = 128
#: ... to at most this many of up to 32 bits: every partial sum is an integer of magnitude below
#: 2**21 * 2**32 = 2**53, so exact in any order
INTEGER_RUN_MAX_ROWS = 1 << 21


def _integer_inner_run_sum(x: np.ndarray, axes: tuple, out: np.ndarray) -> bool:
    """``out`` = the integer sum of a C-contiguous integer ``x`` of at most 32 bits over a block of
    axes before the last (a channels-last image's spatial dims: a quantized model's global average
    pool) as ``ones(1, K) @ float64(x)``: numpy's integer reduction adds such rows one ufunc call
    at a time (1488 rows of 16 int32: 44 us; this 5 us). The exact sum (see
    :data:`INTEGER_RUN_MAX_ROWS`) is cast through int64 into ``out``'s type, wrapping as the
    integer accumulation does. False (nothing written) for any other sum."""
    plan = _integer_run_plan(x, axes)
    if plan is None:
        return False
    pre, rows = plan
    total = np.matmul(_ones(rows, np.float64).reshape(1, rows), x.reshape(pre, rows, -1).astype(np.float64))
    np.copyto(out, total.astype(np.int64).reshape(out.shape), casting="unsafe")
    return True


def _integer_run_plan(x: np.ndarray, axes: tuple) -> tuple | None:
    """``(pre, rows)`` of :func:`_integer_inner_run_sum`'s GEMM for this sum, or None where it does
    not apply."""
    axes = sorted(set(axes))
    if x.dtype.kind not in "iu" or x.dtype.itemsize > 4 or not axes or not x.flags.c_contiguous \
            or axes != list(range(axes[0], axes[-1] + 1)) or axes[-1] == x.ndim - 1 or x.size == 0:
        return None
    rows = 1
    for a in axes:
        rows *= x.shape[a]
    if not INTEGER_RUN_MIN_ROWS <= rows <= INTEGER_RUN_MAX_ROWS:
        return None
    pre = 1
    for d in x.shape[:axes[0]]:
        pre *= d
    return pre, rows


#: an integer sum's float64 copy and sums are the instruction's own up to this many bytes (else new
#: arrays per call, as the kernel makes)
SUM_SCRATCH_MAX_BYTES = 1 << 20


def _specialize_sum(attrs: dict, constant: tuple):
    """Per instruction: the calls :func:`sum_` makes for the layout (shapes, strides, dtypes) of
    the last call, kept while calls keep it, without its Python around them: the axes worked out
    once, and for :func:`_integer_inner_run_sum`'s GEMM the float64 copy of ``x``, the float64
    and int64 sums in arrays of the instruction's own (up to :data:`SUM_SCRATCH_MAX_BYTES`),
    written by the same conversions (the same integers). A squeeze-excite pool of a quantized
    CNN sums every block: 3.3 -> ~1.5 us a call on a small map. Low floats and other layouts go
    to the kernel."""
    state = [None, None]        # layout, run(x, out)

    def call(x, *, out):
        layout = (x.shape, x.strides, x.dtype, out.shape, out.strides, out.dtype)
        if layout != state[0]:
            state[0], state[1] = layout, _sum_run(x, out, axis_tuple(attrs["axis"], x.ndim), attrs["keepdims"])
        if state[1] is None:
            sum_(x, out=out, **attrs)
        else:
            state[1](x, out)
    return call


def _sum_run(x: np.ndarray, out: np.ndarray, axes: tuple, keepdims: bool):
    """``run(x, out)`` making :func:`sum_`'s numpy calls for arrays of this layout, or None."""
    if is_low_float(out.dtype) or not out.flags.c_contiguous:
        return None
    reduce = np.add.reduce
    plan = _integer_run_plan(x, axes) if out.dtype.kind in "iu" else None
    if plan is None:
        dtype = out.dtype

        def run(x, out):
            reduce(x, axis=axes, dtype=dtype, out=out, keepdims=keepdims)
        return run
    pre, rows = plan
    shape = (pre, rows, x.size // (pre * rows))
    total_shape = (pre, 1, shape[2])
    if (x.size + 2 * pre * shape[2]) * 8 > SUM_SCRATCH_MAX_BYTES:
        return None
    wide, total, whole = np.empty(shape), np.empty(total_shape), np.empty(total_shape, np.int64)
    ones, matmul, copy = _ones(rows, np.float64).reshape(1, rows), np.matmul, np.copyto
    out_shape = out.shape

    def run(x, out):
        copy(wide, x.reshape(shape), casting="unsafe")
        matmul(ones, wide, out=total)
        copy(whole, total, casting="unsafe")
        copy(out, whole.reshape(out_shape), casting="unsafe")
    return run


sum_.specialize_attrs = _specialize_sum


@register_kernel("prod")
def prod(x, *, out, axis, keepdims):
    """Product over ``axis``."""
    _reduce_into(np.multiply.reduce, x, out, axis_tuple(axis, x.ndim), keepdims)


@register_kernel("mean")
def mean(x, *, out, axis, keepdims):
    """Arithmetic mean over ``axis``. An integer mean is the integer sum
    divided by the count, truncated toward zero (as onnx's reference ReduceMean)."""
    axes = axis_tuple(axis, x.ndim)
    count = 1
    for a in axes:
        count *= x.shape[a]
    if out.dtype.kind in "iu":
        np.add.reduce(x, axis=axes, dtype=out.dtype, out=out, keepdims=keepdims)
        if count:       # divide truncating toward zero, in exact integer arithmetic
            negative = out < 0
            np.abs(out, out=out)
            np.floor_divide(out, count, out=out)
            np.negative(out, out=out, where=negative)
        return
    acc = _accumulator(out)
    total = _inner_run_sum(x, axes, acc)
    if total is None:
        total = np.add.reduce(x, axis=axes, dtype=acc, keepdims=keepdims)
    with quiet():
        np.divide(total.reshape(out.shape), count, out=out, casting="unsafe")


def specialize_mean(generic):
    """``specialize_attrs`` of a mean kernel ``generic(x, *, out, **attrs)`` whose float sums
    :func:`mean_layout` computes: per instruction the run of the last layout (x's and out's shape,
    strides and dtype) is kept, and serves any arrays of that layout (views made anew on every
    run, a fresh output: silero's mean 4.2 -> ~1.5 us), its views too while the next call passes
    the same arrays (an arena's views, the same objects run after run; arrays owning their memory
    are not held); a layout :func:`mean_layout` does not take (float16, integers) is kept as the
    kernel's call; ``mean_axes(x, attrs)`` the reduced axes."""
    def specialize(attrs: dict, constant: tuple):
        state = [None, None, None, None, None]      # x, out, run(), layout, run(x, out)

        def call(x, *, out):
            if x is state[0] and out is state[1]:
                state[2]()
                return
            layout = (x.shape, x.strides, x.dtype, out.shape, out.strides, out.dtype)
            if layout == state[3]:
                state[4](x, out)
                return
            run = mean_layout(x, out, generic.mean_axes(x, attrs))
            if run is None and hasattr(generic, "low_float_run"):
                run = generic.low_float_run(x, out, attrs)
            if run is None:             # (kept too: the layout alone decides it, ~2.5 us of checks)
                state[:] = None, None, None, layout, lambda x, out: generic(x, out=out, **attrs)
                generic(x, out=out, **attrs)
                return
            state[:] = None, None, None, layout, run
            if x.base is not None and out.base is not None:
                state[:3] = x, out, _bound(run, x, out)
            run(x, out)
        return call
    return specialize


mean.mean_axes = lambda x, attrs: axis_tuple(attrs["axis"], x.ndim)
mean.low_float_run = lambda x, out, attrs: float16_mean_layout(x, out, mean.mean_axes(x, attrs), attrs["keepdims"])
mean.specialize_attrs = specialize_mean(mean)


#: a sum over a block of axes before the last runs as a GEMM from this many summed rows on
INNER_RUN_MIN_ROWS = 16


def _inner_run_sum(x: np.ndarray, axes: tuple, acc: np.dtype) -> np.ndarray | None:
    """The sum of a C-contiguous float32/float64 ``x`` over a block of consecutive axes, as a
    product with ones: before the last axes (a channels-last image's spatial dims: (N, H, W, C)
    over H and W) ``ones(1, K) @ x.reshape(pre, K, post)``, numpy's reduction adding such rows
    one ufunc call at a time (1488 rows of 32 values: 44 us; the GEMM 4 us); the last axes
    (channels first) numpy's reduction of ``x.reshape(pre, K)`` along its rows (its pairwise
    sums, as over the axes: a product with ones sums in another order, and SqueezeNet's
    conformance model, whose 1000 channels have equal means near 1e10 into a softmax, then
    picks one class). The result has shape (pre, 1, post) or (pre,); None for any other sum."""
    plan = _inner_run_plan(x, axes, acc)
    if plan is None:
        return None
    last, pre, rows = plan
    if last:
        return np.add.reduce(x.reshape(pre, rows), axis=1)
    ones, post = _ones(rows, acc).reshape(1, rows), x.size // (pre * rows)
    if _by_dot(pre, post):
        return np.dot(ones, x.reshape(rows, post)).reshape(1, 1, post)
    return np.matmul(ones, x.reshape(pre, rows, -1))


def _by_dot(pre: int, post: int) -> bool:
    """Whether the product with ones is ``np.dot`` of 2-d views: for one image (``pre == 1``) of
    rows of more than one value, the same gemv call as ``np.matmul``'s ``(1, K) @ (K, C)`` (bit for
    bit: tests/runtime/test_kernels_reduce.py sweeps K and C) without its ~0.5 us of gufunc
    dispatch (16x24x16: 1.31 -> 0.78 us; an SE block's squeeze, a head's global pool)."""
    return pre == 1 and post > 1


def _inner_run_plan(x: np.ndarray, axes: tuple, acc: np.dtype) -> tuple | None:
    """How :func:`_inner_run_sum` sums: ``(last, pre, rows)`` (``last``: the summed axes are
    the trailing ones, numpy's reduction along rows; else the product with ones), or None."""
    axes = sorted(set(axes))
    if x.dtype != acc or acc not in (np.float32, np.float64) or not axes or not x.flags.c_contiguous \
            or axes != list(range(axes[0], axes[-1] + 1)) or x.size == 0:
        return None
    rows = 1
    for a in axes:
        rows *= x.shape[a]
    pre = 1
    for d in x.shape[:axes[0]]:
        pre *= d
    if axes[-1] == x.ndim - 1:      # numpy's own (pairwise) sum of each row: the same bits as over
        return True, pre, rows      # the axes, a third less setup
    if rows < INNER_RUN_MIN_ROWS:
        return None
    return False, pre, rows


def mean_runner(x: np.ndarray, out: np.ndarray, axes: tuple):
    """``run()``: ``out`` = the mean of ``x`` over ``axes`` by :func:`mean_layout`, with the views
    made here; None where that does not apply. Per instruction a global pool's or SE block's mean
    is then its two numpy calls (Python: 4.5 -> ~2 us)."""
    run = mean_layout(x, out, axes)
    return None if run is None else _bound(run, x, out)


def _bound(run, x: np.ndarray, out: np.ndarray):
    """``run(x, out)`` as a call of no arguments on x's and out's views it makes once."""
    source, target = run.views(x, out)
    calls = run.calls

    def bound():
        calls(source, target)
    return bound


def mean_layout(x: np.ndarray, out: np.ndarray, axes: tuple):
    """``run(x, out)``: ``out`` = the mean of ``x`` over ``axes`` as :func:`mean` computes it, for
    any arrays of the layout (shape, strides, dtype) of these ``x`` and ``out``, when
    :func:`_inner_run_sum` applies (float32/float64, ``out`` of ``x``'s dtype), its sum written
    into ``out`` and divided there (the same values: the sum rounds to ``out``'s dtype either
    way), or over a block of fewer rows before the last axis (:func:`_few_rows`); None where
    neither applies. It holds no array: ``run.views(x, out)`` are the views its two numpy calls
    ``run.calls(source, target)`` take."""
    if out.dtype != x.dtype or not out.flags.c_contiguous:
        return None
    plan = _inner_run_plan(x, axes, out.dtype)
    if plan is None:
        return _few_rows(x, out, axes)
    last, pre, rows = plan
    count, divide = scalar_array(rows, out.dtype), np.divide   # (0-d: see ._constants)
    if last:
        shapes, reduce = ((pre, rows), (pre,)), np.add.reduce

        def calls(source, target):
            reduce(source, axis=1, out=target)
            divide(target, count, out=target)
    else:
        post = x.size // (pre * rows)
        ones = _ones(rows, out.dtype).reshape(1, rows)
        if _by_dot(pre, post):
            shapes, dot = ((rows, post), (1, post)), np.dot

            def calls(source, target):
                dot(ones, source, target)
                divide(target, count, out=target)
        else:
            shapes, matmul = ((pre, rows, post), (pre, 1, post)), np.matmul

            def calls(source, target):
                matmul(ones, source, out=target)
                divide(target, count, out=target)
    return _layout_run(calls, *shapes)


def float16_mean_layout(x: np.ndarray, out: np.ndarray, axes: tuple, keepdims: bool):
    """``run(x, out)`` for a float16 :func:`mean`: the kernel's own two numpy calls (the float32 sum
    over ``axes``, its quotient by the count rounded into ``out``), the axes and count worked out
    once (ConvNeXt float16's pooled mean, 2688 values: ~12 -> ~9 us); None for other dtypes."""
    if x.dtype != np.float16 or out.dtype != np.float16:
        return None
    count, shape, reduce, divide, f32 = 1, out.shape, np.add.reduce, np.divide, np.float32
    for a in axes:
        count *= x.shape[a]

    def calls(source, target):
        total = reduce(source, axes, f32, None, keepdims)
        with quiet():
            divide(total.reshape(shape), count, out=target, casting="unsafe")
    return _layout_run(calls, None, shape)


def _layout_run(calls, source_shape: tuple | None, target_shape: tuple):
    """``run(x, out)`` = ``calls`` on x reshaped to ``source_shape`` (None: x itself) and out to
    ``target_shape``; ``run.views``, ``run.calls`` as :func:`mean_layout` says."""
    def views(x, out):
        return (x if source_shape is None else x.reshape(source_shape)), out.reshape(target_shape)

    def run(x, out):
        calls(x if source_shape is None else x.reshape(source_shape), out.reshape(target_shape))
    run.views, run.calls = views, calls
    return run


def _few_rows(x: np.ndarray, out: np.ndarray, axes: tuple):
    """:func:`mean_layout` for a mean of a C-contiguous float32/float64 ``x`` over a block of axes
    before the last of fewer than :data:`INNER_RUN_MIN_ROWS` rows (a global pool over a 2x3 map):
    numpy's reduction written into ``out`` and divided there, the calls :func:`mean` makes (the
    same values) without its Python around them (10 -> 2 us; the block reduced as one axis 1.13 ->
    0.92 us at 2x3x72); None for any other mean."""
    axes = tuple(sorted(set(axes)))
    if x.dtype not in (np.float32, np.float64) or not axes or not x.flags.c_contiguous or x.size == 0 \
            or axes != tuple(range(axes[0], axes[-1] + 1)) or axes[-1] == x.ndim - 1:
        return None
    count = 1
    for a in axes:
        count *= x.shape[a]
    pre = 1
    for d in x.shape[:axes[0]]:
        pre *= d
    reduce, divide, rows = np.add.reduce, np.divide, count
    count = scalar_array(count, out.dtype)

    def calls(source, target):
        # the block as one axis of a (pre, rows, post) view: numpy adds its rows in the same
        # order as over the block's axes (they coalesce), ~0.2 us less than a tuple axis
        reduce(source, 1, None, target)
        divide(target, count, out=target)
    post = x.size // (pre * rows)
    return _layout_run(calls, (pre, rows, post), (pre, post))


@functools.lru_cache(maxsize=64)
def _ones(n: int, dtype) -> np.ndarray:
    """A read-only vector of ``n`` ones (the sums above, without a fresh one per call)."""
    ones = np.ones(n, dtype)
    ones.setflags(write=False)
    return ones


def spatial_mean_into(data: np.ndarray, out: np.ndarray, channels_last: bool) -> bool:
    """``out`` = the mean of a C-contiguous float32/float64 image batch over its spatial dims
    ((N, *spatial, C) or (N, C, *spatial); ``out`` of the same dtype, any shape of that size)
    by :func:`_inner_run_sum`; False (nothing written) where that does not apply."""
    if out.dtype != data.dtype or data.ndim < 3:
        return False
    axes = tuple(range(1, data.ndim - 1)) if channels_last else tuple(range(2, data.ndim))
    total = _inner_run_sum(data, axes, data.dtype)
    if total is None:
        return False
    count = 1
    for a in axes:
        count *= data.shape[a]
    np.divide(total.reshape(out.shape), count, out=out)
    return True


def _extreme(dtype: np.dtype, lowest: bool):
    if dtype.kind == "b":
        return not lowest
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if lowest else info.max
    return -np.inf if lowest else np.inf


def _minmax(ufunc, x, out, axis, keepdims, lowest: bool) -> None:
    axes = axis_tuple(axis, x.ndim)
    kwargs = {}
    if any(x.shape[a] == 0 for a in axes):
        kwargs["initial"] = _extreme(x.dtype, lowest)
    if is_low_float(x.dtype) and x.dtype != np.float16:
        x = x.astype(np.float32)
    result = ufunc.reduce(x, axis=axes, keepdims=keepdims, **kwargs)
    np.copyto(out, result, casting="unsafe")


@register_kernel("max")
def max_(x, *, out, axis, keepdims):
    """Maximum over ``axis`` (NaN propagates)."""
    if not is_low_float(x.dtype) and not any(x.shape[a] == 0 for a in axis_tuple(axis, x.ndim)):
        np.maximum.reduce(x, axis=axis_tuple(axis, x.ndim), out=out, keepdims=keepdims)
        return
    _minmax(np.maximum, x, out, axis, keepdims, lowest=True)


@register_kernel("min")
def min_(x, *, out, axis, keepdims):
    """Minimum over ``axis`` (NaN propagates)."""
    if not is_low_float(x.dtype) and not any(x.shape[a] == 0 for a in axis_tuple(axis, x.ndim)):
        np.minimum.reduce(x, axis=axis_tuple(axis, x.ndim), out=out, keepdims=keepdims)
        return
    _minmax(np.minimum, x, out, axis, keepdims, lowest=False)


def _arg_reduce(fn, name, x, out, axis, keepdims, select_last_index) -> None:
    if axis is None:
        flat = x.reshape(-1)
        length = flat.shape[0]
        data, ax = flat, 0
    else:
        ax = normalize_axis(axis, x.ndim)
        length = x.shape[ax]
        data = x
    if length == 0:
        if out.size == 0:
            return
        raise ShapeError(f"{name}: cannot take the {name[3:]} of an empty axis (input shape {x.shape})")
    if is_low_float(data.dtype) and data.dtype != np.float16:
        data = data.astype(np.float32)
    if select_last_index:
        data = np.flip(data, axis=ax)
    result = fn(data, axis=ax, keepdims=True)
    if select_last_index:
        result = (length - 1) - result
    np.copyto(out, result.reshape(out.shape), casting="unsafe")


@register_kernel("argmax")
def argmax(x, *, out, axis, keepdims, select_last_index):
    """Index (int64) of the first (or last) maximum along ``axis``
    (``None``: of the flattened tensor; keepdims then keeps all dims as 1s)."""
    _arg_reduce(np.ndarray.argmax, "argmax", x, out, axis, keepdims, select_last_index)


def _specialize_arg_reduce(method, kernel):
    """Per instruction of argmax/argmin along an axis, first index: the method writing straight
    into ``out`` (an intp array of the result's shape) on a dtype numpy reduces as it is, ~0.15
    us where the kernel's checks, ``keepdims`` reduction and ``copyto`` cost ~1.3 us on a
    classifier's few scores; anything else (an empty axis, a low float, another ``out``,
    ``select_last_index``) goes to the kernel."""
    def specialize(attrs: dict, constant: tuple):
        axis, keepdims = attrs["axis"], attrs["keepdims"]
        if axis is None or attrs["select_last_index"]:
            return lambda x, *, out, workspace=None: kernel(x, out=out, **attrs)

        def call(x, *, out, workspace=None):
            if x.__class__ is np.ndarray and x.dtype in _ARG_DIRECT and out.dtype == np.intp \
                    and -x.ndim <= axis < x.ndim and x.shape[axis]:
                try:
                    method(x, axis, out, keepdims=bool(keepdims))
                    return
                except ValueError:          # out is not of the result's shape: the kernel reshapes
                    pass
            kernel(x, out=out, **attrs)
        return call
    return specialize


#: dtypes whose argmax/argmin the methods take as they are (the kernel widens other low floats)
_ARG_DIRECT = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                              np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))


@register_kernel("argmin")
def argmin(x, *, out, axis, keepdims, select_last_index):
    """Index (int64) of the first (or last) minimum along ``axis``."""
    _arg_reduce(np.ndarray.argmin, "argmin", x, out, axis, keepdims, select_last_index)


@register_kernel("collapse_sum_like")
def collapse_sum_like(x, like, *, out):
    """``x`` summed down to ``like``'s shape: over the axes a broadcast of
    ``like`` to ``x`` added in front, and over those where ``like`` has 1."""
    lead = x.ndim - out.ndim
    tail = x.shape[max(lead, 0):]
    if lead < 0 or like.shape != out.shape or any(o not in (d, 1) for o, d in zip(out.shape, tail)):
        raise ShapeError(f"collapse_sum_like: {x.shape} is not a broadcast of {like.shape}")
    axes = tuple(range(lead)) + tuple(lead + i for i, (o, d) in enumerate(zip(out.shape, tail)) if o == 1 != d)
    total = np.add.reduce(x, axis=axes, dtype=_accumulator(out), keepdims=True)
    np.copyto(out, total.reshape(out.shape), casting="unsafe")


argmax.specialize_attrs = _specialize_arg_reduce(np.ndarray.argmax, argmax)
argmin.specialize_attrs = _specialize_arg_reduce(np.ndarray.argmin, argmin)
