"""Struct-info inference of gather_nd, scatter_nd and scatter_elements."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, TensorStructInfo, Var, sym
from relaxpack.ops import make_call

b, n, m = sym("batch"), sym("n"), sym("m")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def I(shape, ndim=-1):          # noqa: E743  (indices)
    return TensorStructInfo(shape, "int64", ndim)


def infer(name, *sinfos, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder().infer_call(make_call(name, *args, **attrs))


# ---------------------------------------------------------------- gather_nd


@pytest.mark.parametrize("data, indices, batch_dims, out", [
    (T((2, 2)), I((2, 2)), 0, T((2,))),                          # ONNX example 1: whole index tuples
    (T((2, 2)), I((2, 1)), 0, T((2, 2))),                        # example 2: slices
    (T((2, 2, 2)), I((2, 1, 2)), 0, T((2, 1, 2))),
    (T((2, 2, 2)), I((2, 1)), 1, T((2, 2))),                     # example 5: batch_dims 1
    (T((b, 5, 7, 3)), I((b, n, 2)), 1, T((b, n, 3))),
    (T((b, 5, 7), "int8"), I((m, 3)), 0, T((m,), "int8")),
    (T((b, 5, 7)), I((4, 5, 1)), 2, T((4, 5))),
    (T(None, "float32", 3), I((4, 2)), 0, T(None, "float32", 2)),
    (T((2, 3)), I(None, 2), 0, T(None, "float32")),               # index depth unknown: rank unknown
    (T((2, 3)), I((4, n)), 0, T(None, "float32")),
])
def test_gather_nd_shapes(data, indices, batch_dims, out):
    assert infer("gather_nd", data, indices, batch_dims=batch_dims) == out


@pytest.mark.parametrize("data, indices, batch_dims, message", [
    (T((2, 3)), I((4, 3)), 0, r"indices of shape \(4, 3\) index 3 axes, but data of shape \(2, 3\) has 2 after "
                              r"0 batch dims"),
    (T((2, 3)), I((2, 2)), 1, r"indices of shape \(2, 2\) index 2 axes, but data of shape \(2, 3\) has 1"),
    (T((2, 3)), I((4, 0)), 0, r"indices of shape \(4, 0\) index 0 axes"),
    (T((2, 3)), I((3, 1)), 1, r"batch dim 0 differs: data \(2, 3\), indices \(3, 1\) \(2 != 3\)"),
    (T((2, 3)), I((2, 1)), 2, r"batch_dims 2 must be less than the rank of data \(2, 3\)"),
    (T((2, 3)), I(()), 0, r"indices must have rank >= 1"),
    (T(()), I((1,)), 0, r"cannot gather from a scalar"),
    (T((2, 3)), T((2, 1)), 0, r"indices must have an integer dtype, got float32"),
])
def test_gather_nd_errors(data, indices, batch_dims, message):
    with pytest.raises(ShapeError, match=r"R\.gather_nd: " + message):
        infer("gather_nd", data, indices, batch_dims=batch_dims)
    with pytest.raises(IRError, match=r"R\.gather_nd: batch_dims must be >= 0, got -1"):
        infer("gather_nd", T((2, 3)), I((2, 1)), batch_dims=-1)


# ---------------------------------------------------------------- scatter_nd


@pytest.mark.parametrize("data, indices, updates", [
    (T((8,)), I((4, 1)), T((4,))),
    (T((4, 4, 4)), I((2, 1)), T((2, 4, 4))),
    (T((b, 5)), I((n, 2)), T((n,))),
    (T((b, 5)), I((n, 1)), T((m, 5))),             # not provably different: checked at run time
    (T((b, 5)), I(None, 2), T((3, 5))),
])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_is_shaped_like_data(data, indices, updates, reduction):
    assert infer("scatter_nd", data, indices, updates, reduction=reduction) == data


@pytest.mark.parametrize("sinfos, attrs, error, message", [
    ((T((4, 4)), I((2, 1)), T((2, 3))), {}, ShapeError,
     r"updates has shape \(2, 3\), expected \(2, 4\) \(indices \(2, 1\) into data \(4, 4\)\)"),
    ((T((4, 4)), I((2, 3)), T((2,))), {}, ShapeError, r"indices of shape \(2, 3\) index 3 axes"),
    ((T((4, 4)), I((2, 1)), T((2, 4), "float16")), {}, ShapeError,
     r"operands must have the same dtype, got float32 \(data, shape \(4, 4\)\) and float16 \(updates"),
    ((T((4, 4)), I((2, 1)), T((2, 4))), {"reduction": "sum"}, IRError,
     r"attribute reduction must be one of none, add, mul, max, min; got 'sum'"),
    ((T(()), I((1,)), T(())), {}, ShapeError, r"cannot scatter into a scalar"),
])
def test_scatter_nd_errors(sinfos, attrs, error, message):
    with pytest.raises(error, match=r"R\.scatter_nd: " + message):
        infer("scatter_nd", *sinfos, **attrs)


# ---------------------------------------------------------------- scatter_elements


@pytest.mark.parametrize("data, indices, axis", [
    (T((3, 3)), I((2, 3)), 0), (T((1, 5), "int32"), I((1, 2)), 1), (T((b, n)), I((b, 2)), -1),
    (T(None, "float32", 2), I((2, 2)), 1),
])
def test_scatter_elements_is_shaped_like_data(data, indices, axis):
    updates = TensorStructInfo(indices.shape, data.dtype, indices.ndim)
    assert infer("scatter_elements", data, indices, updates, axis=axis, reduction="add") == data


@pytest.mark.parametrize("sinfos, attrs, message", [
    ((T((3, 3)), I((2,)), T((2,))), {}, r"data \(3, 3\), indices \(2,\) and updates \(2,\) must have the same rank"),
    ((T((3, 3)), I((2, 3)), T((2, 2))), {}, r"updates has shape \(2, 2\), expected \(2, 3\) \(the shape of indices\)"),
    ((T((3, 3)), I((2, 3)), T((2, 3))), {"axis": 2}, r"axis 2 is out of range for a tensor of rank 2"),
    ((T(()), I(()), T(())), {}, r"cannot scatter into a scalar"),
])
def test_scatter_elements_errors(sinfos, attrs, message):
    with pytest.raises(ShapeError, match=r"R\.scatter_elements: " + message):
        infer("scatter_elements", *sinfos, **attrs)
