"""An archive and its external params file are replaced as a pair (issue 20, item 2).

The params file is named by its content's sha256, written before the archive,
and the old archive's params file is removed only once the new archive is in
place: a full disk or an interruption leaves the old pair (or the new one),
both loadable; an unrelated ``NAME.rpk.params`` is never overwritten.
"""

import errno
import hashlib
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import relaxpack
from relaxpack.runtime import VirtualMachine, load

HEADER = struct.Struct("<8sIIQ32sQ")
X = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def two():
    """Two executables of one signature with different weights."""
    from relaxpack.examples.onnx_models import small_cnn
    return [relaxpack.build(relaxpack.from_onnx(small_cnn(seed=s)), opt_level=0) for s in (0, 1)]


def manifest(path) -> dict:
    data = Path(path).read_bytes()
    length = HEADER.unpack(data[:64])[3]
    return json.loads(data[64:64 + length])


def run(path) -> np.ndarray:
    return VirtualMachine(load(path)).run({"input": X})["logits"]


def expected(exe) -> np.ndarray:
    return VirtualMachine(exe).run({"input": X})["logits"]


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_params_file_is_named_by_its_content(two, tmp_path):
    two[0].save(tmp_path / "m.rpk", params="external")
    data = manifest(tmp_path / "m.rpk")["data"]
    side = tmp_path / data["file"]
    assert data["file"] == f"m.rpk.{data['sha256'][:16]}.params"
    assert hashlib.sha256(side.read_bytes()).hexdigest() == data["sha256"]
    assert files(tmp_path) == sorted(["m.rpk", data["file"]])


def test_reconverting_replaces_the_pair_and_removes_the_old_params(two, tmp_path):
    two[0].save(tmp_path / "m.rpk", params="external")
    old = manifest(tmp_path / "m.rpk")["data"]["file"]
    two[1].save(tmp_path / "m.rpk", params="external")
    new = manifest(tmp_path / "m.rpk")["data"]["file"]
    assert new != old and files(tmp_path) == sorted(["m.rpk", new])
    np.testing.assert_array_equal(run(tmp_path / "m.rpk"), expected(two[1]))
    two[1].save(tmp_path / "m.rpk", params="external")        # the same weights again: one file
    assert files(tmp_path) == sorted(["m.rpk", new])
    two[1].save(tmp_path / "m.rpk")                           # linked now: no params file left
    assert files(tmp_path) == ["m.rpk"]
    np.testing.assert_array_equal(run(tmp_path / "m.rpk"), expected(two[1]))


@pytest.mark.parametrize("fail", ["archive rename", "interrupt after the params"])
def test_a_failure_between_the_two_files_leaves_the_old_pair_loadable(two, tmp_path, monkeypatch, fail):
    archive = tmp_path / "m.rpk"
    two[0].save(archive, params="external")
    before = files(tmp_path)
    real_replace = os.replace

    def replace(src, dst):
        if os.fspath(dst) == os.fspath(archive):
            if fail == "archive rename":
                raise OSError(errno.ENOSPC, "No space left on device")
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises((relaxpack.RelaxpackError, KeyboardInterrupt)):
        two[1].save(archive, params="external")
    monkeypatch.undo()
    np.testing.assert_array_equal(run(archive), expected(two[0]))
    # at most the new (orphaned, harmless) params file was added; nothing the old archive uses went away
    assert set(before) <= set(files(tmp_path))
    assert not [name for name in files(tmp_path) if name.endswith(".tmp")]


def test_an_unrelated_params_named_file_is_not_overwritten(two, tmp_path):
    unrelated = tmp_path / "m.rpk.params"
    unrelated.write_bytes(b"the user's own file that happens to have this name")
    two[0].save(tmp_path / "m.rpk", params="external")
    two[1].save(tmp_path / "m.rpk", params="external")
    two[1].save(tmp_path / "m.rpk")
    assert unrelated.read_bytes() == b"the user's own file that happens to have this name"


def old_style(path: Path) -> Path:
    """Turn an external archive into the pre-pairing layout: params in ``<name>.params``."""
    data = path.read_bytes()
    magic, version, flags, length, _, offset = HEADER.unpack(data[:64])
    m = json.loads(data[64:64 + length])
    (path.parent / m["data"]["file"]).rename(path.parent / f"{path.name}.params")
    m["data"]["file"] = f"{path.name}.params"
    raw = json.dumps(m, sort_keys=True, separators=(",", ":")).encode()
    new_offset = -(-(64 + len(raw)) // 64) * 64
    path.write_bytes(HEADER.pack(magic, version, flags, len(raw), hashlib.sha256(raw).digest(), new_offset)
                     + raw + bytes(new_offset - 64 - len(raw)))
    return path.parent / f"{path.name}.params"


def test_old_style_archives_load_and_their_params_go_when_replaced(two, tmp_path):
    two[0].save(tmp_path / "m.rpk", params="external")
    legacy = old_style(tmp_path / "m.rpk")
    np.testing.assert_array_equal(run(tmp_path / "m.rpk"), expected(two[0]))
    two[1].save(tmp_path / "m.rpk", params="external")
    assert not legacy.exists()
    assert files(tmp_path) == sorted(["m.rpk", manifest(tmp_path / "m.rpk")["data"]["file"]])


def test_a_params_file_an_old_archive_names_is_removed_only_when_it_is_that_archives_own(two, tmp_path):
    two[0].save(tmp_path / "m.rpk", params="external")
    data = manifest(tmp_path / "m.rpk")["data"]
    # a (hand-edited) archive naming some other file as its params: replacing it must not delete that file
    precious = tmp_path / "precious.params"
    os.rename(tmp_path / data["file"], precious)
    raw = (tmp_path / "m.rpk").read_bytes()
    length = HEADER.unpack(raw[:64])[3]
    m = json.loads(raw[64:64 + length])
    m["data"]["file"] = "precious.params"
    new = json.dumps(m, sort_keys=True, separators=(",", ":")).encode()
    offset = -(-(64 + len(new)) // 64) * 64
    head = HEADER.unpack(raw[:64])
    (tmp_path / "m.rpk").write_bytes(HEADER.pack(head[0], head[1], head[2], len(new), hashlib.sha256(new).digest(),
                                                 offset) + new + bytes(offset - 64 - len(new)))
    two[1].save(tmp_path / "m.rpk", params="external")
    assert precious.exists()
