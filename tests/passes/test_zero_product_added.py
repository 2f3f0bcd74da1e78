"""DropZeroSignRoundTrips' vanishing terms (passes/drop_zero_sign_round_trips._zero_product_added,
``_finite_addend_dropped``): ``add(multiply(x, Z), y)`` for a constant ``Z`` of zeros and a finite
``x`` is ``y`` broadcast to the sum's shape where nothing reads a zero's sign (a QOperator add
requantizing an operand by a multiplier of 0), and so is ``x + y`` read only over infinities (a QDQ
quantizer of scale inf); ``x`` goes. An ``x`` that may be inf or NaN, a nonzero in ``Z``, a finite
divisor, a sum read elsewhere, a sign read and float16 keep the sum. Each case runs before and
after: the same bits (``y`` at float32's largest values too)."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.canonicalize_bindings import canonicalize_bindings
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.drop_zero_sign_round_trips import drop_zero_sign_round_trips
from relaxpack.runtime import VirtualMachine

from .helpers import ops_of, program, run_pass

PASS = Sequential([drop_zero_sign_round_trips, canonicalize_bindings, dead_code_elimination], name="DropZeroSign+")
PARAMS = 'x: R.Tensor(("n", 3), "float32"), m: R.Tensor(("n", 1), "float32")'


def _program(operand: str = "lv1", zeros: str = 'R.const(0.0, "float32")', tail: str = "") -> str:
    """``clip(add(multiply(operand, zeros), m * 2), 0, 255)`` cast to uint8 (or ``tail``)."""
    body = f"""
lv = R.round(x)
lv1 = R.clip(lv, min=-105.0, max=150.0, saturate_nan=True)
lv2 = R.multiply({operand}, {zeros})
lv3 = R.multiply(m, R.const(2.0, "float32"))
lv4 = R.add(lv2, lv3)
lv5 = R.clip(lv4, min=0.0, max=255.0, saturate_nan=True)
""" + (tail or 'lv6 = R.astype(lv5, dtype="uint8")\nreturn lv6')
    return program(PARAMS, '("n", 3)', body, dtype="float32" if tail else "uint8")


def _run(mod, x, m):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x, "m": m})
    return [np.asarray(v) for v in result.values()]


def _inputs():
    rng = np.random.default_rng(4)
    x = rng.normal(0, 200, (40, 3)).astype(np.float32)
    x[:6, 0] = [np.nan, np.inf, -np.inf, -0.0, 0.0, -0.3]
    m = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 7.5, np.nan, np.inf, -np.inf, 300.0], np.float32), (40, 1))
    return x, m


def _assert_same_bits(before, after):
    for x, m in (_inputs(), (np.zeros((0, 3), np.float32), np.zeros((0, 1), np.float32))):
        for want, got in zip(_run(before, x, m), _run(after, x, m), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("zeros", ['R.const(0.0, "float32")', 'R.const(-0.0, "float32")',
                                   'R.const([0.0, -0.0, 0.0], "float32")'])
def test_a_zero_product_of_a_finite_value_goes(zeros):
    """The product by zeros (either sign, a vector of them) of a clipped value: the add is the other
    operand broadcast to the sum's shape, and the clipped value is no longer computed."""
    mod = parse(_program(zeros=zeros))
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    assert "broadcast_to" in ops and "round" not in ops and ops.count("multiply") == 1
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, kwargs", [
    ("x may be inf or NaN", dict(operand="x")),
    ("a nonzero in Z", dict(zeros='R.const([0.0, 1e-30, 0.0], "float32")')),
    ("the sum's sign is read", dict(tail="return lv5")),
])
def test_lookalikes_keep_the_add(case, kwargs):
    mod = parse(_program(**kwargs))
    out = run_pass(PASS, mod)
    assert "broadcast_to" not in ops_of(out) and ops_of(out).count("multiply") == 2, case
    _assert_same_bits(mod, out)


def _quotient(divisor: str = 'R.const(inf, "float32")', operand: str = "lv1", tail: str = "", dtype="float32") -> str:
    """``clip(round((operand + m) / divisor), -128, 127)`` cast to int8 (or ``tail``)."""
    body = f"""
lv = R.round(x)
lv1 = R.clip(lv, min=-105.0, max=150.0, saturate_nan=True)
lv2 = R.add({operand}, m)
lv3 = R.divide(lv2, {divisor})
lv4 = R.round(lv3)
lv5 = R.clip(lv4, min=-128.0, max=127.0, saturate_nan=True)
""" + (tail or 'lv6 = R.astype(lv5, dtype="int8")\nreturn lv6')
    text = program(PARAMS, '("n", 3)', body, dtype="float32" if tail else "int8")
    return text.replace('"float32")', f'"{dtype}")') if dtype != "float32" else text


def _inputs_near_the_top():
    x, m = _inputs()
    m[:4, 0] = [3.4028235e38, -3.4028235e38, 3.3e38, 1e-45]     # x + m must not overflow
    return x, m


@pytest.mark.parametrize("divisor", ['R.const(inf, "float32")', 'R.const(-inf, "float32")',
                                     'R.const([inf, inf, -inf], "float32")'])
def test_a_finite_addend_over_infinity_goes(divisor):
    """(x + m) / inf for a clipped x: m broadcast, divided (zeros, or inf / inf's NaN, or m's NaN)."""
    mod = parse(_quotient(divisor))
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    assert "broadcast_to" in ops and "add" not in ops and ops.count("round") == 1
    for x, m in (_inputs_near_the_top(), (np.zeros((0, 3), np.float32), np.zeros((0, 1), np.float32))):
        for want, got in zip(_run(mod, x, m), _run(out, x, m), strict=True):
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("case, text", [
    ("a finite divisor", _quotient('R.const(1e38, "float32")')),
    ("x may be inf or NaN", _quotient(operand="x")),
    ("the sum read elsewhere", _quotient(tail="return (lv5, lv2)")),
    ("the quotient's sign read", _quotient(tail="return lv5")),
    ("float16", _quotient(dtype="float16")),
], ids=lambda v: v if len(v) < 40 else "")
def test_lookalikes_keep_the_sum(case, text):
    if case == "the sum read elsewhere":
        text = text.replace('-> R.Tensor(("n", 3), "float32")',
                            '-> R.Tuple(R.Tensor(("n", 3), "float32"), R.Tensor(("n", 3), "float32"))')
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert "broadcast_to" not in ops_of(out) and "add" in ops_of(out), case
    if case != "float16":
        x, m = _inputs_near_the_top()
        with np.errstate(all="ignore"):
            for want, got in zip(_run(mod, x, m), _run(out, x, m), strict=True):
                assert got.tobytes() == want.tobytes()
