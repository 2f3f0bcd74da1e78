"""Concurrency: one loaded archive, many threads.

The rule: an Executable (a loaded archive) may be shared by threads; a
VirtualMachine may not. Each VM keeps its arena (the intermediates' memory)
and its plans between calls, so two calls on one VM at once write each
other's intermediates: give each thread its own ``VirtualMachine(exe)``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.examples.onnx_models import transformer_block_onnx
from relaxpack.runtime import VirtualMachine, load
from relaxpack.runtime.kernels import KERNELS, Kernel

THREADS, RUNS = 8, 50


@pytest.fixture
def fast_switching():
    """Switch threads often, so interleavings inside a run are likely."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("concurrency") / "block.rpk"
    relaxpack.build(relaxpack.from_onnx(transformer_block_onnx())).save(path)
    return path


def fingerprint(path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), os.stat(path).st_mtime_ns


def inputs_for(thread: int) -> list[dict]:
    rng = np.random.default_rng(1000 + thread)
    shapes = [(int(rng.integers(1, 4)), int(rng.integers(1, 17))) for _ in range(RUNS)]
    return [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)} for b, s in shapes]


def run_threads(target, count=THREADS):
    errors, threads = [], []

    def guarded(i):
        try:
            target(i)
        except BaseException as err:   # reported by the main thread
            errors.append((i, err))
    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not errors, errors


def test_one_vm_per_thread_matches_single_threaded_runs(archive, fast_switching):
    before = fingerprint(archive)
    exe = load(archive)
    feeds = [inputs_for(t) for t in range(THREADS)]
    reference_vm = VirtualMachine(exe)
    expected = [[reference_vm.run(f)["y"].copy() for f in per_thread] for per_thread in feeds]
    results = [[None] * RUNS for _ in range(THREADS)]

    def work(t):
        vm = VirtualMachine(exe)   # the rule: one VM per thread, the executable shared
        for r, f in enumerate(feeds[t]):
            results[t][r] = vm.run(f)["y"]

    run_threads(work)
    for t in range(THREADS):
        for r in range(RUNS):
            np.testing.assert_allclose(results[t][r], expected[t][r], rtol=1e-6, atol=1e-6,
                                       err_msg=f"thread {t} run {r}")
    assert fingerprint(archive) == before, "running changed the archive file"


def test_threads_loading_the_same_archive(archive, fast_switching):
    before = fingerprint(archive)
    x = inputs_for(0)[0]
    expected = VirtualMachine(load(archive)).run(x)["y"]
    outs = [None] * THREADS

    def work(t):
        outs[t] = VirtualMachine(load(archive)).run(x)["y"]

    run_threads(work)
    for out in outs:
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert fingerprint(archive) == before


def _two_step_model() -> onnx.ModelProto:
    """r = Relu(x) lives in the arena while s = Sigmoid(x) runs; y = r + s."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Add", ["r", "s"], ["y"])]
    graph = helper.make_graph(nodes, "two_step", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [onnx.ValueInfoProto(name="y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_a_vm_shared_by_two_threads_answers_right_or_refuses(monkeypatch):
    """Deterministic interleaving: thread A stops inside its run (in the Sigmoid kernel, after Relu wrote
    its intermediate to the arena) while thread B runs a whole inference on the same VM."""
    exe = relaxpack.build(relaxpack.from_onnx(_two_step_model()), opt_level=0)  # unfused: a sigmoid kernel
    name = next(k for k in exe.kernel_names if "sigmoid" in k)
    original = KERNELS[name].fn
    a_inside, b_done = threading.Event(), threading.Event()

    def paused(*args, **kwargs):
        if threading.current_thread().name == "A":
            a_inside.set()
            b_done.wait(timeout=5)   # a VM that serializes calls makes B wait for A: no deadlock
        return original(*args, **kwargs)

    monkeypatch.setitem(KERNELS, name, Kernel(name, paused, KERNELS[name].dps))
    vm = VirtualMachine(exe)
    xa, xb = np.linspace(-1, 1, 64, dtype=np.float32), np.linspace(5, 9, 64, dtype=np.float32)
    want_a = np.maximum(xa, 0) + 1 / (1 + np.exp(-xa))
    got, raised = {}, {}

    def run(label, x):
        try:
            got[label] = vm.run({"x": x})["y"]
        except RelaxpackError as err:
            raised[label] = err
        finally:
            if label == "B":
                b_done.set()

    a = threading.Thread(target=run, args=("A", xa), name="A")
    a.start()
    assert a_inside.wait(timeout=10)
    b = threading.Thread(target=run, args=("B", xb), name="B")
    b.start()
    b.join(timeout=30)
    a.join(timeout=30)
    if raised:   # refusing the second concurrent call is an acceptable answer
        assert any("thread" in str(e) or "concurrent" in str(e) for e in raised.values()), raised
        return
    np.testing.assert_allclose(got["A"], want_a, rtol=1e-6, atol=1e-6)
