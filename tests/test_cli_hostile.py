"""The command line against careless and hostile input (issue 20): nothing the
user saved is lost, every mistake is one ``error:`` line and exit 1, no
option is silently ignored, nothing from a file reaches the terminal raw."""

import os
import stat

import numpy as np
import onnx
import pytest

from tests.cli_helpers import archive, invoke, models  # noqa: F401 (module fixtures shared by the CLI tests)


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


# ---------------------------------------------------------------- item 14: input files are checked before they are read
def test_run_refuses_a_144_byte_npy_claiming_4_tib_in_one_line(archive, tmp_path):
    from tests.robustness.input_bombs import npy_claiming
    (tmp_path / "big.npy").write_bytes(npy_claiming((1 << 40, 1, 32)))
    one_error_line(invoke("run", archive, "--input", f"x={tmp_path / 'big.npy'}"),
                   r"header says 140737488355328 data bytes .* the file holds 0")


def test_run_refuses_a_zip_bomb_of_the_wrong_shape_from_its_header(archive, tmp_path):
    from tests.robustness.input_bombs import zip_bomb
    (tmp_path / "bomb.npz").write_bytes(zip_bomb({"x": ((65536, 64, 33), "<f4")}))
    one_error_line(invoke("run", archive, "--inputs", tmp_path / "bomb.npz"), r"expected 32 at axis 2")


# ---------------------------------------------------------------- item 15: no tracebacks
@pytest.mark.parametrize("content, pattern", [
    (np.random.default_rng(0).bytes(3000), r"is not an ONNX model \(DecodeError"),
    (b"\x89RPK\r\n\x1a\n" + bytes(100), "is a relaxpack archive, not an ONNX model"),
], ids=["random bytes", "an archive"])
def test_check_and_convert_on_a_file_that_is_not_onnx(tmp_path, content, pattern):
    (tmp_path / "m.onnx").write_bytes(content)
    one_error_line(invoke("check", tmp_path / "m.onnx"), pattern)
    one_error_line(invoke("convert", tmp_path / "m.onnx", "-o", tmp_path / "m.rpk"), pattern)


def test_ir_on_a_binary_file(tmp_path):
    (tmp_path / "m.py").write_bytes(b"\x00\xb8\xff binary")
    one_error_line(invoke("ir", tmp_path / "m.py"), r"is not UTF-8 text \(byte 0xb8 at offset 1\)")


def test_npy_and_npz_given_to_the_wrong_option(archive, models, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32), np.float32))
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 3, 32), np.float32))
    one_error_line(invoke("run", archive, "--inputs", tmp_path / "x.npy"), r"one .npy array, not an .npz")
    one_error_line(invoke("check", models["block"], "--inputs", tmp_path / "x.npy"), r"one .npy array, not an .npz")
    one_error_line(invoke("run", archive, "--input", f"x={tmp_path / 'in.npz'}"), r"an .npz archive of arrays")


def test_bench_against_another_model(archive, models):
    one_error_line(invoke("bench", archive, "--onnx", models["cnn"], "-n", "1"),
                   r"cnn\.onnx takes inputs \['input'\], the archive \['x'\]")


