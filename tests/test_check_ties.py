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
