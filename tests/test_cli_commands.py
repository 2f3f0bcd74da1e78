"""convert / run / check / inspect / bench, in-process (tests/cli_helpers.py) and
once as a real process; every user error ends in one line and exit 1."""

import json
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

from relaxpack.runtime import load
from tests.cli_helpers import archive, invoke, models  # noqa: F401 (module fixtures shared by the CLI tests)


def test_convert_prints_a_summary(archive, models, tmp_path):
    result = invoke("convert", models["cnn"], "-o", tmp_path / "cnn.rpk", "-O0", "--timing")
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "kernel calls" in result.output and "parameters" in result.output
    assert "Legalize" in result.output  # --timing lists the passes
    assert (tmp_path / "cnn.rpk").stat().st_size > 0


def test_convert_compact_constants_and_inspect_says_so(tmp_path):
    """The zoo's QOperator ResNet (weights ``w - w_zero_point`` in float32): compact, its weights
    take a byte each; inspect counts them; run gives the mapped archive's outputs, bit for bit."""
    from tests.models.zoo.judge import HERE
    model = HERE / "resnet_qop_tensor.onnx"
    for mode in ("mapped", "compact"):
        result = invoke("convert", model, "-o", tmp_path / f"{mode}.rpk", "--constants", mode)
        assert result.exit_code == 0, result.output
    sizes = {mode: (tmp_path / f"{mode}.rpk").stat().st_size for mode in ("mapped", "compact")}
    assert sizes["compact"] < sizes["mapped"] / 2.5
    facts = json.loads(invoke("inspect", tmp_path / "compact.rpk", "--json").output)
    assert facts["format_version"] == 3 and facts["constants_stored_narrower"] >= 18
    assert re.search(r"^constants +84 \(.*; \d+ stored narrower, widened at load\)$",
                     invoke("inspect", tmp_path / "compact.rpk").output, re.M)
    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((1, 3, 40, 52)).astype(np.float32))
    for mode in ("mapped", "compact"):
        result = invoke("run", tmp_path / f"{mode}.rpk", "--input", f"pixel_values={tmp_path / 'x.npy'}",
                        "--output", tmp_path / f"{mode}.npz")
        assert result.exit_code == 0, result.output
    with np.load(tmp_path / "mapped.npz") as a, np.load(tmp_path / "compact.npz") as b:
        assert a["logits"].tobytes() == b["logits"].tobytes()
    assert invoke("convert", model, "-o", tmp_path / "x.rpk", "--constants", "small").exit_code != 0


