"""Malformed models: only RelaxpackErrors with clear messages, no hang, no
memory blow-up, no file read outside the model's folder.

The long campaign is ``scripts/model_fuzz_campaign.py --cases 10000``;
here a short one runs in a subprocess under a 4 GiB address-space limit,
plus targeted cases in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from tests.cli_helpers import invoke
from relaxpack.errors import RelaxpackError

from .model_mutations import SENTINEL_BYTES, OpenWatch, clear_message

ROOT = Path(__file__).resolve().parents[2]
CI_CASES = 300

@contextmanager
def time_limit(seconds: float):
    def fail(signum, frame):
        raise TimeoutError(f"no result within {seconds} s")
    old = signal.signal(signal.SIGALRM, fail)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_short_campaign_finds_nothing_new(tmp_path):
    out, summary = tmp_path / "failures", tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "model_fuzz_campaign.py"), "--cases", str(CI_CASES),
                           "--seed", "0", "--out", str(out), "--json", str(summary), "--time-limit", "20"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert summary.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(summary.read_text())
    assert report["cases"] == CI_CASES
    assert not report["new"], f"new failures (see {out}):\n{proc.stdout[-3000:]}"


# ---------------------------------------------------------------- external data
def external_model(folder: Path, location: str) -> Path:
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", location
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [onnx.ValueInfoProto(name="y")], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


ESCAPES = ["../secret.bin", "sub/../../secret.bin", "<absolute>", "link.bin", "outside/secret.bin", "/dev/zero",
           "/etc/passwd"]


@pytest.mark.parametrize("location", ESCAPES)
def test_external_data_outside_the_folder_is_refused_unread(tmp_path, location):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SENTINEL_BYTES)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "sub").mkdir()
    os.symlink(secret, folder / "link.bin")
    os.symlink(tmp_path, folder / "outside")
    path = external_model(folder, str(secret) if location == "<absolute>" else location)
    OpenWatch.start(tmp_path)
    try:
        with pytest.raises(RelaxpackError, match="outside the model's folder"):
            relaxpack.from_onnx(path)
        result = invoke("convert", str(path), "-o", str(folder / "m.rpk"))
    finally:
        opened = OpenWatch.stop()
    assert result.exit_code == 1 and "outside the model's folder" in result.output, result.output
    assert not opened, f"opened {opened}"


def test_external_data_inside_the_folder_is_read(tmp_path):
    folder = tmp_path / "model"
    path = external_model(folder, "weights.bin")
    (folder / "weights.bin").write_bytes(np.full((4, 2), 2, np.float32).tobytes())
    out = relaxpack.runtime.VirtualMachine(relaxpack.build(relaxpack.from_onnx(path))).run(
        {"x": np.ones((1, 4), np.float32)})
    assert np.array_equal(out["y"], np.full((1, 2), 8, np.float32))


@pytest.mark.parametrize("kind", ["fifo", "directory", "missing"])
def test_odd_external_files_inside_the_folder_do_not_hang(tmp_path, kind):
    folder = tmp_path / "model"
    folder.mkdir()
    location = {"fifo": "pipe.bin", "directory": "adir", "missing": "nothere.bin"}[kind]
    if kind == "fifo":
        os.mkfifo(folder / "pipe.bin")
    if kind == "directory":
        (folder / "adir").mkdir()
    path = external_model(folder, location)
    with time_limit(20):
        try:
            relaxpack.build(relaxpack.from_onnx(path))
        except RelaxpackError as err:
            assert clear_message(err) is None, str(err)



# ---------------------------------------------------------------- files and huge dims
@pytest.mark.parametrize("cut", [0, 1, 10, 100, -1])
def test_truncated_files(tmp_path, cut):
    from relaxpack.examples.onnx_models import small_cnn
    data = small_cnn(channels=4).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:cut] if cut >= 0 else data[:-7])
    with time_limit(20):
        try:
            relaxpack.build(relaxpack.from_onnx(path))
        except RelaxpackError as err:
            assert clear_message(err) is None, str(err)
    result = invoke("convert", str(path), "-o", str(tmp_path / "cut.rpk"))
    assert result.exit_code in (0, 1) and (result.exception is None or isinstance(result.exception, SystemExit))


@pytest.mark.parametrize("dim", [2 ** 40, 2 ** 62])
def test_huge_declared_input_dims(tmp_path, dim):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "huge",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])],
                              [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with time_limit(20):
        try:
            exe = relaxpack.build(relaxpack.from_onnx(model))
        except RelaxpackError as err:
            assert clear_message(err) is None, str(err)
            return
    with pytest.raises(RelaxpackError):   # a small input does not fit the declared dim
        relaxpack.runtime.VirtualMachine(exe).run({"x": np.ones((2, 4), np.float32)})


def test_a_negative_declared_input_dim_is_unknown():
    # paddle2onnx writes -1 for an unknown dim; onnxruntime reads any negative dim_value so
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "negative",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-5, 4])],
                              [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    vm = relaxpack.runtime.VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    for rows in (0, 2, 7):
        x = np.linspace(-1, 1, rows * 4, dtype=np.float32).reshape(rows, 4)
        np.testing.assert_array_equal(vm.run({"x": x})["y"], np.maximum(x, 0))
