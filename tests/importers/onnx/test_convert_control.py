"""The If converter (converters/control.py) against onnxruntime: constant
conditions inline the taken branch; data-dependent ones become an IR If."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.ir.expr import If, MatchCast
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.runtime import VirtualMachine

from .test_convert_shape import FORGET_DOMAIN
from .helpers import check_model, i64, rand, run_backend

FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def branch(name, nodes, outputs, consts=None):
    """A subgraph; ``outputs`` maps names to element types (shapes left open)."""
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
                             [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()])


def if_model(then_graph, else_graph, outputs, *, x=("n", 3), cond=(), opset=17, before=(), after=(), graph_outputs=None,
             consts=None):
    """x -> [before] -> If(c) -> [after]; ``cond`` is the shape of the bool input c."""
    nodes = [*before, helper.make_node("If", ["c"], list(outputs), then_branch=then_graph, else_branch=else_graph),
             *after]
    inputs = [helper.make_tensor_value_info("x", FLOAT, list(x)), helper.make_tensor_value_info("c", BOOL, list(cond))]
    graph = helper.make_graph(nodes, "g", inputs, [onnx.ValueInfoProto(name=o) for o in graph_outputs or outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def feeds(*shapes, cond_shape=()):
    return [{"x": rand(*s, seed=i), "c": np.full(cond_shape, c)} for i, s in enumerate(shapes) for c in (True, False)]


def if_bindings(mod):
    return [b for block in mod["main"].body.blocks for b in block.bindings if isinstance(b.value, If)]


@pytest.mark.parametrize("opset", [1, 11, 13, 16, 19, 21, 23])
def test_if_one_output(opset):
    then_g = branch("then", [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0])], {"t": FLOAT})
    else_g = branch("else", [helper.make_node("Slice", ["x"], ["t"], starts=[0], ends=[3], axes=[1])
                             if opset < 10 else helper.make_node("Slice", ["x", "s0", "e0", "a0"], ["t"])],
                    {"t": FLOAT}, consts={"s0": i64(2), "e0": i64(5), "a0": i64(0)} if opset >= 10 else None)
    model = if_model(then_g, else_g, ["y"], x=(3, 3), opset=opset)
    mod = check_model(model, *feeds((3, 3), (3, 3)))
    assert len(if_bindings(mod)) == 1


def test_if_several_outputs_with_a_shape():
    then_g = branch("then", [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Identity", ["x"], ["v"])],
                    {"v": FLOAT, "s": INT64})
    else_g = branch("else", [helper.make_node("Flatten", ["x"], ["v"], axis=2)], {"v": FLOAT, "s": INT64},
                    consts={"s": i64(7, 7)})
    model = if_model(then_g, else_g, ["v", "s"])
    mod = check_model(model, *feeds((2, 3), (5, 3)))
    check_well_formed(mod)


def test_if_outputs_of_different_shapes_get_fresh_dims():
    """then: x[:2] (min(n, 2), 3); else: concat(x, x) (2n, 3): the If's output
    has unknown dims, match-cast to fresh ones that later shape code uses."""
    then_g = branch("then", [helper.make_node("Slice", ["x", "zero", "two", "zero"], ["t"])], {"t": FLOAT},
                    consts={"zero": i64(0), "two": i64(2)})
    else_g = branch("else", [helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], {"t": FLOAT})
    after = [helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Gather", ["s", "zero0"], ["rows"]),
             helper.make_node("Unsqueeze", ["rows", "axes"], ["rows1"]),
             helper.make_node("Concat", ["three", "rows1"], ["target"], axis=0),
             helper.make_node("Reshape", ["y", "target"], ["z"])]
    model = if_model(then_g, else_g, ["y"], after=after, graph_outputs=["z", "s"],
                     consts={"zero0": np.array(0, np.int64), "axes": i64(0), "three": i64(3)})
    mod = check_model(model, *feeds((1, 3), (4, 3)))
    casts = [b for block in mod["main"].body.blocks for b in block.bindings if isinstance(b, MatchCast)]
    assert len(casts) == 1
    assert "shape_to_tensor" in mod.script() and "R.reshape(" in mod.script()


def test_a_shape_first_used_inside_a_branch_is_bound_again_outside():
    """Shape(x) is made a tensor inside the then branch; its use after the If
    must not refer to the branch's binding."""
    before = [helper.make_node("Shape", ["x"], ["s"])]
    then_g = branch("then", [helper.make_node("Identity", ["s"], ["o"])], {"o": INT64})
    else_g = branch("else", [], {"o": INT64}, consts={"o": i64(0, 0)})
    model = if_model(then_g, else_g, ["o"], before=before, graph_outputs=["o", "s"])
    mod = check_model(model, *feeds((2, 3), (6, 3)))
    check_well_formed(mod)


