"""Loaded archives and their files (issue 20, item 5): ``load(path, mmap=False)``
keeps private copies that nothing done to the file can change; a mapped
archive whose file is rewritten or truncated afterwards is refused at the
next call instead of answering wrong or dying of SIGBUS; replacing the file
by a rename (what ``relaxpack convert`` does) leaves a mapped archive intact."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ArchiveError
from relaxpack.runtime import VirtualMachine, load

rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def mlp():
    from onnx import TensorProto, helper, numpy_helper
    # 400 KiB of weights: above PRIVATE_MAX_BYTES, so that mmap=True maps the file
    w = numpy_helper.from_array(rng.standard_normal((320, 320)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 320])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 320])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return relaxpack.build(relaxpack.from_onnx(model)), {"x": rng.standard_normal((2, 320)).astype(np.float32)}


def scramble_in_place(path, keep: int):
    """Overwrite the file's data after ``keep`` bytes with other bytes, same inode."""
    with open(path, "r+b") as f:
        f.seek(keep)
        rest = f.read()
        f.seek(keep)
        f.write(bytes(255 - b for b in rest))


@pytest.mark.parametrize("params", ["linked", "external"])
def test_a_private_copy_is_immune_to_the_file_changing(mlp, params, tmp_path):
    exe, inputs = mlp
    path = tmp_path / "m.rpk"
    exe.save(path, params=params)
    loaded = load(path, mmap=False)
    assert loaded.archive["mmap"] is False and loaded.source_check is None
    before = VirtualMachine(loaded).run(inputs)["y"]
    data_file = path if params == "linked" else next(tmp_path.glob("m.rpk.*params"))
    scramble_in_place(data_file, 64)
    os.truncate(data_file, 100)
    np.testing.assert_array_equal(VirtualMachine(loaded).run(inputs)["y"], before)


@pytest.mark.parametrize("params", ["linked", "external"])
def test_a_mapped_archive_rewritten_in_place_is_refused_at_the_next_call(mlp, params, tmp_path):
    exe, inputs = mlp
    path = tmp_path / "m.rpk"
    exe.save(path, params=params)
    loaded = load(path)
    vm = VirtualMachine(loaded)
    vm.run(inputs)
    scramble_in_place(path if params == "linked" else next(tmp_path.glob("m.rpk.*params")), 64)
    with pytest.raises(ArchiveError, match="the archive file changed after it was loaded"):
        vm.run(inputs)


def test_a_small_archive_is_read_privately_even_when_mapping_is_asked_for(mlp, tmp_path, monkeypatch):
    """Up to PRIVATE_MAX_BYTES the file is read (no fstat per call); one byte larger, mapped."""
    from relaxpack.runtime import archive
    exe, inputs = mlp
    path = tmp_path / "m.rpk"
    exe.save(path)
    size = os.path.getsize(path)
    monkeypatch.setattr(archive, "PRIVATE_MAX_BYTES", size - 1)
    mapped = load(path)
    assert mapped.archive["mmap"] is True and mapped.source_check is not None
    monkeypatch.setattr(archive, "PRIVATE_MAX_BYTES", size)
    private = load(path)
    assert private.archive["mmap"] is False and private.source_check is None
    before = VirtualMachine(private).run(inputs)["y"]
    scramble_in_place(path, 64)
    np.testing.assert_array_equal(VirtualMachine(private).run(inputs)["y"], before)
    with pytest.raises(ArchiveError, match="the archive file changed after it was loaded"):
        VirtualMachine(mapped).run(inputs)


def test_a_mapped_archive_survives_the_file_being_replaced_by_a_rename(mlp, tmp_path):
    exe, inputs = mlp
    path = tmp_path / "m.rpk"
    exe.save(path)
    loaded = load(path)
    before = VirtualMachine(loaded).run(inputs)["y"]
    exe.save(path)                        # written to a temporary file, renamed over the old one
    np.testing.assert_array_equal(VirtualMachine(loaded).run(inputs)["y"], before)


def test_a_truncated_mapped_archive_gives_an_error_not_sigbus(mlp, tmp_path):
    exe, inputs = mlp
    exe.save(tmp_path / "m.rpk")
    np.save(tmp_path / "x.npy", inputs["x"])
    script = textwrap.dedent(f"""
        import os, numpy as np
        from relaxpack.errors import ArchiveError
        from relaxpack.runtime import VirtualMachine, load
        vm = VirtualMachine(load({str(tmp_path / 'm.rpk')!r}))
        x = np.load({str(tmp_path / 'x.npy')!r})
        vm.run({{"x": x}})
        os.truncate({str(tmp_path / 'm.rpk')!r}, 200)
        try:
            vm.run({{"x": x}})
        except ArchiveError as err:
            print("refused:", err)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "refused:" in done.stdout and "changed after it was loaded" in done.stdout


def test_relaxpack_run_and_bench_read_private_copies_with_no_mmap(mlp, tmp_path):
    from tests.cli_helpers import invoke
    exe, inputs = mlp
    exe.save(tmp_path / "m.rpk")
    np.save(tmp_path / "x.npy", inputs["x"])
    mapped = invoke("run", tmp_path / "m.rpk", "--input", f"x={tmp_path / 'x.npy'}")
    private = invoke("run", tmp_path / "m.rpk", "--input", f"x={tmp_path / 'x.npy'}", "--no-mmap")
    assert mapped.exit_code == private.exit_code == 0, private.output
    assert mapped.output == private.output
    bench = invoke("bench", tmp_path / "m.rpk", "-n", "2", "--no-mmap")
    assert bench.exit_code == 0, bench.output