def test_run_with_npy_and_npz(archive, tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 5, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = invoke("run", archive, "--input", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "out.npz")
    assert result.exit_code == 0, result.output
    assert "y: float32[2, 5, 32]" in result.output
    np.savez(tmp_path / "in.npz", x=x)
    again = invoke("run", archive, "--inputs", tmp_path / "in.npz")
    assert again.exit_code == 0 and "y: float32[2, 5, 32]" in again.output
    with np.load(tmp_path / "out.npz") as data:
        assert data["y"].shape == (2, 5, 32)


def test_check_passes_and_reports_per_output(models):
    result = invoke("check", models["block"], "--samples", "2", "--dim", "seq=1..16")
    assert result.exit_code == 0, result.output
    assert result.output.count("PASS") >= 3


def test_check_binds_a_dim_given_a_value_as_convert_does(models):
    # the one-line error on dims onnxruntime refuses says "give the dims with --dim NAME=VALUE"
    result = invoke("check", models["block"], "--samples", "2", "--dim", "seq=5")
    assert result.exit_code == 0, result.output
    assert "[2, 5, 32]" in result.output or "5, 32]" in result.output


def test_dim_takes_the_models_own_spelling_of_a_name(tmp_path):
    """paddle2onnx names dims ``DynamicDimension.0``; relaxpack's variable is ``DynamicDimension_0``:
    --dim takes either (the dotted one was "bad --dim")."""
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["DynamicDimension.0", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
              str(tmp_path / "m.onnx"))
    for spelling in ("DynamicDimension.0", "DynamicDimension_0"):
        result = invoke("check", tmp_path / "m.onnx", "--samples", "1", "--dim", f"{spelling}=6")
        assert result.exit_code == 0 and "[6, 3]" in result.output, result.output


def test_check_fails_with_exit_1_and_names_the_diverging_node(models, tmp_path):
    # a model whose Gemm weight differs between onnxruntime and relaxpack cannot be
    # built, so check a mismatch by an impossible tolerance instead
    result = invoke("check", models["cnn"], "--samples", "1", "--rtol", "0", "--atol", "0", "--per-node")
    assert result.exit_code == 1
    assert "FAIL" in result.output and "first divergence:" in result.output


def test_check_blames_onnxruntime_for_a_saturating_integer_gemm(tmp_path, monkeypatch):
    """onnxruntime's u8 x s8 GEMM saturating in int16 pairs (CPUs without VNNI, as
    the fake session answers) is reported as its deviation, exit 0; --strict fails."""
    import relaxpack.check

    from .test_cross_check import _SessionWithoutVnni, _saturating_matmul_integer
    model, a, b = _saturating_matmul_integer()
    onnx.save(model, str(tmp_path / "mmi.onnx"))
    np.savez(tmp_path / "a.npz", a=a)
    args = ("check", tmp_path / "mmi.onnx", "--inputs", tmp_path / "a.npz")
    assert invoke(*args).exit_code == 0     # this CPU's onnxruntime, whatever it does
    monkeypatch.setattr(relaxpack.check, "_session", lambda proto, threads, isolate: _SessionWithoutVnni(b))
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "onnxruntime differs from the exact result here; relaxpack matches it" in result.output
    strict = invoke(*args, "--strict")
    assert strict.exit_code == 1 and "FAIL" in strict.output


def test_inspect_json_facts(archive):
    result = invoke("inspect", archive, "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    for key in ("inputs", "outputs", "kernel_calls", "arena_bytes", "lower_bound_bytes", "naive_bytes",
                "constant_bytes", "archive_bytes", "format_version"):
        assert key in facts
    assert facts["inputs"][0] == {"name": "x", "dtype": "float32", "shape": ["batch", "seq", 32]}
    assert facts["kernel_calls"] == load(archive).kernel_call_count() > 0


def test_inspect_text_ir_and_bytecode(archive):
    result = invoke("inspect", archive, "--ir", "--bytecode")
    assert result.exit_code == 0, result.output
    # the attention products read their transposed operands as views (FoldPermuteMatmul)
    assert "R.call_tir" in result.output and "call kernel.nn.attention" in result.output


def test_bench_against_onnxruntime(archive, models):
    result = invoke("bench", archive, "--onnx", models["block"], "-n", "2", "--dim", "batch=1", "--dim", "seq=8")
    assert result.exit_code == 0, result.output
    assert "relaxpack" in result.output and "onnxruntime" in result.output and "ratio" in result.output


def _embedding_model(path, flattened: bool = False):
    """y = table[ids] + table2[types]: token ids into an 8-row table, token type ids into a 2-row
    one (``flattened``: the type ids flattened and shaped back before their look-up)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    types, reshaping = "types", []
    if flattened:
        reshaping = [helper.make_node("Flatten", ["types"], ["flat"], axis=0),
                     helper.make_node("Shape", ["ids"], ["shape"]), helper.make_node("Reshape", ["flat", "shape"], ["back"])]
        types = "back"
    graph = helper.make_graph(
        reshaping + [helper.make_node("Gather", ["table", "ids"], ["a"]),
                     helper.make_node("Gather", ["types_table", types], ["b"]), helper.make_node("Add", ["a", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("types", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "table"),
         numpy_helper.from_array(rng.standard_normal((2, 4)).astype(np.float32), "types_table")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return path


def test_bench_draws_ids_below_their_tables_rows_or_takes_given_inputs(tmp_path):
    """Random ids (0..7) run past a 2-row token type table: bench draws ids below the rows of the
    table the archive looks them up in, with --onnx also through reshapes (as check draws them);
    else it says what failed on random inputs and how to give real ones (--inputs / --input)."""
    model, flattened = _embedding_model(tmp_path / "emb.onnx"), _embedding_model(tmp_path / "flat.onnx", True)
    rpk, flat_rpk = tmp_path / "emb.rpk", tmp_path / "flat.rpk"
    assert invoke("convert", model, "-o", rpk).exit_code == 0
    assert invoke("convert", flattened, "-o", flat_rpk).exit_code == 0
    direct = invoke("bench", rpk, "-n", "2", "--dim", "batch=2", "--dim", "seq=40")
    assert direct.exit_code == 0 and "ids[2, 40], types[2, 40]" in direct.output, direct.output
    bare = invoke("bench", flat_rpk, "-n", "2", "--dim", "batch=2", "--dim", "seq=40")
    assert bare.exit_code == 1 and "out of range" in bare.output and "on random inputs: give real inputs" in bare.output
    assert len(bare.output.strip().splitlines()) == 1
    bounded = invoke("bench", flat_rpk, "--onnx", flattened, "-n", "2", "--dim", "batch=2", "--dim", "seq=40")
    assert bounded.exit_code == 0, bounded.output
    assert "ids[2, 40], types[2, 40]" in bounded.output and "ratio" in bounded.output
    np.savez(tmp_path / "in.npz", ids=np.arange(6).reshape(2, 3) % 8, types=np.zeros((2, 3), np.int64))
    given = invoke("bench", flat_rpk, "--inputs", tmp_path / "in.npz", "-n", "2")
    assert given.exit_code == 0 and "ids[2, 3], types[2, 3]" in given.output, given.output
    np.save(tmp_path / "types.npy", np.ones((3, 5), np.int64))
    partly = invoke("bench", flat_rpk, "--input", f"types={tmp_path / 'types.npy'}", "-n", "2")
    assert partly.exit_code == 0 and "types[3, 5], ids[3, 5]" in partly.output, partly.output
    unknown = invoke("bench", rpk, "--input", f"nope={tmp_path / 'types.npy'}", "-n", "2")
    assert unknown.exit_code == 1 and "unknown input(s) ['nope']" in unknown.output


def test_bench_profile_prints_the_time_per_kernel(archive):
    result = invoke("bench", archive, "-n", "2", "--dim", "batch=1", "--dim", "seq=8", "--profile")
    assert result.exit_code == 0, result.output
    assert "ms/run" in result.output and "kernel.nn.attention" in result.output


@pytest.mark.parametrize("args, message", [
    (["convert", "missing.onnx"], "model not found"),
    (["convert", "{notonnx}"], "is not an ONNX model"),
    (["convert", "{block}", "--dim", "seq=abc"], "bad --dim"),
    (["convert", "{block}", "--dim", "nosuch=3"], "do not name any dim"),
    (["run", "{archive}", "--input", "q={x}"], "unknown input(s) ['q']"),
    (["run", "{archive}", "--input", "x={x64}"], "has dtype float64, expected float32"),
    (["run", "{archive}", "--input", "x={xlong}"], "outside its range 1..64"),
    (["run", "{notonnx}"], "archive"),
    (["inspect", "missing.rpk"], "archive not found"),
])
def test_user_errors_are_one_line(args, message, archive, models, tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a model at all" * 8)
    np.save(tmp_path / "x.npy", np.zeros((1, 2, 32), np.float32))
    np.save(tmp_path / "x64.npy", np.zeros((1, 2, 32), np.float64))
    np.save(tmp_path / "xlong.npy", np.zeros((1, 65, 32), np.float32))
    values = {"notonnx": junk, "block": models["block"], "archive": archive, "x": tmp_path / "x.npy",
              "x64": tmp_path / "x64.npy", "xlong": tmp_path / "xlong.npy"}
    result = invoke(*[a.format(**values) for a in args])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


def test_a_real_process_converts_and_runs(models, tmp_path):
    out = tmp_path / "cnn.rpk"
    conv = subprocess.run([sys.executable, "-m", "relaxpack.cli", "convert", str(models["cnn"]), "-o", str(out)],
                          capture_output=True, text=True)
    assert conv.returncode == 0, conv.stderr
    np.save(tmp_path / "img.npy", np.zeros((2, 3, 32, 32), np.float32))
    run = subprocess.run([sys.executable, "-m", "relaxpack.cli", "run", str(out), "--input",
                          f"input={tmp_path / 'img.npy'}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "logits: float32[2, 10]" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "relaxpack.cli", "run", str(tmp_path / "nope.rpk")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_inspect_draws_the_plan(archive, tmp_path):
    import xml.etree.ElementTree as ET
    svg = tmp_path / "plan.svg"
    result = invoke("inspect", archive, "--plan", "--plot", svg, "--dim", "batch=2", "--dim", "seq=16")
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "lower bound" in result.output
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(root.findall(".//{*}rect")) > 1


def test_convert_with_a_bounded_pool(models, tmp_path):
    out = tmp_path / "cnn.rpk"
    result = invoke("convert", models["cnn"], "-o", out, "--dim", "batch=1..4", "--pool", "fast=64KiB")
    assert result.exit_code == 0, result.output
    assert "fast 64.0 KiB" in result.output and "global" in result.output
    bad = invoke("convert", models["cnn"], "--pool", "fast=lots")
    assert bad.exit_code == 1 and "bad --pool" in bad.output


def test_inspect_ir_shows_the_plan_offsets_and_kill_points(models, tmp_path):
    out = tmp_path / "cnn.rpk"
    assert invoke("convert", models["cnn"], "-o", out, "--dim", "batch=1..4").exit_code == 0
    result = invoke("inspect", out, "--ir")
    assert result.exit_code == 0, result.output
    # PlanMemory's allocations at the bounds: arena buffer, pool, byte offset; and where each dies
    assert re.search(r'R\.memory\.alloc_tensor\(R\.shape\(\[batch, .*\]\), dtype="float32", offset=\d+, '
                     r'pool="global", storage=0', result.output)
    assert "R.memory.kill_tensor(" in result.output and '"memory_plan": {"buffers": ' in result.output


@pytest.mark.parametrize("command", ["inspect", "check", "bench", "demo", "version", "ir"])
def test_every_command_runs_as_a_real_process(command, archive, models, tmp_path):
    ir_file = tmp_path / "m.py"
    from relaxpack.examples import transformer_block
    ir_file.write_text(transformer_block().script())
    args = {"inspect": [str(archive), "--json"], "check": [str(models["cnn"]), "--samples", "1"],
            "bench": [str(archive), "-n", "1", "--dim", "batch=1", "--dim", "seq=4"], "demo": [],
            "version": [], "ir": [str(ir_file)]}[command]
    out = subprocess.run([sys.executable, "-m", "relaxpack.cli", command, *args], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
