"""SimplifyAlgebra: layout chains collapse, identities go, GELU and SiLU are recognized."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import RULES, simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import (
    assert_rewrites, assert_same_results, assert_unchanged, kernel_calls, ops_of, program, run_pass, with_dce,
)

MODELS = Path(__file__).resolve().parents[1] / "models"
X4 = 'x: R.Tensor(("n", 2, 3, 4), "float32")'


CASES = {
    "permute_chain": (X4, '("n", 4, 3, 2)', """
lv = R.permute_dims(x, axes=(0, 2, 1, 3))
lv1 = R.permute_dims(lv, axes=(0, 3, 2, 1))
lv2 = R.permute_dims(lv1, axes=(0, 1, 3, 2))
return lv2
""", """
lv = R.permute_dims(x, axes=(0, 3, 2, 1))
return lv
"""),
    "permute_back": (X4, '("n", 2, 3, 4)', """
lv = R.permute_dims(x, axes=(0, 2, 3, 1))
lv1 = R.permute_dims(lv, axes=(0, 3, 1, 2))
lv2 = R.exp(lv1)
return lv2
""", """
lv = R.exp(x)
return lv
"""),
    "permute_identity_and_reversal": (X4, '("n", 2, 3, 4)', """
lv = R.permute_dims(x, axes=(0, 1, 2, 3))
lv1 = R.permute_dims(lv)
lv2 = R.permute_dims(lv1, axes=None)
lv3 = R.exp(lv2)
return lv3
""", """
lv = R.exp(x)
return lv
"""),
    "reshape_chain": (X4, '("n", 24)', """
lv = R.reshape(x, R.shape([n, 6, 4]))
lv1 = R.reshape(lv, R.shape([n * 2, 12]))
lv2 = R.reshape(lv1, R.shape([n, -1]))
return lv2
""", """
lv = R.reshape(x, R.shape([n, -1]))
return lv
"""),
    # YOLO's decode: channels last (n, h, w, anchors * outputs) -> (n, anchors, h * w, outputs), one transpose
    "permute_reshape_permute": ('x: R.Tensor(("n", 2, 3, 12), "float32")', '("n", 18, 4)', """
lv = R.permute_dims(x, axes=(0, 3, 1, 2))
lv1 = R.reshape(lv, R.shape([n, 3, 4, 6]))
lv2 = R.permute_dims(lv1, axes=(0, 1, 3, 2))
lv3 = R.reshape(lv2, R.shape([n, -1, 4]))
return lv3
""", """
lv = R.reshape(x, R.shape([n, 2, 3, 3, 4]))
lv1 = R.permute_dims(lv, axes=(0, 3, 1, 2, 4))
lv2 = R.reshape(lv1, R.shape([n, -1, 4]))
return lv2
"""),
    "permute_reshape_permute_no_reshape_needed": (X4, '("n", 4, 6)', """
lv = R.permute_dims(x, axes=(0, 2, 1, 3))
lv1 = R.reshape(lv, R.shape([n, 6, 4]))
lv2 = R.permute_dims(lv1, axes=(0, 2, 1))
return lv2
""", """
lv = R.permute_dims(x, axes=(0, 3, 2, 1))
lv1 = R.reshape(lv, R.shape([n, 4, 6]))
return lv1
"""),
    "reshape_and_cast_identities": (X4, '("n", 2, 3, 4)', """
lv = R.reshape(x, R.shape([n, 6, 4]))
lv1 = R.reshape(lv, R.shape([n, 2, 3, 4]))
lv2 = R.astype(lv1, dtype="float32")
lv3 = R.broadcast_to(lv2, R.shape([n, 2, 3, 4]))
lv4 = R.exp(lv3)
return lv4
""", """
lv = R.exp(x)
return lv
"""),
    "arithmetic_identities": (X4, '("n", 2, 3, 4)', """
