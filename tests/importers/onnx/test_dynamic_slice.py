"""Slices whose bounds are symbolic dims (torch's ``pos[:, :seq]``): the bounds
are shape values evaluated at run time (``dynamic_strided_slice``)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.ir import BlockBuilder, ShapeExpr, TensorStructInfo, Var, evaluate, sym

from relaxpack.ops import make_call
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.kernels import get_kernel


def position_table_model(table_rows=64):
    """y = x + pos[:seq] with seq = Shape(x)[0]."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Slice", ["pos", "zero", "s", "zero"], ["p"]),
             helper.make_node("Add", ["x", "p"], ["y"])]
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((table_rows, 8)).astype(np.float32), "pos"),
             numpy_helper.from_array(np.array([0], np.int64), "zero")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), inits[0]


def test_slice_to_a_symbolic_length_runs_at_several_lengths():
    model, table = position_table_model()
    pos = numpy_helper.to_array(table)
    mod = relaxpack.from_onnx(model, dims={"seq": (1, 64)})
    assert "R.dynamic_strided_slice(" in mod.script(show_meta=False)
    vm = VirtualMachine(relaxpack.build(mod))
    for n in (1, 5, 64):
        x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(vm.run({"x": x})["y"], x + pos[:n], rtol=1e-6)


def test_without_a_range_the_length_is_clamped_symbolically():
    n = sym("n")
    x = Var("x", TensorStructInfo((10, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.emit(make_call("dynamic_strided_slice", x, ShapeExpr((2,)), ShapeExpr((n + 2,)), axes=(0,)))
            gv = bb.emit_output(lv)
        bb.emit_func_output(gv)
    dim = bb.get()["main"].ret_struct_info.shape[0]
    assert [evaluate(dim, {"n": v}) for v in (0, 3, 8, 20)] == [0, 3, 8, 8]


def test_possibly_negative_bounds_are_rejected():
    n = sym("n")
    x = Var("x", TensorStructInfo((10, 4), "float32"))
    bb = BlockBuilder()
    with pytest.raises(ShapeError, match="may be negative"):
        with bb.function("main", [x]):
            bb.emit(make_call("dynamic_strided_slice", x, ShapeExpr((0,)), ShapeExpr((n - 3,)), axes=(0,)))


def test_kernel_matches_numpy_slicing():
    x = np.arange(60, dtype=np.int32).reshape(6, 10)
    fn = get_kernel("dynamic_strided_slice").fn
    out = np.empty((3, 4), np.int32)
    fn(x, (1, 2), (4, 100), out=out, axes=(0, 1), strides=(1, 2))
    np.testing.assert_array_equal(out, x[1:4, 2:100:2])
    empty = np.empty((0, 10), np.int32)
    fn(x, (7,), (9,), out=empty, axes=(0,), strides=None)
    assert empty.shape == (0, 10)



def _set_diag_slice_model():
    """tf2onnx's set_diag: ``d[0:end]`` where ``end = Shape(u)[-2:-1]`` and ``u`` is an If whose
    branches have ranks 2 and 3 (``x`` itself when its batch is 1, else ``x`` unsqueezed): the
    bounds' length is unknown at import, the result's rank is the data's."""
    def const(name, v):
        return numpy_helper.from_array(np.array(v, np.int64), name)
    out = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [out("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Unsqueeze", ["x", "zero"], ["e"])], "else", [],
                               [out("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["sx"], start=0, end=1),
             helper.make_node("Equal", ["sx", "one"], ["c1"]), helper.make_node("Squeeze", ["c1"], ["c"]),
             helper.make_node("If", ["c"], ["u"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Shape", ["u"], ["su"]), helper.make_node("Slice", ["su", "m2", "m1"], ["end"]),
             helper.make_node("Slice", ["d", "zero", "end"], ["y"])]
    graph = helper.make_graph(nodes, "g", [out("x", TensorProto.FLOAT, ["n", 4]), out("d", TensorProto.FLOAT, [10])],
                              [out("y", TensorProto.FLOAT, None)],
                              [const("zero", [0]), const("one", [1]), const("m2", [-2]), const("m1", [-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_bounds_of_a_length_unknown_at_import_keep_the_datas_rank():
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(_set_diag_slice_model())))
    d = np.arange(10, dtype=np.float32)
    for n, want in ((1, d[:1]), (3, d[:3]), (5, d[:5])):
        got = vm.run({"x": np.ones((n, 4), np.float32), "d": d})["y"]
        np.testing.assert_array_equal(got, want)        # Shape(u)[-2] is 1 when u is x (n == 1), else n
