"""A custom-domain op end to end, across processes, and the README's example.

The archive is built here; fresh Python processes load it with and without
registering the function, as a deployment would.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import relaxpack
from relaxpack.examples import custom_op

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

DEPLOY = textwrap.dedent("""
    import sys
    import numpy as np
    from relaxpack.runtime import VirtualMachine, load, register_func

    if sys.argv[3] == "register":
        @register_func("acme.row_norm", dps=True)
        def row_norm(x, *, eps, out):
            np.divide(x, np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps), out=out)

    vm = VirtualMachine(load(sys.argv[1]))
    np.save(sys.argv[2], vm.run({"x": np.load(sys.argv[2])})["y"])
    assert "onnx" not in sys.modules, "the deploying process needs numpy and relaxpack.runtime only"
""")


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("custom") / "row_norm.rpk"
    mod = relaxpack.from_onnx(custom_op.make_model(), dims={"batch": (1, 16)})
    assert 'R.call_dps_packed("acme.row_norm"' in mod.script()
    relaxpack.build(mod).save(path)
    assert b"def row_norm" not in path.read_bytes()   # a name, never code
    return path


def _deploy(archive: Path, x: np.ndarray, mode: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    data = tmp_path / "x.npy"
    np.save(data, x)
    proc = subprocess.run([sys.executable, "-c", DEPLOY, str(archive), str(data), mode],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    return proc, data


def _reference(x: np.ndarray) -> np.ndarray:
    from onnx import numpy_helper
    w = numpy_helper.to_array(custom_op.make_model().graph.initializer[0])
    h = x @ w
    return h / np.sqrt((h * h).sum(-1, keepdims=True) + 1e-6)


@pytest.mark.parametrize("batch", [1, 5])
def test_a_process_that_registers_the_function_runs_the_archive(archive, tmp_path, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    proc, out = _deploy(archive, x, "register", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(out), _reference(x), rtol=1e-5, atol=1e-6)


def test_a_process_without_the_registration_gets_a_clear_error(archive, tmp_path):
    proc, _ = _deploy(archive, np.ones((2, 4), np.float32), "none", tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("relaxpack.errors.MissingFunctionError: ")
    assert "not registered in this process: ['acme.row_norm']" in last
    assert "register_func('acme.row_norm', fn, dps=True)" in last


def test_the_cli_reports_the_missing_function_on_one_line(archive, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    proc = subprocess.run([sys.executable, "-m", "relaxpack.cli", "run", str(archive), "--input",
                           f"x={tmp_path / 'x.npy'}"], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "acme.row_norm" in proc.stderr
    inspect = subprocess.run([sys.executable, "-m", "relaxpack.cli", "inspect", str(archive)],
                             capture_output=True, text=True, env=ENV, timeout=300)
    assert inspect.returncode == 0, inspect.stderr
    assert "functions    acme.row_norm" in inspect.stdout


# ---------------------------------------------------------------- README
def test_the_readme_shows_the_example_file_verbatim():
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"<!-- relaxpack/examples/custom_op.py -->\n```python\n(.*?)```", readme, re.S)
    assert blocks == [(REPO / "relaxpack/examples/custom_op.py").read_text()]


def test_the_readme_example_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "relaxpack.examples.custom_op", str(tmp_path / "m.rpk")],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "custom op ok: (3, 4)"
    assert (tmp_path / "m.onnx").is_file()


def test_the_example_is_a_plugin_for_the_command_line(tmp_path):
    """As the example's docstring and the README say: the module registers both sides."""
    example = subprocess.run([sys.executable, "-m", "relaxpack.examples.custom_op", "row_norm.rpk"],
                             capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert example.returncode == 0, example.stderr
    suggested = example.stdout.splitlines()[-1].removeprefix("next: ").split()
    assert suggested[:2] == ["relaxpack", "run"]

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "relaxpack.cli", *args], capture_output=True, text=True,
                              env=ENV, cwd=tmp_path, timeout=300)

    converted = cli("convert", "row_norm.onnx", "-o", "again.rpk", "--plugin", "relaxpack.examples.custom_op")
    assert converted.returncode == 0, converted.stderr
    ran = cli(*suggested[1:])
    assert ran.returncode == 0, ran.stderr
    assert "filled x: float32[3, 4]" in ran.stdout and "y: float32[3, 4]" in ran.stdout
    timed = cli("bench", "again.rpk", "--plugin", "relaxpack.examples.custom_op", "-n", "2", "--dim", "batch=2")
    assert timed.returncode == 0 and "relaxpack     p50" in timed.stdout, timed.stderr
