"""The command line on models whose values are maps (skl2onnx's defaults, the zoo's two):
``convert`` and ``inspect`` name the kinds, ``run`` previews a ZipMap's dicts and refuses to
write them to an .npz in one line, ``check`` compares them with onnxruntime's."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cli_helpers import invoke

pytest.importorskip("onnxruntime")

ZOO = Path(__file__).parent / "models" / "zoo"
ZIPMAP = ZOO / "sk_logistic_regression_zipmap.onnx"            # float input, seq(map) probabilities
DICT_INPUT = ZOO / "sk_dict_vectorizer_forest_zipmap.onnx"      # map(string, float) input


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("maps")
    out = {}
    for name, model in (("zipmap", ZIPMAP), ("dict", DICT_INPUT)):
        result = invoke("convert", model, "-o", folder / f"{name}.rpk")
        assert result.exit_code == 0, result.output
        out[name] = folder / f"{name}.rpk"
        out[f"{name}_convert"] = result.output
    return out


def test_convert_and_inspect_name_the_map_kinds(archives):
    assert "output_probability: sequence of map(int64, float32)" in archives["zipmap_convert"]
    assert "main(input: map(string, float32))" in archives["dict_convert"]
    inspect = invoke("inspect", archives["dict"])
    assert inspect.exit_code == 0 and "input: map(string, float32)" in inspect.output, inspect.output


def test_run_previews_one_dict_per_sample(archives):
    result = invoke("run", archives["zipmap"], "--fill", "random", "--dim", "input_dim0=3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "output_label: int64[3] [" in result.output
    (probability,) = [line for line in lines if line.startswith("output_probability: ")]
    assert probability.startswith("output_probability: 3 maps {0: 0.") and ", 2: " in probability, probability


def test_run_fills_a_map_input(archives):
    result = invoke("run", archives["dict"], "--fill", "random")
    assert result.exit_code == 0, result.output
    assert "filled input: map (random, seed 0)" in result.output
    assert "output_probability: 1 map {0: " in result.output


def test_run_refuses_to_write_maps_to_npz_in_one_line(archives, tmp_path):
    result = invoke("run", archives["zipmap"], "--fill", "random", "--dim", "input_dim0=2",
                    "--output", tmp_path / "out.npz")
    assert result.exit_code == 1 and not (tmp_path / "out.npz").exists()
    assert result.output.splitlines()[-1] == (
        "error: output(s) ['output_probability'] are maps (dicts), which .npz cannot hold; run without "
        "--output or read them with relaxpack.runtime.InferenceSession")


@pytest.mark.parametrize("model", [ZIPMAP, DICT_INPUT], ids=["zipmap", "dict_input"])
def test_check_compares_maps_with_onnxruntime(model, archives):
    result = invoke("check", model, "--samples", "2")
    assert result.exit_code == 0 and result.output.splitlines()[-1] == "PASS", result.output
    assert result.output.count("output_probability") == 2


def test_check_fails_a_map_output_that_differs(monkeypatch):
    """A ZipMap whose probabilities are off by 1e-3 fails: maps are compared, not skipped."""
    from relaxpack.runtime.kernels import KERNELS, Kernel
    right = KERNELS["ml.zip_map"]

    def off(x, **attrs):
        return tuple({k: v + 1e-3 for k, v in m.items()} for m in right.fn(x, **attrs))
    monkeypatch.setitem(KERNELS, "ml.zip_map", Kernel("ml.zip_map", off, right.dps, right.takes_workspace))
    result = invoke("check", ZIPMAP, "--samples", "1")
    assert result.exit_code == 1 and result.output.splitlines()[-1] == "FAIL", result.output
    (line,) = [line for line in result.output.splitlines() if line.strip().startswith("output_probability")]
    assert "FAIL" in line and "max abs 1.000e-03" in line