BENCH_UNDER_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from relaxpack.cli import main
sys.argv = ["relaxpack", "bench", sys.argv[1], "-n", "1"]
sys.exit(main(sys.argv[1:]))
"""


def test_bench_with_inputs_too_large_for_memory_is_one_line(tmp_path):
    import subprocess
    import sys
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [70000, 70000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [70000, 70000])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "big.onnx"))
    assert invoke("convert", tmp_path / "big.onnx", "-o", tmp_path / "big.rpk").exit_code == 0
    out = subprocess.run([sys.executable, "-c", BENCH_UNDER_LIMIT, str(tmp_path / "big.rpk")], capture_output=True,
                         text=True, timeout=300)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stderr[-2000:]
    assert "would take 19600000000 bytes, more than half this machine's memory" in lines[0]


def test_inspect_an_archive_whose_metadata_has_the_wrong_types(archive, tmp_path):
    from tests.runtime.test_archive import reseal
    for key, value, pattern in [("memory_plan", [1, 2], r"metadata\.memory_plan: expected an object, got \[1, 2\]"),
                                ("ir", {"a": 1}, r"metadata\.ir: expected a string"),
                                ("memory_plan", {"arena_bytes": "big"}, r"memory_plan\.arena_bytes: expected an int")]:
        copy = tmp_path / "m.rpk"
        copy.write_bytes(archive.read_bytes())

        def edit(m, key=key, value=value):
            m["metadata"][key] = value
        reseal(copy, edit)
        for args in (["inspect", copy], ["inspect", copy, "--json"], ["run", copy]):
            one_error_line(invoke(*args), pattern)


# ---------------------------------------------------------------- item 16: empty models
@pytest.mark.parametrize("make, pattern", [
    (lambda: b"", r"the model has no graph \(an empty file"),
    (lambda: onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])], []),
        opset_imports=[onnx.helper.make_opsetid("", 17)]).SerializeToString(), "graph 'g' has no outputs"),
    (lambda: onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])]),
        opset_imports=[onnx.helper.make_opsetid("ai.onnx.ml", 3)]).SerializeToString(),
     r"uses ONNX ops but imports no opset of the default domain"),
])
def test_models_without_graph_outputs_or_opset_are_refused(tmp_path, make, pattern):
    (tmp_path / "m.onnx").write_bytes(make())
    one_error_line(invoke("convert", tmp_path / "m.onnx", "-o", tmp_path / "m.rpk"), pattern)
    assert not (tmp_path / "m.rpk").exists()


# ---------------------------------------------------------------- item 17: no option silently ignored
@pytest.mark.parametrize("args, pattern", [
    (["bench", "{archive}", "--dim", "nosuch=3", "-n", "1"], r"dims \['nosuch'\] do not name any dim"),
    (["bench", "{archive}", "--dim", "seq=2", "--dim", "seq=3", "-n", "1"], "--dim seq=... is given twice"),
    (["bench", "{archive}", "--dim", "seq=70..80", "-n", "1"], r"the range 70..80 lies outside the archive's"),
    (["convert", "{block}", "-o", "{tmp}/o.rpk", "--print-after", "NoSuchPass"],
     r"--print-after NoSuchPass: no such pass; the passes are .*FoldConstant"),
    (["inspect", "{archive}", "--dim", "seq=3"], "--dim chooses the dims to plot the plan at: it needs --plot"),
    (["inspect", "{archive}", "--plan", "--plot", "{tmp}/p.svg", "--dim", "seq=1..3"], "not ranges"),
    (["check", "{block}", "--rtol", "-1", "--samples", "1"], "must be non-negative numbers"),
    (["check", "{block}", "--atol", "nan", "--samples", "1"], "must be non-negative numbers"),
    (["run", "{archive}", "--input", "x={tmp}/x.npy", "--input", "x={tmp}/x.npy"], r"--input x=\.\.\. is given twice"),
    (["run", "{archive}", "--inputs", "{tmp}/x.npz", "--inputs", "{tmp}/x.npz"], r"--inputs: given twice"),
])
def test_options_that_would_be_ignored_are_errors(archive, models, tmp_path, args, pattern):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32), np.float32))
    values = {"archive": archive, "block": models["block"], "tmp": tmp_path}
    one_error_line(invoke(*[a.format(**values) for a in args]), pattern)


def test_bench_draws_a_dim_from_the_range_it_is_given(archive):
    for seed in range(4):
        result = invoke("bench", archive, "--dim", "seq=2..3", "--dim", "batch=5", "-n", "1", "--seed", seed)
        assert result.exit_code == 0, result.output
        assert "x[5, 2, 32]" in result.output or "x[5, 3, 32]" in result.output, result.output


# ---------------------------------------------------------------- item 18: clear messages
def test_a_dim_too_large_for_any_tensor(models, archive, tmp_path):
    one_error_line(invoke("convert", models["block"], "-o", tmp_path / "o.rpk", "--dim",
                          "seq=99999999999999999999999"), r"a dim is at most 2\*\*48")
    one_error_line(invoke("bench", archive, "--dim", "batch=99999999999999999999999", "-n", "1"),
                   r"a dim is at most 2\*\*48")


def test_a_float_range_of_1e60_values(tmp_path):
    from onnx import TensorProto, helper, numpy_helper
    bounds = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("a", 0), ("b", 1e30), ("c", 1e-30))]
    graph = helper.make_graph([helper.make_node("Range", ["a", "b", "c"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], bounds)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "r.onnx"))
    line = one_error_line(invoke("convert", tmp_path / "r.onnx", "-o", tmp_path / "r.rpk"),
                          r"give 1e\+60 values, more than any tensor can hold")
    assert "OverflowError" not in line


# ---------------------------------------------------------------- item 19: nothing printed raw
HOSTILE = "x\x1b]0;pwned\x07\x9b31m\u202e\nerror: forged"


def test_names_from_a_model_or_archive_reach_the_terminal_escaped(tmp_path):
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", [HOSTILE], ["y\x1b[31m"])], "g",
                              [helper.make_tensor_value_info(HOSTILE, TensorProto.FLOAT, ["n\x1b", 3])],
                              [helper.make_tensor_value_info("y\x1b[31m", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10),
              str(tmp_path / "evil.onnx"))
    np.savez(tmp_path / "in.npz", **{HOSTILE: np.ones((2, 3), np.float32)})
    np.savez(tmp_path / "bad.npz", **{HOSTILE + "2": np.ones((2, 3), np.float32)})
    results = [invoke("convert", tmp_path / "evil.onnx", "-o", tmp_path / "evil.rpk"),
               invoke("inspect", tmp_path / "evil.rpk"), invoke("inspect", tmp_path / "evil.rpk", "--bytecode"),
               invoke("run", tmp_path / "evil.rpk", "--inputs", tmp_path / "in.npz"),
               invoke("check", tmp_path / "evil.onnx", "--samples", "1"),
               invoke("run", tmp_path / "evil.rpk", "--inputs", tmp_path / "bad.npz")]
    assert [r.exit_code for r in results] == [0, 0, 0, 0, 0, 1], [r.output for r in results]
    for result in results:
        text = result.output
        assert not any(c in text for c in "\x1b\x07\x9b\u202e"), text
        assert not [line for line in text.splitlines() if line.startswith("error: forged")], text
    assert "x\\x1b]0;pwned\\x07\\x9b31m\\u202e\\x0aerror: forged" in results[1].output
