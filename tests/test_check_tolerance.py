"""``relaxpack check``'s default tolerance: relative to each output's magnitude.

By default a float output compares within its dtype's tolerance, its atol
scaled by the output's largest finite magnitude (at least 0.1: small
outputs keep the former 1e-5), as the differential campaign judges: a model whose outputs are in the thousands
(magika's logits before the softmax were) carries rounding error at the
scale of its terms, and an absolute 1e-5 failed it where nothing was wrong.
Explicit ``rtol``/``atol`` mean what they say. Both ways are tested: the
rounding a different summation order makes passes, a kernel wrong by a
little still fails, at large and at small magnitudes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import relaxpack.check as check
from relaxpack.compare import compare_outputs, tolerance_for
from relaxpack.runtime.kernels import KERNELS, Kernel

from .cli_helpers import invoke


def matmul_model():
    """``a @ b`` of two inputs: outputs as large as the inputs make them, some near zero."""
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="/MatMul")], "mm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 64]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [64, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def inputs(scale: float, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs whose products are about ``scale`` (in thousands at 1000)."""
    rng = np.random.default_rng(seed)
    return {"a": (rng.standard_normal((32, 64)) * np.sqrt(scale)).astype(np.float32),
            "b": (rng.standard_normal((64, 16)) * np.sqrt(scale) / 8).astype(np.float32)}


def perturbed_matmul(monkeypatch, relative: float) -> list[int]:
    """The matmul kernel with every element moved by up to ``relative`` x the output's largest
    magnitude (seeded): 8 float32 ulp of it is what another summation order moves a sum by, 1e-3
    is a bug. Returns a list that counts the calls, so a test knows the kernel ran."""
    right, calls = KERNELS["matmul"].fn, []

    def moved(lhs, rhs, *, out, **attrs):
        right(lhs, rhs, out=out, **attrs)
        noise = np.random.default_rng(len(calls)).uniform(-1, 1, out.shape) * relative * np.abs(out).max()
        out += noise.astype(out.dtype)
        calls.append(1)
    monkeypatch.setitem(KERNELS, "matmul", Kernel("matmul", moved, True))
    return calls


ROUNDING = 8 * float(np.finfo(np.float32).eps)       # a summation order's worth
BUG = 1e-3


def test_default_tolerance_is_relative_to_the_outputs_magnitude():
    big = np.array([1000.0, 0.5], np.float32)
    assert tolerance_for(big) == (1e-4, pytest.approx(0.1))
    assert tolerance_for(np.array([0.25, -0.5], np.float32)) == (1e-4, pytest.approx(5e-5))
    assert tolerance_for(np.array([0.02, 0.0], np.float32)) == (1e-4, pytest.approx(1e-5))   # at least 0.1
    assert tolerance_for(np.array([3.0, np.inf, np.nan], np.float16)) == (1e-2, pytest.approx(0.03))
    assert tolerance_for(np.array([7, 8], np.int64)) == (0.0, 0.0)                 # integers: exact
    off = {"y": big + np.array([0.0, 0.05], np.float32)}
    assert compare_outputs(["y"], off, [big])[0].passed                           # 0.05 next to a 1000
    assert not compare_outputs(["y"], off, [big], rtol=1e-4, atol=1e-5)[0].passed   # explicit: as given
    assert not compare_outputs(["y"], off, [big], atol=1e-5)[0].passed             # the other keeps 1e-4
    far = {"y": big + np.array([0.0, 0.5], np.float32)}
    assert not compare_outputs(["y"], far, [big])[0].passed                       # 0.5: beyond 0.1 + 5e-5


def test_nan_in_both_outputs_is_no_difference():
    """NaN where both have it (a log of a negative timestep in diffusers' score-SDE UNet) is 0 apart,
    in the relative error as in the absolute one: check printed "max rel nan" on a pass."""
    got = np.array([np.nan, 1.0, 2.0], np.float32)
    (diff,) = compare_outputs(["y"], {"y": got}, [np.array([np.nan, 1.0, 2.0 + 1e-6], np.float32)])
    assert diff.passed and diff.max_abs < 1e-5 and 0 < diff.max_rel < 1e-5
    (diff,) = compare_outputs(["y"], {"y": got}, [np.array([0.5, 1.0, 2.0], np.float32)])
    assert not diff.passed and np.isnan(diff.max_abs) == np.isnan(diff.max_rel)

