"""String tensors in the runtime: string constants round-trip through the
archive as UTF-8 text in the manifest (never pickle) and a damaged entry is
rejected on load; string tensors never live in byte arenas."""

import numpy as np
import pytest

from relaxpack.errors import ArchiveError
from relaxpack.runtime import Executable, FuncEntry, VirtualMachine, load
from relaxpack.runtime.arena import arena_tensor
from relaxpack.runtime.bytecode import Call, Ret, VMFunction

from .test_archive import reseal


def strings(*items, shape=None):
    a = np.empty(len(items), dtype=object)
    a[:] = list(items)
    return a.reshape(shape or (len(items),))


def returns_constants(*consts) -> Executable:
    fn = VMFunction("main", (), 1, (Call(0, 0, tuple(("c", i) for i in range(len(consts)))), Ret(0)),
                    outputs=("consts",))
    return Executable({"main": fn}, [FuncEntry("builtin", "vm.builtin.make_tuple")], list(consts),
                      {"stage": "lower"})


def test_string_constants_round_trip(tmp_path):
    text = strings("a", "", "\u00e9\u4e2d", "x" * 1000, shape=(2, 2))
    empty = strings()
    returns_constants(text, empty, np.arange(3.0)).save(tmp_path / "s.rpk")
    loaded = load(tmp_path / "s.rpk")
    got, got_empty, numbers = VirtualMachine(loaded).run({})["consts"]
    assert got.dtype == object and got.shape == (2, 2) and got.tolist() == text.tolist()
    assert all(type(s) is str for s in got.flat)
    assert not loaded.constants[0].flags.writeable and got.flags.writeable   # the output is the caller's copy
    assert got_empty.shape == (0,) and got_empty.dtype == object
    np.testing.assert_array_equal(numbers, np.arange(3.0))


def test_string_constants_are_manifest_text_not_pickle(tmp_path):
    returns_constants(strings("hello", "w\u00f6rld")).save(tmp_path / "s.rpk")
    data = (tmp_path / "s.rpk").read_bytes()
    assert b"pickle" not in data and b"\x80\x04" not in data
    assert '"hello"' in data.decode("utf-8", "replace")


@pytest.mark.parametrize("edit,match", [
    (lambda c: c.update(strings=["a"]), r"has 1 entries for shape \[2\]"),
    (lambda c: c.update(strings=["a", 3]), r"strings\[1\]: expected a string"),
    (lambda c: c.update(encoding="latin-1"), "unknown string encoding"),
    (lambda c: c.update(encoding="base64", strings=["@@", "YQ=="]), "not valid base64"),
    (lambda c: c.update(shape=[-1]), r"shape\[0\]"),
    (lambda c: c.update(offset=0), "offset"),
])
def test_damaged_string_constants_are_rejected(tmp_path, edit, match):
    returns_constants(strings("a", "b")).save(tmp_path / "s.rpk")
    reseal(tmp_path / "s.rpk", lambda m: edit(m["constants"][0]))
    with pytest.raises(ArchiveError, match=match):
        VirtualMachine(load(tmp_path / "s.rpk")).run({})


def test_string_tensors_cannot_be_arena_views():
    with pytest.raises(ArchiveError, match="cannot live in a byte arena"):
        arena_tensor(0, "string", None, (2,))
