"""Pickling executables and VMs: by reference to the archive file (no weights in the pickle),
or, for an executable no file holds, as its archive's bytes."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ArchiveError
from relaxpack.runtime import VirtualMachine, load, load_bytes

rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    from relaxpack.examples.onnx_models import transformer_block_onnx
    exe = relaxpack.build(relaxpack.from_onnx(transformer_block_onnx()))
    path = tmp_path_factory.mktemp("pickle") / "block.rpk"
    exe.save(path)
    return exe, path, {"x": rng.standard_normal((2, 7, 32)).astype(np.float32)}


def weight_bytes(exe) -> int:
    return sum(np.asarray(c).nbytes for c in exe.constants)


def test_a_loaded_executable_pickles_as_its_path_and_reopens_the_mapping(block):
    _, path, feeds = block
    exe = load(path)
    data = pickle.dumps(exe)
    assert len(data) < 1000 < weight_bytes(exe), len(data)     # a path and a digest, not the weights
    again = pickle.loads(data)
    assert again.archive["path"] == str(path.resolve())
    assert not again.constants[0].flags.writeable and not again.constants[0].flags.owndata   # mapped again
    np.testing.assert_array_equal(VirtualMachine(again).run(feeds)["y"], VirtualMachine(exe).run(feeds)["y"])


def test_a_relative_path_is_kept_absolute(block, monkeypatch):
    _, path, _ = block
    monkeypatch.chdir(path.parent)
    data = pickle.dumps(load(path.name))
    monkeypatch.chdir("/")
    assert pickle.loads(data).archive["path"] == str(path.resolve())


def test_a_changed_archive_is_refused_when_unpickled(block, tmp_path):
    exe, _, _ = block
    path = tmp_path / "m.rpk"
    exe.save(path)
    data = pickle.dumps(load(path))
    exe.metadata["note"] = "rebuilt"
    try:
        exe.save(path)
    finally:
        del exe.metadata["note"]
    with pytest.raises(ArchiveError, match="changed since this executable was pickled"):
        pickle.loads(data)


def test_an_executable_in_memory_pickles_its_bytes(block):
    exe, path, feeds = block
    for in_memory in (exe, load_bytes(path.read_bytes())):
        data = pickle.dumps(in_memory)
        assert len(data) > weight_bytes(exe)
        again = pickle.loads(data)
        assert "path" not in again.archive
        np.testing.assert_array_equal(VirtualMachine(again).run(feeds)["y"], VirtualMachine(exe).run(feeds)["y"])


def test_a_vm_pickles_as_its_executable(block):
    _, path, feeds = block
    vm = VirtualMachine(load(path))
    want = vm.run(feeds)["y"]
    data = pickle.dumps(vm)
    assert len(data) < 1000
    again = pickle.loads(data)
    assert isinstance(again, VirtualMachine) and again is not vm
    np.testing.assert_array_equal(again.run(feeds)["y"], want)


def test_a_pickle_opens_in_a_process_that_imports_only_the_runtime(block):
    _, path, feeds = block
    vm = VirtualMachine(load(path))
    code = ("import pickle, sys, numpy as np; vm = pickle.loads(sys.stdin.buffer.read()); "
            "x = np.random.default_rng(0).standard_normal((2, 7, 32)).astype(np.float32); "
            "y = vm.run({'x': x})['y']; sys.stdout.buffer.write(y.tobytes()); "
            "assert not any(m.startswith(('onnx', 'relaxpack.ir', 'relaxpack.passes')) for m in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(vm), capture_output=True, check=True)
    x = np.random.default_rng(0).standard_normal((2, 7, 32)).astype(np.float32)
    want = vm.run({"x": x})["y"]
    np.testing.assert_array_equal(np.frombuffer(out.stdout, want.dtype).reshape(want.shape), want)
