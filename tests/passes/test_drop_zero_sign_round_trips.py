"""DropZeroSignRoundTrips (passes/drop_zero_sign_round_trips.py): a quantized float's round trip
through its integer type, and a zero point added and taken off around its clip, go where only a
zero's sign would change and nothing reads that sign; where something may (an output, a divisor,
an unlisted op, a -0.0 constant), they stay. Every case is also run before and after on values at
the ties, the bounds, past 2**24, NaN, infinities and signed zeros: the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.canonicalize_bindings import canonicalize_bindings
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.drop_zero_sign_round_trips import drop_zero_sign_round_trips, sign_readers
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, ops_of, program, run_pass
from .test_quantize_rules import _values

#: the pass leaves ``lv4 = lv2`` aliases where a round trip went: the pipeline's core round after it
#: resolves them (CanonicalizeBindings) and drops the unused casts (DeadCodeElimination)
PASS = Sequential([drop_zero_sign_round_trips, canonicalize_bindings, dead_code_elimination], name="DropZeroSign+")
PARAMS = 'x: R.Tensor(("n",), "float32")'
RANGES = {"uint8": (0.0, 255.0), "int8": (-128.0, 127.0)}


def _quantized(target: str, zp: float) -> str:
    """x quantized to ``target`` (scale 0.25, zero point ``zp``) and dequantized as onnx does:
    into ``lv5``, the round trip ``lv4`` (zero point 0) or the zero point taken off (else)."""
    lo, hi = RANGES[target]
    if zp == 0:
        return f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min={lo}, max={hi}, saturate_nan=True)
lv3 = R.astype(lv2, dtype="{target}")
lv4 = R.astype(lv3, dtype="float32")
lv5 = R.multiply(lv4, R.const(0.25, "float32"))
"""
    return f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.add(lv1, R.const({zp}, "float32"))
lv3 = R.clip(lv2, min={lo}, max={hi}, saturate_nan=True)
lv4 = R.subtract(lv3, R.const({zp}, "float32"))
lv5 = R.multiply(lv4, R.const(0.25, "float32"))
"""


def _run(mod, x) -> list[np.ndarray]:
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    return [np.asarray(v) for v in result.values()]


def _assert_same_bits(before, after, x=None):
    x = _values() if x is None else x
    for want, got in zip(_run(before, x), _run(after, x), strict=True):
        assert want.dtype == got.dtype and want.shape == got.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def _dropped(mod, zp: float) -> bool:
    """Whether the round trip (zero point 0) or the zero point went, not made ``q + 0.0``."""
    op = "astype" if zp == 0 else "subtract"
    out = ops_of(run_pass(PASS, mod))
    return out.count(op) < ops_of(mod).count(op) and out.count("add") <= ops_of(mod).count("add")


def test_a_round_trip_read_by_a_bias_add_goes():
    before = program(PARAMS, '("n",)', _quantized("uint8", 0) + """
lv6 = R.add(lv5, R.const(0.5, "float32"))
return lv6
""")
    expected = program(PARAMS, '("n",)', """
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv5 = R.multiply(lv2, R.const(0.25, "float32"))
lv6 = R.add(lv5, R.const(0.5, "float32"))
return lv6
""")
    mod, out = assert_rewrites(PASS, before, expected)
    _assert_same_bits(mod, out)


def test_a_zero_point_added_and_taken_off_shifts_the_clip():
    before = program(PARAMS, '("n",)', _quantized("int8", -128.0) + """
lv6 = R.add(lv5, R.const(0.5, "float32"))
return lv6
""")
    expected = program(PARAMS, '("n",)', """
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv4 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv5 = R.multiply(lv4, R.const(0.25, "float32"))
lv6 = R.add(lv5, R.const(0.5, "float32"))
return lv6
""")
    mod, out = assert_rewrites(PASS, before, expected)
    _assert_same_bits(mod, out)


#: what reads the dequantized ``lv5``, and whether the round trip or zero point may go there
TAILS = {
    "a bias add": ("lv6 = R.add(lv5, R.const(0.5, \"float32\"))", True),
    "a +0.0 bias": ("lv6 = R.add(lv5, R.const(0.0, \"float32\"))", True),
    "a subtract of a nonzero constant": ("lv6 = R.subtract(lv5, R.const(3.0, \"float32\"))", True),
    "a subtract from +0.0": ("lv6 = R.subtract(R.const(0.0, \"float32\"), lv5)", True),
    "a requantization to uint8": ("""lv6 = R.divide(lv5, R.const(0.5, "float32"))