lv = R.add(x, R.const(0.0, "float32"))
lv1 = R.add(R.const([0.0, 0.0, 0.0, 0.0], "float32"), lv)
lv2 = R.subtract(lv1, R.const(0.0, "float32"))
lv3 = R.multiply(R.const([[1.0]], "float32"), lv2)
lv4 = R.divide(lv3, R.const(1.0, "float32"))
lv5 = R.negative(lv4)
lv6 = R.negative(lv5)
lv7 = R.exp(lv6)
return lv7
""", """
lv = R.exp(x)
return lv
"""),
    "scalar_multiplies": (X4, '("n", 2, 3, 4)', """
lv = R.multiply(x, R.const(2.0, "float32"))
lv1 = R.multiply(R.const([3.0], "float32"), lv)
lv2 = R.multiply(lv1, R.const(0.5, "float32"))
return lv2
""", """
lv = R.multiply(x, R.const([3.0], "float32"))
return lv
"""),
    "gelu_erf_form": (X4, '("n", 2, 3, 4)', """
lv = R.divide(x, R.const(1.4142135381698608, "float32"))
lv1 = R.erf(lv)
lv2 = R.add(lv1, R.const(1.0, "float32"))
lv3 = R.multiply(x, lv2)
lv4 = R.multiply(lv3, R.const(0.5, "float32"))
return lv4
""", """
lv = R.nn.gelu(x, approximate="none")
return lv
"""),
    "gelu_half_first": (X4, '("n", 2, 3, 4)', """
lv = R.multiply(R.const(0.7071067690849304, "float32"), x)
lv1 = R.erf(lv)
lv2 = R.add(R.const(1.0, "float32"), lv1)
lv3 = R.multiply(x, R.const(0.5, "float32"))
lv4 = R.multiply(lv2, lv3)
return lv4
""", """
lv = R.nn.gelu(x, approximate="none")
return lv
"""),
    "gelu_half_inside": (X4, '("n", 2, 3, 4)', """
lv = R.divide(x, R.const(1.4142135381698608, "float32"))
lv1 = R.erf(lv)
lv2 = R.add(lv1, R.const(1.0, "float32"))
lv3 = R.multiply(lv2, R.const(0.5, "float32"))
lv4 = R.multiply(x, lv3)
return lv4
""", """
lv = R.nn.gelu(x, approximate="none")
return lv
"""),
    "gelu_tanh_form": (X4, '("n", 2, 3, 4)', """
lv = R.power(x, R.const(3.0, "float32"))
lv1 = R.multiply(lv, R.const(0.044714998453855515, "float32"))
lv2 = R.add(x, lv1)
lv3 = R.multiply(lv2, R.const(0.7978845834732056, "float32"))
lv4 = R.tanh(lv3)
lv5 = R.add(lv4, R.const(1.0, "float32"))
lv6 = R.multiply(x, lv5)
lv7 = R.multiply(lv6, R.const(0.5, "float32"))
return lv7
""", """
lv = R.nn.gelu(x, approximate="tanh")
return lv
"""),
    "gelu_tanh_half_first_cube_by_multiplies": (X4, '("n", 2, 3, 4)', """
lv = R.multiply(x, x)
lv1 = R.multiply(x, lv)
lv2 = R.multiply(R.const(0.044714998453855515, "float32"), lv1)
lv3 = R.add(lv2, x)
lv4 = R.multiply(R.const(0.7978845834732056, "float32"), lv3)
lv5 = R.tanh(lv4)
lv6 = R.add(R.const(1.0, "float32"), lv5)
lv7 = R.multiply(x, R.const(0.5, "float32"))
lv8 = R.multiply(lv7, lv6)
return lv8
""", """
lv = R.nn.gelu(x, approximate="tanh")
return lv
"""),
    "gelu_tanh_half_inside": (X4, '("n", 2, 3, 4)', """
