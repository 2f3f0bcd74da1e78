"""The command line against careless and hostile input (issue 20): nothing the
user saved is lost, every mistake is one ``error:`` line and exit 1, no
option is silently ignored, nothing from a file reaches the terminal raw."""

import os
import stat

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from relaxpack.cli import app
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx

runner = CliRunner()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    paths = {"block": folder / "block.onnx", "cnn": folder / "cnn.onnx"}
    onnx.save(transformer_block_onnx(), str(paths["block"]))
    onnx.save(small_cnn(), str(paths["cnn"]))
    return paths


@pytest.fixture(scope="module")
def archive(models, tmp_path_factory):
    out = tmp_path_factory.mktemp("archives") / "block.rpk"
    result = runner.invoke(app, ["convert", str(models["block"]), "-o", str(out), "--dim", "seq=1..64"])
    assert result.exit_code == 0, result.output
    return out


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_error_line(result, pattern: str | None = None) -> str:
    """The single ``error:`` line of a failed command (exit 1, no traceback)."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    if pattern is not None:
        import re
        assert re.search(pattern, errors[0]), errors[0]
    return errors[0]


# ---------------------------------------------------------------- item 1: outputs never replace the user's files
def test_convert_refuses_to_write_over_its_own_model(models, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(models["cnn"].read_bytes())
    os.link(model, tmp_path / "hard.rpk")
    (tmp_path / "soft.rpk").symlink_to(model)
    for out in (model, tmp_path / "hard.rpk", tmp_path / "soft.rpk"):
        one_error_line(invoke("convert", model, "-o", out), r"refusing to write .*(the input|symbolic link)")
    assert model.read_bytes() == models["cnn"].read_bytes()
    assert (tmp_path / "soft.rpk").is_symlink()


def test_convert_refuses_a_fifo_or_a_directory_as_output(models, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    one_error_line(invoke("convert", models["cnn"], "-o", tmp_path / "fifo"), "it is a FIFO")
    one_error_line(invoke("convert", models["cnn"], "-o", tmp_path / "folder"), "it is a directory")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode) and (tmp_path / "folder").is_dir()


def test_an_archive_given_as_the_model_is_not_replaced_by_its_default_output(archive, tmp_path):
    copy = tmp_path / "copy.rpk"
    copy.write_bytes(archive.read_bytes())
    one_error_line(invoke("convert", copy))           # default output: copy.rpk itself
    assert copy.read_bytes() == archive.read_bytes()


def test_run_and_inspect_refuse_outputs_that_are_their_inputs(archive, tmp_path):
    x = np.zeros((1, 3, 32), np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "in.npz", x=x)
    before = archive.read_bytes()
    one_error_line(invoke("run", archive, "--input", f"x={tmp_path / 'x.npy'}", "--output", archive), "the input")
    one_error_line(invoke("run", archive, "--input", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "x.npy"),
                   "the input")
    one_error_line(invoke("run", archive, "--inputs", tmp_path / "in.npz", "--output", tmp_path / "in.npz"),
                   "the input")
    one_error_line(invoke("inspect", archive, "--plan", "--plot", archive), "the input")
    assert archive.read_bytes() == before
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), x)


def test_run_writes_exactly_the_output_it_names(archive, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32), np.float32))
    result = invoke("run", archive, "--input", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'out'}" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "x.npy"]
    with np.load(tmp_path / "out") as data:
        assert data["y"].shape == (1, 3, 32)
