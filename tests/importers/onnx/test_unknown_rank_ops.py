"""Ops whose output rank depends on their input's, on a value of unknown rank (issue 15).

A real graph (silero VAD: torch's ``squeeze(d)`` exported as an If whose
branches differ in rank; its scripted LSTMCell's is_batched If) puts
Concat, reductions, Gather, Slice, Split, Softmax, MatMul, Pad and shape
arithmetic after such an If. Each model here feeds one of them the output of
``If(flag, x, Unsqueeze(x, 0))`` (rank 2 or 3 at run time), converts once
with no dims, builds at -O0 and -O2 and matches onnxruntime with either
branch taken, 0-size inputs among them. The run shapes these ops
(``dyn.apply`` with the op's rule, runtime/kernels/output_shapes.py); where
an operand fixes the rank (Pad's pads, Tile's repeats, a Reshape to a
target of known length) the value is cast to it and is symbolic again.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import RelaxpackError, ShapeError
from relaxpack.runtime import VirtualMachine

from .helpers import check_levels

F, I64 = TensorProto.FLOAT, TensorProto.INT64
HUGE = 2 ** 31 - 1


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _squeeze_if(x: str = "x", out: str = "v") -> helper.NodeProto:
    """``out`` is ``x`` (then) or ``x`` unsqueezed at 0 (else): branches of different ranks."""
    then = helper.make_graph([helper.make_node("Identity", [x], [f"{out}_then"], name=f"then/{out}")], "then", [],
                             [helper.make_tensor_value_info(f"{out}_then", F, None)])
    other = helper.make_graph([helper.make_node("Unsqueeze", [x, "zero_axis"], [f"{out}_else"], name=f"else/{out}")],
                              "else", [], [helper.make_tensor_value_info(f"{out}_else", F, None)])
    return helper.make_node("If", ["flag"], [out], name="/If" if out == "v" else f"/If_{out}", then_branch=then,
                            else_branch=other)


def _model(nodes, outputs, inits=None, opset=17, extra_inputs=()):
    """``x`` (n, m) and ``flag``; ``v`` is the If's result; ``nodes`` compute ``outputs`` from it."""
    inits = {"zero_axis": np.array([0], np.int64), **(inits or {})}
    inputs = [helper.make_tensor_value_info("x", F, ["n", "m"]), helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
              *extra_inputs]
    graph = helper.make_graph([_squeeze_if(), *nodes], "g", inputs,
                              [helper.make_tensor_value_info(o, t, None) for o, t in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _feeds(shapes=((3, 4), (1, 5), (4, 1), (0, 3)), flags=(True, False), **more):
    return [{"x": _rand(*s, seed=i), "flag": np.array(flag), **more} for i, s in enumerate(shapes) for flag in flags]


def _node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"/{op}", **attrs)


#: x shapes without 0-size ones: onnxruntime returns an empty input to a reduction unreduced ((0, 3)
#: reduced over its last axis is (0, 3) there, (0,) by the spec and onnx's reference evaluator)
NONEMPTY = [(3, 4), (1, 5), (4, 1)]

#: name -> (nodes after the If, outputs with their types, initializers, opset, feeds' x shapes)
CASES = {
    "concat_last_axis": ([_node("Neg", ["v"], ["w"]), _node("Concat", ["v", "w"], axis=-1)], [("y", F)], {}, 17, None),
    "concat_first_axis": ([_node("Concat", ["v", "v", "v"], axis=0)], [("y", F)], {}, 17, None),
    "reduce_mean_axes_attr": ([_node("ReduceMean", ["v"], axes=[-1], keepdims=0)], [("y", F)], {}, 13, NONEMPTY),
    "reduce_sum_axes_input": ([_node("ReduceSum", ["v", "ax"], keepdims=1)], [("y", F)], {"ax": np.array([0])}, 13,
                              NONEMPTY),
    "reduce_max_18": ([_node("ReduceMax", ["v", "ax"], keepdims=0)], [("y", F)], {"ax": np.array([-1, 0])}, 18, NONEMPTY),
    "reduce_l2_all": ([_node("ReduceL2", ["v"], keepdims=1)], [("y", F)], {}, 13, NONEMPTY),
    "reduce_log_sum_exp": ([_node("ReduceLogSumExp", ["v"], axes=[-1], keepdims=0)], [("y", F)], {}, 13, NONEMPTY),
    "argmax": ([_node("ArgMax", ["v"], axis=-1, keepdims=0)], [("y", I64)], {}, 17, NONEMPTY),
    "gather_last_axis": ([_node("Gather", ["v", "idx"], axis=-1)], [("y", F)], {"idx": np.array([[0, -1]])}, 17,
                         [(3, 4), (1, 5), (4, 1)]),
    "gather_scalar_index": ([_node("Gather", ["v", "idx"], axis=0)], [("y", F)], {"idx": np.array(0)}, 17,
                            [(3, 4), (1, 5)]),
    "gather_elements": ([_node("GatherElements", ["v", "v_idx"], axis=-1)], [("y", F)], {}, 17, [(3, 4), (2, 5)]),
    "slice_from_the_end": ([_node("Slice", ["v", "starts", "ends", "axes"])], [("y", F)],
                           {"starts": np.array([1]), "ends": np.array([HUGE]), "axes": np.array([-1])}, 17, None),
    "slice_reversed": ([_node("Slice", ["v", "starts", "ends", "axes", "steps"])], [("y", F)],
                       {"starts": np.array([-1]), "ends": np.array([-HUGE]), "axes": np.array([-1]),
                        "steps": np.array([-1])}, 17, None),
    "slice_bounds_from_shape": ([_node("Shape", ["v"], ["sh"]), _node("Gather", ["sh", "last"], ["len"], axis=0),
                                 _node("Sub", ["len", "one"], ["end"]), _node("Unsqueeze", ["end", "zero_axis"],
                                                                              ["ends"]),
                                 _node("Slice", ["v", "zero_axis", "ends", "minus_one"])], [("y", F)],
                                {"last": np.array(-1), "one": np.array(1), "minus_one": np.array([-1])}, 17, None),
    "split_sizes": ([_node("Split", ["v", "sizes"], ["y0", "y1"], axis=-1)], [("y0", F), ("y1", F)],
                    {"sizes": np.array([1, 2])}, 13, [(3, 3), (1, 3), (0, 3)]),
    "split_equal_18": ([_node("Split", ["v"], ["y0", "y1"], axis=-1, num_outputs=2)], [("y0", F), ("y1", F)], {},
                       18, [(3, 4), (1, 2), (0, 6)]),
    "softmax_negative_axis": ([_node("Softmax", ["v"], axis=-2)], [("y", F)], {}, 17, None),
    "matmul_weight": ([_node("MatMul", ["v", "w"])], [("y", F)], {"w": _rand(4, 2, seed=5)}, 17,
                      [(3, 4), (1, 4), (0, 4)]),
    "matmul_vector": ([_node("MatMul", ["v", "vec"])], [("y", F)], {"vec": _rand(4, seed=6)}, 17, [(3, 4), (1, 4)]),
    "matmul_both_unknown": ([_squeeze_if("w_in", "w"), _node("MatMul", ["v", "w"])], [("y", F)],
                            {"w_in": _rand(4, 2, seed=8)}, 17, [(3, 4), (1, 4), (0, 4)]),
    "transpose_reverses": ([_node("Transpose", ["v"])], [("y", F)], {}, 17, None),
    "pad_with_axes": ([_node("Pad", ["v", "pads", "", "ax"], mode="reflect")], [("y", F)],
                      {"pads": np.array([1, 2]), "ax": np.array([-1])}, 18, [(3, 4), (1, 5)]),
    "flatten_negative_axis": ([_node("Flatten", ["v"], axis=-1)], [("y", F)], {}, 17, None),
    "expand": ([_node("Expand", ["v", "to"])], [("y", F)], {"to": np.array([2, 1, 1])}, 17, None),
    "einsum_ellipsis": ([_node("Einsum", ["v"], equation="...j->...")], [("y", F)], {}, 17, None),
    "layer_norm_with_stats": ([_node("LayerNormalization", ["v", "g"], ["y", "mean", "inv_std"], axis=-1)],
                              [("y", F), ("mean", F), ("inv_std", F)], {"g": _rand(4, seed=7)}, 17,
                              [(3, 4), (1, 4)]),
    "hardmax": ([_node("Hardmax", ["v"], axis=-1)], [("y", F)], {}, 17, [(3, 4), (1, 5)]),
    "topk": ([_node("TopK", ["v", "k"], ["values", "indices"], axis=-1)], [("values", F), ("indices", I64)],
             {"k": np.array([1])}, 17, [(3, 4), (1, 5)]),
    "size_arithmetic": ([_node("Size", ["v"], ["size"]), _node("Cast", ["size"], ["fsize"], to=F),
                         _node("Div", ["v", "fsize"])], [("y", F)], {}, 17, [(3, 4), (1, 5)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_after_if_of_two_ranks(name):
    nodes, outputs, inits, opset, shapes = CASES[name]
    if name == "gather_elements":
        inits = {"v_idx": np.array([[0, -1]])}
        # the indices' rank fixes the data's: only the rank-2 branch is valid
        check_levels(_model(nodes, outputs, inits, opset), _feeds(shapes, flags=(True,)))
        return
    check_levels(_model(nodes, outputs, inits, opset), _feeds(shapes or ((3, 4), (1, 5), (4, 1), (0, 3))))


# ---------------------------------------------------------------- the graph fixes the rank again


def _result_rank(mod, index=0):
    body = mod["main"].body.body
    sinfo = (body.fields[index] if hasattr(body, "fields") else body).struct_info
    return sinfo.ndim


@pytest.mark.parametrize("op, nodes, inits", [
    ("Pad", [_node("Pad", ["v", "pads"])], {"pads": np.array([0, 1, 2, 0])}),
    ("Tile", [_node("Tile", ["v", "reps"])], {"reps": np.array([2, 1])}),
    ("Gemm", [_node("Gemm", ["v", "w"], transB=1)], {"w": _rand(2, 4, seed=3)}),
    # torch's x.view(-1, x.size(-1)): Shape -> Gather -> Unsqueeze -> Concat
    ("Reshape", [_node("Shape", ["v"], ["sh"]), _node("Gather", ["sh", "last"], ["d"], axis=0),
                 _node("Unsqueeze", ["d", "zero_axis"], ["ds"]), _node("Concat", ["minus_one", "ds"], ["target"], axis=0),
                 _node("Reshape", ["v", "target"])],
     {"minus_one": np.array([-1]), "last": np.array(-1)}),
])
def test_an_operand_that_fixes_the_rank_recovers_it(op, nodes, inits):
    """Pad's pads, Tile's repeats, Gemm's 2-D operands and a Reshape whose target has a known
    length (here computed from the Shape of the unknown value) say the rank: the value is cast
    to it (the run checks it) and the result has a rank again."""
    model = _model(nodes, [("y", F)], inits)
    flags = (True, False) if op == "Reshape" else (True,)
    mod = check_levels(model, _feeds(((3, 4), (1, 4), (0, 4)), flags=flags))
    assert _result_rank(mod) == 2
    if op != "Reshape":
        vm = VirtualMachine(relaxpack.build(mod))
        with pytest.raises(ShapeError):     # the else branch's rank 3 is not the rank the op fixes
            vm.run({"x": _rand(3, 4), "flag": np.array(False)})


def test_silero_state_concat_then_reshape_has_a_rank():
    """silero's new state: h and c, each out of a squeeze-If, unsqueezed and concatenated (rank
    unknown), then reshaped to a known-length target: everything after has dims again."""
    nodes = [_node("Unsqueeze", ["v", "zero_axis"], ["h"]), _node("Neg", ["h"], ["c"]),
             _node("Concat", ["h", "c"], ["state"], axis=0), _node("Reshape", ["state", "to"], ["flat"]),
             _node("Relu", ["flat"])]
    model = _model(nodes, [("y", F)], {"to": np.array([2, -1])})
    mod = check_levels(model, _feeds(((3, 4), (1, 4), (0, 4))))
    assert _result_rank(mod) == 2


# ---------------------------------------------------------------- errors name the node


def test_operands_of_different_ranks_at_run_time_name_the_node():
    nodes = [_node("Concat", ["v", "u"], axis=0)]
    model = _model(nodes, [("y", F)], extra_inputs=[helper.make_tensor_value_info("u", F, None)])
    mod = relaxpack.from_onnx(model)
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        with pytest.raises(ShapeError, match=r"^ONNX node '/Concat': concat: cannot concatenate tensors of "
                                             r"different ranks: \(1, 3, 4\), \(3, 4\)$"):
            vm.run({"x": _rand(3, 4), "flag": np.array(False), "u": _rand(3, 4)})


def test_matmul_inner_dims_at_run_time_name_the_node():
    model = _model([_node("MatMul", ["v", "w"])], [("y", F)], {"w": _rand(4, 2)})
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    with pytest.raises(ShapeError, match=r"^ONNX node '/MatMul': matmul: inner dims of shapes \(1, 3, 5\) and "
                                         r"\(4, 2\) differ \(5 and 4\)$"):
        vm.run({"x": _rand(3, 5), "flag": np.array(False)})


def test_a_refusal_at_build_names_the_if_that_lost_the_rank():
    """The inputs have shapes (as silero's do): the message says which If made the rank unknown,
    not "give the model's input a shape"."""
    model = _model([_node("GridSample", ["v", "grid"])], [("y", F)], opset=16,
                   extra_inputs=[helper.make_tensor_value_info("grid", F, [1, 2, 2, 2])])
    with pytest.raises(RelaxpackError, match=r"^ONNX node '/GridSample': R.image.grid_sample needs the rank of its "
                                             r"operand, unknown here: the If node '/If' returns values of "
                                             r"different ranks from its branches \(2 and 3\)$"):
        relaxpack.build(relaxpack.from_onnx(model))


def test_a_refusal_at_import_names_the_if_that_lost_the_rank():
    model = _model([_node("DFT", ["v"])], [("y", F)])
    with pytest.raises(RelaxpackError, match=r"^DFT node '/DFT' \(opset 17\): needs the rank of the input, unknown "
                                             r"here: the If node '/If' returns values of different ranks from "
                                             r"its branches \(2 and 3\)$"):
        relaxpack.from_onnx(model)
