"""Struct-info inference of reshape, permute_dims, concat, split, astype,
broadcast_to, expand_dims, squeeze and flatten."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import (
    BlockBuilder, DimAnalyzer, Expr, ShapeExpr, ShapeStructInfo, TensorStructInfo, Tuple, TupleStructInfo, Var,
    evaluate, sym,
)
from relaxpack.ops import make_call

b, s, n = sym("batch"), sym("seq"), sym("n")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def arg(x, i=0):
    if isinstance(x, Expr):
        return x
    return Var(f"x{i}", struct_info=x)


def infer(name, *args, analyzer=None, **attrs):
    call = make_call(name, *[arg(a, i) for i, a in enumerate(args)], **attrs)
    return BlockBuilder(analyzer=analyzer).infer_call(call)


# ---------------------------------------------------------------- reshape

@pytest.mark.parametrize("data, target, out", [
    ((2, 3, 4), (6, 4), (6, 4)),
    ((2, 3, 4), (-1,), (24,)),
    ((2, 3, 4), (4, -1), (4, 6)),
    ((b, s, 768), (b, s, 12, -1), (b, s, 12, 64)),          # split heads
    ((b, s, 12, 64), (b, s, -1), (b, s, 768)),              # merge heads
    ((b * s, 768), (b, s, 12, -1), (b, s, 12, 64)),         # polynomial division
    ((b, s, 64), (-1, 64), (b * s, 64)),
    ((b, 2 * s), (b, s, -1), (b, s, 2)),
    ((b, s), (s, b), (s, b)),
])
def test_reshape(data, target, out):
    assert infer("reshape", T(data), ShapeExpr(target)) == T(out)


def test_reshape_minus_one_by_constant_is_floor_division():
    out = infer("reshape", T((b, 3)), ShapeExpr((-1, 2)))
    assert out == T(((3 * b) // 2, 2))
    assert evaluate(out.shape[0], {"batch": 4}) == 6


def test_reshape_with_shape_var_and_unknowns():
    target = Var("shape", struct_info=ShapeStructInfo((b, 4)))
    assert infer("reshape", T(None, ndim=3), target) == T((b, 4))
    target = Var("shape", struct_info=ShapeStructInfo(None, ndim=3))
    assert infer("reshape", T((b, 4)), target) == T(None, ndim=3)
    assert infer("reshape", T(None), ShapeExpr((b, -1))) == T(None, ndim=2)
    # -1 over a symbolic remainder that does not divide: rank only
    assert infer("reshape", T((b, s)), ShapeExpr((n, -1))) == T(None, ndim=2)


@pytest.mark.parametrize("data, target, message", [
    ((2, 3, 4), (5, -1), r"R\.reshape: cannot reshape \(2, 3, 4\) into \(5, -1\): 24 elements do not divide by 5"),
    ((2, 3, 4), (5, 5), r"R\.reshape: cannot reshape \(2, 3, 4\) into \(5, 5\): 24 != 25 elements"),
    ((b, 4), (-1, -1), r"R\.reshape: target shape \(-1, -1\) may hold at most one -1"),
    ((2, 0), (0, -1), r"R\.reshape: cannot infer the -1 in \(0, -1\) for \(2, 0\)"),
])
def test_reshape_errors(data, target, message):
    with pytest.raises(ShapeError, match=message):
        infer("reshape", T(data), ShapeExpr(target))


def test_reshape_element_count_checked_by_proof():
    # n * 4 vs batch * 4: neither provably equal nor provably different
    assert infer("reshape", T((b, 4)), ShapeExpr((n, 4))) == T((n, 4))
    # 4 * batch vs 5 * batch differ only when batch >= 1 is known
    assert infer("reshape", T((b, 4)), ShapeExpr((b, 5))) == T((b, 5))
    with pytest.raises(ShapeError, match=r"R\.reshape: cannot reshape \(batch, 4\) into \(batch, 5\): "
                                         r"4 \* batch != 5 \* batch elements"):
        infer("reshape", T((b, 4)), ShapeExpr((b, 5)), analyzer=DimAnalyzer({"batch": (1, None)}))


def test_reshape_needs_a_shape_argument():
    with pytest.raises(ShapeError, match=r"R\.reshape: argument 1 \(shape\) must be a shape, got \(2,\)"):
        infer("reshape", T((2,)), T((2,), "int64"))


# ---------------------------------------------------------------- permute_dims

@pytest.mark.parametrize("axes, out", [
    (None, (64, s, b)), ((0, 2, 1), (b, 64, s)), ((-1, 0, 1), (64, b, s)),
])
def test_permute_dims(axes, out):
    assert infer("permute_dims", T((b, s, 64)), axes=axes) == T(out)


def test_permute_dims_errors():
    with pytest.raises(ShapeError, match=r"R\.permute_dims: axes \(0, 1\) do not permute the 3 dims of "
                                         r"\(batch, seq, 64\)"):
        infer("permute_dims", T((b, s, 64)), axes=(0, 1))
    with pytest.raises(ShapeError, match=r"R\.permute_dims: repeated axis in \(0, 1, -2\)"):
        infer("permute_dims", T((b, s, 64)), axes=(0, 1, -2))


# ---------------------------------------------------------------- concat and split

def tup(*sinfos):
    return Tuple(tuple(Var(f"t{i}", struct_info=si) for i, si in enumerate(sinfos)))


@pytest.mark.parametrize("fields, axis, out", [
    (((2, 3), (4, 3)), 0, (6, 3)),
    (((b, s, 8), (b, n, 8), (b, 1, 8)), 1, (b, s + n + 1, 8)),    # symbolic sum (KV cache)
    (((b, s, 8), (b, s, 8)), -1, (b, s, 16)),
    (((b, 4),), 0, (b, 4)),
])
def test_concat(fields, axis, out):
    assert infer("concat", tup(*[T(f) for f in fields]), axis=axis) == T(out)


def test_concat_tuple_var_and_unknown_shapes():
    v = Var("kv", struct_info=TupleStructInfo((T((b, s)), T((b, 2)))))
    assert infer("concat", v, axis=1) == T((b, s + 2))
    assert infer("concat", tup(T((b, s)), T(None, ndim=2)), axis=1) == T(None, ndim=2)


@pytest.mark.parametrize("fields, axis, error, message", [
    (((2, 3), (4, 5)), 0, ShapeError, r"R\.concat: cannot concatenate \(2, 3\), \(4, 5\) along axis 0: dim 1 "
                                      r"differs: 3 != 5"),
    (((b, 3), (n, 3)), 1, ShapeError, r"R\.concat: cannot concatenate \(batch, 3\), \(n, 3\) along axis 1: "
                                      r"dim 0 differs: batch and n are not provably equal"),
    (((2, 3), (2,)), 0, ShapeError, r"R\.concat: cannot concatenate tensors of different ranks: \(2, 3\), \(2,\)"),
    (((2, 3), (2, 3)), 2, ShapeError, r"R\.concat: axis 2 is out of range for a tensor of rank 2"),
])
def test_concat_errors(fields, axis, error, message):
    with pytest.raises(error, match=message):
        infer("concat", tup(*[T(f) for f in fields]), axis=axis)
    with pytest.raises(ShapeError, match=r"R\.concat: operands must have the same dtype, got float32 \(field 0"):
        infer("concat", tup(T((2,)), T((2,), "int32")))


@pytest.mark.parametrize("shape, spec, axis, outs", [
    ((b, 12), 3, 1, [(b, 4)] * 3),
    ((b, 10), (3, 7), 1, [(b, 3), (b, 4), (b, 3)]),
    ((10, b), (3, 20), 0, [(3, b), (7, b), (0, b)]),              # numpy clamps split points
    ((b, 3 * s), 3, -1, [(b, s)] * 3),                             # symbolic, divisible
    ((10,), 4, 0, [(3,), (3,), (3,), (1,)]),                        # last section smaller (ONNX)
])
def test_split(shape, spec, axis, outs):
    assert infer("split", T(shape), indices_or_sections=spec, axis=axis) == TupleStructInfo(
        tuple(T(o) for o in outs))


def test_split_symbolic():
    ana = DimAnalyzer({"seq": (8, 512)})
    out = infer("split", T((s, 4)), indices_or_sections=(2, 8), analyzer=ana)
    assert out == TupleStructInfo((T((2, 4)), T((6, 4)), T((s - 8, 4))))
    out = infer("split", T((s, 4)), indices_or_sections=(2, 8))     # seq may be < 8
    assert out == TupleStructInfo((T(None, ndim=2),) * 3)
    out = infer("split", T((s,)), indices_or_sections=2)
    assert [evaluate(f.shape[0], {"seq": 7}) for f in out.fields] == [4, 3]


def test_split_errors():
    with pytest.raises(ShapeError, match=r"R\.split: cannot split \(5,\) into 4 sections"):
        infer("split", T((5,)), indices_or_sections=4)
    with pytest.raises(IRError, match=r"R\.split: split indices must be non-negative and ascending"):
        infer("split", T((5,)), indices_or_sections=(3, 1))
    with pytest.raises(IRError, match=r"R\.split needs attribute\(s\) \['indices_or_sections'\]"):
        make_call("split", Var("x", struct_info=T((4,))))


# ---------------------------------------------------------------- the rest

def test_astype():
    assert infer("astype", T((b, 4)), dtype="float16") == T((b, 4), "float16")
    with pytest.raises(IRError, match=r"R\.astype: attribute dtype is not a dtype: 'float31'"):
        infer("astype", T((b, 4)), dtype="float31")


@pytest.mark.parametrize("data, target", [
    ((1, 4), (b, s, 4)), ((s, 1), (b, s, 8)), ((), (2, 3)), ((b, 4), (b, 4)),
])
def test_broadcast_to(data, target):
    assert infer("broadcast_to", T(data), ShapeExpr(target)) == T(target)


def test_broadcast_to_errors():
    with pytest.raises(ShapeError, match=r"R\.broadcast_to: cannot broadcast data of shape \(3, 4\) to "
                                         r"\(batch, 2, 4\): dims 3 and 2 differ and 3 is not 1"):
        infer("broadcast_to", T((3, 4)), ShapeExpr((b, 2, 4)))
    with pytest.raises(ShapeError, match=r"R\.broadcast_to: cannot broadcast data of shape \(seq, 4\) to "
                                         r"\(batch, 4\): dims seq and batch are not provably equal"):
        infer("broadcast_to", T((s, 4)), ShapeExpr((b, 4)))
    with pytest.raises(ShapeError, match=r"R\.broadcast_to: cannot broadcast \(2, 2, 2\) to rank 2"):
        infer("broadcast_to", T((2, 2, 2)), ShapeExpr((2, 2)))


@pytest.mark.parametrize("axis, out", [
    (0, (1, b, s)), ((-1,), (b, s, 1)), ((0, 3), (1, b, s, 1)), ((1, 2), (b, 1, 1, s)),
])
def test_expand_dims(axis, out):
    assert infer("expand_dims", T((b, s)), axis=axis) == T(out)


def test_expand_dims_errors():
    with pytest.raises(ShapeError, match=r"R\.expand_dims: axis 3 is out of range for a tensor of rank 3"):
        infer("expand_dims", T((b, s)), axis=(3,))


@pytest.mark.parametrize("shape, axis, out", [
    ((b, 1, 64), (1,), (b, 64)),
    ((1, 1, 4), None, (4,)),
    ((b, 1, 64), -2, (b, 64)),
    ((b, 1), (-1,), (b,)),
])
def test_squeeze(shape, axis, out):
    assert infer("squeeze", T(shape), axis=axis) == T(out)


def test_squeeze_symbolic():
    # batch might be 1: whether it is squeezed is unknown, so is the rank
    assert infer("squeeze", T((b, 1, 64))) == T(None)
    ana = DimAnalyzer({"batch": (2, 64)})
    assert infer("squeeze", T((b, 1, 64)), analyzer=ana) == T((b, 64))
    with pytest.raises(ShapeError, match=r"R\.squeeze: cannot squeeze axis 1 of shape \(batch, 3\): dim 3 is not 1"):
        infer("squeeze", T((b, 3)), axis=(1,))
    with pytest.raises(ShapeError, match=r"R\.squeeze: cannot squeeze axis 0 of shape \(batch, 3\): dim batch"):
        infer("squeeze", T((b, 3)), axis=(0,), analyzer=ana)


@pytest.mark.parametrize("axis, out", [
    (1, (b, s * 64)), (0, (1, b * s * 64)), (3, (b * s * 64, 1)), (-1, (b * s, 64)), (2, (b * s, 64)),
])
def test_flatten(axis, out):
    assert infer("flatten", T((b, s, 64)), axis=axis) == T(out)


def test_flatten_errors_and_unknown():
    with pytest.raises(ShapeError, match=r"R\.flatten: axis 4 is out of range \[-3, 3\] for \(batch, seq, 64\)"):
        infer("flatten", T((b, s, 64)), axis=4)
    assert infer("flatten", T(None)) == T(None, ndim=2)
