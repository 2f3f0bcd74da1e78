"""``relaxpack serve``'s command line: names, option checks, and the one line a runtime-only
install gives (numpy alone: starlette and uvicorn are the ``serve`` extra)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from tests.cli_helpers import invoke
from tests.serve.models import lookup_onnx, save

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli_serve") / "lookup.rpk"
    save(lookup_onnx(), path, batch=(1, 8), k=(1, 4))
    return path


def test_without_the_extra_serve_says_what_to_install(archive):
    code = textwrap.dedent(f'''
        import sys
        for name in ("starlette", "uvicorn"):
            sys.modules[name] = None
        from relaxpack.cli import main
        sys.exit(main(["serve", {str(archive)!r}]))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == ("error: relaxpack serve needs starlette and uvicorn, which this install lacks: "
                          "pip install 'relaxpack[serve]'\n")


@pytest.mark.parametrize("args, message", [
    (["--name", "a", "--name", "b"], "--name is given 2 time(s) for 1 archive(s)"),
    (["--name", "a b"], "model name 'a b'"),
    (["--batch-delay-ms", "5"], "--batch-delay-ms needs --batch-max-size"),
    (["--port", "70000"], "70000 is not a port number (0..65535; 0 picks a free one)"),
    (["--batch-max-size", "2", "--batch-delay-ms", "soon"], "'soon' is not a number of milliseconds"),
    (["--max-concurrency", "0"], "0 is not at least 1"),
    (["--max-request-size", "lots"], "'lots' is not a size"),
])
def test_usage_errors_are_one_line(archive, args, message):
    result = invoke("serve", archive, *args)
    assert result.exit_code == 1 and result.exception is None, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_the_same_name_twice_is_refused(archive):
    result = invoke("serve", archive, archive)
    assert result.exit_code == 1 and "model name(s) ['lookup'] given to more than one archive" in result.stderr


def test_a_port_in_use_is_one_line(archive):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke("serve", archive, "--port", port)
    assert result.exit_code == 1 and result.exception is None
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: ") and result.stderr.count("\n") == 1


def test_a_model_the_protocol_cannot_carry_is_refused_at_start(tmp_path):
    from onnx import TensorProto, helper

    import relaxpack
    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"])], "seq",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    relaxpack.build(relaxpack.from_onnx(model)).save(tmp_path / "seq.rpk")
    result = invoke("serve", tmp_path / "seq.rpk")
    assert result.exit_code == 1 and result.exception is None
    assert result.stderr == ("error: model 'seq': output 's' is a sequence; the Open Inference Protocol carries "
                             "tensors only\n")