lv = R.power(x, R.const(3.0, "float32"))
lv1 = R.multiply(lv, R.const(0.044714998453855515, "float32"))
lv2 = R.add(x, lv1)
lv3 = R.multiply(lv2, R.const(0.7978845834732056, "float32"))
lv4 = R.tanh(lv3)
lv5 = R.add(lv4, R.const(1.0, "float32"))
lv6 = R.multiply(lv5, R.const(0.5, "float32"))
lv7 = R.multiply(x, lv6)
return lv7
""", """
lv = R.nn.gelu(x, approximate="tanh")
return lv
"""),
    "silu": (X4, '("n", 2, 3, 4)', """
lv = R.sigmoid(x)
lv1 = R.multiply(x, lv)
return lv1
""", """
lv = R.nn.silu(x)
return lv
"""),
    "permute_reshape_permute_symbolic_merge": (X4, '("n", 3, 4, 2)', """
lv = R.permute_dims(x, axes=(0, 2, 1, 3))
lv1 = R.reshape(lv, R.shape([n * 3, 2, 4]))
lv2 = R.permute_dims(lv1, axes=(0, 2, 1))
lv3 = R.reshape(lv2, R.shape([n, 3, 4, 2]))
return lv3
""", """
lv = R.permute_dims(x, axes=(0, 2, 3, 1))
lv3 = lv
return lv3
"""),
    "permute_reshape_permute_symbolic_split": ('x: R.Tensor(("n", 6, 4), "float32")', '("n", 4, 2, 3)', """
lv = R.permute_dims(x, axes=(1, 0, 2))
lv1 = R.reshape(lv, R.shape([2, 3, n, 4]))
lv2 = R.permute_dims(lv1, axes=(2, 3, 0, 1))
return lv2
""", """
lv = R.reshape(x, R.shape([n, 2, 3, 4]))
lv1 = R.permute_dims(lv, axes=(0, 3, 1, 2))
return lv1
"""),
    "safe_softmax": (X4, '("n", 2, 3, 4)', """
lv = R.nn.softmax(x, axis=2)
lv1 = R.isnan(lv)
lv2 = R.where(lv1, R.const(0.0, "float32"), lv)
return lv2
""", """
lv = R.nn.safe_softmax(x, axis=2)
return lv
"""),
    "scale_into_weight_through_heads": ('x: R.Tensor(("n", 3, 4), "float32")', '("n", 2, 2, 3)', """
lv = R.matmul(x, R.const([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.25, 8.0], [2.0, 2.0, -2.0, 1.0], [0.0, 1.0, 3.0, -4.0]], "float32"))
lv1 = R.add(lv, R.const([0.5, -1.0, 2.0, 0.25], "float32"))
lv2 = R.reshape(lv1, R.shape([n, 3, 2, 2]))
lv3 = R.permute_dims(lv2, axes=(0, 2, 1, 3))
lv4 = R.reshape(lv3, R.shape([n * 2, 3, 2]))
lv5 = R.permute_dims(lv4, axes=(0, 2, 1))
lv6 = R.reshape(lv5, R.shape([n, 2, 2, 3]))
lv7 = R.multiply(R.const(0.5, "float32"), lv6)
return lv7
""", """
lv = R.matmul(x, R.const([[0.5, 1.0, 1.5, 2.0], [-0.5, 0.25, 0.125, 4.0], [1.0, 1.0, -1.0, 0.5], [0.0, 0.5, 1.5, -2.0]], "float32"))
lv1 = R.add(lv, R.const([0.25, -0.5, 1.0, 0.125], "float32"))
lv2 = R.reshape(lv1, R.shape([n, 3, 2, 2]))
lv7 = R.permute_dims(lv2, axes=(0, 2, 3, 1))
return lv7
"""),
    "scale_into_weight": ('x: R.Tensor(("n", 4), "float32")', '("n", 4)', """
lv = R.matmul(x, R.const([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.25, 8.0], [2.0, 2.0, -2.0, 1.0], [0.0, 1.0, 3.0, -4.0]], "float32"))
lv1 = R.multiply(lv, R.const([0.5], "float32"))
return lv1
""", """
lv = R.matmul(x, R.const([[0.5, 1.0, 1.5, 2.0], [-0.5, 0.25, 0.125, 4.0], [1.0, 1.0, -1.0, 0.5], [0.0, 0.5, 1.5, -2.0]], "float32"))
return lv
"""),
    "silu_sigmoid_first_and_shared": (X4, '("n", 2, 3, 4)', """
