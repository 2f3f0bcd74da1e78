"""A transformer head split as torch exports it, Shape -> Gather ->
Unsqueeze -> Concat -> Reshape, must give the reshape an exact symbolic
target over the input's dims, and run at any (batch, seq) with one build."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.ir.expr import Call, ShapeExpr
from relaxpack.ir.dims import sym
from relaxpack.runtime import VirtualMachine

ort.set_default_logger_severity(3)


def constant(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def head_split_model(opset: int = 17) -> onnx.ModelProto:
    """(batch, seq, 64) -> (batch, 4, seq, 16) -> (batch, seq, 64), the way
    torch.onnx exports ``x.view(b, s, 4, 16).transpose(1, 2)`` and back."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        constant("c0", np.array(0, np.int64)), constant("c1", np.array(1, np.int64)),
        helper.make_node("Gather", ["shape", "c0"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "c1"], ["s"], axis=0),
        constant("ax", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax"], ["s1"]),
        constant("heads", np.array([4], np.int64)), constant("dim", np.array([16], np.int64)),
        helper.make_node("Concat", ["b1", "s1", "heads", "dim"], ["split_shape"], axis=0),
        helper.make_node("Reshape", ["x", "split_shape"], ["split"]),
        helper.make_node("Transpose", ["split"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["q"], ["back"], perm=[0, 2, 1, 3]),
        constant("minus", np.array([-1], np.int64)),
        helper.make_node("Concat", ["b1", "s1", "minus"], ["merge_shape"], axis=0),
        helper.make_node("Reshape", ["back", "merge_shape"], ["merged"]),
    ]
    graph = helper.make_graph(nodes, "head_split",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])],
                              [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", 4, "seq", 16]),
                               helper.make_tensor_value_info("merged", TensorProto.FLOAT, ["batch", "seq", 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def reshape_targets(mod):
    return [b.value.args[1] for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, Call) and getattr(b.value.op, "name", None) == "reshape"]


@pytest.mark.parametrize("opset", [13, 17, 23])
def test_head_split_reshape_target_is_symbolic(opset):
    mod = relaxpack.from_onnx(head_split_model(opset))
    text = mod.script()
    assert "shape_to_tensor" not in text
    assert "R.reshape(x, R.shape([batch, seq, 4, 16]))" in text
    batch, seq = sym("batch"), sym("seq")
    targets = reshape_targets(mod)
    assert all(isinstance(t, ShapeExpr) for t in targets)
    assert [tuple(t.values) for t in targets] == [(batch, seq, 4, 16), (batch, seq, -1)]
    assert mod["main"].ret_struct_info.fields[1].shape == (batch, seq, 64)


def test_head_split_runs_at_two_sizes_with_one_build():
    model = head_split_model()
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in [(2, 7), (1, 13)]:
        x = rng.standard_normal((batch, seq, 64)).astype(np.float32)
        got = vm.run({"x": x})
        want = dict(zip(["q", "merged"], sess.run(None, {"x": x})))
        for name in ("q", "merged"):
            assert got[name].shape == want[name].shape
            np.testing.assert_array_equal(got[name], want[name])