def test_an_outer_value_match_cast_inside_a_branch_is_cast_again_outside():
    """Shape of a value of known rank only binds fresh dims with a match_cast;
    done inside a branch, the dims must not leak to uses after the If."""
    before = [helper.make_node("ForgetShape", ["x"], ["u"], domain=FORGET_DOMAIN)]
    then_g = branch("then", [helper.make_node("Shape", ["u"], ["o"])], {"o": INT64})
    else_g = branch("else", [], {"o": INT64}, consts={"o": i64(0, 0)})
    after = [helper.make_node("Shape", ["u"], ["s"]), helper.make_node("Reshape", ["u", "s"], ["r"])]
    model = if_model(then_g, else_g, ["o"], before=before, after=after, graph_outputs=["o", "r"])
    model.opset_import.append(helper.make_opsetid(FORGET_DOMAIN, 1))
    mod = check_model(model, *feeds((2, 3), (6, 3)),
                      ref=lambda f: [np.array(f["x"].shape if f["c"] else (0, 0), np.int64), f["x"]])
    check_well_formed(mod)


def test_branch_shape_arithmetic_on_outer_values_stays_symbolic():
    before = [helper.make_node("Shape", ["x"], ["s"])]
    then_g = branch("then", [helper.make_node("Concat", ["s", "one"], ["t"], axis=0),
                             helper.make_node("Reshape", ["x", "t"], ["o"])], {"o": FLOAT}, consts={"one": i64(1)})
    else_g = branch("else", [helper.make_node("Unsqueeze", ["x", "two"], ["o"])], {"o": FLOAT}, consts={"two": i64(2)})
    model = if_model(then_g, else_g, ["o"], before=before)
    mod = check_model(model, *feeds((2, 3), (6, 3)))
    assert "R.reshape(x, R.shape([n, 3, 1]))" in mod.script()
    assert "shape_to_tensor" not in mod.script()
    assert mod["main"].ret_struct_info.shape[0] == mod["main"].params[0].struct_info.shape[0]


def test_nested_if_and_a_one_element_condition():
    inner_then = branch("it", [helper.make_node("Identity", ["x"], ["w"])], {"w": FLOAT})
    inner_else = branch("ie", [helper.make_node("Transpose", ["x"], ["w"], perm=[1, 0])], {"w": FLOAT})
    then_g = branch("then", [helper.make_node("If", ["c"], ["o"], then_branch=inner_else, else_branch=inner_then)],
                    {"o": FLOAT})
    else_g = branch("else", [helper.make_node("If", ["c"], ["o"], then_branch=inner_then, else_branch=inner_else)],
                    {"o": FLOAT})
    model = if_model(then_g, else_g, ["y"], x=(3, 3), cond=(1,))
    check_model(model, *feeds((3, 3), cond_shape=(1,)))


