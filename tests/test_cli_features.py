"""What users of tvmc, tract and onnxruntime reach for, through the command line:
check the archive you ship, run with made-up or expected values, BLAS threads,
progress on a terminal (and none in a pipe), profiles by ONNX node, Chrome
traces and the plan picture at chosen dims."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.examples import custom_op
from relaxpack.examples.onnx_models import bundled_path
from tests.cli_helpers import invoke, run_in_terminal
from tests.runtime.test_session import user_model

BLOCK = bundled_path("transformer_block.onnx")
CNN = bundled_path("small_cnn.onnx")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("features")
    paths = {"block": folder / "block.rpk", "user_onnx": folder / "user.onnx", "user": folder / "user.rpk",
             "cnn": folder / "cnn.rpk", "folder": folder}
    assert invoke("convert", BLOCK, "-o", paths["block"], "--dim", "seq=1..64").exit_code == 0
    assert invoke("convert", CNN, "-o", paths["cnn"], "-O0", "--dim", "batch=1..4").exit_code == 0
    onnx.save(user_model(), str(paths["user_onnx"]))
    assert invoke("convert", paths["user_onnx"], "-o", paths["user"]).exit_code == 0
    return paths


def lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


# ---------------------------------------------------------------- check
def test_check_checks_the_archive_given(files):
    result = invoke("check", BLOCK, "--archive", files["block"], "--samples", "2", "--dim", "batch=2")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"checking {files['block']}: ")
    assert result.output.count("PASS") == 3 and "(batch=2, seq=" in result.output


def test_check_refuses_an_archive_of_another_model(files):
    result = invoke("check", CNN, "--archive", files["block"])
    assert result.exit_code == 1
    assert lines(result)[-1] == ("error: the archive's inputs ['x'] are not the model's ['input']: "
                                 "was it built from this model?")
    assert "was built from a model other than" in result.output


def test_check_builds_as_convert_does(files):
    """-O and --pool reach the build that is checked: its kernel calls are convert's at that level."""
    convert = invoke("convert", CNN, "-o", files["folder"] / "o0.rpk", "-O0", "--pool", "fast=16KiB")
    calls = re.search(r"-> (\d+) kernel calls", convert.output).group(1)
    result = invoke("check", CNN, "-O0", "--pool", "fast=16KiB", "--samples", "1")
    assert result.exit_code == 0, result.output
    assert f"built at -O0, pool fast 16.0 KiB: {calls} kernel calls" in result.output
    fused = invoke("check", CNN, "--samples", "1")
    assert f"built at -O2: {calls} kernel calls" not in fused.output and "built at -O2: " in fused.output


def test_check_gives_a_dim_the_model_fixes_its_value(tmp_path):
    """An export that leaves the channels symbolic (optimum's ``num_channels``) while its first
    Conv takes 3: the model assumes ``channels == 3``. A 9x9 window refuses the sizes 1..8, and
    the larger ranges drawn next for every free dim never held 3 channels: check failed on the
    model as exported. Now the dim takes the value the model gives it, whatever the range."""
    from onnx import TensorProto, helper, numpy_helper
    weight = numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[9, 9])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", "channels", "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    path = tmp_path / "channels.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    result = invoke("check", path, "--samples", "2")
    assert result.exit_code == 0, result.output
    assert lines(result)[-1] == "PASS" and "channels=3" in result.output


