"""Inputs from .npy/.npz files: headers checked before data is read (issue 20, item 14).

A 144-byte .npy claiming 2**40 elements used to end in a 4 TiB MemoryError
traceback, and a 4 MB .npz was inflated to gigabytes before its shape was
checked against the model."""

import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import InputError
from relaxpack.runtime.input_files import input_byte_limit, read_inputs, read_npy, read_npz, signature_check
from tests.robustness.input_bombs import npy_claiming, zip_bomb

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exe():
    from relaxpack.examples.onnx_models import transformer_block_onnx
    return relaxpack.build(relaxpack.from_onnx(transformer_block_onnx(), dims={"seq": (1, 64)}), opt_level=0)


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    np.arange(5, dtype=">i4"), np.array(True), np.zeros((0, 3), np.int64), np.array(["ab", "c"]),
])
def test_plain_arrays_read_back_as_numpy_writes_them(tmp_path, array):
    np.save(tmp_path / "a.npy", array)
    got = read_npy(tmp_path / "a.npy", "a")
    np.testing.assert_array_equal(got, array)
    assert got.dtype == array.dtype and got.shape == array.shape and got.flags.writeable
    np.savez_compressed(tmp_path / "b.npz", a=array, b=array[..., None] if array.ndim else array)
    both = read_npz(tmp_path / "b.npz")
    assert list(both) == ["a", "b"]
    np.testing.assert_array_equal(both["a"], array)


def test_a_header_claiming_2_to_the_40_elements_is_refused_from_the_header(tmp_path):
    (tmp_path / "big.npy").write_bytes(npy_claiming((1 << 40,)))
    assert (tmp_path / "big.npy").stat().st_size < 200
    with pytest.raises(InputError, match=r"big\.npy: the header says 4398046511104 data bytes .* the file holds 0"):
        read_npy(tmp_path / "big.npy", "x")


def test_a_zip_bomb_that_does_not_fit_the_model_is_refused_before_inflating(exe, tmp_path):
    (tmp_path / "wide.npz").write_bytes(zip_bomb({"x": ((65536, 64, 33), "<f4")}))   # 553 MB of zeros
    (tmp_path / "long.npz").write_bytes(zip_bomb({"x": ((4096, 1024, 32), "<f4")}))
    (tmp_path / "f64.npz").write_bytes(zip_bomb({"x": ((4096, 64, 32), "<f8")}))
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"input 'x' has shape \(65536, 64, 33\), expected 32 at axis 2"):
            read_npz(tmp_path / "wide.npz", signature_check(exe), limit=1 << 40)
        with pytest.raises(InputError, match=r"dim seq = 1024 at axis 1 is outside its range 1..64"):
            read_npz(tmp_path / "long.npz", signature_check(exe), limit=1 << 40)
        with pytest.raises(InputError, match=r"input 'x' has dtype float64, expected float32"):
            read_npz(tmp_path / "f64.npz", signature_check(exe))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20   # nothing inflated: the headers alone were read


def test_a_zip_bomb_that_fits_the_model_is_bounded_by_what_the_process_can_hold(exe, tmp_path):
    (tmp_path / "bomb.npz").write_bytes(zip_bomb({"x": ((16384, 64, 32), "<f4")}))   # 134 MB of zeros
    with pytest.raises(InputError, match=r"takes 134217728 bytes, more than the 1000000 inputs may take here"):
        read_npz(tmp_path / "bomb.npz", signature_check(exe), limit=1_000_000)
    assert input_byte_limit() > 1 << 20


def test_a_zip_entry_whose_stated_size_disagrees_with_its_header_is_refused(tmp_path):
    (tmp_path / "lie.npz").write_bytes(zip_bomb({"x": ((1024, 1024), "<f4")}, declared={"x": 1 << 20}))
    with pytest.raises(InputError, match=r"array 'x': the header says 4194304 data bytes"):
        read_npz(tmp_path / "lie.npz")


@pytest.mark.parametrize("content, message", [
    (b"", "not a valid .npy array"),
    (b"\x93NUMPY\x01\x00" + b"\xff" * 40, "not a valid .npy array"),
    (npy_claiming((3,), "|O"), r"dtype object is not read \(object arrays would need pickle\)"),
    (npy_claiming((2,), "<f4", b"\x00" * 5), "the header says 8 data bytes .* the file holds 5"),
    (npy_claiming((1 << 50, 1 << 10)), "has 1152921504606846976 elements, more than any input can"),
])
def test_damaged_npy_files_are_one_line_input_errors(tmp_path, content, message):
    (tmp_path / "x.npy").write_bytes(content)
    with pytest.raises(InputError, match=message) as info:
        read_npy(tmp_path / "x.npy", "x")
    assert "\n" not in str(info.value)


def test_npy_and_npz_swapped_say_which_option_takes_them(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(3))
    np.savez(tmp_path / "in.npz", x=np.zeros(3))
    with pytest.raises(InputError, match=r"is one .npy array, not an .npz archive .*--input NAME=x\.npy"):
        read_npz(tmp_path / "x.npy")
    with pytest.raises(InputError, match=r"is an .npz archive of arrays, not one .npy array"):
        read_npy(tmp_path / "in.npz", "x")
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InputError, match=r"cannot read .*junk\.npz as .npz"):
        read_npz(tmp_path / "junk.npz")


def test_unknown_names_and_odd_members_are_refused(exe, tmp_path):
    np.savez(tmp_path / "in.npz", y=np.zeros((1, 2, 32), np.float32))
    with pytest.raises(InputError, match=r"unknown input\(s\) \['y'\]; the model's inputs are \['x'\]"):
        read_inputs(npz=tmp_path / "in.npz", expect=signature_check(exe))
    import zipfile
    with zipfile.ZipFile(tmp_path / "odd.npz", "w") as z:
        z.writestr("x.txt", "hello")
    with pytest.raises(InputError, match=r"member 'x.txt' is not an .npy array"):
        read_npz(tmp_path / "odd.npz")


BOMB_RUN = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
from relaxpack.cli import main
sys.argv = ["relaxpack", "run", sys.argv[1], "--inputs", sys.argv[2]]
sys.exit(main(sys.argv[1:]))
"""


def test_run_with_a_zip_bomb_under_a_memory_limit_is_one_line(tmp_path):
    from relaxpack.examples.onnx_models import transformer_block_onnx
    exe = relaxpack.build(relaxpack.from_onnx(transformer_block_onnx()), opt_level=0)   # batch, seq unbounded
    exe.save(tmp_path / "m.rpk")
    (tmp_path / "bomb.npz").write_bytes(zip_bomb({"x": ((30000, 1024, 32), "<f4")}))   # 3.9 GB inflated
    assert (tmp_path / "bomb.npz").stat().st_size < 5 << 20
    out = subprocess.run([sys.executable, "-c", BOMB_RUN, str(tmp_path / "m.rpk"), str(tmp_path / "bomb.npz")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 1, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "3932160000 bytes" in lines[0], out.stderr[-2000:]
