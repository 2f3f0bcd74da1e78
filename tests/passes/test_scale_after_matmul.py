"""SimplifyAlgebra's scale_after_matmul: a scalar factor on a matmul's operand moves to the product."""

from __future__ import annotations

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

QK = 'q: R.Tensor(("b", 2, "s", 16), "float32"), k: R.Tensor(("b", 2, 16, "t"), "float32")'
DIMS = ("b", "s", "t")
SIZES = [{"b": 1, "s": 1, "t": 3}, {"b": 2, "s": 5, "t": 5}, {"b": 1, "s": 0, "t": 2}]


def test_both_attention_scales_become_one_after_the_product():
    """(q * 0.5) @ (k * 0.5) -> (q @ k) * 0.25: powers of two, so bit for bit."""
    before = program(QK, '("b", 2, "s", "t")', """
qs = R.multiply(q, R.const(0.5, "float32"))
ks = R.multiply(R.const(0.5, "float32"), k)
out = R.matmul(qs, ks)
return out
""", dims=DIMS)
    expected = program(QK, '("b", 2, "s", "t")', """
lv = R.matmul(q, k, out_dtype=None)
out = R.multiply(lv, R.const(0.25, "float32"))
return out
""", dims=DIMS)
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, SIZES)


def test_one_scaled_operand_and_a_non_power_of_two():
    before = program(QK, '("b", 2, "s", "t")', """
ks = R.multiply(k, R.const(0.3535533905932738, "float32"))
out = R.matmul(q, ks)
return out
""", dims=DIMS)
    expected = program(QK, '("b", 2, "s", "t")', """
lv = R.matmul(q, k, out_dtype=None)
out = R.multiply(lv, R.const(0.3535533905932738, "float32"))
return out
""", dims=DIMS)
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, SIZES)      # within the tolerance of a reassociation


def test_factors_that_do_not_move():
    """A factor of several values, one that broadcasts the operand, a scaled operand used
    elsewhere, an integer product: unchanged, and why."""
    vector = program(QK + ', w: R.Tensor((16,), "float32")', '("b", 2, "s", "t")', """
qs = R.multiply(q, w)
out = R.matmul(qs, k)
return out
""", dims=DIMS)
    assert_unchanged(simplify_algebra, vector)
    assert dict(explain(parse(vector), "scale_after_matmul"))["out"] == \
        "neither operand is a scalar multiple used only here"
    broadcast = program('q: R.Tensor((3, 16), "float32"), k: R.Tensor((16, 4), "float32")', "(2, 3, 4)", """
qs = R.multiply(q, R.const([[[0.5]], [[0.5]]], "float32"))
out = R.matmul(qs, k)
return out
""", dims=())
    assert_unchanged(simplify_algebra, broadcast)
    shared = program(QK, '("b", 2, "s", "t")', """
qs = R.multiply(q, R.const(0.5, "float32"))
p = R.matmul(qs, k)
out = R.matmul(qs, k)
both = R.add(p, out)
return both
""", dims=DIMS)
    assert dict(explain(parse(shared), "scale_after_matmul"))["out"] == \
        "neither operand is a scalar multiple used only here"
    ints = program('q: R.Tensor((3, 4), "int32"), k: R.Tensor((4, 2), "int32")', "(3, 2)", """
qs = R.multiply(q, R.const(2, "int32"))
out = R.matmul(qs, k)
return out
""", dtype="int32", dims=())
    assert_unchanged(simplify_algebra, ints)


QK16 = QK.replace('"float32"', '"float16"')


def test_float16_powers_of_two_move_after_the_product():
    """GPT-2 float16's (q * 0.5) @ (k * 0.5): powers of two move (the same values but where q * 0.5
    was a float16 subnormal); a float16 factor that is no power of two stays (rounding q * c in
    float16 first is the model's value), and why."""
    before = program(QK16, '("b", 2, "s", "t")', """
qs = R.multiply(q, R.const(0.5, "float16"))
ks = R.multiply(R.const(0.5, "float16"), k)
out = R.matmul(qs, ks)
return out
""", "float16", dims=DIMS)
    expected = program(QK16, '("b", 2, "s", "t")', """
lv = R.matmul(q, k, out_dtype=None)
out = R.multiply(lv, R.const(0.25, "float16"))
return out
""", "float16", dims=DIMS)
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, SIZES)
    other = program(QK16, '("b", 2, "s", "t")', """
ks = R.multiply(k, R.const(0.3535, "float16"))
out = R.matmul(q, ks)
return out
""", "float16", dims=DIMS)
    assert_unchanged(simplify_algebra, other)
    assert dict(explain(parse(other), "scale_after_matmul"))["out"] == \
        "neither operand is a scalar multiple used only here (a power of two in float16)"


