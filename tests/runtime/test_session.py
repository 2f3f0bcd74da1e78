"""relaxpack.runtime.InferenceSession against onnxruntime.InferenceSession.

One user script, written once for onnxruntime, runs against both: against
``onnxruntime`` on model.onnx and, with only its import changed, against
``relaxpack.runtime`` on model.rpk. Names, types, shapes, metadata and
values must agree.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relaxpack.errors import ArchiveError, InputError
from relaxpack.runtime import (
    InferenceSession, SessionOptions, get_available_providers, get_blas_threads, register_func,
)
from tests.cli_helpers import invoke

# The user's code, as written for onnxruntime; argv: the module to import as ort, the model, the output file.
USER_SCRIPT = '''
import importlib, json, sys
import numpy as np
ort = importlib.import_module(sys.argv[1])

options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
session = ort.InferenceSession(sys.argv[2], options, providers=["CPUExecutionProvider"])
inputs, outputs = session.get_inputs(), session.get_outputs()
dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
sizes = {"batch": 3, "seq": 5}
rng = np.random.default_rng(0)
feed = {}
for arg in inputs:
    shape = [d if isinstance(d, int) else sizes[d] for d in arg.shape]
    feed[arg.name] = (rng.standard_normal(shape) * 4).astype(dtypes[arg.type])
every = session.run(None, feed)
last_two = session.run([outputs[-1].name, outputs[0].name], feed)
meta = session.get_modelmeta()
np.savez(sys.argv[3], **{o.name: v for o, v in zip(outputs, every)},
         **{"again_" + o: v for o, v in zip([outputs[-1].name, outputs[0].name], last_two)})
print(json.dumps({
    "inputs": [[a.name, a.type, a.shape] for a in inputs],
    "outputs": [[a.name, a.type, a.shape] for a in outputs],
    "meta": [meta.producer_name, meta.graph_name, meta.domain, meta.description, meta.graph_description,
             meta.version, meta.custom_metadata_map],
    "providers": session.get_providers(),
}))
'''


def user_model() -> onnx.ModelProto:
    """Four outputs of three dtypes; symbolic batch and seq, and a dim declared as the expression 2*seq."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    three = numpy_helper.from_array(np.array(3, np.int64), "three")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="project"),
             helper.make_node("Relu", ["xw"], ["y"], name="relu"),
             helper.make_node("Concat", ["x", "x"], ["both"], axis=1, name="concat"),
             helper.make_node("ReduceSum", ["ids"], ["total"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["ids", "three"], ["big"], name="greater")]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "user_graph",
        [value("x", TensorProto.FLOAT, ["batch", "seq", 8]), value("ids", TensorProto.INT64, ["batch", "seq"])],
        [value("y", TensorProto.FLOAT, ["batch", "seq", 4]), value("both", TensorProto.FLOAT, ["batch", "2*seq", 8]),
         value("total", TensorProto.INT64, []), value("big", TensorProto.BOOL, ["batch", "seq"])],
        [w, three], doc_string="the graph's words")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name="acme-exporter", producer_version="2.1", domain="com.acme",
                              model_version=7, doc_string="a model of the user's")
    helper.set_model_props(model, {"author": "acme", "labels": "a,b,c"})
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("session")
    onnx_path, rpk_path = folder / "model.onnx", folder / "model.rpk"
    onnx.save(user_model(), str(onnx_path))
    result = invoke("convert", onnx_path, "-o", rpk_path, "--dim", "batch=1..16", "--dim", "seq=1..64")
    assert result.exit_code == 0, result.output
    return folder, onnx_path, rpk_path


