"""Struct-info inference of reductions."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, TensorStructInfo, Var, sym
from relaxpack.ops import make_call

b, s = sym("batch"), sym("seq")
X = (b, s, 64)


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def infer(name, *sinfos, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder().infer_call(make_call(name, *args, **attrs))


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis, keepdims, out", [
    (None, False, ()),
    (None, True, (1, 1, 1)),
    ((-1,), False, (b, s)),
    ((-1,), True, (b, s, 1)),
    ((0, 2), False, (s,)),
    ((2, -3), True, (1, s, 1)),
    (1, False, (b, 64)),                 # a single int is accepted too
    ((), False, X),
])
def test_reductions(op, axis, keepdims, out):
    assert infer(op, T(X), axis=axis, keepdims=keepdims) == T(out)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis, keepdims, out", [
    (-1, False, (b, s)), (1, True, (b, 1, 64)), (None, False, ()), (None, True, (1, 1, 1)),
])
def test_arg_reductions_give_int64(op, axis, keepdims, out):
    assert infer(op, T(X), axis=axis, keepdims=keepdims) == T(out, "int64")


def test_reduction_unknown_shapes():
    assert infer("sum", T(None, ndim=3), axis=(0,)) == T(None, ndim=2)
    assert infer("sum", T(None, ndim=3), axis=(0,), keepdims=True) == T(None, ndim=3)
    assert infer("mean", T(None), axis=(0,)) == T(None)
    assert infer("max", T(None)) == T(())


def test_reduction_errors():
    with pytest.raises(ShapeError, match=r"R\.sum: axis 3 is out of range for a tensor of rank 3 of shape "
                                         r"\(batch, seq, 64\)"):
        infer("sum", T(X), axis=(3,))
    with pytest.raises(ShapeError, match=r"R\.mean: repeated axis in \(1, -2\) for rank 3"):
        infer("mean", T(X), axis=(1, -2))
    with pytest.raises(ShapeError, match=r"R\.argmax: axis -4 is out of range"):
        infer("argmax", T(X), axis=-4)
    with pytest.raises(IRError, match=r"R\.argmin: attribute axis must be an int, got \(1,\)"):
        infer("argmin", T(X), axis=(1,))
    with pytest.raises(ShapeError, match=r"R\.sum: data must have a numeric \(int or float\) dtype, got bool"):
        infer("sum", T(X, "bool"))
    with pytest.raises(IRError, match=r"R\.prod has no attribute\(s\) \['keepdim'\]"):
        make_call("prod", Var("x", struct_info=T(X)), keepdim=True)


def test_collapse_sum_like_takes_the_shape_of_like_and_the_dtype_of_data():
    assert infer("collapse_sum_like", T(X, "float64"), T((s, 1))) == T((s, 1), "float64")
    assert infer("collapse_sum_like", T(None, "float32", 3), T(None, "float32")) == T(None, "float32")
    with pytest.raises(ShapeError, match="cannot collapse"):
        infer("collapse_sum_like", T((4,)), T((3, 4)))