lv7 = R.round(lv6)
lv8 = R.clip(lv7, min=0.0, max=255.0, saturate_nan=True)
lv9 = R.astype(lv8, dtype="uint8")""", True),
    "a relu and a comparison": ("""lv6 = R.nn.relu(lv5)
lv7 = R.less(lv6, R.const(0.0, "float32"))""", True),
    "a sigmoid and a bias": ("""lv6 = R.sigmoid(lv5)
lv7 = R.multiply(lv6, lv5)
lv8 = R.add(lv7, R.const(1.0, "float32"))""", True),
    "the output itself": ("lv6 = R.multiply(lv5, R.const(2.0, \"float32\"))", False),
    "a divisor": ("lv6 = R.divide(R.const(1.0, \"float32\"), lv5)", False),
    "a -0.0 bias": ("lv6 = R.add(lv5, R.const(-0.0, \"float32\"))", False),
    "a subtract of +0.0": ("lv6 = R.subtract(lv5, R.const(0.0, \"float32\"))", False),
    "a subtract from -0.0": ("lv6 = R.subtract(R.const(-0.0, \"float32\"), lv5)", False),
    "an op not known to pass zeros": ("lv6 = R.power(lv5, R.const(-1.0, \"float32\"))", False),
    "an output through a reshape": ("lv6 = R.reshape(lv5, R.shape([1, n]))", False),
}


def _tail_program(target: str, zp: float, tail: str) -> str:
    last = tail.strip().splitlines()[-1].split(" = ")[0]
    body = _quantized(target, zp) + tail + f"\nreturn {last}"
    text = program('x: R.Tensor(("n",), "float32")', '("n",)', body)
    if "R.less(" in tail:
        text = text.replace('-> R.Tensor(("n",), "float32")', '-> R.Tensor(("n",), "bool")')
    if "R.astype(lv8, dtype=\"uint8\")" in tail:
        text = text.replace('-> R.Tensor(("n",), "float32")', '-> R.Tensor(("n",), "uint8")')
    if "R.reshape(" in tail:
        text = text.replace('-> R.Tensor(("n",), "float32")', '-> R.Tensor((1, "n"), "float32")')
    return text


@pytest.mark.parametrize("target, zp", [("uint8", 0.0), ("uint8", 128.0), ("uint8", 255.0), ("int8", 0.0),
                                        ("int8", -128.0), ("int8", 5.0)])
@pytest.mark.parametrize("case", sorted(TAILS))
def test_each_reader_with_the_same_bits(target, zp, case):
    tail, goes = TAILS[case]
    mod = parse(_tail_program(target, zp, tail))
    out = run_pass(PASS, mod)
    assert _dropped(mod, zp) == goes, case
    if not goes and zp == 0:        # the sign is read: the round trip is q + 0.0
        assert ops_of(out).count("astype") == ops_of(mod).count("astype") - 2, case
        assert ops_of(out).count("add") == ops_of(mod).count("add") + 1, case
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, old, new", [
    ("NaN kept by the clip", "saturate_nan=True", "saturate_nan=False"),
    ("a clip beyond the integer type", "max=255.0", "max=300.0"),
    ("a fractional clip bound", "min=0.0", "min=0.5"),
    ("not rounded", "lv1 = R.round(lv)", "lv1 = R.multiply(lv, R.const(1.0, \"float32\"))"),
])
def test_round_trip_lookalikes_stay(case, old, new):
    text = _tail_program("uint8", 0.0, TAILS["a bias add"][0]).replace(old, new)
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert ops_of(out).count("astype") == 2, case
    _assert_same_bits(mod, out, _values()[:-2])


@pytest.mark.parametrize("case, old, new", [
    ("zero points differ", 'R.subtract(lv3, R.const(5.0, "float32"))', 'R.subtract(lv3, R.const(6.0, "float32"))'),
    ("a fractional zero point", 'R.const(5.0, "float32")', 'R.const(5.5, "float32")'),
    ("not rounded", "lv1 = R.round(lv)", "lv1 = R.multiply(lv, R.const(1.0, \"float32\"))"),
    ("a zero point past float32's integers", 'R.const(5.0, "float32")', 'R.const(16777216.0, "float32")'),
])
def test_zero_point_lookalikes_stay(case, old, new):
    text = _tail_program("int8", 5.0, TAILS["a bias add"][0]).replace(old, new)
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert "subtract" in ops_of(out), case
    _assert_same_bits(mod, out)


def test_per_channel_scales_and_an_empty_tensor():
    """A (n, 2) tensor quantized per channel: its round trip goes; the same bits, n = 0 included."""
    text = program('x: R.Tensor(("n", 2), "float32")', '("n", 2)', """
