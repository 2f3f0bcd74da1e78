"""Indexing kernels against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.errors import ShapeError

from .test_kernels_registry import assert_close, rand, run_kernel, run_onnx

DTYPES = ["float16", "float32", "int32", "int64", "bool"]
HUGE = 2 ** 31 - 1


@pytest.mark.parametrize("shape, axes, begin, end, strides", [
    ((7, 9), (1,), (2,), (-1,), None), ((7, 9), (0, 1), (1, 0), (6, 9), (2, 3)),
    ((7, 9), (0,), (-1,), (-HUGE,), (-1,)), ((7, 9), (1,), (-2,), (0,), (-2,)),
    ((7, 9), (1,), (5,), (HUGE,), (1,)), ((7, 9), (0,), (100,), (200,), None),
    ((7, 9), (-1,), (-100,), (3,), None), ((3, 4, 5), (2, 0), (4, 2), (0, -HUGE), (-1, -1)),
    ((0, 5), (1,), (1,), (3,), None), ((7, 9), (0,), (3,), (3,), None), ((7,), 0, 1, 6, 2),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_slice(dtype, shape, axes, begin, end, strides):
    rng = np.random.default_rng(0)
    x = rand(rng, shape, dtype)
    as_list = lambda v: [v] if isinstance(v, int) else list(v)          # noqa: E731
    inputs = [x, np.array(as_list(begin), np.int64), np.array(as_list(end), np.int64),
              np.array(as_list(axes), np.int64), None if strides is None else np.array(as_list(strides), np.int64)]
    expected, = run_onnx("Slice", inputs)
    assert_close(run_kernel("strided_slice", x, axes=axes, begin=begin, end=end, strides=strides), expected)


@pytest.mark.parametrize("shape, ishape, axis", [
    ((5, 4), (3,), 0), ((5, 4), (2, 3), 1), ((3, 5, 4), (), 1), ((3, 5, 4), (6, 2), -1),
    ((5, 4), (0,), 0), ((0, 4), (2,), 1), ((5,), (4, 4), 0),
])
@pytest.mark.parametrize("idtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_take(dtype, idtype, shape, ishape, axis):
    rng = np.random.default_rng(1)
    x = rand(rng, shape, dtype)
    n = shape[axis]
    indices = rng.integers(-n, n, size=ishape).astype(idtype) if n else np.zeros(ishape, idtype)
    expected, = run_onnx("Gather", [x, indices], {"axis": axis}, out_dtypes=[x.dtype])
    assert_close(run_kernel("take", x, indices, axis=axis), expected)


@pytest.mark.parametrize("shape, ishape, axis", [((256,), (7, 5), 0), ((5, 4), (2, 3), 1), ((3, 5, 4), (6,), -1),
                                            ((5, 4), (0,), 0), ((0, 4), (2,), 1)])
@pytest.mark.parametrize("idtype", ["int32", "int64"])
def test_take_in_bounds_is_take(idtype, shape, ishape, axis):
    """``in_bounds`` (indices proven in [0, n): a quantized table look-up) skips the bounds checks: the
    same values as checked, at both ends of the axis."""
    rng = np.random.default_rng(2)
    x = rand(rng, shape, "float32")
    n = shape[axis]
    indices = rng.integers(0, n, size=ishape).astype(idtype) if n else np.zeros(ishape, idtype)
    if indices.size:
        indices.flat[0], indices.flat[-1] = 0, n - 1
    expected = run_kernel("take", x, indices, axis=axis, in_bounds=False)
    np.testing.assert_array_equal(run_kernel("take", x, indices, axis=axis, in_bounds=True), expected)
    np.testing.assert_array_equal(expected, np.take(x, indices, axis=axis))


def test_take_out_of_range_names_the_op():
    with pytest.raises(ShapeError, match=r"take: index 5 is out of range for axis 0 of size 5"):
        run_kernel("take", np.zeros((5, 2), np.float32), np.array([1, 5]), axis=0)


def test_strided_unsigned_indices_out_of_range_name_the_index():
    """Unsigned indices as a strided view: the error's search for the bad index compares them
    with the size only (numpy 2.0-2.1 can crash comparing such a view with a negative int)."""
    indices = np.zeros((3, 6, 2), np.uint8)[..., 0]
    indices[1, 2] = 7
    with pytest.raises(ShapeError, match=r"take: index 7 is out of range for axis 0 of size 5"):
        run_kernel("take", np.zeros((5, 2), np.float32), indices, axis=0)


@pytest.mark.parametrize("shape, ishape, axis", [
    ((4, 5), (3, 5), 0), ((4, 5), (4, 2), 1), ((3, 4, 5), (3, 2, 5), -2), ((4, 5), (2, 3), 1),
    ((4, 5), (0, 5), 0), ((6,), (9,), 0),
])
@pytest.mark.parametrize("idtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_elements(dtype, idtype, shape, ishape, axis):
    rng = np.random.default_rng(2)
    x = rand(rng, shape, dtype)
    n = shape[axis]
    indices = rng.integers(-n, n, size=ishape).astype(idtype)
    # indices smaller than the data in another dim: onnxruntime allows it (the
    # spec only fixes the rank), onnx's reference evaluator does not
    smaller = any(i < d for k, (i, d) in enumerate(zip(ishape, shape)) if k != axis % len(shape))
    expected, = run_onnx("GatherElements", [x, indices], {"axis": axis}, out_dtypes=[x.dtype],
                         backend="ort" if smaller else "ref")
    assert_close(run_kernel("gather_elements", x, indices, axis=axis), expected)


def test_gather_elements_out_of_range_names_the_op():
    with pytest.raises(ShapeError, match="gather_elements: index -4 is out of range for axis 1 of size 3"):
        run_kernel("gather_elements", np.zeros((2, 3), np.float32), np.array([[0, -4]]), axis=1)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_strided_slice_specialized_per_instruction_follows_new_shapes(dtype):
    """The VM's per-instruction strided_slice keeps the index per input shape: the generic
    kernel's result for every shape, empty ones and negative strides included."""
    from relaxpack.runtime.kernels import get_kernel
    fn = get_kernel("strided_slice").fn
    attrs = {"axes": (0, -1), "begin": (1, -1), "end": (-1, -100), "strides": (2, -2)}
    call = fn.specialize_attrs(attrs, (False,))
    rng = np.random.default_rng(0)
    for shape in [(5, 7), (5, 7), (3, 4), (0, 4), (5, 1), (9, 7), (5, 7)]:
        x = rand(rng, shape, dtype)
        want = np.empty_like(x[1:-1:2, -1:-100:-2])
        fn(x, out=want, **attrs)
        got = np.full_like(want, 0)
        call(x, out=got)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, x[1:-1:2, ::-2])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_per_instruction_is_the_kernel(axis):
    """The specialized gather_elements keeps the sparse grid of the other axes per indices shape:
    the generic kernel's values over calls that keep, change and return to a shape, with negative
    indices, indices smaller than the data in the other axes, an empty one, and its error for an
    index out of range."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(41)
    fn = get_kernel("gather_elements").fn
    call = fn.specialize_attrs({"axis": axis}, (False, False))
    data = rng.standard_normal((3, 5, 7)).astype(np.float32)
    n = data.shape[axis]
    for shape in [(3, 5, 7), (3, 5, 7), (2, 4, 6), (3, 5, 7), (1, 1, 1), (0, 5, 7), (3, 5, 7)]:
        indices = rng.integers(-n, n, shape)
        want, got = np.empty(shape, np.float32), np.empty(shape, np.float32)
        fn(data, indices, out=want, axis=axis)
        call(data, indices, out=got)
        np.testing.assert_array_equal(got, want)
    bad = rng.integers(0, n, (3, 5, 7))
    bad[1, 2, 3] = n
    with pytest.raises(ShapeError) as generic:
        fn(data, bad, out=np.empty(bad.shape, np.float32), axis=axis)
    with pytest.raises(ShapeError) as specialized:
        call(data, bad, out=np.empty(bad.shape, np.float32))
    assert str(specialized.value) == str(generic.value)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idtype", ["int32", "int64"])
def test_gather_elements_by_repeated_indices_is_the_kernel(axis, idtype):
    """Indices equal to the last call's (DeBERTa's, made from the sequence length) take kept flat
    positions after the second call: the generic kernel's values over new data in the same arena
    views and in new arrays, the indices the same object, a copy, changed in place (one value, the
    sign of an index: -1 and n - 1 pick the same element), of another dtype, a strided data (the
    indexing expression), data of another shape along the gathered axis, other dtypes of data, an
    out of another dtype, indices past the compared size, and the out-of-range error."""
    from relaxpack.runtime.kernels import get_kernel
    from relaxpack.runtime.kernels.index import FLAT_GATHER_MAX_SIZE
    rng = np.random.default_rng(43)
    fn = get_kernel("gather_elements").fn
    call = fn.specialize_attrs({"axis": axis}, (False, False))
    arena = np.zeros(4096, np.float32)
    data, out = arena[:105].reshape(3, 5, 7), arena[200:305].reshape(3, 5, 7)
    n = data.shape[axis]
    indices = rng.integers(-n, n, (3, 5, 7)).astype(idtype)
    indices.flat[0] = n - 1
    flipped = indices.copy()
    flipped.flat[0] = -1
    moved = indices.copy()
    moved.flat[5] = (moved.flat[5] + 1) % n
    cases = [(data, indices, out)] * 4 + [(rand(rng, (3, 5, 7), "float32"), indices, np.empty((3, 5, 7), np.float32)),
             (data, indices.copy(), out), (data, flipped, out), (data, flipped, out), (data, moved, out),
             (data, moved.astype("int64" if idtype == "int32" else "int32"), out),
             (rand(rng, (3, 5, 14), "float32")[..., ::2], moved, out), (data, moved, out),
             (data, moved, np.empty((3, 5, 7), np.float64)), (data, moved, out)]
    for x, idx, o in cases:
        if x is data:
            data[...] = rand(rng, data.shape, "float32")
        want = np.empty(o.shape, o.dtype)
        fn(x, idx, out=want, axis=axis)
        call(x, idx, out=o)
        np.testing.assert_array_equal(o, want)
    in_place = moved.copy()
    for k in range(3):                          # the same object, its values changed between calls
        in_place.flat[k] = (in_place.flat[k] + 2) % n
        want = np.empty(out.shape, np.float32)
        fn(data, in_place, out=want, axis=axis)
        call(data, in_place, out=out)
        np.testing.assert_array_equal(out, want)
    other = rand(rng, (3, 5, 7), "int64")
    for _ in range(3):
        want = np.empty(out.shape, np.int64)
        fn(other, in_place, out=want, axis=axis)
        got = np.empty(out.shape, np.int64)
        call(other, in_place, out=got)
        np.testing.assert_array_equal(got, want)
    wide = [s + (9 if k == axis % 3 else 0) for k, s in enumerate((3, 5, 7))]
    longer = rand(rng, tuple(wide), "float32")   # a longer gathered axis: other positions
    for _ in range(3):
        want = np.empty(out.shape, np.float32)
        fn(longer, in_place, out=want, axis=axis)
        call(longer, in_place, out=out)
        np.testing.assert_array_equal(out, want)
    big = rng.integers(0, 7, (FLAT_GATHER_MAX_SIZE + 1, 1, 7))     # past the compared size: never kept
    source = rand(rng, (FLAT_GATHER_MAX_SIZE + 1, 1, 7), "float32")
    big_call = fn.specialize_attrs({"axis": 2}, (False, False))
    for _ in range(3):
        want = np.empty(big.shape, np.float32)
        fn(source, big, out=want, axis=2)
        got = np.empty(big.shape, np.float32)
        big_call(source, big, out=got)
        np.testing.assert_array_equal(got, want)
    bad = in_place.copy()
    bad.flat[7] = n
    with pytest.raises(ShapeError) as generic:
        fn(data, bad, out=np.empty(bad.shape, np.float32), axis=axis)
    with pytest.raises(ShapeError) as specialized:
        call(data, bad, out=np.empty(bad.shape, np.float32))
    assert str(specialized.value) == str(generic.value)


def test_strided_slice_specialized_on_arena_views_reads_every_calls_values():
    """An input and output that are the same arena views run after run keep the sliced view: each
    call copies the input's current values; another view, or an array owning its memory, slices anew."""
    from relaxpack.runtime.kernels import get_kernel
    fn = get_kernel("strided_slice").fn
    attrs = {"axes": (1,), "begin": (1,), "end": (-1,), "strides": (2,)}
    call = fn.specialize_attrs(attrs, (False,))
    arena = np.zeros(256, np.float32)
    x, out = arena[:35].reshape(5, 7), arena[100:115].reshape(5, 3)
    other_x, other_out = arena[40:61].reshape(3, 7), arena[120:129].reshape(3, 3)
    for k in range(6):
        x[...] = np.arange(35, dtype=np.float32).reshape(5, 7) * (k + 1)
        call(x, out=out)
        np.testing.assert_array_equal(out, x[:, 1:-1:2])
        other_x[...] = -k - np.arange(21, dtype=np.float32).reshape(3, 7)
        target = other_out if k % 2 else np.empty((3, 3), np.float32)
        call(other_x if k % 3 else other_x.T.copy().T, out=target)
        np.testing.assert_array_equal(target, other_x[:, 1:-1:2])
        empty = arena[200:200].reshape(0, 7)
        call(empty, out=np.empty((0, 3), np.float32))


