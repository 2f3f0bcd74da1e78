"""What every model needs before its nodes are looked at (issue 20, items 15, 16, 18):
a graph, outputs and an opset; a file that is not a model says so in one line."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import ModelError, RelaxpackError
from relaxpack.importers.onnx.importer import load_model

F = TensorProto.FLOAT


def relu_model(outputs=True, opsets=(("", 17),)):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, ["n"])],
                              [helper.make_tensor_value_info("y", F, ["n"])] if outputs else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


@pytest.mark.parametrize("model, message", [
    (onnx.ModelProto(), r"the model has no graph \(an empty file, or not an ONNX model\?\)"),
    (relu_model(outputs=False), "graph 'g' has no outputs: it computes nothing"),
    (relu_model(opsets=()), "the model imports no opset"),
    (relu_model(opsets=(("ai.onnx.ml", 3),)), "uses ONNX ops but imports no opset of the default domain"),
])
def test_models_missing_what_every_model_needs_are_model_errors(model, message, tmp_path):
    with pytest.raises(ModelError, match=message):
        relaxpack.from_onnx(model)
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(ModelError, match=message):
        relaxpack.from_onnx(tmp_path / "m.onnx")
    with pytest.raises(ModelError, match=message):
        load_model(tmp_path / "m.onnx")


def test_a_model_of_other_domains_only_needs_no_default_opset():
    graph = helper.make_graph([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)],
                              "g", [helper.make_tensor_value_info("x", F, [3])],
                              [helper.make_tensor_value_info("y", F, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    exe = relaxpack.build(relaxpack.from_onnx(model))
    out = relaxpack.runtime.VirtualMachine(exe).run({"x": np.array([0.2, 0.7, 1.0], np.float32)})["y"]
    np.testing.assert_array_equal(out, [0, 1, 1])


def test_files_that_are_not_models(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "noise.onnx").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "archive.onnx").write_bytes(b"\x89RPK\r\n\x1a\n" + bytes(56))
    for name, message in [("empty", "has no graph"), ("noise", r"is not an ONNX model \(DecodeError"),
                          ("archive", "is a relaxpack archive, not an ONNX model")]:
        for read in (relaxpack.from_onnx, load_model):
            with pytest.raises(ModelError, match=message) as info:
                read(tmp_path / f"{name}.onnx")
            assert "\n" not in str(info.value)


@pytest.mark.parametrize("dims", [{"n": 2 ** 70}, {"n": (1, 2 ** 70)}, {"n": (5, 2)}, {"n": -1}, {"n": True}])
def test_dims_outside_what_a_tensor_can_have_are_refused_in_one_line(dims):
    with pytest.raises(RelaxpackError, match=r"dims\[.n.\] must be an int, a \(lo, hi\) pair of ints in 0..2\*\*48"):
        relaxpack.from_onnx(relu_model(), dims=dims)