lv = R.sigmoid(x)
lv1 = R.multiply(lv, x)
lv2 = R.add(lv1, lv)
return lv2
""", """
lv = R.sigmoid(x)
lv1 = R.nn.silu(x)
lv2 = R.add(lv1, lv)
return lv2
"""),
}


@pytest.mark.parametrize("name", CASES)
def test_rewrites(name):
    params, ret, before, expected = CASES[name]
    mod, out = assert_rewrites(with_dce(simplify_algebra), program(params, ret, before), program(params, ret, expected))
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}], rtol=2e-6, atol=2e-6)


def test_integer_identities_and_multiplies():
    params = 'x: R.Tensor(("n", 3), "int32")'
    before = program(params, '("n", 3)', """
lv = R.multiply(x, R.const(3, "int32"))
lv1 = R.multiply(lv, R.const(5, "int32"))
lv2 = R.divide(lv1, R.const(1, "int32"))
lv3 = R.astype(lv2, dtype="int32")
return lv3
""").replace('"float32")', '"int32")')
    expected = program(params, '("n", 3)', """
lv = R.multiply(x, R.const(15, "int32"))
lv3 = lv
return lv3
""").replace('"float32")', '"int32")')
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 2}, {"n": 7}])


def test_what_is_kept_and_why():
    params = 'x: R.Tensor(("n", 1), "float32"), y: R.Tensor(("n", 4), "float32")'
    text = program(params, '("n", 4)', """
lv = R.add(x, R.const([0.0, 0.0, 0.0, 0.0], "float32"))
lv1 = R.multiply(y, R.const([1.0, 2.0, 1.0, 1.0], "float32"))
lv2 = R.astype(y, dtype="float16")
lv3 = R.astype(lv2, dtype="float32")
lv4 = R.multiply(y, R.const([2.0, 3.0, 4.0, 5.0], "float32"))
lv5 = R.multiply(lv4, R.const(2.0, "float32"))
lv6 = R.reshape(y, R.shape([4, n]))
lv7 = R.reshape(lv6, R.shape([n, 4]))
lv8 = R.add(lv, lv1)
lv9 = R.add(lv8, lv3)
lv10 = R.add(lv9, lv5)
lv11 = R.add(lv10, lv7)
return lv11
""")
    mod = parse(text)
    out = run_pass(with_dce(simplify_algebra), mod)
    # only the reshape pair goes: reshape(reshape(y, (4, n)), (n, 4)) is y
    assert ops_of(out) == ["add", "multiply", "astype", "astype", "multiply", "multiply",
                           "add", "add", "add", "add"]
    assert explain(mod, "remove_add_zero") == [
        ("lv", "the result's shape (n, 4) is not provably the shape (n, 1) of x (the op broadcasts)"),
        ("lv8", "the other operand lv1 is not a constant; and swapped: the other operand lv is not a constant"),
        ("lv9", "the other operand lv3 is not a constant; and swapped: the other operand lv8 is not a constant"),
        ("lv10", "the other operand lv5 is not a constant; and swapped: the other operand lv9 is not a constant"),
        ("lv11", "the other operand lv7 is not a constant; and swapped: the other operand lv10 is not a constant"),
    ]
    assert ("lv1", "constant of shape (4,) is not all 1") in explain(mod, "remove_multiply_one")
    assert explain(mod, "remove_identity_astype") == [("lv2", "it casts float32 to float16"),
                                                      ("lv3", "it casts float16 to float32")]
    assert ("lv5", "constant c1 has 4 elements, not one") in explain(mod, "merge_scalar_multiplies")
    assert_same_results(mod, out, [{"n": 2}, {"n": 5}])


def test_gelu_lookalikes_are_kept():
    params = 'x: R.Tensor(("n", 4), "float32"), y: R.Tensor(("n", 4), "float32")'
    text = program(params, '("n", 4)', """
