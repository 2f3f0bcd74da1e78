"""Struct-info inference of softmax and normalization ops."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, TensorStructInfo, Var, sym
from relaxpack.ops import make_call

b, s, c = sym("batch"), sym("seq"), sym("c")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def infer(name, *sinfos, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder().infer_call(make_call(name, *args, **attrs))


@pytest.mark.parametrize("op", ["nn.softmax", "nn.log_softmax"])
@pytest.mark.parametrize("axis", [-1, 0, 2, -3])
def test_softmax_keeps_struct_info(op, axis):
    assert infer(op, T((b, s, 64)), axis=axis) == T((b, s, 64))


def test_softmax_errors():
    with pytest.raises(ShapeError, match=r"R\.nn\.softmax: axis 3 is out of range for a tensor of rank 3 "
                                         r"of shape \(batch, seq, 64\)"):
        infer("nn.softmax", T((b, s, 64)), axis=3)
    with pytest.raises(ShapeError, match=r"R\.nn\.log_softmax: data must have a float dtype, got int64"):
        infer("nn.log_softmax", T((4,), "int64"))
    assert make_call("nn.softmax", Var("x", struct_info=T((4,)))).attrs["axis"] == -1


@pytest.mark.parametrize("data, gamma, axes", [
    ((b, s, 768), (768,), (-1,)),
    ((b, s, 16, 4), (16, 4), (-2, -1)),
    ((b, s, 768), (1,), (-1,)),            # ONNX lets scale broadcast
    ((b, s, c), (c,), (2,)),
])
def test_layer_norm(data, gamma, axes):
    assert infer("nn.layer_norm", T(data), T(gamma), T(gamma), axes=axes) == T(data)
    assert infer("nn.layer_norm", T(data), T(gamma), axes=axes) == T(data)       # beta is optional


def test_layer_norm_errors():
    with pytest.raises(ShapeError, match=r"R\.nn\.layer_norm: cannot broadcast gamma of shape \(512,\) to "
                                         r"\(768,\): dims 512 and 768 differ"):
        infer("nn.layer_norm", T((b, s, 768)), T((512,)), T((768,)))
    with pytest.raises(ShapeError, match=r"R\.nn\.layer_norm: cannot broadcast beta of shape \(seq,\) to "
                                         r"\(c,\): dims seq and c are not provably equal"):
        infer("nn.layer_norm", T((b, s, c)), T((c,)), T((s,)))
    with pytest.raises(ShapeError, match=r"R\.nn\.layer_norm: operands must have the same dtype, got float32 "
                                         r"\(data.*float16 \(gamma"):
        infer("nn.layer_norm", T((b, 8)), T((8,), "float16"), T((8,)))
    with pytest.raises(ShapeError, match=r"R\.nn\.layer_norm: axis -4 is out of range"):
        infer("nn.layer_norm", T((b, s, 8)), T((8,)), T((8,)), axes=(-4,))


def test_batch_norm():
    params = [T((c,))] * 4
    assert infer("nn.batch_norm", T((b, c, 7, 7)), *params) == T((b, c, 7, 7))
    assert infer("nn.batch_norm", T((b, 7, c)), *params, axis=-1) == T((b, 7, c))
    with pytest.raises(ShapeError, match=r"R\.nn\.batch_norm: moving_var \(16,\) must have one value per "
                                         r"channel of data \(batch, 32, 7, 7\) \(axis 1\): 16 != 32"):
        infer("nn.batch_norm", T((b, 32, 7, 7)), T((32,)), T((32,)), T((32,)), T((16,)))
    with pytest.raises(ShapeError, match=r"R\.nn\.batch_norm: gamma must be 1-D"):
        infer("nn.batch_norm", T((b, 32, 7, 7)), T((32, 1)), T((32,)), T((32,)), T((32,)))
    with pytest.raises(IRError, match=r"R\.nn\.batch_norm takes 5 arguments, got 3"):
        infer("nn.batch_norm", T((b, 32, 7, 7)), T((32,)), T((32,)))


def test_instance_norm_and_lrn():
    assert infer("nn.instance_norm", T((b, 3, s)), T((3,)), T((3,)), epsilon=1e-3) == T((b, 3, s))
    with pytest.raises(ShapeError, match=r"R\.nn\.instance_norm: gamma \(4,\) must have one value per channel"):
        infer("nn.instance_norm", T((b, 3, s)), T((4,)), T((3,)))
    assert infer("nn.lrn", T((b, 16, 8, 8)), size=5) == T((b, 16, 8, 8))
    with pytest.raises(IRError, match=r"R\.nn\.lrn needs attribute\(s\) \['size'\]"):
        make_call("nn.lrn", Var("x", struct_info=T((1, 2, 3))))
    with pytest.raises(ShapeError, match=r"R\.nn\.lrn: data must be \(N, C, \*spatial\), got \(2, 3\)"):
        infer("nn.lrn", T((2, 3)), size=3)
