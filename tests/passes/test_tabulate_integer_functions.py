"""TabulateIntegerFunctions (passes/tabulate_integer_functions.py): an elementwise chain of a value
with few integer values (a quantized value) becomes a look-up in the chain evaluated on every one
of them; the same bits on ties, bounds, NaN, infinities and signed zeros; chains too cheap, too
wide a range, reading another tensor, or telling -0.0 from +0.0 where that shows, stay."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.canonicalize_bindings import canonicalize_bindings
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.tabulate_integer_functions import tabulate_integer_functions
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, ops_of, program, run_pass
from .test_quantize_rules import _values

PASS = Sequential([tabulate_integer_functions, canonicalize_bindings, dead_code_elimination], name="Tabulate+")
PARAMS = 'x: R.Tensor(("n",), "float32")'


def _gelu_chain(lo: float = -3.0, hi: float = 4.0, tail: str = 'lv6 = R.add(lv5, R.const(1.0, "float32"))',
                saturate: bool = True) -> str:
    """x quantized to [lo, hi], dequantized, through an erf GELU's pieces, then ``tail``."""
    return f"""
lv = R.round(x)
q = R.clip(lv, min={lo}, max={hi}, saturate_nan={saturate})
lv1 = R.multiply(q, R.const(0.5, "float32"))
lv2 = R.erf(lv1)
lv3 = R.add(lv2, R.const(1.0, "float32"))
lv4 = R.multiply(lv3, q)
lv5 = R.multiply(lv4, R.const(0.5, "float32"))
{tail}
"""


def _run(mod, x) -> list[np.ndarray]:
    return [np.asarray(v) for v in VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x}).values()]


def _assert_same_bits(before, after, x=None):
    x = _values() if x is None else x
    for want, got in zip(_run(before, x), _run(after, x), strict=True):
        assert want.dtype == got.dtype and want.shape == got.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_a_gelu_of_a_quantized_value_becomes_a_look_up():
    before = program(PARAMS, '("n",)', _gelu_chain() + "return lv6")
    mod = parse(before)
    table = _run(mod, np.arange(-3.0, 5.0, dtype=np.float32))[0]
    constant = f'R.const({[float(v) for v in table]}, "float32")'
    expected = program(PARAMS, '("n",)', f"""
lv = R.round(x)
q = R.clip(lv, min=-3.0, max=4.0, saturate_nan=True)
lv6_shifted = R.subtract(q, R.const(-3.0, "float32"))
lv6_index = R.astype(lv6_shifted, dtype="int64")
lv6 = R.take({constant}, lv6_index, axis=0, in_bounds=True)
return lv6
""")
    mod, out = assert_rewrites(PASS, before, expected)
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("lo, hi", [(0.0, 255.0), (-128.0, 127.0), (-300.0, 723.0), (5.0, 5.0)])
def test_each_range_with_the_same_bits(lo, hi):
    """uint8 and int8 ranges, the widest table (1024 values), one value; no subtract from 0."""
    mod = parse(program(PARAMS, '("n",)', _gelu_chain(lo, hi) + "return lv6"))
    out = run_pass(PASS, mod)
    assert "erf" not in ops_of(out) and "take" in ops_of(out)
    assert ("subtract" in ops_of(out)) == (lo != 0)
    _assert_same_bits(mod, out)
    _assert_same_bits(mod, out, np.zeros(0, np.float32))


def test_a_quantized_result_with_the_same_bits():
    """The chain ends quantized again (uint8): the table is uint8."""
    tail = """lv6 = R.divide(lv5, R.const(0.0625, "float32"))
lv7 = R.round(lv6)
lv8 = R.clip(lv7, min=0.0, max=255.0, saturate_nan=True)
lv9 = R.astype(lv8, dtype="uint8")"""
    mod = parse(program(PARAMS, '("n",)', _gelu_chain(-128.0, 127.0, tail) + "return lv9", dtype="uint8"))
    out = run_pass(PASS, mod)
    assert ops_of(out)[-1] == "take" and "erf" not in ops_of(out)
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, kwargs", [
    ("a range of 1025 values", dict(lo=-512.0, hi=512.0)),
    ("NaN kept by the clip", dict(saturate=False)),
    ("a fractional bound", dict(lo=-2.5)),
])
def test_inputs_that_are_not_tabulated(case, kwargs):
    mod = parse(program(PARAMS, '("n",)', _gelu_chain(**kwargs) + "return lv6"))
    out = run_pass(PASS, mod)
    assert "erf" in ops_of(out), case
    _assert_same_bits(mod, out)


def test_a_cheap_chain_stays():
    """A few arithmetic passes cost less than numpy's take on large arrays."""
    mod = parse(program(PARAMS, '("n",)', """
lv = R.round(x)
q = R.clip(lv, min=-3.0, max=4.0, saturate_nan=True)
lv1 = R.multiply(q, R.const(0.5, "float32"))
lv2 = R.add(lv1, R.const(1.0, "float32"))
lv3 = R.multiply(lv2, q)
return lv3
"""))
    assert "take" not in ops_of(run_pass(PASS, mod))