lv = R.divide(x, R.const(1.5, "float32"))
lv1 = R.erf(lv)
lv2 = R.add(lv1, R.const(1.0, "float32"))
lv3 = R.multiply(x, lv2)
lv4 = R.multiply(lv3, R.const(0.5, "float32"))
lv5 = R.divide(y, R.const(1.4142135381698608, "float32"))
lv6 = R.erf(lv5)
lv7 = R.add(lv6, R.const(1.0, "float32"))
lv8 = R.multiply(x, lv7)
lv9 = R.multiply(lv8, R.const(0.5, "float32"))
lv10 = R.add(lv4, lv9)
return lv10
""")
    assert_unchanged(simplify_algebra, text)
    reasons = dict(explain(parse(text), "compose_gelu"))
    assert reasons["lv4"] == "the divisor 1.5 is not 1.414214"
    assert reasons["lv9"].startswith("x is x in one place and y in another")


def test_gelu_tanh_lookalikes_are_kept():
    params = 'x: R.Tensor(("n", 4), "float32"), y: R.Tensor(("n", 4), "float32")'
    text = program(params, '("n", 4)', """
lv = R.power(x, R.const(2.0, "float32"))
lv1 = R.multiply(lv, R.const(0.044714998453855515, "float32"))
lv2 = R.add(x, lv1)
lv3 = R.multiply(lv2, R.const(0.7978845834732056, "float32"))
lv4 = R.tanh(lv3)
lv5 = R.add(lv4, R.const(1.0, "float32"))
lv6 = R.multiply(x, lv5)
lv7 = R.multiply(lv6, R.const(0.5, "float32"))
lv8 = R.power(y, R.const(3.0, "float32"))
lv9 = R.multiply(lv8, R.const(0.05, "float32"))
lv10 = R.add(y, lv9)
lv11 = R.multiply(lv10, R.const(0.7978845834732056, "float32"))
lv12 = R.tanh(lv11)
lv13 = R.add(lv12, R.const(1.0, "float32"))
lv14 = R.multiply(y, lv13)
lv15 = R.multiply(lv14, R.const(0.5, "float32"))
lv16 = R.add(lv7, lv15)
lv17 = R.add(lv16, lv4)
return lv17
""")
    assert_unchanged(simplify_algebra, text)
    reasons = dict(explain(parse(text), "compose_gelu_tanh"))
    assert reasons["lv7"] == "the exponent 2.0 is not 3"
    assert reasons["lv15"] == "the cube's factor 0.05000000074505806 is not 0.044715"


def test_gelu_tanh_whose_tanh_is_used_elsewhere_is_kept():
    params = 'x: R.Tensor(("n", 4), "float32")'
    text = program(params, '("n", 4)', """
lv = R.power(x, R.const(3.0, "float32"))
lv1 = R.multiply(lv, R.const(0.044714998453855515, "float32"))
lv2 = R.add(x, lv1)
lv3 = R.multiply(lv2, R.const(0.7978845834732056, "float32"))
lv4 = R.tanh(lv3)
lv5 = R.add(lv4, R.const(1.0, "float32"))
lv6 = R.multiply(x, lv5)
lv7 = R.multiply(lv6, R.const(0.5, "float32"))
lv8 = R.add(lv7, lv4)
return lv8
""")
    assert_unchanged(simplify_algebra, text)
    assert dict(explain(parse(text), "compose_gelu_tanh"))["lv7"] == "the tanh lv4 is used twice"


def test_rules_are_documented():
    # the module points to the table; each rule says its own rewrite (what RULES.describe() prints)
    assert ":data:`RULES`" in sys.modules["relaxpack.passes.simplify_algebra"].__doc__
    for rule in RULES.rules:
        assert rule.summary, rule.name


def test_gpt_small_gelu_and_layout():
    mod = relaxpack.from_onnx(onnx.load(str(MODELS / "gpt_small.onnx")))
    out = run_pass(with_dce(simplify_algebra), mod)
    assert ops_of(out).count("nn.gelu") == 2 and "erf" not in ops_of(out)
    assert kernel_calls(out) == kernel_calls(mod) - 8
    rng = np.random.default_rng(0)
    vm_a, vm_b = (VirtualMachine(relaxpack.build(m, opt_level=0)) for m in (mod, out))
    for b, s in [(1, 3), (2, 9)]:
        ids = rng.integers(0, 128, (b, s))
        np.testing.assert_allclose(vm_b.run({"ids": ids})["logits"], vm_a.run({"ids": ids})["logits"],
                                   rtol=1e-5, atol=1e-5)


def test_permute_reshape_permute_is_kept_when_the_reshape_mixes_axes_or_a_value_is_shared():
    params = 'x: R.Tensor(("n", 4, 6), "float32")'
    text = program(params, '("n", 3, 8)', """
