"""Running the command line in-process: the exit code, what the command
printed (stdout and stderr in one stream, as a terminal shows them, and each
apart) and any exception that escaped it."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import onnx
import pytest

from relaxpack.cli import main
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx


@dataclass
class Result:
    exit_code: int
    output: str     # stdout and stderr interleaved
    stdout: str
    stderr: str
    exception: BaseException | None = None   # what escaped the command line (a bug: user errors are lines)


class _Tee(io.StringIO):
    def __init__(self, both: io.StringIO):
        super().__init__()
        self.both = both

    def write(self, text):
        self.both.write(text)
        return super().write(text)


def invoke(*args) -> Result:
    """``relaxpack ARGS...`` in this process; every argument is turned into a string."""
    both = io.StringIO()
    out, err = _Tee(both), _Tee(both)
    escaped = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except Exception as exc:     # kept for the test to judge, as typer's CliRunner kept it
            code, escaped = 1, exc
    return Result(code, both.getvalue(), out.getvalue(), err.getvalue(), escaped)


def run_in_terminal(*args, timeout: float = 300) -> str:
    """``python -m relaxpack.cli ARGS...`` as a separate process whose stdout and stderr are a
    terminal (a pseudo-terminal); everything it wrote there, control characters included."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "relaxpack.cli", *map(str, args)], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:          # EIO: the process closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        proc.wait(timeout=timeout)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The transformer block and the small CNN as ONNX files, once per test module."""
    folder = tmp_path_factory.mktemp("models")
    paths = {"block": folder / "block.onnx", "cnn": folder / "cnn.onnx"}
    onnx.save(transformer_block_onnx(), str(paths["block"]))
    onnx.save(small_cnn(), str(paths["cnn"]))
    return paths


@pytest.fixture(scope="module")
def archive(models, tmp_path_factory):
    """The transformer block converted with seq=1..64, once per test module."""
    out = tmp_path_factory.mktemp("archives") / "block.rpk"
    result = invoke("convert", models["block"], "-o", out, "--dim", "seq=1..64")
    assert result.exit_code == 0, result.output
    return out
