"""ShareLookUps (passes/share_look_ups.py): of two look-ups by one index, the later one becomes a cast
and a shift of the earlier one's result where its table is that cast and shift of the other's, bit
for bit (a quantized SiLU read as integers by a pool and, less its zero point, as floats by a
product); the same values before and after, in range and past it; tables off by one entry, of
another length, read by another index or with other attributes keep their look-ups."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir import parse
from relaxpack.passes.share_look_ups import share_look_ups, shift_between

from .helpers import program, run_pass
from .test_drop_zero_sign_round_trips import _assert_same_bits
from .test_quantize_rules import _values

PARAMS = 'x: R.Tensor(("n",), "float32")'
RNG = np.random.default_rng(7)
INTS = RNG.integers(0, 256, 256).astype(np.int32)


def c(values: np.ndarray) -> str:
    return f'R.const({values.tolist()}, "{values.dtype}")'


def _program(first: np.ndarray, second: np.ndarray, attrs: str = "in_bounds=True", other_index: bool = False,
             ret: str = "float32") -> str:
    """x quantized to 0..255, two look-ups by it, the second's result times the first's as ``ret``."""
    index2 = "lv4" if not other_index else "lv5"
    body = f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
lv3 = R.subtract(lv2, R.const(-128.0, "float32"))
lv4 = R.astype(lv3, dtype="int64")
lv5 = R.astype(R.subtract(R.const(255.0, "float32"), lv3), dtype="int64")
lv6 = R.take({c(first)}, lv4, axis=0, in_bounds=True)
lv7 = R.take({c(second)}, {index2}, axis=0, {attrs})
lv8 = R.multiply(R.astype(lv6, dtype="{ret}"), R.astype(lv7, dtype="{ret}"))
return lv8
"""
    return program(PARAMS, '("n",)', body, dtype=ret)


def _x() -> np.ndarray:
    return np.concatenate([_values(), np.float32([-32.0, 31.75, -32.125, 31.875, np.nan, np.inf, -np.inf])])


def _takes(mod) -> int:
    return sum(getattr(getattr(b.value, "op", None), "name", None) == "take"
               for block in mod["main"].body.blocks for b in block.bindings)


@pytest.mark.parametrize("case, second", [
    ("the integers less a zero point, as float32", (INTS - 30).astype(np.float32)),
    ("the integers as float32", INTS.astype(np.float32)),
    ("the same table", INTS),
    ("the integers plus a shift, as int32", INTS + 1000),
    ("the integers as float64 less a fraction", INTS.astype(np.float64) - 0.5),
])
def test_a_shifted_table_reads_the_other_look_up(case, second):
    mod = parse(_program(INTS, second))
    out = run_pass(share_look_ups, mod)
    assert (_takes(mod), _takes(out)) == (2, 1), case
    assert _takes(run_pass(share_look_ups, out)) == 1                  # idempotent
    _assert_same_bits(mod, out, _x())


def test_a_float_table_from_a_float_table():
    first = (INTS * 0.25 - 3).astype(np.float32)
    mod = parse(_program(first, first + np.float32(0.5)))
    out = run_pass(share_look_ups, mod)
    assert _takes(out) == 1
    _assert_same_bits(mod, out, _x())


def _off_by_one() -> np.ndarray:
    second = (INTS - 30).astype(np.float32)
    second[200] += 1
    return second


@pytest.mark.parametrize("case, second, attrs, other_index", [
    ("one entry off", _off_by_one(), "in_bounds=True", False),
    ("another length", np.concatenate([INTS, INTS[:1]]).astype(np.float32), "in_bounds=True", False),
    ("not a shift: a scale", (INTS * 2).astype(np.float32), "in_bounds=True", False),
    ("another index", (INTS - 30).astype(np.float32), "in_bounds=True", True),
    ("other attributes", (INTS - 30).astype(np.float32), "in_bounds=False", False),
])
def test_lookalikes_keep_their_look_ups(case, second, attrs, other_index):
    mod = parse(_program(INTS, second, attrs, other_index))
    out = run_pass(share_look_ups, mod)
    assert _takes(out) == 2, case
    _assert_same_bits(mod, out, _x())


def test_a_float_table_does_not_give_an_integer_one():
    """A float look-up's result cast to an integer type: no shift is tried (casts of fractions truncate)."""
    mod = parse(_program(INTS.astype(np.float32), INTS))
    assert _takes(run_pass(share_look_ups, mod)) == 2


@pytest.mark.parametrize("a, b, want", [
    (np.int32([1, 2, 3]), np.float32([1, 2, 3]), None),
    (np.int32([1, 2, 3]), np.float32([-1, 0, 1]), np.float32(-2)),
    (np.float32([0.0, 1.0]), np.float32([-0.0, 1.0]), False),       # + 0.0 cannot make -0.0
    (np.float32([-0.0, 1.0]), np.float32([0.0, 1.0]), np.float32(0.0)),  # but makes +0.0 of it
    (np.float32([np.inf, 1.0]), np.float32([np.inf, 2.0]), False),  # no shift of infinities
    (np.float32([1e8, 1.0]), np.float32([1e8, 2.0]), False),        # the add rounds: 1e8 + 1 is 1e8
    (np.int8([127, 0]), np.int8([-128, 1]), np.int8(1)),            # wraps as the kernel's add does
    (np.int8([0, 1]), np.int16([0, 1, 2]), False),                  # lengths
])
def test_shift_between(a, b, want):
    got = shift_between(a, b)
    if want is None or want is False:
        assert got is want
    else:
        assert got.dtype == b.dtype and got.shape == () and got == want
