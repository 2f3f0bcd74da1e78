"""Archives built before a kernel attribute existed: the loader adds it with the
value the kernel meant then (runtime/added_attrs.py), which is the op's default."""

import inspect
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import ExecutionError
from relaxpack.ops.registry import get_op_def
from relaxpack.runtime import VirtualMachine, load
from relaxpack.runtime.added_attrs import ADDED
from relaxpack.runtime.bytecode import Call
from relaxpack.runtime.kernels import KERNELS


@pytest.mark.parametrize("name", sorted(ADDED))
def test_added_values_are_the_op_defaults(name):
    op = get_op_def(name)
    for attr, value in ADDED[name].items():
        assert op.attrs[attr] == value, (name, attr)
        assert attr in inspect.signature(KERNELS[name].fn).parameters, (name, attr)


def _conv_with_computed_weight():
    """A conv whose weight is computed (w + 0), so no per-instruction specialization takes it."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Add", ["w", "zero"], ["w2"]),
             helper.make_node("Conv", ["x", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8]),
                                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32), "w": w}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


def _string_normalizer():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", stopwords=["b"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    feeds = {"x": np.array(["a", "B", "straße", "Zz"], dtype=object)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


def _linear_classifier():
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                            coefficients=[1.0, -2.0, 0.5, 3.0, -1.0, 0.25], intercepts=[0.125, -0.5, 2.0],
                            classlabels_ints=[0, 1, 2], post_transform="SOFTMAX")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, ["n"]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 3])])
    feeds = {"x": np.random.default_rng(2).standard_normal((5, 2)).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]), feeds


def _without(exe, names: set[str]):
    """``exe`` as an archive of before: its calls of ``names`` lack the attributes added since."""
    index = {i: ADDED[e.name] for i, e in enumerate(exe.func_table) if e.name in names}
    stripped = 0

    def strip(ins):
        nonlocal stripped
        if not isinstance(ins, Call) or ins.func not in index:
            return ins
        stripped += 1
        return replace(ins, kwargs=tuple(kv for kv in ins.kwargs if kv[0] not in index[ins.func]))

    exe.functions = {n: replace(fn, instructions=tuple(strip(i) for i in fn.instructions))
                     for n, fn in exe.functions.items()}
    assert stripped, "the model calls none of the kernels"
    return exe


@pytest.mark.parametrize("make, kernels", [(_conv_with_computed_weight, {"nn.conv", "nn.conv_bias_act"}),
                                           (_string_normalizer, {"string_normalizer"}),
                                           (_linear_classifier, {"linear_classifier"})])
def test_an_archive_without_the_added_attributes_runs(tmp_path, make, kernels):
    model, feeds = make()
    expected = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=0)).run(feeds)
    old = _without(relaxpack.build(relaxpack.from_onnx(model), opt_level=0), kernels)
    old.save(tmp_path / "old.rpk")
    loaded = load(tmp_path / "old.rpk")
    assert _attrs_of(loaded, kernels) == {k: v for name in kernels for k, v in ADDED[name].items()}
    got = VirtualMachine(loaded).run(feeds)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value)


def _attrs_of(exe, kernels: set[str]) -> dict:
    """The added attributes the calls of ``kernels`` hold, with their values."""
    index = {i for i, e in enumerate(exe.func_table) if e.name in kernels}
    return {k: v for fn in exe.functions.values() for ins in fn.instructions
            if isinstance(ins, Call) and ins.func in index
            for k, (_, v) in ins.kwargs if any(k in ADDED[name] for name in kernels)}


def test_string_normalizer_needs_its_added_attribute(tmp_path):
    """Without the loader's fill, an old archive's StringNormalizer fails: the kernel takes no defaults."""
    model, feeds = _string_normalizer()
    old = _without(relaxpack.build(relaxpack.from_onnx(model), opt_level=0), {"string_normalizer"})
    with pytest.raises(ExecutionError, match="ascii_case"):
        VirtualMachine(old).run(feeds)


def test_every_attribute_added_since_the_snapshot_is_filled():
    """Ops' attributes as archives were written up to 2026-11-27 (the snapshot): an attribute an op
    with a kernel gained since must be in ADDED, or older archives fail with a missing keyword."""
    import json
    from pathlib import Path
    snapshot = json.loads((Path(__file__).parent / "data" / "op_attrs_2026-11-27.json").read_text())
    missing = {(name, attr) for name, attrs in snapshot.items() if name in KERNELS
               for attr in get_op_def(name).attrs if attr not in attrs and attr not in ADDED.get(name, {})}
    assert not missing, f"add these to runtime/added_attrs.ADDED: {sorted(missing)}"
