"""Struct-info inference of matmul (numpy semantics)."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, DimAnalyzer, TensorStructInfo, Var, sym
from relaxpack.ops import make_call

b, s, h, k, n = sym("batch"), sym("seq"), sym("heads"), sym("k"), sym("n")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def infer(*sinfos, analyzer=None, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder(analyzer=analyzer).infer_call(make_call("matmul", *args, **attrs))


@pytest.mark.parametrize("lhs, rhs, out", [
    ((2, 3), (3, 4), (2, 4)),
    ((b, s, 64), (64, 128), (b, s, 128)),
    ((b, h, s, 64), (b, h, 64, s), (b, h, s, s)),           # attention scores
    ((b, 1, s, k), (h, k, 32), (b, h, s, 32)),              # batch dims broadcast
    ((3,), (3, 4), (4,)),                                    # 1-D lhs: a row, dropped
    ((b, 2, 3), (3,), (b, 2)),                               # 1-D rhs: a column, dropped
    ((k,), (k,), ()),                                        # dot product
    ((3,), (b, 3, 5), (b, 5)),
])
def test_matmul_shapes(lhs, rhs, out):
    assert infer(T(lhs), T(rhs)) == T(out)


def test_inner_dims_provably_equal_with_ranges():
    assert infer(T((2, n)), T((4, 3)), analyzer=DimAnalyzer({"n": (4, 4)})) == T((2, 3))


@pytest.mark.parametrize("lhs, rhs, message", [
    ((2, 3), (4, 5), r"R\.matmul: inner dims of shapes \(2, 3\) and \(4, 5\) do not match: 3 != 4"),
    ((b, s, k), (n, 8), r"R\.matmul: inner dims of shapes \(batch, seq, k\) and \(n, 8\) do not match: "
                        r"k and n are not provably equal \(use R\.match_cast\)"),
    ((b, 2, 3), (5, 3, 4), r"R\.matmul: cannot broadcast shapes \(batch, 2, 3\) and \(5, 3, 4\): dims "
                           r"batch and 5 are not provably equal"),
    ((2, 2, 3), (5, 3, 4), r"R\.matmul: cannot broadcast shapes \(2, 2, 3\) and \(5, 3, 4\): dims 2 and 5"),
])
def test_matmul_errors(lhs, rhs, message):
    with pytest.raises(ShapeError, match=message):
        infer(T(lhs), T(rhs))


def test_matmul_rejects_scalars_and_mixed_dtypes():
    with pytest.raises(ShapeError, match=r"R\.matmul: rhs must have rank >= 1"):
        infer(T((2, 3)), T(()))
    with pytest.raises(ShapeError, match=r"R\.matmul: operands must have the same dtype, got float32 .* "
                                         r"and int8"):
        infer(T((2, 3)), T((3, 2), "int8"))


def test_matmul_out_dtype():
    assert infer(T((2, 3), "int8"), T((3, 4), "int8"), out_dtype="int32") == T((2, 4), "int32")
    with pytest.raises(IRError, match=r"R\.matmul: attribute out_dtype is not a dtype: 'int33'"):
        infer(T((2, 3)), T((3, 4)), out_dtype="int33")


def test_matmul_mixes_float_widths_only_with_out_dtype():
    """float16 attention's float32 probabilities by its float16 v: float operands of different widths
    when the result's dtype is named; without it, or with an integer operand, they must agree."""
    assert infer(T((2, 3)), T((3, 4), "float16"), out_dtype="float16") == T((2, 4), "float16")
    assert infer(T((2, 3), "bfloat16"), T((3, 4)), out_dtype="float32") == T((2, 4), "float32")
    with pytest.raises(ShapeError, match=r"R\.matmul: operands must have the same dtype, got float32 .* and float16"):
        infer(T((2, 3)), T((3, 4), "float16"))
    with pytest.raises(ShapeError, match=r"R\.matmul: operands must have the same dtype, got float32 .* and int8"):
        infer(T((2, 3)), T((3, 4), "int8"), out_dtype="float32")
    with pytest.raises(ShapeError, match=r"R\.matmul: operands must have the same dtype, got float64 .* and float16"):
        infer(T((2, 3), "float64"), T((3, 4), "float16"), out_dtype="float64")


@pytest.mark.parametrize("lhs, rhs, out", [
    (T(None, ndim=3), T((4, 5)), T(None, ndim=3)),
    (T(None, ndim=1), T(None, ndim=2), T(None, ndim=1)),
    (T(None, ndim=1), T(None, ndim=1), T(None, ndim=0)),
    (T(None), T((4, 5)), T(None)),
])
def test_matmul_unknown_shapes(lhs, rhs, out):
    assert infer(lhs, rhs) == out
