"""onnxruntime in a child process for ``relaxpack check``: its answers, its
errors, and a crash of the child as one line naming the signal."""

import os
import signal

import numpy as np
import pytest

from relaxpack.check import check_model
from relaxpack.check_isolated import IsolatedSession, OnnxruntimeCrash, OnnxruntimeFailure
from relaxpack.errors import RelaxpackError
from relaxpack.examples.onnx_models import small_cnn


def test_the_child_answers_as_onnxruntime_does():
    model = small_cnn()
    session = IsolatedSession(model.SerializeToString())
    try:
        assert [i.name for i in session.get_inputs()] == [i.name for i in model.graph.input
                                                          if i.name not in {t.name for t in model.graph.initializer}]
        x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
        (y,) = session.run(None, {"input": x})
        assert y.shape[0] == 2 and y.dtype == np.float32
        with pytest.raises(OnnxruntimeFailure, match="input"):
            session.run(None, {"input": x[:, :1]})
        assert session.run(None, {"input": x})[0].shape == y.shape      # still serving after an error
    finally:
        session.close()


def test_a_crash_of_the_child_is_one_line_naming_the_signal():
    session = IsolatedSession(small_cnn().SerializeToString())
    os.kill(session._proc.pid, signal.SIGFPE)
    session._proc.join(10)
    with pytest.raises(OnnxruntimeCrash, match=r"^onnxruntime crashed \(SIGFPE\) while running the model$"):
        session.run(None, {"input": np.zeros((1, 3, 32, 32), np.float32)})
    assert issubclass(OnnxruntimeCrash, RelaxpackError)
    (y,) = session.run(None, {"input": np.zeros((1, 3, 32, 32), np.float32)})     # a new child serves the next run
    assert y.shape[0] == 1
    session.close()


class _CrashingOnSmallInputs:
    """An isolated session whose child dies (SIGFPE) on inputs under 16 cells wide, as onnxruntime's did on
    ultralytics' YOLOv9 at 3x1 pixels and on onnx-asr's wespeaker preprocessor at 8 samples."""

    def __init__(self, model_bytes, threads=None):
        self.inner = IsolatedSession(model_bytes, threads)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, names, feed):
        if min(feed["input"].shape[2:]) < 16:
            os.kill(self.inner._proc.pid, signal.SIGFPE)
            self.inner._proc.join(10)
        return self.inner.run(names, feed)


def test_check_draws_larger_dims_after_onnxruntime_crashes_and_says_so(monkeypatch):
    import onnx
    from relaxpack import check
    model = small_cnn()
    for d in (2, 3):
        model.graph.input[0].type.tensor_type.shape.dim[d].dim_param = "hw"
    monkeypatch.setattr(check, "IsolatedSession", _CrashingOnSmallInputs)
    onnx.checker.check_model(model)
    report = check_model(model, samples=2, isolate=True)
    assert report.passed and all(s.dims["hw"] >= 16 for s in report.samples)
    notes = [n for s in report.samples for n in s.notes]
    assert notes and all(n.startswith("onnxruntime crashed (SIGFPE) while running the model at ") for n in notes)


def test_check_model_isolated_agrees_with_in_process():
    here = check_model(small_cnn(), samples=2, seed=3)
    there = check_model(small_cnn(), samples=2, seed=3, isolate=True)
    assert here.passed and there.passed
    assert [s.dims for s in here.samples] == [s.dims for s in there.samples]
    assert [o.max_abs for s in here.samples for o in s.outputs] == [o.max_abs for s in there.samples for o in s.outputs]


def test_a_model_onnxruntime_cannot_load_is_one_line_when_isolated():
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=99)
    with pytest.raises(RelaxpackError, match="onnxruntime cannot load the model"):
        check_model(model, samples=1, isolate=True)
