"""NarrowIndexCasts (passes/narrow_index_casts.py): a float value known within [-2**30, 2**30] casts
to int64 through int32 (a table look-up's index); the same values before and after on ties, the
bounds, NaN and infinities (the quantizer saturates them). Values without a range, past the limit
(float32 rounds a clip's bound of 2**31 - 1 up to 2**31), other types keep the one cast."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir import parse
from relaxpack.passes.narrow_index_casts import LIMIT, narrow_index_casts

from .helpers import program, run_pass
from .test_drop_zero_sign_round_trips import _assert_same_bits
from .test_quantize_rules import _values

PARAMS = 'x: R.Tensor(("n",), "float32")'
TABLE = 'R.const(' + str([float(v) for v in np.arange(256) * 0.5 - 7]) + ', "float32")'

#: x quantized to int8 (NaN saturated), shifted to 0..255, a table look-up by it
LOOK_UP = f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
lv3 = R.subtract(lv2, R.const(-128.0, "float32"))
lv4 = R.astype(lv3, dtype="int64")
lv5 = R.take({TABLE}, lv4, axis=0, in_bounds=True)
return lv5
"""

#: x clipped to [lo, hi] and cast to int64
CAST = """
lv = R.clip(x, min={lo}, max={hi}, saturate_nan=True)
lv1 = R.astype(lv, dtype="{dtype}")
return lv1
"""


def _casts(mod) -> list[str]:
    """The dtype of each astype, in binding order."""
    return [b.value.attrs["dtype"] for block in mod["main"].body.blocks for b in block.bindings
            if getattr(getattr(b.value, "op", None), "name", None) == "astype"]


def test_a_look_up_index_casts_through_int32():
    mod = parse(program(PARAMS, '("n",)', LOOK_UP))
    out = run_pass(narrow_index_casts, mod)
    assert _casts(mod) == ["int64"] and _casts(out) == ["int32", "int64"]
    assert _casts(run_pass(narrow_index_casts, out)) == ["int32", "int64"]       # idempotent
    _assert_same_bits(mod, out, _values())
    _assert_same_bits(mod, out, np.zeros(0, np.float32))                              # empty


@pytest.mark.parametrize("lo, hi, narrowed", [
    (-LIMIT, LIMIT, True),                      # the limit itself
    (-2.5, 3.7, True),                          # fractional bounds: truncated alike
    (-2.0 ** 31, 2.0 ** 31 - 1, False),         # int32's ends: float32 rounds the top to 2**31
    (0.0, LIMIT * 2, False),
    (-LIMIT * 2, 0.0, False),
])
def test_the_limit(lo, hi, narrowed):
    mod = parse(program(PARAMS, '("n",)', CAST.format(lo=lo, hi=hi, dtype="int64"), dtype="int64"))
    out = run_pass(narrow_index_casts, mod)
    assert _casts(out) == (["int32", "int64"] if narrowed else ["int64"])
    x = np.concatenate([_values(), np.float32([lo, hi, np.nextafter(np.float32(hi), np.float32(0)),
                                               -2.5, 3.7, -0.0, 2.0 ** 31, -2.0 ** 31, 1e30, -1e30])])
    _assert_same_bits(mod, out, x.astype(np.float32))


@pytest.mark.parametrize("case, body, ret", [
    ("no range: x may be anything", "lv1 = R.astype(x, dtype=\"int64\")\nreturn lv1", "int64"),
    ("a NaN-propagating clip of an unbounded value",
     "lv = R.clip(x, min=0.0, max=255.0, saturate_nan=False)\nlv1 = R.astype(lv, dtype=\"int64\")\nreturn lv1",
     "int64"),
    ("to int32 already", CAST.format(lo=0.0, hi=255.0, dtype="int32"), "int32"),
    ("to uint64", CAST.format(lo=0.0, hi=255.0, dtype="uint64"), "uint64"),
])
def test_lookalikes_keep_the_cast(case, body, ret):
    mod = parse(program(PARAMS, '("n",)', body, dtype=ret))
    out = run_pass(narrow_index_casts, mod)
    assert _casts(out) == _casts(mod), case


def test_an_integer_value_keeps_its_cast():
    params = 'x: R.Tensor(("n",), "int32")'
    body = "lv = R.clip(x, min=0.0, max=255.0, saturate_nan=True)\nlv1 = R.astype(lv, dtype=\"int64\")\nreturn lv1"
    mod = parse(program(params, '("n",)', body, dtype="int64"))
    assert _casts(run_pass(narrow_index_casts, mod)) == ["int64"]