def run_user_script(module: str, model, out) -> dict:
    proc = subprocess.run([sys.executable, "-c", USER_SCRIPT, module, str(model), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_one_user_script_runs_against_onnxruntime_and_relaxpack_alike(files):
    folder, onnx_path, rpk_path = files
    theirs = run_user_script("onnxruntime", onnx_path, folder / "ort.npz")
    ours = run_user_script("relaxpack.runtime", rpk_path, folder / "rpk.npz")
    assert ours == theirs
    assert ours["outputs"][1] == ["both", "tensor(float)", ["batch", "2*seq", 8]]     # an expression dim
    assert ours["meta"] == ["acme-exporter", "user_graph", "com.acme", "a model of the user's", "the graph's words",
                            7, {"author": "acme", "labels": "a,b,c"}]
    with np.load(folder / "ort.npz") as want, np.load(folder / "rpk.npz") as got:
        assert sorted(want.files) == sorted(got.files)
        for name in want.files:
            assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_session_loads_from_bytes_and_names_what_is_wrong(files):
    _, _, rpk_path = files
    session = InferenceSession(rpk_path.read_bytes())
    x, ids = np.ones((2, 3, 8), np.float32), np.arange(6, dtype=np.int64).reshape(2, 3)
    (total,) = session.run(["total"], {"x": x, "ids": ids})
    assert total == 15
    with pytest.raises(InputError, match=r"unknown output\(s\) \['nope'\]; the model's outputs are \['y', 'both'"):
        session.run(["nope"], {"x": x, "ids": ids})
    with pytest.raises(InputError, match=r"missing input\(s\) \['ids'\]"):
        session.run(None, {"x": x})
    with pytest.raises(ArchiveError, match="not a relaxpack archive"):
        InferenceSession(b"\x00" * 100)
    assert get_available_providers() == ["CPUExecutionProvider"] == session.get_providers()


def test_intra_op_threads_are_the_blas_threads_of_the_sessions_calls(files):
    """A registered function called by the model sees the BLAS thread count while the session runs;
    after the run the process has its own count back."""
    import relaxpack
    from relaxpack.runtime.blas import set_blas_threads

    seen = []

    def row_norm(x, *, eps, out):
        seen.append(get_blas_threads())
        np.divide(x, np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps), out=out)

    from relaxpack.examples import custom_op    # registers acme.row_norm; put back below
    register_func("acme.row_norm", row_norm, dps=True, override=True)
    try:
        data = _archive_bytes(relaxpack.build(relaxpack.from_onnx(custom_op.make_model(), dims={"batch": (1, 8)})))
        before = set_blas_threads(2)
        options = SessionOptions()
        options.intra_op_num_threads = 1
        InferenceSession(data, options).run(None, {"x": np.ones((2, 4), np.float32)})
        assert get_blas_threads() == 2
        InferenceSession(data).run(None, {"x": np.ones((2, 4), np.float32)})    # 0: left as it is
        assert seen == [1, 2]
        set_blas_threads(before)
    finally:
        register_func("acme.row_norm", custom_op.row_norm, dps=True, override=True)


def _archive_bytes(exe) -> bytes:
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as folder:
        exe.save(Path(folder) / "m.rpk")
        return (Path(folder) / "m.rpk").read_bytes()


def test_blas_threads_agree_with_threadpoolctl():
    """An independent reading (threadpoolctl, a test dependency) of what set_blas_threads set."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from relaxpack.runtime.blas import blas_threads

    def openblas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]

    before = openblas_threads()
    assert before and get_blas_threads() == before[0]
    with blas_threads(1):
        assert set(openblas_threads()) == {1}
    assert openblas_threads() == before


def test_runs_from_several_threads_at_once_each_get_their_answer(files):
    _, _, rpk_path = files
    session = InferenceSession(str(rpk_path))
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((2, n, 8)).astype(np.float32), "ids": np.ones((2, n), np.int64)}
             for n in range(1, 9)]
    want = [session.run(["both"], f)[0] for f in feeds]
    got = [None] * len(feeds)
    barrier = threading.Barrier(len(feeds))

    def work(i):
        barrier.wait()
        for _ in range(20):
            got[i] = session.run(["both"], feeds[i])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