lv = R.permute_dims(x, axes=(0, 2, 1))
lv1 = R.reshape(lv, R.shape([n, 8, 3]))
lv2 = R.permute_dims(lv1, axes=(0, 2, 1))
return lv2
""")
    mod = parse(text)
    assert_unchanged(simplify_algebra, text)
    assert ("lv2", "the reshape does not only split or merge axes") in explain(mod, "fold_permute_reshape_permute")
    shared = program('x: R.Tensor(("n", 2, 3, 4), "float32")', '("n", 4, 6)', """
lv = R.permute_dims(x, axes=(0, 2, 1, 3))
lv1 = R.reshape(lv, R.shape([n, 6, 4]))
lv2 = R.permute_dims(lv1, axes=(0, 2, 1))
lv3 = R.reshape(lv1, R.shape([n, 4, 6]))
lv4 = R.add(lv2, lv3)
return lv4
""")
    assert ("lv2", "the reshape lv1 is used twice") in explain(parse(shared), "fold_permute_reshape_permute")


def test_silu_lookalikes_are_kept():
    text = program(f'{X4}, y: R.Tensor(("n", 2, 3, 4), "float32")', '("n", 2, 3, 4)', """
lv = R.sigmoid(y)
lv1 = R.multiply(x, lv)
lv2 = R.tanh(x)
lv3 = R.multiply(x, lv2)
lv4 = R.add(lv1, lv3)
return lv4
""")
    assert_unchanged(simplify_algebra, text)


def test_yolo_silu_becomes_one_kernel_with_its_conv():
    """YOLO's x * sigmoid(x) after each conv: nn.silu, then (full -O2) the
    conv's fused activation; the results agree with the unrewritten model."""
    from benchmarks.models import MODELS
    bench = MODELS["yolo_head"]("smoke")
    mod = relaxpack.from_onnx(bench.model, dims=bench.import_dims)
    out = run_pass(with_dce(simplify_algebra), mod)
    silus = ops_of(out).count("nn.silu")
    assert silus == ops_of(mod).count("sigmoid") - ops_of(out).count("sigmoid") > 0
    assert kernel_calls(out) == kernel_calls(mod) - silus
    plain, full = (relaxpack.build(mod, opt_level=level) for level in (0, 2))
    assert "silu" in full.as_text() and full.kernel_call_count() < plain.kernel_call_count() - silus
    feeds = bench.settings[0].feeds(0)
    want, got = (VirtualMachine(exe).run(feeds) for exe in (plain, full))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_relu_runs_before_the_rounding_to_float16():
    """relu(astype(x, float16)) of a float32 x -> astype(relu(x), float16): equal (up to the sign of a
    zero), the ReLU in float32; a cast of float16 to float32, and a cast used twice, are kept."""
    before = program(X4, '("n", 2, 3, 4)', """
lv = R.astype(x, dtype="float16")
lv1 = R.nn.relu(lv)
return lv1
""", dtype="float16")
    expected = program(X4, '("n", 2, 3, 4)', """
lv = R.nn.relu(x)
lv1 = R.astype(lv, dtype="float16")
return lv1
""", dtype="float16")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    x = np.concatenate([np.linspace(-3, 3, 20), [-1e-10, 1e-10, 65519.0, 7e4, np.nan]]).astype(np.float32)
    x = np.resize(x, (1, 2, 3, 4)).astype(np.float32)
    want, got = (VirtualMachine(relaxpack.build(m, opt_level=0)).run({"x": x})["lv1"] for m in (mod, out))
    np.testing.assert_array_equal(got, want)                       # -0.0 == 0.0 here
    assert_unchanged(simplify_algebra, program('x: R.Tensor(("n", 2, 3, 4), "float16")', '("n", 2, 3, 4)', """
lv = R.astype(x, dtype="float32")
lv1 = R.nn.relu(lv)
return lv1
"""))
    assert_unchanged(simplify_algebra, program(X4, '("n", 2, 3, 4)', """
lv = R.astype(x, dtype="float16")
lv1 = R.nn.relu(lv)
lv2 = R.add(lv, lv1)
return lv2
""", dtype="float16"))


