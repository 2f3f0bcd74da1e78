"""gather_nd, scatter_nd and scatter_elements kernels against onnx's
reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.runtime.kernels import get_kernel

from .test_kernels_registry import assert_close, rand, run_kernel, run_onnx

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def index_array(rng, shape, dims, negative=True):
    """Random indices of ``shape`` whose last axis indexes ``dims`` (negative ones too)."""
    cols = [rng.integers(-d if negative else 0, d, size=shape[:-1]) for d in dims]
    return np.stack(cols, axis=-1).astype(np.int64).reshape(shape)


def unique_index_tuples(rng, count, dims):
    """``count`` distinct index tuples into ``dims`` (some written negative)."""
    flat = rng.choice(int(np.prod(dims)), size=count, replace=False)
    tuples = np.stack(np.unravel_index(flat, dims), axis=-1).astype(np.int64)
    return np.where(rng.random(tuples.shape) < 0.3, tuples - np.array(dims), tuples)


# ---------------------------------------------------------------- gather_nd


@pytest.mark.parametrize("dshape, ishape, batch_dims", [
    ((2, 2), (2, 2), 0), ((2, 2), (2, 1), 0), ((2, 2, 2), (2, 1, 2), 0), ((2, 2, 2), (2, 1), 1),
    ((3, 4, 5, 6), (3, 4, 2, 1), 2), ((3, 4, 5), (7, 3), 0), ((3, 4, 5), (2, 6, 1), 0), ((5,), (3, 1), 0),
    ((3, 4, 5), (3, 0, 2), 1), ((4, 0, 3), (2, 1), 0),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_nd(dtype, dshape, ishape, batch_dims):
    rng = np.random.default_rng(0)
    data = rand(rng, dshape, dtype)
    indices = index_array(rng, ishape, dshape[batch_dims:batch_dims + ishape[-1]])
    want, = run_onnx("GatherND", [data, indices], {"batch_dims": batch_dims})
    assert_close(run_kernel("gather_nd", data, indices, batch_dims=batch_dims), want)


def test_gather_nd_empty_batch():
    # onnx's reference cannot reshape an empty batch; the result is empty
    got = run_kernel("gather_nd", np.zeros((0, 4), np.float32), np.zeros((0, 1), np.int64), batch_dims=1)
    assert got.shape == (0,) and got.dtype == np.float32


def test_gather_nd_int32_indices_and_strings():
    data = np.array([["a", "b"], ["c", "d"]], dtype=object)
    got = run_kernel("gather_nd", data, np.array([[1, 0], [-1, -1]], np.int32))
    assert got.tolist() == ["c", "d"]


@pytest.mark.parametrize("index_dtype", ["int64", "int32", "int8", "uint8"])
@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_rows_path_matches_fancy_indexing_into_a_strided_out(index_dtype, batch_dims):
    """The one-take path (signed indices) and the per-axis path (the others) agree with numpy's
    own fancy indexing, negative indices included, into a strided out."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3, 4, 5, 2)).astype(np.float32)
    dims = data.shape[batch_dims:batch_dims + 2]
    idx = np.stack([rng.integers(0 if index_dtype.startswith("u") else -d, d, (3, 6)) for d in dims], axis=-1)
    idx = idx.astype(index_dtype)
    if batch_dims:
        want = np.stack([data[i][tuple(idx[i][..., j] for j in range(2))] for i in range(3)])
    else:
        want = data[tuple(idx[..., j] for j in range(2))]
    big = np.zeros(want.shape[:-1] + (4,), np.float32)
    get_kernel("gather_nd").fn(data, idx, out=big[..., ::2], batch_dims=batch_dims)
    np.testing.assert_array_equal(big[..., ::2], want)
    assert not big[..., 1::2].any()


def test_gather_nd_out_of_range_names_the_op():
    with pytest.raises(ShapeError, match=r"gather_nd: index 3 is out of range for axis 1 of size 3"):
        run_kernel("gather_nd", np.zeros((2, 3)), np.array([[0, 3]]))
    strided = np.array([[[0, 9], [1, 9]], [[1, 9], [5, 9]]], np.uint8)[..., 0]    # (numpy 2.0-2.1 crashed on it)
    with pytest.raises(ShapeError, match=r"gather_nd: index 5 is out of range for axis 1 of size 3"):
        run_kernel("gather_nd", np.zeros((2, 3)), strided)
    with pytest.raises(ShapeError, match=r"gather_nd: index -3 is out of range for axis 0 of size 2"):
        run_kernel("gather_nd", np.zeros((2, 3)), np.array([[-3]]))


