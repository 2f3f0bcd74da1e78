"""Writing outputs never loses a user's file (issue 20, item 1): the destination
is never an input (also through links) nor anything but a regular file, and
the bytes go through a temporary file and a rename."""

import os
import stat

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import OutputError
from relaxpack.runtime import load
from relaxpack.runtime.safe_write import check_destination, write_file


@pytest.fixture(scope="module")
def exe():
    from relaxpack.examples.onnx_models import small_cnn
    return relaxpack.build(relaxpack.from_onnx(small_cnn()), opt_level=0)


def test_a_new_or_regular_destination_is_written(tmp_path):
    write_file(tmp_path / "new.bin", [b"ab", b"c"])
    assert (tmp_path / "new.bin").read_bytes() == b"abc"
    write_file(tmp_path / "new.bin", [b"d"])
    assert (tmp_path / "new.bin").read_bytes() == b"d"
    assert [p.name for p in tmp_path.iterdir()] == ["new.bin"]   # no temporary file left


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "directory", "fifo"])
def test_anything_but_a_regular_file_is_refused_and_left_as_it_was(exe, tmp_path, kind):
    target = tmp_path / "target.bin"
    target.write_bytes(b"precious")
    dest = tmp_path / "out.rpk"
    if kind == "symlink":
        dest.symlink_to(target)
    elif kind == "dangling symlink":
        dest.symlink_to(tmp_path / "nowhere")
    elif kind == "directory":
        dest.mkdir()
    else:
        os.mkfifo(dest)
    before = os.lstat(dest)
    with pytest.raises(OutputError, match=r"refusing to write .*out\.rpk: it is a (symbolic link|directory|FIFO)"):
        exe.save(dest)
    after = os.lstat(dest)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["target.bin", "out.rpk"])


def test_devices_are_refused_without_touching_them():
    # only checked, never written: a failing test must not be able to replace /dev/null
    with pytest.raises(OutputError, match="it is a character device"):
        check_destination("/dev/null")


def test_an_input_is_refused_also_through_a_hard_link(exe, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"the user's model")
    os.link(model, tmp_path / "alias.rpk")
    for dest in (model, tmp_path / "alias.rpk", tmp_path / "." / "m.onnx"):
        with pytest.raises(OutputError, match=r"it is the input .*m\.onnx"):
            exe.save(dest, sources=[model])
    assert model.read_bytes() == b"the user's model"


def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"old")

    def chunks():
        yield b"half of the new"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_file(dest, chunks())
    assert dest.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_failed_rename_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch):
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"old")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OutputError, match=r"^cannot write .*out\.bin: No space left on device$"):
        write_file(dest, [b"new"])
    assert dest.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_permissions_new_files_follow_the_umask_and_replaced_ones_keep_theirs(tmp_path):
    old = os.umask(0o027)
    try:
        write_file(tmp_path / "a", [b"x"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o640
    os.chmod(tmp_path / "a", 0o604)
    write_file(tmp_path / "a", [b"y"])
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o604


def test_a_saved_archive_still_loads_and_runs(exe, tmp_path):
    exe.save(tmp_path / "m.rpk")
    x = np.zeros((1, 3, 32, 32), np.float32)
    from relaxpack.runtime import VirtualMachine
    np.testing.assert_array_equal(VirtualMachine(load(tmp_path / "m.rpk")).run({"input": x})["logits"],
                                  VirtualMachine(exe).run({"input": x})["logits"])
