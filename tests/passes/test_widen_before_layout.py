"""SimplifyAlgebra's widen_before_layout (passes/quantize_rules.py): a quantized value reshaped and
permuted (attention's heads) and then widened for an integer product has its widening moved before
the layout, where the casts meet the rules that drop them; the same bits. Lookalikes stay."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.ir.expr import Call
from relaxpack.passes.simplify_algebra import simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import program, run_pass, with_dce

PASS = with_dce(simplify_algebra)
PARAMS = 'x: R.Tensor(("n", 6), "float32")'
WEIGHT = 'R.const([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, -1.0, 2.0], [4.0, -3.0, 1.0, 0.25]], "float32")'


def _quantized(name: str = "q", zp: int = 123, source: str = "x") -> str:
    return f"""
{name}0 = R.round({source})
{name}1 = R.add({name}0, R.const({float(zp)}, "float32"))
{name}2 = R.clip({name}1, min=0.0, max=255.0, saturate_nan=True)
{name} = R.astype({name}2, dtype="uint8")
"""


def _laid_out(q: str = "q", out: str = "p", axes: str = "(1, 0, 2)") -> str:
    return f"""
{out}0 = R.reshape({q}, R.shape([n, 2, 3]))
{out} = R.permute_dims({out}0, axes={axes})
"""


INTEGER_WIDEN = """
w0 = R.astype(p, dtype="int32")
w1 = R.subtract(w0, R.const({k}, "int32"))
w = R.astype(w1, dtype="float32")
"""
FLOAT_WIDEN = """
w0 = R.astype(p, dtype="float32")
w = R.subtract(w0, R.const({k}, "float32"))
"""


def _program(widen: str, k=123, tail: str = "", ret: str = "y", ret_type: str = '(2, "n", 4)') -> str:
    body = _quantized() + _laid_out() + widen.format(k=k) + f"y = R.matmul(w, {WEIGHT})\n" + tail + f"return {ret}"
    return program(PARAMS, ret_type, body)


def _run(mod, x):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    return [np.asarray(v) for v in result.values()]


def _values(n: int = 40) -> np.ndarray:
    """Values at and next to rounding ties, past the clip's bounds, NaN and infinities."""
    rng = np.random.default_rng(3)
    x = rng.integers(-140, 150, n * 6).astype(np.float32) + rng.choice([0.0, 0.5, -0.5, 0.49999997], n * 6)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -0.3, 1e30, -1e30], np.float32)
    x[:special.size] = special[:x.size]
    return x.astype(np.float32).reshape(n, 6)


def _assert_same_bits(before, after):
    for x in (_values(), _values(1), np.zeros((0, 6), np.float32)):
        for want, got in zip(_run(before, x), _run(after, x), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            assert got.tobytes() == want.tobytes()


def _layouts(mod) -> list[str]:
    """The dtype of each reshape / permute_dims result in main."""
    return [b.value.struct_info.dtype for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, Call) and b.value.op.name in ("reshape", "permute_dims")]


@pytest.mark.parametrize("widen", [INTEGER_WIDEN, FLOAT_WIDEN], ids=["integer shift", "float shift"])
def test_the_widening_moves_before_the_layout(widen):
    """The layout then moves the widened float32 values; the uint8 value and its casts are gone
    (the round trip rules took them), and the product reads the same values."""
    mod = parse(_program(widen))
    out = run_pass(PASS, mod)
    assert _layouts(mod) == ["uint8", "uint8"] and _layouts(out) == ["float32", "float32"]
    assert "uint8" not in out.script()
    _assert_same_bits(mod, out)


def test_both_operands_of_a_product():
    """q @ k^T with both operands laid-out quantized values: both widenings move."""
    body = (_quantized("q") + _quantized("k", zp=116) + _laid_out("q", "p") + _laid_out("k", "t", "(1, 2, 0)")
            + INTEGER_WIDEN.format(k=123)
            + 'v0 = R.astype(t, dtype="int32")\nv1 = R.subtract(v0, R.const(116, "int32"))\n'
            + 'v = R.astype(v1, dtype="float32")\ny = R.matmul(w, v)\nreturn y')
    mod = parse(program(PARAMS, '(2, "n", "n")', body))
    out = run_pass(PASS, mod)
    assert set(_layouts(out)) == {"float32"} and "uint8" not in out.script()
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, text", [
    ("the laid-out value read twice", _program(INTEGER_WIDEN, tail="", ret="(y, p)", ret_type="")),
    ("a per-column zero point", _program(FLOAT_WIDEN.replace("R.const({k}, \"float32\")",
                                                             'R.const([1.0, 2.0, 3.0], "float32")'))),
    ("read by an add, not a product", _program(INTEGER_WIDEN).replace(f"R.matmul(w, {WEIGHT})",
                                                                      'R.add(w, R.const(1.0, "float32"))')),
    ("a float value laid out", _program(FLOAT_WIDEN).replace('q = R.astype(q2, dtype="uint8")',
                                                             'q = R.astype(q2, dtype="float16")')),
], ids=lambda v: v if len(v) < 40 else "")
def test_lookalikes_keep_their_layout(case, text):
    if case == "the laid-out value read twice":
        text = text.replace('-> R.Tensor(, "float32")',
                            '-> R.Tuple(R.Tensor((2, "n", 4), "float32"), R.Tensor((2, "n", 3), "uint8"))')
    if case == "read by an add, not a product":
        text = text.replace('R.Tensor((2, "n", 4), "float32")', 'R.Tensor((2, "n", 3), "float32")')
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert _layouts(out) == _layouts(mod), case
    _assert_same_bits(mod, out)


def test_a_vector_zero_point_stays_after_a_permutation():
    """A zero point of one value per column, where the permutation moves that axis: subtracted
    before the layout it would meet other columns, so the rule keeps the layout (the operand
    shapes would allow it)."""
    body = """
q0 = R.round(x)
q1 = R.clip(q0, min=0.0, max=255.0, saturate_nan=True)
q = R.astype(q1, dtype="uint8")
p = R.permute_dims(q, axes=(0, 2, 1))
w0 = R.astype(p, dtype="float32")
w = R.subtract(w0, R.const([1.0, 2.0, 3.0], "float32"))
y = R.matmul(w, R.const([[1.0, -2.0], [0.0, 1.0], [4.0, -3.0]], "float32"))
return y
"""
    mod = parse(program('x: R.Tensor(("n", 3, 3), "float32")', '("n", 3, 2)', body))
    out = run_pass(PASS, mod)
    assert _layouts(out) == ["uint8"]
    x = _values(12).reshape(8, 3, 3)
    for want, got in zip(_run(mod, x), _run(out, x), strict=True):
        assert got.tobytes() == want.tobytes()