def test_check_tries_round_lengths_when_every_random_draw_is_refused(tmp_path, monkeypatch):
    """A model whose shape arithmetic takes only lengths that are multiples of 16 (Longformer's
    windows, Mamba2's chunks in their way), with draw ranges that hold no such length: every
    random draw is refused by onnxruntime and relaxpack alike, and the last draws give every free
    dim one round value, of which 16 runs."""
    from onnx import TensorProto, helper, numpy_helper
    const = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)      # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one"], ["n"]),
             helper.make_node("Slice", ["s", "one", "two"], ["length"]),
             helper.make_node("Div", ["length", "chunk"], ["chunks"]),
             helper.make_node("Concat", ["n", "chunks", "chunk"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("ReduceSum", ["r", "two"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [const("zero", [0]), const("one", [1]), const("two", [2]), const("chunk", [16])])
    path = tmp_path / "chunks.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    monkeypatch.setattr("relaxpack.feeds.DRAW_RANGES", ((1, 8), (17, 31)))     # no multiple of 16
    result = invoke("check", path, "--samples", "1")
    assert result.exit_code == 0, result.output
    assert lines(result)[-1] == "PASS" and "(batch=16, length=16)" in result.output


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_check_tries_a_dim_that_is_the_sum_of_two_others(exporter):
    """GPT-2 exported with its past (the zoo's): the attention mask spans the past and the new
    tokens, so ``total_sequence`` must be ``past_sequence + sequence``, which no shape in the
    graph says; onnxruntime refuses the random and round draws, and the last draws make one dim
    the sum of two others."""
    from tests.models.zoo.judge import HERE
    result = invoke("check", HERE / f"gpt2_kv_{exporter}.onnx", "--samples", "1")
    assert result.exit_code == 0, result.output
    dims = dict(re.findall(r"(\w+)=(\d+)", result.output[result.output.index("sample 0"):].splitlines()[0]))
    assert int(dims["total_sequence"]) == int(dims["past_sequence"]) + int(dims["sequence"]), result.output
    assert lines(result)[-1] == "PASS"


def test_check_says_its_inputs_are_random_when_dim_fixes_every_dim(tmp_path):
    result = invoke("check", CNN, "--dim", "batch=2", "--samples", "1")
    assert result.exit_code == 0 and "sample 0 (random inputs)" in result.output, result.output
    np.savez(tmp_path / "in.npz", **{"input": np.ones((2, 3, 32, 32), np.float32)})
    given = invoke("check", CNN, "--inputs", tmp_path / "in.npz")
    assert "sample 0 (given inputs)" in given.output, given.output


def test_check_a_mismatch_exits_1_with_the_archive_too(files):
    result = invoke("check", CNN, "--archive", files["cnn"], "--samples", "1", "--atol", "0", "--rtol", "0")
    assert result.exit_code == 1 and lines(result)[-1] == "FAIL"


# ---------------------------------------------------------------- run
def test_run_fills_inputs_with_sizes_from_dims_and_given_inputs(files, tmp_path):
    zeros = invoke("run", files["user"], "--fill", "zeros", "--dim", "batch=2", "--dim", "seq=3",
                   "--output", tmp_path / "zeros.npz")
    assert zeros.exit_code == 0, zeros.output
    assert "filled x: float32[2, 3, 8] (zeros)" in zeros.output and "filled ids: int64[2, 3] (zeros)" in zeros.output
    with np.load(tmp_path / "zeros.npz") as out:
        assert out["total"] == 0 and not out["big"].any() and not out["y"].any()
    np.save(tmp_path / "ids.npy", np.full((4, 5), 9, np.int64))
    ones = invoke("run", files["user"], "--input", f"ids={tmp_path / 'ids.npy'}", "--fill", "ones",
                  "--output", tmp_path / "ones.npz")
    assert "filled x: float32[4, 5, 8] (ones)" in ones.output            # batch and seq from ids
    assert "filled ids" not in ones.output
    with np.load(tmp_path / "ones.npz") as out:
        assert out["total"] == 9 * 20 and out["both"].shape == (4, 10, 8)


def test_run_fill_random_is_seeded(files, tmp_path):
    def outputs(seed):
        out = tmp_path / f"r{seed}.npz"
        result = invoke("run", files["block"], "--fill", "random", "--seed", seed, "--dim", "batch=1", "--output", out)
        assert result.exit_code == 0, result.output
        with np.load(out) as data:
            return data["y"]
    first, again, other = outputs(1), outputs(1), outputs(2)
    np.testing.assert_array_equal(first, again)
    assert first.shape[1] >= 1 and (first.shape != other.shape or not np.array_equal(first, other))


def test_run_fill_random_draws_dims_the_model_takes(tmp_path, monkeypatch):
    """A YOLO whose image sizes must be multiples of 32 (or within the slack after them) holds
    no size in 1..8: run --fill widens the draw as check does, and when no range holds the
    model's assumptions it says so and points at --dim instead of failing the run."""
    from tests.models.zoo.judge import HERE
    path = tmp_path / "yolo.rpk"
    relaxpack.build(relaxpack.from_onnx(str(HERE / "yolov8_ts.onnx"))).save(path)
    result = invoke("run", path, "--fill", "random")
    assert result.exit_code == 0 and "output0: float32[" in result.output, result.output
    monkeypatch.setattr("relaxpack.feeds.DRAW_RANGES", ((1, 8),))
    monkeypatch.setattr("relaxpack.feeds.ROUND_DIMS", (8,))          # (32 and 64 hold the multiple of 32)
    refused = invoke("run", path, "--fill", "random")
    assert refused.exit_code == 1
    assert re.fullmatch(r"error: no dims drawn for batch, height, width hold what the model assumes "
                        r"\(height % 32 in \{0, 17\.\.31\}; .*\); give them with --dim NAME=VALUE", lines(refused)[-1])


def test_run_compares_with_expected_outputs(files, tmp_path):
    from relaxpack.check import onnxruntime_session
    x = np.random.default_rng(4).standard_normal((2, 9, 32)).astype(np.float32)
    (want,) = onnxruntime_session(BLOCK).run(None, {"x": x})
    np.savez(tmp_path / "in.npz", x=x)
    np.savez(tmp_path / "want.npz", y=want)
    np.savez(tmp_path / "wrong.npz", y=want + 1e-2)
    np.savez(tmp_path / "other.npz", z=want)
    ok = invoke("run", files["block"], "--inputs", tmp_path / "in.npz", "--expected", tmp_path / "want.npz")
    assert ok.exit_code == 0 and lines(ok)[-1] == f"PASS (1 output(s) against {tmp_path / 'want.npz'})"
    bad = invoke("run", files["block"], "--inputs", tmp_path / "in.npz", "--expected", tmp_path / "wrong.npz")
    assert bad.exit_code == 1 and "expected y: max abs 1.000e-02" in bad.output and lines(bad)[-1].startswith("FAIL")
    strict = invoke("run", files["block"], "--inputs", tmp_path / "in.npz", "--expected", tmp_path / "wrong.npz",
                    "--atol", "0.02")
    assert strict.exit_code == 0, strict.output
    other = invoke("run", files["block"], "--inputs", tmp_path / "in.npz", "--expected", tmp_path / "other.npz")
    assert other.exit_code == 1 and lines(other) == [
        f"error: {tmp_path / 'other.npz'} holds ['z'], which are not outputs of the model (its outputs are ['y'])"]


def test_run_names_every_input_when_one_is_missing(files, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 2, 8), np.float32))
    result = invoke("run", files["user"], "--input", f"x={tmp_path / 'x.npy'}")
    assert result.exit_code == 1
    assert lines(result) == ["error: missing input(s) ['ids']; the model's inputs are x: float32[batch, seq, 8], "
                             "ids: int64[batch, seq] (give them with --input NAME=FILE.npy or --inputs FILE.npz, "
                             "or make them with --fill random|zeros|ones)"]


@pytest.mark.parametrize("args, message", [
    (["--inputs", "{a}", "--inputs", "{b}"], "error: relaxpack run: argument --inputs: given twice; give it once"),
    (["--output", "{a}", "--output", "{b}"], "error: relaxpack run: argument --output: given twice; give it once"),
    (["--fill", "random", "--fill", "zeros"], "error: relaxpack run: argument --fill: given twice; give it once"),
    (["--dim", "batch=2"], "error: --dim sizes the inputs --fill makes; add --fill random|zeros|ones"),
    (["--fill", "many"], "error: relaxpack run: argument --fill: invalid choice: 'many'"),
    (["--threads", "0"], "error: relaxpack run: argument --threads: 0 is not at least 1"),
])
def test_run_option_mistakes_are_one_line(args, message, files, tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((1, 2, 32), np.float32))
    np.savez(tmp_path / "b.npz", x=np.ones((1, 2, 32), np.float32))
    result = invoke("run", files["block"], *[a.format(a=tmp_path / "a.npz", b=tmp_path / "b.npz") for a in args])
    assert result.exit_code == 1
    (line,) = lines(result)
    assert line.startswith(message), line


# ---------------------------------------------------------------- threads
PROBE = textwrap.dedent('''
    import sys
    import numpy as np
    from relaxpack.runtime import get_blas_threads, register_func

    @register_func("acme.row_norm", dps=True)
    def row_norm(x, *, eps, out):
        print(f"BLAS threads during the run: {get_blas_threads()}", file=sys.stderr)
        np.divide(x, np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps), out=out)
''')


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """An archive calling acme.row_norm and a plugin whose row_norm reports the BLAS threads it runs with."""
    folder = tmp_path_factory.mktemp("threads")
    relaxpack.build(relaxpack.from_onnx(custom_op.make_model(), dims={"batch": (1, 8)})).save(folder / "m.rpk")
    (folder / "probe.py").write_text(PROBE)
    return folder


def _threads_seen(*args) -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "relaxpack.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return set(re.findall(r"BLAS threads during the run: (\S+)", proc.stderr))


def test_threads_set_the_blas_threads_of_run_and_bench(probe):
    from relaxpack.runtime.blas import get_blas_threads
    if get_blas_threads() is None:
        pytest.skip("this numpy's BLAS has no thread setting")
    common = ["--plugin", probe / "probe.py"]
    assert _threads_seen("run", probe / "m.rpk", "--fill", "ones", "--dim", "batch=2", "--threads", "1", *common) \
        == {"1"}
    assert _threads_seen("run", probe / "m.rpk", "--fill", "ones", "--dim", "batch=2", "--threads", "3", *common) \
        == {"3"}
    assert _threads_seen("bench", probe / "m.rpk", "-n", "2", "--dim", "batch=2", "--threads", "1", *common) == {"1"}


def test_check_threads_reach_onnxruntime_too(files):
    from relaxpack.check import onnxruntime_session
    assert onnxruntime_session(BLOCK, threads=1).get_session_options().intra_op_num_threads == 1
    result = invoke("check", BLOCK, "--archive", files["block"], "--samples", "1", "--threads", "1")
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- bench: profile and trace
def test_bench_profile_names_the_onnx_nodes(files):
    result = invoke("bench", files["block"], "-n", "2", "--dim", "batch=1", "--dim", "seq=8", "--profile")
    assert result.exit_code == 0, result.output
    per_node = result.output.split("per ONNX node", 1)[1]
    names = {n.name for n in onnx.load(str(BLOCK)).graph.node}
    shown = set(re.findall(r"(/[a-z]+_\d+/[A-Za-z]+)", per_node))
    assert shown and shown <= names
    # the attention's one call names its nodes, the scores' product first
    assert re.search(r"/matmul_31/MatMul \+ \d+ more  \[nn.attention\]", per_node), per_node


def test_bench_trace_is_a_chrome_trace_naming_the_nodes(files, tmp_path):
    trace = tmp_path / "trace.json"
    result = invoke("bench", files["block"], "-n", "3", "--dim", "batch=1", "--dim", "seq=8", "--trace", trace)
    assert result.exit_code == 0, result.output
    assert f"wrote {trace}" in result.output and "per ONNX node" not in result.output
    events = json.loads(trace.read_text())
    assert isinstance(events, list) and events
    for e in events:
        assert set(e) == {"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"} and e["ph"] == "X"
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["ts"] >= 0 and e["dur"] >= 0
    runs = [e for e in events if e["name"] == "model_run"]
    assert len(runs) == 3 and {e["cat"] for e in runs} == {"Session"}
    nodes = [e for e in events if e["cat"] == "Node"]
    assert "/layernormalization_58/LayerNormalization_kernel_time" in {e["name"] for e in nodes}
    assert {e["args"]["op_name"] for e in nodes} >= {"kernel.nn.attention", "kernel.nn.layer_norm"}
    for run in runs:                 # every node event of a run lies inside it
        inside = [e for e in nodes if run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 1]
        assert len(inside) == len(nodes) // 3


# ---------------------------------------------------------------- progress
def test_progress_shows_on_a_terminal_and_not_in_a_pipe(files, tmp_path):
    shown = run_in_terminal("convert", BLOCK, "-o", tmp_path / "t.rpk", "--dim", "seq=1..8")
    for stage in ("import", "optimize", "lower + plan", "codegen", "package"):
        assert re.search(rf"\r\x1b\[K  {re.escape(stage)} +\d+ ms\r?\n", shown), stage
    assert "optimize: FoldConstant ..." in shown
    bench = run_in_terminal("bench", files["block"], "-n", "3", "--dim", "batch=1", "--dim", "seq=4")
    assert "relaxpack round 3/3: " in bench
    check = run_in_terminal("check", BLOCK, "--archive", files["block"], "--samples", "2")
    assert "sample 2/2 ..." in check and check.count("PASS") == 3

    piped = subprocess.run([sys.executable, "-m", "relaxpack.cli", "convert", str(BLOCK), "-o", str(tmp_path / "p.rpk")],
                           capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and piped.stderr == "" and "\x1b" not in piped.stdout
    for args in (["bench", files["block"], "-n", "2", "--dim", "batch=1", "--dim", "seq=4"],
                 ["check", BLOCK, "--archive", files["block"], "--samples", "1"]):
        out = subprocess.run([sys.executable, "-m", "relaxpack.cli", *map(str, args)], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0 and out.stderr == "" and "\r" not in out.stdout


# ---------------------------------------------------------------- the plan picture
SVG = "{http://www.w3.org/2000/svg}"


def test_inspect_plot_at_given_dims_has_a_legend_and_labels(files, tmp_path):
    small, large = tmp_path / "small.svg", tmp_path / "large.svg"
    result = invoke("inspect", files["block"], "--plot", small, "--dim", "batch=1", "--dim", "seq=4")
    assert result.exit_code == 0, result.output
    assert invoke("inspect", files["block"], "--plot", large, "--dim", "batch=3", "--dim", "seq=64").exit_code == 0
    root = ET.parse(small).getroot()
    assert root.find(f"{SVG}title").text == "main: memory plan at batch=1, seq=4"
    legend = {g.find(f"{SVG}text").text: g.find(f"{SVG}path").get("fill") for g in root.iter(f"{SVG}g")
              if g.get("class") == "legend"}
    assert "nn.attention" in legend and len(set(legend.values())) == len(legend)     # a colour says one thing
    fills = {r.get("fill") for r in root.iter(f"{SVG}rect")}
    assert fills <= set(legend.values())                                          # every colour is explained
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "buffer-label"]
    assert any(re.search(r" \d+(\.\d)? (B|KiB|MiB)$", label) for label in labels)     # the largest with its size
    assert _arena(large) > _arena(small)
    outside = invoke("inspect", files["block"], "--plot", small, "--dim", "batch=1", "--dim", "seq=65")
    assert outside.exit_code == 1 and lines(outside)[-1].startswith("error: main: dim 'seq' = 65 is outside")
    unbounded = invoke("inspect", files["block"], "--plot", small, "--dim", "seq=4")
    assert lines(unbounded)[-1].startswith("error: main: dim 'batch' has no upper bound; give its value to picture "
                                           "the plan (--dim batch=N")


def _arena(svg) -> float:
    text = " ".join(t.text or "" for t in ET.parse(svg).getroot().iter(f"{SVG}text"))
    value, unit = re.search(r"arena ([\d.]+) (B|KiB|MiB)", text).groups()
    return float(value) * {"B": 1, "KiB": 1024, "MiB": 1 << 20}[unit]