@pytest.mark.parametrize("axes,strides", [((0,), (1,)), ((1, 0), (2, 1)), ((-1,), None)])
def test_dynamic_strided_slice_kept_per_shape_and_bounds(axes, strides):
    """The per-instruction form (index kept per input shape and run-time bounds) as the kernel:
    bounds that change, come back, and an input of another shape; the bounds as tuples or arrays."""
    from relaxpack.runtime.kernels.index import dynamic_strided_slice
    call = dynamic_strided_slice.specialize_attrs({"axes": axes, "strides": strides}, None)
    rng = np.random.default_rng(4)
    table = rng.standard_normal((9, 6)).astype(np.float32)
    for x, begin, end in [(table, (0,) * len(axes), (5,) * len(axes)), (table, (1,) * len(axes), (4,) * len(axes)),
                          (table, (0,) * len(axes), (5,) * len(axes)), (table[:4], (0,) * len(axes), (3,) * len(axes)),
                          (table, np.zeros(len(axes), np.int64), np.full(len(axes), 6, np.int64))]:
        want = np.empty_like(x[_index(x.ndim, axes, begin, end, strides)])
        dynamic_strided_slice(x, begin, end, out=want, axes=axes, strides=strides)
        got = np.full_like(want, np.nan)
        call(x, begin, end, out=got)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, x[_index(x.ndim, axes, begin, end, strides)])


