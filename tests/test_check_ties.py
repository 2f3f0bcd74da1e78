"""check --per-node tells rounding near-ties from errors at the first diverging node."""

import numpy as np
import onnx
from onnx import TensorProto, helper

import relaxpack.check
from relaxpack.check import first_divergence
from relaxpack.check_ties import near_tie_note
from relaxpack.importers.onnx import from_onnx
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .cli_helpers import invoke


def _quantizing_model() -> onnx.ModelProto:
    """x * 1 -> QuantizeLinear (scale 1, uint8): a half rounds to even, one ulp above it up."""
    nodes = [helper.make_node("Mul", ["x", "one"], ["m"], name="mul"),
             helper.make_node("QuantizeLinear", ["m", "scale", "zp"], ["q"], name="quantize")]
    inits = [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("scale", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("zp", TensorProto.UINT8, [], [0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("q", TensorProto.UINT8, [4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


class _OneUlpUpstream:
    """onnxruntime's answers as relaxpack computes them, but for ``m[1]`` one ulp higher and the
    ``q`` that follows from it: what another summation order upstream does at a tie."""

    def __init__(self, proto: onnx.ModelProto, threads: int | None = None):
        self._proto = proto

    def get_outputs(self):
        from types import SimpleNamespace
        return [SimpleNamespace(name=n) for n in ("q", "m")]

    def run(self, names, feeds):
        got = VirtualMachine(build(from_onnx(self._proto), opt_level=0)).run(dict(feeds))
        m = got["m"].copy()
        m[1] = np.nextafter(m[1], np.float32(np.inf))
        q = np.clip(np.round(m), 0, 255).astype(np.uint8)   # rounds half to even, as QuantizeLinear
        return [q, m]


def test_a_step_from_a_last_bit_upstream_is_named_a_near_tie(monkeypatch):
    monkeypatch.setattr(relaxpack.check, "onnxruntime_session", _OneUlpUpstream)
    x = np.array([1.0, 2.5, 3.25, 7.0], np.float32)
    divergence = first_divergence(_quantizing_model(), {"x": x})
    assert (divergence.node, divergence.output) == ("quantize", "q")
    assert "1 of 4 values one step apart" in divergence.note
    assert "'m'" in divergence.note and "1 ulp" in divergence.note and "near-ties" in divergence.note


def test_the_cli_prints_the_near_tie_note(monkeypatch, tmp_path):
    proto = _quantizing_model()
    onnx.save(proto, str(tmp_path / "q.onnx"))
    np.savez(tmp_path / "x.npz", x=np.array([1.0, 2.5, 3.25, 7.0], np.float32))
    monkeypatch.setattr(relaxpack.check, "onnxruntime_session", _OneUlpUpstream)
    monkeypatch.setattr(relaxpack.check, "check_model", _failing_report)
    result = invoke("check", tmp_path / "q.onnx", "--inputs", tmp_path / "x.npz", "--per-node")
    assert result.exit_code == 1
    assert "first divergence: QuantizeLinear node 'quantize'" in result.output
    assert "note: 1 of 4 values one step apart" in result.output, result.output


def _failing_report(model, feeds=None, inputs=None, on_sample=None, **kwargs):
    from relaxpack.check import CheckReport, SampleReport
    from relaxpack.compare import OutputDiff
    sample = SampleReport({}, [OutputDiff("q", (4,), 1.0, 0.33, False)], dict(inputs))
    if on_sample is not None:
        on_sample(0, sample)
    return CheckReport([sample])


def test_bit_identical_inputs_leave_the_divergence_to_the_node():
    got = {"m": np.array([2.5, 3.5], np.float32), "q": np.array([2, 4], np.uint8)}
    want = {"m": got["m"].copy(), "q": np.array([3, 4], np.uint8)}
    assert near_tie_note(["m", "scale"], "q", got, want) == ""


def test_more_than_one_step_or_a_float_output_is_no_near_tie():
    m = np.array([2.5, 3.5], np.float32)
    got = {"m": m, "q": np.array([2, 4], np.uint8), "f": m}
    want = {"m": np.nextafter(m, np.float32(9)), "q": np.array([4, 4], np.uint8), "f": m + 1}
    assert near_tie_note(["m"], "q", got, want) == ""
    assert near_tie_note(["m"], "f", got, want) == ""


def test_ulps_are_counted_in_the_inputs_own_precision():
    m = np.array([20.5, -22.5], np.float32)
    far = m.copy()
    far[1] = np.float32(-22.5) - 3 * np.spacing(np.float32(22.5))
    got = {"m": m, "q": np.array([20, -22], np.int8)}
    want = {"m": far, "q": np.array([20, -23], np.int8)}
    note = near_tie_note(["m", "s", "zp"], "q", got, want)
    assert note.startswith("1 of 2 values one step apart") and "(up to 3 ulp)" in note


def test_inputs_a_step_apart_are_said_so_by_their_difference():
    """DQ -> AveragePool -> Q (a TFLite int8 model): averages of four ints make exact ties, and an
    input one side computes as 0 where the other has 0.0172 is no matter of last bits."""
    got = {"m": np.array([0.0, 1.5], np.float32), "q": np.array([0, 2], np.int8)}
    want = {"m": np.array([0.0172, 1.5], np.float32), "q": np.array([1, 2], np.int8)}
    note = near_tie_note(["m"], "q", got, want)
    assert "(up to 0.0172 apart)" in note and "those differences decide" in note and "ulp" not in note


def _top_two_model(op: str = "TopK") -> onnx.ModelProto:
    """x * 1 -> TopK(k=2) (or ArgMax without keepdims) over the last axis."""
    select = (helper.make_node("TopK", ["m", "k"], ["v", "i"], name="top", axis=-1) if op == "TopK"
              else helper.make_node("ArgMax", ["m"], ["i"], name="top", axis=1, keepdims=0))
    nodes = [helper.make_node("Mul", ["x", "one"], ["m"], name="mul"), select]
    inits = [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]), helper.make_tensor("k", TensorProto.INT64, [1], [2])]
    outputs = [helper.make_tensor_value_info("i", TensorProto.INT64, None)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class _SwappedUpstream:
    """onnxruntime's answers as relaxpack computes them, but with ``m[0, 2]`` raised by ``by`` (to
    just above ``m[0, 0]``: a near-tie its last bits decide, or far above it) and the picks that
    follow from it."""

    def __init__(self, proto: onnx.ModelProto, threads: int | None = None, by: float = 0.0):
        self._proto, self._by = proto, by

    def get_outputs(self):
        from types import SimpleNamespace
        return [SimpleNamespace(name=n) for n in ("m", "v", "i") if n != "v" or self._proto.graph.node[1].op_type == "TopK"]

    def run(self, names, feeds):
        m = VirtualMachine(build(from_onnx(relaxpack.check.expose_intermediates(self._proto)), opt_level=0)).run(
            dict(feeds))["m"].copy()
        m[0, 2] = np.nextafter(m[0, 0], np.float32(np.inf)) + np.float32(self._by)
        order = np.argsort(-m, axis=1, kind="stable")
        if self._proto.graph.node[1].op_type == "TopK":
            i = order[:, :2]
            return [m, np.take_along_axis(m, i, 1), i]
        return [m, order[:, 0]]


def _swapped(by: float = 0.0):
    return lambda proto, threads=None: _SwappedUpstream(proto, threads, by)


def test_a_topk_order_from_a_last_bit_upstream_is_named_an_order_tie(monkeypatch):
    monkeypatch.setattr(relaxpack.check, "onnxruntime_session", _swapped())
    x = np.array([[3.0, 1.0, 3.0 - 2.4e-7, 0.5], [0.0, 2.0, 1.0, -1.0]], np.float32)
    divergence = first_divergence(_top_two_model(), {"x": x})
    assert (divergence.node, divergence.output) == ("top", "i")
    assert divergence.note.startswith("2 of 4 indices differ") and "'m'" in divergence.note
    assert "order of near-equal values" in divergence.note


def test_an_argmax_order_tie_and_a_real_reordering(monkeypatch):
    x = np.array([[3.0, 1.0, 3.0 - 2.4e-7, 0.5], [0.0, 2.0, 1.0, -1.0]], np.float32)
    monkeypatch.setattr(relaxpack.check, "onnxruntime_session", _swapped())
    divergence = first_divergence(_top_two_model("ArgMax"), {"x": x})
    assert divergence.output == "i" and divergence.note.startswith("1 of 2 indices differ")
    monkeypatch.setattr(relaxpack.check, "onnxruntime_session", _swapped(by=0.5))   # m itself fails first
    divergence = first_divergence(_top_two_model("ArgMax"), {"x": x})
    assert divergence.output == "m" and divergence.note == ""


def test_indices_apart_on_equal_inputs_are_the_nodes_own():
    from relaxpack.check_ties import order_tie_note
    node = _top_two_model().graph.node[1]
    m = np.array([[3.0, 1.0, 3.0, 0.5]], np.float32)
    got, want = {"m": m, "i": np.array([[0, 2]])}, {"m": m, "i": np.array([[2, 0]])}
    assert order_tie_note(node, got, want) == ""
    near = m.copy()
    near[0, 2] = np.nextafter(near[0, 2], np.float32(0))
    assert order_tie_note(node, {**got, "m": near}, want).startswith("2 of 2 indices differ")
    far = {**got, "m": near, "i": np.array([[0, 1]])}            # picks 2.0 apart: not a tie
    assert order_tie_note(node, far, want) == ""
