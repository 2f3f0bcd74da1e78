"""Reductions against onnx's reference evaluator (opset 18+ Reduce* with axes inputs)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from .test_kernels_registry import assert_close, rand, run_graph, run_kernel, run_onnx

FLOATS = ["float16", "float32", "float64"]
INTS = ["int32", "int64", "uint8"]

# (shape, axis, keepdims)
CASES = [((3, 5, 7), None, False), ((3, 5, 7), (1,), False), ((3, 5, 7), (0, 2), True),
         ((3, 5, 7), -1, True), ((3, 5, 7), (2, 0), False), ((4,), None, True),
         ((0, 3), (1,), False), ((0, 3), (0,), True), ((2, 0, 3), None, False)]

REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "prod": "ReduceProd", "max": "ReduceMax",
          "min": "ReduceMin"}


def reduce_ref(op, x, axis, keepdims, out_dtype=None):
    axes = None if axis is None else np.array([axis] if isinstance(axis, int) else axis, np.int64)
    return run_onnx(op, [x, axes], {"keepdims": int(keepdims)}, out_dtypes=[out_dtype or x.dtype])[0]


@pytest.mark.parametrize("shape, axis, keepdims", CASES)
@pytest.mark.parametrize("name, dtype", [(n, d) for n in REDUCE for d in FLOATS + INTS])
def test_reduce(name, dtype, shape, axis, keepdims):
    rng = np.random.default_rng(0)
    x = rand(rng, shape, dtype, 1, 4) if name == "prod" and np.dtype(dtype).kind in "iu" else rand(rng, shape, dtype)
    got = run_kernel(name, x, axis=axis, keepdims=keepdims)
    if name in ("max", "min") and 0 in shape and got.size:
        # an empty ReduceMax/Min is the dtype's lowest/highest value (ONNX >= 18)
        info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
        fill = (-np.inf if name == "max" else np.inf) if x.dtype.kind == "f" else \
            (info.min if name == "max" else info.max)
        assert_close(got, np.full(got.shape, fill, x.dtype))
        return
    if name == "mean" and x.size == 0 and got.size:
        assert np.isnan(got).all() if x.dtype.kind == "f" else (got == 0).all()
        return
    expected = reduce_ref(REDUCE[name], x, axis, keepdims)
    # float16: the kernel accumulates in float32, the reference in float16
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == "float16" else {}
    assert_close(got, expected, **tol)


# a block of axes before the last (a channels-last image's H and W): the mean sums by a GEMM from 16 rows
INNER_RUN_CASES = [((2, 31, 48, 32), (1, 2), True), ((1, 6, 5, 16), (2, 1), False), ((3, 17, 4), (1,), True),
                   ((2, 4, 5, 3, 2), (1, 2, 3), False), ((0, 8, 8, 4), (1, 2), True), ((1, 16, 8, 0), (1, 2), True),
                   ((2, 3, 4), (1,), False),                                     # 3 rows: numpy's reduction
                   # the last axes (a channels-first image's H and W): a matrix-vector product, any row count
                   ((3, 5, 2, 3), (2, 3), False), ((3, 4, 5, 1), (3, 2), True), ((4, 7), (1,), False),
                   ((2, 3, 0), (2,), True)]


@pytest.mark.parametrize("shape, axis, keepdims", INNER_RUN_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_mean_over_leading_axes_matches_onnxruntime(dtype, shape, axis, keepdims):
    rng = np.random.default_rng(1)
    x = rand(rng, shape, dtype)
    got = run_kernel("mean", x, axis=axis, keepdims=keepdims)
    if x.size == 0:
        assert np.isnan(got).all()
        return
    assert_close(got, reduce_ref("ReduceMean", x, axis, keepdims), rtol=1e-5, atol=1e-6)
    if x.ndim == 4 and x.shape[0] == 2:              # a NaN and an inf stay in their channels
        x[0, 3, 4, 1], x[1, 0, 0, 2] = np.nan, np.inf
        got = run_kernel("mean", x, axis=axis, keepdims=keepdims).reshape(2, -1)
        assert np.isnan(got[0, 1]) and got[1, 2] == np.inf and np.isfinite(np.delete(got, [1, 2 + got.shape[1]]))\
            .all()


INTEGER_SUM_CASES = INNER_RUN_CASES + [((1, 127, 1, 3), (1, 2), True),    # 127 rows: numpy's reduction
                                       ((2, 8, 16, 3), (1, 2), False)]      # 128: the float64 GEMM


@pytest.mark.parametrize("shape, axis, keepdims", INTEGER_SUM_CASES)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64"])
def test_an_integer_sum_is_exact_and_wraps(dtype, shape, axis, keepdims):
    """Over a block of axes before the last from 128 rows, a float64 product with ones (up to 32-bit
    values): the integer sum bit for bit, wrapping in the accumulating type as numpy's reduction,
    at the type's extremes."""
    from relaxpack.runtime.kernels.reduce import sum_
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if x.size:
        x.flat[::3] = info.max
        x.flat[1::5] = info.min
    axes = tuple(a % x.ndim for a in axis)
    np.testing.assert_array_equal(run_kernel("sum", x, axis=axis, keepdims=keepdims),
                                  np.add.reduce(x, axis=axes, keepdims=keepdims, dtype=x.dtype))
    for accumulate in ("int32", "int64", "uint8"):       # a wider (or narrower) accumulator than the data
        expected = np.add.reduce(x, axis=axes, keepdims=keepdims, dtype=accumulate)
        out = np.full(expected.shape, 7, accumulate)
        sum_(x, out=out, axis=axis, keepdims=keepdims)
        np.testing.assert_array_equal(out, expected)
    view = np.swapaxes(x, 0, -1)                        # not C-contiguous: numpy's reduction
    np.testing.assert_array_equal(run_kernel("sum", view, axis=(1,), keepdims=keepdims),
                                  np.add.reduce(view, axis=1, keepdims=keepdims, dtype=x.dtype))


