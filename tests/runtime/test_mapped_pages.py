"""Pages of a mapped constant given back once a private copy replaces it (runtime/mapped_pages.py).

The contract: :func:`release` drops only whole pages inside a read-only file mapping's view and
nothing else; the view reads the same bytes afterwards (they come back from the page cache); and a
bound weight packed into panels gives its mapped pages back, with the same results run after run,
also where a later call reads the weight as it is.
"""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

import relaxpack
from relaxpack.runtime import VirtualMachine, load, mapped_pages
from relaxpack.runtime.kernels import gemm_panels

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux") or mapped_pages._DONTNEED is None,
                                reason="madvise and /proc/self/status RssFile are Linux's")


def _rss_file_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    pytest.skip("no RssFile in /proc/self/status")


@pytest.fixture
def mapped_file(tmp_path):
    """A read-only mapping of a 4 MiB file of known float32 values (plus a short head)."""
    values = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    path = tmp_path / "values.bin"
    path.write_bytes(b"head" + values.tobytes())
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    yield mapping, values
    mapping.close()


@linux_only
def test_release_drops_the_whole_pages_of_a_mapped_view_and_keeps_its_values(mapped_file):
    mapping, values = mapped_file
    view = np.frombuffer(mapping, np.float32, values.size, 4).reshape(1024, 1024)
    assert float(view.sum(dtype=np.float64)) == pytest.approx(float(values.sum(dtype=np.float64)))  # resident
    before = _rss_file_kib()
    released = mapped_pages.release(view)
    page = mmap.PAGESIZE
    assert released == (4 + view.nbytes) // page * page - page      # inside the view: not its first page
    assert before - _rss_file_kib() >= released // 1024 - 64
    assert np.array_equal(view.reshape(-1), values)                 # read again from the page cache


def test_release_leaves_private_writable_small_and_strided_arrays(mapped_file):
    mapping, values = mapped_file
    view = np.frombuffer(mapping, np.float32, values.size, 4).reshape(1024, 1024)
    private = np.array(view)
    private.flags.writeable = False
    assert mapped_pages.release(values) == 0                       # writable, owns its memory
    assert mapped_pages.release(private) == 0                      # read-only, but not mapped
    assert mapped_pages.release(view[:, :512]) == 0                # not contiguous
    assert mapped_pages.release(view[:1, :100]) == 0               # less than a page
    assert mapped_pages.release(np.frombuffer(b"\0" * 65536, np.uint8)) == 0   # bytes, not a mapping


@pytest.fixture
def matmul_archive(tmp_path):
    """An archive of ``x @ w`` by a 768 x 768 float32 weight (2.25 MiB: mapped when loaded)."""
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(1).standard_normal((768, 768)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 768])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 768])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = tmp_path / "mm.rpk"
    relaxpack.build(relaxpack.from_onnx(model)).save(str(path))
    return str(path), w


def test_panels_give_back_the_mapped_weight_with_the_same_results(matmul_archive, monkeypatch):
    monkeypatch.setattr(gemm_panels, "available", lambda: True)
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: 1)
    released = []
    real = gemm_panels.release
    monkeypatch.setattr(gemm_panels, "release", lambda rhs: released.append(real(rhs)) or released[-1])
    path, w = matmul_archive
    exe = load(path)
    assert exe.archive["mmap"]
    vm = VirtualMachine(exe)
    rng = np.random.default_rng(2)
    few, many = (rng.standard_normal((n, 768)).astype(np.float32) for n in (6, 300))
    first = vm.run({"x": few})["y"]
    assert len(released) == 1 and (released[0] > 0 or mapped_pages._DONTNEED is None)
    assert np.array_equal(vm.run({"x": few})["y"], first)          # the panels, call after call
    np.testing.assert_allclose(first, few.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(gemm_panels, "available", lambda: False)   # one GEMM reads the weight again
    np.testing.assert_allclose(vm.run({"x": many})["y"], many.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
    assert len(released) == 1                                       # packed once