def test_rounding_in_outputs_in_the_thousands_passes_by_default(monkeypatch):
    calls = perturbed_matmul(monkeypatch, ROUNDING)
    feeds = inputs(1000.0)
    report = check.check_model(matmul_model(), inputs=feeds)
    (out,) = report.samples[0].outputs
    assert calls and report.passed and out.note == "", out
    assert out.max_abs > 1e-3, "the kernel's rounding is there to be forgiven"
    fixed = check.check_model(matmul_model(), inputs=feeds, rtol=1e-4, atol=1e-5)
    assert not fixed.passed, "an absolute 1e-5 fails it: the old default's false FAIL"


@pytest.mark.parametrize("scale", [1000.0, 0.01], ids=["thousands", "hundredths"])
def test_a_kernel_wrong_by_a_little_still_fails_by_default(monkeypatch, scale):
    calls = perturbed_matmul(monkeypatch, BUG)
    report = check.check_model(matmul_model(), inputs=inputs(scale))
    assert calls and not report.passed, report.samples[0].outputs


def test_the_right_kernel_passes_at_both_magnitudes():
    for scale in (1000.0, 0.01):
        report = check.check_model(matmul_model(), inputs=inputs(scale))
        assert report.passed, report.samples[0].outputs


def test_the_command_line_default_and_explicit_tolerances(tmp_path, monkeypatch):
    perturbed_matmul(monkeypatch, ROUNDING)
    onnx.save(matmul_model(), str(tmp_path / "mm.onnx"))
    np.savez(tmp_path / "in.npz", **inputs(1000.0))
    args = ("check", tmp_path / "mm.onnx", "--inputs", tmp_path / "in.npz")
    result = invoke(*args)
    assert result.exit_code == 0 and result.output.splitlines()[-1] == "PASS", result.output
    fixed = invoke(*args, "--rtol", "1e-4", "--atol", "1e-5")
    assert fixed.exit_code == 1 and fixed.output.splitlines()[-1] == "FAIL", fixed.output


def float16_inside_model():
    """onnxconverter-common's ``keep_io_types``: float32 in, a float16 MatMul, float32 out (a Cast)."""
    weight = onnx.numpy_helper.from_array(np.random.default_rng(5).standard_normal((64, 16)).astype(np.float16), "w")
    nodes = [helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.FLOAT16, name="graph_input_cast0"),
             helper.make_node("MatMul", ["a16", "w"], ["y16"], name="/MatMul"),
             helper.make_node("Cast", ["y16"], ["y32"], to=TensorProto.FLOAT, name="graph_output_cast0"),
             helper.make_node("Identity", ["y32"], ["y"], name="/Identity")]
    graph = helper.make_graph(nodes, "mm16", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_float32_output_cast_from_float16_is_held_to_float16s_tolerance():
    """A float16 model with float32 inputs and outputs (keep_io_types) computes in float16: its
    outputs differ from onnxruntime's by float16 rounding (onnxruntime accumulates in float16,
    relaxpack in float32), which failed float32's tolerance on every such model. A 5% error
    still fails."""
    model = float16_inside_model()
    assert check.output_precisions(model) == {"y": "float16"}
    assert check.output_precisions(matmul_model()) == {}
    feeds = {"a": np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)}
    report = check.check_model(model, inputs=feeds)
    (out,) = report.samples[0].outputs
    assert report.passed, out
    assert out.max_abs > 1e-4 * np.abs(check.onnxruntime_session(model).run(None, feeds)[0]).max(), \
        "the difference is beyond float32's tolerance: the test would pass without the precision"
    assert not check.check_model(model, inputs=feeds, rtol=1e-4, atol=1e-5, strict=True).passed
    want = np.array([10.0, -3.0, 0.5], np.float32)
    for relative, passes in ((2e-3, True), (5e-2, False)):
        got = {"y": want + relative * np.abs(want).max()}
        assert compare_outputs(["y"], got, [want], precisions={"y": "float16"})[0].passed is passes
        assert not compare_outputs(["y"], got, [want])[0].passed
