"""Converters of DFT, STFT and MelWeightMatrix (converters/signal.py) against
onnxruntime (onnx's reference evaluator where onnxruntime lacks the case),
with constant operands (the static IR ops) and operands fed at run time
(the packed kernels), odd sizes and symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine

from .backend_case import assert_close
from .helpers import i64, one_node, rand, reference


def check(op, feeds, *, more=(), ref="ort", rtol=1e-4, atol=1e-5, **kwargs):
    """helpers.check with an FFT's tolerance (sums of n float32 terms)."""
    model = one_node(op, feeds, **kwargs)
    mod = relaxpack.from_onnx(model)
    vm = VirtualMachine(relaxpack.build(mod))
    for f in (feeds, *more):
        got = vm.run(f)
        for out, want in zip(model.graph.output, reference(model, f, ref)):
            assert_close(got[out.name], want, rtol, atol, out.name)
    return mod


def _ops(mod) -> str:
    return mod.script()


# ---------------------------------------------------------------- DFT


@pytest.mark.parametrize("axis,inverse,onesided,complex_in", [
    (1, 0, 0, False), (2, 0, 0, True), (1, 0, 1, False), (1, 1, 0, True), (2, 1, 0, False), (1, 1, 1, True),
])
def test_dft17_static(axis, inverse, onesided, complex_in):
    x = rand(2, 7, 5, 2 if complex_in else 1)
    attrs = {"axis": axis, "inverse": inverse, "onesided": onesided}
    mod = check("DFT", {"x": x}, attrs=attrs, opset=17, sym={"x": ["b", 7, 5, x.shape[-1]]},
                more=[{"x": rand(3, 7, 5, x.shape[-1], seed=2)}, {"x": rand(0, 7, 5, x.shape[-1])}])
    assert "R.signal.dft" in _ops(mod)


@pytest.mark.parametrize("length", [4, 9])
@pytest.mark.parametrize("onesided", [0, 1])
def test_dft17_constant_length_pads_or_truncates(length, onesided):
    check("DFT", {"x": rand(3, 6, 1)}, consts={"n": np.array(length, np.int64)}, attrs={"onesided": onesided},
          opset=17)


def test_dft17_symbolic_axis_dim():
    mod = check("DFT", {"x": rand(2, 9, 1)}, attrs={"onesided": 1}, opset=17, sym={"x": ["b", "n", 1]},
                more=[{"x": rand(1, 4, 1)}])
    assert "R.signal.dft" in _ops(mod)


def test_dft20_axis_input_constant_and_fed():
    x = rand(2, 5, 6, 2)
    check("DFT", {"x": x}, consts={"axis": i64(1)[0]}, inputs=["x", "", "axis"], opset=20)
    mod = check("DFT", {"x": x, "axis": np.array(-3, np.int64)}, inputs=["x", "", "axis"],
                attrs={"inverse": 1}, opset=20, more=[{"x": x, "axis": np.array(2, np.int64)}])
    assert 'R.call_packed("dyn.dft"' in _ops(mod)


def test_dft20_length_fed_at_run_time_and_default_axis():
    x = rand(2, 5, 1)
    check("DFT", {"x": x, "n": np.array(8, np.int64)}, attrs={"onesided": 1}, opset=20,
          more=[{"x": x, "n": np.array(3, np.int64)}])
    check("DFT", {"x": rand(2, 5, 2, dtype=np.float64)}, opset=20)


def test_dft_float16_computes_in_float32():
    x = rand(2, 6, 1, dtype=np.float16)
    want = np.fft.rfft(x[..., 0].astype(np.float32), axis=1)
    want = np.stack([want.real, want.imag], -1).astype(np.float16)
    check("DFT", {"x": x}, attrs={"onesided": 1}, opset=17, ref=lambda f: [want], rtol=1e-3, atol=1e-3)


def test_dft_rejects_the_complex_axis():
    model = one_node("DFT", {"x": rand(2, 5, 1)}, attrs={"axis": 2}, opset=17)
    with pytest.raises(ShapeError, match="DFT.*axis 2"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- STFT


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_constant_operands(onesided):
    signal = rand(2, 37, 1)
    mod = check("STFT", {"signal": signal}, consts={"step": np.array(5, np.int64), "window": rand(8, seed=3),
                                                   "length": np.array(8, np.int64)},
                inputs=["signal", "step", "window", "length"], attrs={"onesided": onesided},
                sym={"signal": ["b", 37, 1]}, more=[{"signal": rand(1, 37, 1, seed=4)}])
    assert "R.signal.stft" in _ops(mod)


def test_stft_complex_signal_without_window_or_length():
    check("STFT", {"signal": rand(1, 9, 2)}, consts={"step": np.array(2, np.int64)}, attrs={"onesided": 0},
          opset=17, ref="onnx")


def test_stft_of_a_rank_two_signal_as_onnxruntime_reads_it():
    """(batch, length) is a real signal (onnx-asr's mel preprocessors are written so); the spec says rank 3."""
    check("STFT", {"signal": rand(2, 37)}, consts={"step": np.array(5, np.int64), "window": rand(8, seed=3),
                                                   "length": np.array(8, np.int64)},
          inputs=["signal", "step", "window", "length"], sym={"signal": ["b", "n"]},
          more=[{"signal": rand(1, 50, seed=4)}])
    check("STFT", {"signal": rand(2, 40), "step": np.array(6, np.int64), "length": np.array(10, np.int64)},
          inputs=["signal", "step", "", "length"], opset=17)


def test_stft_operands_fed_at_run_time():
    feeds = {"signal": rand(2, 40, 1), "step": np.array(6, np.int64), "length": np.array(10, np.int64)}
    mod = check("STFT", feeds, inputs=["signal", "step", "", "length"], opset=17,
                more=[{**feeds, "step": np.array(3, np.int64), "length": np.array(7, np.int64)}])
    assert 'R.call_packed("dyn.stft"' in _ops(mod)


# ---------------------------------------------------------------- MelWeightMatrix

_MEL = {"mels": np.array(10, np.int64), "n": np.array(64, np.int64), "rate": np.array(16000, np.int64),
        "low": np.array(20.0, np.float32), "high": np.array(7000.0, np.float32)}


def test_mel_weight_matrix_constant_folds():
    mod = check("MelWeightMatrix", {}, consts=_MEL, opset=17, ref="onnx")
    assert "call_packed" not in _ops(mod)


def test_mel_weight_matrix_fed_at_run_time_float64():
    feeds = {**_MEL, "mels": np.array(7, np.int64)}
    check("MelWeightMatrix", feeds, attrs={"output_datatype": 11}, opset=17, ref="onnx",
          more=[{**feeds, "n": np.array(33, np.int64), "low": np.array(0.0, np.float32)}])
