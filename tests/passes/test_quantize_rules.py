"""SimplifyAlgebra's quantized-chain rules (passes/quantize_rules.py): a quantized value's round
trip through its integer type and the zero point added then taken off go, and the results stay
the same bits at every value that matters (ties, the bounds, past 2**24, NaN, infinities, signed
zeros), for uint8 and int8 targets, int32 / float32 / float16 / int64 widening, the zero point 0 or
at either end of the range; lookalikes that are not exact stay."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.fold_constant import fold_constant
from relaxpack.passes.simplify_algebra import simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import ops_of, program, run_pass, with_dce

PARAMS = 'x: R.Tensor(("n",), "float32")'
RANGES = {"uint8": (0.0, 255.0), "int8": (-128.0, 127.0)}


def _chain(target: str, zp: int, wide: str, *, zp_out: int | None = None, keep_narrow: bool = False,
           bounds=None, saturate=True, first="R.round(x)", float_zp=None) -> str:
    """``round(x) + zp`` clipped and cast to ``target``, widened to ``wide`` less ``zp_out``."""
    lo, hi = bounds or RANGES[target]
    zp_out = zp if zp_out is None else zp_out
    zp_add = float(zp) if float_zp is None else float_zp
    zp_const = f'R.const({zp_out}, "{wide}")' if wide[0] in "iu" else f'R.const({float(zp_out)}, "{wide}")'
    body = f"""
lv = {first}
lv1 = R.add(lv, R.const({zp_add}, "float32"))
lv2 = R.clip(lv1, min={lo}, max={hi}, saturate_nan={saturate})
lv3 = R.astype(lv2, dtype="{target}")
lv4 = R.astype(lv3, dtype="{wide}")
lv5 = R.subtract(lv4, {zp_const})
"""
    if keep_narrow:
        text = program(PARAMS, '("n",)', body + "gv = (lv5, lv3)\nreturn gv", dtype=wide)
        return text.replace(f'-> R.Tensor(("n",), "{wide}")',
                            f'-> R.Tuple(R.Tensor(("n",), "{wide}"), R.Tensor(("n",), "{target}"))')
    return program(PARAMS, '("n",)', body + "return lv5", dtype=wide)


def _values() -> np.ndarray:
    """Every value near a rounding tie or a bound of either type, shifted by any zero point, and
    the extremes."""
    base = np.arange(-300, 301, dtype=np.float64)
    near = np.concatenate([base, base + 0.5, base - 0.5, base + 0.49999997, base + 0.50000006])
    big = np.array([2**24 - 1, 2**24, 2**24 + 2, -(2**24) - 2, 3e9, -3e9, 1e30, -1e30, 3.4e38, -3.4e38])
    special = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45])
    return np.concatenate([near, big, special]).astype(np.float32)


def _run(mod, x):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    return [np.asarray(v) for v in result.values()]


def _assert_same_bits(before, after):
    x = _values()
    for want, got in zip(_run(before, x), _run(after, x), strict=True):
        assert want.dtype == got.dtype and want.shape == got.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("target, zp", [("uint8", 0), ("uint8", 124), ("uint8", 255), ("int8", 0),
                                        ("int8", -128), ("int8", 127), ("int8", 5)])
@pytest.mark.parametrize("wide", ["int32", "float32", "float16", "int64"])
@pytest.mark.parametrize("keep_narrow", [False, True])
def test_round_trip_and_zero_point_go_with_the_same_results(target, zp, wide, keep_narrow):
    mod = parse(_chain(target, zp, wide, keep_narrow=keep_narrow))
    out = run_pass(with_dce(simplify_algebra), mod)
    ops = ops_of(out)
    if wide.startswith("int"):      # the zero point goes both ways
        assert "subtract" not in ops and ops.count("add") == (keep_narrow and zp != 0)
        assert ops.count("astype") == 1 + keep_narrow
    elif zp:                        # a float widening keeps the zero point (signed zeros), not the casts
        assert ops.count("subtract") == 1 and ops.count("astype") == (wide != "float32") + keep_narrow
    else:                           # no zero point: clip(round(x)) may be -0.0, the round trip stays
        assert ops.count("astype") == 2
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, kwargs, kept", [
    ("zero points differ", dict(zp_out=3), "subtract"),
    ("a clip beyond the narrow type", dict(bounds=(0.0, 300.0)), "subtract"),
    ("NaN kept by the clip", dict(saturate=False), "subtract"),
    ("not rounded", dict(first='R.multiply(x, R.const(0.5, "float32"))'), "subtract"),
    ("a fractional zero point", dict(float_zp=124.5), "subtract"),
])
def test_lookalikes_are_kept(case, kwargs, kept):
    mod = parse(_chain("uint8", 124, "int32", **kwargs))
    out = run_pass(with_dce(simplify_algebra), mod)
    assert kept in ops_of(out), case
    _assert_same_bits(mod, out)


def test_round_trip_without_zero_point_is_dropped_into_integers_only():
    """clip(round(x)) may be -0.0: cast through uint8 into float it is +0.0, so that round trip
    stays; into int32 it goes."""
    body = """
lv = R.round(x)
lv2 = R.clip(lv, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="uint8")
lv4 = R.astype(lv3, dtype="{wide}")
return lv4
"""
    for wide, casts in (("float32", 2), ("int32", 1)):
        mod = parse(program(PARAMS, '("n",)', body.format(wide=wide), dtype=wide))
        out = run_pass(with_dce(simplify_algebra), mod)
        assert ops_of(out).count("astype") == casts, wide
        _assert_same_bits(mod, out)


def test_a_negative_zero_point_constant_keeps_the_float_round_trip():
    mod = parse(_chain("uint8", 0, "float32", float_zp=-0.0))
    out = run_pass(with_dce(simplify_algebra), mod)
    assert ops_of(out).count("astype") == 2
    _assert_same_bits(mod, out)


def test_a_narrower_widening_keeps_the_round_trip():
    """uint8's 0..255 cast on to int8 wraps: that round trip stays."""
    mod = parse(_chain("uint8", 0, "int8").replace('R.const(0, "int8")', 'R.const(0, "int8")'))
    out = run_pass(with_dce(simplify_algebra), mod)
    assert ops_of(out).count("astype") == 2
    _assert_same_bits(mod, out)


def test_per_channel_zero_points_drop_only_the_round_trip():
    text = program('x: R.Tensor(("n", 2), "float32")', '("n", 2)', """
lv = R.round(x)
lv1 = R.add(lv, R.const([3.0, 200.0], "float32"))
lv2 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="uint8")
lv4 = R.astype(lv3, dtype="int32")
lv5 = R.subtract(lv4, R.const([3, 200], "int32"))
return lv5
""", dtype="int32")
    mod = parse(text)
    out = run_pass(with_dce(simplify_algebra), mod)
    assert ops_of(out) == ["round", "add", "clip", "astype", "subtract"]
    x = np.stack([_values(), _values()[::-1]], axis=1)
    want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"x": x})
    np.testing.assert_array_equal(np.asarray(list(got.values())[0]), np.asarray(list(want.values())[0]))


def test_an_exact_conv_reads_the_clip_without_the_round_trip():
    """clip(round(x)) may be -0.0, which only the sign of an all-zero sum could show: an exact conv's
    integer result is the same (requantized next, it is the same integer)."""
    params = 'x: R.Tensor(("n", 2, 4, 4), "float32")'
    w = 'R.const([[[[1.0]], [[-2.0]]], [[[3.0]], [[0.0]]]], "float32")'
    body = f"""
lv = R.round(x)
lv2 = R.clip(lv, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="uint8")
lv4 = R.astype(lv3, dtype="float32")
lv5 = R.nn.conv(lv4, {w}, exact={{exact}})
return lv5
"""
    for exact, casts in ((True, 0), (False, 2)):
        mod = parse(program(params, '("n", 2, 4, 4)', body.format(exact=exact)))
        out = run_pass(with_dce(simplify_algebra), mod)
        assert ops_of(out).count("astype") == casts, exact
        x = np.random.default_rng(2).uniform(-3, 300, (3, 2, 4, 4)).astype(np.float32)
        x[0, :, 0, 0] = [-0.3, -0.2]             # an all -0.0 window
        x[1, 0, :2] = [[np.nan] * 4, [np.inf] * 4]
        want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
        got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"x": x})
        np.testing.assert_array_equal(list(got.values())[0], list(want.values())[0])


#: the table's cast folds in the core round after SimplifyAlgebra
CAST_TABLE = Sequential([simplify_algebra, fold_constant, dead_code_elimination], name="CastTable")


@pytest.mark.parametrize("table_dtype, cast", [("uint8", "float32"), ("int8", "int32"), ("uint8", "int32"),
                                               ("float32", "uint8")])
def test_a_cast_table_lookup_takes_from_the_cast_table(table_dtype, cast):
    """astype(take(C, i), T) -> take(astype(C, T), i): the same values, the cast folded into C."""
    values = {"uint8": np.arange(256), "int8": np.arange(-128, 128), "float32": np.linspace(-3, 300, 256)}
    table = values[table_dtype].astype(table_dtype)
    text = program('i: R.Tensor(("n",), "int32")', '("n",)', f"""
lv = R.take(R.const({table.tolist()}, "{table_dtype}"), i, axis=0)
lv1 = R.astype(lv, dtype="{cast}")
return lv1
""", dtype=cast)
    mod = parse(text)
    out = run_pass(CAST_TABLE, mod)
    assert ops_of(out) == ["take"]
    for i in (np.array([0, 255, 7, -1, -256, 128, 127], np.int32), np.zeros(0, np.int32)):
        want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"i": i})
        got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"i": i})
        a, b = np.asarray(list(got.values())[0]), np.asarray(list(want.values())[0])
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("size, folds", [(65536, True), (65537, False)])
def test_a_table_past_the_limit_is_not_cast(size, folds):
    """A gather from a table of more than 65536 elements (an embedding) keeps its cast after it."""
    table = np.arange(size) % 251
    text = program('i: R.Tensor(("n",), "int32")', '("n",)', f"""
lv = R.take(R.const({table.tolist()}, "uint8"), i, axis=0)
lv1 = R.astype(lv, dtype="float32")
return lv1
""")
    mod = parse(text)
    out = run_pass(CAST_TABLE, mod)
    assert ops_of(out) == (["take"] if folds else ["take", "astype"])
    i = np.array([0, size - 1, 250, 251, -1], np.int32)
    want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"i": i})
    got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"i": i})
    np.testing.assert_array_equal(np.asarray(list(got.values())[0]), np.asarray(list(want.values())[0]))


# ---------------------------------------------------------------- skip_a_widening_cast

#: every value of each integer type the tests widen from
_ALL = {"uint8": np.arange(256), "int8": np.arange(-128, 128), "int16": np.array([-32768, -1, 0, 1, 255, 32767]),
        "uint16": np.array([0, 1, 255, 2049, 65535]), "int32": np.array([-2**31, -2**24 - 1, -1, 0, 2**24 + 1, 2**31 - 1]),
        "bool": np.array([False, True])}


@pytest.mark.parametrize("source, narrow, wide, skipped", [
    ("uint8", "int32", "float32", True),        # a max-pooled uint8 read by a QLinearAdd
    ("uint8", "int16", "float16", True),
    ("int8", "int16", "uint8", True),           # the outer cast wraps the same either way
    ("uint8", "float16", "int32", True),        # float16 holds every uint8
    ("bool", "int8", "float32", True),
    ("int16", "float16", "float32", False),     # float16 rounds 2049
    ("uint16", "int16", "float32", False),      # int16 wraps 65535
    ("int8", "uint8", "int32", False),          # uint8 wraps -1
    ("int32", "float32", "int64", False),       # float32 rounds 2**24 + 1
    ("int32", "float64", "int64", True),
])
def test_a_widening_cast_in_between_is_skipped(source, narrow, wide, skipped):
    """astype(astype(x, I), T) -> astype(x, T) where I holds every value of x's integer type."""
    x = _ALL[source].astype(source)
    text = program(f'x: R.Tensor(("n",), "{source}")', '("n",)', f"""
lv = R.astype(x, dtype="{narrow}")
lv1 = R.astype(lv, dtype="{wide}")
return lv1
""", dtype=wide)
    mod = parse(text)
    out = run_pass(with_dce(simplify_algebra), mod)
    assert ops_of(out) == (["astype"] if skipped else ["astype", "astype"])
    want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"x": x})
    a, b = np.asarray(list(got.values())[0]), np.asarray(list(want.values())[0])
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_a_float_source_keeps_both_casts():
    text = program(PARAMS, '("n",)', """
lv = R.astype(x, dtype="int32")
lv1 = R.astype(lv, dtype="float32")
return lv1
""")
    assert ops_of(run_pass(with_dce(simplify_algebra), parse(text))) == ["astype", "astype"]
