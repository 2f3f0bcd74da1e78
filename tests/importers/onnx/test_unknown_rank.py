"""Values of unknown rank (issue 15): an If whose branches give different
ranks, a Loop whose state is typed without a shape, a Shape -> Reshape chain
whose target length is a run-time value, an input typed without a shape (as
spox writes them). Elementwise ops, softmax, cumsum and casts take them
(Legalize allocates their outputs at run time, ``dyn.apply``; the ops whose
output rank depends on the input's: test_unknown_rank_ops.py); an op that
needs the rank fails naming its ONNX node and where the rank was lost. Each model converts once with no
dims and matches onnxruntime at -O0 and -O2 at several shapes, 0-size ones
among them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import RelaxpackError, ShapeError
from relaxpack.runtime import VirtualMachine

from .helpers import check_levels

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _untyped(name, elem=F):
    """An input typed without a shape (spox's habit): its rank is unknown."""
    return helper.make_tensor_value_info(name, elem, None)


def _check(model, feeds_list):
    return check_levels(model, feeds_list)


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- If: branches of different ranks


def _elementwise_tail(src: str) -> list:
    """Rank-agnostic ops on ``src``: each output is a model output."""
    return [
        helper.make_node("Relu", [src], ["relu"], name="/Relu"),
        helper.make_node("Add", ["relu", "bias"], ["add"], name="/Add"),
        helper.make_node("Mul", ["add", src], ["mul"], name="/Mul"),
        helper.make_node("Softmax", ["mul"], ["soft"], name="/Softmax", axis=-1),
        helper.make_node("Cast", ["soft"], ["cast"], name="/Cast", to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["cast"], ["back"], name="/CastBack", to=F),
        helper.make_node("Greater", [src, "zero"], ["positive"], name="/Greater"),
        helper.make_node("Where", ["positive", "back", "mul"], ["where"], name="/Where"),
        helper.make_node("Clip", ["where", "lo", "hi"], ["clip"], name="/Clip"),
        helper.make_node("CumSum", ["clip", "axis"], ["cum"], name="/CumSum"),
        helper.make_node("Sigmoid", ["cum"], ["y"], name="/Sigmoid"),
        helper.make_node("Shape", ["y"], ["y_shape"], name="/Shape"),
    ]


_TAIL_INITS = {"bias": np.float32(0.25), "zero": np.float32(0), "lo": np.float32(-2), "hi": np.float32(2),
               "axis": np.array(0, np.int64)}


def if_of_two_ranks():
    """then: x flattened to rank 1; else: x as it is (rank 2 here): the If's output has no rank."""
    then = helper.make_graph([helper.make_node("Reshape", ["x", "flat"], ["t"], name="then/Reshape")], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else/Neg")], "else", [],
                              [helper.make_tensor_value_info("e", F, None)])
    nodes = [helper.make_node("If", ["flag"], ["v"], name="/If", then_branch=then, else_branch=other),
             *_elementwise_tail("v")]
    inputs = [helper.make_tensor_value_info("x", F, ["n", "m"]), helper.make_tensor_value_info("flag", TensorProto.BOOL, [])]
    outputs = ["relu", "add", "mul", "soft", "where", "cum", "y"]
    model = _model(nodes, inputs, outputs, {**_TAIL_INITS, "flat": np.array([-1], np.int64)})
    model.graph.output.append(helper.make_tensor_value_info("y_shape", TensorProto.INT64, None))
    return model


def test_if_branches_of_different_ranks_feed_rank_agnostic_ops():
    model = if_of_two_ranks()
    mod = relaxpack.from_onnx(model)
    assert mod["main"].body.body.struct_info.fields[0].ndim == -1      # no rank is made up
    feeds = [{"x": _rand(*shape, seed=i), "flag": np.array(flag)}
             for i, shape in enumerate([(3, 4), (1, 7), (5, 1), (0, 3), (2, 0)]) for flag in (True, False)]
    _check(model, feeds)


def test_untyped_input_through_elementwise_ops():
    """spox's untyped graph input, ranks 0 to 4 through one archive."""
    model = _model(_elementwise_tail("x"), [_untyped("x")], ["relu", "add", "mul", "soft", "where", "cum", "y"],
                   _TAIL_INITS)
    model.graph.output.append(helper.make_tensor_value_info("y_shape", TensorProto.INT64, None))
    _check(model, [{"x": _rand(*shape, seed=len(shape))} for shape in [(5,), (3, 4), (2, 3, 4), (0, 2), (1, 2, 1, 3)]])


def test_broadcasting_two_values_of_unknown_rank():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="/Add"),
             helper.make_node("Tanh", ["s"], ["y"], name="/Tanh")]
    model = _model(nodes, [_untyped("a"), _untyped("b")], ["y"])
    _check(model, [{"a": _rand(3, 1, 4), "b": _rand(2, 1, seed=1)}, {"a": _rand(4), "b": _rand(2, 3, 4, seed=2)},
                   {"a": _rand(0, 4), "b": _rand(1, seed=3)}])


