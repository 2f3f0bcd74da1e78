"""call_tir, call_dps_packed and call_packed."""

import pytest

from relaxpack.errors import IRError
from relaxpack.ir import (
    BlockBuilder, ExternFunc, ObjectStructInfo, TensorStructInfo, Tuple, TupleStructInfo, Var, sym,
)
from relaxpack.ops import get_op_def, make_call

n = sym("n")
X = TensorStructInfo((n, 4), "float32")
OUT = TensorStructInfo((n, 8), "float32")


def infer(call):
    return BlockBuilder().infer_call(call)


@pytest.mark.parametrize("op", ["call_tir", "call_dps_packed"])
def test_dps_calls_return_sinfo_args(op):
    x = Var("x", struct_info=X)
    call = make_call(op, ExternFunc("matmul_f32"), Tuple((x,)), sinfo_args=(OUT,))
    assert infer(call) == OUT
    pair = TupleStructInfo((OUT, X))
    assert infer(make_call(op, ExternFunc("split2"), Tuple((x,)), sinfo_args=(pair,))) == pair
    assert get_op_def(op).pure


@pytest.mark.parametrize("op", ["call_tir", "call_dps_packed"])
def test_dps_call_errors(op):
    x = Var("x", struct_info=X)
    with pytest.raises(IRError, match=rf"R\.{op}\(matmul_f32\) needs the output struct info in sinfo_args"):
        infer(make_call(op, ExternFunc("matmul_f32"), Tuple((x,))))
    with pytest.raises(IRError, match=rf"R\.{op}\(k\): destination-passing outputs must be tensors"):
        infer(make_call(op, ExternFunc("k"), Tuple((x,)), sinfo_args=(ObjectStructInfo(),)))
    with pytest.raises(IRError, match=rf"R\.{op}: the callee must be an ExternFunc"):
        infer(make_call(op, x, Tuple((x,)), sinfo_args=(OUT,)))


def test_call_packed_is_impure_and_variadic():
    x = Var("x", struct_info=X)
    assert not get_op_def("call_packed").pure
    assert infer(make_call("call_packed", ExternFunc("runtime.nonzero"), x)) == ObjectStructInfo()
    out = TensorStructInfo(None, "int64", ndim=2)
    assert infer(make_call("call_packed", ExternFunc("runtime.nonzero"), x, x, sinfo_args=(out,))) == out
    assert infer(make_call("call_packed", ExternFunc("now"))) == ObjectStructInfo()


def test_kernel_attrs():
    x = Var("x", struct_info=X)
    call = make_call("call_tir", ExternFunc("custom.gelu"), Tuple((x,)), sinfo_args=(X,),
                     kernel_attrs=(("approximate", "tanh"), ("axes", (0, 1)), ("dim", n)))
    assert infer(call) == X
    assert call.attrs["kernel_attrs"][1] == ("axes", (0, 1))
    with pytest.raises(IRError, match=r"R\.call_tir: kernel_attrs must be a tuple of \(name, value\) pairs"):
        infer(make_call("call_tir", ExternFunc("gelu"), Tuple((x,)), sinfo_args=(X,),
                        kernel_attrs=(("approximate",),)))
    with pytest.raises(IRError, match=r"R\.call_packed has no attribute\(s\) \['attrs'\]"):
        make_call("call_packed", ExternFunc("f"), attrs=())


def test_a_kernel_call_of_an_op_passes_the_op_s_attributes():
    x = Var("x", struct_info=X)
    k = Var("k", struct_info=TensorStructInfo((1,), "int64"))
    out = TensorStructInfo(None, "float32", ndim=2)
    full = (("axis", -1), ("largest", True), ("sorted", True))
    assert infer(make_call("call_packed", ExternFunc("dyn.topk"), x, k, sinfo_args=(out,), kernel_attrs=full)) == out
    with pytest.raises(IRError, match=r"R\.call_packed\(dyn\.topk\) needs every attribute of R\.dyn\.topk "
                                      r"in kernel_attrs; missing \['largest', 'sorted'\]"):
        infer(make_call("call_packed", ExternFunc("dyn.topk"), x, k, kernel_attrs=(("axis", 1),)))
    with pytest.raises(IRError, match=r"R\.dyn\.topk has no attribute\(s\) \['k'\]"):
        infer(make_call("call_packed", ExternFunc("dyn.topk"), x, k, kernel_attrs=(*full, ("k", 2))))
    with pytest.raises(IRError, match=r"R\.call_packed\(dyn\.topk\) takes 2\.\.2 operands, got 1"):
        infer(make_call("call_packed", ExternFunc("dyn.topk"), x, kernel_attrs=full))
    with pytest.raises(IRError, match=r"R\.nn\.softmax is not data-dependent; call it through "
                                      r"R\.nn\.softmax\(\.\.\.\) or R\.call_tir"):
        infer(make_call("call_packed", ExternFunc("nn.softmax"), x, kernel_attrs=(("axis", -1),)))
    with pytest.raises(IRError, match=r"R\.dyn\.topk is data-dependent; call it through R\.call_packed"):
        infer(make_call("call_tir", ExternFunc("dyn.topk"), Tuple((x, k)), sinfo_args=(X,), kernel_attrs=full))
    with pytest.raises(IRError, match=r"R\.call_tir\(nn\.softmax\) needs every attribute .* missing \['axis'\]"):
        infer(make_call("call_tir", ExternFunc("nn.softmax"), Tuple((x,)), sinfo_args=(X,)))
    with pytest.raises(IRError, match=r"R\.dyn\.topk is data-dependent: call it through R\.call_packed"):
        infer(make_call("dyn.topk", x, k))


def test_call_packed_rejected_in_dataflow_block():
    bb = BlockBuilder()
    x = Var("x", struct_info=X)
    with pytest.raises(IRError, match=r"impure call R\.call_packed inside a dataflow block"):
        with bb.function("main", [x]):
            with bb.dataflow():
                bb.emit(make_call("call_packed", ExternFunc("print"), x))