def test_integer_mean_truncates_toward_zero():
    x = np.array([[-7, 0], [2, 0], [-3, 1]], np.int32)
    np.testing.assert_array_equal(run_kernel("mean", x, axis=(0,)), [-2, 0])
    expected = reduce_ref("ReduceMean", x, (0,), False)
    np.testing.assert_array_equal(run_kernel("mean", x, axis=(0,)), expected)


@pytest.mark.parametrize("dtype", ["bool"])
def test_max_min_of_bools(dtype):
    x = np.array([[True, False, False], [False, False, True]])
    np.testing.assert_array_equal(run_kernel("max", x, axis=(0,)), [True, False, True])
    np.testing.assert_array_equal(run_kernel("min", x, axis=1), [False, False])
    np.testing.assert_array_equal(run_kernel("max", np.zeros((0, 2), bool), axis=0), [False, False])


@pytest.mark.parametrize("shape, axis, keepdims", [
    ((3, 5, 7), 1, False), ((3, 5, 7), -1, True), ((3, 5, 7), 0, False), ((6,), 0, True),
    ((0, 4), 1, False), ((3, 5, 7), None, False), ((3, 5, 7), None, True),
])
@pytest.mark.parametrize("select_last_index", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "float32", "int32", "uint8"])
@pytest.mark.parametrize("name, op", [("argmax", "ArgMax"), ("argmin", "ArgMin")])
def test_arg_reduce(name, op, dtype, select_last_index, shape, axis, keepdims):
    rng = np.random.default_rng(1)
    x = rand(rng, shape, dtype, 0, 4)                  # few distinct values: ties to break
    got = run_kernel(name, x, axis=axis, keepdims=keepdims, select_last_index=select_last_index)
    attrs = {"keepdims": int(keepdims), "select_last_index": int(select_last_index), "axis": 0 if axis is None else axis}
    if axis is None:                                   # ONNX has no "flattened" argmax: reshape first
        nodes = [helper.make_node("Reshape", ["i0", "i1"], ["f"]),
                 helper.make_node(op, ["f"], ["r"], **attrs),
                 helper.make_node("Reshape", ["r", "i2"], ["o0"])]
        expected, = run_graph(nodes, [x, np.array([-1]), np.array(got.shape, np.int64)], [np.int64])
    else:
        expected, = run_onnx(op, [x], attrs, out_dtypes=[np.int64])
    assert_close(got, expected)


