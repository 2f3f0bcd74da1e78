"""Struct-info inference of the fused ops nn.gemm and nn.conv_bias_act."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, DimAnalyzer, TensorStructInfo, Var, parse, sym
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ops import make_call

n, m = sym("n"), sym("m")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def infer(name, *sinfos, analyzer=None, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder(analyzer=analyzer).infer_call(make_call(name, *args, **attrs))


# ---------------------------------------------------------------- nn.gemm

@pytest.mark.parametrize("x, w, bias, out", [
    ((n, 4), (4, 3), (3,), (n, 3)),
    ((n, 4), (4, 3), None, (n, 3)),
    ((2, n, 4), (4, 3), (n, 3), (2, n, 3)),
    ((n, 4), (4, 3), (1, 3), (n, 3)),
    ((4,), (4, 3), (3,), (3,)),                  # 1-D lhs, as numpy
    ((0, 4), (4, 3), (3,), (0, 3)),
])
def test_gemm_is_matmul_plus_bias(x, w, bias, out):
    sinfos = [T(x), T(w)] + ([T(bias)] if bias is not None else [])
    assert infer("nn.gemm", *sinfos) == infer("matmul", T(x), T(w)) == T(out)


@pytest.mark.parametrize("activation", [None, "relu", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh",
                                        ("leakyrelu", 0.1), ("clip", 0.0, 6.0), ("clip", None, 1.0), "hard_swish",
                                        ("hard_sigmoid", 0.2, 0.5)])
def test_gemm_activations(activation):
    assert infer("nn.gemm", T((n, 4)), T((4, 3)), T((3,)), activation=activation) == T((n, 3))


def test_gemm_errors_name_the_problem():
    with pytest.raises(ShapeError, match=r"R.nn.gemm: cannot broadcast bias of shape \(2, 1, 3\) to \(n, 3\)"):
        infer("nn.gemm", T((n, 4)), T((4, 3)), T((2, 1, 3)))
    with pytest.raises(ShapeError, match=r"R.nn.gemm: cannot broadcast bias of shape \(m,\) to \(n, 3\)"):
        infer("nn.gemm", T((n, 4)), T((4, 3)), T((m,)))
    with pytest.raises(ShapeError, match="R.nn.gemm: inner dims"):
        infer("nn.gemm", T((n, 4)), T((5, 3)))
    with pytest.raises(ShapeError, match=r"R.nn.gemm: operands must have the same dtype.*float16 \(bias"):
        infer("nn.gemm", T((n, 4)), T((4, 3)), T((3,), "float16"))
    with pytest.raises(IRError, match="unknown activation 'swish'"):
        infer("nn.gemm", T((n, 4)), T((4, 3)), activation="swish")
    with pytest.raises(IRError, match=r"activation 'leakyrelu' is written \(\"leakyrelu\", alpha\)"):
        infer("nn.gemm", T((n, 4)), T((4, 3)), activation="leakyrelu")
    with pytest.raises(IRError, match="parameter max must be a number"):
        infer("nn.gemm", T((n, 4)), T((4, 3)), activation=("clip", 0.0, "six"))
    with pytest.raises(ShapeError, match="activation 'sigmoid' needs a float tensor"):
        infer("nn.gemm", T((n, 4), "int32"), T((4, 3), "int32"), activation="sigmoid")
    assert infer("nn.gemm", T((n, 4), "int32"), T((4, 3), "int32"), activation="relu") == T((n, 3), "int32")
    with pytest.raises(IRError, match="takes 2..3 arguments"):
        infer("nn.gemm", T((n, 4)))


# ---------------------------------------------------------------- nn.conv_bias_act

@pytest.mark.parametrize("data, weight, attrs", [
    ((n, 3, 9, 8), (5, 3, 3, 3), dict(padding=1)),
    ((2, 6, 7, 7), (6, 1, 3, 3), dict(groups=6, padding=1, strides=2)),
    ((n, 4, 17), (6, 2, 5), dict(groups=2, strides=3, padding=(2, 1))),
    ((0, 3, 8, 8), (4, 3, 3, 3), {}),
])
def test_conv_bias_act_is_conv(data, weight, attrs):
    out = infer("nn.conv", T(data), T(weight), **attrs)
    assert infer("nn.conv_bias_act", T(data), T(weight), T((weight[0],)), **attrs) == out
    assert infer("nn.conv_bias_act", T(data), T(weight), activation="relu", **attrs) == out


def test_conv_bias_act_out_layout_nhwc():
    """The bias is per output channel, the last dim of a channels-last result."""
    out = infer("nn.conv_bias_act", T((n, 3, 9, 8)), T((5, 3, 3, 3)), T((5,)), padding=1, activation="relu",
                out_layout="NHWC")
    assert out == T((n, 9, 8, 5))
    with pytest.raises(ShapeError, match=r"one value per output channel.*4 != 5"):
        infer("nn.conv_bias_act", T((n, 3, 9, 8)), T((5, 3, 3, 3)), T((4,)), out_layout="NHWC")


def test_conv_bias_act_errors():
    with pytest.raises(ShapeError, match="bias must be 1-D"):
        infer("nn.conv_bias_act", T((n, 3, 8, 8)), T((4, 3, 3, 3)), T((1, 4, 1, 1)))
    with pytest.raises(ShapeError, match=r"one value per output channel.*5 != 4"):
        infer("nn.conv_bias_act", T((n, 3, 8, 8)), T((4, 3, 3, 3)), T((5,)))
    with pytest.raises(ShapeError, match="R.nn.conv_bias_act: channels must equal"):
        infer("nn.conv_bias_act", T((n, 2, 8, 8)), T((4, 3, 3, 3)), T((4,)))
    with pytest.raises(IRError, match="unknown activation"):
        infer("nn.conv_bias_act", T((n, 3, 8, 8)), T((4, 3, 3, 3)), activation=("prelu", 0.1))
    analyzer = DimAnalyzer()
    analyzer.set_range("n", 1, 8)
    assert infer("nn.conv_bias_act", T((n, 3, 8, 8)), T((4, 3, 3, 3)), T((4,)), analyzer=analyzer,
                 padding=1) == T((n, 4, 8, 8))


def test_text_round_trip():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"), v: R.Tensor((64, 5), "float32")) -> R.Tensor(("n", 5), "float32"):
        n = T.int64()
        lv = R.nn.conv_bias_act(x, w, R.const([1.0, 2.0, 3.0, 4.0], "float32"), padding=1, activation=("clip", 0.0, None))
        lv1 = R.reshape(lv, R.shape([n, 256]))
        lv2 = R.reshape(lv1, R.shape([n * 4, 64]))
        lv3 = R.nn.gemm(lv2, v, activation=("leakyrelu", 0.25))
        lv4 = R.reshape(lv3, R.shape([n, 4, 5]))
        lv5 = R.sum(lv4, axis=1)
        return lv5
'''
    mod = parse(text)
    assert_structural_equal(parse(mod.script()), mod)
    assert 'activation=("clip", 0.0, None)' in mod.script()


def test_out_layout_text_round_trip():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32")) -> R.Tensor(("n", 4, 8, 8), "float32"):
        n = T.int64()
        lv: R.Tensor(("n", 8, 8, 4), "float32") = R.nn.conv_bias_act(x, w, R.const([1.0, 2.0, 3.0, 4.0], "float32"), padding=1, activation="relu", out_layout="NHWC")
        lv1: R.Tensor(("n", 8, 8, 4), "float32") = R.nn.conv(x, w, padding=1, out_layout="NHWC")
        lv2: R.Tensor(("n", 8, 8, 4), "float32") = R.add(lv, lv1)
        lv3: R.Tensor(("n", 4, 8, 8), "float32") = R.permute_dims(lv2, axes=(0, 3, 1, 2))
        return lv3
'''
    mod = parse(text)
    assert_structural_equal(parse(mod.script()), mod)
    assert mod.script().count('out_layout="NHWC"') == 2