def test_operands_that_do_not_broadcast_name_the_node():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="/attn/Add")]
    mod = relaxpack.from_onnx(_model(nodes, [_untyped("a"), _untyped("b")], ["y"]))
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        with pytest.raises(ShapeError, match=r"^ONNX node '/attn/Add': add: operands of shapes \(3, 4\) and "
                                             r"\(5,\) do not broadcast$"):
            vm.run({"a": _rand(3, 4), "b": _rand(5)})


def test_an_op_that_needs_the_rank_names_its_node():
    """GridSample's output rank is its grid's, which the run cannot take from an input of unknown
    rank here: the build names the node and why the rank is unknown."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/Relu"),
             helper.make_node("GridSample", ["r", "grid"], ["y"], name="/encoder/GridSample")]
    mod = relaxpack.from_onnx(_model(nodes, [_untyped("x"), _untyped("grid")], ["y"], opset=16))
    with pytest.raises(RelaxpackError, match=r"^ONNX node '/encoder/GridSample': R.image.grid_sample needs the "
                                             r"rank of its operand, unknown here: 'x' is typed without a shape$"):
        relaxpack.build(mod)


# ---------------------------------------------------------------- Loop and Shape -> Reshape


def loop_over_untyped_state():
    """A Loop whose carried state has no shape in the graph; the body is rank-agnostic."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body/Identity"),
         helper.make_node("Mul", ["s_in", "half"], ["m"], name="body/Mul"),
         helper.make_node("Add", ["m", "x"], ["a"], name="body/Add"),
         helper.make_node("Tanh", ["a"], ["s_out"], name="body/Tanh")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _untyped("s_in")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _untyped("s_out")])
    loop = helper.make_node("Loop", ["trips", "", "x"], ["y"], name="/Loop", body=body)
    return _model([loop], [_untyped("x"), helper.make_tensor_value_info("trips", TensorProto.INT64, [])], ["y"],
                  {"half": np.float32(0.5)})


def test_loop_state_of_unknown_rank():
    _check(loop_over_untyped_state(), [{"x": _rand(*shape), "trips": np.array(trips, np.int64)}
                                       for shape, trips in [((3,), 4), ((2, 5), 1), ((2, 1, 3), 0), ((0, 4), 3)]])


def test_shape_reshape_chain_of_unknown_rank():
    """Flatten by Reshape(-1), compute, then Reshape back to the run-time Shape: the
    target's length is a value, so the result's rank is unknown; Relu still runs."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="/Shape"),
             helper.make_node("Reshape", ["x", "flat"], ["f"], name="/Flatten"),
             helper.make_node("Mul", ["f", "two"], ["g"], name="/Mul"),
             helper.make_node("Reshape", ["g", "s"], ["back"], name="/Reshape", allowzero=1),
             helper.make_node("Relu", ["back"], ["y"], name="/Relu"),
             helper.make_node("Shape", ["y"], ["y_shape"], name="/Shape_1")]
    model = _model(nodes, [_untyped("x")], ["y"], {"flat": np.array([-1], np.int64), "two": np.float32(2)})
    model.graph.output.append(helper.make_tensor_value_info("y_shape", TensorProto.INT64, None))
    _check(model, [{"x": _rand(*shape)} for shape in [(4,), (2, 3), (2, 0, 5), (1, 2, 3, 1)]])


# ---------------------------------------------------------------- ops that say the rank, or work without it


def test_transpose_perm_and_concat_partners_give_the_rank():
    """Transpose's perm and a Concat partner's rank fix an unknown rank: the value is
    cast to it (the run checks), and everything after is symbolic again."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="/Transpose", perm=[1, 0]),
             helper.make_node("Concat", ["t", "z"], ["c"], name="/Concat", axis=0),
             helper.make_node("MatMul", ["c", "w"], ["y"], name="/MatMul")]
    model = _model(nodes, [_untyped("x"), helper.make_tensor_value_info("z", F, ["m", 3])], ["y"],
                   {"w": _rand(3, 2, seed=9)})
    mod = _check(model, [{"x": _rand(3, n), "z": _rand(m, 3, seed=1)} for n, m in [(4, 2), (1, 5), (0, 1), (2, 0)]])
    assert mod["main"].ret_struct_info.ndim == 2
    vm = VirtualMachine(relaxpack.build(mod))
    with pytest.raises(RelaxpackError, match="/Transpose"):
        vm.run({"x": _rand(3, 4, 1), "z": _rand(2, 3)})


