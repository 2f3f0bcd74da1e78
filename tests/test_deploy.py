"""The runtime-only install: what pyproject.toml asks for, what ships, and the
command line with onnx, onnxruntime, typer and rich out of reach.

CI (.ci/run) also installs ``pip install .`` into a fresh virtual environment
and runs an archive there; here a fresh interpreter has those modules blocked
(``sys.modules[name] = None`` makes importing them fail), which is what a
numpy-only install looks like to relaxpack.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest

from relaxpack.examples.onnx_models import BUNDLED, bundled_path
from tests.cli_helpers import invoke

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("onnx", "onnxruntime", "typer", "rich", "click", "pydantic", "sympy", "threadpoolctl")

# a fresh interpreter as a numpy-only install sees it: runs ``main(argv)`` and reports the installed
# distributions' modules it imported
RUNTIME_ONLY = textwrap.dedent(f'''
    import json, sys
    at_start = set(sys.modules)                # site's own (.pth hooks) do not count
    for name in {BLOCKED!r}:
        sys.modules[name] = None
    from relaxpack.cli import main
    code = main(json.loads(sys.argv[1]))
    from importlib.metadata import packages_distributions
    installed = packages_distributions()       # top-level module -> the distributions that provide it
    loaded = {{m.split(".")[0] for m in set(sys.modules) - at_start if sys.modules[m] is not None}}
    print("IMPORTED " + " ".join(sorted(m for m in loaded if m in installed)), file=sys.stderr)
    sys.exit(code)
''')


def runtime_only(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUNTIME_ONLY, json.dumps([str(a) for a in args])],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deploy")
    out = folder / "block.rpk"
    result = invoke("convert", bundled_path("transformer_block.onnx"), "-o", out, "--dim", "seq=1..32")
    assert result.exit_code == 0, result.output
    return out


def test_pyproject_asks_for_numpy_alone_and_puts_the_rest_in_extras():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0].split("=")[0] for d in project["dependencies"]] == ["numpy"]
    extra = [d.split(">")[0] for d in project["optional-dependencies"]["onnx"]]
    assert extra == ["onnx", "onnxruntime"]
    assert [d.split(">")[0] for d in project["optional-dependencies"]["serve"]] == ["starlette", "uvicorn"]
    assert [d.split(">")[0] for d in project["optional-dependencies"]["dask"]] == ["dask", "distributed"]
    assert "relaxpack[onnx,serve,dask]" in project["optional-dependencies"]["test"]


@pytest.mark.parametrize("args", [
    ["run", "{archive}", "--fill", "random", "--dim", "batch=2", "--dim", "seq=5"],
    ["inspect", "{archive}", "--json"],
    ["bench", "{archive}", "-n", "2", "--dim", "batch=1", "--dim", "seq=4", "--profile"],
    ["inspect", "{archive}", "--plot", "{folder}/plan.svg", "--dim", "batch=1", "--dim", "seq=8"],
    ["--help"],
])
def test_the_runtime_commands_work_without_onnx_typer_or_rich(args, archive):
    proc = runtime_only(*[a.format(archive=archive, folder=archive.parent) for a in args])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    imported = proc.stderr.strip().splitlines()[-1].split()[1:]
    assert set(imported) <= {"numpy", "relaxpack"}, imported


@pytest.mark.parametrize("args, command", [
    (["convert", "{model}"], "relaxpack convert"),
    (["check", "{model}"], "relaxpack check"),
    (["demo"], "relaxpack demo"),
    (["bench", "{archive}", "--onnx", "{model}", "-n", "1", "--dim", "batch=1", "--dim", "seq=4"],
     "relaxpack bench --onnx"),
])
def test_a_command_that_needs_the_converter_says_which_extra_to_install(args, command, archive, tmp_path):
    model = bundled_path("transformer_block.onnx")
    proc = runtime_only(*[a.format(archive=archive, model=model) for a in args], cwd=tmp_path)
    assert proc.returncode == 1
    (line,) = [l for l in proc.stderr.splitlines() if not l.startswith("IMPORTED")]
    assert line == f"error: {command} needs onnx and onnxruntime, which this install lacks: " \
                   f"pip install 'relaxpack[onnx]'"


def test_a_plugin_that_needs_onnx_names_the_extra(archive):
    proc = runtime_only("run", archive, "--plugin", "relaxpack.examples.custom_op")
    assert proc.returncode == 1
    assert "cannot load plugin 'relaxpack.examples.custom_op'" in proc.stderr
    assert "pip install 'relaxpack[onnx]'" in proc.stderr


def test_the_session_api_needs_numpy_alone(archive):
    code = textwrap.dedent(f'''
        import sys
        for name in {BLOCKED!r}:
            sys.modules[name] = None
        import numpy as np
        from relaxpack.runtime import InferenceSession
        session = InferenceSession(sys.argv[1])
        (y,) = session.run(None, {{"x": np.ones((2, 3, 32), np.float32)}})
        print(session.get_outputs()[0].shape, y.shape)
    ''')
    proc = subprocess.run([sys.executable, "-c", code, str(archive)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['batch', 'seq', 32] (2, 3, 32)"


# ---------------------------------------------------------------- what ships
def test_the_bundled_example_models_exist_and_are_what_their_code_makes():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["relaxpack"]
    assert "examples/*.onnx" in patterns
    shipped = sorted(p.name for p in (REPO / "relaxpack" / "examples").glob("*.onnx"))
    assert shipped == sorted(BUNDLED)
    for name, make in BUNDLED.items():
        assert bundled_path(name).read_bytes() == make().SerializeToString(), \
            f"{name} differs from what its code makes: python -m relaxpack.examples.onnx_models --write"
        onnx.checker.check_model(onnx.load(str(bundled_path(name))))


def test_the_bundled_models_can_be_written_again(tmp_path):
    out = subprocess.run([sys.executable, "-m", "relaxpack.examples.onnx_models", "--write", "--folder", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for name in BUNDLED:
        assert (tmp_path / name).read_bytes() == bundled_path(name).read_bytes()


def test_no_wheel_is_committed_in_the_repository():
    tracked = subprocess.run(["git", "ls-files", "*.whl"], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    assert tracked.stdout.split() == []


def test_an_archive_made_here_runs_where_only_numpy_is(archive, tmp_path):
    """The CLI of the runtime-only side, on outputs of onnxruntime made on this side."""
    from relaxpack.check import onnxruntime_session
    x = np.random.default_rng(0).standard_normal((2, 6, 32)).astype(np.float32)
    (want,) = onnxruntime_session(bundled_path("transformer_block.onnx")).run(None, {"x": x})
    np.savez(tmp_path / "in.npz", x=x)
    np.savez(tmp_path / "want.npz", y=want)
    proc = runtime_only("run", archive, "--inputs", tmp_path / "in.npz", "--expected", tmp_path / "want.npz")
    assert proc.returncode == 0, proc.stderr
    assert "PASS (1 output(s)" in proc.stdout
