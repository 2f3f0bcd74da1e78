import shlex
import subprocess
import sys


from tests.cli_helpers import invoke
from relaxpack.examples import transformer_block

def test_help_lists_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("demo", "ir", "version"):
        assert command in result.output


def test_demo_converts_runs_and_checks_against_onnxruntime(tmp_path):
    result = invoke("demo", "-o", tmp_path)
    assert result.exit_code == 0, result.output
    assert "IR well formed; text round trip: yes" in result.output
    assert result.output.count("PASS") == 3 and "FAIL" not in result.output
    assert (tmp_path / "transformer_block.rpk").is_file() and (tmp_path / "transformer_block.onnx").is_file()
    with_ir = invoke("demo", "--ir", "-o", tmp_path)
    assert "R.nn.layer_norm" in with_ir.output and "R.shape([batch, seq, 4, 8])" in with_ir.output


def test_the_commands_the_demo_suggests_work(tmp_path):
    """The demo writes its archive and ends with the next commands; each of them runs as typed."""
    demo = subprocess.run([sys.executable, "-m", "relaxpack.cli", "demo"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert demo.returncode == 0, demo.stderr
    commands = demo.stdout.split("next, try:\n", 1)[1].strip().splitlines()
    assert len(commands) >= 5 and any(c.strip().startswith("relaxpack check") for c in commands)
    for command in commands:
        argv = shlex.split(command)
        argv = ([sys.executable, "-m", "relaxpack.cli", *argv[1:]] if argv[0] == "relaxpack"
                else [sys.executable, *argv[1:]])
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.strip(), command
    assert (tmp_path / "plan.svg").is_file()


def test_ir_command_reads_checks_and_prints(tmp_path):
    path = tmp_path / "block.py"
    path.write_text(transformer_block().script())
    result = invoke("ir", str(path))
    assert result.exit_code == 0, result.output
    assert "R.nn.softmax" in result.output


def test_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("this is not a module")
    result = invoke("ir", str(bad))
    assert result.exit_code == 1
    assert result.output.startswith("error: ")
    assert "Traceback" not in result.output
    missing = invoke("ir", str(tmp_path / "nope.py"))
    assert missing.exit_code == 1 and "No such file" in missing.output


def test_console_script_runs_as_a_process():
    out = subprocess.run([sys.executable, "-m", "relaxpack.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout
