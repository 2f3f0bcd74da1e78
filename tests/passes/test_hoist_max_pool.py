"""HoistMaxPool (passes/hoist_max_pool.py): a max pool of a monotone elementwise chain (round,
clip, products and quotients by positive constants, sums with constants) pools the chain's finite
input and runs the chain on the pooled map, where nothing reads the result's zero sign; the
lookalikes stay. Each case is also run before and after on values at the rounding ties, the
clip's bounds, NaN and infinities (saturated before the chain), signed zeros: the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.hoist_max_pool import hoist_max_pool
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, ops_of, program, run_pass
from .test_quantize_rules import _values

PASS = Sequential([hoist_max_pool, dead_code_elimination], name="HoistMaxPool+DCE")
PARAMS = 'x: R.Tensor(("n", 2, 7, 9), "float32")'
RET = '("n", 2, 4, 5)'
POOL = "pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), ceil_mode=False"
#: a finite input (``sin`` of a NaN-saturating clip), then the chain a QDQ stem requantizes with
HEAD = """
lv = R.clip(x, min=-1000.0, max=1000.0, saturate_nan=True)
lv1 = R.sin(lv)
"""


def _chain(step: str = "lv3 = R.round(lv2)", last: str = 'lv5 = R.multiply(lv4, R.const(0.037, "float32"))',
           pool: str = POOL, tail: str = 'lv7 = R.add(lv6, R.const(0.5, "float32"))\nreturn lv7',
           head: str = HEAD) -> str:
    """``head``, then ``x * 130.5``, ``step``, a clip and ``last`` (the step the pool reads)."""
    return program(PARAMS, RET, head + f"""
lv2 = R.multiply(lv1, R.const(130.5, "float32"))
{step}
lv4 = R.clip(lv3, min=-20.0, max=40.0)
{last}
lv6 = R.nn.max_pool(lv5, {pool})
""" + tail)


def _inputs() -> np.ndarray:
    values = np.concatenate([_values(), np.arange(-3.0, 3.0, 0.001, dtype=np.float32)])
    return np.resize(values, (values.size // 126 + 1) * 126).reshape(-1, 2, 7, 9).astype(np.float32)


def _assert_same_bits(before, after):
    for x in (_inputs(), np.zeros((0, 2, 7, 9), np.float32), -np.zeros((1, 2, 7, 9), np.float32)):
        want, got = (VirtualMachine(relaxpack.build(m, opt_level=0)).run({"x": x}) for m in (before, after))
        for a, b in zip(want.values(), got.values(), strict=True):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(b.view(np.uint8), a.view(np.uint8))


def test_a_pooled_requantization_pools_its_input():
    before = _chain()
    expected = program(PARAMS, RET, HEAD + f"""
lv1_pooled = R.nn.max_pool(lv1, {POOL})
lv2_pooled = R.multiply(lv1_pooled, R.const(130.5, "float32"))
lv3_pooled = R.round(lv2_pooled)
lv4_pooled = R.clip(lv3_pooled, min=-20.0, max=40.0)
lv6 = R.multiply(lv4_pooled, R.const(0.037, "float32"))
lv7 = R.add(lv6, R.const(0.5, "float32"))
return lv7
""")
    mod, out = assert_rewrites(PASS, before, expected)
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("step", ['lv3 = R.divide(lv2, R.const(0.25, "float32"))',
                                  'lv3 = R.subtract(lv2, R.const(3.5, "float32"))',
                                  'lv3 = R.add(R.const(-7.0, "float32"), lv2)',
                                  'lv3 = R.clip(lv2, min=-5.0, max=5.0, saturate_nan=True)'])
def test_each_monotone_step_moves(step):
    mod = parse(_chain(step=step))
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    assert ops.index("nn.max_pool") < ops.index("clip", ops.index("sin")), ops
    _assert_same_bits(mod, out)


def test_the_chain_stops_at_its_last_finite_input():
    """Without the finite head the chain reaches ``x`` (unbounded): it is hoisted past the steps
    whose input is finite only, here past none but the clip made finite by saturation."""
    mod = parse(_chain(head="lv1 = R.clip(x, min=-1000.0, max=1000.0, saturate_nan=True)\n"))
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    assert ops[:2] == ["clip", "nn.max_pool"], ops
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, kwargs", [
    ("a negative scale (the pool would pick the smallest)", dict(last='lv5 = R.multiply(lv4, R.const(-0.037, "float32"))')),
    ("a decreasing step", dict(last='lv5 = R.divide(R.const(1.0, "float32"), lv4)')),
    ("a run-time factor", dict(last="lv5 = R.multiply(lv4, lv1)")),
    ("an unlisted step", dict(last="lv5 = R.negative(lv4)")),
    ("ceil mode", dict(pool=POOL.replace("ceil_mode=False", "ceil_mode=True"))),
    ("the result's zero sign read (an output)", dict(tail="return lv6")),
    ("the step read twice", dict(tail='lv7 = R.add(lv6, R.const(0.5, "float32"))\nlv8 = R.add(lv5, lv5)\n'
                                      'lv9 = R.nn.max_pool(lv8, ' + POOL + ')\nlv10 = R.add(lv7, lv9)\nreturn lv10')),
    ("an unbounded input", dict(head='lv1 = R.add(x, R.const(1.0, "float32"))\n')),
], ids=lambda v: v if isinstance(v, str) else "")
def test_lookalikes_stay(case, kwargs):
    mod = parse(_chain(**kwargs))
    out = run_pass(PASS, mod)
    assert ops_of(out) == ops_of(mod), case