@pytest.mark.parametrize("shape, axis, keepdims", [
    ((3, 5, 7), 1, False), ((3, 5, 7), -1, True), ((3, 5, 7), 0, False), ((6,), 0, True), ((1, 3), 1, True),
    ((0, 4), 1, False), ((4, 0), 1, True), ((3, 5, 7), None, False), ((2, 3), -3, True),
])
@pytest.mark.parametrize("select_last_index", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reduce_per_instruction_is_the_kernel(name, dtype, select_last_index, shape, axis, keepdims):
    """The instruction's argmax/argmin (the method into ``out``) gives the kernel's indices and
    errors: ties, NaN, empty axes, an axis out of range, an ``out`` of another shape."""
    from relaxpack.runtime.kernels import get_kernel
    kernel = get_kernel(name).fn
    rng = np.random.default_rng(2)
    x = rand(rng, shape, "float32" if dtype == "bfloat16" else dtype, 0, 4)
    if dtype == "bfloat16":
        x = x.astype(np.float32).astype(dtype)
    if x.dtype.kind == "f" and x.size > 3:
        x.flat[[1, 3]] = np.nan
    attrs = dict(axis=axis, keepdims=keepdims, select_last_index=select_last_index)
    call = kernel.specialize_attrs(attrs, (False,))
    valid = axis is None or -x.ndim <= axis < x.ndim
    dims = list(x.shape) if valid else []
    if valid and axis is not None:
        dims[axis] = 1
    shapes = [tuple(d for k, d in enumerate(dims) if keepdims or axis is None or k != axis % x.ndim)] if valid \
        else [(2, 3)]
    shapes.append((int(np.prod(shapes[0])),))          # an out of the result's size, not its shape
    for out_shape in shapes:
        outcomes = []
        for fn in (call, lambda x, out: kernel(x, out=out, **attrs)):
            out = np.full(out_shape, -7, np.int64)
            try:
                fn(x, out=out)
                outcomes.append(out)
            except Exception as err:  # noqa: BLE001 - the two must fail alike
                outcomes.append((type(err), str(err)))
        if isinstance(outcomes[0], np.ndarray):
            np.testing.assert_array_equal(outcomes[0], outcomes[1])
        else:
            assert outcomes[0] == outcomes[1]


# ---------------------------------------------------------------- collapse_sum_like


@pytest.mark.parametrize("data, like", [((3, 4), (4,)), ((2, 3, 4), (3, 1)), ((2, 3), (2, 3)), ((5,), ()),
                                        ((2, 0, 3), (1, 3)), ((1, 4), (1, 1))])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_collapse_sum_like_undoes_a_broadcast(data, like, dtype):
    """Its defining property: the sum over everything broadcasting ``like`` to
    ``data`` replicated, i.e. the transpose of np.broadcast_to."""
    x = rand(np.random.default_rng(0), data, dtype)
    got = run_kernel("collapse_sum_like", x, np.zeros(like, dtype))
    assert got.shape == like and got.dtype == dtype
    probe = np.random.default_rng(1).standard_normal(like)
    # <B^T x, probe> == <x, B probe>, B the broadcast of like's shape to data's
    want = np.sum(x.astype(np.float64) * np.broadcast_to(probe, data))
    np.testing.assert_allclose(np.sum(got.astype(np.float64) * probe), want,
                               rtol=1e-2 if dtype == "float16" else 1e-6, atol=1e-2 if dtype == "float16" else 1e-9)


def test_collapse_sum_like_rejects_what_is_not_a_broadcast():
    from relaxpack.errors import ShapeError
    from relaxpack.runtime.kernels.reduce import collapse_sum_like
    with pytest.raises(ShapeError, match=r"\(3, 4\) is not a broadcast of \(3,\)"):
        collapse_sum_like(np.ones((3, 4)), np.ones(3), out=np.empty(3))


# (x shape, the kernel, its attributes): sums by numpy's row reduction (trailing axes), by the product
# with ones (a block before the last axis, from INNER_RUN_MIN_ROWS rows; fewer: numpy's reduction into the
# output) and calls the runner leaves to the kernel (axes that are not one block, an integer mean)
SPECIALIZED_MEANS = [
    ((2, 5, 7, 6), "mean", dict(axis=(2, 3), keepdims=False)),
    ((2, 5, 7, 6), "mean", dict(axis=(1, 2), keepdims=True)),
    ((1, 3, 5, 8), "mean", dict(axis=(1, 2), keepdims=True)),           # 15 rows: numpy's reduction
    ((3, 2, 2, 5), "mean", dict(axis=(1, 2), keepdims=False)),          # 4 rows a batch of 3, dims dropped
    ((2, 1, 1, 5), "mean", dict(axis=(1, 2), keepdims=True)),           # one row
    ((2, 5, 7, 6), "mean", dict(axis=(1, 3), keepdims=False)),          # not one block
    ((3, 9, 4), "mean", dict(axis=(1,), keepdims=True)),
    ((2, 6, 7, 5), "nn.global_avg_pool", dict(data_layout="NHWC")),
    ((2, 5, 6, 7), "nn.global_avg_pool", dict(data_layout="NCHW")),
    ((1, 2, 3, 4), "nn.global_avg_pool", dict(data_layout="NHWC")),     # 6 rows: numpy's reduction
    ((1, 4, 6, 16), "nn.global_avg_pool", dict(data_layout="NHWC")),    # one image: np.dot
    ((1, 4, 6, 16), "mean", dict(axis=(1, 2), keepdims=True)),
    ((1, 4, 6, 1), "mean", dict(axis=(1, 2), keepdims=True)),           # one channel: matmul
    ((2, 2, 3, 72), "nn.global_avg_pool", dict(data_layout="NHWC")),    # few rows, batch 2: one axis of a view
    ((1, 1, 2, 3, 40), "mean", dict(axis=(1, 2, 3), keepdims=False)),    # a block of three axes
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
@pytest.mark.parametrize("shape, name, attrs", SPECIALIZED_MEANS)
def test_a_mean_per_instruction_is_the_kernel(shape, name, attrs, dtype):
    """Per instruction a mean or global average pool keeps its views for an input and an output
    that are views (an arena's: the same objects run after run, new values each run): bit for bit
    the kernel, call after call; arrays of their own and the calls it does not take go to the kernel."""
    from relaxpack.runtime.kernels import get_kernel
    if name == "nn.global_avg_pool" and dtype == "int32":
        pytest.skip("a global average pool of integers is not an op")
    kernel = get_kernel(name).fn
    rng = np.random.default_rng(5)
    call = kernel.specialize_attrs(attrs, (False,))
    x_arena = np.empty(int(np.prod(shape)) + 3, dtype)
    x = x_arena[3:].reshape(shape)
    want = run_kernel(name, rand(rng, shape, dtype), **attrs)
    out = np.empty(want.size + 2, dtype)[2:].reshape(want.shape)
    for _ in range(3):
        x[...] = rand(rng, shape, dtype) * 100
        call(x, out=out)
        expected = np.empty_like(out)
        kernel(x, out=expected, **attrs)
        np.testing.assert_array_equal(out, expected)
    own = np.ascontiguousarray(x + 1)
    fresh = np.empty_like(out)
    call(own, out=fresh)
    kernel(own, out=expected, **attrs)
    np.testing.assert_array_equal(fresh, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
@pytest.mark.parametrize("shape, name, attrs", SPECIALIZED_MEANS)
def test_a_mean_per_instruction_serves_new_arrays_of_its_layout(shape, name, attrs, dtype):
    """Views made anew on every run (a reshape of an arena's buffer, at two places) and a fresh
    output each call: the kept layout's run reads and writes these arrays, not the first ones,
    bit for bit the kernel; an input of the same shape with other strides plans afresh. A layout
    the runs do not take (float16, integers) is kept as the kernel's call, the same on new arrays."""
    from relaxpack.runtime.kernels import get_kernel
    if name == "nn.global_avg_pool" and dtype == "int32":
        pytest.skip("a global average pool of integers is not an op")
    kernel = get_kernel(name).fn
    rng = np.random.default_rng(6)
    call = kernel.specialize_attrs(attrs, (False,))
    size = int(np.prod(shape))
    arena = np.empty(2 * size + 5, dtype)
    want_shape = run_kernel(name, rand(rng, shape, dtype), **attrs).shape
    for start in (3, 3, size + 5, 3, size + 5):
        x = arena[start:start + size].reshape(shape)
        x[...] = rand(rng, shape, dtype) * 100
        out, expected = np.empty(want_shape, dtype), np.empty(want_shape, dtype)
        call(x, out=out)
        kernel(x, out=expected, **attrs)
        np.testing.assert_array_equal(out, expected)
    other = np.ascontiguousarray(rand(rng, shape[::-1], dtype)).T
    call(other, out=out)
    kernel(other, out=expected, **attrs)
    np.testing.assert_array_equal(out, expected)
    wider = "float64" if dtype != "float64" else "float32"      # another dtype: planned afresh
    x, out, expected = rand(rng, shape, wider), np.empty(want_shape, wider), np.empty(want_shape, wider)
    call(x, out=out)
    kernel(x, out=expected, **attrs)
    np.testing.assert_array_equal(out, expected)


# (x shape, attributes): the integer GEMM (a block before the last axis from 128 rows), numpy's
# reduction (trailing axes, fewer rows, not one block), an empty sum, dims dropped
SPECIALIZED_SUMS = [
    ((1, 31, 48, 16), dict(axis=(1, 2), keepdims=True)),
    ((3, 8, 16, 5), dict(axis=(1, 2), keepdims=False)),
    ((1, 127, 1, 3), dict(axis=(1, 2), keepdims=True)),
    ((2, 64, 2, 3), dict(axis=(2, 3), keepdims=True)),
    ((2, 5, 7, 6), dict(axis=(1, 3), keepdims=False)),
    ((0, 16, 16, 3), dict(axis=(1, 2), keepdims=True)),
    ((4, 9), dict(axis=None, keepdims=False)),
]


@pytest.mark.parametrize("dtype, accumulate", [("int32", "int32"), ("uint8", "int32"), ("int8", "int64"),
                                               ("uint32", "uint32"), ("float32", "float32"), ("float16", "float16")])
@pytest.mark.parametrize("shape, attrs", SPECIALIZED_SUMS)
def test_a_sum_per_instruction_is_the_kernel(shape, attrs, dtype, accumulate):
    """Per instruction a sum keeps the calls of its last layout (the integer GEMM's float64 copy and
    sums its own): bit for bit the kernel call after call, on arena views and fresh arrays, at the
    type's extremes (the int32 sums wrap), and when the layout changes (other strides: planned
    afresh); float16 goes to the kernel."""
    from relaxpack.runtime.kernels.reduce import sum_
    rng = np.random.default_rng(8)
    call = sum_.specialize_attrs(attrs, (False,))
    size = int(np.prod(shape))
    arena = np.empty(2 * size + 5, dtype)
    axes = tuple(range(len(shape))) if attrs["axis"] is None else attrs["axis"]
    want_shape = np.add.reduce(np.zeros(shape, dtype), axis=axes, keepdims=attrs["keepdims"]).shape
    for start in (3, 3, size + 5, 3):
        x = arena[start:start + size].reshape(shape)
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            x[...] = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
            x.flat[::3] = info.max
        else:
            x[...] = rand(rng, shape, dtype) * 100
        out, expected = np.full(want_shape, 7, accumulate), np.full(want_shape, 5, accumulate)
        call(x, out=out)
        sum_(x, out=expected, **attrs)
        np.testing.assert_array_equal(out, expected)
    other = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1)
    call(other, out=out)
    sum_(other, out=expected, **attrs)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_image_sums_by_dot_as_matmul_sums_them(dtype):
    """A channels-last image's mean over H and W from INNER_RUN_MIN_ROWS pixels is ``np.dot`` of
    ones and the (K, C) view: bit for bit matmul's ``(1, K) @ (K, C)`` (the product main made),
    per instruction and in the kernel, at the sizes of SE blocks and heads and around them."""
    from relaxpack.runtime.kernels import get_kernel
    from relaxpack.runtime.kernels.reduce import INNER_RUN_MIN_ROWS
    rng = np.random.default_rng(7)
    kernel = get_kernel("nn.global_avg_pool").fn
    call = kernel.specialize_attrs({"data_layout": "NHWC"}, (False,))
    for rows, cols in [(INNER_RUN_MIN_ROWS, 2), (4, 5), (4, 6), (8, 12), (16, 24), (31, 48), (33, 47)]:
        for channels in (2, 3, 8, 16, 36, 72, 96, 120, 576, 1000):
            x = (rng.standard_normal((1, rows, cols, channels)) * 10).astype(dtype)
            k = rows * cols
            if k < INNER_RUN_MIN_ROWS:
                continue
            total = np.matmul(np.ones((1, k), dtype), x.reshape(1, k, channels))
            want = (total / np.array(k, dtype)).reshape(1, 1, 1, channels)
            out = np.empty((1, 1, 1, channels), dtype)
            kernel(x, out=out, data_layout="NHWC")
            np.testing.assert_array_equal(out, want)
            call(x, out=out)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("shape, axis, keepdims", [((1, 7, 12, 32), (1, 2), False), ((3, 8, 5, 32), (1, 2), True),
                                                   ((2, 3, 5), (2,), False), ((2, 3, 5), (0, 2), True),
                                                   ((0, 4, 3), (1,), False), ((4, 0, 3), (1,), True)])
def test_a_float16_mean_per_instruction_is_the_kernel(shape, axis, keepdims):
    """A float16 mean keeps the kernel's own numpy calls per layout (float16_mean_layout): bit for
    bit the kernel on arena views and fresh arrays, with sums past float16's largest value (the
    quotient rounds to inf, or stays finite where the count brings it back), infinities, NaN and
    empty axes (NaN), and a layout of other strides."""
    from relaxpack.runtime.kernels.reduce import float16_mean_layout, mean
    rng = np.random.default_rng(11)
    attrs = dict(axis=axis, keepdims=keepdims)
    call = mean.specialize_attrs(attrs, (False,))
    size = int(np.prod(shape))
    arena = np.empty(2 * size + 5, "float16")
    want_shape = np.add.reduce(np.zeros(shape), axis=axis, keepdims=keepdims).shape
    for start, fill in ((3, 1.0), (3, 6e4), (size + 5, 1.0), (3, np.inf)):
        x = arena[start:start + size].reshape(shape)
        x[...] = rand(rng, shape, "float32") * 100
        if size:
            x.flat[::4] = fill
            x.flat[-1] = np.nan if fill == np.inf else x.flat[-1]
        out, expected = np.full(want_shape, 7, "float16"), np.full(want_shape, 5, "float16")
        with np.errstate(all="ignore"):
            call(x, out=out)
            mean(x, out=expected, **attrs)
        np.testing.assert_array_equal(out.view(np.int16), expected.view(np.int16))
    other = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1)
    with np.errstate(all="ignore"):
        call(other, out=out)
        mean(other, out=expected, **attrs)
    np.testing.assert_array_equal(out.view(np.int16), expected.view(np.int16))
    assert float16_mean_layout(x, out, axis, keepdims) is not None
    assert float16_mean_layout(x.astype("float32"), out.astype("float32"), axis, keepdims) is None