@pytest.mark.parametrize("value", [True, False])
def test_constant_condition_converts_only_the_taken_branch(value):
    """A condition known at import (here: a dim compared with a constant)
    inlines the branch; the other may even use ops relaxpack lacks."""
    before = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["d"]),
              helper.make_node("Equal", ["d", "k"], ["cc"])]
    taken = branch("taken", [helper.make_node("Transpose", ["x"], ["o"], perm=[1, 0])], {"o": FLOAT})
    other = branch("other", [helper.make_node("Shape", ["x"], ["o0"]),
                             helper.make_node("Cast", ["o0"], ["o"], to=FLOAT)], {"o": FLOAT})
    nodes = [*before, helper.make_node("If", ["cc"], ["y"], then_branch=taken if value else other,
                                       else_branch=other if value else taken)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", FLOAT, ["n", 3])],
                              [onnx.ValueInfoProto(name="y")],
                              [numpy_helper.from_array(np.array(1, np.int64), "one"),
                               numpy_helper.from_array(np.array(3 if value else 4, np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    mod = check_model(model, {"x": rand(2, 3)}, {"x": rand(5, 3)})
    assert not if_bindings(mod)
    assert "permute_dims" in mod.script()


def test_constant_condition_from_an_initializer():
    then_g = branch("then", [helper.make_node("Transpose", ["x"], ["o"], perm=[1, 0])], {"o": FLOAT})
    else_g = branch("else", [helper.make_node("Identity", ["x"], ["o"])], {"o": FLOAT})
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", FLOAT, ["n", 3])],
                              [onnx.ValueInfoProto(name="y")], [numpy_helper.from_array(np.array([False]), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    mod = check_model(model, {"x": rand(2, 3)})
    assert not if_bindings(mod) and "permute_dims" not in mod.script()


def test_branches_with_different_output_counts_are_an_error():
    then_g = branch("then", [helper.make_node("Identity", ["x"], ["o"])], {"o": FLOAT})
    else_g = branch("else", [helper.make_node("Identity", ["x"], ["o"]), helper.make_node("Identity", ["x"], ["p"])],
                    {"o": FLOAT, "p": FLOAT})
    with pytest.raises(ShapeError, match="else_branch has 2 outputs"):
        relaxpack.from_onnx(if_model(then_g, else_g, ["y"]))


def test_if_runs_once_built_at_many_sizes():
    then_g = branch("then", [helper.make_node("Concat", ["x", "x"], ["t"], axis=1)], {"t": FLOAT})
    else_g = branch("else", [helper.make_node("Tile", ["x", "r"], ["t"])], {"t": FLOAT}, consts={"r": i64(1, 2)})
    model = if_model(then_g, else_g, ["y"])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    for n in (1, 4, 9):
        x = rand(n, 3)
        for c in (True, False):
            want = np.concatenate([x, x], 1) if c else np.tile(x, (1, 2))
            np.testing.assert_array_equal(vm.run({"x": x, "c": np.array(c)})["y"], want)


def _squeeze_branch_model():
    """then: relu(x) (n, k); else: unsqueeze(squeeze(x, 1), 1), which runs only where k == 1 (as
    silero VAD's 8 kHz branch runs only at its input length)."""
    then_g = branch("then", [helper.make_node("Relu", ["x"], ["t"])], {"t": FLOAT})
    else_g = branch("else", [helper.make_node("Squeeze", ["x", "one"], ["s"]),
                             helper.make_node("Unsqueeze", ["s", "one"], ["t"])], {"t": FLOAT},
                    consts={"one": i64(1)})
    return if_model(then_g, else_g, ["y"], x=("n", "k"))


def test_a_branch_that_cannot_run_at_the_bound_dims_fails_only_when_taken():
    model = _squeeze_branch_model()
    mod = check_model(model, {"x": rand(3, 2), "c": np.array(True)}, dims={"k": 2})
    assert mod["main"].params[0].struct_info.shape[1] == 2
    for level in (0, 2):
        exe = relaxpack.build(mod, opt_level=level)
        vm = VirtualMachine(exe)
        x = rand(4, 2)
        np.testing.assert_array_equal(vm.run({"x": x, "c": np.array(True)})["y"], np.maximum(x, 0))
        with pytest.raises(ShapeError, match=r"ONNX node 'If:y': its else_branch cannot run at the dims the model "
                                             r"was converted with: .*squeeze"):
            vm.run({"x": x, "c": np.array(False)})
    assert "control.branch_error" in mod.script() and "its else_branch" in mod.script()


def test_a_failing_branch_survives_the_text_format_and_the_archive(tmp_path):
    from relaxpack.ir.parser import parse
    from relaxpack.runtime import load
    mod = relaxpack.from_onnx(_squeeze_branch_model(), dims={"k": 2})
    assert parse(mod.script()).script() == mod.script()
    relaxpack.build(mod, opt_level=2).save(tmp_path / "m.rpk")
    vm = VirtualMachine(load(tmp_path / "m.rpk"))
    x = rand(2, 2)
    np.testing.assert_array_equal(vm.run({"x": x, "c": np.array(True)})["y"], np.maximum(x, 0))
    with pytest.raises(ShapeError, match="its else_branch cannot run"):
        vm.run({"x": x, "c": np.array(False)})


def test_unbound_dims_keep_both_branches_runnable():
    check_model(_squeeze_branch_model(), {"x": rand(3, 1), "c": np.array(False)}, {"x": rand(3, 2), "c": np.array(True)})


def test_both_branches_failing_at_the_bound_dims_is_an_error():
    else_g = branch("else", [helper.make_node("Squeeze", ["x", "one"], ["t"])], {"t": FLOAT}, consts={"one": i64(1)})
    then_g = branch("then", [helper.make_node("Squeeze", ["x", "zero"], ["t"])], {"t": FLOAT}, consts={"zero": i64(0)})
    model = if_model(then_g, else_g, ["y"], x=("n", "k"))
    with pytest.raises(ShapeError, match="squeeze"):
        relaxpack.from_onnx(model, dims={"n": 2, "k": 2})


def test_backend_if():
    run_backend("test_if")