def test_a_chain_reading_another_tensor_stays():
    """q in 1..8 (never a zero): the GELU is a function of q alone, the add of y is not."""
    text = program('x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")', '("n",)',
                   _gelu_chain(1.0, 8.0, tail='lv6 = R.add(lv5, y)') + "return lv6")
    mod = parse(text)
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    # the GELU before the add is a function of q alone: it is tabulated, the add stays
    assert "erf" not in ops and ops[-2:] == ["take", "add"]
    x, y = _values(), np.linspace(-2, 2, _values().size).astype(np.float32)
    want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x, "y": y})
    got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"x": x, "y": y})
    np.testing.assert_array_equal(np.asarray(list(got.values())[0]).view(np.uint8),
                                  np.asarray(list(want.values())[0]).view(np.uint8))


@pytest.mark.parametrize("tail, tabulated", [
    # the result at -0.0 is -0.0 (erf(-0.0) * -0.0...): returned, its sign shows: no table
    ("lv6 = R.multiply(lv5, R.const(3.0, \"float32\"))", False),
    # the same, then cast to int32: the sign goes
    ("lv6 = R.multiply(lv5, R.const(3.0, \"float32\"))\nlv7 = R.astype(lv6, dtype=\"int32\")", True),
    # a reciprocal of q: -inf at -0.0, +inf at +0.0: never the same, no table
    ("lv6 = R.divide(R.const(1.0, \"float32\"), lv5)\nlv7 = R.clip(lv6, min=-10.0, max=10.0, saturate_nan=True)\n"
     "lv8 = R.astype(lv7, dtype=\"int32\")", False),
])
def test_a_negative_zero_input(tail, tabulated):
    last = tail.splitlines()[-1].split(" = ")[0]
    dtype = "int32" if "int32" in tail else "float32"
    mod = parse(program(PARAMS, '("n",)', _gelu_chain(tail=tail) + f"return {last}", dtype=dtype))
    out = run_pass(PASS, mod)
    assert ("take" in ops_of(out)) == tabulated
    _assert_same_bits(mod, out, np.array([-0.0, 0.0, -0.3, 0.3, 1.0, -1.0, np.nan, np.inf, -np.inf], np.float32))
    _assert_same_bits(mod, out)


def _silu(k: float = 10.0, operand: str = "min=-10.0, max=245.0") -> str:
    """QLinearSigmoid's table look-up at clip(r + k) times QLinearMul's operand clip(r), requantized."""
    table = [int(v) for v in np.arange(256) % 97]
    return program(PARAMS, '("n",)', f"""
lv = R.round(x)
lv1 = R.add(lv, R.const({k}, "float32"))
lv2 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="int32")
lv4 = R.take(R.const({table}, "uint8"), lv3, axis=0)
lv4f = R.astype(lv4, dtype="float32")
lv5 = R.clip(lv, {operand}, saturate_nan=True)
lv6 = R.multiply(lv5, lv4f)
lv7 = R.multiply(lv6, R.const(0.01, "float32"))
lv8 = R.add(lv7, R.const(20.0, "float32"))
lv9 = R.round(lv8)
lv10 = R.clip(lv9, min=0.0, max=255.0, saturate_nan=True)
lv11 = R.astype(lv10, dtype="uint8")
return lv11
""", dtype="uint8")


def test_a_value_clipped_twice_is_one_look_up():
    """The index clip(r + 10, 0, 255) and the operand clip(r, -10, 245) are one clip shifted: the
    whole product is a function of the index's 256 values."""
    mod = parse(_silu())
    out = run_pass(PASS, mod)
    assert ops_of(out) == ["round", "add", "clip", "astype", "take"]
    _assert_same_bits(mod, out)
    _assert_same_bits(mod, out, np.array([-0.0, 0.0, -10.4, -10.5, 245.5, np.nan, np.inf, -np.inf], np.float32))


@pytest.mark.parametrize("case, kwargs", [
    ("the operand clipped to other bounds", dict(operand="min=-10.0, max=244.0")),
    ("a shift of 0 (x + 0 is not x: -0.0)", dict(k=0.0, operand="min=0.0, max=255.0")),
])
def test_clips_that_are_not_one_stay(case, kwargs):
    mod = parse(_silu(**kwargs))
    out = run_pass(PASS, mod)
    assert ops_of(out) == ops_of(mod), case
    _assert_same_bits(mod, out)


def test_two_look_ups_of_one_value_share_its_index():
    """A GELU and an erf of one quantized ``q``, each returned: two tables, one index (``q - lo`` as
    int64 made once in the block)."""
    text = program(PARAMS, '("n",)', _gelu_chain() + """lv7 = R.multiply(q, R.const(0.25, "float32"))
lv8 = R.erf(lv7)
lv9 = R.add(lv8, R.const(1.0, "float32"))
return (lv6, lv9)""")
    text = text.replace('-> R.Tensor(("n",), "float32"):', '-> R.Tuple(R.Tensor(("n",), "float32"), '
                        'R.Tensor(("n",), "float32")):')
    mod = parse(text)
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    assert ops.count("take") == 2 and ops.count("astype") == 1 and ops.count("subtract") == 1, ops
    _assert_same_bits(mod, out)