lv = R.divide(x, R.const([0.25, 0.5], "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="int8")
lv4 = R.astype(lv3, dtype="float32")
lv5 = R.multiply(lv4, R.const([0.25, 0.5], "float32"))
lv6 = R.add(lv5, R.const([1.0, -2.0], "float32"))
return lv6
""")
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert ops_of(out).count("astype") == 0
    for x in (np.stack([_values(), _values()[::-1]], axis=1), np.zeros((0, 2), np.float32)):
        _assert_same_bits(mod, out, x)


def test_sign_readers_follow_uses_backwards():
    mod = parse(_tail_program("uint8", 0.0, TAILS["a sigmoid and a bias"][0]))
    names = {v.name_hint for v in sign_readers(mod["main"])}
    assert "lv8" in names and not names & {"lv4", "lv5", "lv6", "lv7"}
    mod = parse(_tail_program("uint8", 0.0, TAILS["a divisor"][0]))
    names = {v.name_hint for v in sign_readers(mod["main"])}
    assert {"lv4", "lv5", "lv6"} <= names


def _requantized(inner: str = "min=-123.0, max=132.0, saturate_nan=True", zp: str = "123.0", out: str = "uint8",
                 second: str = "R.round(lv3)") -> str:
    """QLinearMatMul's requantization: an integer clipped around 0, the zero point added, then
    rounded and clipped again (the type's range) and cast to ``out`` (or returned in float)."""
    body = f"""
lv = R.multiply(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, {inner})
lv3 = R.add(lv2, R.const({zp}, "float32"))
lv4 = {second}
lv5 = R.clip(lv4, min=0.0, max=255.0, saturate_nan=True)
"""
    if out == "float32":
        return program(PARAMS, '("n",)', body + "return lv5")
    return program(PARAMS, '("n",)', body + f'lv6 = R.astype(lv5, dtype="{out}")\nreturn lv6', dtype=out)


@pytest.mark.parametrize("out", ["uint8", "float32"])
def test_a_requantization_drops_its_second_round_and_clip(out):
    """clip(round(clip(r, -123, 132) + 123), 0, 255): the sum is an integer in 0..255, never
    -0.0 (a nonzero constant added), so the round and the clip change no bit, even returned."""
    before = _requantized(out=out)
    tail = 'lv6 = R.astype(lv3, dtype="uint8")\nreturn lv6' if out == "uint8" else "return lv3"
    expected = program(PARAMS, '("n",)', """
lv = R.multiply(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-123.0, max=132.0, saturate_nan=True)
lv3 = R.add(lv2, R.const(123.0, "float32"))
""" + tail, dtype=out)
    mod, out_mod = assert_rewrites(PASS, before, expected)
    _assert_same_bits(mod, out_mod)


@pytest.mark.parametrize("case, kwargs, kept", [
    ("NaN kept by the first clip", dict(inner="min=-123.0, max=132.0, saturate_nan=False"), ["clip"]),
    ("a first clip past the second's bounds", dict(inner="min=-123.0, max=133.0, saturate_nan=True"), ["clip"]),
    ("a fractional zero point", dict(zp="123.5"), ["round", "clip"]),
    ("a zero point of 0, returned: -0.0 at the zero bound", dict(inner="min=0.0, max=255.0, saturate_nan=True",
                                                                 zp="0.0", out="float32"), ["clip"]),
    ("a round of a non-integer", dict(second='R.multiply(lv3, R.const(0.5, "float32"))'), ["clip"]),
])
def test_requantization_lookalikes_keep_their_steps(case, kwargs, kept):
    mod = parse(_requantized(**kwargs))
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    for op in kept:
        assert ops.count(op) == ops_of(mod).count(op), case
    _assert_same_bits(mod, out)


def test_a_zero_point_of_0_cast_to_uint8_drops_the_second_clip():
    """clip(clip(r, 0, 255) + 0, 0, 255) may meet -0.0 at the zero bound: dropped only because the
    cast to uint8 reads no sign."""
    mod = parse(_requantized(inner="min=0.0, max=255.0, saturate_nan=True", zp="0.0"))
    out = run_pass(PASS, mod)
    assert ops_of(out).count("clip") == 1 and "round" not in ops_of(out)[2:]
    _assert_same_bits(mod, out)


def test_a_dynamic_zero_point_is_an_integer():
    """DynamicQuantizeLinear's zero point is a rounded float: round(x / s) + z clipped is an
    integer, so its round trip through uint8 goes where an int32 cast reads it next."""
    text = program(PARAMS, '("n",)', """
lv = R.dynamic_quantize_params(x)
s = lv[0]
z = lv[1]
lv1 = R.divide(x, s)
lv2 = R.round(lv1)
lv3 = R.add(lv2, z)
lv4 = R.clip(lv3, min=0.0, max=255.0, saturate_nan=True)
lv5 = R.astype(lv4, dtype="uint8")
lv6 = R.astype(lv5, dtype="float32")
lv7 = R.subtract(lv6, z)
lv8 = R.astype(lv7, dtype="int32")
return lv8
""", dtype="int32")
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert ops_of(out).count("astype") == 1
    rng = np.random.default_rng(3)
    for x in (rng.uniform(-3, 5, 37).astype(np.float32), np.zeros(5, np.float32), np.array([-0.0, 1.5, -2.5], np.float32),
              np.zeros(0, np.float32), _values()[:1800]):
        _assert_same_bits(mod, out, x)


GEMM_PARAMS = 'x: R.Tensor(("n", 3), "float32")'
#: integer weights whose column sums of magnitudes are 6, 3 and 2: 128 * 6 is far below 2**24
SMALL_WEIGHT = "[[1.0, -2.0], [2.0, 0.0], [-3.0, 1.0]]"


def _integer_product(tail: str, weight: str = SMALL_WEIGHT, integer: str = "int32", lhs: str = "R.round(lv)",
                     dtype: str = "float32") -> str:
    """MatMulInteger's exact float32 product as the importer writes it: an integer-valued ``lv2``
    (|lv2| <= 128) times a constant weight, cast to ``integer`` and back to float (ONNX's Cast),
    scaled into ``lv6``, then ``tail``."""
    return program(GEMM_PARAMS, '("n", 2)', f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = {lhs}
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
lv3 = R.nn.gemm(lv2, R.const({weight}, "float32"))
lv4 = R.astype(lv3, dtype="{integer}")
lv5 = R.astype(lv4, dtype="float32")
lv6 = R.multiply(lv5, R.const(0.5, "float32"))
""" + tail, dtype=dtype)


def _gemm_values() -> np.ndarray:
    values = _values()
    return values[: values.size // 3 * 3].reshape(-1, 3)


def test_an_exact_integer_product_drops_its_round_trip():
    before = _integer_product('lv7 = R.add(lv6, R.const([0.5, -1.0], "float32"))\nreturn lv7')
    expected = program(GEMM_PARAMS, '("n", 2)', f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
lv3 = R.nn.gemm(lv2, R.const({SMALL_WEIGHT}, "float32"))
lv6 = R.multiply(lv3, R.const(0.5, "float32"))
lv7 = R.add(lv6, R.const([0.5, -1.0], "float32"))
return lv7
""")
    mod, out = assert_rewrites(PASS, before, expected)
    for x in (_gemm_values(), np.zeros((0, 3), np.float32), np.array([[-0.0, 0.0, -0.1]], np.float32)):
        _assert_same_bits(mod, out, x)


def test_a_product_whose_zero_sign_is_read_adds_a_positive_zero():
    """The product is an output: its round trip turns -0.0 into +0.0, as ``q + 0.0`` does in one
    step that fuses with the product. (numpy's BLAS starts its sums at +0.0, so no -0.0 comes out
    of these products here; a summation that starts at the first product could make one.)"""
    before = _integer_product("return lv6")
    expected = program(GEMM_PARAMS, '("n", 2)', f"""
lv = R.divide(x, R.const(0.25, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=-128.0, max=127.0, saturate_nan=True)
lv3 = R.nn.gemm(lv2, R.const({SMALL_WEIGHT}, "float32"))
lv5 = R.add(lv3, R.const(0.0, "float32"))
lv6 = R.multiply(lv5, R.const(0.5, "float32"))
return lv6
""")
    mod, out = assert_rewrites(PASS, before, expected)
    signed = np.array([[-0.1, -0.1, 0.1], [-0.0, 0.0, -0.1]], np.float32)
    for x in (_gemm_values(), np.zeros((0, 3), np.float32), signed):
        _assert_same_bits(mod, out, x)


@pytest.mark.parametrize("case, kwargs", [
    ("a weight with a fraction", dict(weight="[[1.0, -2.0], [2.5, 0.0], [-3.0, 1.0]]")),
    ("a bound past 2**24", dict(weight="[[1.0, -2.0], [131072.0, 0.0], [-3.0, 1.0]]")),
    ("a bound past int16", dict(integer="int16", weight="[[1.0, -2.0], [300.0, 0.0], [-3.0, 1.0]]")),
    ("an unsigned type (negative products)", dict(integer="uint32")),
    ("an operand not integer-valued", dict(lhs='R.multiply(lv, R.const(0.5, "float32"))')),
])
def test_integer_product_lookalikes_keep_their_round_trip(case, kwargs):
    tail = kwargs.pop("tail", 'lv7 = R.add(lv6, R.const([0.5, -1.0], "float32"))\nreturn lv7')
    mod = parse(_integer_product(tail, **kwargs))
    out = run_pass(PASS, mod)
    assert ops_of(out).count("astype") == 2, case
    _assert_same_bits(mod, out, _gemm_values())


def test_a_dynamic_scale_reads_no_zero_sign():
    """DynamicQuantizeLinear's scale is the same for operands equal up to zero signs, so dividing by
    it reads no sign of ``x``; its zero point passes signs on (to the returned sum here)."""
    text = program(PARAMS, '("n",)', """
lv = R.multiply(x, R.const(2.0, "float32"))
lv1 = R.dynamic_quantize_params(lv)
s = lv1[0]
z = lv1[1]
lv2 = R.divide(R.const(1.0, "float32"), s)
lv3 = R.add(lv2, R.const(1.0, "float32"))
return lv3
""")
    names = {v.name_hint for v in sign_readers(parse(text)["main"])}
    assert "lv" not in names and "lv1" not in names
    text = text.replace("lv3 = R.add(lv2, R.const(1.0, \"float32\"))", "lv3 = R.add(lv2, z)")
    names = {v.name_hint for v in sign_readers(parse(text)["main"])}
    assert {"lv", "lv1", "z"} <= names


def _requantized_pair(scale: str = "0.037", second: str | None = None, bounds: str = "min=-128.0, max=127.0",
                      dtype: str = "float32") -> str:
    """A QDQ pair quantized again (the same scale unless ``second``): fake quantization twice."""
    second = scale if second is None else second
    return program(PARAMS.replace("float32", dtype), '("n",)', f"""
lv = R.divide(x, R.const({scale}, "{dtype}"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, {bounds}, saturate_nan=True)
lv3 = R.multiply(lv2, R.const({scale}, "{dtype}"))
lv4 = R.divide(lv3, R.const({second}, "{dtype}"))
lv5 = R.round(lv4)
lv6 = R.clip(lv5, {bounds}, saturate_nan=True)
lv7 = R.multiply(lv6, R.const({second}, "{dtype}"))
return lv7
""", dtype=dtype)


@pytest.mark.parametrize("scale", ["0.037", "-0.037", "3.0e-38", "2.5e35", "1.0"])
def test_a_dequantized_value_quantized_again_by_its_scale_is_its_integer(scale):
    """round((q * s) / s) is q for an integer q of small magnitude: the second quantization's
    divide, round and clip go (the multiply is the first's again: CSE merges them), even returned."""
    mod = parse(_requantized_pair(scale))
    out = run_pass(PASS, mod)
    ops = ops_of(out)
    assert ops.count("divide") == 1 and ops.count("round") == 1 and ops.count("clip") == 1, ops
    s = np.float32(float(scale))
    x = np.concatenate([_values(), _values() * s, (np.arange(-130, 131, dtype=np.float32) + 0.5) * s])
    _assert_same_bits(mod, out, x.astype(np.float32))


def test_round_of_a_rescaled_integer_is_the_integer_for_every_scale():
    """The claim itself, in float32: every q in [-2**20, 2**20] sampled, scales over the normal range."""
    rng = np.random.default_rng(11)
    q = np.concatenate([np.arange(-300, 301), rng.integers(-2**20, 2**20, 4000), [2**20, -2**20]])
    q = q.astype(np.float32)
    scales = np.concatenate([10.0 ** rng.uniform(-37.9, 30, 300), [np.finfo(np.float32).tiny, 1.0, 0.1, 3.0]])
    for s in scales.astype(np.float32):
        for sign in (s, -s):
            np.testing.assert_array_equal(np.rint((q * sign) / sign), q)


@pytest.mark.parametrize("case, kwargs", [
    ("another scale", dict(second="0.038")),
    ("a subnormal scale", dict(scale="1.0e-39")),
    ("bounds past 2**21", dict(bounds="min=-3000000.0, max=3000000.0")),
    ("float16", dict(dtype="float16", scale="0.25")),
])
def test_rescaled_lookalikes_keep_their_round(case, kwargs):
    mod = parse(_requantized_pair(**kwargs))
    out = run_pass(PASS, mod)
    assert ops_of(out).count("round") == 2, case
    _assert_same_bits(mod, out, _values().astype(kwargs.get("dtype", "float32")))


def _zero_point_back(x: str = 'x: R.Tensor(("n",), "uint8")', k: str = "123", k_float: str = "123.0",
                     middle: str = "float32") -> str:
    """A QOperator op's zero point taken off in int32 and put back in float, cast to int32 again."""
    return program(x, '("n",)', f"""
lv = R.astype(x, dtype="int32")
lv1 = R.subtract(lv, R.const({k}, "int32"))
lv2 = R.astype(lv1, dtype="{middle}")
lv3 = R.add(lv2, R.const({k_float}, "{middle}"))
lv4 = R.astype(lv3, dtype="int32")
lv5 = R.subtract(lv4, R.const({k}, "int32"))
return lv5
""", dtype="int32")


def _run_int(mod, x):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    return [np.asarray(v) for v in result.values()]


def test_a_zero_point_put_back_in_float_is_the_integer():
    before = _zero_point_back()
    expected = program('x: R.Tensor(("n",), "uint8")', '("n",)', """
lv = R.astype(x, dtype="int32")
lv5 = R.subtract(lv, R.const(123, "int32"))
return lv5
""", dtype="int32")
    mod, out = assert_rewrites(PASS, before, expected)
    x = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(_run_int(out, x)[0], _run_int(mod, x)[0])


@pytest.mark.parametrize("case, kwargs", [
    ("another constant in float", dict(k_float="124.0")),
    ("a fractional constant", dict(k_float="123.5")),
    ("an unbounded integer", dict(x='x: R.Tensor(("n",), "int32")')),
    ("float16 past its exact integers", dict(x='x: R.Tensor(("n",), "uint16")', k="3000", k_float="3000.0",
                                             middle="float16")),
])
def test_zero_point_put_back_lookalikes_stay(case, kwargs):
    mod = parse(_zero_point_back(**kwargs))
    out = run_pass(PASS, mod)
    assert ops_of(out).count("astype") == 3, case


def _pooled_pair(scale: str = "0.037", second: str | None = None, bounds: str = "min=0.0, max=255.0",
                 second_bounds: str | None = None, pool: str = "pool_size=3, strides=2, padding=1",
                 tail: str = 'lv9 = R.add(lv8, R.const(0.5, "float32"))\nreturn lv9') -> str:
    """A QDQ pair around a max pool, quantized again (the same scale and bounds unless given),
    read by an add of a constant (which reads no zero sign) unless ``tail``."""
    second = scale if second is None else second
    second_bounds = bounds if second_bounds is None else second_bounds
    return program('x: R.Tensor(("n", 2, 7, 9), "float32")', '("n", 2, 4, 5)', f"""
lv = R.divide(x, R.const({scale}, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, {bounds}, saturate_nan=True)
lv3 = R.multiply(lv2, R.const({scale}, "float32"))
lv4 = R.nn.max_pool(lv3, {pool})
lv5 = R.divide(lv4, R.const({second}, "float32"))
lv6 = R.round(lv5)
lv7 = R.clip(lv6, {second_bounds}, saturate_nan=True)
lv8 = R.multiply(lv7, R.const({second}, "float32"))
""" + tail)


def _pool_values(scale: float) -> np.ndarray:
    values = np.concatenate([_values(), _values() * np.float32(scale),
                             (np.arange(-130, 300, dtype=np.float32) + 0.5) * np.float32(scale)])
    return np.resize(values, (values.size // 126 + 1) * 126).reshape(-1, 2, 7, 9).astype(np.float32)


@pytest.mark.parametrize("scale, bounds", [("0.037", "min=0.0, max=255.0"), ("2.5e35", "min=-128.0, max=127.0"),
                                           ("3.0e-38", "min=-128.0, max=127.0")])
def test_a_max_pool_between_a_qdq_pair_and_its_own_scale_is_the_pool(scale, bounds):
    mod = parse(_pooled_pair(scale, bounds=bounds))
    out = run_pass(PASS, mod)
    assert ops_of(out).count("round") == 1 and ops_of(out).count("divide") == 1, ops_of(out)
    _assert_same_bits(mod, out, _pool_values(float(scale)))
    _assert_same_bits(mod, out, np.zeros((0, 2, 7, 9), np.float32))


@pytest.mark.parametrize("case, kwargs", [
    ("a negative scale (the pool picks the smallest q)", dict(scale="-0.037")),
    ("another scale", dict(second="0.038")),
    ("narrower bounds after the pool", dict(second_bounds="min=0.0, max=254.0")),
    ("ceil mode", dict(pool="pool_size=3, strides=2, padding=1, ceil_mode=True")),
    ("the result's zero sign read (an output)", dict(tail="return lv8")),
    ("bounds past 2**21", dict(bounds="min=-3000000.0, max=3000000.0")),
])
def test_pooled_lookalikes_keep_their_requantization(case, kwargs):
    mod = parse(_pooled_pair(**kwargs))
    out = run_pass(PASS, mod)
    assert ops_of(out).count("round") == 2, case
    _assert_same_bits(mod, out, _pool_values(0.037))
