"""Data-dependent sizes lifted into symbolic dims once, shared by every use (importers/onnx/lift.py).

A ``size`` graph input is split into its elements, which size a
ConstantOfShape and a Range; the Add and the Concat of the two need their
dims to be the same ones, which only the shared lifted dims prove.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.ir.dims import free_vars
from relaxpack.runtime import VirtualMachine

from .backend_case import assert_close
from .helpers import check_runtime, output_sinfo, rand, reference


def _size_model(extra_k: bool = False) -> onnx.ModelProto:
    """``zeros(H, W) + range(W)`` stacked on ``range(W)``: output ``(H + 1, W)``; with
    ``extra_k`` the size input has a third element, added to the result as data."""
    n = 3 if extra_k else 2
    nodes = [
        helper.make_node("Split", ["size"], ["H", "W"] + (["K"] if extra_k else []), num_outputs=n),
        helper.make_node("Concat", ["H", "W"], ["hw"], axis=0),
        helper.make_node("ConstantOfShape", ["hw"], ["zeros"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
        helper.make_node("Squeeze", ["W", "axis0"], ["w"]),
        helper.make_node("Range", ["zero", "w", "one"], ["steps"]),
        helper.make_node("Cast", ["steps"], ["steps_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["zeros", "steps_f"], ["grid"]),
        helper.make_node("Unsqueeze", ["steps_f", "axis0"], ["row"]),
        helper.make_node("Concat", ["grid", "row"], ["y0"], axis=0),
    ]
    if extra_k:
        nodes += [helper.make_node("Cast", ["K"], ["k_f"], to=TensorProto.FLOAT),
                  helper.make_node("Add", ["y0", "k_f"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["y0"], ["y"]))
    inits = [helper.make_tensor("axis0", TensorProto.INT64, [1], [0]),
             helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1])]
    graph = helper.make_graph(nodes, "lift", [helper.make_tensor_value_info("size", TensorProto.INT64, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _size(*values):
    return {"size": np.array(values, np.int64)}


def test_constant_of_shape_and_range_share_the_lifted_dims():
    mod = check_runtime(_size_model(), [_size(2, 3), _size(1, 5), _size(4, 1), _size(0, 2), _size(3, 0)],
                        errors=[(_size(-1, 3), r"ConstantOfShape node: element 0 is -1, but the model uses it "
                                               r"as a dim \(must be >= 0\)")])
    text = mod.script()
    assert text.count('"dyn.tensor_to_shape"') == 1, text    # both elements bound once, at ConstantOfShape
    shape = output_sinfo(mod).shape
    h, w = shape
    assert free_vars(h) == free_vars(h - 1) and (h - 1) != h and len(free_vars(h)) == 1
    assert len(free_vars(w)) == 1 and free_vars(w) != free_vars(h)
    # no other run-time shape: the Add, Range and Concat are exact
    assert "dyn.range" not in text and "dyn.broadcast_pair" not in text and "dyn.full" not in text


def test_wrong_length_is_an_input_error():
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(_size_model())))
    with pytest.raises(RelaxpackError, match="input 'size'"):
        vm.run(_size(2, 3, 4))


def test_elements_not_used_as_sizes_are_not_checked():
    """``K`` is data: a negative K is valid and must not trip the lift's check."""
    check_runtime(_size_model(extra_k=True), [_size(2, 3, -7), _size(1, 4, 5)],
                  errors=[(_size(2, -3, 1), r"element 1 is -3")])


def _affine_grid(rank: int, align_corners: int) -> onnx.ModelProto:
    n = rank + 2
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align_corners)
    graph = helper.make_graph([node], "affine_grid",
                              [helper.make_tensor_value_info("theta", TensorProto.FLOAT, [2, rank, rank + 1]),
                               helper.make_tensor_value_info("size", TensorProto.INT64, [n])],
                              [helper.make_tensor_value_info("grid", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


@pytest.mark.parametrize("rank,align_corners,sizes", [
    (2, 0, [(2, 3, 5, 6), (2, 1, 1, 4), (2, 2, 7, 1)]),
    (2, 1, [(2, 3, 5, 6), (2, 1, 3, 2)]),
    (3, 0, [(2, 3, 4, 5, 6), (2, 1, 1, 2, 7)]),
])
def test_affine_grid_built_once_runs_at_several_sizes(rank, align_corners, sizes):
    """AffineGrid through its function body (``size`` lifted) against onnxruntime's
    own kernel. The body computes the grid by a matmul, the kernel by other float32
    sums: they may differ by an ulp of the terms (about 1e-7), hence atol 1e-6."""
    model = _affine_grid(rank, align_corners)
    mod = relaxpack.from_onnx(model)
    assert "dyn.broadcast_pair" not in mod.script()
    vm = VirtualMachine(relaxpack.build(mod))
    theta = rand(2, rank, rank + 1)
    for s in sizes:
        feeds = {"theta": theta, **_size(*s)}
        (expected,) = reference(model, feeds, "ort")
        assert_close(vm.run(feeds)["grid"], expected, 1e-5, 1e-6, "grid")
    with pytest.raises(RelaxpackError, match=r"is -4, but the model uses it as a dim"):
        vm.run({"theta": theta, **_size(2, 3, *([-4] * rank))})


def _numbered(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every value named by a number, as torch's TorchScript exporter names them."""
    graph = model.graph
    names = {n: str(2970 + i) for i, n in enumerate(
        [*(v.name for v in graph.input), *(t.name for t in graph.initializer),
         *(o for node in graph.node for o in node.output)])}
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names[n] for n in node.output]
    for v in [*graph.input, *graph.output, *graph.initializer]:
        v.name = names[v.name]
    return model


def test_lifted_dims_of_values_named_by_numbers_are_identifiers():
    # torchvision's Mask R-CNN: a size named '2974' was lifted to the dims '2974_v12', not identifiers
    model = _numbered(_size_model())
    feed = {model.graph.input[0].name: np.array([2, 3], np.int64)}
    mod = check_runtime(model, [feed])
    names = {v for d in output_sinfo(mod).shape for v in free_vars(d)}
    assert names and all(v.startswith("v2970_v") for v in names), names