def test_a_dequantized_operand_keeps_a_factor_that_is_not_a_power_of_two():
    """DequantizeLinear's ``(q - z) * s`` on a matmul's operand: ``s`` stays before the product
    unless it is a power of two (a requantized product would turn the other rounding into a step)."""
    body = """
lv = R.astype(q, dtype="float32")
lv1 = R.subtract(lv, R.const(3.0, "float32"))
d = R.multiply(lv1, R.const(0.0123, "float32"))
out = R.matmul(d, w)
return out
"""
    params = 'q: R.Tensor(("n", 8), "uint8"), w: R.Tensor((8, 4), "float32")'
    dequantized = program(params, '("n", 4)', body)
    assert_unchanged(simplify_algebra, dequantized)
    assert dict(explain(parse(dequantized), "scale_after_matmul"))["out"] == \
        "the factors scale integers (dequantized operands) and are not powers of two"
    rounded = program('x: R.Tensor(("n", 8), "float32"), w: R.Tensor((8, 4), "float32")', '("n", 4)', """
lv = R.round(x)
lv1 = R.clip(lv, min=-128.0, max=127.0)
d = R.multiply(lv1, R.const(0.0123, "float32"))
out = R.matmul(d, w)
return out
""")
    assert_unchanged(simplify_algebra, rounded)
    halved = program(params, '("n", 4)', body.replace("0.0123", "0.5"))
    expected = program(params, '("n", 4)', """
lv = R.astype(q, dtype="float32")
lv1 = R.subtract(lv, R.const(3.0, "float32"))
lv2 = R.matmul(lv1, w, out_dtype=None)
out = R.multiply(lv2, R.const(0.5, "float32"))
return out
""")
    mod, out = assert_rewrites(with_dce(simplify_algebra), halved, expected)
    assert_same_results(mod, out, [{"n": 3}, {"n": 0}])
    # a clip at bounds that are not whole numbers does not keep integers: the factor moves
    fractional = rounded.replace("min=-128.0, max=127.0", "min=-0.5, max=127.0")
    assert "out" not in dict(explain(parse(fractional), "scale_after_matmul"))


def test_requantized_sibling_projections_give_the_same_bits_at_o0_and_o2():
    """Two projections of one dequantized activation, each requantized (a QDQ model's MLP), at
    scales that put every product on a QuantizeLinear tie: -O2 merges the products, so the
    dequantizing multiply has one use, and must still scale before the product as -O0 does
    (moving it after turned ties into steps: llama's gate/up projections, quantize_static QDQ)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import relaxpack
    from relaxpack.runtime import VirtualMachine

    rng = np.random.default_rng(0)
    consts = {"xs": np.float32(0.1), "xz": np.int8(0), "ws": np.float32(1.0), "wz": np.int8(0),
              "ys": np.float32(0.2), "yz": np.int8(0)}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])]
    for i in range(2):
        inits.append(numpy_helper.from_array(rng.integers(-9, 10, (15, 8)).astype(np.int8), f"w{i}"))
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", "ws", "wz"], [f"wd{i}"]),
                  helper.make_node("MatMul", ["xd", f"wd{i}"], [f"p{i}"]),
                  helper.make_node("QuantizeLinear", [f"p{i}", "ys", "yz"], [f"q{i}"])]
    graph = helper.make_graph(nodes, "siblings", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 15])],
                              [helper.make_tensor_value_info(f"q{i}", TensorProto.INT8, ["n", 8]) for i in range(2)],
                              inits)
    module = relaxpack.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    x = (rng.integers(-20, 21, (64, 15)) * np.float32(0.1)).astype(np.float32)
    runs = [VirtualMachine(relaxpack.build(module, opt_level=level)).run({"x": x}) for level in (0, 2)]
    for name in ("q0", "q1"):
        np.testing.assert_array_equal(runs[1][name], runs[0][name])