# ---------------------------------------------------------------- scatter_nd


@pytest.mark.parametrize("dshape, ishape", [
    ((8,), (4, 1)), ((4, 4, 4), (2, 1)), ((4, 4, 4), (3, 3)), ((5, 6), (2, 3, 2)), ((5, 6), (0, 1)),
    ((0, 3), (0, 1)), ((3, 0), (2, 1)),
])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_nd(dtype, reduction, dshape, ishape):
    rng = np.random.default_rng(1)
    data = rand(rng, dshape, dtype)
    k = ishape[-1]
    count = int(np.prod(ishape[:-1]))
    indices = unique_index_tuples(rng, count, dshape[:k]).reshape(ishape)
    updates = rand(rng, ishape[:-1] + dshape[k:], dtype)
    want, = run_onnx("ScatterND", [data, indices, updates], {"reduction": reduction})
    assert_close(run_kernel("scatter_nd", data, indices, updates, reduction=reduction), want)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_reductions_apply_every_duplicate(reduction):
    rng = np.random.default_rng(2)
    data = rand(rng, (4, 3), "float64")
    indices = np.array([[1], [3], [1], [-3], [1]], np.int64)
    updates = rand(rng, (5, 3), "float64")
    want, = run_onnx("ScatterND", [data, indices, updates], {"reduction": reduction})
    assert_close(run_kernel("scatter_nd", data, indices, updates, reduction=reduction), want)


def test_scatter_nd_errors_name_the_op():
    data = np.zeros((4, 3), np.float32)
    with pytest.raises(ShapeError, match=r"scatter_nd: index 4 is out of range for axis 0 of size 4"):
        run_kernel("scatter_nd", data, np.array([[4]]), np.zeros((1, 3), np.float32))


# ---------------------------------------------------------------- scatter_elements


@pytest.mark.parametrize("dshape, ishape, axis", [
    ((3, 3), (2, 3), 0), ((1, 5), (1, 2), 1), ((4, 5, 6), (2, 5, 3), -1), ((4, 5, 6), (4, 2, 6), 1),
    ((3, 3), (0, 3), 0), ((5,), (3,), 0), ((0, 4), (0, 2), 1),
])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_elements(dtype, reduction, dshape, ishape, axis):
    rng = np.random.default_rng(3)
    data = rand(rng, dshape, dtype)
    n = dshape[axis]
    # distinct targets along the axis for each position (ties are unspecified without a reduction)
    order = np.argsort(rng.random(ishape[:axis % len(dshape)] + (n,) + ishape[axis % len(dshape) + 1:]),
                       axis=axis)
    indices = np.take(order, np.arange(ishape[axis]), axis=axis).astype(np.int64)
    indices = np.where(rng.random(indices.shape) < 0.3, indices - n, indices)
    updates = rand(rng, ishape, dtype)
    want, = run_onnx("ScatterElements", [data, indices, updates], {"axis": axis, "reduction": reduction})
    assert_close(run_kernel("scatter_elements", data, indices, updates, axis=axis, reduction=reduction), want)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_elements_reductions_apply_every_duplicate(reduction):
    data = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)
    indices = np.array([[1, 1, -4, 3]], np.int64)
    updates = np.array([[1.1, 2.1, 0.5, 7.0]], np.float32)
    want, = run_onnx("ScatterElements", [data, indices, updates], {"axis": 1, "reduction": reduction})
    assert_close(run_kernel("scatter_elements", data, indices, updates, axis=1, reduction=reduction), want)


def test_scatter_elements_errors_name_the_op():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(ShapeError, match=r"scatter_elements: index -4 is out of range for axis 1 of size 3"):
        run_kernel("scatter_elements", data, np.array([[-4]]), np.zeros((1, 1), np.float32), axis=1)
    with pytest.raises(ShapeError, match=r"scatter_elements: indices \(3, 1\) exceed data \(2, 3\) off axis 1"):
        run_kernel("scatter_elements", data, np.zeros((3, 1), np.int64), np.zeros((3, 1), np.float32), axis=1)
