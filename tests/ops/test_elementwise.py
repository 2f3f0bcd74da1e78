"""Struct-info inference of unary, binary (broadcasting) and where ops."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, DimAnalyzer, TensorStructInfo, Var, sym
from relaxpack.ops import get_op_def, make_call
from relaxpack.ops.definitions.elementwise import SELU_ALPHA, SELU_GAMMA

b, s, n, m = sym("batch"), sym("seq"), sym("n"), sym("m")


def T(shape, dtype="float32", ndim=-1, vdevice="global"):
    return TensorStructInfo(shape, dtype, ndim, vdevice)


def infer(name, *sinfos, analyzer=None, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder(analyzer=analyzer).infer_call(make_call(name, *args, **attrs))


FLOAT_ONLY = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "round", "round_to_float16", "isnan",
              "nn.gelu", "nn.silu", "nn.softplus", "nn.hard_swish", "nn.leakyrelu", "nn.selu"]


@pytest.mark.parametrize("op", ["abs", "negative", "sign", "square", "nn.relu", "clip", *FLOAT_ONLY[:-2]])
@pytest.mark.parametrize("shape", [(2, 3), (b, s, 64), ()])
def test_unary_keeps_shape_and_dtype(op, shape):
    out = infer(op, T(shape))
    assert out == T(shape, "bool" if op == "isnan" else "float32")


@pytest.mark.parametrize("op", FLOAT_ONLY)
def test_float_only_ops_reject_ints(op):
    with pytest.raises(ShapeError, match=rf"R\.{op}: data must have a float dtype, got int32 "
                                         rf"\(shape \(batch, 4\)\)"):
        infer(op, T((b, 4), "int32"))


@pytest.mark.parametrize("op, dtype, out", [
    ("isinf", "float16", "bool"), ("isfinite", "float64", "bool"), ("logical_not", "bool", "bool"),
    ("bitwise_not", "uint8", "uint8"), ("bitwise_not", "int64", "int64"), ("abs", "int8", "int8"),
])
def test_unary_dtype_rules(op, dtype, out):
    assert infer(op, T((n, 2), dtype)) == T((n, 2), out)


@pytest.mark.parametrize("op, dtype", [("logical_not", "float32"), ("bitwise_not", "float32"),
                                       ("bitwise_not", "bool"), ("abs", "bool")])
def test_unary_rejects_dtype(op, dtype):
    with pytest.raises(ShapeError, match=rf"R\.{op}: .*got {dtype}"):
        infer(op, T((n, 2), dtype))


def test_unary_unknown_shape_and_dtype_pass_through():
    assert infer("exp", T(None, None, ndim=3)) == T(None, None, ndim=3)
    assert infer("isnan", T(None, None)) == T(None, "bool")


def test_activation_attribute_defaults():
    x = Var("x", struct_info=T((4,)))
    assert make_call("nn.leakyrelu", x).attrs["alpha"] == 0.01
    assert make_call("nn.elu", x).attrs["alpha"] == 1.0
    assert dict(make_call("nn.selu", x).attrs) == {"alpha": SELU_ALPHA, "gamma": SELU_GAMMA}
    assert dict(make_call("nn.hard_sigmoid", x).attrs) == {"alpha": 0.2, "beta": 0.5}
    assert make_call("nn.gelu", x).attrs["approximate"] == "none"
    assert dict(make_call("clip", x, max=6.0).attrs) == {"min": None, "max": 6.0, "saturate_nan": False}


def test_attribute_errors():
    x = Var("x", struct_info=T((4,)))
    with pytest.raises(IRError, match=r"R\.nn\.relu has no attribute\(s\) \['alpha'\]"):
        make_call("nn.relu", x, alpha=0.1)
    with pytest.raises(IRError, match=r"R\.nn\.gelu: attribute approximate must be 'none' or 'tanh'"):
        infer("nn.gelu", T((4,)), approximate="erf")
    with pytest.raises(IRError, match=r"R\.nn\.leakyrelu: attribute alpha must be a number"):
        infer("nn.leakyrelu", T((4,)), alpha="big")
    with pytest.raises(IRError, match=r"R\.exp takes 1 arguments, got 2"):
        infer("exp", T((4,)), T((4,)))


# ---------------------------------------------------------------- broadcasting

@pytest.mark.parametrize("lhs, rhs, out", [
    ((2, 3), (2, 3), (2, 3)),
    ((4, 1, 3), (5, 1), (4, 5, 3)),
    ((), (2, 3), (2, 3)),
    ((b, 1, 64), (1, s, 64), (b, s, 64)),          # batch-with-1 on both sides
    ((b, s, 64), (64,), (b, s, 64)),
    ((1, s), (b, 1), (b, s)),
    ((b, s), (b, s), (b, s)),
    ((2 * n,), (n + n,), (2 * n,)),                 # equal after normalization
    ((1,), (n,), (n,)),
])
def test_broadcast_shapes(lhs, rhs, out):
    assert infer("add", T(lhs), T(rhs)) == T(out)
    assert infer("multiply", T(rhs), T(lhs)) == T(out)


def test_broadcast_uses_analyzer_ranges():
    ana = DimAnalyzer({"n": (4, 4), "one": (1, 1)})
    assert infer("add", T((n, 3)), T((4, 3)), analyzer=ana) == T((4, 3))
    assert infer("add", T((sym("one"), 3)), T((m, 3)), analyzer=ana) == T((m, 3))


@pytest.mark.parametrize("lhs, rhs, message", [
    ((2, 4), (3, 4), r"R\.subtract: cannot broadcast shapes \(2, 4\) and \(3, 4\): dims 2 and 3 differ"),
    ((n, 4), (m, 4), r"R\.subtract: cannot broadcast shapes \(n, 4\) and \(m, 4\): dims n and m are not "
                     r"provably equal or broadcastable \(use R\.match_cast\)"),
    ((n,), (3,), r"R\.subtract: cannot broadcast shapes \(n,\) and \(3,\): dims n and 3 are not provably "
                 r"equal or broadcastable \(use R\.match_cast\)"),
    ((b, s, 64), (b, 32), r"shapes \(batch, seq, 64\) and \(batch, 32\): dims 64 and 32"),
])
def test_broadcast_errors_name_op_and_shapes(lhs, rhs, message):
    with pytest.raises(ShapeError, match=message):
        infer("subtract", T(lhs), T(rhs))


def test_broadcast_unknown_rank_and_shape():
    assert infer("add", T((b, 4)), T(None)) == T(None, ndim=-1)
    assert infer("add", T((b, 4)), T(None, ndim=3)) == T(None, ndim=3)
    assert infer("add", T(None, ndim=1), T((2, 2, 2))) == T(None, ndim=3)


def test_binary_dtypes():
    with pytest.raises(ShapeError, match=r"R\.add: operands must have the same dtype, got float32 "
                                         r"\(lhs, shape \(n, 4\)\) and float16 \(rhs, shape \(4,\)\)"):
        infer("add", T((n, 4)), T((4,), "float16"))
    with pytest.raises(ShapeError, match=r"R\.logical_and: lhs must have a bool dtype, got float32"):
        infer("logical_and", T((4,)), T((4,)))
    with pytest.raises(ShapeError, match=r"R\.bitwise_or: lhs must have an integer dtype"):
        infer("bitwise_or", T((4,)), T((4,)))
    assert infer("add", T((4,), None), T((4,))) == T((4,), None)


@pytest.mark.parametrize("op", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"])
def test_comparisons_give_bool(op):
    assert infer(op, T((b, 1), "int64"), T((1, s), "int64")) == T((b, s), "bool")


@pytest.mark.parametrize("op, dtype", [("logical_xor", "bool"), ("bitwise_and", "int32"),
                                       ("mod", "int64"), ("floor_divide", "float32"), ("power", "float32"),
                                       ("maximum", "int8"), ("minimum", "float64")])
def test_binary_family_dtype_kept(op, dtype):
    assert infer(op, T((n, 3), dtype), T((3,), dtype)) == T((n, 3), dtype)


def test_mod_fmod_attribute():
    x = Var("x", struct_info=T((4,), "int32"))
    assert make_call("mod", x, x).attrs["fmod"] is False
    with pytest.raises(IRError, match=r"R\.mod: attribute fmod must be a bool"):
        infer("mod", T((4,), "int32"), T((4,), "int32"), fmod=1)


def test_vdevice_propagates():
    assert infer("add", T((4,), vdevice="scratch"), T((4,))) == T((4,), vdevice="scratch")
    with pytest.raises(ShapeError, match=r"R\.add: operands live on different virtual devices"):
        infer("add", T((4,), vdevice="a"), T((4,), vdevice="b"))


def test_prelu_broadcasts_slope_to_data():
    assert infer("nn.prelu", T((b, 8, s)), T((8, 1))) == T((b, 8, s))
    assert infer("nn.prelu", T((b, 8, s)), T((1,))) == T((b, 8, s))
    with pytest.raises(ShapeError, match=r"R\.nn\.prelu: cannot broadcast slope of shape \(3,\) to "
                                         r"\(batch, 8, seq\): dims 3 and seq are not provably equal"):
        infer("nn.prelu", T((b, 8, s)), T((3,)))


def test_where_three_way_broadcast():
    assert infer("where", T((b, 1, s), "bool"), T((1, 4, 1)), T((s,))) == T((b, 4, s))
    with pytest.raises(ShapeError, match=r"R\.where: condition must have a bool dtype"):
        infer("where", T((4,)), T((4,)), T((4,)))
    with pytest.raises(ShapeError, match=r"R\.where: cannot broadcast shapes \(2,\), \(3,\) and \(1,\)"):
        infer("where", T((2,), "bool"), T((3,)), T((1,)))
    with pytest.raises(ShapeError, match=r"R\.where: .*same dtype, got float32 \(x.*int32 \(y"):
        infer("where", T((2,), "bool"), T((2,)), T((2,), "int32"))


def test_every_elementwise_op_has_a_doc():
    for op in ["exp", "add", "where", "nn.prelu", "clip", "nn.selu"]:
        assert get_op_def(op).doc