def test_safe_softmax_lookalikes_are_kept():
    """The NaN guard of another value, a guard that writes 1, and a NaN test used twice stay."""
    params = 'x: R.Tensor(("n", 4), "float32"), y: R.Tensor(("n", 4), "float32")'
    text = program(params, '("n", 4)', """
lv = R.nn.softmax(x, axis=-1)
lv1 = R.isnan(y)
lv2 = R.where(lv1, R.const(0.0, "float32"), lv)
lv3 = R.isnan(lv)
lv4 = R.where(lv3, R.const(1.0, "float32"), lv)
lv5 = R.nn.softmax(y, axis=-1)
lv6 = R.isnan(lv5)
lv7 = R.where(lv6, R.const(0.0, "float32"), lv5)
lv8 = R.astype(lv6, dtype="float32")
lv9 = R.add(lv2, lv4)
lv10 = R.add(lv9, lv7)
lv11 = R.add(lv10, lv8)
return lv11
""")
    assert_unchanged(simplify_algebra, text)
    reasons = dict(explain(parse(text), "compose_safe_softmax"))
    assert reasons["lv2"] == "the NaN test reads y, not the softmax"
    assert reasons["lv4"] == "the value for NaN 1.0 is not all 0"
    assert reasons["lv7"].startswith("the NaN test lv6 is used twice")


def test_scales_that_do_not_fold_into_a_weight_are_kept():
    """A shared intermediate, a weight computed at run time and a factor per column keep their
    multiplies."""
    params = 'x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 4), "float32")'
    text = program(params, '("n", 4)', """
lv = R.matmul(x, R.const([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.25, 8.0], [2.0, 2.0, -2.0, 1.0], [0.0, 1.0, 3.0, -4.0]], "float32"))
lv1 = R.reshape(lv, R.shape([n, 2, 2]))
lv2 = R.multiply(lv1, R.const(0.5, "float32"))
lv3 = R.exp(lv1)
lv4 = R.matmul(x, w)
lv5 = R.multiply(lv4, R.const(0.5, "float32"))
lv6 = R.matmul(x, R.const([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.25, 8.0], [2.0, 2.0, -2.0, 1.0], [0.0, 1.0, 3.0, -4.0]], "float32"))
lv7 = R.multiply(lv6, R.const([1.0, 2.0, 3.0, 4.0], "float32"))
lv8 = R.add(lv2, lv3)
lv9 = R.reshape(lv8, R.shape([n, 4]))
lv10 = R.add(lv9, lv5)
lv11 = R.add(lv10, lv7)
return lv11
""")
    assert_unchanged(simplify_algebra, text)
    reasons = dict(explain(parse(text), "fold_scale_into_weight"))
    assert reasons["lv2"].startswith("the reshape before the scale is used 2 times")
    assert reasons["lv5"].startswith("the matmul's weight is not a constant matrix")
    assert reasons["lv7"].startswith("the factor has 4 elements")
