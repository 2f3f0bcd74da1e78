"""Dim text is data (issue 20, item 10): powers, polynomials and numbers written in
a dim string are bounded, in the IR text format and in archives' input shapes,
so ``"n ** 300000000"`` is an error at once instead of a hang. The hostile
strings run in a subprocess with a timeout (they hang where this is not fixed)."""

import json
import subprocess
import sys
import textwrap

import pytest

from relaxpack.errors import ArchiveError, DimError
from relaxpack.ir.dims import MAX_TEXT_POWER, parse_dim

HOSTILE = ["n ** 300000000", "2 ** 300000000", "(a + b + c + d + e + f + g + h) ** 64", "(99 ** 64) ** 64",
           "n" + " + n" * 20000, "n ** m", "n ** -1"]


def run(script: str, timeout: float = 60) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_hostile_dim_text_is_refused_at_once():
    out = run(f"""
        import time
        from relaxpack.errors import DimError
        from relaxpack.ir.dims import parse_dim
        for text in {HOSTILE!r}:
            t0 = time.perf_counter()
            try:
                parse_dim(text)
                print("accepted", text[:40])
            except DimError as err:
                print("refused", round(time.perf_counter() - t0, 3), str(err)[:100])
    """)
    lines = out.splitlines()
    assert len(lines) == len(HOSTILE) and all(line.startswith("refused") for line in lines), out
    assert all(float(line.split()[1]) < 1.0 for line in lines), out


def test_ordinary_dims_still_parse():
    assert str(parse_dim("n ** 2")) == "n ** 2"
    assert str(parse_dim("(n + 1) ** 3")) == "n ** 3 + 3 * n ** 2 + 3 * n + 1"
    assert str(parse_dim(f"n ** {MAX_TEXT_POWER}")) == f"n ** {MAX_TEXT_POWER}"
    assert str(parse_dim("min(seq, 512) * 2 + (n + 1) // 2")) == "(n + 1) // 2 + 2 * min(seq, 512)"
    with pytest.raises(DimError, match=r"exponent of \*\* must be an integer in 0..64"):
        parse_dim(f"n ** {MAX_TEXT_POWER + 1}")


def test_the_ir_text_format_refuses_huge_powers():
    out = run('''
        from relaxpack.errors import RelaxpackError
        from relaxpack.ir import parse
        text = """
        @I.ir_module
        class Module:
            @R.function
            def main(x: R.Tensor(("n ** 300000000",), "float32")) -> R.Tensor(("n ** 300000000",), "float32"):
                return x
        """
        try:
            parse(text)
            print("accepted")
        except RelaxpackError as err:
            print("refused", str(err).splitlines()[0][:200])
    ''')
    assert out.startswith("refused") and "exponent of ** must be an integer in 0..64" in out, out


def test_an_archive_whose_input_shape_holds_a_huge_power_is_refused_at_load(tmp_path):
    import numpy as np

    import relaxpack
    from relaxpack.runtime import load
    from tests.runtime.test_archive import reseal
    n = relaxpack.ir.sym("n")
    x = relaxpack.ir.Var("x", relaxpack.ir.TensorStructInfo((n,), "float32"))
    bb = relaxpack.ir.BlockBuilder()
    from relaxpack.ops import make_call
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(make_call("exp", x), "y"))
    relaxpack.build(bb.get()).save(tmp_path / "m.rpk")

    def power(m):
        for params in (m["inputs"], m["functions"][0]["params"]):
            params[0]["shape"] = ["n ** 300000000"]
    reseal(tmp_path / "m.rpk", power)
    with pytest.raises(ArchiveError, match=r"raises to a power other than a literal 0..64"):
        load(tmp_path / "m.rpk")
    out = run(f"""
        from tests.cli_helpers import invoke
        result = invoke("bench", {str(tmp_path / 'm.rpk')!r}, "-n", "1")
        print(result.exit_code, result.output.strip()[:300])
    """)
    assert out.startswith("1 error: ") and "power" in out, out
    assert json and np   # (the archive's manifest is JSON; inputs are numpy arrays)