def _index(ndim, axes, begin, end, strides):
    index = [slice(None)] * ndim
    for k, axis in enumerate(axes):
        index[axis % ndim] = slice(int(begin[k]), int(end[k]), 1 if strides is None else strides[k])
    return tuple(index)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_elements_by_frozen_indices_is_the_kernel(axis):
    """Frozen indices (a shape memo's table) take kept positions from their first call, by
    identity and at any size: an expanded table (every entry along the first dim the same) by
    one slice's positions from each row of the data, any other by flat positions; the generic
    kernel's values over new data each call, into new arrays, data longer than the indices in
    the other dims, data of another shape, another frozen object with other values, an
    unfrozen copy changed in place, and the out-of-range error on a first call."""
    from relaxpack.runtime.frozen import freeze
    from relaxpack.runtime.kernels import get_kernel
    from relaxpack.runtime.kernels.index import FLAT_GATHER_MAX_SIZE
    rng = np.random.default_rng(47)
    fn = get_kernel("gather_elements").fn
    shape = (6, 40, 30)                         # past the compared size: known only as frozen
    assert np.prod(shape) > FLAT_GATHER_MAX_SIZE
    n = shape[axis] + 3                         # the data's gathered axis is longer
    data_shape = tuple(d + 3 if k == axis else d + (2 if k else 0) for k, d in enumerate(shape))
    table = rng.integers(-n, n, (1,) + shape[1:])
    expanded = np.broadcast_to(table, shape).copy()
    other = rng.integers(-n, n, shape)
    arena = np.zeros(2 * int(np.prod(data_shape)) + int(np.prod(shape)), np.float32)
    data = arena[:int(np.prod(data_shape))].reshape(data_shape)
    out = arena[-int(np.prod(shape)):].reshape(shape)
    for indices in (expanded, other):
        freeze(indices)
        frozen = indices.view()                 # (the memo hands out a view of what it keeps)
        call = fn.specialize_attrs({"axis": axis}, (False, False))
        for k in range(4):
            data[...] = rand(rng, data_shape, "float32")
            want = np.empty(shape, np.float32)
            fn(data, frozen, out=want, axis=axis)
            target = out if k % 2 else np.empty(shape, np.float32)
            call(data, frozen, out=target)
            np.testing.assert_array_equal(target, want)
        longer = rand(rng, tuple(d + 1 if k == 0 else d for k, d in enumerate(data_shape)), "float32")
        for _ in range(2):                      # data of another shape: its own positions
            want = np.empty(shape, np.float32)
            fn(longer, frozen, out=want, axis=axis)
            call(longer, frozen, out=out)
            np.testing.assert_array_equal(out, want)
        loose = indices.copy()                  # not frozen: compared by value (and too large: never kept)
        for k in range(3):
            loose.flat[k] = (loose.flat[k] + 1) % n
            want = np.empty(shape, np.float32)
            fn(data, loose, out=want, axis=axis)
            call(data, loose, out=out)
            np.testing.assert_array_equal(out, want)
    bad = expanded.copy()
    bad.flat[-1] = n
    freeze(bad)
    call = fn.specialize_attrs({"axis": axis}, (False, False))
    with pytest.raises(ShapeError) as generic:
        fn(data, bad, out=np.empty(shape, np.float32), axis=axis)
    with pytest.raises(ShapeError) as specialized:
        call(data, bad.view(), out=np.empty(shape, np.float32))
    assert str(specialized.value) == str(generic.value)
