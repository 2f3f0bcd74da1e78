"""Control flow exported by torch: ``torch.cond`` (an ONNX If, dynamo
exporter), a data-dependent Python ``if`` and a ``for`` loop of run-time
length (an ONNX If and Loop, ``torch.jit.script`` + the TorchScript exporter)
match onnxruntime on inputs that take each branch and on several trip counts,
0 included.

The models are committed (``python -m tests.models.generate`` re-exports them;
it needs torch and onnxscript), so these tests need neither.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.runtime import VirtualMachine

MODELS = Path(__file__).resolve().parent / "models"


def _check(name: str, feeds_list, op: str):
    model = onnx.load(str(MODELS / name))
    assert op in [n.op_type for n in model.graph.node]
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    for feeds in feeds_list:
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-5, 1e-5)
        assert all(d.passed for d in diffs), diffs


def _signed_inputs(seed: int):
    x = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
    positive, negative = np.abs(x) + 0.1, -np.abs(x) - 0.1
    return [{"x": positive}, {"x": negative}, {"x": negative[:1]}, {"x": positive[:2]}]


def test_torch_cond_matches_onnxruntime_on_both_branches():
    _check("cond_small.onnx", _signed_inputs(0), "If")


def test_scripted_if_matches_onnxruntime_on_both_branches():
    _check("if_small.onnx", _signed_inputs(1), "If")


def test_scripted_loop_matches_onnxruntime_for_several_trip_counts():
    model = onnx.load(str(MODELS / "loop_small.onnx"))
    n_input = next(i for i in model.graph.input if i.name == "n")
    n_dtype = onnx.helper.tensor_dtype_to_np_dtype(n_input.type.tensor_type.elem_type)
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    _check("loop_small.onnx", [{"x": x, "n": np.array(k, n_dtype)} for k in (0, 1, 5, 40)], "Loop")
