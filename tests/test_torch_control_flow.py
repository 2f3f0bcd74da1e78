"""Control flow exported by torch: a data-dependent ``if`` (an ONNX If) and a
loop of run-time length (an ONNX Loop) match onnxruntime on inputs that take
each branch and on several trip counts, 0 included.

The models are made here with torch's TorchScript exporter (``torch.jit.script``
keeps the Python control flow); without torch the tests are skipped.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.runtime import VirtualMachine

torch = pytest.importorskip("torch")


class Branchy(torch.nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):
            y = x * 2.0 + 1.0
        else:
            y = x.abs() - 1.0
        return y


class Repeat(torch.nn.Module):
    def forward(self, x, n: int):
        y = x
        for _ in range(n):
            y = y * 0.5 + x
        return y


def _export(module, args, names) -> onnx.ModelProto:
    buffer = io.BytesIO()
    torch.onnx.export(torch.jit.script(module), args, buffer, dynamo=False, input_names=names,
                      dynamic_axes={"x": {0: "batch"}})
    return onnx.load_from_string(buffer.getvalue())


def _check(model, feeds_list):
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    for feeds in feeds_list:
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-5, 1e-5)
        assert all(d.passed for d in diffs), diffs


def test_scripted_if_matches_onnxruntime_on_both_branches():
    model = _export(Branchy(), (torch.randn(3, 4),), ["x"])
    assert "If" in [n.op_type for n in model.graph.node]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    positive, negative = np.abs(x) + 0.1, -np.abs(x) - 0.1
    _check(model, [{"x": positive}, {"x": negative}, {"x": negative[:1]}])


def test_scripted_loop_matches_onnxruntime_for_several_trip_counts():
    model = _export(Repeat(), (torch.randn(3, 4), torch.tensor(3)), ["x", "n"])
    assert "Loop" in [n.op_type for n in model.graph.node]
    n_input = next(i for i in model.graph.input if i.name == "n")
    n_dtype = onnx.helper.tensor_dtype_to_np_dtype(n_input.type.tensor_type.elem_type)
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    _check(model, [{"x": x, "n": np.array(k, n_dtype)} for k in (0, 1, 5)])