def test_squeeze_and_unsqueeze_of_unknown_rank_run_at_run_time():
    """AffineGrid's function body (3-D) unsqueezes values of unknown rank; so do spox graphs."""
    nodes = [helper.make_node("Unsqueeze", ["x", "last"], ["u"], name="/Unsqueeze"),
             helper.make_node("Relu", ["u"], ["r"], name="/Relu"),
             helper.make_node("Squeeze", ["r", "last"], ["y"], name="/Squeeze"),
             helper.make_node("Shape", ["u"], ["u_shape"], name="/Shape")]
    model = _model(nodes, [_untyped("x")], ["y"], {"last": np.array([-1], np.int64)}, opset=13)
    model.graph.output.append(helper.make_tensor_value_info("u_shape", TensorProto.INT64, None))
    _check(model, [{"x": _rand(*shape)} for shape in [(3,), (2, 4), (2, 0, 3), ()]])


def test_a_sliced_shape_of_unknown_rank_has_the_slice_length():
    """skl2onnx's KNNImputer: ``n = Squeeze(Shape(d, start=0, end=1))`` of an If-merged ``d``
    (its branches give ranks 3 and 2), then ``Range(0, n, 1)``. The slice's length is 1 for any
    rank that reaches it, so the Squeeze is a scalar (checked at run time), and Range takes it;
    it was refused ("limit must be a scalar"). ``shape[-2:]`` keeps a fresh length (a value of
    rank 1 gives 1 there, as test_convert_shape checks), and reduces to a scalar all the same."""
    then = helper.make_graph([helper.make_node("Unsqueeze", ["x", "one"], ["t"], name="then/Unsqueeze")], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else/Neg")], "else", [],
                              [helper.make_tensor_value_info("e", F, None)])
    nodes = [helper.make_node("If", ["flag"], ["v"], name="/If", then_branch=then, else_branch=other),
             helper.make_node("Shape", ["v"], ["first"], name="/Shape", start=0, end=1),
             helper.make_node("Squeeze", ["first"], ["n"], name="/Squeeze"),
             helper.make_node("Range", ["zero", "n", "step"], ["y"], name="/Range"),
             helper.make_node("Shape", ["v"], ["last2"], name="/Shape_1", start=-2),
             helper.make_node("ReduceProd", ["last2"], ["area"], name="/ReduceProd", keepdims=0),
             helper.make_node("Range", ["zero", "area", "step"], ["z"], name="/Range_1")]
    inputs = [helper.make_tensor_value_info("x", F, ["n", "m"]), helper.make_tensor_value_info("flag", TensorProto.BOOL, [])]
    model = _model(nodes, inputs, [], {"one": np.array([1], np.int64), "zero": np.array(0, np.int64),
                                       "step": np.array(1, np.int64)}, opset=18)
    model.graph.output.extend([helper.make_tensor_value_info(o, TensorProto.INT64, None) for o in ("y", "z")])
    mod = _check(model, [{"x": _rand(n, m, seed=n), "flag": np.array(flag)}
                         for n, m in [(3, 4), (1, 2), (0, 3)] for flag in (True, False)])
    assert mod["main"].ret_struct_info.fields[0].ndim == 1
