"""``check``'s second opinion: where onnxruntime disagrees with relaxpack and onnx's reference
evaluator cannot judge, onnxruntime with its graph optimizations off (the graph as written)
decides. Its optimized run is made to deviate here by a wrapper, the same on every CPU."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack.check as check


def _model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.linspace(-1, 1, 12).tolist())
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class _Shifted:
    """A session whose outputs are onnxruntime's plus ``shift``."""

    def __init__(self, session, shift: float):
        self.session, self.shift = session, shift

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feed):
        return [np.asarray(o) + np.float32(self.shift) for o in self.session.run(names, feed)]


@pytest.fixture
def optimized_deviates(monkeypatch):
    """onnxruntime's optimized run off by 0.5; the reference evaluator without an answer."""
    real = check._session
    monkeypatch.setattr(check, "_session", lambda proto, threads, isolate: _Shifted(real(proto, threads, isolate), 0.5))
    monkeypatch.setattr(check, "reference_output", lambda *args, **kwargs: None)


@pytest.mark.parametrize("isolate", [False, True])
def test_an_output_only_the_optimizer_changes_passes_with_its_note(optimized_deviates, isolate):
    report = check.check_model(_model(), samples=2, isolate=isolate)
    for sample in report.samples:
        (out,) = sample.outputs
        assert out.passed and out.note == check.ORT_OPTIMIZER_DEVIATES


def test_strict_still_fails_it(optimized_deviates):
    report = check.check_model(_model(), samples=1, strict=True)
    assert not report.samples[0].outputs[0].passed


def test_relaxpack_wrong_against_both_runs_fails(optimized_deviates, monkeypatch):
    real = check.onnxruntime_session
    monkeypatch.setattr(check, "onnxruntime_session",
                        lambda proto, threads=None, optimize=True: _Shifted(real(proto, threads, optimize), 0.5))
    report = check.check_model(_model(), samples=1)
    (out,) = report.samples[0].outputs
    assert not out.passed and out.note != check.ORT_OPTIMIZER_DEVIATES


def test_the_unoptimized_session_runs_the_graph_as_written():
    import onnxruntime as ort
    session = check.onnxruntime_session(_model(), optimize=False)
    assert session.get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert check.onnxruntime_session(_model()).get_session_options().graph_optimization_level != \
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def _nbits_model(accuracy_level: int):
    from .importers.onnx.test_convert_matmul_nbits import nbits_model
    return nbits_model(32, 8, 16, "packed", False, accuracy_level=accuracy_level)


def test_the_second_opinion_computes_matmul_nbits_in_float32():
    """At accuracy_level 4 onnxruntime may quantize MatMulNBits' activations to int8 (by CPU); the
    second opinion runs the same model without the level (float32, as relaxpack), subgraphs too."""
    model = _nbits_model(4)
    branch = helper.make_graph([model.graph.node[0]], "branch", [],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model.graph.node.append(helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=branch))
    lowered, found = check.in_float32(model)
    levels = [a.name for g in check._graphs(lowered.graph) for n in g.node for a in n.attribute
              if n.op_type == "MatMulNBits" and a.name == "accuracy_level"]
    assert found and levels == []
    assert sum(a.name == "accuracy_level" for g in check._graphs(model.graph) for n in g.node
               for a in n.attribute) == 3        # the model itself unchanged (the node, both branches)
    plain = _nbits_model(0)
    assert check.in_float32(plain) == (plain, False)


def test_an_int8_accuracy_level_deviation_passes_with_its_note(optimized_deviates):
    report = check.check_model(_nbits_model(4), dims={"m": 2, "seq": 3}, samples=1)
    (out,) = report.samples[0].outputs
    assert out.passed and out.note == check.ORT_ACCURACY_LEVEL_DEVIATES


def test_the_second_opinion_runs_one_thread_unless_told(optimized_deviates, monkeypatch):
    """onnxruntime's DynamicQuantizeLSTM quantizes H per thread's rows: its default threads are
    not the graph as written. The as-written run takes one thread, or --threads when given."""
    asked = []
    real = check.onnxruntime_session

    def recording(proto, threads=None, optimize=True):
        if not optimize:
            asked.append(threads)
        return real(proto, threads, optimize)
    monkeypatch.setattr(check, "onnxruntime_session", recording)
    check.check_model(_model(), samples=1)
    check.check_model(_model(), samples=1, threads=2)
    assert asked == [1, 2]


def test_per_node_runs_onnxruntime_with_the_threads_given(monkeypatch):
    asked = []
    real = check.onnxruntime_session
    monkeypatch.setattr(check, "onnxruntime_session",
                        lambda proto, threads=None, optimize=True: asked.append(threads) or real(proto, threads))
    x = np.ones((2, 4), np.float32)
    assert check.first_divergence(_model(), {"x": x}, threads=1) is None
    assert asked == [1]
